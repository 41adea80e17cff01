"""The one fault engine: the faults chosen for a response, as stages its stream flows through.

Every fault acts on a stream the same way, whether the stream is a replay
(known whole before its first byte), an upstream's answer being forwarded
or a model's answer being made: as a streaming stage. The stream comes as
timed writes (`(t, bytes)`, `t` in seconds from the request's arrival);
each fault's `Act` is fed them as they come and gives back the writes that
go on to the next, stage by stage (`Stage`: before, answer, events, timing,
wire, end), in the order given within a stage. What goes out of the last is
what the writer sends.

- What acts before the stream (a status, a delay of the headers, a hang, no
  body) acts on the response's head (`Plan`, with no body for a live
  stream) when the stages are made; one that answers in the stream's place
  leaves nothing to stream.
- An act that works between events (an error, a dropped event, a stall at
  the third event) sees whole blocks (`Blocks`: SSE blocks, or a JSON
  array's elements, as the head's `framing` says): a piece of an event
  waits for the rest of it, so that no fault splits one.
- An act that needs the whole stream (a position at a fraction of the events,
  `split`, a misbehaving answer, `coalesce`) says so (`FaultKind.whole`) or
  holds what it is fed itself: it gets the stream in one piece once the
  source has ended, so a live stream under it reaches the client then.
- An act that ends the stream (an error, a disconnect, garbage) sets
  `Run.end`: nothing more is fed to the stages before it, and those after it
  get what it sent, then their end.
- Heartbeats through a silence (`Plan.beats`), random bytes after the end
  (`Plan.noise`) and bytes outside the HTTP framing (`Plan.unframed`) are
  kept on the head, made as they are sent.

A replay runs the engine over its plan at once (`apply`); a live stream
feeds it as its source writes (`FaultedStream.feed`, then `close`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import replace

from ..cassette import End, Request
from ..dialects import Protocol
from ..plan import Plan, Write
from ..position import Position, PositionUnit
from ..sse import ServerSentEvent
from .model import Act, Fault, Run, Stage

__all__ = ["Blocks", "FaultedStream", "apply", "before_position"]


class Blocks:
    """Cuts writes into the stream's blocks in its framing (`plan.framing`: SSE blocks, an array's elements),
    each with the message it carries (None: a comment, or a block the stream never finished), due when its
    last byte is. A piece of a block waits for the rest.

    The framing is read from the response's head as writes come: a live answer's is known once its head is.
    """

    def __init__(self, head: Plan) -> None:
        self.head = head
        self.partial = b""
        self.t = 0.0
        self.offset = 0  # bytes before `partial` in the stream

    def feed(self, writes: Iterable[Write]) -> list[tuple[float, bytes, ServerSentEvent | None]]:
        """The blocks these writes finish."""
        made: list[tuple[float, bytes, ServerSentEvent | None]] = []
        for t, data in writes:
            self.t = t
            data = self.partial + data
            whole = self.head.framing.whole(data, self.offset)
            self.partial = data[whole:]
            if whole:
                made += self._blocks(t, data[:whole])
        return made

    def flush(self) -> list[Write]:
        """What is held of a block not finished yet, as one write (none if nothing is held): for a fault that
        has acted, after which the stream goes on as it comes."""
        partial, self.partial = self.partial, b""
        return [(self.t, partial)] if partial else []

    def rest(self) -> list[tuple[float, bytes, ServerSentEvent | None]]:
        """What is left at the stream's end: a block it never finished, as it is."""
        partial, self.partial = self.partial, b""
        return self._blocks(self.t, partial) if partial else []

    def _blocks(self, t: float, body: bytes) -> list[tuple[float, bytes, ServerSentEvent | None]]:
        base = self.offset
        self.offset += len(body)
        return [(t, body[b.start - base : b.end - base], b.event) for b in self.head.framing.blocks(body, base)]


def before_position(at: Position | str | None, events: int, sent: int, size: int, t: float) -> bool:
    """Whether a position lies before a block of `size` bytes due at `t`, after `events` events and `sent`
    bytes of the stream."""
    if not isinstance(at, Position):
        return False
    if at.unit is PositionUnit.EVENTS:
        return events >= at.value
    if at.unit is PositionUnit.BYTES:
        return sent + size > at.value
    return t >= at.value


class _Whole(Act):
    """An act that needs the whole stream: it is fed the stream in one piece once it has ended, its
    position at a fraction of the events then counted in events."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        self.held: list[Write] = []

    def feed(self, writes: list[Write]) -> list[Write]:
        self.held += writes
        return []

    def close(self, end_at: float) -> tuple[list[Write], float]:
        fault = self.fault
        where = fault.where
        if isinstance(where, Position) and where.unit is PositionUnit.FRACTION:
            count = len(self.run.head.framing.event_ends(b"".join(data for _, data in self.held)))
            key = "after" if fault.kind.key("after") is not None else "at"
            placed = Position(PositionUnit.EVENTS, float(round(where.value * count)))
            fault = replace(fault, values=tuple((k, placed if k == key else v) for k, v in fault.values))
        act = fault.kind.act(fault, self.run)
        # Its notes name the fault as it was given, not as it was placed.
        notes = len(self.run.notes)
        writes = act.feed(self.held)
        more, end_at = act.close(end_at)
        self.run.notes[notes:] = [(self.fault, what) for _, what in self.run.notes[notes:]]
        return writes + more, end_at


class FaultedStream:
    """The faults chosen for one response, as the stages its stream goes through.

    Made with the response's head (a `Plan`: for a live stream, its status and headers and no body), the
    faults that act before the stream act on it at once: when one answers in the stream's place
    (`head.replaced`), there is nothing to stream. Then `feed` each write of the stream as it comes and
    `close` once its source has ended; each returns the writes to send. `run.end` says how a fault ended
    the stream (its source may stop: nothing more is read), `end_at` when the response ends, and
    `take_notes` what each fault did.
    """

    def __init__(
        self,
        faults: Sequence[Fault],
        *,
        head: Plan,
        dialect: Protocol,
        rng: random.Random,
        request: Request | None = None,
        start: object | None = None,
    ) -> None:
        self.run = Run(dialect, rng, head, request, start)
        self.acts: list[Act] = []
        for stage in Stage:
            for fault in faults:
                if fault.stage is not stage or (head.replaced and (stage is not Stage.BEFORE or fault.kind.replaces)):
                    continue
                whole = fault.needs_whole_stream()
                self.acts.append(_Whole(fault, self.run) if whole else fault.kind.act(fault, self.run))
        self.done = head.replaced
        """Whether the stream is over for the faults: a fault answered in its place, ended it, or it ended."""
        self.end_at = head.end_at
        """When the response ends, in seconds from the request's arrival (once `done`)."""
        self._taken = 0

    @property
    def end(self) -> End | None:
        """How a fault ended the stream; None if none did."""
        return self.run.end

    @property
    def until(self) -> float | None:
        """When a disconnect at a time drops the connection, even while the source is silent."""
        return self.run.until

    def take_notes(self) -> list[tuple[Fault, str]]:
        """What the faults did since the last call: each fault with what it did."""
        notes = self.run.notes[self._taken :]
        self._taken = len(self.run.notes)
        return notes

    def feed(self, writes: list[Write]) -> list[Write]:
        """The writes to send for these, which the source wrote."""
        if self.done:
            return []
        for n, act in enumerate(self.acts):
            writes = act.feed(writes)
            if self.run.end is not None:  # this act ended the stream: those after it get what it sent
                return self._close_from(n, writes, None)
        return writes

    def close(self, end_at: float, end: End = End.COMPLETE) -> list[Write]:
        """The source has ended, as `end` says, and its response would end at `end_at`: the writes that are
        left, and what the faults still waiting do there."""
        if self.done:
            return []
        self.run.source_end = end
        return self._close_from(0, [], end_at)

    def expire(self) -> list[Write]:
        """The time of a disconnect at a time (`until`) has come while the source was silent: the
        connection drops now."""
        for n, act in enumerate(self.acts):
            expire = getattr(act, "expire", None)
            if expire is not None and not self.done:
                expire()
                return self._close_from(n, [], None)
        return []

    def _close_from(self, first: int, writes: list[Write], end_at: float | None) -> list[Write]:
        """Close the acts from `first` on, each fed what the one before it gave."""
        ending = end_at if end_at is not None else 0.0
        for n, act in enumerate(self.acts[first:]):
            if n:
                writes = act.feed(writes)
            more, ending = act.close(ending)
            writes = writes + more
        self.done = True
        self.end_at = ending
        return writes


def apply(
    faults: Sequence[Fault],
    plan: Plan,
    *,
    dialect: Protocol,
    rng: random.Random,
    request: Request | None = None,
    document: bool = False,
) -> list[tuple[Fault, str]]:
    """Run the faults over a plan known whole in advance (a replay's), as they run over a live stream:
    the plan becomes what they make of it. Returns each fault applied with what it did.

    `dialect` frames errors; `rng` makes the random choices; `request`, the request the plan answers,
    tells what tools it offered. A `document` (one JSON answer, not a stream) takes the faults before the
    stream, then what each other fault does to such an answer (`FaultKind.document`), in the order given; one
    that does nothing to it is not among those returned.
    """
    before = [f for f in faults if f.stage is Stage.BEFORE] if document else faults
    stream = FaultedStream(before, head=plan, dialect=dialect, rng=rng, request=request)
    if document:
        for fault in faults:
            if fault.stage is not Stage.BEFORE and fault.kind.document is not None and not plan.replaced:
                did = fault.kind.document(fault, stream.run)
                if did is not None:
                    stream.run.note(fault, did)
    elif not stream.done:
        writes = stream.feed(plan.writes)
        writes += stream.close(plan.end_at, plan.end)
        plan.rewrite(writes)
        plan.end = stream.end or plan.end
        plan.end_at = stream.end_at
    # In the order the faults act on the stream, stage by stage, whenever each decided (on a document, those
    # of the other stages after those before the stream).
    order = {id(act.fault): n for n, act in enumerate(stream.acts)}
    return sorted(stream.run.notes, key=lambda note: order.get(id(note[0]), len(order)))
