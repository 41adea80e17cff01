"""Fault injection: every way a stream fails in production, reproducible.

A fault is written `NAME[:value][,key=value,...]`: `status:429`,
`status:code=429,retry_after=7`, `disconnect:50%,mode=reset`, `error:10`.
The bare value is the fault's main key (`code` for status, `at` for error).
Every fault also takes `p=` (the probability, per request, that it applies),
`times=` (only the first N matching requests) and `path=` (only requests
whose path ends so). Chance is drawn from a generator seeded by the server's
seed, the fault and the count of requests it has seen, so the same seed
gives the same faults at the same positions.

Each fault is one `FaultKind`: its name, the stage it acts in, its keys with
their types and defaults, and its transform of the `Plan`. A spec is parsed
once, into a `Fault` holding typed values, when the server starts or the
request arrives. Faults apply stage by stage: what happens before the
stream, then what the model answers (`misbehaviour`), then events, then
timing, then the wire, then the end.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._exceptions import ConfigError
from ._units import parse_duration
from .cassette import End, Request
from .dialects import Generation as Dialect
from .journal import ReplayState
from .plan import Block, Noise, Plan
from .sse import ServerSentEvent, encode_comment

if TYPE_CHECKING:  # the neutral events are imported where an error is framed: replay without one needs none
    from .dialects.events import Start
    from .position import Position

__all__ = [
    "FAULTS",
    "PROFILES",
    "Fault",
    "FaultKind",
    "Injector",
    "Key",
    "Stage",
    "apply",
    "corrupted",
    "error_frames",
    "load_profile",
    "parse_fault",
    "parse_faults",
]


_LINE_END = re.compile(rb"\r\n|\r|\n")


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
_MAX_SECONDS = 3600.0
_MAX_TEXT = 1000
_MAX_SPEC = 2000
#: How many faults one request may ask for in its header.
MAX_HEADER_FAULTS = 16

# Each reads the text of one key's value and returns it typed, or raises ValueError or
# ConfigError with a message naming the value and what would do.


def _position(key: str, text: str) -> Position:
    from .position import Position  # here, not above: a server given no fault that takes one never needs it

    return Position.parse(text)


def _duration(at_least: float = 0.0, at_most: float = _MAX_SECONDS) -> Callable[[str, str], float]:
    def parse(key: str, text: str) -> float:
        seconds = parse_duration(text)
        if not at_least <= seconds <= at_most:
            raise ValueError(f"{key} {text!r} is out of bounds: from {at_least:g} s to {at_most:g} s")
        return seconds

    return parse


def _status(key: str, text: str) -> int:
    if not text.isdigit() or not 200 <= int(text) <= 599 or int(text) in (204, 304):
        raise ValueError(f"{key} {text!r} is not an HTTP status with a body (200-599, not 204 or 304)")
    return int(text)


def _whole(minimum: int, maximum: int) -> Callable[[str, str], int]:
    def parse(key: str, text: str) -> int:
        if not text.isdigit() or int(text[:20]) < minimum:
            raise ValueError(f"{key} {text!r} is not a whole number{' above 0' if minimum else ''}")
        if len(text) > 20 or int(text) > maximum:
            raise ValueError(f"{key} {text[:20]!r} is out of bounds: at most {maximum:,}")
        return int(text)

    return parse


def _choice(*words: str) -> Callable[[str, str], str]:
    def parse(key: str, text: str) -> str:
        if text not in words:
            raise ValueError(f"{key} {text!r}: use {' or '.join(words)}")
        return text

    return parse


def _text(key: str, text: str) -> str:
    if len(text) > _MAX_TEXT:
        raise ValueError(f"{key} is {len(text):,} characters long: at most {_MAX_TEXT:,}")
    return text


def _event_or_mark(key: str, text: str) -> Position | str:
    from .position import Position

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


Transform = Callable[["Fault", Plan, Dialect, random.Random, Request | None], str]
"""What a fault does to a plan: with the dialect that frames it, the generator of its random choices,
and the request it answers (None where none is known)."""


@dataclass(frozen=True, slots=True)
class FaultKind:
    """A kind of fault: its name, when it acts, its keys, what it does to a plan, and a line of help."""

    name: str
    stage: Stage
    help: str
    keys: tuple[Key, ...]
    transform: Transform
    main: str | None = None
    """The key a bare value sets: `status:429` is `status:code=429`."""
    replaces: bool = False
    """It answers in the stream's place (a status, no answer, no body): once one has, the others pass by."""

    def key(self, name: str) -> Key | None:
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

    def applies_to(self, request: Request) -> bool:
        return self.path is None or request.path.endswith(self.path)


_COMMON = ("p", "path", "times")


def parse_fault(spec: str) -> Fault:
    """A fault from its text; raises `ConfigError` naming the bad part and what is valid."""
    if len(spec) > _MAX_SPEC:
        raise ConfigError(f"fault {spec[:40]!r}...: a spec is at most {_MAX_SPEC:,} characters")
    name, _, rest = spec.strip().partition(":")
    kind = FAULTS.get(name.replace("_", "-"))  # slow_close is slow-close
    if kind is None:
        hint = _did_you_mean(name, FAULTS)
        raise ConfigError(f"fault {spec!r}: unknown fault {name!r}{hint}; faults are {', '.join(FAULTS)}")
    given: dict[str, str] = {}
    for n, part in enumerate(p.strip() for p in rest.split(",")):
        if not part:
            continue
        key, eq, value = part.partition("=")
        if not eq and n == 0 and kind.main is not None and kind.key(part) is None and part not in _COMMON:
            key, value = kind.main, part  # the main key's value alone: status:429
        elif not eq or not value:
            raise ConfigError(f"fault {spec!r}: {part!r} is not key=value")
        if kind.key(key) is None and key not in _COMMON:
            keys = sorted([*(k.name for k in kind.keys), *_COMMON])
            hint = _did_you_mean(key, keys)
            raise ConfigError(f"fault {spec!r}: {name} takes no {key!r}{hint}; its keys are {', '.join(keys)}")
        if key in given:  # one value must win, and neither the spec nor the header says which was meant
            raise ConfigError(f"fault {spec!r}: {key} is given twice ({given[key]} and {value}); give it once")
        given[key] = value
    try:
        p = float(given.pop("p", "1"))
        times = _whole(0, 10**9)("times", given.pop("times")) if "times" in given else None
        if not 0 <= p <= 1:
            raise ValueError("p is a probability from 0 to 1")
        path = given.pop("path", None)
        values = []
        for k in kind.keys:
            text = given.get(k.name, k.default)
            if text is None and k.required:
                example = f"{name}:{k.name}=429" if name == "status" else f"{name}:{k.name}=..."
                raise ValueError(f"{name} needs {k.name}=, such as {example}")
            values.append((k.name, None if text is None else k.parse(k.name, text)))
    except ValueError as exc:  # ConfigError too
        raise ConfigError(f"fault {spec!r}: {exc}") from None
    return Fault(kind, tuple(values), p, times, path, spec.strip())


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` (did you mean 'error'?)` for the choice closest to a misspelt word, or nothing when none is close."""
    import difflib  # only a misspelt spec needs it

    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def parse_faults(specs: Iterable[str]) -> list[Fault]:
    """Faults from their texts, each checked; raises `ConfigError` at the first bad one."""
    return [parse_fault(spec) for spec in specs]


# --- applying ------------------------------------------------------------------------------------------


def apply(
    faults: Sequence[Fault], plan: Plan, *, dialect: Dialect, rng: random.Random, request: Request | None = None
) -> list[tuple[Fault, str]]:
    """Apply each fault to the plan, stage by stage (within a stage, in the order given).

    Returns each fault applied with what it did. `dialect` frames errors; `rng` makes the random choices;
    `request`, the request the plan answers, tells what tools it offered.
    """
    notes = []
    for stage in Stage:
        for fault in faults:
            if fault.stage is stage and not (plan.replaced and (stage is not Stage.BEFORE or fault.kind.replaces)):
                notes.append((fault, fault.kind.transform(fault, plan, dialect, rng, request)))
    return notes


def error_frames(fault: Fault, dialect: Dialect, sent: Sequence[ServerSentEvent], start: Start | None) -> bytes:
    """An `error` fault's frames: the API's mid-stream error and terminal frames after the events `sent`,
    or, when none were, the stream's opening (`start`) and then the error."""
    from .dialects.events import Error, Start

    error = Error(fault["message"], fault["type"], fault["code"])
    if sent:
        return b"".join(dialect.error_frames(error, sent=sent))
    return b"".join(dialect.encode([start or Start(), error]))


def corrupted(block: bytes, kind: str) -> bytes:
    """An SSE block broken as `corrupt` breaks it: its JSON cut short (`json`), or invalid UTF-8 in it (`utf8`)."""
    line_start = block.find(b"data:")
    line_end = len(block.rstrip(b"\r\n"))
    if kind == "utf8":
        return block[:line_end] + b"\xff\xfe\xc3" + block[line_end:]
    # cut the JSON short, keeping the line ends that dispatch the event
    keep = line_start + max((line_end - line_start) // 2, 6) if line_start >= 0 else line_end // 2
    return block[:keep] + block[line_end:]


def _before_terminal(plan: Plan, offset: int, dialect: Dialect) -> int:
    """`offset`, moved back to before the stream's terminal frame if it is after it."""
    for block in plan.events:
        if block.event is not None and dialect.is_terminal(block.event):
            return min(offset, block.start)
    return offset


def _event_at(plan: Plan, at: Position | str) -> Block | None:
    """The event a position names: the one after which it falls (at=0: the first); or the role frame or [DONE]."""
    events = plan.events
    if not events:
        return None
    if at == "role":
        return events[0]
    if at == "done":
        return next((b for b in reversed(events) if b.event and b.event.data == "[DONE]"), None)
    assert not isinstance(at, str)  # a Position
    offset = plan.offset(at)
    return next((b for b in events if b.end > offset), events[-1])


def _status_transform(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    plan.replaced = True
    code: int = fault["code"]
    message = fault["message"] or f"injected by sse-tape: status {code}"
    status, headers, body = dialect.http_error(code, message)
    plan.status, plan.headers = status, list(headers)
    if fault["retry_after"] is not None:
        plan.headers.append(("retry-after", str(fault["retry_after"])))
    first = plan.writes[0][0] if plan.writes else 0.0
    plan.rewrite([(first, body)])
    plan.end, plan.end_at = End.COMPLETE, first
    plan.headers.append(("content-length", str(len(body))))
    return f"answered {status} before the stream"


def _ttfb(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    delay: float = fault["delay"]
    plan.headers_at = delay
    plan.writes = [(t + delay, data) for t, data in plan.writes]
    plan.end_at += delay
    return f"headers after {delay:g} s"


def _hang(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    plan.replaced = True
    plan.hang = True
    return "accepted and never answered"


def _empty(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    plan.replaced = True
    plan.status = 200
    plan.end_at = plan.writes[0][0] if plan.writes else 0.0  # answer when the stream would have begun
    plan.rewrite([])
    plan.end = End.COMPLETE
    plan.headers = [(k, v) for k, v in plan.headers if k.lower() != "content-length"] + [("content-length", "0")]
    return "200 with no body"


def _error(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    from .dialects.events import Error, Start

    if not plan.events:
        return "not an event stream: left alone"
    offset = _before_terminal(plan, plan.boundary(plan.offset(fault["at"])), dialect)
    sent = [b.event for b in plan.events if b.end <= offset and b.event is not None]
    if any(isinstance(e, Error) for e in dialect.decode(sent)):
        return "the stream has ended in an error already: left alone"
    start = None
    if not sent:  # nothing sent yet: the stream opens as the recording opened it, then fails
        start = next(
            (e for e in dialect.decode(b.event for b in plan.events if b.event) if isinstance(e, Start)), Start()
        )
    t = plan.time_at(offset)
    plan.cut(offset)
    plan.append(t, error_frames(fault, dialect, sent, start))
    plan.end, plan.end_at = End.COMPLETE, t
    return f"{dialect.name} error after event {len(sent)} at {t:.3f} s"


def _drop(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    block = _event_at(plan, fault["at"])
    if block is None:
        return "no event to drop"
    plan.replace(block.start, block.end, b"")
    return f"dropped the event at byte {block.start}"


def _duplicate(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    block = _event_at(plan, fault["at"])
    if block is None:
        return "no event to duplicate"
    data = plan.body[block.start : block.end]
    plan.replace(block.start, block.end, data + data)
    return f"sent the event at byte {block.start} twice"


def _corrupt(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    block = _event_at(plan, fault["at"])
    if block is None:
        return "no event to corrupt"
    plan.replace(block.start, block.end, corrupted(plan.body[block.start : block.end], fault["kind"]))
    return f"corrupted ({fault['kind']}) the event at byte {block.start}"


def _stall(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    offset = plan.boundary(plan.offset(fault["at"]))
    seconds: float = fault["for"]
    every: float | None = fault["heartbeat"]
    t = plan.delay_from(offset, seconds, (every, encode_comment("heartbeat")) if every else None)
    beats = f", a heartbeat every {every:g} s" if every else ""
    return f"silent for {seconds:g} s at byte {offset} ({t:.3f} s){beats}"


def _latency(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    delay: float = fault["delay"]
    jitter: float = fault["jitter"]
    writes, last = [], 0.0
    for t, data in plan.writes:
        last = max(last, t + max(delay + rng.uniform(-jitter, jitter), 0.0))  # order is kept
        writes.append((last, data))
    shift = (last - plan.writes[-1][0]) if plan.writes else delay
    plan.writes, plan.end_at = writes, plan.end_at + max(shift, 0.0)
    return f"each write {delay:g} s later, jitter {jitter:g} s"


def _bandwidth(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    rate: int = fault["rate"]
    piece = max(rate // 20, 1)  # a write every 50 ms at most, so no burst outruns the rate
    writes, free_at = [], 0.0
    for t, data in plan.writes:
        for i in range(0, len(data), piece):
            start = max(t, free_at)
            writes.append((start, data[i : i + piece]))
            free_at = start + len(data[i : i + piece]) / rate
    plan.end_at = max(plan.end_at, free_at)
    plan.writes = writes  # the same bytes in smaller writes
    return f"at most {rate} bytes/s"


def _fragment(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    size: int = fault["size"]
    gap: float = fault["gap"]
    writes: list[tuple[float, bytes]] = []
    shift = 0.0  # the gaps so far push every later write back
    for t, data in plan.writes:
        pieces = [data[i : i + size] for i in range(0, len(data), size)]
        writes.extend((t + shift + n * gap, piece) for n, piece in enumerate(pieces))
        shift += max(len(pieces) - 1, 0) * gap
    plan.writes, plan.end_at = writes, plan.end_at + shift
    plan.apart = True
    return f"{len(writes)} writes of at most {size} bytes"


def _coalesce(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    if plan.writes:
        plan.writes = [(plan.writes[-1][0], plan.body)]
    return "one write"


def _split(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    if not plan.writes:
        return "no body to split"
    offset = plan.offset(fault["at"])
    body, last = plan.body, plan.writes[-1][0]
    if not 0 < offset < len(body):
        plan.writes = [(last, body)]
        where = "start" if offset <= 0 else "end"  # a byte past the end is taken as the end
        return f"one write: {fault['at']} is the body's {where}, not inside its {len(body)} bytes"
    # Both go when the last chunk was due, as coalesce's one write does: whatever a stall sends through its
    # silence (heartbeats, due by time) then comes before them, never between, inside a line.
    plan.writes = [(last, body[:offset]), (last, body[offset:])]
    plan.apart = True
    return f"two writes, split at byte {offset} of {len(body)}"


def _eol(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    style = b"\r\n" if fault["style"] == "crlf" else b"\r"
    writes = []
    for n, (t, data) in enumerate(plan.writes):
        if data.endswith(b"\r") and n + 1 < len(plan.writes) and plan.writes[n + 1][1].startswith(b"\n"):
            data += b"\n"  # keep a CRLF split across writes whole
        if data.startswith(b"\n") and n and plan.writes[n - 1][1].endswith(b"\r"):
            data = data[1:]
        writes.append((t, _LINE_END.sub(style, data)))
    plan.rewrite(writes)
    plan.beats = [replace(b, data=_LINE_END.sub(style, b.data)) for b in plan.beats]
    return f"line ends {fault['style']}"


def _garbage(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    offset = plan.offset(fault["at"])
    size: int = fault["size"]
    t = plan.time_at(offset)
    plan.cut(offset)
    plan.noise = Noise(t, size, rng.getrandbits(64))  # made as it is sent, however many bytes
    plan.end, plan.end_at = End.INTERRUPTED, t
    return f"{size} random bytes at byte {offset}, then closed"


def _disconnect(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    where: Position = fault["after"]
    offset = plan.offset(where)
    if where.unit == "seconds" and where.value >= plan.end_at:
        return f"the stream ended before {where.value:g} s: left alone"
    # At a time, the connection drops then, even in the middle of a silence; else when the byte was due.
    t = where.value if where.unit == "seconds" else plan.time_at(offset)
    plan.cut(offset)
    reset = fault["mode"] == "reset"
    plan.end, plan.end_at = (End.UPSTREAM_RESET if reset else End.INTERRUPTED), t
    return f"{'reset' if reset else 'closed'} at byte {offset} ({t:.3f} s)"


def _offered(dialect: Dialect, request: Request | None) -> list[dict[str, Any]]:
    """The tools a request offered, each with `name` and `parameters`."""
    if request is None:
        return []
    try:
        return [t for t in dialect.prompt(request.json()).tools if isinstance(t, dict) and "name" in t]
    except ValueError:
        return []


def _misbehave(name: str, *keys: str) -> Transform:
    """The transform of the misbehaviour `misbehaviour.<name>`, given the stream and the fault's `keys`."""

    def transform(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
        from . import misbehaviour  # imported when a misbehaviour is injected: replay starts without it

        make = getattr(misbehaviour, name)
        values = [fault[key] for key in keys]
        at = fault["at"] if fault.kind.key("at") is not None else None
        return misbehaviour.rewrite(
            plan, dialect, lambda stream: make(stream, *values), at=at, tools=_offered(dialect, request), rng=rng
        )

    return transform


def _unlengthed(plan: Plan) -> None:
    """Drop a recorded Content-Length, so the body goes out in chunks and its end is the last chunk."""
    plan.headers = [(k, v) for k, v in plan.headers if k.lower() != "content-length"]


def _bad_chunk(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    offset = plan.offset(fault["at"])
    t = plan.time_at(offset)
    rest = plan.body[offset : offset + 16]
    plan.cut(offset)
    _unlengthed(plan)
    # A size line that is no hexadecimal number, with what would have come next after it.
    plan.unframed = (t, b"zz\r\n" + rest + b"\r\n")
    plan.end, plan.end_at = End.INTERRUPTED, t
    return f"a chunk size line that is not one at byte {offset} ({t:.3f} s), then closed"


def _slow_close(fault: Fault, plan: Plan, dialect: Dialect, rng: random.Random, request: Request | None) -> str:
    if plan.end is not End.COMPLETE:
        return "the response does not end cleanly: left alone"
    seconds: float = fault["for"]
    last = plan.writes[-1][0] if plan.writes else 0.0
    plan.end_at = max(plan.end_at, last) + seconds
    _unlengthed(plan)
    return f"the body's end (the last chunk) {seconds:g} s after its last byte"


_AT = "position"

#: Every fault, by name, in the order `sse-tape faults` lists them.
FAULTS: dict[str, FaultKind] = {
    kind.name: kind
    for kind in (
        FaultKind("status", Stage.BEFORE, "answer with this status and the API's JSON error instead of the recording",
                  (Key("code", "HTTP status", _status, required=True),
                   Key("retry_after", "seconds", _whole(0, 86_400)),
                   Key("message", "text", _text)),
                  _status_transform, main="code", replaces=True),
        FaultKind("ttfb", Stage.BEFORE, "wait this long before the headers",
                  (Key("delay", "duration", _duration(), "1s"),), _ttfb, main="delay"),
        FaultKind("hang", Stage.BEFORE, "accept the request and never answer", (), _hang, replaces=True),
        FaultKind("empty", Stage.BEFORE, "answer 200 with no body", (), _empty, replaces=True),
        FaultKind("error", Stage.EVENTS,
                  "end the stream at a position with the API's own mid-stream error and terminal frames",
                  (Key("at", _AT, _position, "50%"),
                   Key("type", "text", _text, "server_error"),
                   Key("message", "text", _text, "injected by sse-tape"),
                   Key("code", "text", _text)),
                  _error, main="at"),
        FaultKind("drop", Stage.EVENTS, "leave out an event, the role frame or the [DONE]",
                  (Key("at", "position, role or done", _event_or_mark, "0"),), _drop, main="at"),
        FaultKind("duplicate", Stage.EVENTS, "send an event twice",
                  (Key("at", _AT, _position, "0"),), _duplicate, main="at"),
        FaultKind("corrupt", Stage.EVENTS, "break an event's JSON, or put invalid UTF-8 in it",
                  (Key("at", _AT, _position, "0"), Key("kind", "json or utf8", _choice("json", "utf8"), "json")),
                  _corrupt, main="at"),
        FaultKind("stall", Stage.TIMING, "go silent at a position for a while, optionally sending heartbeat comments",
                  (Key("at", _AT, _position, "50%"),
                   Key("for", "duration", _duration(), "5s"),
                   Key("heartbeat", "duration", _duration(at_least=0.001))),
                  _stall, main="at"),
        FaultKind("latency", Stage.TIMING, "delay every write",
                  (Key("delay", "duration", _duration(at_most=60), "100ms"), Key("jitter", "duration", _duration(at_most=60), "0ms")),
                  _latency, main="delay"),
        FaultKind("bandwidth", Stage.TIMING, "send no faster than this",
                  (Key("rate", "bytes per second", _whole(1, 10**9), "1000"),), _bandwidth, main="rate"),
        FaultKind("fragment", Stage.WIRE, "cut the body into writes of this many bytes, splitting lines and characters",
                  (Key("size", "bytes", _whole(1, 2**20), "1"), Key("gap", "duration", _duration(at_most=60), "0ms")),
                  _fragment, main="size"),
        FaultKind("coalesce", Stage.WIRE, "send the whole body in one write, when the last chunk was due", (), _coalesce),
        FaultKind("split", Stage.WIRE, "send the whole body in exactly two writes, cut at a position (200b: bytes 0-199, then the rest), when the last chunk was due",
                  (Key("at", _AT, _position, "50%"),), _split, main="at"),
        FaultKind("eol", Stage.WIRE, "rewrite the line ends",
                  (Key("style", "crlf or cr", _choice("crlf", "cr"), "crlf"),), _eol, main="style"),
        FaultKind("garbage", Stage.WIRE, "send random bytes from a position, then close",
                  (Key("at", _AT, _position, "0"), Key("size", "bytes", _whole(1, 2**24), "64")), _garbage, main="at"),
        FaultKind("disconnect", Stage.END, "drop the connection at a position: a clean close or a TCP reset",
                  (Key("after", _AT, _position, "50%"), Key("mode", "close or reset", _choice("close", "reset"), "close")),
                  _disconnect, main="after"),
        FaultKind("bad-chunk", Stage.END,
                  "break the HTTP chunked framing at a position: a chunk size line that is not a number, then close",
                  (Key("at", _AT, _position, "50%"),), _bad_chunk, main="at"),
        FaultKind("slow-close", Stage.END,
                  "send the whole body, then end the response (its last chunk) only after this long",
                  (Key("for", "duration", _duration(), "5s"),), _slow_close, main="for"),
        FaultKind("refusal", Stage.ANSWER, "the answer turns into a refusal at a position",
                  (Key("at", _AT, _position, "50%"),
                   Key("message", "text", _text, "I'm sorry but I can't help with that.")),
                  _misbehave("refusal", "message"), main="at"),
        FaultKind("content-filter", Stage.ANSWER, "the answer stops at a position with the content-filter finish reason",
                  (Key("at", _AT, _position, "50%"),),
                  _misbehave("content_filter"), main="at"),
        FaultKind("length", Stage.ANSWER,
                  "a stop for length in the middle of the first tool call's arguments (half-way through an answer with no call)",
                  (), _misbehave("length")),
        FaultKind("bad-args", Stage.ANSWER,
                  "a tool call's arguments that are not JSON (json), or JSON that breaks the tool's schema (schema); "
                  "an answer with no call calls the first tool offered",
                  (Key("kind", "json or schema", _choice("json", "schema"), "json"),),
                  _misbehave("bad_arguments", "kind"), main="kind"),
        FaultKind("unknown-tool", Stage.ANSWER, "a call to a tool the request did not offer (the first call renamed, or one added)",
                  (Key("name", "tool name", _text, "sse_tape_unknown_tool"),),
                  _misbehave("unknown_tool", "name"), main="name"),
        FaultKind("duplicate-tool-id", Stage.ANSWER, "two tool calls with the same id",
                  (), _misbehave("duplicate_tool_id")),
        FaultKind("empty-answer", Stage.ANSWER, "the answer starts and finishes with nothing between", (),
                  _misbehave("empty_answer")),
        FaultKind("reasoning-only", Stage.ANSWER, "reasoning, then a finish with no answer (the recorded reasoning, or this text)",
                  (Key("text", "text", _text, "Let me think about this step by step."),),
                  _misbehave("reasoning_only", "text"), main="text"),
    )
}  # fmt: skip


class Injector:
    """Decides, per request, which faults apply: by path, by `times`, and by seeded chance.

    `times` and chance count the requests each fault has seen, in the replay
    state: a fault set on the server by its place in the list, a fault asked
    for in a request header by its text. Setting new faults starts the
    server's counts over.
    """

    def __init__(self, faults: Iterable[Fault], seed: int, state: ReplayState) -> None:
        self.seed = seed
        self.state = state
        self.faults: list[Fault] = list(faults)

    def set(self, faults: Iterable[Fault]) -> None:
        """Replace the server's faults, and start their counts over."""
        self.faults = list(faults)
        self.state.server_fault_turns.clear()

    def add(self, faults: Iterable[Fault]) -> None:
        """Add faults after the server's, leaving the counts of those already set as they are."""
        self.faults += faults

    def choose(self, request: Request, extra: Sequence[Fault] = ()) -> tuple[list[Fault], random.Random | None]:
        """The faults that apply to this request, and the generator for their random choices.

        The generator is seeded by the seed and the faults chosen with their
        counts, so the same seed gives the same choices; None when no fault applies.
        """
        chosen: list[Fault] = []
        labels: list[str] = []
        state = self.state
        for n, fault in enumerate([*self.faults, *extra]):
            if not fault.applies_to(request):
                continue
            if n < len(self.faults):
                turn = state.server_fault_turns.get(n, 0)
                state.server_fault_turns[n] = turn + 1
            else:
                turn = state.header_fault_turn(fault.spec)
            if fault.times is not None and turn >= fault.times:
                continue
            if fault.p < 1 and random.Random(f"{self.seed}:{fault.spec}:{turn}").random() >= fault.p:
                continue
            chosen.append(fault)
            labels.append(f"{fault.spec}:{turn}")
        if not chosen:
            return [], None
        return chosen, random.Random(f"{self.seed}:" + "|".join(labels))


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
    import tomllib  # 4 ms to import: only a named profile is looked for in files

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
            table = table.get(key, {}) if isinstance(table, Mapping) else {}
        if isinstance(table, Mapping):
            found.update((k, (file, v)) for k, v in table.items() if k not in found)
    if name in found:
        file, profile = found[name]
        specs = profile.get("faults") if isinstance(profile, Mapping) else None
        if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
            raise ConfigError(f'{file}: profile {name!r} needs faults = ["spec", ...]')
        try:
            return parse_faults(specs)
        except ConfigError as exc:  # the spec alone does not say where to fix it
            raise ConfigError(f"{file}: profile {name!r}: {exc}") from None
    if name in PROFILES:
        return parse_faults(PROFILES[name])
    names = sorted({*PROFILES, *found})
    raise ConfigError(f"unknown profile {name!r}: profiles are {', '.join(names)}")
