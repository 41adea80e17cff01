"""The values a cassette holds: interactions of a request and its response, kept as the raw byte chunks that
crossed the wire with their timing, and how each response ended.

These are plain values, frozen and slotted: nothing here reads or writes a file (see `persistence`) or knows
an encoding (see `document` and the serializers).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .._json import parse as parse_json
from ..sse import ServerSentEvent, SSEDecoder

__all__ = [
    "REDACTED",
    "Chunk",
    "End",
    "Headers",
    "Injection",
    "Interaction",
    "Recording",
    "Request",
    "Response",
    "agrees_as_recorded",
    "holds_redacted",
    "storable_headers",
]

#: What a recording holds in place of a secret (see `redaction`); on replay it matches any value.
REDACTED = "<redacted>"
# The marker as it is written in a body.
_MARKER = REDACTED.encode()


def agrees_as_recorded(here: Any, recorded: Any) -> bool:
    """Whether a JSON value equals a recorded one as data, where a recorded value that was redacted
    (`REDACTED`) stands for any value: how every matcher compares a body, or a part of one."""
    if here == recorded or recorded == REDACTED:
        return True
    if isinstance(here, dict) and isinstance(recorded, dict):
        return here.keys() == recorded.keys() and all(agrees_as_recorded(here[k], recorded[k]) for k in here)
    if isinstance(here, list) and isinstance(recorded, list):
        return len(here) == len(recorded) and all(map(agrees_as_recorded, here, recorded))
    return False


def holds_redacted(recorded: Request, comparable: Callable[[Any], Any] | None = None) -> bool:
    """Whether a recorded request's JSON body, as `comparable` makes it (as it is, without one), is or holds a
    redacted value (`REDACTED`), which `agrees_as_recorded` finds agrees with any value there. False for a body
    that is empty or not JSON. The body's text is looked at first: without the marker, as it was recorded or
    escaped (JSON may spell any character `\\u....`), it holds none, and is neither parsed nor made comparable."""
    body = recorded.body
    if _MARKER not in body and b"\\u" not in body:
        return False
    value = recorded.json()
    if value is None:
        return False
    return _holds_redacted(value if comparable is None else comparable(value))


def _holds_redacted(value: Any) -> bool:
    """Whether a JSON value is, or holds, a redacted value (`REDACTED`)."""
    if isinstance(value, dict):
        return any(map(_holds_redacted, value.values()))
    if isinstance(value, list):
        return any(map(_holds_redacted, value))
    return isinstance(value, str) and value == REDACTED


#: Header names and values, in the order they crossed the wire; a name may come more than once.
Headers = tuple[tuple[str, str], ...]


class End(StrEnum):
    """How a recorded response ended."""

    COMPLETE = "complete"
    """The server finished the response cleanly."""
    UPSTREAM_RESET = "upstream-reset"
    """The server reset or dropped the connection mid-response."""
    TIMEOUT = "timeout"
    """The server went silent for longer than the recorder's idle timeout."""
    CLIENT_GONE = "client-gone"
    """The client hung up before the response ended."""
    INTERRUPTED = "interrupted"
    """The recorder itself was stopped while the response was in flight."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of the response body as it was read, `t` seconds after the request was sent."""

    t: float
    data: bytes


# What a request's parsed body is before anyone asked for it.
_UNPARSED: Any = object()


@dataclass(frozen=True, slots=True)
class Request:
    """The request of an interaction. `query` is the raw query string, without the `?`."""

    method: str
    path: str
    query: str = ""
    headers: Headers = ()
    body: bytes = b""
    _json: Any = field(default=_UNPARSED, init=False, repr=False, compare=False)

    def json(self) -> Any:
        """The body parsed as JSON, or None when it is empty or not JSON.

        It is parsed once, when first asked for, and the same value is
        returned from then on (matching, shaping and faults all read it for
        each request): read it, and copy it before changing it.
        """
        if self._json is _UNPARSED:
            object.__setattr__(self, "_json", _parse_json(self.body))  # a cache: the request stays as it was
        return self._json

    def header(self, name: str) -> str | None:
        """The first value of a header, looked up case-insensitively."""
        return _first(self.headers, name)

    def with_json(self, path: str, body: bytes, parsed: Any) -> Request:
        """This request at `path` with `body`, whose JSON value `parsed` is known already: it is not parsed
        again when asked for (matching compares every request so, with some fields cut)."""
        other = Request(self.method, path, self.query, self.headers, body)
        object.__setattr__(other, "_json", parsed)
        return other


@dataclass(frozen=True, slots=True)
class Response:
    """The response of an interaction.

    `duration` is when the response ended, in seconds since the request was
    sent: after the last chunk, or later when the stream went silent before
    it ended (a timeout, say). None means at the last chunk.
    """

    status: int = 200
    headers: Headers = ()
    chunks: tuple[Chunk, ...] = ()
    end: End = End.COMPLETE
    duration: float | None = None

    @property
    def end_time(self) -> float:
        """When the response ended, in seconds since the request was sent."""
        if self.duration is not None:
            return self.duration
        return self.chunks[-1].t if self.chunks else 0.0

    @property
    def body(self) -> bytes:
        """All the chunks joined."""
        return b"".join(chunk.data for chunk in self.chunks)

    def events(self) -> list[tuple[float, ServerSentEvent]]:
        """The SSE events in the body, each with the offset of the chunk that completed it."""
        decoder = SSEDecoder()
        return [(chunk.t, event) for chunk in self.chunks for event in decoder.feed(chunk.data)]

    def header(self, name: str) -> str | None:
        """The first value of a header, looked up case-insensitively."""
        return _first(self.headers, name)


def _first(headers: Headers, name: str) -> str | None:
    name = name.lower()
    size = len(name)
    for key, value in headers:  # a loop, not a generator: every request's headers are looked up several times
        # The length first, which most names differ in: a name lowered to an ASCII one has the same length.
        if len(key) == size and key.lower() == name:
            return value
    return None


@dataclass(frozen=True, slots=True)
class Injection:
    """A fault that changed what the client was sent while the interaction was recorded: the fault as it was
    written (`error:at=2`) and what it did (`openai-chat error after event 2`)."""

    fault: str
    what: str


@dataclass(frozen=True, slots=True)
class Interaction:
    """One request and the response that answered it.

    `injected` notes the faults a recorder put on the client's copy of the
    stream (`sse-tape record --fault`); the response is what the upstream
    sent, whole.
    """

    request: Request
    response: Response
    recorded_at: str | None = None
    """When it was recorded, as an ISO 8601 timestamp."""
    injected: tuple[Injection, ...] = ()
    """The faults that acted on the stream its client got, in the order they were journaled."""

    def fingerprint(self) -> str:
        """A digest that tells this recording from any other, and that a write and a load of its cassette
        keep: of its request's method, path, query and body, when it was recorded, and its response's
        status, end, duration and timed chunks (not the headers, whose order a write may change). A recorder
        names by it, in its spool, the recording cut short that a whole answer takes the place of."""
        req, resp = self.request, self.response
        digest = hashlib.sha256()
        fields = (req.method, req.path, req.query, self.recorded_at, resp.status, resp.end, resp.duration)
        parts = [repr(fields).encode(), req.body]
        for chunk in resp.chunks:
            parts += (repr(chunk.t).encode(), chunk.data)
        for part in parts:  # each with its length: no two lists of parts give the same bytes
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
        return digest.hexdigest()


@dataclass(frozen=True, slots=True, eq=False)
class Recording:
    """A recorded interaction and where it came from; compared and hashed by identity."""

    interaction: Interaction = field(repr=False)
    cassette: str
    index: int
    """Its position in the cassette, from 1."""

    def __str__(self) -> str:
        req = self.interaction.request
        return f"{self.cassette} #{self.index} ({req.method} {req.path})"


def storable_headers(headers: Headers) -> Headers:
    """Headers as a cassette holds them: as text that can be sent again. Bytes that were not UTF-8 on the wire
    (which aiohttp hands over as surrogate escapes) are read as Latin-1, as HTTP's older rules read them; a
    control character, which HTTP forbids in a header (RFC 9110 section 5.5) and no server may send (a loaded
    cassette refuses it), is written as `%XX`."""
    return tuple((_storable(name), _storable(value)) for name, value in headers)


# Every control character but tab: what a header may not hold, and a cassette's load refuses.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _storable(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "surrogateescape").decode("latin-1")
    return _CONTROL.sub(lambda m: f"%{ord(m[0]):02X}", text)


def _parse_json(body: bytes) -> Any:
    if not body:
        return None
    try:
        return parse_json(body)
    except ValueError:  # not JSON, or nested too deep to compare as data
        return None
