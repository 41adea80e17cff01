"""Faults on how the response ends: the connection dropped, the HTTP framing broken, the end held back."""

from __future__ import annotations

from ..cassette import End
from ..plan import Write
from .cut import AtAPlace
from .model import Act, Fault, FaultKind, Key, Run, Stage, choice, duration, position

__all__ = ["END"]


def _unlengthed(run: Run) -> None:
    """Drop a recorded Content-Length, so the body goes out in chunks and its end is the last chunk."""
    run.head.headers = [(k, v) for k, v in run.head.headers if k.lower() != "content-length"]


class _Disconnect(AtAPlace):
    """The connection dropped at a position: a clean close, or a TCP reset."""

    def act(self, t: float) -> None:
        reset = self.fault["mode"] == "reset"
        self.run.end = End.UPSTREAM_RESET if reset else End.INTERRUPTED
        self.note(f"{'reset' if reset else 'closed'} at byte {self.bytes} ({t:.3f} s)")


class _BadChunk(AtAPlace):
    """A chunk size line that is not a number at a position, with what would have come next; then close."""

    def act(self, t: float) -> None:
        _unlengthed(self.run)
        self.run.head.unframed = (t, b"zz\r\n" + self.rest[:16] + b"\r\n")
        self.run.end = End.INTERRUPTED
        self.note(f"a chunk size line that is not one at byte {self.bytes} ({t:.3f} s), then closed")


class _SlowClose(Act):
    """The whole body, then its end (the last chunk) only after this long."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        self.seconds: float = fault["for"]
        self.last = 0.0

    def feed(self, writes: list[Write]) -> list[Write]:
        if writes:
            self.last = writes[-1][0]
        return writes

    def close(self, end_at: float) -> tuple[list[Write], float]:
        if (self.run.end or self.run.source_end) is not End.COMPLETE:
            self.note("the response does not end cleanly: left alone")
            return [], end_at
        _unlengthed(self.run)
        self.note(f"the body's end (the last chunk) {self.seconds:g} s after its last byte")
        return [], max(end_at, self.last) + self.seconds


_AT = "position"

#: The faults on the end, in the order `sse-tape faults` lists them.
END = (
    FaultKind("disconnect", Stage.END, "drop the connection at a position: a clean close or a TCP reset",
              (Key("after", _AT, position, "50%"), Key("mode", "close or reset", choice("close", "reset"), "close")),
              _Disconnect, main="after"),
    FaultKind("bad-chunk", Stage.END,
              "break the HTTP chunked framing at a position: a chunk size line that is not a number, then close",
              (Key("at", _AT, position, "50%"),), _BadChunk, main="at"),
    FaultKind("slow-close", Stage.END,
              "send the whole body, then end the response (its last chunk) only after this long",
              (Key("for", "duration", duration(), "5s"),), _SlowClose, main="for"),
)  # fmt: skip
