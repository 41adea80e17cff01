"""What every framing is: the `Block`s a body is cut into, a `Framing` that cuts and encodes them, and its
`FrameEncoder` (see the package)."""

from __future__ import annotations

import json
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..cassette import Chunk
from ..sse import ServerSentEvent, SSEDecoder

__all__ = ["Block", "FrameEncoder", "Framing", "compact_json"]


@dataclass(frozen=True, slots=True)
class Block:
    """One block of a body: its byte span and the message it carries (an SSE event, an array's element).

    `event` is None for a comment (a heartbeat), a block without data, what closes an array, and an
    unfinished block at the end of the body.
    """

    start: int
    end: int
    event: ServerSentEvent | None


class FrameEncoder(ABC):
    """Frames messages one at a time, as a framing writes them; `close` gives what ends the stream."""

    @abstractmethod
    def frame(self, event: ServerSentEvent) -> bytes:
        """The bytes of the next message."""

    @abstractmethod
    def close(self) -> bytes:
        """What ends the stream after the messages framed (nothing, for SSE)."""


class Framing(ABC):
    """One way of framing a stream's messages on the wire."""

    name: ClassVar[str]
    """Its name (`sse`, `json-array`)."""
    content_type: ClassVar[str]
    """The content type a stream in this framing is sent with."""
    lines: ClassVar[bool] = True
    """Whether it is text whose line ends may be written otherwise (CRLF, CR); not a binary framing's bytes."""

    def __reduce__(self) -> str | tuple[Any, ...]:
        """Pickled as the name of the one instance its module holds (`SSE`...): read back, it is that instance,
        so that a plan kept in a shared replay state and read back is framed as it was (`plan.framing is SSE`).
        One its module holds under no name is pickled as any object is."""
        held = vars(sys.modules[type(self).__module__])
        named = next((name for name, value in held.items() if value is self), None)
        return named if named is not None else super().__reduce__()

    @abstractmethod
    def blocks(self, body: bytes, at: int = 0) -> list[Block]:
        """The blocks of `body`, their spans counted from `at`: the body's start (0), or a block's end."""

    @abstractmethod
    def whole(self, data: bytes, at: int = 0) -> int:
        """How many bytes at the start of `data` are whole blocks; `data` begins at byte `at` of the stream,
        the stream's start or a block's end."""

    @abstractmethod
    def encoder(self, sent: int = 0) -> FrameEncoder:
        """An encoder that frames messages after `sent` messages framed already."""

    def event_ends(self, body: bytes) -> list[int]:
        """Where each message of `body` ends."""
        return [b.end for b in self.blocks(body) if b.event is not None]

    def events(self, chunks: Iterable[Chunk]) -> list[tuple[float, ServerSentEvent]]:
        """The messages of a recorded body, each with the time of the chunk that completed it."""
        times, body = [], bytearray()
        for chunk in chunks:
            body += chunk.data
            times.append((len(body), chunk.t))
        found, n = [], 0
        for block in self.blocks(bytes(body)):
            if block.event is None:
                continue
            while times[n][0] < block.end:
                n += 1
            found.append((times[n][1], block.event))
        return found

    def ending(self, frames: bytes, sent: int) -> bytes:
        """SSE `frames` that end a stream (an error and what follows it), as this framing ends a stream
        after `sent` messages."""
        encoder = self.encoder(sent)
        return b"".join(encoder.frame(e) for e in SSEDecoder().feed(frames)) + encoder.close()

    def closes(self, block: bytes) -> bool:
        """Whether a block that carries no message is what ends the stream (an array's `]`)."""
        return False

    def opens(self, block: bytes) -> bool:
        """Whether a block carries what opens the stream besides its message (an array's `[`)."""
        return False

    def again(self, block: bytes) -> bytes:
        """A block that carries a message, framed to come again right after itself."""
        return block

    def first(self, block: bytes) -> bytes:
        """A block that carries a message, framed to come first in the stream."""
        return block

    def heartbeat(self, comment: bytes) -> bytes:
        """What an idle stream is kept open with: an SSE comment as it is."""
        return comment

    def corrupted(self, block: bytes, kind: str) -> bytes | None:
        """A block that carries a message, broken as the `corrupt` fault's `kind` (`json`, `utf8`) says, where
        this framing breaks it its own way; None (by default) where cutting the block's JSON short or putting
        invalid UTF-8 in its text (see `faults.corrupted`) is the way."""
        return None

    def problems(self, body: bytes) -> list[str]:
        """What is wrong with a body in this framing as a whole (a cut array), in words: none by default."""
        return []


def compact_json(data: str) -> str:
    """A message's data as one line of compact JSON, as the APIs' SSE carries it (as it is, if no JSON)."""
    try:
        return json.dumps(json.loads(data), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return data
