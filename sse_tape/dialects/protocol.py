"""`Protocol`: what every SSE API sse-tape knows says of itself, whether or not it generates text.

A protocol is an API that answers requests with Server-Sent Events: the
paths it serves, how its streams look (so that a recording of it is
recognised wherever its path moved), which frames end a stream, how it
reports an error before the stream (a status and a JSON body) and during it
(frames), how it keeps an idle stream open, and the rules its streams keep.
Replay, faults and `check` ask a protocol these things; none of them names
one. An LLM API promises more (`generation.Generation`): this contract is
what a notification feed, MCP or any other SSE API can meet.

A protocol also brings what replay needs of it beyond recordings: its
matchers (`Protocol.matchers`, named in a cassette's `match`) and the
responders of its features that keep state (`Protocol.responders`: the
Responses API's background mode). Such a responder meets the small contract
here (`ProtocolResponder`, lent each request as `Incoming`), not the server's:
the server's own contract names its faults, options and matcher, which all
read this registry, so a dialect that imported it would close a cycle
(registry, dialect, server contract, faults, registry).

The registry (`dialects.registry`) finds each protocol by name: the
built-in ones and those other installed packages declare in the entry-point
group `sse_tape.dialects`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from .. import _json
from ..cassette import End, Headers, Interaction, Request, Response
from ..framing import SSE, Framing
from ..plan import Plan
from ..sse import ServerSentEvent, SSEDecoder, encode_event
from .events import Error, Event

if TYPE_CHECKING:  # what a responder's answer is; a protocol that brings none never needs aiohttp
    from aiohttp import web

__all__ = [
    "Checker",
    "Incoming",
    "Kept",
    "KeyedMatcher",
    "Protocol",
    "ProtocolResponder",
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


class KeyedMatcher:
    """A `RequestMatcher` that decides by whether one part of two requests is equal, as data (`part`: a JSON
    value, or bytes), but where the recorded part holds a redacted value (`wild`), which agrees with any: two
    requests it finds agree, the recorded one not wild, have equal parts. Matching's index then finds the
    recordings a request may agree with by that part's hash rather than by asking it of each
    (`matching.index`); it still decides among them."""

    def __init__(
        self, matcher: RequestMatcher, part: Callable[[Request], Any], wild: Callable[[Request], bool]
    ) -> None:
        self.matcher = matcher
        self.part = part
        """The part of a request (as the rule compares it) the matcher compares: equal in two that agree."""
        self.wild = wild
        """Whether a recorded request's part holds a redacted value: it agrees with requests whose parts differ."""
        self.__doc__ = matcher.__doc__

    def __call__(self, request: Request, recorded: Request) -> str | None:
        return self.matcher(request, recorded)


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

    def typed(self, index: int, event: ServerSentEvent, untyped: str) -> tuple[dict[str, Any], str] | None:
        """The event's data and its `type`, for APIs whose every event is a JSON object naming its type; None
        after noting that it is not JSON, or noting `untyped` when it names no type."""
        obj = self.json(index, event)
        if obj is None:
            return None
        kind = obj.get("type") if isinstance(obj, dict) else None
        if not isinstance(kind, str):
            self.add(index, untyped)
            return None
        return obj, kind


class Protocol(ABC):
    """One SSE API's contract: the paths it serves, its streams, its errors, and the rules its streams keep.

    A subclass names itself (`name`) and its path, and says which events end
    a stream and how an error is framed in one; the rest has defaults. It is
    made with no arguments, once, by the registry. What a protocol brings to
    replay hangs here too: its matchers (`matchers`) and the responders of
    its stateful features (`responders`).
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
    """The matchers this protocol brings, under names it chooses (`jsonrpc-params`), for a cassette's `match`,
    `--match-on` and the marker to name beside the built-in ones (see `matching.registry`); none by default."""
    match_on: ClassVar[tuple[str, ...] | None] = None
    """The matchers its recordings are matched by, by name, when neither the server nor their cassette names any
    (MCP's `jsonrpc` in place of `body`, as a client's ids are its own); None: sse-tape's default."""

    def serves_path(self, path: str) -> bool:
        """Whether a request for `path` (with any prefix before it, a router's `/proj/x`) is this API's.

        By default, a path that ends with `path`.
        """
        return path.rstrip("/").endswith(self.path)

    def speaks(self, request: Request) -> bool:
        """Whether `request` is this protocol's, told before any recording answers it (so that a miss is
        answered in its words): by default, by its path (`serves_path`); a protocol whose endpoint is the
        server's to choose (MCP's, A2A's JSON-RPC) tells it by what the request carries too."""
        return self.serves_path(request.path)

    def holds(self, request: Request) -> bool:
        """Whether the answer to `request` is a stream the server holds open as its own way to the client
        (MCP's `GET` stream, a 2026-07-28 `subscriptions/listen`), for as long as the client likes: not work in
        flight, so waiting for the server to be idle (`wait_idle`, the pytest plugin) does not wait for it,
        whether replayed or forwarded and recorded. False by default."""
        return False

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

    def answer_error_frames(
        self, error: Error, request: Request | None, sent: Sequence[ServerSentEvent] = ()
    ) -> list[bytes]:
        """How this server reports `error` mid-stream in its answer to `request`, after the events `sent`: as
        `error_frames` by default; a protocol whose error names the request (a JSON-RPC error response carries
        the request's id) says so here."""
        return self.error_frames(error, sent=sent)

    def error_answer(self, error: Error, request: Request | None) -> bytes | None:
        """The one JSON answer that reports `error` in place of the answer to `request`, where this protocol
        reports a failed request in a successful answer (a JSON-RPC error response); None where its errors
        come with an error status (`http_error`), as a model API's do (the default)."""
        return None

    def operation(self, request: Request) -> str | None:
        """What `request` asks this protocol to do, by name, where one endpoint takes many (a JSON-RPC
        request's `method`: MCP's `tools/call`), for a fault's `rpc=`; None where it names none (the
        default)."""
        return None

    def session(self, request: Request) -> str | None:
        """The id of the session `request` is made in, for a protocol that keeps sessions (MCP's
        `Mcp-Session-Id`); None for one that keeps none (the default) or a request in none."""
        return None

    def tool_error(self, request: Request | None, message: str, text: str) -> str | None:
        """The message `text` (an event's data, or a JSON answer), the answer to a tool call in `request`, turned
        into the tool's own error result saying `message`; None where it is no such answer, or this protocol has
        no words for one (the default)."""
        return None

    def progress(self, request: Request | None, sent: Sequence[ServerSentEvent], count: int) -> list[bytes] | None:
        """`count` progress notifications, as this server frames them, that follow the events `sent` in the
        answer to `request`; None where the request asked for none, or this protocol has no words for them (the
        default)."""
        return None

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

    def stream_framing(self, request: Request) -> Framing:
        """How a stream that answers `request` frames its messages on the wire (see `framing`): as Server-Sent
        Events by default; Gemini's `streamGenerateContent` without `alt=sse`, as one JSON array."""
        return SSE

    def shapeless_path(self, path: str) -> str:
        """`path` with what only chooses the answer's shape taken out, so that a request for a stream and one
        for a JSON answer name the same call (Gemini's `:streamGenerateContent` and `:generateContent`)."""
        return path

    def same_call_path(self, path: str) -> str:
        """`path` as requests are matched on it: two paths that name the same call give the same (Gemini's
        `/v1/`, `/v1beta/` and `/v1alpha/`); `path` itself by default. A request goes upstream, and into a
        recording, with the path it came with."""
        return path

    def responders(self) -> Sequence[ProtocolResponder]:
        """The responders of this protocol's features that keep state, made anew for each server, which puts
        them in its chain in front of replay; none by default."""
        return ()

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        """Every way `events` break this API's streaming contract; `request` enables rules that depend on it.

        By default none beyond the SSE framing, which `check_framing` checks.
        """
        return []

    def check_exchange(self, interaction: Interaction) -> list[Violation]:
        """Every way an exchange breaks this API's contract in what neither its stream nor its JSON says (a
        header its answer must not carry, say): none by default."""
        return []

    def summary(self, interaction: Interaction) -> str | None:
        """What a recording of this protocol holds, in one line for `show` (the call, the protocol's
        revision), where the protocol has no `Generation` to put its answer together; None by default."""
        return None

    def check_json(self, body: bytes, request: Request | None = None) -> list[Violation]:
        """Every way `body`, a successful answer to a request for no stream, breaks this API's contract:
        by default, that it is not JSON."""
        try:
            _json.parse(body, max_depth=None)
        except ValueError:
            return [Violation(None, f"the answer is not JSON: {body[:40]!r}")]
        return []


@dataclass(frozen=True, slots=True)
class Kept:
    """What a protocol's responder made of the answer replay found for a request (see `Incoming.keep`)."""

    note: str
    """What the journal says of it, after the recording that matched (`in the background as resp_1`)."""
    answer: Plan | None = None
    """The answer that goes out in place of replay's, one JSON document (the faults before a stream act on
    it) unless it is a `stream`; None: replay's goes out."""
    stream: bool = False
    """Whether `answer` is an event stream (every fault acts on it, as on replay's), not one JSON document."""
    ended: Callable[[int, bool], None] | None = None
    """Told, once the answer is over, how many of its events the client got (a stream a fault cut short: fewer
    than it has) and whether the last of them ended the stream (`Protocol.is_terminal`: a fault's error, a task
    it failed), for a responder that goes on from there later (A2A's resubscription)."""
    answered: Callable[[int], None] | None = None
    """Told the status the answer goes out with, once the faults have acted on it (a session answered 404 is
    over); None: nothing to tell."""


class Incoming(ABC):
    """One request, as the server lends it to a protocol's responder: what was asked, and how to answer.

    What the responder keeps between requests goes in `state`, the server's
    to reset; the faults, the journal and the wire stay the server's, reached
    through the methods here.
    """

    request: Request
    """What was asked, body and all."""
    number: int
    """The request's number, counted from 1 since the server started (or was reset)."""
    arrived: float
    """When it arrived, on the event loop's clock: what a plan's times count from."""
    query: Mapping[str, str]
    """Its query's parameters (the first value of each)."""
    state: MutableMapping[str, Any]
    """What this responder keeps between requests, in the server's replay state: a reset empties it."""
    shared: bool = False
    """Whether that state is shared by several servers (`ReplayStore.shared`): what it holds may then change in
    another process between two requests, and a value read from it is a copy."""

    @abstractmethod
    def keep(self, hook: Callable[[Plan], Kept | None]) -> None:
        """Leave the request to replay, which hands `hook` the plan it makes of the recording that matched (at
        the server's pace, before faults): `hook` may keep it, and answer in its place (see `Kept`). A request
        is one protocol's: when two keep it (A2A's and MCP's both speak JSON-RPC), the first in the registry's
        order has it."""

    @abstractmethod
    def pass_on(self, reason: str) -> None:
        """Say why this responder did not answer, for the miss's explanation if nothing else does."""

    @abstractmethod
    async def send(self, plan: Plan, *, stream: bool, dialect: Protocol | None) -> web.StreamResponse:
        """Answer with `plan`: an event stream (`stream`: its events are counted, and every fault acts) or one
        JSON document (only the faults before a stream act). The faults chosen for this request act first,
        framed by `dialect`; none act when it is None."""

    @abstractmethod
    async def error(self, status: int, message: str, code: str, *, dialect: Protocol) -> web.StreamResponse:
        """Answer with sse-tape's JSON error (`sse-tape: message`), framed as `dialect` frames its errors."""

    @abstractmethod
    def events_sent(self) -> int:
        """How many events of the answer `send` sent the client got: after `send` returns, all it ever will."""

    @abstractmethod
    def note(self, status: int, what: str) -> None:
        """Say in the journal what the answer was (`background response resp_1, cancelled`)."""


class ProtocolResponder(ABC):
    """A responder a protocol brings (`Protocol.responders`): answers the requests of a feature that keeps
    state (retrieving, resuming and cancelling background responses), or leaves them to the next responder."""

    lasting: ClassVar[bool] = False
    """Whether what it keeps belongs to connections that outlive a test (MCP's sessions), and so is kept when
    replay starts over for the clients already there (`Control.reset(protocols=False)`); False: it is
    forgotten with the rest (the Responses API's background responses, A2A's task streams)."""

    @abstractmethod
    async def respond(self, incoming: Incoming) -> web.StreamResponse | None:
        """Answer the request (see `Incoming`), or return None to leave it to the responders behind."""

    def concerns(self, request: Request) -> bool:
        """Whether `request` may be one of its feature's: False only for a request `respond` would pass on
        untouched (keeping nothing, saying nothing), which the server then does not lend it. A cheap look (the
        path, the method, a header), asked of every request but those to another LLM API's own path (which the
        server lends to that API's responders only); True by default."""
        return True

    def forget(self, kept: MutableMapping[str, Any]) -> None:
        """What it keeps (`kept`, its `Incoming.state`) is about to be forgotten by a reset: end what would
        outlive it (MCP's `GET` streams held open); nothing by default."""
        return


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
