"""What the faults that end a stream at a place share: the stream goes as far as that place, then ends."""

from __future__ import annotations

from ..plan import Write
from ..position import Position, PositionUnit
from ..sse import ServerSentEvent
from .model import Act, Fault, Run
from .stream import Blocks, before_position

__all__ = ["AtAPlace"]


class AtAPlace(Act):
    """A fault that ends the stream at a position: what comes before it goes out, then `act` ends it.

    A position in events falls between blocks (a comment after the events counted stays out); one in
    bytes may fall inside a block; one in seconds ends the stream when that time comes, even in a
    silence of a live stream (`Run.until`). A position past the end acts at the end.
    """

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        where = fault.where
        assert isinstance(where, Position)
        self.at = where
        self.blocks = Blocks(run.head)
        self.events = self.bytes = 0
        self.ended = False
        self.ended_at = 0.0
        self.rest = b""
        """The bytes the stream had after the place, as far as they had come."""
        if where.unit is PositionUnit.SECONDS:
            run.until = where.value if run.until is None else min(run.until, where.value)

    def act(self, t: float) -> None:
        """End the stream here, at `t`; `self.bytes` went out before it."""
        raise NotImplementedError

    def feed(self, writes: list[Write]) -> list[Write]:
        return self._blocks(self.blocks.feed(writes), final=False)

    def _blocks(self, blocks: list[tuple[float, bytes, ServerSentEvent | None]], *, final: bool) -> list[Write]:
        at = self.at
        out: list[Write] = []
        for n, (t, data, event) in enumerate(blocks):
            # A place after so many events comes before the next event, not before a comment after them.
            between = event is not None or final or at.unit is not PositionUnit.EVENTS
            if between and before_position(at, self.events, self.bytes, len(data), t):
                keep = data[: max(int(at.value) - self.bytes, 0)] if at.unit is PositionUnit.BYTES else b""
                if keep:
                    out.append((t, keep))
                    self.bytes += len(keep)
                self.rest = data[len(keep) :] + b"".join(d for _, d, _ in blocks[n + 1 :]) + self.blocks.partial
                self._end(at.value if at.unit is PositionUnit.SECONDS else t)
                return out
            out.append((t, data))
            self.events += event is not None
            self.bytes += len(data)
        return out

    def _end(self, t: float) -> None:
        self.ended, self.ended_at = True, t
        self.act(t)

    def expire(self) -> None:
        """Its time has come while the source was silent: end the stream now."""
        self._end(self.at.value)

    def close(self, end_at: float) -> tuple[list[Write], float]:
        if self.ended:
            return [], self.ended_at
        writes = self._blocks(self.blocks.rest(), final=True)
        if self.ended:
            return writes, self.ended_at
        if self.at.unit is PositionUnit.SECONDS:
            if self.at.value >= end_at:
                self.note(f"the stream ended before {self.at.value:g} s: left alone")
                return writes, end_at
            self._end(self.at.value)  # in a silence at the end
            return writes, self.ended_at
        self._end(writes[-1][0] if writes else self.blocks.t)  # past the end: at the end
        return writes, self.ended_at
