"""How an answer's messages are framed on the wire: Server-Sent Events, one JSON array written element by
element (Gemini's `streamGenerateContent` without `alt=sse`), newline-delimited JSON (Ollama's native API),
or AWS's binary event stream (Amazon Bedrock's streaming calls).

A `Framing` is pure, as the SSE codec under it is: bytes in, messages out, no sockets. Every stream is cut
into `Block`s (a span of the body and the message it carries, or none: a comment, the array's closing
bracket, a piece never finished), which is all the plan, the faults, replay and `check` need to know of a
framing. A message is a `ServerSentEvent` whichever the framing: an array's element and an NDJSON line are
unnamed events whose data is their JSON text, an event stream's message an event named by its type whose
data is its payload, so that a dialect reads them all alike. An encoder frames messages
again (`Framing.encoder`), to answer a request in another framing than the recording's (`reframe`), or to
frame a fault's error after the messages a stream has sent (`Framing.ending`).

The framings, one module each: `SSE`, `JSON_ARRAY`, `NDJSON` and `EVENT_STREAM`. The
framing a request asks for is its API's to say (`dialects.Protocol.stream_framing`); a recording's is told
by its content type and its request (`matching.framing_of`).
"""

from __future__ import annotations

from dataclasses import replace

from ..cassette import Chunk, End, Response
from .base import Block, FrameEncoder, Framing
from .event_stream import EVENT_STREAM
from .json_array import JSON_ARRAY
from .ndjson import NDJSON
from .sse import BLOCK_END, SSE, blocks_of, event_ends, whole_blocks

__all__ = [
    "BLOCK_END",
    "EVENT_STREAM",
    "FRAMINGS",
    "JSON_ARRAY",
    "NDJSON",
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


FRAMINGS: tuple[Framing, ...] = (SSE, JSON_ARRAY, NDJSON, EVENT_STREAM)
"""Every framing, SSE first."""


def by_content_type(value: str | None) -> Framing | None:
    """The framing a stream sent with this content type is in: SSE for `text/event-stream`, the JSON array for
    `application/json` (which a single JSON answer is sent with too: the request tells them apart, see
    `matching.framing_of`), NDJSON for `application/x-ndjson`, the event stream for
    `application/vnd.amazon.eventstream`; None for any other."""
    kind = (value or "").split(";")[0].strip().lower()
    return next((f for f in FRAMINGS if f.content_type.split(";")[0] == kind), None)


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
