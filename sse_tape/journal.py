"""What happened to each request.

Every step of answering a request is a typed journal entry, and every kind of
entry is here: it was received; a recording matched it, or nothing did and
why; a fault was injected and what it did; another responder answered it (the
model list, a background response); it was forwarded upstream, or the
upstream failed; its answer was recorded, or could not be saved; a model
synthesized it; its stream ended, how, after how many bytes and events and
how long. The log lines, the `--report` file (JSON lines), the control
endpoint (`GET /__sse_tape__/journal`) and the pytest plugin are all views of
one `Journal`. What replay counts between requests is in `state`.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import IO, Any, ClassVar

from . import _json
from ._exceptions import ConfigError, StateError
from .cassette import End

__all__ = [
    "Answered",
    "Ended",
    "Entry",
    "FaultInjected",
    "Forwarded",
    "Journal",
    "Matched",
    "Miss",
    "Missed",
    "Received",
    "Recorded",
    "SaveFailed",
    "Synthesized",
    "UpstreamFailed",
    "WritingAnew",
]


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}  # each kind of entry's fields, by name, looked up once


def _field_names(kind: type) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(kind)
    if names is None:
        names = _FIELD_NAMES[kind] = tuple(f.name for f in fields(kind))
    return names


@dataclass(slots=True, kw_only=True)
class Entry:
    """One step of answering request number `request` (counted from 1 since the server started).

    An entry is written once, as it happens, and only read after: read it, do not change it. It is not a
    frozen dataclass, unlike this codebase's other values, because building one is on every request's way
    (three entries each), and a frozen one's `__init__` sets each field through `object.__setattr__`: its
    cost is in docs/benchmarks.md (what each part of an answer costs). Nor is it hashable."""

    kind: ClassVar[str] = "entry"
    request: int
    time: float = field(default_factory=time.time)
    """When it happened, in Unix seconds."""

    def to_json(self) -> dict[str, Any]:
        """The entry as a JSON object whose `type` names its kind. Its values are the entry's own, not copies:
        every field holds plain, immutable values (`asdict` would copy each deeply, a shared journal's cost)."""
        found: dict[str, Any] = {"type": self.kind}
        for name in _field_names(type(self)):
            found[name] = getattr(self, name)
        return found

    def line(self) -> str | None:
        """The log line for this entry, or None when it is not logged."""
        return None


@dataclass(slots=True, kw_only=True)
class Received(Entry):
    """A request arrived."""

    kind: ClassVar[str] = "received"
    method: str
    path: str
    query: str = ""


@dataclass(slots=True, kw_only=True)
class Matched(Entry):
    """A recording answers the request."""

    kind: ClassVar[str] = "matched"
    method: str
    path: str
    recording: str
    status: int
    converted: str | None = None
    """How the recording was reshaped for the request (see `shape`): `as JSON`, `as a stream`,
    `without usage`, or None."""
    resumed: str | None = None
    """Where a reconnection (a request with `Last-Event-ID`) resumed the stream: `after event id '5'`,
    `from the start: ...` for an id the stream never set, or `as recorded after event id '5'` for a recording
    of that very reconnection; None for a request that is no reconnection."""
    kept: str | None = None
    """What a protocol's responder kept of the answer (`Incoming.keep`), in its words: `in the background as
    resp_1` (the Responses API's background mode); None for an answer none kept."""

    def line(self) -> str:
        converted = f" {self.converted}" if self.converted else ""
        resumed = f", resumed {self.resumed}" if self.resumed else ""
        kept = f", {self.kept}" if self.kept else ""
        return f"{self.method} {self.path} -> {self.status} {self.recording}{converted}{resumed}{kept}"


@dataclass(slots=True, kw_only=True)
class Ended(Entry):
    """The response is over: how it ended, after how many bytes and events, and how long after it arrived."""

    kind: ClassVar[str] = "ended"
    method: str
    path: str
    status: int
    end: End
    bytes: int
    events: int
    seconds: float

    def line(self) -> str:
        events = f"{self.events} event{'s'[: self.events != 1]}"
        return f"{self.method} {self.path} ended: {self.status}, {events}, {self.bytes} bytes, {self.seconds:.2f} s, {self.end}"


# Beyond replay: a miss, an injected fault, another responder's answer.


@dataclass(slots=True, kw_only=True)
class Answered(Entry):
    """A responder other than replay and forwarding answered the request (the model list, say): `what` it said."""

    kind: ClassVar[str] = "answered"
    method: str
    path: str
    status: int
    what: str

    def line(self) -> str:
        return f"{self.method} {self.path} -> {self.status} {self.what}"


@dataclass(slots=True, kw_only=True)
class Missed(Entry):
    """Nothing answered the request; `reason` names the closest recordings and how each differs."""

    kind: ClassVar[str] = "missed"
    method: str
    path: str
    status: int
    reason: str

    def line(self) -> str:
        return f"{self.method} {self.path} -> {self.status} {self.reason}"


@dataclass(slots=True, kw_only=True)
class FaultInjected(Entry):
    """A fault changed the response: which one, and what it did."""

    kind: ClassVar[str] = "fault"
    method: str
    path: str
    fault: str
    what: str
    recording: str | None = None

    def line(self) -> str:
        return f"fault {self.fault}: {self.what} -> {self.method} {self.path} (request {self.request})"


# Forwarding to an upstream, and recording.


@dataclass(slots=True, kw_only=True)
class Forwarded(Entry):
    """The request went to the upstream, and its response head came back."""

    kind: ClassVar[str] = "forwarded"
    method: str
    path: str
    url: str
    status: int
    last_event_id: str | None = None
    """The `Last-Event-ID` of a reconnection, which the upstream resumes as it does (a recorder resumes
    nothing itself: see `matching`); None for a request that is no reconnection."""

    def line(self) -> str:
        resumed = (
            f", a reconnection after event id {self.last_event_id!r}: the upstream resumes it"
            if self.last_event_id is not None
            else ""
        )
        return f"{self.method} {self.path} -> {self.status} from {self.url}{resumed}"


@dataclass(slots=True, kw_only=True)
class UpstreamFailed(Entry):
    """The upstream sent no response: the client got a 502."""

    kind: ClassVar[str] = "upstream-failed"
    method: str
    path: str
    reason: str

    def line(self) -> str:
        return f"{self.method} {self.path} -> 502 {self.reason}"


@dataclass(slots=True, kw_only=True)
class Recorded(Entry):
    """The interaction is on the disk (synced), in the recorder's spool: the cassette's interaction number
    `index` once the recorder stops and writes it there (or a load reads the spool a killed recorder left);
    or, with `spooled` false, in the cassette itself, written at the stop after the spool could not take it."""

    kind: ClassVar[str] = "recorded"
    method: str
    path: str
    cassette: str
    index: int
    end: End
    replaced: tuple[End, ...] = ()
    """How each recording it took the place of ended (streams of the same request cut short, recorded again
    whole); none: it is new."""
    spooled: bool = True

    def line(self) -> str:
        how = str(self.end)
        if self.replaced:
            ones = "one" if len(self.replaced) == 1 else str(len(self.replaced))
            how += f", in place of {ones} that ended {', '.join(dict.fromkeys(self.replaced))}"
        where = f"the spool of {self.cassette}" if self.spooled else self.cassette
        return f"{self.method} {self.path} recorded in {where} as #{self.index} ({how})"


@dataclass(slots=True, kw_only=True)
class SaveFailed(Entry):
    """What was recorded could not be saved (`what`: a stream, or the session's streams), and why."""

    kind: ClassVar[str] = "save-failed"
    cassette: str
    reason: str
    what: str = "an interaction"

    def line(self) -> str:
        return f"could not save {self.what} to {self.cassette}: {self.reason}"


@dataclass(slots=True, kw_only=True)
class WritingAnew(Entry):
    """A recorder's stop writes its cassette anew (whole answers take the place of streams cut short), which
    takes a while for a big one: said when it starts (`seconds` None) and when it is done."""

    kind: ClassVar[str] = "writing-anew"
    cassette: str
    size: int
    """The file's size before, in bytes."""
    replaced: int
    """The streams cut short that whole answers take the place of."""
    seconds: float | None = None
    """How long the write took, once it is done."""

    def line(self) -> str:
        if self.seconds is not None:
            return f"wrote {self.cassette} anew in {self.seconds:.1f} s"
        size = f"{self.size / 1e6:.0f} MB" if self.size >= 10e6 else f"{self.size / 1e6:.1f} MB"
        whole = "a whole answer replaces" if self.replaced == 1 else "whole answers replace"
        cut = f"{self.replaced} stream{'s'[: self.replaced != 1]} cut short"
        return f"writing {size} cassette {self.cassette} anew ({whole} {cut}) ..."


# Synthesis.


@dataclass(slots=True, kw_only=True)
class Synthesized(Entry):
    """A local model answered the request: its wait in the model's queue, its tokens and their speed."""

    kind: ClassVar[str] = "synthesized"
    method: str
    path: str
    model: str
    status: int
    waited: float
    """Seconds from the request's arrival until the model took it up."""
    prompt_tokens: int
    output_tokens: int
    first_token: float | None
    """Seconds from the request's arrival to the first output token."""
    tokens_per_second: float | None
    end: str
    """`stop`, `length`, `tool_calls`, `cancelled` (the client left) or `error`."""

    def line(self) -> str:
        speed = f", {self.tokens_per_second:g} tokens/s" if self.tokens_per_second else ""
        return (
            f"{self.method} {self.path} -> {self.status} from {self.model}: waited {self.waited:.2f} s, "
            f"{self.prompt_tokens} + {self.output_tokens} tokens{speed}, {self.end}"
        )


class Journal:
    """Every entry of a server's requests, newest last.

    It keeps the last `keep` entries in memory and counts every entry by its
    kind; `log` gets the line of each logged entry as it is added; `report`
    (a file) gets every entry as one JSON line; `share` (a store several
    servers share: `ReplayStore.add_entries`) gets them as JSON objects, a
    batch at a time: those added on an event loop within `SHARE_AFTER`
    seconds go together, as do those before a `flush`.
    """

    SHARE_AFTER: ClassVar[float] = 0.02
    """How long entries wait to be shared with others added meanwhile."""

    def __init__(
        self,
        *,
        keep: int = 10_000,
        log: Callable[[str], None] | None = None,
        report: str | Path | None = None,
        shown_path: Callable[[str], str] | None = None,
        share: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> None:
        self.shown_path = shown_path
        """What an entry's path is shown as (its credentials redacted); None: as it is."""
        self.entries: deque[Entry] = deque(maxlen=keep)
        self.counts: Counter[str] = Counter()
        """How many entries of each kind were added (also those no longer kept)."""
        self.log = log
        self._share = share
        self._unshared: list[dict[str, Any]] = []  # entries waiting for a flush
        self._flushing: asyncio.TimerHandle | None = None
        self._lost = 0  # entries that could not be shared since the store started failing (none: it answers)
        self.report_path = Path(report) if report is not None else None
        self._report: IO[str] | None = None
        if self.report_path is not None:
            try:
                self._report = self.report_path.open("a", encoding="utf-8")
            except OSError as exc:
                raise ConfigError(f"--report {self.report_path}: cannot write: {exc.strerror or exc}") from None

    def add(self, entry: Entry) -> None:
        """Record an entry, its path as `shown_path` shows it, and pass it on to the log and the report."""
        path = getattr(entry, "path", None)
        if self.shown_path is not None and isinstance(path, str) and (shown := self.shown_path(path)) != path:
            entry = replace(entry, path=shown)  # type: ignore[call-arg]
        self.entries.append(entry)
        self.counts[entry.kind] += 1
        if self._share is not None:
            self._unshared.append(entry.to_json())
            if self._flushing is None:
                try:
                    self._flushing = asyncio.get_running_loop().call_later(self.SHARE_AFTER, self.flush)
                except RuntimeError:  # no event loop here: at once
                    self.flush()
        if self.log is not None and (line := entry.line()) is not None:
            self.log(line)
        if self._report is not None:
            try:
                self._report.write(_json.dumps(entry.to_json(), compact=False) + "\n")
                self._report.flush()
            except OSError as exc:
                if self.log is not None:
                    self.log(f"could not write the report {self.report_path}: {exc.strerror or exc}")

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def last(self, limit: int | None = None) -> list[Entry]:
        """The newest `limit` entries (all kept, if None), newest last."""
        entries = list(self.entries)
        return entries if limit is None else entries[max(len(entries) - limit, 0) :]

    def flush(self) -> None:
        """Share the entries not shared yet (see `share`) now. Where the store fails, they are lost: one log line
        when it starts failing, and one, with how many were lost, when it answers again."""
        if self._flushing is not None:
            self._flushing.cancel()
            self._flushing = None
        unshared, self._unshared = self._unshared, []
        if unshared and self._share is not None:
            try:
                self._share(unshared)
            except StateError as exc:  # said once, when the store starts failing; counted until it is back
                if not self._lost and self.log is not None:
                    self.log(f"could not share journal entries, until the replay state answers again: {exc}")
                self._lost += len(unshared)
                return
            if self._lost:
                if self.log is not None:
                    self.log(f"sharing journal entries again: {self._lost} could not be shared meanwhile")
                self._lost = 0

    def clear(self) -> None:
        """Forget the entries and their counts, and those not shared yet (the report keeps what it has)."""
        self.entries.clear()
        self.counts.clear()
        self._unshared.clear()

    def close(self) -> None:
        """Share what is left to share, and close the report file."""
        self.flush()
        if self._report is not None:
            self._report.close()
            self._report = None


@dataclass(frozen=True, slots=True)
class Miss:
    """A request nothing answered, and why."""

    request: int
    method: str
    path: str
    reason: str
