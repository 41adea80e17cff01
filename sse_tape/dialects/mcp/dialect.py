"""`MCP`: the Model Context Protocol over Streamable HTTP, revisions 2025-11-25 and 2026-07-28, as a `Protocol`.

A client POSTs each JSON-RPC message to one endpoint (`/mcp` by
convention; anywhere, as the server likes) with `Accept: application/json,
text/event-stream`; a request is answered with one JSON response or an SSE
stream of messages that ends with its response; a notification or a response
with 202 and no body. `GET` opens the server's stream, `DELETE` ends the
session (https://modelcontextprotocol.io/specification/2025-11-25/basic/transports).
So an MCP recording is told by its request (JSON-RPC 2.0 in the body, or
MCP's headers) as much as by its path. It generates no text: it is a protocol
without `Generation`. Its requests are matched by `jsonrpc` (see `jsonrpc`),
and its answers carry the client's own ids, in sessions of their own
(`Sessions`). Revision 2026-07-28 is stateless: no `initialize`, no session
(its answers carry no `Mcp-Session-Id`), each request's version and
capabilities in its `params._meta` (https://modelcontextprotocol.io/specification/2026-07-28/basic/transports);
a recording says its revision (`revision.revision_of`), which `show` prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ... import _json
from ...cassette import Headers, Interaction, Request
from ...sse import ServerSentEvent
from ..events import Error, Event
from ..protocol import Checker, Protocol, ProtocolResponder, RequestMatcher, Violation, to_json
from . import errors
from .jsonrpc import SUBSCRIPTION_ID, jsonrpc
from .revision import method_of, revision_of, stateless
from .session import SESSION_HEADER, Sessions

__all__ = ["MCP", "is_mcp_request"]

#: The headers a Streamable HTTP client sends after `initialize` (https://modelcontextprotocol.io/specification/2025-11-25/basic/transports).
_HEADERS = ("mcp-session-id", "mcp-protocol-version")

#: JSON-RPC's code for an invalid request (https://www.jsonrpc.org/specification#error_object).
_INVALID_REQUEST = -32600


def is_mcp_request(request: Request) -> bool:
    """Whether a request is MCP's by what it carries: MCP's headers, or a JSON-RPC 2.0 message as its body."""
    for key, _ in request.headers:  # one pass over them: asked of every request (`Sessions.concerns`)
        if key.lower() in _HEADERS:
            return True
    if b'"jsonrpc"' not in request.body:
        return False  # most requests: no need to read their body
    body = request.json()
    return isinstance(body, dict) and body.get("jsonrpc") == "2.0" and isinstance(body.get("method"), str)


#: The request whose stream the server may end without a response: a listen stream's client leaves when it
#: likes, and the stream just ends (2026-07-28's abrupt close; the response is the server's graceful close).
_LISTEN = "subscriptions/listen"


def _is_response(message: Any) -> bool:
    return isinstance(message, dict) and "method" not in message and ("result" in message or "error" in message)


def _subscription(message: dict[str, Any]) -> Any:
    """The subscription a listen stream's message names in its `_meta` (its `params`', a response's `result`'s)."""
    inner = message.get("params" if "method" in message else "result")
    meta = inner.get("_meta") if isinstance(inner, dict) else None
    return meta.get(SUBSCRIPTION_ID) if isinstance(meta, dict) else None


def _response_rules(message: dict[str, Any], id: Any) -> list[str]:
    """The rules a response breaks, answering the request whose `id` is given (None: unknown)."""
    broken = []
    if "result" in message and "error" in message:
        broken.append("a response with both a result and an error")
    if id is not None and message.get("id") != id:
        broken.append(f"a response to id {to_json(message.get('id'))}, the request's is {to_json(id)}")
    return broken


class MCP(Protocol):
    """MCP's Streamable HTTP transport, revisions 2025-11-25 and 2026-07-28 (see the module)."""

    name = "mcp"
    path = "/mcp"
    matchers: ClassVar[Mapping[str, RequestMatcher]] = {"jsonrpc": jsonrpc}
    match_on = ("method", "path", "jsonrpc")

    def recognises(self, interaction: Interaction) -> bool:
        """An exchange whose request is MCP's (`is_mcp_request`), wherever its endpoint is."""
        return is_mcp_request(interaction.request)

    def is_terminal(self, event: ServerSentEvent) -> bool:
        """A JSON-RPC response (a result or an error) ends the stream that answers a request."""
        try:
            return _is_response(_json.parse(event.data, max_depth=None))
        except ValueError:
            return False

    def error_frames(
        self, error: Error, before: Sequence[Event] = (), sent: Sequence[ServerSentEvent] = ()
    ) -> list[bytes]:
        """A JSON-RPC error response in a `message` event, as the SDKs frame every message, with a null id
        (JSON-RPC's id for a request that cannot be told): see `answer_error_frames` for one that can."""
        return [errors.frame(errors.error_response(error, None))]

    def answer_error_frames(
        self, error: Error, request: Request | None, sent: Sequence[ServerSentEvent] = ()
    ) -> list[bytes]:
        """The JSON-RPC error response to `request`, with its id, in place of its result (see `errors`)."""
        return [errors.frame(errors.error_response(error, errors.request_id(request)))]

    def error_answer(self, error: Error, request: Request | None) -> bytes | None:
        """The JSON-RPC error response to `request`, with its id, as its whole JSON answer (see `errors`)."""
        return to_json(errors.error_response(error, errors.request_id(request))).encode()

    def operation(self, request: Request) -> str | None:
        """The JSON-RPC method the request's body calls."""
        body = request.json() if b'"method"' in request.body else None
        method = body.get("method") if isinstance(body, dict) else None
        return method if isinstance(method, str) else None

    def session(self, request: Request) -> str | None:
        """The `Mcp-Session-Id` the request carries."""
        return request.header(SESSION_HEADER)

    def tool_error(self, request: Request | None, message: str, text: str) -> str | None:
        """The response to a `tools/call` as the tool's error result (`isError: true`, see `errors`)."""
        return errors.tool_error(request, message, text)

    def progress(self, request: Request | None, sent: Sequence[ServerSentEvent], count: int) -> list[bytes] | None:
        """`notifications/progress` for the request's `progressToken`, counting on (see `errors`)."""
        return errors.progress(request, sent, count)

    def http_error(
        self, status: int, message: str, *, type: str | None = None, code: str | None = None
    ) -> tuple[int, Headers, bytes]:
        """A JSON-RPC error response with no id, as the SDKs answer a request refused before it is read: an
        invalid request for a status under 500, an internal error from 500 on."""
        number = _INVALID_REQUEST if status < 500 else errors.INTERNAL_ERROR
        body = {"jsonrpc": "2.0", "id": None, "error": {"code": number, "message": message}}
        return status, (("content-type", "application/json"),), to_json(body).encode()

    def wants_stream(self, body: Any, path: str = "") -> bool:
        """A request may be answered either way: the recording's shape is kept (never reshaped)."""
        return False

    def responders(self) -> Sequence[ProtocolResponder]:
        return (Sessions(self),)

    def holds(self, request: Request) -> bool:
        """A `GET` (the server's stream to the client, or one resumed with `Last-Event-ID`) and a 2026-07-28
        `subscriptions/listen`: streams the server holds open till the client leaves."""
        if request.method.upper() == "GET":
            return True
        body = request.json() if request.method.upper() == "POST" and b"subscriptions/listen" in request.body else None
        return isinstance(body, dict) and body.get("method") == "subscriptions/listen"

    def speaks(self, request: Request) -> bool:
        """Whether `request` is MCP's: to its path, or carrying MCP's headers or JSON-RPC."""
        return self.serves_path(request.path) or is_mcp_request(request)

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        """Each event's data is one JSON-RPC 2.0 message, a notification with no id; a stream that answers a
        request ends with its response (nothing after it, and no other), with the request's id (a `subscriptions/listen`
        stream, whose client may leave first, may end without one), and a listen stream's messages name it as
        their subscription."""
        c = Checker()
        asked = request.json() if request is not None else None
        id = asked.get("id") if isinstance(asked, dict) and "method" in asked else None
        listen = isinstance(asked, dict) and asked.get("method") == _LISTEN
        responses = 0
        for i, event in enumerate(events):
            if not event.data:
                continue  # the priming event: an id and no data
            message = c.json(i, event)
            if message is None:
                continue
            if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
                c.add(i, "data is not a JSON-RPC 2.0 message")
                continue
            method = message.get("method")
            if isinstance(method, str) and method.startswith("notifications/") and "id" in message:
                c.add(i, f"a notification ({method}) with an id")
            if responses and id is not None and not listen and not _is_response(message):
                c.add(i, "a message after the response: the stream ends with it")
            if _is_response(message):
                responses += 1
                for broken in _response_rules(message, id):
                    c.add(i, broken)
                if responses > 1:
                    c.add(i, "a second response in one request's stream")
            if listen and id is not None and "error" not in message and _subscription(message) != id:
                named = to_json(_subscription(message))
                c.add(i, f"a listen stream's message names subscription {named}, the request's id is {to_json(id)}")
        if (
            id is not None
            and request is not None
            and request.method.upper() == "POST"
            and responses == 0
            and not listen
        ):
            c.add(None, f"the stream has no response to the request (id {to_json(id)})")
        return c.violations

    def check_exchange(self, interaction: Interaction) -> list[Violation]:
        """An exchange of revision 2026-07-28 or later has no session: its answer carries no `Mcp-Session-Id`."""
        version = revision_of(interaction)
        if version is not None and stateless(version) and interaction.response.header(SESSION_HEADER) is not None:
            return [Violation(None, f"an Mcp-Session-Id in the answer: revision {version} has no sessions")]
        return []

    def summary(self, interaction: Interaction) -> str | None:
        """The MCP revision the exchange speaks (see `revision.revision_of`) and the method it calls."""
        version, method = revision_of(interaction), method_of(interaction.request)
        said = f"MCP revision {version}" if version is not None else "MCP, its revision not stated"
        return f"{said}: {method}" if method is not None else said

    def check_json(self, body: bytes, request: Request | None = None) -> list[Violation]:
        """A request's answer is its JSON-RPC response, with the request's id and not both a result and an
        error; a notification's, a response's and a DELETE's may be empty (202 Accepted, 200)."""
        if not body:
            asked = request.json() if request is not None else None
            if isinstance(asked, dict) and "method" in asked and "id" in asked:
                return [Violation(None, f"the answer to request id {to_json(asked['id'])} is empty")]
            return []
        try:
            message = _json.parse(body, max_depth=None)
        except ValueError:
            return [Violation(None, f"the answer is not JSON: {body[:40]!r}")]
        if not _is_response(message) or message.get("jsonrpc") != "2.0":
            return [Violation(None, "the answer is not a JSON-RPC 2.0 response")]
        asked = request.json() if request is not None else None
        id = asked.get("id") if isinstance(asked, dict) and "method" in asked else None
        return [Violation(None, broken) for broken in _response_rules(message, id)]
