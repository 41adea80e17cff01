"""Reading one answer as a client reads it, timing every read from the socket.

A `Reading` is what one request got: the status and headers as they came,
the body's bytes each with the time of the socket read that brought them,
and how the answer ended (whole, cut, broken, or silent for too long). The
reader keeps each read as it arrives and parses it with `h11` as it goes,
so that the times are those of the socket, not of a library's buffering;
a compressed body (`Content-Encoding: gzip` or `deflate`, which a gateway
may add) is decompressed as it comes.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import zlib
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

import h11

from .._exceptions import ConfigError
from ..cassette import Request
from ..wire import end_to_end

__all__ = ["Ending", "Piece", "Reading", "read"]

# Headers the probe sets itself: where the request goes, its length, and that the connection ends with it.
_SET_HERE = ("host", "content-length", "connection")


class Ending(StrEnum):
    """How an answer ended."""

    COMPLETE = "complete"
    """Its body ended as HTTP says it ends (the last chunk, the length, or the close of a body sent until
    then)."""
    CUT = "cut"
    """The connection closed, or was reset, before the body's end."""
    BROKEN = "broken"
    """What came was not HTTP (a chunk size that is no number, a header that is no header)."""
    SILENT = "silent"
    """Nothing came for longer than the reader waits."""
    REFUSED = "refused"
    """No connection: nothing listens there."""


@dataclass(frozen=True, slots=True)
class Piece:
    """Bytes of the body, and when the read that brought them came: seconds since the request was sent."""

    t: float
    data: bytes


@dataclass(frozen=True, slots=True)
class Reading:
    """What one request got, as its client read it."""

    status: int | None
    """None when no answer's head came."""
    headers: tuple[tuple[str, str], ...]
    """As they came, names as the wire spelled them."""
    pieces: tuple[Piece, ...]
    """The body (after its transfer and content encodings), piece by piece as it came."""
    ending: Ending
    detail: str = ""
    """What broke, for an answer that did not end whole."""
    head_at: float | None = None
    """When the answer's head came, in seconds since the request was sent."""

    @property
    def body(self) -> bytes:
        """The whole body."""
        return b"".join(piece.data for piece in self.pieces)

    @property
    def first_byte(self) -> float | None:
        """When the body's first byte came, in seconds since the request was sent."""
        return self.pieces[0].t if self.pieces else None

    def header(self, name: str) -> str | None:
        """The first header of this name (any case), if any."""
        name = name.lower()
        return next((value for key, value in self.headers if key.lower() == name), None)

    def times(self) -> list[tuple[int, float]]:
        """For each piece, where in the body it ends and when it came: to tell when each byte came."""
        found, at = [], 0
        for piece in self.pieces:
            at += len(piece.data)
            found.append((at, piece.t))
        return found


class _Reader(asyncio.Protocol):
    """Keeps each read from the socket, parsed as it comes."""

    def __init__(self) -> None:
        self.http = h11.Connection(h11.CLIENT)
        self.sent = 0.0
        self.status: int | None = None
        self.headers: tuple[tuple[str, str], ...] = ()
        self.head_at: float | None = None
        self.pieces: list[Piece] = []
        self.last = 0.0
        self.ending: Ending | None = None
        self.detail = ""
        self.coding = b""
        """The body's content coding: `gzip` and `deflate` are undone as they come."""
        self.decompress: zlib._Decompress | None = None
        self.done = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        self.last = now
        self._parse(data, now - self.sent)

    def eof_received(self) -> bool:
        self._parse(b"", time.perf_counter() - self.sent)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.ending is None:
            self._parse(b"", time.perf_counter() - self.sent)
        if self.ending is None:  # closed before h11 could tell: a reset
            self.end(Ending.CUT, str(exc) if exc else "the connection closed")
        if not self.done.done():
            self.done.set_result(None)

    def _parse(self, data: bytes, t: float) -> None:
        if self.ending is not None:
            return
        try:
            self.http.receive_data(data)
            while True:
                event = self.http.next_event()
                if event is h11.NEED_DATA or event is h11.PAUSED:
                    return
                if isinstance(event, h11.Response):
                    self.status, self.head_at = event.status_code, t
                    self.headers = tuple(
                        (k.decode("latin-1"), v.decode("latin-1")) for k, v in event.headers.raw_items()
                    )
                    self.coding = dict(event.headers).get(b"content-encoding", b"").strip().lower()
                elif isinstance(event, h11.Data):
                    body = bytes(event.data)
                    if self.coding in (b"gzip", b"deflate"):
                        body = self._decompressed(body)
                    if body:
                        self.pieces.append(Piece(t, body))
                elif isinstance(event, h11.EndOfMessage):
                    self.end(Ending.COMPLETE)
                    return
                elif isinstance(event, h11.ConnectionClosed):
                    self.end(Ending.CUT, "the connection closed before the answer")
                    return
        except h11.RemoteProtocolError as exc:
            cut = "without sending complete" in str(exc) or "peer unexpectedly closed" in str(exc)
            self.end(Ending.CUT if cut else Ending.BROKEN, str(exc))
        except zlib.error as exc:
            self.end(Ending.BROKEN, f"the compressed body: {exc}")

    def _decompressed(self, data: bytes) -> bytes:
        if self.decompress is None:
            if self.coding == b"gzip":
                wbits = 47
            else:  # deflate: zlib's wrapping (RFC 9110), or the raw stream some servers send
                wraps = len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
                wbits = zlib.MAX_WBITS if wraps else -zlib.MAX_WBITS
            self.decompress = zlib.decompressobj(wbits)
        return self.decompress.decompress(data)

    def end(self, ending: Ending, detail: str = "") -> None:
        self.ending, self.detail = ending, detail
        if not self.done.done():
            self.done.set_result(None)


def _target(base: str, request: Request) -> tuple[str, str, int, bool, str]:
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"not an http:// or https:// URL: {base!r}")
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    prefix = parts.path.rstrip("/")
    query = "&".join(q for q in (parts.query, request.query) if q)  # the gateway's own (a version), then the request's
    target = prefix + request.path + (f"?{query}" if query else "")
    authority = parts.netloc.rpartition("@")[2]
    return parts.hostname, authority, port, secure, target


async def read(
    base: str, request: Request, *, silence: float = 30.0, headers: tuple[tuple[str, str], ...] = ()
) -> Reading:
    """Send `request` to the server at `base` (a URL; its path, if any, goes before the request's) and read
    the answer to its end, or until nothing came for `silence` seconds. The request goes with the headers it
    was recorded with, but for those of one connection and `Accept-Encoding` (it asks for the codings it undoes),
    and `headers` (which replace those of their names); the connection closes with the answer. Raises
    `ConfigError` for a `base` that is no http(s) URL."""
    host, authority, port, secure, target = _target(base, request)
    loop = asyncio.get_running_loop()
    reader = _Reader()
    replaced = {name.lower() for name, _ in headers} | set(_SET_HERE)
    fields = [(k, v) for k, v in end_to_end(request.headers) if k.lower() not in replaced]
    fields += [*headers, ("Host", authority), ("Connection", "close")]
    if "accept-encoding" not in replaced:  # the codings the reader undoes, whatever the recorded client took
        fields = [(k, v) for k, v in fields if k.lower() != "accept-encoding"] + [("Accept-Encoding", "gzip, deflate")]
    if request.body or request.method in ("POST", "PUT", "PATCH"):
        fields.append(("Content-Length", str(len(request.body))))
    head = reader.http.send(h11.Request(method=request.method, target=target, headers=fields))
    try:
        transport, _ = await asyncio.wait_for(
            loop.create_connection(lambda: reader, host, port, ssl=ssl.create_default_context() if secure else None),
            silence,
        )
    except (OSError, TimeoutError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or "timed out"
        return Reading(None, (), (), Ending.REFUSED, f"{host}:{port}: {why}")
    reader.sent = reader.last = time.perf_counter()
    transport.write(head + reader.http.send(h11.Data(data=request.body)) + reader.http.send(h11.EndOfMessage()))
    try:
        while not reader.done.done():
            left = reader.last + silence - time.perf_counter()
            if left <= 0:
                reader.end(Ending.SILENT, f"nothing came for {silence:g} s")
                break
            await asyncio.wait([reader.done], timeout=left)
    finally:
        if reader.ending is Ending.COMPLETE:
            transport.close()
        else:
            transport.abort()
    return Reading(
        reader.status,
        reader.headers,
        tuple(reader.pieces),
        reader.ending or Ending.CUT,
        reader.detail,
        reader.head_at,
    )
