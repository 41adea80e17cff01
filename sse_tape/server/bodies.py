"""Request bodies, read under a limit before anything parses them.

A body is read as it arrives, counted as it was sent and as it is once
decompressed, and refused (`BodyRefused`, which the server answers in the
API's own error shape) the moment either count passes the limit: a 413, with
no more of it held than the limit. A compressed body (`Content-Encoding: gzip`
or `deflate`) is decompressed a piece at a time, each piece bounded, so that a
gzip bomb is refused at the limit without ever being expanded whole, and so
that decompressing one large body gives the event loop back between pieces. A
body that claims an encoding it does not have is a 400; an encoding sse-tape
cannot read, a 415.

The body is kept decompressed, and the request's `Content-Encoding` is dropped
with it: matching, the journal, the cassette and the upstream a recorder
forwards to all see the plain body, so that a recording made from a gzipped
request replays to a plain one and the other way round (see
docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterable
from typing import Any

from aiohttp import web

from .. import _json
from ..responder import IN_PLACE

__all__ = ["ENCODINGS", "BodyRefused", "parsed_body", "read_body"]

#: The content codings sse-tape decompresses, and the `wbits` zlib reads each with.
ENCODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}

# How much a body grows by in one step of decompression, before the event loop gets its turn.
_STEP = 256 * 1024


class BodyRefused(Exception):
    """A request body sse-tape will not read: `status` (413, 400 or 415), the error `code` and the message."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def _too_large(limit: int, what: str = "") -> BodyRefused:
    return BodyRefused(413, f"the request body{what} is larger than {limit:,} bytes (see --max-body)", "body_too_large")


def _coding_of(header: str | None) -> str | None:
    """The one content coding `header` (a request's `Content-Encoding`) names, lower-cased, or None for none
    (`identity` is none); raises `BodyRefused` (415) for one sse-tape cannot decompress, or for several."""
    if header is None:
        return None
    codings = [c.strip().lower() for c in header.split(",") if c.strip() and c.strip().lower() != "identity"]
    if not codings:
        return None
    if len(codings) > 1 or codings[0] not in ENCODINGS:
        shown = header.encode("utf-8", "surrogateescape").decode("ascii", "replace")[:100]
        raise BodyRefused(
            415, f"Content-Encoding {shown!r} is not supported: send gzip, deflate or no encoding", "bad_encoding"
        )
    return codings[0]


async def read_body(http: web.BaseRequest, limit: int) -> tuple[bytes, bool]:
    """The body of `http`, decompressed, and whether it was compressed; raises `BodyRefused` when it is larger
    than `limit` bytes (as sent or decompressed), claims an encoding it does not have, or has one sse-tape
    cannot read. Refused for its `Content-Length` alone, none of it is read."""
    coding = _coding_of(http.headers.get("Content-Encoding"))
    length = http.content_length
    if length is not None and length > limit:
        raise _too_large(limit)
    if coding is None:
        content = http.content
        if content.is_eof():  # all of it came with the head (most bodies): taken as it is, with no reading loop
            body = content.read_nowait()
            if len(body) > limit:
                raise _too_large(limit)
            return body, False
        return await _plain(content.iter_any(), limit), False
    return await _decompressed(http.content.iter_any(), coding, limit), True


async def _plain(chunks: AsyncIterable[bytes], limit: int) -> bytes:
    pieces: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        pieces.append(chunk)
    return b"".join(pieces)


async def _decompressed(chunks: AsyncIterable[bytes], coding: str, limit: int) -> bytes:
    """The body `chunks` carry, decompressed under `limit` a bounded step at a time."""
    inflater = _Inflater(coding)
    pieces: list[bytes] = []
    sent = size = 0
    async for chunk in chunks:
        sent += len(chunk)
        if sent > limit:
            raise _too_large(limit)
        pending = chunk
        while pending:
            piece, pending = inflater.step(pending, min(_STEP, limit - size + 1))
            size += len(piece)
            if size > limit:
                raise _too_large(limit, " decompressed")
            pieces.append(piece)
            if pending:
                await asyncio.sleep(0)  # a body that grows much: others get their turn between steps
    if sent and not inflater.ended:
        raise inflater.refused("it ends too soon")
    return b"".join(pieces)


class _Inflater:
    """One body's decompressor: gzip (of any number of members, as RFC 1952 allows) or deflate (zlib's
    format, or raw deflate as some clients send it)."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self._zlib = zlib.decompressobj()
        self._started = False
        self.ended = False
        """Whether the data fed so far ends where its compressed stream ends."""

    def step(self, data: bytes, room: int) -> tuple[bytes, bytes]:
        """At most `room` bytes of what `data` decompresses to, and what of `data` is still to decompress."""
        if not self._started or self.ended:
            if self.ended and self.coding == "deflate":
                raise self.refused("there are bytes after its end")
            self._zlib = zlib.decompressobj(self._wbits(data))
            self._started, self.ended = True, False
        try:
            piece = self._zlib.decompress(data, room)
        except zlib.error:
            raise self.refused(f"it is not {self.coding} data") from None
        if self._zlib.eof:
            self.ended = True
            return piece, self._zlib.unused_data  # gzip: the next member
        return piece, self._zlib.unconsumed_tail

    def _wbits(self, data: bytes) -> int:
        if self.coding == "deflate" and data[0] & 0x0F != 8:
            return -zlib.MAX_WBITS  # no zlib header: raw deflate (RFC 1951), as aiohttp reads it too
        return ENCODINGS[self.coding]

    def refused(self, why: str) -> BodyRefused:
        """The 400 of a body that is not what its encoding says, and `why`."""
        return BodyRefused(400, f"the request body says Content-Encoding {self.coding}, but {why}", "bad_encoding")


async def parsed_body(body: bytes) -> Any:
    """The JSON value of a request's body, None when it is empty or not JSON; raises `_json.TooLarge` when it
    nests too deep or holds too many keys and values. A large body is parsed in a thread, a step at a time
    (`_json.parse`'s `stepwise`), so that other requests are answered meanwhile."""
    if not body:
        return None
    try:
        if len(body) <= IN_PLACE:
            return _json.parse(body, max_values=_json.MAX_VALUES)
        return await asyncio.to_thread(_json.parse, body, max_values=_json.MAX_VALUES, stepwise=True)
    except _json.TooLarge:
        raise
    except ValueError:  # not JSON (nor UTF-8): compared as bytes
        return None
