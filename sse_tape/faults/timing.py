"""Faults on when bytes go out: a silence (with heartbeats through it), a delay on every write, a rate."""

from __future__ import annotations

from dataclasses import replace

from ..plan import Write
from ..sse import ServerSentEvent, encode_comment
from .model import Act, Fault, FaultKind, Key, Run, Stage, duration, position, whole_number
from .stream import Blocks, before_position

__all__ = ["TIMING"]

_HEARTBEAT = encode_comment("heartbeat")


class _Stall(Act):
    """Silence at a position (between blocks) for a while, optionally with heartbeat comments through it:
    everything after it that much later."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        self.at = fault.where
        self.seconds: float = fault["for"]
        self.every: float | None = fault["heartbeat"]
        self.blocks = Blocks(run.head)
        self.events = self.bytes = 0
        self.acted = False

    def feed(self, writes: list[Write]) -> list[Write]:
        if self.acted:
            return [(t + self.seconds, data) for t, data in writes]
        return self._blocks(self.blocks.feed(writes))

    def _blocks(self, blocks: list[tuple[float, bytes, ServerSentEvent | None]]) -> list[Write]:
        out: list[Write] = []
        for t, data, event in blocks:
            if not self.acted and before_position(self.at, self.events, self.bytes, len(data), t):
                self._silence(t)
            out.append((t + self.seconds, data) if self.acted else (t, data))
            self.events += event is not None
            self.bytes += len(data)
        if self.acted:  # from here on everything goes as it comes, that much later
            out += [(t + self.seconds, data) for t, data in self.blocks.flush()]
        return out

    def _silence(self, t: float) -> None:
        self.acted = True
        head = self.run.head
        # The heartbeats of a silence after this one move with it.
        head.beats = [
            replace(b, start=b.start + self.seconds, until=b.until + self.seconds) if b.start >= t else b
            for b in head.beats
        ]
        framing = self.run.head.framing
        beat = framing.heartbeat(_HEARTBEAT) if self.every else b""
        if self.every and beat:
            self.run.heartbeats(t, self.every, t + self.seconds, beat)
        beats = (
            f", a heartbeat every {self.every:g} s"
            if beat
            else (f", no heartbeat: {framing.name} has none" if self.every else "")
        )
        self.note(f"silent for {self.seconds:g} s at byte {self.bytes} ({t:.3f} s){beats}")

    def close(self, end_at: float) -> tuple[list[Write], float]:
        writes = [] if self.acted else self._blocks(self.blocks.rest())
        if not self.acted:  # past the end: the end waits
            self._silence(writes[-1][0] if writes else self.blocks.t)
        return writes, end_at + self.seconds


class _Latency(Act):
    """Every write this much later, give or take the jitter; their order is kept."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        self.delay: float = fault["delay"]
        self.jitter: float = fault["jitter"]
        self.last = 0.0
        self.shift: float | None = None  # how much later than its source the last write goes
        self.note(f"each write {self.delay:g} s later, jitter {self.jitter:g} s")

    def feed(self, writes: list[Write]) -> list[Write]:
        out: list[Write] = []
        for t, data in writes:
            self.last = max(self.last, t + max(self.delay + self.run.rng.uniform(-self.jitter, self.jitter), 0.0))
            self.shift = self.last - t
            out.append((self.last, data))
        return out

    def close(self, end_at: float) -> tuple[list[Write], float]:
        shift = self.delay if self.shift is None else self.shift
        return [], end_at + max(shift, 0.0)


class _Bandwidth(Act):
    """No faster than a rate: writes in pieces, each when the rate allows."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        self.rate: int = fault["rate"]
        self.piece = max(self.rate // 20, 1)  # a write every 50 ms at most, so no burst outruns the rate
        self.free_at = 0.0
        self.note(f"at most {self.rate} bytes/s")

    def feed(self, writes: list[Write]) -> list[Write]:
        out: list[Write] = []
        for t, data in writes:
            for i in range(0, len(data), self.piece):
                start = max(t, self.free_at)
                out.append((start, data[i : i + self.piece]))
                self.free_at = start + len(data[i : i + self.piece]) / self.rate
        return out

    def close(self, end_at: float) -> tuple[list[Write], float]:
        return [], max(end_at, self.free_at)


_AT = "position"

#: The faults on timing, in the order `sse-tape faults` lists them.
TIMING = (
    FaultKind("stall", Stage.TIMING, "go silent at a position for a while, optionally sending heartbeat comments",
              (Key("at", _AT, position, "50%"),
               Key("for", "duration", duration(), "5s"),
               Key("heartbeat", "duration", duration(at_least=0.001))),
              _Stall, main="at"),
    FaultKind("latency", Stage.TIMING, "delay every write",
              (Key("delay", "duration", duration(at_most=60), "100ms"), Key("jitter", "duration", duration(at_most=60), "0ms")),
              _Latency, main="delay"),
    FaultKind("bandwidth", Stage.TIMING, "send no faster than this",
              (Key("rate", "bytes per second", whole_number(1, 10**9), "1000"),), _Bandwidth, main="rate"),
)  # fmt: skip
