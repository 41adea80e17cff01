"""Faults on how bytes are written: cut into small writes, joined into one, split in two, other line ends,
random bytes."""

from __future__ import annotations

import re

from ..cassette import End
from ..plan import Noise, Plan, Write
from .cut import AtAPlace
from .model import Act, Fault, FaultKind, Key, Run, Stage, choice, duration, position, whole_number

__all__ = ["WIRE"]

_LINE_END = re.compile(rb"\r\n|\r|\n")


class _Fragment(Act):
    """Every write cut into pieces of at most this many bytes, `gap` apart (the rest pushed back by the gaps)."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        self.size: int = fault["size"]
        self.gap: float = fault["gap"]
        self.shift = 0.0  # the gaps so far push every later write back
        run.head.apart = True
        self.note(f"writes of at most {self.size} bytes")

    def feed(self, writes: list[Write]) -> list[Write]:
        out: list[Write] = []
        size, gap = self.size, self.gap
        for t, data in writes:
            pieces = [data[i : i + size] for i in range(0, len(data), size)]
            out.extend((t + self.shift + n * gap, piece) for n, piece in enumerate(pieces))
            self.shift += max(len(pieces) - 1, 0) * gap
        return out

    def close(self, end_at: float) -> tuple[list[Write], float]:
        return [], end_at + self.shift


class _Coalesce(Act):
    """The whole body in one write, when its last byte was due."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        self.held: list[Write] = []
        self.note("one write")

    def feed(self, writes: list[Write]) -> list[Write]:
        self.held += writes
        return []

    def close(self, end_at: float) -> tuple[list[Write], float]:
        if not self.held:
            return [], end_at
        return [(self.held[-1][0], b"".join(data for _, data in self.held))], end_at


class _Split(Act):
    """The whole body in exactly two writes, cut at a position, when its last byte was due."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        self.held: list[Write] = []

    def feed(self, writes: list[Write]) -> list[Write]:
        self.held += writes
        return []

    def close(self, end_at: float) -> tuple[list[Write], float]:
        if not self.held:
            self.note("no body to split")
            return [], end_at
        plan = Plan(200, [], self.held)
        offset = plan.offset(self.fault["at"])
        body, last = plan.body, self.held[-1][0]
        if not 0 < offset < len(body):
            where = "start" if offset <= 0 else "end"  # a byte past the end is taken as the end
            self.note(f"one write: {self.fault['at']} is the body's {where}, not inside its {len(body)} bytes")
            return [(last, body)], end_at
        # Both go when the last chunk was due, as coalesce's one write does: whatever a stall sends through its
        # silence (heartbeats, due by time) then comes before them, never between, inside a line.
        self.run.head.apart = True
        self.note(f"two writes, split at byte {offset} of {len(body)}")
        return [(last, body[:offset]), (last, body[offset:])], end_at


class _Eol(Act):
    """Every line end (and the heartbeats') written as CRLF or CR."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        self.style = b"\r\n" if fault["style"] == "crlf" else b"\r"
        self.cr = False  # the last write ended in a CR, which a LF at the start of the next makes one line end
        self.told = False
        run.beat_rewrites.append(self.rewrite)

    def rewrite(self, data: bytes) -> bytes:
        """`data` with its line ends in this style."""
        return _LINE_END.sub(self.style, data)

    def feed(self, writes: list[Write]) -> list[Write]:
        framing = self.run.head.framing  # known once the head is, for a live answer
        if not self.told:
            self.told = True
            lines = framing.lines
            self.note(f"line ends {self.fault['style']}" if lines else f"{framing.name} has no line ends: left alone")
        if not framing.lines:
            return writes
        out: list[Write] = []
        for t, data in writes:
            if self.cr and data.startswith(b"\n"):
                data = data[1:]
            if data:
                self.cr = data.endswith(b"\r")
                out.append((t, self.rewrite(data)))
        return out


class _Garbage(AtAPlace):
    """Random bytes from a position, made as they are sent; then the connection closes."""

    def act(self, t: float) -> None:
        size: int = self.fault["size"]
        self.run.head.noise = Noise(t, size, self.run.rng.getrandbits(64))
        self.run.end = End.INTERRUPTED
        self.note(f"{size} random bytes at byte {self.bytes}, then closed")


_AT = "position"

#: The faults on the wire, in the order `sse-tape faults` lists them.
WIRE = (
    FaultKind("fragment", Stage.WIRE, "cut the body into writes of this many bytes, splitting lines and characters",
              (Key("size", "bytes", whole_number(1, 2**20), "1"), Key("gap", "duration", duration(at_most=60), "0ms")),
              _Fragment, main="size"),
    FaultKind("coalesce", Stage.WIRE, "send the whole body in one write, when the last chunk was due", (), _Coalesce),
    FaultKind("split", Stage.WIRE, "send the whole body in exactly two writes, cut at a position (200b: bytes 0-199, then the rest), when the last chunk was due",
              (Key("at", _AT, position, "50%"),), _Split, main="at", whole=lambda fault: True),
    FaultKind("eol", Stage.WIRE, "rewrite the line ends",
              (Key("style", "crlf or cr", choice("crlf", "cr"), "crlf"),), _Eol, main="style"),
    FaultKind("garbage", Stage.WIRE, "send random bytes from a position, then close",
              (Key("at", _AT, position, "0"), Key("size", "bytes", whole_number(1, 2**24), "64")), _Garbage, main="at"),
)  # fmt: skip
