"""Fault injection: every way a stream fails in production, reproducible.

A fault is written `NAME[:key=value,...]`: `status:code=429,retry_after=7`,
`disconnect:after=50%,mode=reset`, `error:at=10`. Every fault also takes
`p=` (the probability, per request, that it applies), `times=` (only the
first N matching requests) and `path=` (only requests whose path ends so).
Chance is drawn from a generator seeded by the server's seed, the fault and
the count of requests it has seen, so the same seed gives the same faults at
the same positions.

Positions (`at=`, `after=`) are an event count (`5`: after the fifth event),
a fraction of the events (`50%`), a byte offset (`200b`) or a time (`1.5s`,
`300ms`). A response to replay becomes a `Plan` (status, headers, timed
writes, how it ends) and each fault rewrites the plan, in a fixed order:
what happens before the stream, then events, then timing, then the wire.
"""

from __future__ import annotations

import math
import random
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from ._exceptions import ConfigError
from .cassette import End, Request, Response
from .dialects import Dialect
from .dialects.events import Error
from .pacing import parse_duration
from .sse import ServerSentEvent, SSEDecoder, encode_comment

__all__ = [
    "FAULTS",
    "PROFILES",
    "Fault",
    "Injector",
    "Plan",
    "Position",
    "apply",
    "load_profile",
    "parse_fault",
    "parse_faults",
]

_COMMON = {"p", "times", "path"}
# The end of an SSE block: a line end, then an empty line. A CRLF is one line end, never CR then LF.
_BLOCK_END = re.compile(rb"(?>\r\n|\r|\n)(?>\r\n|\r|\n)")


class Stage(StrEnum):
    """When a fault acts, in the order faults are applied."""

    BEFORE = "before"
    EVENTS = "events"
    TIMING = "timing"
    WIRE = "wire"
    END = "end"


@dataclass(frozen=True, slots=True)
class _Kind:
    stage: Stage
    keys: dict[str, str]  # key -> what it takes, for the error message
    help: str


FAULTS: dict[str, _Kind] = {
    "status": _Kind(Stage.BEFORE, {"code": "HTTP status", "retry_after": "seconds", "message": "text"},
                    "answer with this status and the API's JSON error instead of the recording"),
    "ttfb": _Kind(Stage.BEFORE, {"delay": "duration"}, "wait this long before the headers"),
    "hang": _Kind(Stage.BEFORE, {}, "accept the request and never answer"),
    "empty": _Kind(Stage.BEFORE, {}, "answer 200 with no body"),
    "error": _Kind(Stage.EVENTS, {"at": "position", "type": "text", "message": "text", "code": "text"},
                   "end the stream at a position with the API's own mid-stream error and terminal frames"),
    "drop": _Kind(Stage.EVENTS, {"at": "position, role or done"}, "leave out an event, the role frame or the [DONE]"),
    "duplicate": _Kind(Stage.EVENTS, {"at": "position"}, "send an event twice"),
    "corrupt": _Kind(Stage.EVENTS, {"at": "position", "kind": "json or utf8"},
                     "break an event's JSON, or put invalid UTF-8 in it"),
    "stall": _Kind(Stage.TIMING, {"at": "position", "for": "duration", "heartbeat": "duration"},
                   "go silent at a position for a while, optionally sending heartbeat comments"),
    "latency": _Kind(Stage.TIMING, {"delay": "duration", "jitter": "duration"}, "delay every write"),
    "bandwidth": _Kind(Stage.TIMING, {"rate": "bytes per second"}, "send no faster than this"),
    "fragment": _Kind(Stage.WIRE, {"size": "bytes", "gap": "duration"},
                      "cut the body into writes of this many bytes, splitting lines and characters"),
    "coalesce": _Kind(Stage.WIRE, {}, "send the whole body in one write, when the last chunk was due"),
    "eol": _Kind(Stage.WIRE, {"style": "crlf or cr"}, "rewrite the line ends"),
    "garbage": _Kind(Stage.WIRE, {"at": "position", "size": "bytes"}, "send random bytes from a position, then close"),
    "disconnect": _Kind(Stage.END, {"after": "position", "mode": "close or reset"},
                        "drop the connection at a position: a clean close or a TCP reset"),
}  # fmt: skip

_STAGES = list(Stage)


@dataclass(frozen=True, slots=True)
class Position:
    """Where in a stream: after `value` events, at a fraction of them, at a byte, or at a time."""

    unit: str  # events, fraction, bytes, seconds
    value: float

    @classmethod
    def parse(cls, text: str) -> Position:
        text = text.strip()
        try:
            if text.endswith("%"):
                position = cls("fraction", float(text[:-1]) / 100)
            elif text.endswith("b"):
                position = cls("bytes", float(int(text[:-1])))
            elif text.endswith("s"):
                position = cls("seconds", parse_duration(text))
            else:
                position = cls("events", float(int(text)))
        except (ValueError, ConfigError):
            raise ValueError(f"{text!r} is not a position: write 5 (events), 50%, 200b or 1.5s") from None
        if not 0 <= position.value < math.inf or (position.unit == "fraction" and position.value > 1):
            raise ValueError(f"{text!r} is not a position: it must be 0 or more (a fraction, at most 100%)")
        return position


@dataclass(frozen=True, slots=True)
class Fault:
    """One parsed fault specification."""

    name: str
    options: tuple[tuple[str, str], ...] = ()
    p: float = 1.0
    times: int | None = None
    path: str | None = None
    spec: str = ""

    def option(self, key: str, default: str | None = None) -> str | None:
        return dict(self.options).get(key, default)

    @property
    def stage(self) -> Stage:
        return FAULTS[self.name].stage

    def applies_to(self, request: Request) -> bool:
        return self.path is None or request.path.endswith(self.path)


def parse_fault(spec: str) -> Fault:
    """A fault from its text; raises `ConfigError` naming the bad part and what is valid."""
    name, _, rest = spec.strip().partition(":")
    if name not in FAULTS:
        raise ConfigError(f"fault {spec!r}: unknown fault {name!r}; faults are {', '.join(FAULTS)}")
    kind = FAULTS[name]
    options: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not value:
            raise ConfigError(f"fault {spec!r}: {part!r} is not key=value")
        if key not in kind.keys and key not in _COMMON:
            valid = ", ".join([*kind.keys, *sorted(_COMMON)])
            raise ConfigError(f"fault {spec!r}: {name} takes no {key!r}; its keys are {valid}")
        options[key] = value
    try:
        p = float(options.pop("p", "1"))
        times = int(options["times"]) if "times" in options else None
        options.pop("times", None)
        if not 0 <= p <= 1 or (times is not None and times < 0):
            raise ValueError("p is a probability from 0 to 1, times a count from 0")
        _validate(name, options)
    except ValueError as exc:
        raise ConfigError(f"fault {spec!r}: {exc}") from None
    path = options.pop("path", None)
    return Fault(name, tuple(options.items()), p, times, path, spec.strip())


def parse_faults(specs: Iterable[str]) -> list[Fault]:
    """Faults from their texts, each checked; raises `ConfigError` at the first bad one."""
    return [parse_fault(spec) for spec in specs]


def _validate(name: str, options: Mapping[str, str]) -> None:
    for key, value in options.items():
        if key in ("at", "after") and not (name == "drop" and value in ("role", "done")):
            Position.parse(value)
        elif key in ("delay", "jitter", "for", "heartbeat", "gap"):
            parse_duration(value)
        elif key in ("code",) and name == "status":
            if not value.isdigit() or not 200 <= int(value) <= 599 or int(value) in (204, 304):
                raise ValueError(f"code {value!r} is not an HTTP status with a body (200-599, not 204 or 304)")
        elif key in ("retry_after", "size", "rate"):
            if not value.isdigit() or (key != "retry_after" and int(value) < 1):
                raise ValueError(f"{key} {value!r} is not a whole number{' above 0' if key != 'retry_after' else ''}")
        elif key == "mode" and value not in ("close", "reset"):
            raise ValueError(f"mode {value!r}: use close or reset")
        elif key == "kind" and value not in ("json", "utf8"):
            raise ValueError(f"kind {value!r}: use json or utf8")
        elif key == "style" and value not in ("crlf", "cr"):
            raise ValueError(f"style {value!r}: use crlf or cr")
    if name == "status" and "code" not in options:
        raise ValueError("status needs code=, such as status:code=429")


# --- plans -----------------------------------------------------------------------------------


@dataclass(slots=True)
class Plan:
    """What the server will send: status, headers, and writes at offsets from the request's arrival."""

    status: int
    headers: list[tuple[str, str]]
    writes: list[tuple[float, bytes]]
    end: End = End.COMPLETE
    end_at: float = 0.0
    headers_at: float | None = None
    """When the headers go out; None: with the first write."""
    hang: bool = False
    replaced: bool = False
    """A fault put something else in the stream's place (a status, no body, no answer): stream faults pass it by."""
    notes: list[tuple[Fault, str]] = field(default_factory=list)
    """Each applied fault and what it did, in the order applied, for the log and the report."""

    @classmethod
    def of(cls, response: Response, offsets: Sequence[float], end_at: float) -> Plan:
        writes = [(t, chunk.data) for t, chunk in zip(offsets, response.chunks, strict=True)]
        return cls(response.status, list(response.headers), writes, response.end, end_at)

    @property
    def body(self) -> bytes:
        return b"".join(data for _, data in self.writes)

    def _split(self, offset: int) -> int:
        """Split the write holding byte `offset` so a write starts there; return that write's index."""
        seen = 0
        for n, (t, data) in enumerate(self.writes):
            if seen + len(data) > offset:
                if offset > seen:
                    cut = offset - seen
                    self.writes[n : n + 1] = [(t, data[:cut]), (t, data[cut:])]
                    return n + 1
                return n
            seen += len(data)
        return len(self.writes)

    def time_at(self, offset: int) -> float:
        n = self._split(offset)
        if n < len(self.writes):
            return self.writes[n][0]
        return self.writes[-1][0] if self.writes else 0.0

    def cut(self, offset: int) -> None:
        """Keep only the bytes before `offset`."""
        del self.writes[self._split(offset) :]

    def replace(self, start: int, end: int, data: bytes) -> None:
        """Put `data` in place of bytes `start`..`end`, sent when byte `start` was due."""
        t = self.time_at(start)
        first, last = self._split(start), self._split(end)
        self.writes[first:last] = [(t, data)] if data else []

    def delay_from(self, offset: int, seconds: float, filler: Sequence[tuple[float, bytes]] = ()) -> None:
        """Hold back everything from byte `offset` by `seconds`, sending `filler` meanwhile."""
        n = self._split(offset)
        self.writes[n:] = [*filler, *((t + seconds, data) for t, data in self.writes[n:])]
        self.end_at += seconds


@dataclass(frozen=True, slots=True)
class _Block:
    start: int
    end: int
    event: ServerSentEvent | None  # None for a comment or a block without data


def _blocks(body: bytes) -> list[_Block]:
    """The SSE blocks of a body with their byte spans: one per event, comment or trailing fragment."""
    blocks, start = [], 0
    for m in _BLOCK_END.finditer(body):
        events = SSEDecoder().feed(body[start : m.end()])
        blocks.append(_Block(start, m.end(), events[0] if events else None))
        start = m.end()
    if start < len(body):
        blocks.append(_Block(start, len(body), None))
    return blocks


def _offset(plan: Plan, where: Position) -> int:
    """The byte offset a position names in the plan's body."""
    body = plan.body
    events = [b for b in _blocks(body) if b.event is not None]
    if where.unit == "bytes":
        return min(int(where.value), len(body))
    if where.unit == "seconds":
        seen = 0
        for t, data in plan.writes:
            if t >= where.value:
                return seen
            seen += len(data)
        return len(body)
    count = round(where.value * len(events)) if where.unit == "fraction" else int(where.value)
    if count <= 0:
        return events[0].start if events else 0
    return events[count - 1].end if count <= len(events) else len(body)


def _boundary(plan: Plan, offset: int) -> int:
    """The end of the last whole block at or before `offset`: where something can be put between events."""
    return max((b.end for b in _blocks(plan.body) if b.end <= offset), default=0)


def _before_terminal(plan: Plan, offset: int, dialect: Dialect) -> int:
    """`offset`, moved back to before the stream's terminal frame if it is after it."""
    body = plan.body
    for block in _blocks(body):
        if block.event is not None and dialect.is_terminal(block.event):
            return min(offset, block.start)
    return offset


def _event_at(plan: Plan, fault: Fault, key: str = "at") -> _Block | None:
    """The event a position names: the one after which it falls (at=0: the first)."""
    spec = fault.option(key, "0") or "0"
    events = [b for b in _blocks(plan.body) if b.event is not None]
    if not events:
        return None
    if spec == "role":
        return events[0]
    if spec == "done":
        return next((b for b in reversed(events) if b.event and b.event.data == "[DONE]"), None)
    offset = _offset(plan, Position.parse(spec))
    return next((b for b in events if b.end > offset), events[-1])


# --- applying -----------------------------------------------------------------------------------


def apply(faults: Sequence[Fault], plan: Plan, *, dialect: Dialect | None, rng: random.Random) -> Plan:
    """The plan with each fault applied, stage by stage (within a stage, in the order given).

    Each fault applied notes what it did in `plan.notes`.
    """
    for stage in _STAGES:
        for fault in faults:
            if fault.stage is stage and not (plan.replaced and stage is not Stage.BEFORE):
                plan.notes.append((fault, _APPLY[fault.name](fault, plan, dialect, rng)))
    return plan


def _status(fault: Fault, plan: Plan, dialect: Dialect | None, rng: random.Random) -> str:
    plan.replaced = True
    code = int(str(fault.option("code")))  # required and checked when parsed
    message = fault.option("message") or f"injected by sse-tape: status {code}"
    status, headers, body = (dialect or _default_dialect()).http_error(code, message)
    plan.status, plan.headers = status, list(headers)
    if (retry_after := fault.option("retry_after")) is not None:
        plan.headers.append(("retry-after", retry_after))
    first = plan.writes[0][0] if plan.writes else 0.0
    plan.writes, plan.end, plan.end_at = [(first, body)], End.COMPLETE, first
    plan.headers.append(("content-length", str(len(body))))
    return f"answered {status} before the stream"


def _ttfb(fault: Fault, plan: Plan, dialect: Dialect | None, rng: random.Random) -> str:
    delay = parse_duration(fault.option("delay") or "1s")
    plan.headers_at = delay
    plan.writes = [(t + delay, data) for t, data in plan.writes]
    plan.end_at += delay
    return f"headers after {delay:g} s"


def _hang(fault: Fault, plan: Plan, dialect: Dialect | None, rng: random.Random) -> str:
    plan.replaced = True
    plan.hang = True
    return "accepted and never answered"


def _empty(fault: Fault, plan: Plan, dialect: Dialect | None, rng: random.Random) -> str:
    plan.replaced = True
    plan.status = 200
    plan.end_at = plan.writes[0][0] if plan.writes else 0.0  # answer when the stream would have begun
    plan.writes, plan.end = [], End.COMPLETE
    plan.headers = [(k, v) for k, v in plan.headers if k.lower() != "content-length"] + [("content-length", "0")]
    return "200 with no body"


def _error(fault: Fault, plan: Plan, dialect: Dialect | None, rng: random.Random) -> str:
    dialect = dialect or _default_dialect()
    if not any(b.event is not None for b in _blocks(plan.body)):
        return "not an event stream: left alone"
    offset = _offset(plan, Position.parse(fault.option("at") or "0"))
    offset = _before_terminal(plan, _boundary(plan, offset), dialect)
    before = [b.event for b in _blocks(plan.body[:offset]) if b.event is not None]
    if any(isinstance(e, Error) for e in dialect.decode(before)):
        return "the stream has ended in an error already: left alone"
    error = Error(
        fault.option("message") or "injected by sse-tape", fault.option("type") or "server_error", fault.option("code")
    )
    t = plan.time_at(offset)
    plan.cut(offset)
    plan.writes.append((t, b"".join(dialect.error_frames(error, dialect.decode(before), sent=before))))
    plan.end, plan.end_at = End.COMPLETE, t
    return f"{dialect.name} error after event {len(before)} at {t:.3f} s"


def _drop(fault: Fault, plan: Plan, dialect: Dialect | None, rng: random.Random) -> str:
    block = _event_at(plan, fault)
    if block is None:
        return "no event to drop"
    plan.replace(block.start, block.end, b"")
    return f"dropped the event at byte {block.start}"


def _duplicate(fault: Fault, plan: Plan, dialect: Dialect | None, rng: random.Random) -> str:
    block = _event_at(plan, fault)
    if block is None:
        return "no event to duplicate"
    data = plan.body[block.start : block.end]
    plan.replace(block.start, block.end, data + data)
    return f"sent the event at byte {block.start} twice"


def _corrupt(fault: Fault, plan: Plan, dialect: Dialect | None, rng: random.Random) -> str:
    block = _event_at(plan, fault)
    if block is None:
        return "no event to corrupt"
    data = plan.body[block.start : block.end]
    line_start = data.find(b"data:")
    line_end = len(data.rstrip(b"\r\n"))
    if fault.option("kind") == "utf8":
        broken = data[:line_end] + b"\xff\xfe\xc3" + data[line_end:]
    else:  # cut the JSON short, keeping the line ends that dispatch the event
        keep = line_start + max((line_end - line_start) // 2, 6) if line_start >= 0 else line_end // 2
        broken = data[:keep] + data[line_end:]
    plan.replace(block.start, block.end, broken)
    return f"corrupted ({fault.option('kind') or 'json'}) the event at byte {block.start}"


def _stall(fault: Fault, plan: Plan, dialect: Dialect | None, rng: random.Random) -> str:
    where = Position.parse(fault.option("at") or "50%")
    offset = _boundary(plan, _offset(plan, where))
    seconds = parse_duration(fault.option("for") or "5s")
    t = plan.time_at(offset)
    filler: list[tuple[float, bytes]] = []
    if heartbeat := fault.option("heartbeat"):
        every = parse_duration(heartbeat)
        beat = every
        while every > 0 and beat < seconds:
            filler.append((t + beat, encode_comment("heartbeat")))
            beat += every
    plan.delay_from(offset, seconds, filler)
    return f"silent for {seconds:g} s at byte {offset} ({t:.3f} s), {len(filler)} heartbeats"


def _latency(fault: Fault, plan: Plan, dialect: Dialect | None, rng: random.Random) -> str:
    delay = parse_duration(fault.option("delay") or "100ms")
    jitter = parse_duration(fault.option("jitter") or "0ms")
    writes, last = [], 0.0
    for t, data in plan.writes:
        last = max(last, t + max(delay + rng.uniform(-jitter, jitter), 0.0))  # order is kept
        writes.append((last, data))
    shift = (last - plan.writes[-1][0]) if plan.writes else delay
    plan.writes, plan.end_at = writes, plan.end_at + max(shift, 0.0)
    return f"each write {delay:g} s later, jitter {jitter:g} s"


def _bandwidth(fault: Fault, plan: Plan, dialect: Dialect | None, rng: random.Random) -> str:
    rate = int(fault.option("rate") or 1000)
    piece = max(rate // 20, 1)  # a write every 50 ms at most, so no burst outruns the rate
    writes, free_at = [], 0.0
    for t, data in plan.writes:
        for i in range(0, len(data), piece):
            start = max(t, free_at)
            writes.append((start, data[i : i + piece]))
            free_at = start + len(data[i : i + piece]) / rate
    plan.end_at = max(plan.end_at, free_at)
    plan.writes = writes
    return f"at most {rate} bytes/s"


def _fragment(fault: Fault, plan: Plan, dialect: Dialect | None, rng: random.Random) -> str:
    size = int(fault.option("size") or 1)
    gap = parse_duration(fault.option("gap") or "0ms")
    writes: list[tuple[float, bytes]] = []
    shift = 0.0  # the gaps so far push every later write back
    for t, data in plan.writes:
        pieces = [data[i : i + size] for i in range(0, len(data), size)]
        writes.extend((t + shift + n * gap, piece) for n, piece in enumerate(pieces))
        shift += max(len(pieces) - 1, 0) * gap
    plan.writes, plan.end_at = writes, plan.end_at + shift
    return f"{len(writes)} writes of at most {size} bytes"


def _coalesce(fault: Fault, plan: Plan, dialect: Dialect | None, rng: random.Random) -> str:
    if plan.writes:
        plan.writes = [(plan.writes[-1][0], plan.body)]
    return "one write"


def _eol(fault: Fault, plan: Plan, dialect: Dialect | None, rng: random.Random) -> str:
    style = b"\r\n" if fault.option("style", "crlf") == "crlf" else b"\r"
    writes = []
    for n, (t, data) in enumerate(plan.writes):
        if data.endswith(b"\r") and n + 1 < len(plan.writes) and plan.writes[n + 1][1].startswith(b"\n"):
            data += b"\n"  # keep a CRLF split across writes whole
        if data.startswith(b"\n") and n and plan.writes[n - 1][1].endswith(b"\r"):
            data = data[1:]
        writes.append((t, re.sub(rb"\r\n|\r|\n", style, data)))
    plan.writes = writes
    return f"line ends {fault.option('style', 'crlf')}"


def _garbage(fault: Fault, plan: Plan, dialect: Dialect | None, rng: random.Random) -> str:
    offset = _offset(plan, Position.parse(fault.option("at") or "0"))
    size = int(fault.option("size") or 64)
    t = plan.time_at(offset)
    plan.cut(offset)
    plan.writes.append((t, rng.randbytes(size)))
    plan.end, plan.end_at = End.INTERRUPTED, t
    return f"{size} random bytes at byte {offset}, then closed"


def _disconnect(fault: Fault, plan: Plan, dialect: Dialect | None, rng: random.Random) -> str:
    where = Position.parse(fault.option("after") or "50%")
    offset = _offset(plan, where)
    if where.unit == "seconds" and where.value >= plan.end_at:
        return f"the stream ended before {where.value:g} s: left alone"
    # At a time, the connection drops then, even in the middle of a silence; else when the byte was due.
    t = where.value if where.unit == "seconds" else plan.time_at(offset)
    plan.cut(offset)
    reset = fault.option("mode") == "reset"
    plan.end, plan.end_at = (End.UPSTREAM_RESET if reset else End.INTERRUPTED), t
    return f"{'reset' if reset else 'closed'} at byte {offset} ({t:.3f} s)"


_APPLY: dict[str, Any] = {
    "status": _status,
    "ttfb": _ttfb,
    "hang": _hang,
    "empty": _empty,
    "error": _error,
    "drop": _drop,
    "duplicate": _duplicate,
    "corrupt": _corrupt,
    "stall": _stall,
    "latency": _latency,
    "bandwidth": _bandwidth,
    "fragment": _fragment,
    "coalesce": _coalesce,
    "eol": _eol,
    "garbage": _garbage,
    "disconnect": _disconnect,
}


def _default_dialect() -> Dialect:
    from .dialects import DIALECTS

    return DIALECTS["openai-chat"]


class Injector:
    """Decides, per request, which faults apply: by path, by `times`, and by seeded chance.

    `times` and chance count the requests each fault has seen: a fault set on
    the server by its place in the list, a fault asked for in a request header
    by its text. Setting new faults starts the server's counts over.
    """

    def __init__(self, faults: Iterable[Fault], seed: int = 0) -> None:
        self.seed = seed
        self.seen: dict[tuple[str, int | str], int] = {}
        self.injected: dict[str, int] = {}
        """How many times each fault was applied, by its text."""
        self._draw = ""
        self.set(faults)

    def set(self, faults: Iterable[Fault]) -> None:
        """Replace the server's faults, and start their counts over."""
        self.faults = list(faults)
        self.seen = {key: n for key, n in self.seen.items() if key[0] == "header"}

    def choose(self, request: Request, extra: Sequence[Fault] = ()) -> list[Fault]:
        """The faults that apply to this request."""
        chosen: list[Fault] = []
        labels: list[str] = []
        keyed = [(("server", n), f) for n, f in enumerate(self.faults)] + [(("header", f.spec), f) for f in extra]
        for key, fault in keyed:
            if not fault.applies_to(request):
                continue
            n = self.seen.get(key, 0)
            self.seen[key] = n + 1
            if fault.times is not None and n >= fault.times:
                continue
            if fault.p < 1 and random.Random(f"{self.seed}:{fault.spec}:{n}").random() >= fault.p:
                continue
            chosen.append(fault)
            labels.append(f"{fault.spec}:{n}")
        self._draw = f"{self.seed}:" + "|".join(labels)
        return chosen

    def rng(self) -> random.Random:
        """The generator for the random choices of the faults just chosen: the same seed, the same choices."""
        return random.Random(self._draw)

    def applied(self, fault: Fault) -> None:
        self.injected[fault.spec] = self.injected.get(fault.spec, 0) + 1


#: Profiles shipped with sse-tape: named sets of faults for `--profile`.
PROFILES: dict[str, tuple[str, ...]] = {
    # A poor mobile link: late and uneven writes, split reads, the odd reset.
    "flaky-network": (
        "latency:delay=40ms,jitter=30ms",
        "fragment:size=7,p=0.3",
        "disconnect:after=60%,mode=reset,p=0.1",
    ),
    # Half the requests are turned away with 429 and Retry-After.
    "rate-limited": ("status:code=429,retry_after=2,p=0.5",),
    # A busy server: 503s, slow first bytes, and streams that fail half-way.
    "overloaded": (
        "status:code=503,retry_after=5,p=0.2",
        "ttfb:delay=3s,p=0.3",
        "error:at=50%,type=server_error,message=The server is overloaded,p=0.1",
    ),
    # A big model on a small GPU: a long first token, slow tokens, long pauses kept alive by heartbeats.
    "slow-model": ("ttfb:delay=2s", "latency:delay=60ms", "stall:at=30%,for=8s,heartbeat=3s,p=0.3"),
}


def load_profile(name: str, folder: Path | None = None) -> list[Fault]:
    """A profile's faults: from `sse-tape.toml` (`[profiles.NAME]`), `pyproject.toml`
    (`[tool.sse-tape.profiles.NAME]`) in `folder` (the working folder by default), or the shipped ones.

    A profile is a table with `faults`, a list of fault specifications.
    """
    folder = folder or Path.cwd()
    found: dict[str, Any] = {}
    for file, keys in (
        (folder / "sse-tape.toml", ("profiles",)),
        (folder / "pyproject.toml", ("tool", "sse-tape", "profiles")),
    ):
        if not file.is_file():
            continue
        try:
            table: Any = tomllib.loads(file.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as exc:
            raise ConfigError(f"{file}: cannot read profiles: {exc}") from None
        for key in keys:
            table = table.get(key, {}) if isinstance(table, dict) else {}
        if isinstance(table, dict):
            found.update((k, (file, v)) for k, v in table.items() if k not in found)
    if name in found:
        file, profile = found[name]
        specs = profile.get("faults") if isinstance(profile, dict) else None
        if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
            raise ConfigError(f'{file}: profile {name!r} needs faults = ["spec", ...]')
        return parse_faults(specs)
    if name in PROFILES:
        return parse_faults(PROFILES[name])
    names = sorted({*PROFILES, *found})
    raise ConfigError(f"unknown profile {name!r}: profiles are {', '.join(names)}")
