"""How an answer's messages are framed on the wire: Server-Sent Events, or one JSON array written element by
element (Gemini's `streamGenerateContent` without `alt=sse`).

A `Framing` is pure, as the SSE codec under it is: bytes in, messages out, no sockets. Every stream is cut
into `Block`s (a span of the body and the message it carries, or none: a comment, the array's closing
bracket, a piece never finished), which is all the plan, the faults, replay and `check` need to know of a
framing. A message is a `ServerSentEvent` whichever the framing: an array's element is an unnamed event
whose data is the element's JSON text, so that a dialect reads both alike. An encoder frames messages
again (`Framing.encoder`), to answer a request in another framing than the recording's (`reframe`), or to
frame a fault's error after the messages a stream has sent (`Framing.ending`).

The framings: `SSE` and `JSON_ARRAY` (issue 31 adds NDJSON and AWS's event stream beside them). The
framing a request asks for is its API's to say (`dialects.Protocol.stream_framing`); a recording's is told
by its content type and its request (`matching.framing_of`).
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import ClassVar

from .cassette import Chunk, End, Response
from .sse import ServerSentEvent, SSEDecoder, encode_event

__all__ = [
    "BLOCK_END",
    "JSON_ARRAY",
    "SSE",
    "Block",
    "FrameEncoder",
    "Framing",
    "blocks_of",
    "by_content_type",
    "event_ends",
    "reframe",
    "whole_blocks",
]


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

    def problems(self, body: bytes) -> list[str]:
        """What is wrong with a body in this framing as a whole (a cut array), in words: none by default."""
        return []


# --- SSE ---------------------------------------------------------------------------------------------------

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
        return encode_event(_compact(event.data), event=None if event.event == "message" else event.event)

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


# --- one JSON array ----------------------------------------------------------------------------------------

# What may come between an array's values; what ends a number, `true`, `false` or `null`.
_SPACE = b" \t\r\n"
_SCALAR_END = re.compile(rb"[\s,\]]")
# What changes the depth in a value, or opens a string; what ends a string.
_STRUCTURE = re.compile(rb'["{}\[\]]')
_IN_STRING = re.compile(rb'["\\]')
_BOM = b"\xef\xbb\xbf"
# Google's separator between two elements, and its end of the array (after each element's last brace).
_SEPARATOR = b"\n,\r\n"
_CLOSE = b"\n]"


def _value_end(body: bytes, i: int, final: bool) -> int | None:
    """Where the JSON value that starts at `body[i]` ends (the index after it), or None if it goes on past
    the body's end. A number or a word at the end of a body ends there only when the body is `final` (no
    more of it to come: `12` may be the start of `123`)."""
    first = body[i : i + 1]
    if first not in (b"{", b"[", b'"'):
        m = _SCALAR_END.search(body, i)
        return m.start() if m is not None else (len(body) if final else None)
    depth = 0
    while True:
        if first == b'"':
            while True:  # inside a string: to its closing quote, past every escape
                m = _IN_STRING.search(body, i + 1)
                if m is None:
                    return None
                if m.group() == b"\\":
                    i = m.start() + 1
                    continue
                i = m.start()
                break
            if depth == 0:
                return i + 1
        elif first in (b"{", b"["):
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return i + 1
        m = _STRUCTURE.search(body, i + 1)
        if m is None:
            return None
        i, first = m.start(), m.group()


def _elements(body: bytes, opened: bool, final: bool = True) -> tuple[list[tuple[int, int]], bool, bool]:
    """The spans of the whole elements in `body`, an array's bytes from its start (`opened` False) or from
    just after an element, and all there is of them unless more may come (`final` False); whether the array
    was opened, and whether it was closed (a `]` after them)."""
    spans: list[tuple[int, int]] = []
    i, n = 0, len(body)
    if not opened and body.startswith(_BOM):
        i = len(_BOM)
    while i < n:
        byte = body[i : i + 1]
        if byte in (b" ", b"\t", b"\r", b"\n"):
            i += 1
        elif not opened:
            if byte != b"[":
                return spans, False, False  # not an array: no element in it
            opened = True
            i += 1
        elif byte == b",":
            i += 1
        elif byte == b"]":
            return spans, True, True
        else:
            end = _value_end(body, i, final)
            if end is None:
                break
            spans.append((i, end))
            i = end
    return spans, opened, False


def _pretty(data: str) -> bytes:
    """An element as Google writes it: JSON indented by two spaces (the text as it is, if it is no JSON)."""
    try:
        return json.dumps(json.loads(data), indent=2, ensure_ascii=False).encode()
    except (ValueError, UnicodeEncodeError):
        return data.encode("utf-8", "surrogatepass")


def _compact(data: str) -> str:
    """A message's data as one line of compact JSON, as the APIs' SSE carries it (as it is, if no JSON)."""
    try:
        return json.dumps(json.loads(data), ensure_ascii=False, separators=(",", ":"))
    except ValueError:
        return data


class _ArrayEncoder(FrameEncoder):
    def __init__(self, sent: int) -> None:
        self.count = sent

    def frame(self, event: ServerSentEvent) -> bytes:
        lead = _SEPARATOR if self.count else b"["
        self.count += 1
        return lead + _pretty(event.data)

    def close(self) -> bytes:
        return _CLOSE if self.count else b"[]"


class _JSONArray(Framing):
    """One JSON array whose elements are the messages, written element by element: Gemini's
    `streamGenerateContent` without `alt=sse` (`[{…}` then `\\n,\\r\\n{…}` for each chunk, then `\\n]`).

    A block runs from the end of the element before it (or the body's start, the `[` with it) to the end of
    its own element, so that a cut after a block leaves the array open, as a dropped connection does; what
    follows the last element (`\\n]`) is a block with no message.
    """

    name = "json-array"
    content_type = "application/json; charset=UTF-8"

    def blocks(self, body: bytes, at: int = 0) -> list[Block]:
        spans, _, _ = _elements(body, opened=at > 0)
        blocks, start = [], 0
        for first, end in spans:
            event = ServerSentEvent(data=body[first:end].decode("utf-8", "replace"))
            blocks.append(Block(at + start, at + end, event))
            start = end
        if start < len(body):
            blocks.append(Block(at + start, at + len(body), None))
        return blocks

    def whole(self, data: bytes, at: int = 0) -> int:
        spans, _, _ = _elements(data, opened=at > 0, final=False)
        return spans[-1][1] if spans else 0

    def encoder(self, sent: int = 0) -> FrameEncoder:
        return _ArrayEncoder(sent)

    def closes(self, block: bytes) -> bool:
        return block.strip(_SPACE).startswith(b"]")

    def opens(self, block: bytes) -> bool:
        return block.lstrip(_BOM + _SPACE).startswith(b"[")

    def again(self, block: bytes) -> bytes:
        spans, _, _ = _elements(block, opened=not self.opens(block))
        return _SEPARATOR + block[spans[0][0] :] if spans else block

    def first(self, block: bytes) -> bytes:
        spans, _, _ = _elements(block, opened=True)
        return b"[" + block[spans[0][0] :] if spans else block

    def heartbeat(self, comment: bytes) -> bytes:
        return b"\n"  # whitespace between two elements: JSON has no comments

    def problems(self, body: bytes) -> list[str]:
        spans, opened, closed = _elements(body, opened=False)
        if not opened:
            return ["the answer is not a JSON array"]
        if not closed:
            return [f"the array is cut short after {len(spans)} elements: no closing ]"]
        after = body[body.rindex(b"]") + 1 :].strip(_SPACE)
        return [f"bytes after the array's end: {after[:40]!r}"] if after else []


SSE: Framing = _SSE()
"""Server-Sent Events."""
JSON_ARRAY: Framing = _JSONArray()
"""One JSON array, written element by element."""


def by_content_type(value: str | None) -> Framing | None:
    """The framing a stream sent with this content type is in: SSE for `text/event-stream`, the JSON array for
    `application/json` (which a single JSON answer is sent with too: the request tells them apart, see
    `matching.framing_of`); None for any other."""
    kind = (value or "").split(";")[0].strip().lower()
    return next((f for f in (SSE, JSON_ARRAY) if f.content_type.split(";")[0] == kind), None)


def reframe(response: Response, source: Framing, target: Framing) -> Response:
    """A recorded stream in `source`'s framing as `target` frames the same messages: each message due when
    the chunk that completed it was, what ends the stream when the recording ended (a recording cut short
    stays cut short: an array it gives is never closed), with `target`'s content type."""
    encoder = target.encoder()
    chunks = [Chunk(t, encoder.frame(event)) for t, event in source.events(response.chunks)]
    if response.end is End.COMPLETE and (close := encoder.close()):
        chunks.append(Chunk(response.end_time, close))
    kept = tuple((k, v) for k, v in response.headers if k.lower() not in _DESCRIBE_BODY)
    return replace(response, headers=(("content-type", target.content_type), *kept), chunks=tuple(chunks))


# The headers that describe a body as it was framed, set anew for another framing.
_DESCRIBE_BODY = frozenset({"content-type", "content-length", "transfer-encoding"})
