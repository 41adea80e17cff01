"""`Protocol`: what every SSE API sse-tape knows says of itself, whether or not it generates text.

A protocol is an API that answers requests with Server-Sent Events: the
paths it serves, how its streams look (so that a recording of it is
recognised wherever its path moved), which frames end a stream, how it
reports an error before the stream (a status and a JSON body) and during it
(frames), how it keeps an idle stream open, and the rules its streams keep.
Replay, faults and `check` ask a protocol these things; none of them names
one. An LLM API promises more (`generation.Generation`): this contract is
what a notification feed, MCP or any other SSE API can meet.

The registry (`dialects.registry`) finds each protocol by name: the
built-in ones and those other installed packages declare in the entry-point
group `sse_tape.dialects`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .. import _json
from ..cassette import End, Headers, Interaction, Request, Response
from ..sse import ServerSentEvent, SSEDecoder, encode_event
from .events import Error, Event

__all__ = [
    "Checker",
    "Protocol",
    "RequestMatcher",
    "Violation",
    "check_error_response",
    "check_framing",
    "data_frame",
    "json_objects",
    "named_frame",
    "opening",
    "to_json",
]

RequestMatcher = Callable[[Request, Request], "str | None"]
"""A matcher a protocol brings: `(request, recorded)` -> how they differ, in words, or None when they match."""


def to_json(obj: Any) -> str:
    """Compact JSON, as the servers send it."""
    return _json.dumps(obj)


def json_objects(events: Sequence[ServerSentEvent]) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """Position, event name and data of each event whose data is a JSON object; the rest (`[DONE]`) are skipped."""
    for i, sse in enumerate(events):
        try:
            obj = _json.parse(sse.data, max_depth=None)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield i, sse.event, obj


def opening(interaction: Interaction, count: int = 3) -> list[tuple[ServerSentEvent, Any]]:
    """The first `count` events of an interaction's response, each with its data parsed as JSON (None when
    it is not JSON): what `Protocol.recognises` looks at. Only the chunks that hold them are decoded."""
    decoder = SSEDecoder()
    found: list[tuple[ServerSentEvent, Any]] = []
    for chunk in interaction.response.chunks:
        for sse in decoder.feed(chunk.data):
            try:
                found.append((sse, _json.parse(sse.data, max_depth=None)))
            except ValueError:
                found.append((sse, None))
            if len(found) == count:
                return found
    return found


def data_frame(obj: Any) -> bytes:
    """An unnamed event carrying `obj` as compact JSON, as OpenAI-style servers send chunks."""
    return encode_event(to_json(obj))


def named_frame(obj: dict[str, Any]) -> bytes:
    """An event named after `obj["type"]`, carrying `obj` as JSON (Responses API, LM Studio)."""
    return encode_event(to_json(obj), event=obj["type"])


@dataclass(frozen=True, slots=True)
class Violation:
    """A way a stream breaks its dialect's contract.

    `event` is the position of the offending SSE event, from 1, or None when
    the stream as a whole is at fault (no terminal frame, say).
    """

    event: int | None
    message: str

    def __str__(self) -> str:
        return f"event {self.event}: {self.message}" if self.event is not None else self.message


class Checker:
    """Collects violations while a dialect walks a stream."""

    def __init__(self) -> None:
        self.violations: list[Violation] = []

    def add(self, index: int | None, message: str) -> None:
        """Note a violation at the 0-based SSE event `index` (None: the whole stream)."""
        self.violations.append(Violation(None if index is None else index + 1, message))

    def json(self, index: int, event: ServerSentEvent) -> Any:
        """The event's data as JSON, or None after noting that it is not JSON."""
        try:
            return _json.parse(event.data, max_depth=None)
        except ValueError:
            self.add(index, f"data is not JSON: {event.data[:40]!r}")
            return None


class Protocol(ABC):
    """One SSE API's contract: the paths it serves, its streams, its errors, and the rules its streams keep.

    A subclass names itself (`name`) and its path, and says which events end
    a stream and how an error is framed in one; the rest has defaults. It is
    made with no arguments, once, by the registry. What a protocol brings to
    replay hangs here too: its matchers (`matchers`) and, once responders
    leave the server, the responders of its stateful features (the Responses
    API's background mode, which `asks_for_background` tells of today).
    """

    name: ClassVar[str]
    """The dialect's name on the command line and in the registry (`openai-chat`, ...)."""
    path: ClassVar[str]
    """The request path this API streams from (a pattern where the path names more: see `serves_path`)."""
    query: ClassVar[str] = ""
    """The query string a streaming request of this API carries (Gemini's `alt=sse`)."""
    heartbeat: ClassVar[tuple[float, bytes] | None] = None
    """How this server keeps an idle stream open: after so many silent seconds, this comment."""
    matchers: ClassVar[Mapping[str, RequestMatcher]] = {}
    """The matchers this protocol brings, by name, for a cassette's `match` to name (none yet)."""

    def serves_path(self, path: str) -> bool:
        """Whether a request for `path` (with any prefix before it, a router's `/proj/x`) is this API's.

        By default, a path that ends with `path`.
        """
        return path.rstrip("/").endswith(self.path)

    def recognises(self, interaction: Interaction) -> bool:
        """Whether a recording whose path says nothing (a gateway moved it) speaks this API, by what its
        stream looks like (`opening` gives its first events); False by default."""
        return False

    @abstractmethod
    def is_terminal(self, event: ServerSentEvent) -> bool:
        """Whether this event ends the stream's answer (a finish, an error, the terminal frame)."""

    @abstractmethod
    def error_frames(
        self, error: Error, before: Sequence[Event] = (), sent: Sequence[ServerSentEvent] = ()
    ) -> list[bytes]:
        """How this server reports `error` mid-stream, with the terminal frames that follow.

        The stream so far is `sent`, the SSE events the client already has
        (from a recording, say), or else `before`, neutral events whose
        frames were sent (an API that generates text: see `Generation`).
        """

    def http_error(
        self, status: int, message: str, *, type: str | None = None, code: str | None = None
    ) -> tuple[int, Headers, bytes]:
        """Status, headers and JSON body of this API's error response before any stream.

        By default `{"error": {"message", "type", "code"}}`, the type the API's word for the error if given.
        """
        error: dict[str, Any] = {"message": message, "type": type, "code": code}
        return status, (("content-type", "application/json"),), to_json({"error": error}).encode()

    def wants_stream(self, body: Any, path: str = "") -> bool:
        """Whether a request to `path` with this body asks for a stream rather than one JSON answer: always,
        by default, as an SSE API streams every answer."""
        return True

    def shapeless_path(self, path: str) -> str:
        """`path` with what only chooses the answer's shape taken out, so that a request for a stream and one
        for a JSON answer name the same call (Gemini's `:streamGenerateContent` and `:generateContent`)."""
        return path

    def asks_for_background(self, request: Request) -> bool:
        """Whether `request` asks this API to run it apart from its connection, to be retrieved, resumed and
        cancelled later (the Responses API's `"background": true`); False by default."""
        return False

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        """Every way `events` break this API's streaming contract; `request` enables rules that depend on it.

        By default none beyond the SSE framing, which `check_framing` checks.
        """
        return []

    def check_json(self, body: bytes, request: Request | None = None) -> list[Violation]:
        """Every way `body`, a successful answer to a request for no stream, breaks this API's contract:
        by default, that it is not JSON."""
        try:
            _json.parse(body, max_depth=None)
        except ValueError:
            return [Violation(None, f"the answer is not JSON: {body[:40]!r}")]
        return []


def check_error_response(response: Response) -> list[Violation]:
    """What is wrong with an error response before the stream: the APIs send `{"error": {"message": ...}}`."""
    try:
        obj = _json.parse(response.body, max_depth=None)
    except ValueError:
        return [Violation(None, f"error response {response.status} body is not JSON")]
    error = obj.get("error") if isinstance(obj, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return [Violation(None, f"error response {response.status} has no error.message")]
    return []


def check_framing(response: Response) -> list[Violation]:
    """What is wrong with an event stream of no API sse-tape knows (a notification feed): its framing alone.

    Its bytes must be UTF-8, and a stream that ended complete must not end in the middle of a block.
    """
    body = response.body
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [Violation(None, f"the stream is not UTF-8 at byte {exc.start}")]
    decoder = SSEDecoder()
    sent = decoder.feed(body)
    if decoder.end() and response.end is End.COMPLETE:
        return [Violation(len(sent) + 1, "the stream ends in the middle of a block")]
    return []
