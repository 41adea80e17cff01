"""Server-Sent Events as a framing (WHATWG): blocks that end with an empty line."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..cassette import Chunk
from ..sse import ServerSentEvent, SSEDecoder, encode_event
from .base import Block, FrameEncoder, Framing, compact_json

__all__ = ["BLOCK_END", "SSE", "blocks_of", "event_ends", "whole_blocks"]

# The end of an SSE block: a line end, then an empty line. A CRLF is one line end, never CR then LF.
BLOCK_END = re.compile(rb"(?>\r\n|\r|\n)(?>\r\n|\r|\n)")
# A `data` field line: the field name alone, or followed by a colon (spec: "If the field name is data").
_DATA_LINE = re.compile(rb"(?:^|\r\n|\r|\n)data(?::|\r|\n|$)")


def blocks_of(body: bytes, at: int = 0) -> list[Block]:
    """The SSE blocks of `body`, their spans counted from `at`."""
    blocks, start = [], 0
    for m in BLOCK_END.finditer(body):
        # Only the stream's very first block may begin with a byte order mark a decoder drops: an empty line
        # before any other keeps a fresh decoder from dropping one there.
        lead = b"" if at + start == 0 else b"\n"
        events = SSEDecoder().feed(lead + body[start : m.end()])
        blocks.append(Block(at + start, at + m.end(), events[0] if events else None))
        start = m.end()
    if start < len(body):
        blocks.append(Block(at + start, at + len(body), None))
    return blocks


def whole_blocks(data: bytes) -> int:
    """How many bytes at the start of `data`, a stream's beginning, are whole SSE blocks. A CR at the very end
    may be the first half of a CRLF: the block it would end waits for the next byte."""
    ends = [m.end() for m in BLOCK_END.finditer(data)]
    if ends and ends[-1] == len(data) and data.endswith(b"\r"):
        ends.pop()
    return ends[-1] if ends else 0


def event_ends(body: bytes) -> list[int]:
    """Where each SSE event of `body` ends: the block ends of blocks with a data line, as `blocks_of` finds
    them, without decoding a single event (a recorder counts a stream's events this way, once it is over)."""
    ends, start = [], 0
    for m in BLOCK_END.finditer(body):
        block = body[start : m.end()]
        if start == 0 and block.startswith(b"\xef\xbb\xbf"):
            block = block[3:]  # the byte order mark a stream may begin with
        if _DATA_LINE.search(block):
            ends.append(m.end())
        start = m.end()
    return ends


class _SSEEncoder(FrameEncoder):
    def frame(self, event: ServerSentEvent) -> bytes:
        return encode_event(compact_json(event.data), event=None if event.event == "message" else event.event)

    def close(self) -> bytes:
        return b""


class _SSE(Framing):
    """Server-Sent Events (WHATWG): blocks that end with an empty line."""

    name = "sse"
    content_type = "text/event-stream"

    def blocks(self, body: bytes, at: int = 0) -> list[Block]:
        return blocks_of(body, at)

    def whole(self, data: bytes, at: int = 0) -> int:
        return whole_blocks(data)

    def encoder(self, sent: int = 0) -> FrameEncoder:
        return _SSEEncoder()

    def event_ends(self, body: bytes) -> list[int]:
        return event_ends(body)

    def events(self, chunks: Iterable[Chunk]) -> list[tuple[float, ServerSentEvent]]:
        decoder = SSEDecoder()  # one decoder for the stream: an event's id is the last one set before it
        return [(chunk.t, event) for chunk in chunks for event in decoder.feed(chunk.data)]

    def ending(self, frames: bytes, sent: int) -> bytes:
        return frames


SSE: Framing = _SSE()
"""Server-Sent Events."""
