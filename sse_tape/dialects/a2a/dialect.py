"""`A2A`: the Agent2Agent protocol's streams, JSON-RPC and REST, versions 1.0 and 0.3, as a `Protocol`.

A client sends a message and the agent streams the task it starts: a
`Task`, then status updates (`working`...) and artifact updates (chunks of
its output), and last a status in a final state (`completed`, `failed`,
`canceled`, `rejected`, `input-required`; in 0.3 marked `final: true`), or
one `Message` in place of a task. Over JSON-RPC each event is one response
to the request (its `id`, the result); over the REST binding each is the
result alone. An agent's card (`/.well-known/agent-card.json`) says where it
is reached and in which bindings. See https://a2a-protocol.org/latest/specification/.
It generates no text: a protocol without `Generation`, matched by `a2a`
(never the ids a client mints) and answered with the client's own ids
(`replies.Replies`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ... import _json
from ...cassette import Headers, Interaction, Request
from ...sse import ServerSentEvent, encode_event
from ..events import Error, Event
from ..json_rpc import error_response
from ..protocol import Checker, Protocol, ProtocolResponder, RequestMatcher, Violation, to_json
from .messages import CARD_PATHS, a2a, is_a2a_request, is_final, payload
from .replies import Replies

__all__ = ["A2A", "TASK_FAILED"]

TASK_FAILED = "task_failed"
"""The `error` fault's `type` that ends the task `failed` (a status update with the fault's message), not
the request in a JSON-RPC error."""

#: The REST binding's error: HTTP status to google.rpc status name, as the a2a-sdk maps them.
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
    409: "ALREADY_EXISTS", 429: "RESOURCE_EXHAUSTED", 501: "UNIMPLEMENTED", 503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}  # fmt: skip

_REST_SUFFIXES = ("/message:stream", "/message:send")


def _rest_error(status: int, message: str, reason: str) -> dict[str, Any]:
    """The REST binding's error body, `{"error": {code, status, message, details}}` (google.rpc.Status)."""
    name = _STATUS_NAMES.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")
    info = {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "a2a-protocol.org",
        "metadata": {},
    }
    return {"error": {"code": status, "status": name, "message": message, "details": [info]}}


def _parsed(event: ServerSentEvent) -> Any:
    try:
        return _json.parse(event.data, max_depth=None)
    except ValueError:
        return None


class A2A(Protocol):
    """The Agent2Agent protocol (see the module)."""

    name = "a2a"
    path = "/message:stream"
    matchers: ClassVar[Mapping[str, RequestMatcher]] = {"a2a": a2a}
    match_on = ("method", "path", "a2a")

    def serves_path(self, path: str) -> bool:
        """The REST binding's message paths, a task's `:subscribe`, and the agent card's; JSON-RPC's endpoint is
        the agent's to choose, and told by its requests (`recognises`)."""
        path = path.rstrip("/")
        if path.endswith(_REST_SUFFIXES) or path.endswith(CARD_PATHS):
            return True
        return "/tasks/" in path and path.endswith(":subscribe")

    def recognises(self, interaction: Interaction) -> bool:
        """An exchange whose request is A2A's (`is_a2a_request`), wherever its endpoint is."""
        return is_a2a_request(interaction.request)

    def is_terminal(self, event: ServerSentEvent) -> bool:
        """A final result (see `messages.is_final`), or an error: the stream has nothing more to say."""
        if event.event == "error":
            return True
        message = _parsed(event)
        if isinstance(message, dict) and message.get("jsonrpc") == "2.0":
            if "error" in message:
                return True
            message = message.get("result")
        found = payload(message)
        return found is not None and is_final(found)

    def error_frames(
        self, error: Error, before: Sequence[Event] = (), sent: Sequence[ServerSentEvent] = ()
    ) -> list[bytes]:
        """What an a2a-sdk server sends when its agent fails mid-stream: over JSON-RPC, an `error` event holding
        a JSON-RPC error response with the request's id (read from the events sent; null before any); over
        REST, an `error` event holding the REST error. With the type `task_failed`, the task ends `failed`
        instead: a final status update whose message is the error's."""
        last = next((m for m in map(_parsed, reversed(sent)) if isinstance(m, dict)), None)
        jsonrpc = last is None or last.get("jsonrpc") == "2.0"
        id = last.get("id") if last is not None and jsonrpc else None
        return self._error_frames(error, sent, jsonrpc, id)

    def answer_error_frames(
        self, error: Error, request: Request | None, sent: Sequence[ServerSentEvent] = ()
    ) -> list[bytes]:
        """As `error_frames`, the binding and the JSON-RPC id told by `request`: its own id even before any
        event was sent."""
        body = request.json() if request is not None else None
        if not isinstance(body, dict):
            return self.error_frames(error, sent=sent)
        jsonrpc = body.get("jsonrpc") == "2.0"
        return self._error_frames(error, sent, jsonrpc, body.get("id") if jsonrpc else None)

    def _error_frames(self, error: Error, sent: Sequence[ServerSentEvent], jsonrpc: bool, id: Any) -> list[bytes]:
        if error.type == TASK_FAILED and sent:
            failed = _failed(error.message, [payload(m.get("result") if jsonrpc else m) for m in map(_parsed, sent)])
            if failed is not None:
                body = {"id": id, "jsonrpc": "2.0", "result": failed} if jsonrpc else failed
                return [encode_event(to_json(body))]
        if jsonrpc:
            return [encode_event(to_json(error_response(error, id)), event="error")]
        return [encode_event(to_json(_rest_error(500, error.message, "INTERNAL_ERROR")), event="error")]

    def http_error(
        self, status: int, message: str, *, type: str | None = None, code: str | None = None
    ) -> tuple[int, Headers, bytes]:
        """The REST binding's error (`{"error": {code, status, message, details}}`), which an a2a-sdk client
        raises with its message over either binding."""
        body = _rest_error(status, message, code.upper() if code else "INTERNAL_ERROR")
        return status, (("content-type", "application/json"),), to_json(body).encode()

    def wants_stream(self, body: Any, path: str = "") -> bool:
        """A request may be answered either way (`SendMessage` with one JSON result): the recording's shape is
        kept."""
        return False

    def operation(self, request: Request) -> str | None:
        """The JSON-RPC method the request's body calls (`SendStreamingMessage`, `message/stream`); None over
        the REST binding, whose path says it."""
        body = request.json() if b'"jsonrpc"' in request.body else None
        method = body.get("method") if isinstance(body, dict) else None
        return method if isinstance(method, str) else None

    def responders(self) -> Sequence[ProtocolResponder]:
        return (Replies(self),)

    def speaks(self, request: Request) -> bool:
        """Whether `request` is A2A's: to one of its paths, or carrying its header or one of its methods."""
        return self.serves_path(request.path) or is_a2a_request(request)

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        """A2A's streaming rules, each named first in its message: `jsonrpc-response` (over JSON-RPC, each event
        one JSON-RPC 2.0 response with the request's id, a result or an error), `result-kind` (each result a
        Task, a Message, a status update or an artifact update), `task-id` (the updates name the stream's
        task), `final-status` (the stream ends with a final one) and `after-final` (nothing follows it)."""
        c = Checker()
        asked = request.json() if request is not None else None
        jsonrpc = isinstance(asked, dict) and asked.get("jsonrpc") == "2.0"
        id = asked.get("id") if jsonrpc and isinstance(asked, dict) else None
        task: Any = None
        ended: int | None = None
        for i, event in enumerate(events):
            message = c.json(i, event)
            if message is None:
                continue
            if ended is not None:
                c.add(i, f"after-final: an event after the stream's final one (event {ended + 1})")
                continue
            result = message
            if jsonrpc or (isinstance(message, dict) and "jsonrpc" in message):
                if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
                    c.add(i, "jsonrpc-response: data is not a JSON-RPC 2.0 response")
                    continue
                if id is not None and message.get("id") != id:
                    c.add(i, f"jsonrpc-response: a response to id {to_json(message.get('id'))}, the request's is "
                          f"{to_json(id)}")  # fmt: skip
                if ("result" in message) == ("error" in message):
                    c.add(i, "jsonrpc-response: a response needs a result or an error, not both or neither")
                if "error" in message:
                    ended = i
                    continue
                result = message.get("result")
            elif event.event == "error":
                ended = i
                continue
            found = payload(result)
            if found is None:
                c.add(i, "result-kind: the result is not a Task, a Message, a status update or an artifact update")
                continue
            kind, obj = found
            if kind == "task" and task is None:
                task = obj.get("id")
            elif kind in ("status", "artifact") and task is not None and obj.get("taskId") != task:
                c.add(i, f"task-id: an update for task {to_json(obj.get('taskId'))} in task {to_json(task)}'s stream")
            if is_final(found):
                ended = i
        if events and ended is None:
            c.add(None, "final-status: the stream ends with no final status (completed, failed, canceled, "
                  "rejected, input-required) nor a message")  # fmt: skip
        return c.violations

    def check_json(self, body: bytes, request: Request | None = None) -> list[Violation]:
        """An answer is JSON; to a JSON-RPC request, its response (`jsonrpc-response`), with its id."""
        try:
            message = _json.parse(body, max_depth=None)
        except ValueError:
            return [Violation(None, f"the answer is not JSON: {body[:40]!r}")]
        asked = request.json() if request is not None else None
        if not (isinstance(asked, dict) and asked.get("jsonrpc") == "2.0"):
            return []
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return [Violation(None, "jsonrpc-response: the answer is not a JSON-RPC 2.0 response")]
        if message.get("id") != asked.get("id"):
            return [Violation(None, f"jsonrpc-response: a response to id {to_json(message.get('id'))}, the "
                              f"request's is {to_json(asked.get('id'))}")]  # fmt: skip
        return []


def _failed(text: str, sent: Sequence[Any]) -> dict[str, Any] | None:
    """A final status update that fails the task the events `sent` (their payloads) are about, with `text` as
    its message, in their version's words; None when they name no task."""
    found = [p for p in sent if p is not None]
    about = next((obj for kind, obj in found if kind in ("status", "artifact")), None)
    task = next((obj for kind, obj in found if kind == "task"), None)
    task_id = about.get("taskId") if about is not None else task.get("id") if task is not None else None
    context = (about or task or {}).get("contextId")
    if not isinstance(task_id, str):
        return None
    legacy = any("kind" in obj for _, obj in found)
    message_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"sse-tape:{task_id}:{text}"))
    if legacy:
        message = {"kind": "message", "messageId": message_id, "role": "agent",
                   "parts": [{"kind": "text", "text": text}], "taskId": task_id, "contextId": context}  # fmt: skip
        return {"kind": "status-update", "taskId": task_id, "contextId": context, "final": True,
                "status": {"state": "failed", "message": message}}  # fmt: skip
    # 0.3's REST binding names a message's parts `content`: as the task's history shows it, if it does.
    history = task.get("history") if task is not None else None
    echoed = [m for m in history if isinstance(m, dict)] if isinstance(history, list) else []
    parts = "content" if any("content" in m for m in echoed) else "parts"
    message = {"messageId": message_id, "role": "ROLE_AGENT", parts: [{"text": text}], "taskId": task_id,
               "contextId": context}  # fmt: skip
    return {"statusUpdate": {"taskId": task_id, "contextId": context,
                             "status": {"state": "TASK_STATE_FAILED", "message": message}}}  # fmt: skip
