"""What a fault is: its kind (name, stage, keys with their defaults, the act it does to a stream, help),
and one parsed use of it (`Fault`), with the readers of its keys' values; what a fault does to one stream
(`Act`) and what the acts of one stream share (`Run`). `stream` runs the acts over a stream.

A fault is written `NAME[:value][,key=value,...]` (see `registry.parse_fault`). Each kind acts in one
`Stage`; faults apply stage by stage, in this order: what happens before the stream, then what the model
answers, then events, then timing, then the wire, then the end.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .._units import parse_duration
from ..cassette import End, Request
from ..dialects import Protocol
from ..plan import Beats, Plan, Write
from ..position import Position, PositionUnit

__all__ = [
    "MAX_HEADER_FAULTS",
    "Act",
    "Fault",
    "FaultKind",
    "Key",
    "Run",
    "Stage",
    "choice",
    "duration",
    "event_or_mark",
    "position",
    "status_code",
    "text",
    "whole_number",
]


class Stage(StrEnum):
    """When a fault acts, in the order faults are applied."""

    BEFORE = "before"
    ANSWER = "answer"
    """What the model says: the answer rewritten, as a model that misbehaves answers."""
    EVENTS = "events"
    TIMING = "timing"
    WIRE = "wire"
    END = "end"


# --- the values a key takes -------------------------------------------------------------------------
# Every value is bounded, so that no spec, from the command line or from a request's header, can make
# a server wait for ever, build a body of any size or run out of memory.
MAX_SECONDS = 3600.0
MAX_TEXT = 1000
_NOT_TEXT = re.compile("[\x00-\x08\x0a-\x1f\x7f\ud800-\udfff]")
#: How long one fault's text may be.
MAX_SPEC = 2000
#: How many faults one request may ask for in its header.
MAX_HEADER_FAULTS = 16

# Each reads the text of one key's value and returns it typed, or raises ValueError or
# ConfigError with a message naming the value and what would do.


def position(key: str, text: str) -> Position:
    """A position in the stream: `5` events, `50%`, `200b`, `1.5s`."""
    return Position.parse(text)


def duration(at_least: float = 0.0, at_most: float = MAX_SECONDS) -> Callable[[str, str], float]:
    """A reader of a duration (`1.5s`, `300ms`) within these bounds."""

    def parse(key: str, text: str) -> float:
        seconds = parse_duration(text)
        if not at_least <= seconds <= at_most:
            raise ValueError(f"{key} {text!r} is out of bounds: from {at_least:g} s to {at_most:g} s")
        return seconds

    return parse


def status_code(key: str, text: str) -> int:
    """An HTTP status that has a body."""
    if not text.isdigit() or not 200 <= int(text) <= 599 or int(text) in (204, 304):
        raise ValueError(f"{key} {text!r} is not an HTTP status with a body (200-599, not 204 or 304)")
    return int(text)


def whole_number(minimum: int, maximum: int) -> Callable[[str, str], int]:
    """A reader of a whole number within these bounds."""

    def parse(key: str, text: str) -> int:
        if not text.isdigit() or int(text[:20]) < minimum:
            raise ValueError(f"{key} {text!r} is not a whole number{' above 0' if minimum else ''}")
        if len(text) > 20 or int(text) > maximum:
            raise ValueError(f"{key} {text[:20]!r} is out of bounds: at most {maximum:,}")
        return int(text)

    return parse


def choice(*words: str) -> Callable[[str, str], str]:
    """A reader of one of these words."""

    def parse(key: str, text: str) -> str:
        if text not in words:
            raise ValueError(f"{key} {text!r}: use {' or '.join(words)}")
        return text

    return parse


def text(key: str, text: str) -> str:
    """Any text, of bounded length, with no control character and nothing that is not UTF-8 (a header's bytes
    that were not, which aiohttp hands over as surrogate escapes): it goes into answers as it is."""
    if len(text) > MAX_TEXT:
        raise ValueError(f"{key} is {len(text):,} characters long: at most {MAX_TEXT:,}")
    if (bad := _NOT_TEXT.search(text)) is not None:
        what = "a byte that is not UTF-8" if bad[0] >= "\ud800" else "a control character"
        raise ValueError(f"{key} holds {what}: give it as UTF-8 text")
    return text


def event_or_mark(key: str, text: str) -> Position | str:
    """A position, or `role` (the role frame) or `done` (the [DONE])."""
    if text in ("role", "done"):
        return text
    return Position.parse(text, also=("role (the role frame)", "done (the [DONE])"))


@dataclass(frozen=True, slots=True)
class Key:
    """One key a fault takes: what it holds, its default as written, and how its value is read."""

    name: str
    kind: str
    """What it takes, in words, for `sse-tape faults` and error messages."""
    parse: Callable[[str, str], Any]
    default: str | None = None
    """The value when the key is not given, as it would be written; None: no default."""
    required: bool = False

    def describe(self) -> str:
        """`at=<position, default 50%>`."""
        default = "required" if self.required else f"default {self.default}" if self.default is not None else ""
        return f"{self.name}=<{self.kind}{', ' + default if default else ''}>"


def at_a_fraction(fault: Fault) -> bool:
    """Whether a fault's position (its `at` or `after`) is a fraction of the events, which only the whole
    stream can place."""
    where = fault.where
    return isinstance(where, Position) and where.unit is PositionUnit.FRACTION


@dataclass(frozen=True, slots=True)
class FaultKind:
    """A kind of fault: its name, when it acts, its keys, the act it does to a stream, and a line of help.

    `act` makes, for one stream, the stage that this fault is there: fed the stream's timed writes as
    they come, it gives back the writes that go on (see `stream.Act`). `whole` says whether a fault of
    this kind needs the whole stream first (a position at a fraction of the events, `split`): then its
    act is fed the stream in one piece once it has ended, on a live stream as on a replay.
    """

    name: str
    stage: Stage
    help: str
    keys: tuple[Key, ...]
    act: Callable[[Fault, Run], Act]
    main: str | None = None
    """The key a bare value sets: `status:429` is `status:code=429`."""
    replaces: bool = False
    """It answers in the stream's place (a status, no answer, no body): once one has, the others pass by."""
    whole: Callable[[Fault], bool] = at_a_fraction
    fits: Callable[[Request, Protocol], bool] | None = None
    """Whether it can act on a request of this protocol at all (a session expiring: a request made in one);
    None: on every request."""
    document: Callable[[Fault, Run], str | None] | None = None
    """What it does to an answer that is one JSON document, not a stream (the protocol's error answer in its
    place): it changes `Run.head` and says what it did, or returns None where the protocol has no words for it.
    None: it leaves such an answer alone, as every fault but those before the stream does."""

    def key(self, name: str) -> Key | None:
        """The key of this name, if the kind takes one."""
        return next((k for k in self.keys if k.name == name), None)


@dataclass(frozen=True, slots=True)
class Fault:
    """One parsed fault: its kind, a typed value for each of its keys, and when it applies."""

    kind: FaultKind
    values: tuple[tuple[str, Any], ...]
    """Each key of the kind with its value, given or default (None where there is neither)."""
    p: float = 1.0
    times: int | None = None
    path: str | None = None
    rpc: str | None = None
    """The JSON-RPC method of the requests it applies to alone (MCP's `tools/call`, A2A's `SendStreamingMessage`),
    whose requests all go to one endpoint; None: any request."""
    spec: str = ""

    @property
    def name(self) -> str:
        return self.kind.name

    @property
    def stage(self) -> Stage:
        return self.kind.stage

    def __getitem__(self, key: str) -> Any:
        for name, value in self.values:
            if name == key:
                return value
        raise KeyError(key)

    @property
    def where(self) -> Position | str | None:
        """Where it acts: its `at` or `after`; None for one that acts on every write."""
        for key in ("at", "after"):
            if self.kind.key(key) is not None:
                value: Position | str = self[key]
                return value
        return None

    def needs_whole_stream(self) -> bool:
        """Whether it needs the whole stream before it acts (see `FaultKind.whole`)."""
        return self.kind.whole(self)

    def applies_to(self, request: Request, dialect: Protocol) -> bool:
        """Whether it applies to a request of `dialect`'s: its `path=`, if given, ends the request's path; its
        `rpc=`, if given, is what the request asks (`Protocol.operation`: a JSON-RPC method); and its kind can
        act on it (`FaultKind.fits`), so that a request it would leave alone spends none of its `times=`."""
        if self.path is not None and not request.path.endswith(self.path):
            return False
        if self.rpc is not None and dialect.operation(request) != self.rpc:
            return False
        return self.kind.fits is None or self.kind.fits(request, dialect)


@dataclass(slots=True)
class Run:
    """What the stages of one stream share: what frames their bytes, their random choices, the head they
    may change, and how the stream ends.

    `start` opens a stream in which an error comes before any event (a live model's, which has none yet).
    """

    dialect: Protocol
    rng: random.Random
    head: Plan
    """The response's status, headers and what is sent beside the body (heartbeats, noise, unframed bytes)."""
    request: Request | None = None
    start: object | None = None
    end: End | None = None
    """How a fault ended the stream; None while it goes on."""
    source_end: End = End.COMPLETE
    """How the stream's source ended (known once it has)."""
    until: float | None = None
    """When a disconnect at a time drops the connection, even in a silence; None: no such fault."""
    beat_rewrites: list[Callable[[bytes], bytes]] = field(default_factory=list)
    """What the wire faults do to the bytes of heartbeats (`eol`), applied as a stall makes them."""
    notes: list[tuple[Fault, str]] = field(default_factory=list)

    def note(self, fault: Fault, what: str) -> None:
        """Say what a fault did (or why it did nothing), for the journal."""
        self.notes.append((fault, what))

    def heartbeats(self, start: float, every: float, until: float, data: bytes) -> None:
        """Heartbeat comments through a silence from `start` to `until`, as the wire faults write them."""
        for rewrite in self.beat_rewrites:
            data = rewrite(data)
        self.head.beats.append(Beats(start, every, until, data))


class Act:
    """What one fault does to one stream: fed the stream's writes as they come, it gives back the writes
    that go on, and at the end what it still holds and when the stream now ends.

    The default passes everything through. `Run.end` set by an act ends the stream there.
    """

    def __init__(self, fault: Fault, run: Run) -> None:
        self.fault = fault
        self.run = run

    def feed(self, writes: list[Write]) -> list[Write]:
        """The writes that go on for these."""
        return writes

    def close(self, end_at: float) -> tuple[list[Write], float]:
        """The stream has ended (at `end_at`, when its response would end): what is left to write, and when
        the response ends now."""
        return [], end_at

    def note(self, what: str) -> None:
        """Say what this fault did."""
        self.run.note(self.fault, what)
