"""The plan: what goes on the wire for one response, and when.

Pacing turns a recorded response into a `Plan` (status, headers, writes at
offsets from the request's arrival, and how the response ends); the faults
run over its writes (`faults.stream.apply`); `wire.send` sends it. A plan
also carries what goes beside its body (heartbeats, noise, bytes outside the
HTTP framing), made as they are sent. It knows where its messages (SSE
events, an array's elements: see `framing`) lie in the body: the blocks are found the first time something asks for them, then
kept right as the plan is cut and spliced (a resumption, a misbehaving answer).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from .cassette import End, Response
from .framing import BLOCK_END, SSE, Block, Framing, blocks_of, event_ends, whole_blocks
from .position import Position, PositionUnit
from .sse import SSEDecoder

__all__ = [
    "Beats",
    "Block",
    "Heartbeats",
    "Noise",
    "Plan",
    "Write",
    "blocks_of",
    "data_swapped",
    "event_ends",
    "whole_blocks",
]

#: One write: when it is due, in seconds from the request's arrival, and its bytes.
Write = tuple[float, bytes]


@dataclass(frozen=True, slots=True)
class Beats:
    """A comment sent every `every` seconds after `start`, for as long as that stays before `until`:
    heartbeats through a silence, produced as they are sent."""

    start: float
    every: float
    until: float
    data: bytes

    def count(self) -> int:
        """How many comments: every k >= 1 with `start + k * every` before `until`."""
        return max(math.ceil((self.until - self.start) / self.every) - 1, 0) if self.every > 0 else 0

    def __iter__(self) -> Iterator[Write]:
        for k in range(1, self.count() + 1):
            yield self.start + k * self.every, self.data


@dataclass(frozen=True, slots=True)
class Noise:
    """`size` random bytes from a generator seeded with `seed`, due at `t` after every write, produced as sent."""

    t: float
    size: int
    seed: int

    def __iter__(self) -> Iterator[Write]:
        rng = random.Random(self.seed)
        left = self.size
        while left > 0:
            piece = min(left, 65536)
            yield self.t, rng.randbytes(piece)
            left -= piece


@dataclass(slots=True)
class Plan:
    """What the server will send: status, headers, and writes at offsets from the request's arrival."""

    status: int
    headers: list[tuple[str, str]]
    writes: list[Write]
    end: End = End.COMPLETE
    end_at: float = 0.0
    """When the response ends, in seconds from the request's arrival."""
    headers_at: float | None = None
    """When the headers go out; None: with the first write."""
    hang: bool = False
    """Accept the request and never answer."""
    replaced: bool = False
    """Something else took the stream's place (a status, no body, no answer): stream faults pass it by."""
    beats: list[Beats] = field(default_factory=list)
    """Heartbeat comments through silences, besides the writes."""
    noise: Noise | None = None
    """Random bytes after the writes."""
    apart: bool = False
    """Send each write apart, even those due at the same moment (which otherwise go out as one)."""
    unframed: Write | None = None
    """Bytes written to the connection as they are, outside the body's HTTP framing, at a time after the
    writes (a chunk size line that is not one); then the connection closes."""
    framing: Framing = SSE
    """How the body frames its messages: what its blocks are."""
    _blocks: list[Block] | None = None

    @classmethod
    def of(cls, response: Response, offsets: Sequence[float], end_at: float) -> Plan:
        """The plan that sends `response`'s chunks at `offsets` and ends at `end_at`."""
        writes = [(t, chunk.data) for t, chunk in zip(offsets, response.chunks, strict=True)]
        return cls(response.status, list(response.headers), writes, response.end, end_at)

    def is_event_stream(self) -> bool:
        """Whether its content type is `text/event-stream`."""
        kind = next((v for k, v in self.headers if k.lower() == "content-type"), "")
        return kind.split(";")[0].strip().lower() == "text/event-stream"

    def copy(self) -> Plan:
        """A plan of its own, the same as this one, to change without changing this one; the blocks found
        already come along (one plan worked out per recording serves every replay of it)."""
        return Plan(
            self.status,
            list(self.headers),
            list(self.writes),
            self.end,
            self.end_at,
            headers_at=self.headers_at,
            hang=self.hang,
            replaced=self.replaced,
            beats=list(self.beats),
            noise=self.noise,
            apart=self.apart,
            unframed=self.unframed,
            framing=self.framing,
            _blocks=self._blocks,  # never changed in place: a change makes a new list
        )

    @property
    def body(self) -> bytes:
        """Every byte the plan writes, in order."""
        return b"".join(data for _, data in self.writes)

    def size(self) -> int:
        """How many bytes go out in all: the writes, the heartbeats and the noise."""
        beats = sum(b.count() * len(b.data) for b in self.beats)
        return self._size() + beats + (self.noise.size if self.noise is not None else 0)

    def timeline(self) -> Iterator[Write]:
        """Every write in the order it is due, heartbeats and noise made as they are reached."""
        if not self.beats and self.noise is None:
            return iter(self.writes)
        return self._merged()

    def _merged(self) -> Iterator[Write]:
        pending: list[tuple[float, int, bytes, Iterator[Write]]] = []
        for n, beats in enumerate(self.beats):
            _push(pending, n, iter(beats))
        for t, data in self.writes:
            while pending and pending[0][0] < t:
                yield _pop(pending)
            yield t, data
        if self.noise is not None:
            yield from self.noise
        while pending and pending[0][0] < self.end_at:
            yield _pop(pending)

    @property
    def blocks(self) -> list[Block]:
        """The blocks of the body in its framing, found once and kept right through every change."""
        if self._blocks is None:
            self._blocks = self.framing.blocks(self.body)
        return self._blocks

    @property
    def events(self) -> list[Block]:
        """The blocks that dispatch an event."""
        return [b for b in self.blocks if b.event is not None]

    # --- finding places ----------------------------------------------------------------------

    def offset(self, where: Position) -> int:
        """The byte offset a position names: after that many events, at that byte, or where the stream is then."""
        if where.unit is PositionUnit.BYTES:
            return min(int(where.value), sum(len(data) for _, data in self.writes))
        if where.unit is PositionUnit.SECONDS:
            seen = 0
            for t, data in self.writes:
                if t >= where.value:
                    return seen
                seen += len(data)
            return seen
        events = self.events
        count = round(where.value * len(events)) if where.unit is PositionUnit.FRACTION else int(where.value)
        if count <= 0:
            return events[0].start if events else 0
        return events[count - 1].end if count <= len(events) else sum(len(data) for _, data in self.writes)

    def time_at(self, offset: int) -> float:
        """When the byte at `offset` is due (the last write's time, past the end)."""
        n = self._split(offset)
        if n < len(self.writes):
            return self.writes[n][0]
        return self.writes[-1][0] if self.writes else 0.0

    # --- changing the bytes; the blocks follow ---------------------------------------------------

    def resume_after(self, last_event_id: str) -> bool:
        """Start the stream where its last event ID first became `last_event_id` (after the block that set it),
        as a server resuming a client's reconnection does; whether it ever did (else the plan is left whole).

        What follows keeps its timing, counted from when that block went out; a reconnection time the
        skipped part set (`retry:`) is sent first, so the client keeps it.
        """
        if not last_event_id:
            return False  # an empty id is no place in the stream: a client sends none
        body, decoder = self.body, SSEDecoder()
        found = None
        for block in self.blocks:
            decoder.feed(body[block.start : block.end])
            if decoder.last_event_id == last_event_id:
                found = block.end
                break
        if found is None:
            return False
        since = self.time_at(found - 1)
        self.cut_before(found)
        self.advance(since)
        if decoder.retry is not None:
            retry = f"retry: {decoder.retry}\n\n".encode()
            self.insert(0, [(self.writes[0][0] if self.writes else 0.0, retry)])
        return True

    def advance(self, seconds: float) -> None:
        """Start the plan `seconds` into it: what was due by then is due at once, the rest that much sooner.

        Heartbeats stay where they are: advance a plan before faults add any.
        """
        self.writes = [(max(t - seconds, 0.0), data) for t, data in self.writes]
        self.end_at = max(self.end_at - seconds, 0.0)

    def cut_before(self, offset: int) -> None:
        """Keep only the bytes from `offset` on."""
        del self.writes[: self._split(offset)]
        self._splice(0, offset, b"")

    def cut(self, offset: int) -> None:
        """Keep only the bytes before `offset`."""
        size = self._size()
        del self.writes[self._split(offset) :]
        self._splice(offset, size, b"")

    def insert(self, offset: int, writes: Sequence[Write]) -> None:
        """Put `writes` (at their own times) before the byte at `offset`."""
        n = self._split(offset)
        self.writes[n:n] = writes
        self._splice(offset, offset, b"".join(data for _, data in writes))

    def append(self, t: float, data: bytes) -> None:
        """Add `data` at the end of the body, due at `t`."""
        size = self._size()
        self.writes.append((t, data))
        self._splice(size, size, data)

    def with_body(self, body: bytes) -> Plan:
        """A copy whose body is `body`, in one write due when the last one was (one JSON answer rewritten)."""
        out = self.copy()
        out.rewrite([(self.writes[-1][0] if self.writes else 0.0, body)])
        return out

    def spliced(self, pieces: Sequence[tuple[int, int, bytes]]) -> Plan:
        """A copy with the byte spans of `pieces` (start, end, new bytes; in order, none overlapping) replaced,
        each write keeping its time: a write that ended inside a span ends at the same place in its new bytes
        (events rewritten in place: a response given the client's id, say)."""
        out = self.copy()
        out.rewrite(_spliced(self.writes, pieces))
        return out

    def rewrite(self, writes: list[Write]) -> None:
        """New writes with other bytes (other line ends, say): the blocks are found again when asked for."""
        self.writes = writes
        self._blocks = None

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

    def _size(self) -> int:
        return sum(len(data) for _, data in self.writes)

    def _splice(self, start: int, end: int, data: bytes) -> None:
        """Keep the blocks right after bytes `start`..`end` became `data`.

        The body is read again from the block that ends at or after `start`
        (a block cut short there may now go on, a CR there may now be half of a
        CRLF) until a block ends where an old block, wholly after the change,
        now starts: from there on the old blocks stand, moved.
        """
        if self._blocks is None:
            return
        if self.framing is not SSE:
            self._blocks = None  # found again, whole, when next asked for
            return
        blocks = self._blocks
        shift = len(data) - (end - start)
        i = next((n for n, b in enumerate(blocks) if b.end >= start), len(blocks))
        pos = blocks[i].start if i < len(blocks) else start
        moved = {b.start + shift: n for n, b in enumerate(blocks) if b.start >= end}
        body = self.body
        read: list[Block] = []
        for m in BLOCK_END.finditer(body, pos):
            events = SSEDecoder().feed(body[pos : m.end()])
            read.append(Block(pos, m.end(), events[0] if events else None))
            pos = m.end()
            if pos >= start + len(data) and pos in moved:
                rest = blocks[moved[pos] :]
                self._blocks = blocks[:i] + read + [Block(b.start + shift, b.end + shift, b.event) for b in rest]
                return
        if pos < len(body):
            read.append(Block(pos, len(body), None))
        self._blocks = blocks[:i] + read


class Heartbeats:
    """The heartbeats the faults put through silences of a stream still being made (the plan's `beats`, which grow as its faults act), each sent when due."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.seen = 0
        self.pending: list[tuple[float, int, bytes, Iterator[Write]]] = []

    def next_due(self) -> float | None:
        """When the next heartbeat is due, if any is."""
        for n in range(self.seen, len(self.plan.beats)):
            _push(self.pending, n, iter(self.plan.beats[n]))
        self.seen = len(self.plan.beats)
        return self.pending[0][0] if self.pending else None

    def due_before(self, t: float) -> list[Write]:
        """The heartbeats due before `t`, in order."""
        due: list[Write] = []
        while (first := self.next_due()) is not None and first < t:
            due.append(_pop(self.pending))
        return due


def _push(pending: list[tuple[float, int, bytes, Iterator[Write]]], n: int, beats: Iterator[Write]) -> None:
    first = next(beats, None)
    if first is not None:
        heapq.heappush(pending, (first[0], n, first[1], beats))


def _pop(pending: list[tuple[float, int, bytes, Iterator[Write]]]) -> Write:
    t, n, data, beats = heapq.heappop(pending)
    _push(pending, n, beats)
    return t, data


def _spliced(writes: list[Write], pieces: Sequence[tuple[int, int, bytes]]) -> list[Write]:
    """`writes` with the byte spans of `pieces` replaced by their new bytes, each write keeping its time."""
    body = b"".join(data for _, data in writes)
    new_body = bytearray()
    at = 0
    starts: list[tuple[int, int, int, int]] = []  # (old start, old end, new start, new end)
    for start, end, data in pieces:
        new_body += body[at:start]
        starts.append((start, end, len(new_body), len(new_body) + len(data)))
        new_body += data
        at = end
    new_body += body[at:]

    def place(x: int) -> int:
        shift = 0
        for start, end, new_start, new_end in starts:
            if x <= start:
                break
            if x < end:
                return new_start + min(x - start, new_end - new_start)
            shift = new_end - end
        return x + shift

    out: list[Write] = []
    seen = 0
    for t, data in writes:
        a, b = place(seen), place(seen + len(data))
        seen += len(data)
        out.append((t, bytes(new_body[a:b])))
    if out:  # whatever `place` left between the last boundary and the end
        last_t, last = out[-1]
        out[-1] = (last_t, last + bytes(new_body[place(seen) :]))
    return out


def data_swapped(block: bytes, old: str, new: str) -> bytes | None:
    """An SSE block whose event's data `old`, on one line as the JSON protocols write it, is `new` in its place,
    the rest of the block as it was; None when `old` is not on one line of it."""
    data = old.encode()
    at = block.find(data)
    if at < 0 or "\n" in old or "\r" in old:
        return None
    return block[:at] + new.encode() + block[at + len(data) :]
