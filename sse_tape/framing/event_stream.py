"""AWS's event stream as a framing: binary messages, each with a prelude, headers, a payload and two CRC32s
(`application/vnd.amazon.eventstream`: Amazon Bedrock's `ConverseStream` and
`InvokeModelWithResponseStream`).

A message on the wire (all integers big-endian):

    total length (4) | headers length (4) | prelude CRC32 (4) | headers | payload | message CRC32 (4)

The prelude's CRC covers its first 8 bytes; the message's, every byte before it. Each header is its name's
length (1) and name, a type (1) and a value: 0 and 1 true and false, 2 to 5 integers of 1, 2, 4 and 8 bytes,
6 bytes and 7 a UTF-8 string (each with a 2-byte length), 8 a timestamp (8 bytes, milliseconds), 9 a UUID (16)
(https://docs.aws.amazon.com/transcribe/latest/dg/streaming-setting-up.html#streaming-event-stream,
and botocore's `eventstream.py`, which this reads as strictly: a wrong CRC is an error, not a message).

Each message is one event: named by its `:event-type` header (`contentBlockDelta`), or for an exception by
its `:exception-type` (`throttlingException`), its payload (JSON, for Bedrock) as its data. An encoder frames
an event back as AWS does: `:event-type` (or `:exception-type` for a name that ends with `Exception`, AWS's
naming of every exception), `:content-type: application/json`, then `:message-type` (`event` or `exception`).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from ..sse import ServerSentEvent
from .base import Block, FrameEncoder, Framing

__all__ = ["EVENT_STREAM", "FrameError", "Message", "encode_message", "read_message"]

_PRELUDE = 12  # total length, headers length, prelude CRC
_CRC = 4
_MAX_HEADERS = 128 * 1024  # botocore's limits
_MAX_PAYLOAD = 24 * 1024 * 1024

HeaderValue = bool | int | bytes | str
"""A header's value: a boolean, an integer (also a timestamp's milliseconds), bytes (also a UUID) or a string."""


class FrameError(ValueError):
    """A message that cannot be read: a wrong CRC, a length out of bounds, a header of no known type."""


@dataclass(frozen=True, slots=True)
class Message:
    """One message of an event stream: its headers, in order, and its payload."""

    headers: Mapping[str, HeaderValue]
    payload: bytes

    @property
    def name(self) -> str:
        """What the message is: its `:event-type`, or its `:exception-type`, or its `:error-code`; empty if
        it has none of them."""
        for key in (":event-type", ":exception-type", ":error-code"):
            value = self.headers.get(key)
            if isinstance(value, str):
                return value
        return ""

    @property
    def kind(self) -> str:
        """Its `:message-type`: `event`, `exception` or `error` (empty if it has none)."""
        value = self.headers.get(":message-type")
        return value if isinstance(value, str) else ""


def _crc(data: bytes) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


_FIXED = {2: ">b", 3: ">h", 4: ">i", 5: ">q", 8: ">q"}  # a header type and its fixed-size integer


def _headers(data: bytes) -> dict[str, HeaderValue]:
    headers: dict[str, HeaderValue] = {}
    i = 0
    while i < len(data):
        size = data[i]
        name = data[i + 1 : i + 1 + size].decode("utf-8", "replace")
        i += 1 + size
        if i >= len(data):
            raise FrameError(f"header {name!r} has no type")
        kind = data[i]
        i += 1
        value: HeaderValue
        if kind in (0, 1):
            value = kind == 0
        elif kind in _FIXED:
            fmt = _FIXED[kind]
            width = struct.calcsize(fmt)
            if i + width > len(data):
                raise FrameError(f"header {name!r} is cut short")
            (value,) = struct.unpack_from(fmt, data, i)
            i += width
        elif kind in (6, 7):
            if i + 2 > len(data):
                raise FrameError(f"header {name!r} is cut short")
            (length,) = struct.unpack_from(">H", data, i)
            raw = data[i + 2 : i + 2 + length]
            if len(raw) < length:
                raise FrameError(f"header {name!r} is cut short")
            value = raw.decode("utf-8", "replace") if kind == 7 else raw
            i += 2 + length
        elif kind == 9:
            value = data[i : i + 16]
            if len(value) < 16:
                raise FrameError(f"header {name!r} is cut short")
            i += 16
        else:
            raise FrameError(f"header {name!r} has type {kind}, which is none of event stream's (0 to 9)")
        if name in headers:
            raise FrameError(f"header {name!r} comes twice")
        headers[name] = value
    return headers


def read_message(data: bytes, at: int = 0) -> tuple[Message, int] | None:
    """The message that begins at byte `at` of `data`, and where it ends; None when `data` ends before it
    does. Raises `FrameError` for one that cannot be read (see the module)."""
    if len(data) - at < _PRELUDE:
        return None
    total, header_length, prelude_crc = struct.unpack_from(">III", data, at)
    if _crc(data[at : at + 8]) != prelude_crc:
        raise FrameError(f"the prelude's CRC is {prelude_crc:#010x}, its bytes' {_crc(data[at : at + 8]):#010x}")
    if header_length > _MAX_HEADERS:
        raise FrameError(f"headers of {header_length} bytes, more than {_MAX_HEADERS}")
    payload_length = total - header_length - _PRELUDE - _CRC
    if payload_length < 0 or payload_length > _MAX_PAYLOAD:
        raise FrameError(f"a total length of {total} bytes leaves no room for {header_length} bytes of headers")
    if len(data) - at < total:
        return None
    end = at + total
    (message_crc,) = struct.unpack_from(">I", data, end - _CRC)
    if _crc(data[at : end - _CRC]) != message_crc:
        raise FrameError(f"the message's CRC is {message_crc:#010x}, its bytes' {_crc(data[at : end - _CRC]):#010x}")
    headers_start = at + _PRELUDE
    headers = _headers(data[headers_start : headers_start + header_length])
    return Message(headers, data[headers_start + header_length : end - _CRC]), end


def _header(name: str, value: HeaderValue) -> bytes:
    key = name.encode()
    if isinstance(value, bool):
        return bytes([len(key)]) + key + bytes([0 if value else 1])
    if isinstance(value, int):  # 4 bytes where it fits, else 8
        small = -(2**31) <= value < 2**31
        return (
            bytes([len(key)])
            + key
            + (b"\x04" + struct.pack(">i", value) if small else b"\x05" + struct.pack(">q", value))
        )
    raw, kind = (value.encode(), 7) if isinstance(value, str) else (value, 6)
    return bytes([len(key)]) + key + bytes([kind]) + struct.pack(">H", len(raw)) + raw


def encode_message(headers: Mapping[str, HeaderValue], payload: bytes) -> bytes:
    """One message, its CRCs computed (an integer header is written in 4 bytes where it fits, else 8)."""
    head = b"".join(_header(k, v) for k, v in headers.items())
    total = _PRELUDE + len(head) + len(payload) + _CRC
    prelude = struct.pack(">II", total, len(head))
    body = prelude + struct.pack(">I", _crc(prelude)) + head + payload
    return body + struct.pack(">I", _crc(body))


def _event(message: Message) -> ServerSentEvent:
    return ServerSentEvent(data=message.payload.decode("utf-8", "replace"), event=message.name or "message")


class _MessageEncoder(FrameEncoder):
    def frame(self, event: ServerSentEvent) -> bytes:
        exception = event.event.endswith("Exception")
        headers: dict[str, HeaderValue] = {
            (":exception-type" if exception else ":event-type"): event.event,
            ":content-type": "application/json",
            ":message-type": "exception" if exception else "event",
        }
        return encode_message(headers, event.data.encode())

    def close(self) -> bytes:
        return b""


class _EventStream(Framing):
    """AWS's event stream: binary messages with CRCs (see the module)."""

    name = "aws-event-stream"
    content_type = "application/vnd.amazon.eventstream"
    lines = False

    def blocks(self, body: bytes, at: int = 0) -> list[Block]:
        blocks, start = [], 0
        while start < len(body):
            try:
                found = read_message(body, start)
            except FrameError:
                found = None
                end = self._past(body, start)
            else:
                end = found[1] if found is not None else len(body)
            blocks.append(Block(at + start, at + end, _event(found[0]) if found is not None else None))
            start = end
        return blocks

    def whole(self, data: bytes, at: int = 0) -> int:
        start = 0
        while len(data) - start >= _PRELUDE:
            (total,) = struct.unpack_from(">I", data, start)
            if total < _PRELUDE + _CRC or len(data) - start < total:
                break
            start += total
        return start

    def encoder(self, sent: int = 0) -> FrameEncoder:
        return _MessageEncoder()

    def heartbeat(self, comment: bytes) -> bytes:
        return b""  # an event stream has no message that says nothing

    def corrupted(self, block: bytes, kind: str) -> bytes | None:
        """The message with its payload changed in place, its CRCs left as they were (a bit flipped in the
        middle for `json`, invalid UTF-8 at its start for `utf8`): a reader that checks them (botocore) refuses
        it. A message with no payload gets its CRC's last byte flipped."""
        if len(block) < _PRELUDE + _CRC:
            return None  # no whole message: cut as any block is
        total, header_length = struct.unpack_from(">II", block)
        start, end = _PRELUDE + header_length, min(total, len(block)) - _CRC
        broken = bytearray(block)
        if end <= start:
            broken[-1] ^= 0xFF
        elif kind == "utf8":
            bad = b"\xff\xfe\xc3"[: end - start]
            broken[start : start + len(bad)] = bad
        else:
            broken[(start + end) // 2] ^= 0x01
        return bytes(broken)

    def problems(self, body: bytes) -> list[str]:
        start, n = 0, 0
        while start < len(body):
            try:
                found = read_message(body, start)
            except FrameError as exc:
                return [f"message {n + 1} (at byte {start}) cannot be read: {exc}"]
            if found is None:
                return [f"the stream is cut inside message {n + 1}, after {n} whole"]
            start, n = found[1], n + 1
        return []

    @staticmethod
    def _past(body: bytes, start: int) -> int:
        """Where a message that cannot be read ends: where its prelude says, when that is a length the
        body holds, else at the body's end."""
        (total,) = struct.unpack_from(">I", body, start) if len(body) - start >= 4 else (0,)
        return start + total if _PRELUDE + _CRC <= total <= len(body) - start else len(body)


EVENT_STREAM: Framing = _EventStream()
"""AWS's event stream."""
