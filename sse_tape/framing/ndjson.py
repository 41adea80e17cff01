"""Newline-delimited JSON as a framing: one JSON value a line (Ollama's `/api/chat` and `/api/generate`,
`application/x-ndjson`).

A block is a line with its newline; its message is an unnamed event whose data is the line's text (without
the newline, nor a CR before it). A blank line carries no message, and a line not yet ended (a stream cut
inside it) is a block with none. NDJSON has no comments: an idle stream is kept open with nothing.
"""

from __future__ import annotations

from ..sse import ServerSentEvent
from .base import Block, FrameEncoder, Framing, compact_json

__all__ = ["NDJSON"]


class _LineEncoder(FrameEncoder):
    def frame(self, event: ServerSentEvent) -> bytes:
        return compact_json(event.data).encode() + b"\n"

    def close(self) -> bytes:
        return b""


class _NDJSON(Framing):
    """One JSON value a line, each line ended by `\\n` (see the module)."""

    name = "ndjson"
    content_type = "application/x-ndjson"

    def blocks(self, body: bytes, at: int = 0) -> list[Block]:
        blocks, start = [], 0
        while (end := body.find(b"\n", start)) >= 0:
            line = body[start:end].rstrip(b"\r")
            text = line.decode("utf-8", "replace")
            event = ServerSentEvent(data=text) if text.strip() else None
            blocks.append(Block(at + start, at + end + 1, event))
            start = end + 1
        if start < len(body):
            blocks.append(Block(at + start, at + len(body), None))
        return blocks

    def whole(self, data: bytes, at: int = 0) -> int:
        return data.rfind(b"\n") + 1

    def encoder(self, sent: int = 0) -> FrameEncoder:
        return _LineEncoder()

    def heartbeat(self, comment: bytes) -> bytes:
        return b""  # a blank line is no JSON: a client that parses each line would fail on it

    def problems(self, body: bytes) -> list[str]:
        if body and not body.endswith(b"\n"):
            lines = body.count(b"\n")
            return [f"the stream is cut inside a line: {lines} whole line{'' if lines == 1 else 's'}, then no newline"]
        return []


NDJSON: Framing = _NDJSON()
"""Newline-delimited JSON."""
