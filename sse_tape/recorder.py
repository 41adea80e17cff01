"""Recording: what a responder streams (an upstream's answer, a model's) kept in a cassette, losing none of it.

The live pipeline (`live`) fills a `Capture` as an answer streams and hands
it to the server's `Recorder` (`begin`, `received`, `injected`, `keep`). The
`Recorder` writes each chunk to the session's spool before the client gets
it, adds each interaction to the running matcher as soon as it ends (so an
identical request later in the session replays it), and writes the
session's interactions into the cassette file only when the server stops:
appended, or, when a whole answer took the place of a stream cut short,
with the file written anew. Until then the spool alone holds them, and no
other reader of the cassette sees them. A crash loses nothing the spool
holds: the next load of the cassette reads it; a stop saves the streams in
flight as far as they got.

It lies below the responders and the live pipeline, which name it: of the
server it knows only what `Session` says.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from ._exceptions import CassetteError
from .cassette import (
    Cassette,
    Chunk,
    End,
    Headers,
    Injection,
    Interaction,
    Recording,
    Request,
    Response,
    check_cassette_path,
    storable_headers,
)
from .cassette.spools import SpooledStream, SpoolWriter
from .journal import Journal, Recorded, SaveFailed, WritingAnew
from .matching import CUT_SHORT, Matcher
from .redaction import Redaction

__all__ = ["Capture", "Recorder", "Session"]

# A cassette this big or bigger takes a moment to write anew: the stop says when it starts and ends.
_SAY_WRITING_ANEW = 1_000_000


class Session(Protocol):
    """What a recorder uses of the server it records for (a `responder.Host` is one)."""

    @property
    def journal(self) -> Journal:
        """Where it says what it recorded, and what it could not save."""
        ...

    @property
    def matcher(self) -> Matcher:
        """What each answer it records joins, so that the same request later in the session replays it."""
        ...

    def settled(self) -> None:
        """A stream it was recording is over: the server may be idle now."""
        ...


@dataclass(slots=True)
class Capture:
    """A response being recorded while it streams; what it holds so far survives any interruption.

    A responder that makes answers (a model) fills one as it streams and hands it to `Recorder.begin`,
    `received` and `keep`, as the forwarder does.
    """

    request: Request
    recorded_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    status: int | None = None
    headers: Headers = ()
    chunks: list[Chunk] = field(default_factory=list)
    end: End = End.INTERRUPTED
    duration: float = 0.0
    spool: int | None = None
    """The stream's number in the recorder's spool, once it is spooled."""
    injected: list[Injection] = field(default_factory=list)
    """The faults that acted on the client's copy of the stream."""
    held: bool = False
    """A stream the server holds open as its own (`Protocol.holds`): not in flight, for waiting until idle."""
    stored: Request | None = None
    """The request as it is recorded (`Recorder.storable`: secrets redacted), worked out once: before a forwarded
    request is sent (a large body's in a thread), else when its stream is spooled."""

    def interaction(self) -> Interaction | None:
        """The interaction so far; None if no response head ever came."""
        if self.status is None:
            return None
        ended_late = self.end is not End.COMPLETE
        response = Response(
            self.status, self.headers, tuple(self.chunks), self.end, self.duration if ended_late else None
        )
        return Interaction(self.request, response, self.recorded_at, tuple(self.injected))


class Recorder:
    """Records what a responder streams into a cassette, secrets redacted, and loses none of it.

    Each stream goes to a spool beside the cassette as it arrives, before the
    client gets it (see `cassette.spools`): a killed recorder leaves every byte a client
    saw on disk. An interaction is on the disk before it is reported
    recorded. When the session ends, what was recorded is appended to the
    cassette, at a cost that does not grow with the cassette (unless it
    takes the place of a recording cut short: then the file is written
    anew), and the spool is removed. With `playable`, what is recorded joins the server's matcher
    at once, so an identical request later in the session replays it; and a
    whole answer takes the place of every recording of the same request that
    was cut short on the recording side (see `matching.CUT_SHORT`), in this
    session or before: the first one's place, the others removed, so that no
    replay gets a copy cut short of a request the upstream answered whole
    (a retry cut short again, a request made twice, leaves several). The
    cut-off recordings stay in the cassette until the whole one is written
    there; the spool notes which ones the whole answer replaces (their
    fingerprints), so that the load after a kill puts it there too.
    """

    def __init__(
        self, cassette: Cassette | str | os.PathLike[str], redaction: Redaction | None = None, *, playable: bool = True
    ) -> None:
        if not isinstance(cassette, Cassette):
            cassette = Cassette(path=check_cassette_path(cassette))
        if cassette.path is None:
            raise CassetteError("the recorder needs a cassette with a path")
        self.cassette = cassette
        """The cassette appended to when the session ends."""
        self.path = cassette.path
        self.redaction = redaction or Redaction()
        self.playable = playable
        self.ends: Counter[End] = Counter()
        """The interactions recorded, by how each ended."""
        self.recorded: list[Interaction] = []
        """What this session recorded, in the order the streams ended (but for those in `replacing`)."""
        self.replacing: list[tuple[tuple[Interaction, ...], Interaction]] = []
        """Recordings of one request the cassette held that were cut short, each group with the whole answer
        that takes the first one's place."""
        self.replaced = 0
        """Whole answers that took the place of recordings cut short, in the cassette or this session."""
        self.displaced = 0
        """The recordings cut short whose place they took, or that went with those (of the same request)."""
        self.lost = 0
        """Streams the stop could save neither in the cassette nor in the spool: lost."""
        self.kept_in: str | None = None
        """Where the session's streams are when the stop could not write the cassette: its spool."""
        self.in_flight = 0
        """Streams being recorded now: their response head came, and they are not over."""
        self._server: Session | None = None
        self._spool: SpoolWriter | None = None
        self._streams = 0
        self._syncing: set[asyncio.Future[None]] = set()
        # One sync at a time, for every stream that ended before it began: the system says a failed write-back
        # once, to one sync, so a later one that succeeds does not vouch for what was written before it failed.
        self._sync_turn = asyncio.Lock()
        self._unsynced: list[tuple[Capture, _Ended]] = []
        self._failed_syncs = 0
        self._eras: dict[int, int] = {}  # by stream: the failed syncs before its first byte was written
        # Streams the spool could not take (a full disk), by number: kept in memory, written whole when it can.
        self._held: dict[int, _Held] = {}
        self._why: str | None = None  # why the last write failed
        # The numbers of the cassette's recordings cut short that go with no answer in their place.
        self._removed: list[int] = []

    async def start(self, server: Session) -> None:
        """Open the spool: a folder that cannot be written is an error now, before anything is recorded."""
        self._server = server
        self._spool = SpoolWriter(self.path)

    async def close(self) -> None:
        """Append what was recorded to the cassette, then remove the spool (kept if the append fails).

        Streams the spool could not take are tried there once more first; those neither the cassette nor the
        spool can take are counted in `lost`.
        """
        if self._syncing:
            await asyncio.gather(*self._syncing, return_exceptions=True)
        self._retry()
        if self._syncing:
            await asyncio.gather(*self._syncing, return_exceptions=True)
        spool, self._spool = self._spool, None
        if spool is None:
            return
        anew = self._writing_anew()
        try:
            # The spool is removed inside the cassette's lock, while this still holds the spool's own:
            # no reader ever sees the interactions in both.
            await asyncio.to_thread(self.cassette.append, self.recorded, spool=spool.path, replacing=self.replacing)
            if anew is not None:
                said, began = anew
                self._journal_entry(replace(said, seconds=time.monotonic() - began, time=time.time()))
        except CassetteError as exc:
            self.lost = sum(held.ended is not None for held in self._held.values())
            self.kept_in = str(spool.path)
            kept = len(self.recorded) + len(self.replacing) - self.lost
            reason = f"{_reason(exc)}; "
            if self.lost:
                reason += f"{self.lost} stream{'s'[: self.lost != 1]} not saved"
                reason += (
                    f"; the other {kept} are in {spool.path}"
                    if kept
                    else f" (the part of it that {spool.path} holds loads with the cassette)"
                )
            else:
                reason += f"the session's {kept} streams are in {spool.path}"
            if kept:
                reason += ", which loads with the cassette until a write of it takes them in"
            self._failed(None, reason, what="the session's streams")
        else:
            for held in self._held.values():  # in the cassette now, from memory
                if held.ended is not None:
                    self._journal(held.ended, spooled=False)
        finally:
            self._held.clear()
            spool.close(remove=False)

    def _writing_anew(self) -> tuple[WritingAnew, float] | None:
        """Say that the stop writes a big cassette anew, which takes a while: the entry said, and when (on the
        monotonic clock); None when it does not, or the file is small."""
        try:
            size = self.path.stat().st_size
        except OSError:
            return None
        if not self.replacing or size < _SAY_WRITING_ANEW:
            return None
        replaced = sum(len(olds) for olds, _ in self.replacing)
        said = WritingAnew(request=0, cassette=str(self.path), size=size, replaced=replaced)
        self._journal_entry(said)
        return said, time.monotonic()

    def _journal_entry(self, entry: WritingAnew) -> None:
        assert self._server is not None
        self._server.journal.add(entry)

    @property
    def _folder(self) -> Path:
        return self.path.absolute().parent

    def unsaved(self) -> str | None:
        """After `close`: one line saying what was not saved in the cassette and where the rest is; None when
        everything was."""
        if self.kept_in is None:
            return None
        folder = self._folder
        if self.lost:
            streams = f"{self.lost} stream{'s'[: self.lost != 1]}"
            return (
                f"{streams} recorded in this session {'were' if self.lost != 1 else 'was'} not saved ({self._why}): "
                f"free space in {folder} and "
                f"record {'them' if self.lost != 1 else 'it'} again; what was saved is in {self.kept_in}, "
                f"which loads with {self.path}"
            )
        return (
            f"{self.path} could not be written ({self._why}); the session's streams are in {self.kept_in}, which "
            f"loads with it: free space in {folder}, and its next write takes them in"
        )

    def begin(self, capture: Capture) -> None:
        """A stream's response head came: spool its request and head."""
        self._retry()
        self._streams += 1
        self.in_flight += not capture.held
        capture.spool = self._streams
        self._eras[capture.spool] = self._failed_syncs
        request = capture.stored = capture.stored or self.storable(capture.request)
        headers = self._storable_response(Response(capture.status or 0, capture.headers)).headers

        def write(spool: SpoolWriter, n: int) -> None:
            r = request
            spool.start(n, capture.recorded_at, r.method, r.path, r.query, list(r.headers), r.body)
            spool.head(n, capture.status or 0, list(headers))
            for note in capture.injected:
                spool.fault(n, note.fault, note.what)

        self._spooled(write, capture)

    def received(self, capture: Capture, chunk: Chunk) -> None:
        """A piece of a stream's body came: spool it."""
        self._spooled(lambda spool, n: spool.chunk(n, chunk.t, chunk.data), capture)

    def injected(self, capture: Capture, note: Injection) -> None:
        """A fault acted on what the stream's client got: note it (the recording keeps what the upstream sent)."""
        capture.injected.append(note)
        self._spooled(lambda spool, n: spool.fault(n, note.fault, note.what), capture)

    def keep(self, capture: Capture, number: int) -> None:
        """The stream of request `number` is over: record it as far as it got."""
        server = self._server
        assert server is not None, "start() the recorder first"
        interaction = capture.interaction()
        if interaction is None:
            return  # no response head, nothing to record
        self.in_flight -= not capture.held
        server.settled()  # whoever waits for the server to be idle resumes once this is done
        end = interaction.response.end
        cuts = self._cut_short(capture.request) if self.playable and end is End.COMPLETE else []
        # In the spool before the stream's end: a killed session's whole answer takes their place too. The
        # first comes last, where a reader that knows of one such record per stream (an older one) takes it.
        fingerprints = [cut.interaction.fingerprint() for cut in reversed(cuts)]
        if fingerprints:

            def replaces(spool: SpoolWriter, n: int) -> None:
                for fingerprint in fingerprints:
                    spool.replaces(n, fingerprint)

            self._spooled(replaces, capture)
        self._spooled(lambda spool, n: spool.end(n, str(end), capture.duration), capture)
        request = capture.stored or self.storable(interaction.request)
        response = self._storable_response(interaction.response)
        interaction = replace(interaction, request=request, response=response)
        self.ends[interaction.response.end] += 1
        if cuts:
            index = self._replace(cuts, interaction)
        else:
            self.recorded.append(interaction)
            index = len(self.cassette) - len(self._removed) + len(self.recorded)
        if self.playable and (end is End.COMPLETE or end in CUT_SHORT):
            # Only a whole answer replays: the matcher leaves one cut short unanswered, for the upstream to
            # answer a retry whole (and that answer to take its place).
            server.matcher.add(interaction, self.cassette, index)
        ended = _Ended(interaction, number, index, tuple(cut.interaction.response.end for cut in cuts), fingerprints)
        held = self._held.get(capture.spool or 0)
        if held is not None:  # said already; written whole when the spool has room
            held.ended = ended
            self._retry()
        else:
            self._report(capture, ended)

    def _report(self, capture: Capture, ended: _Ended) -> None:
        """Journal the stream recorded once the spool that holds it is synced."""
        syncing = asyncio.ensure_future(self._synced(capture, ended))
        self._syncing.add(syncing)
        syncing.add_done_callback(self._syncing.discard)

    def _cut_short(self, request: Request) -> list[Recording]:
        """The recordings of `request` cut short, in this cassette then this session, that no whole answer
        has taken the place of yet."""
        assert self._server is not None
        found = self._server.matcher.cut_short(request)
        if not found:
            return []
        taken = {id(old) for olds, _ in self.replacing for old in olds}
        ours = {id(i) for i in (*self.cassette.interactions, *self.recorded) if id(i) not in taken}
        return [r for r in found if id(r.interaction) in ours]

    def _replace(self, cuts: list[Recording], interaction: Interaction) -> int:
        """Put `interaction` in the place of the first of `cuts` (recordings of its request cut short, the
        cassette's first), and take the others out; returns its number in the cassette."""
        self.replaced += 1
        self.displaced += len(cuts)
        olds = {id(cut.interaction) for cut in cuts}
        ours = [n for n, recorded in enumerate(self.recorded) if id(recorded) in olds]
        for n in ours:  # recorded in this session: no longer what was recorded
            self.ends[self.recorded[n].response.end] -= 1
        held = [cut for cut in cuts if not any(cut.interaction is self.recorded[n] for n in ours)]
        if held:  # the cassette's: the whole answer goes there when the cassette is written
            for n in reversed(ours):
                del self.recorded[n]
            self.replacing.append((tuple(cut.interaction for cut in held), interaction))
            self._removed += [cut.index for cut in held[1:]]
            return held[0].index - sum(removed < held[0].index for removed in self._removed)
        first, *rest = ours
        self.recorded[first] = interaction
        for n in reversed(rest):
            del self.recorded[n]
        return len(self.cassette) - len(self._removed) + first + 1

    async def _synced(self, capture: Capture, ended: _Ended) -> None:
        self._unsynced.append((capture, ended))
        async with self._sync_turn:
            spool = self._spool
            batch, self._unsynced = self._unsynced, []
            if spool is None or not batch:
                return  # stopped meanwhile (the stop wrote it in the cassette, or said it could not), or synced
            try:
                await asyncio.to_thread(spool.sync)
            except OSError as exc:  # not known to be on the disk: kept in memory, and written again
                self._failed_syncs += 1
                for capture, ended in batch:
                    self._hold(capture, f"{spool.path}: cannot write: {exc.strerror or exc}").ended = ended
                return
            for capture, ended in batch:
                assert capture.spool is not None
                if self._eras.pop(capture.spool, None) != self._failed_syncs:
                    # A sync failed after its first bytes were written: they may be lost, though this one succeeded.
                    self._hold(capture, f"{spool.path}: a write-back failed while it was written").ended = ended
                else:
                    self._journal(ended, spooled=True)

    def _journal(self, ended: _Ended, *, spooled: bool) -> None:
        assert self._server is not None
        request = ended.interaction.request
        self._server.journal.add(
            Recorded(
                request=ended.number,
                method=request.method,
                path=request.path,
                cassette=str(self.path),
                index=ended.index,
                end=ended.interaction.response.end,
                replaced=ended.replaced,
                spooled=spooled,
            )
        )

    def storable(self, request: Request) -> Request:
        """The request as it is recorded: secrets redacted, headers as text; its body parsed already, for the
        matcher that replays it."""
        stored = self.redaction.request(replace(request, headers=storable_headers(request.headers)))
        if stored.body is request.body:  # nothing redacted in it: its value is the request's (parsed once)
            return stored.with_json(stored.path, stored.body, request.json())
        stored.json()
        return stored

    def _storable_response(self, response: Response) -> Response:
        """The response as it is recorded: secrets redacted, headers as text that can be sent again."""
        return self.redaction.response(replace(response, headers=storable_headers(response.headers)))

    def _spooled(self, write: Callable[[SpoolWriter, int], object], capture: Capture) -> None:
        spool = self._spool
        if spool is None or capture.spool is None or capture.spool in self._held:
            return  # a stream the spool could not take is kept in memory, and written whole later
        try:
            write(spool, capture.spool)
        except CassetteError as exc:  # a full disk, say
            self._hold(capture, str(exc))

    def _hold(self, capture: Capture, reason: str) -> _Held:
        """Keep a stream the spool could not take in memory, to write it whole when there is room; say so once."""
        assert capture.spool is not None
        held = self._held.get(capture.spool)
        if held is None:
            held = self._held[capture.spool] = _Held(capture)
            request = capture.stored or self.storable(capture.request)  # its path as the log may show it
            self._failed(
                None,
                f"{reason}; it is kept in memory, and written when there is room: free space in {self._folder}",
                what=f"{request.method} {request.path} (stream {capture.spool})",
            )
        return held

    def _retry(self) -> None:
        """Write the streams the spool could not take, that are over, whole, while it takes them."""
        spool = self._spool
        if spool is None:
            return
        for n, held in list(self._held.items()):
            if held.ended is None:
                continue  # written whole at its end
            try:
                spool.stream(n, self._spooled_stream(held))
            except CassetteError as exc:
                self._why = _reason(exc)
                return  # still no room
            del self._held[n]
            self._eras[n] = self._failed_syncs  # written whole again, from here
            self._report(held.capture, held.ended)

    def _spooled_stream(self, held: _Held) -> SpooledStream:
        """A held stream as the spool holds one: as `begin`, `received`, `injected` and `keep` write it."""
        assert held.ended is not None
        capture = held.capture
        request = capture.stored or self.storable(capture.request)
        headers = self._storable_response(Response(capture.status or 0, capture.headers)).headers
        return SpooledStream(
            capture.recorded_at,
            request.method,
            request.path,
            request.query,
            list(request.headers),
            request.body,
            capture.status or 0,
            list(headers),
            [(chunk.t, chunk.data) for chunk in capture.chunks],
            str(held.ended.interaction.response.end),
            capture.duration,
            [(note.fault, note.what) for note in capture.injected],
            list(held.ended.fingerprints),
        )

    def _failed(self, number: int | None, reason: str, *, what: str = "an interaction") -> None:
        assert self._server is not None
        self._why = _reason(reason)
        entry = SaveFailed(request=number or 0, cassette=str(self.path), reason=reason, what=what)
        self._server.journal.add(entry)

    def summary(self) -> str:
        """One line: what was recorded, replayed and missed, and where."""
        assert self._server is not None
        counts = self._server.journal.counts
        recorded = sum(self.ends.values())
        parts = [f"{n} {end}" for end, n in self.ends.items() if end is not End.COMPLETE and n]
        if self.replaced:
            ones = "one" if self.displaced == 1 else "ones" if self.displaced == self.replaced else str(self.displaced)
            parts.append(f"{self.replaced} in place of {ones} cut short before")
        parts += [
            f"{counts[kind]} {what}"
            for kind, what in (
                ("matched", "replayed"),
                ("missed", "missed"),
                ("upstream-failed", "upstream errors"),
                ("save-failed", "save failures"),
            )
            if counts[kind]
        ]
        line = f"recorded {recorded} interaction{'s'[: recorded != 1]}"
        line += f" to {self.path}" if self.kept_in is None else f", not written to {self.path}"
        return line + (f" ({', '.join(parts)})" if parts else "")


@dataclass(slots=True)
class _Ended:
    """What a stream that is over is recorded as: journaled once the disk holds it."""

    interaction: Interaction
    number: int
    """The request's number in the journal."""
    index: int
    """Its number in the cassette."""
    replaced: tuple[End, ...]
    fingerprints: list[str]
    """Those of the recordings cut short it takes the place of."""


@dataclass(slots=True)
class _Held:
    """A stream the spool could not take all of: kept in memory until it can be written whole."""

    capture: Capture
    ended: _Ended | None = None


def _reason(said: Exception | str) -> str:
    """Why a write failed, without the path before it nor what follows (`No space left on device`)."""
    return str(said).split("; ", 1)[0].rsplit(": ", 1)[-1]
