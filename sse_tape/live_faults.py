"""Faults on a stream still being made: a live model's answer, as the model writes it.

A replay knows its whole body before its first byte goes out, so each fault
rewrites its plan (`faults.apply`). A model's answer comes a frame at a
time; `LiveFaults` applies the same faults to it as it passes. What acts
before the stream (status, ttfb, hang, empty) rewrites a plan with no body
yet, as for a replay. Then each SSE block goes through the stages in turn:
which bytes it becomes (error, drop, duplicate, corrupt), where the
connection ends (garbage, disconnect), when its bytes are due (stall,
latency, bandwidth) and how they are written (fragment, coalesce, eol).

The stream may come in pieces that cut its blocks anywhere (an upstream's
reads): a piece of a block waits for the rest of it, so that each fault
sees whole events; the model's frames are whole blocks, and pass at once.

A position in events, bytes or seconds is reached as the stream goes. A
fraction of the events (`50%`) needs the whole stream in advance: a fault
placed so leaves a live stream alone, and its note says so. A position past
the stream's end acts at the end as a replay's does where it can (an error
goes in before the terminal frames, a disconnect or garbage ends the
stream, a stall holds the end back), and leaves the stream alone where it
cannot (an event to drop, duplicate or corrupt that never came).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .cassette import End
from .dialects import Generation as Dialect
from .dialects.events import Error, Start
from .faults import Fault, Stage, apply, corrupted, error_frames
from .plan import Beats, Noise, Plan, Write, blocks_of, event_ends, whole_blocks
from .position import Position, PositionUnit
from .sse import ServerSentEvent, encode_comment

__all__ = ["LiveFaults", "needs_whole_stream"]

_LINE_END = re.compile(rb"\r\n|\r|\n")
# A block of the stream on its way through the faults, and the event it dispatches (None: a comment).
_Piece = tuple[bytes, ServerSentEvent | None]

_HEARTBEAT = encode_comment("heartbeat")


# What each fault that acts on every write does, in words for the journal.
_SHAPES = {
    "latency": lambda f: f"each write {f['delay']:g} s later, jitter {f['jitter']:g} s",
    "bandwidth": lambda f: f"at most {f['rate']} bytes/s",
    "fragment": lambda f: f"writes of at most {f['size']} bytes",
    "eol": lambda f: f"line ends {f['style']}",
}


def _position(fault: Fault) -> Position | str | None:
    """Where a fault acts: its `at` or `after`; None for one that acts on every write."""
    for key in ("at", "after"):
        if fault.kind.key(key) is not None:
            value: Position | str = fault[key]
            return value
    return None


def _before(at: Position | str | None, events: int, sent: int, size: int, t: float) -> bool:
    """Whether a position lies before a block of `size` bytes that comes at `t`, after `events` events and
    `sent` bytes."""
    if not isinstance(at, Position):
        return False
    if at.unit is PositionUnit.EVENTS:
        return events >= at.value
    if at.unit is PositionUnit.BYTES:
        return sent + size > at.value
    return t >= at.value


@dataclass(slots=True)
class _Seen:
    """What an event-stage fault has seen of the stream so far: what the faults before it made of it."""

    events: int = 0
    bytes: int = 0
    sent: list[ServerSentEvent] = field(default_factory=list)


def needs_whole_stream(fault: Fault) -> bool:
    """Whether a fault needs the whole body in advance, which a stream still being made cannot give:
    one at a fraction of the events (`50%`), `split` (two writes of the whole body), or a misbehaviour
    (the whole answer rewritten)."""
    at = _position(fault)
    whole = fault.name == "split" or fault.stage is Stage.ANSWER
    return whole or (isinstance(at, Position) and at.unit is PositionUnit.FRACTION)


class LiveFaults:
    """The faults chosen for one live stream, applied to its frames as they come.

    `start` opens the stream when an error comes before any event. Feed each
    frame with `feed`, then `close` when the model is done; each returns the
    writes to send, due at offsets from the request's arrival. `end` says how
    a fault ended the stream (the model's answer is then cut off: stop it),
    `noise` what random bytes follow the writes, `until` when a disconnect
    at a time drops the connection, and `notes` what each fault did.
    """

    def __init__(
        self, faults: Sequence[Fault], *, dialect: Dialect, rng: random.Random, start: Start | None = None
    ) -> None:
        self.dialect = dialect
        self.rng = rng
        self.start = start
        self.notes: list[tuple[Fault, str]] = []
        self.end: End | None = None
        """How a fault ended the stream; None while it goes on, or when the model ends it."""
        self.end_at = 0.0
        """When the stream ends at the earliest, in seconds from the request's arrival (a stall holds it)."""
        self.noise: Noise | None = None
        self.until: float | None = None
        """When a disconnect at a time drops the connection, in seconds from the request's arrival."""
        self._before = [f for f in faults if f.stage is Stage.BEFORE]
        self._pending: list[Fault] = []  # the faults that act at a position, until they do
        self._shapers: list[Fault] = []  # those that act on every write
        self._dropper: Fault | None = None  # a disconnect at a time
        self._held: list[bytes] | None = None  # what coalesce holds back
        self._shift = 0.0  # how much later than the source wrote it a byte is due (ttfb, stalls, gaps, latency)
        for fault in faults:
            at = _position(fault)
            if fault.stage is Stage.BEFORE:
                continue
            if needs_whole_stream(fault):
                what = "split" if fault.name == "split" else f"at {at}"
                self.notes.append((fault, f"{what} needs the whole stream in advance: a live stream is left alone"))
            elif fault.name in ("bad-chunk", "slow-close"):
                self.notes.append((fault, "HTTP framing faults act on replays only: a live stream is left alone"))
            elif fault.name == "disconnect" and isinstance(at, Position) and at.unit is PositionUnit.SECONDS:
                self.until, self._dropper = at.value, fault
            elif at is not None:
                self._pending.append(fault)
            elif fault.name == "coalesce":
                self._held = []
                self.notes.append((fault, "one write when the stream ends"))
            else:
                self._shapers.append(fault)
                self.notes.append((fault, _SHAPES[fault.name](fault)))
                if fault.name == "latency":
                    self._shift += fault["delay"]  # every write that much later
        self._seen = {id(f): _Seen() for f in self._pending if f.stage is Stage.EVENTS}
        self._order = {id(f): n for n, f in enumerate(faults)}
        self._partial = b""  # the start of a block whose end has not come yet
        self._t = 0.0  # when the last piece came
        self._bytes_in = 0  # what the source wrote so far
        self._events_out = self._bytes_out = 0  # what went out of the event stage so far
        self._last = 0.0  # when the last write is due: none goes before it

    def take_notes(self) -> list[tuple[Fault, str]]:
        """What the faults did since the last call: each fault with what it did."""
        notes, self.notes = self.notes, []
        return notes

    def before(self, plan: Plan) -> None:
        """Apply the faults that act before the stream to `plan`, which has the answer's status and headers.

        When one replaces the stream (a status, no answer, no body), the
        plan is the answer and the model need not run.
        """
        self.notes += apply(self._before, plan, dialect=self.dialect, rng=self.rng)
        if plan.headers_at is not None:
            self._shift += plan.headers_at
            self._last = plan.headers_at

    def feed(self, t: float, frame: bytes) -> list[Write]:
        """The writes for a frame (or any piece) the stream made at `t`."""
        self._t = t
        data = self._partial + frame
        whole = whole_blocks(data)
        self._partial = data[whole:]
        return self._blocks(t, data[:whole])

    def _blocks(self, t: float, body: bytes) -> list[Write]:
        """The writes for these blocks, which came at `t`."""
        writes: list[Write] = []
        base = self._bytes_in
        for block in blocks_of(body, base):
            if self.end is not None:
                break
            data = body[block.start - base : block.end - base]
            for piece in self._events(t, [(data, block.event)], self._event_faults()):
                writes += self._wire(t, piece)
            self._bytes_in += len(data)
        if self.end is not None:
            self._unreached()
            writes += self._flush()
        return writes

    def close(self) -> list[Write]:
        """The writes that end a stream its source has finished, and what the faults still waiting do there."""
        partial, self._partial = self._partial, b""
        writes = self._blocks(self._t, partial)  # a block the stream never finished goes as it is
        if self.end is not None:
            return writes
        for fault in list(self._pending):
            if fault not in self._pending:  # it acted on the error that an earlier one put in at the end
                continue
            if fault.name == "error" and self.end is None:
                writes += self._error_at_end(fault)
            elif fault.name == "stall":
                writes += self._silence(self._last, fault)
            elif fault.name in ("garbage", "disconnect") and self.end is None:
                self._ends(fault, self._last)
        self._unreached()
        if self._dropper is not None and self.end is None:
            self.notes.append((self._dropper, f"the stream ended before {self.until:g} s: left alone"))
        self.end_at = max(self.end_at, self._last)
        return writes + self._flush()

    def _unreached(self) -> None:
        """Note the faults whose place the stream, now ended, never came to."""
        for fault in list(self._pending):
            self._done(fault, f"the stream ended before {_position(fault)}: left alone")

    def _error_at_end(self, fault: Fault) -> list[Write]:
        """An error placed past the end of a stream that had no terminal frame to put it before (Gemini's has
        none): it goes in at the end, as on a replay."""
        sent = self._seen[id(fault)].sent
        if not sent:
            self._done(fault, "not an event stream: left alone")
            return []
        if any(isinstance(e, Error) for e in self.dialect.decode(sent)):
            self._done(fault, "the stream has ended in an error already: left alone")
            return []
        self._done(fault, f"{self.dialect.name} error after event {len(sent)}")
        self.end = End.COMPLETE
        # The faults after it count their positions in what it made of the stream, as on a replay.
        later = [f for f in self._event_faults() if self._order[id(f)] > self._order[id(fault)]]
        pieces = self._events(self._t, _blocks_in(error_frames(fault, self.dialect, sent, None)), later)
        return [write for piece in pieces for write in self._wire(self._t, piece)]

    def _event_faults(self) -> list[Fault]:
        """The faults of the event stage still waiting to act, in the order given."""
        return [f for f in self._pending if f.stage is Stage.EVENTS]

    def expire(self, t: float) -> None:
        """The time of a disconnect at a time (`until`) has come, at `t`: the connection drops now."""
        assert self._dropper is not None
        self.end = End.UPSTREAM_RESET if self._dropper["mode"] == "reset" else End.INTERRUPTED
        how = "reset" if self.end is End.UPSTREAM_RESET else "closed"
        self.notes.append((self._dropper, f"{how} at byte {self._bytes_out} ({t:.3f} s)"))

    # --- the stages -----------------------------------------------------------------------------------

    def _events(self, t: float, pieces: list[_Piece], faults: list[Fault]) -> list[bytes]:
        """What blocks become: themselves, nothing, twice, broken, or the API's error in their place.

        The faults act in the order given, each on what the ones before it made of the stream, and each
        counts its position in that, as on a replay: a `drop:at=1` before an `error:at=3` leaves the
        error three events after the start of the stream without the dropped one, and a `drop` after an
        `error` may drop the error's own event.
        """
        for fault in faults:
            seen = self._seen[id(fault)]
            made: list[_Piece] = []
            for data, event in pieces:
                if fault in self._pending and (what := self._event_fault(fault, seen, t, data, event)) is not None:
                    if fault.name == "error":  # the stream ends in the API's error: nothing after it goes
                        self.end = End.COMPLETE
                        made += _blocks_in(what[0])
                        break
                    made += [(piece, event) for piece in what]
                else:
                    made.append((data, event))
                seen.events += event is not None
                seen.bytes += len(data)
                if event is not None:
                    seen.sent.append(event)
            pieces = made
        return [piece for piece, _ in pieces]

    def _event_fault(
        self, fault: Fault, seen: _Seen, t: float, data: bytes, event: ServerSentEvent | None
    ) -> list[bytes] | None:
        """What an event-stage fault makes of the block it sees next, if it acts on it; None if it does not."""
        name, at = fault.name, _position(fault)
        if name == "error":
            # At event 0 the error goes before the first event, as a replay's does: after what precedes it.
            first = isinstance(at, Position) and at.unit is PositionUnit.EVENTS and at.value == 0
            reached = _before(at, seen.events, seen.bytes, len(data), t) and not (first and event is None)
            if not ((event is not None and self.dialect.is_terminal(event)) or reached):
                return None
            start = self.start
            if start is None and event is not None and not seen.sent:  # the stream opens as it would have
                start = next((e for e in self.dialect.decode([event]) if isinstance(e, Start)), None)
            self._done(fault, f"{self.dialect.name} error after event {len(seen.sent)}")
            return [error_frames(fault, self.dialect, seen.sent, start)]
        if event is None:
            return None
        if at == "role":
            hit = seen.events == 0
        elif at == "done":
            hit = event.data == "[DONE]"
        else:
            hit = _before(at, seen.events, seen.bytes, len(data), t)
        if not hit:
            return None
        self._done(fault, f"{name} event {seen.events}")
        if name == "drop":
            return []
        if name == "duplicate":
            return [data, data]
        return [corrupted(data, fault["kind"])]

    def _wire(self, t: float, data: bytes) -> list[Write]:
        """The writes that send one piece the model wrote at `t`: cut, delayed, split and rewritten by the faults."""
        due = max(t + self._shift, self._last)
        writes: list[Write] = []
        for fault in [f for f in self._pending if f.name in ("garbage", "disconnect", "stall")]:
            at = _position(fault)
            assert isinstance(at, Position)
            if not _before(at, self._events_out, self._bytes_out, len(data), t):
                continue
            if fault.name == "stall":
                writes += self._silence(due, fault)
                due = self._last
                continue
            # The connection ends at the byte named, else before this piece.
            data = data[: max(int(at.value) - self._bytes_out, 0)] if at.unit is PositionUnit.BYTES else b""
            self._ends(fault, due)
            break
        if data:
            self._events_out += len(event_ends(data))
            self._bytes_out += len(data)
            writes.append((due, data))
        for fault in self._shapers:
            writes = self._shape(fault, writes)
        if writes:
            self._last = max(self._last, writes[-1][0])
        if self._held is not None:
            self._held += [data for _, data in writes]
            return []
        return writes

    def _shape(self, fault: Fault, writes: list[Write]) -> list[Write]:
        """One of the faults that act on every write, applied to these."""
        name = fault.name
        shaped: list[Write] = []
        if name == "latency":
            # The delay is in every due time already: the jitter moves each write, never before its source
            # wrote it, and the writes keep their order.
            last = self._last
            for due, data in writes:
                last = max(last, due + max(self.rng.uniform(-fault["jitter"], fault["jitter"]), -fault["delay"]))
                shaped.append((last, data))
        elif name == "bandwidth":
            rate: int = fault["rate"]
            piece = max(rate // 20, 1)  # a write every 50 ms at most, so no burst outruns the rate
            free_at = self._last
            for due, data in writes:
                for i in range(0, len(data), piece):
                    start = max(due, free_at)
                    shaped.append((start, data[i : i + piece]))
                    free_at = start + len(data[i : i + piece]) / rate
            self.end_at = max(self.end_at, free_at)
        elif name == "fragment":
            size: int = fault["size"]
            gap: float = fault["gap"]
            for due, data in writes:
                pieces = [data[i : i + size] for i in range(0, len(data), size)]
                shaped += ((due + n * gap, p) for n, p in enumerate(pieces))
                self._shift += max(len(pieces) - 1, 0) * gap
        else:  # eol: this stream's frames end their lines with LF alone, never split across writes
            style = b"\r\n" if fault["style"] == "crlf" else b"\r"
            shaped = [(due, _LINE_END.sub(style, data)) for due, data in writes]
        return shaped

    def _silence(self, at: float, fault: Fault) -> list[Write]:
        """A `stall` from `at`: everything later is due that much later, with heartbeats through it if asked."""
        seconds: float = fault["for"]
        every: float | None = fault["heartbeat"]
        self._shift += seconds
        self._last = max(self._last, at + seconds)
        self.end_at = max(self.end_at, self._last)
        beats = f", a heartbeat every {every:g} s" if every else ""
        self._done(fault, f"silent for {seconds:g} s from {at:.3f} s{beats}")
        return list(Beats(at, every, at + seconds, _HEARTBEAT)) if every else []

    def _ends(self, fault: Fault, at: float) -> None:
        """A `garbage` or `disconnect` ends the stream here."""
        if fault.name == "garbage":
            self.noise = Noise(at, fault["size"], self.rng.getrandbits(64))
            self.end = End.INTERRUPTED
            self._done(fault, f"{fault['size']} random bytes at byte {self._bytes_out}, then closed")
        else:
            self.end = End.UPSTREAM_RESET if fault["mode"] == "reset" else End.INTERRUPTED
            how = "reset" if self.end is End.UPSTREAM_RESET else "closed"
            self._done(fault, f"{how} at byte {self._bytes_out} ({at:.3f} s)")

    def _done(self, fault: Fault, what: str) -> None:
        self.notes.append((fault, what))
        self._pending.remove(fault)

    def _flush(self) -> list[Write]:
        """What coalesce held back, as one write when the last piece was due."""
        if not self._held:
            return []
        body, self._held = b"".join(self._held), []
        return [(self._last, body)]


def _blocks_in(frames: bytes) -> list[_Piece]:
    """Frames a fault made, as blocks that the faults after it see one by one."""
    return [(frames[b.start : b.end], b.event) for b in blocks_of(frames)]
