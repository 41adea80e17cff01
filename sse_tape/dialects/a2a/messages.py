"""A2A's messages in both of its vocabularies: what a request asks, what each streamed event is.

Protocol version 1.0 (https://a2a-protocol.org/latest/specification/) names
its JSON-RPC methods in PascalCase (`SendStreamingMessage`,
`SubscribeToTask`) and wraps each streamed result in the field that says
what it is (`{"task": ...}`, `{"statusUpdate": ...}`), with states such as
`TASK_STATE_COMPLETED`; its REST binding streams the same objects with no
JSON-RPC envelope (`POST /message:stream`, `GET /tasks/{id}:subscribe`).
Version 0.3 names its methods with slashes (`message/stream`,
`tasks/resubscribe`), says what a result is in its `kind`
(`status-update`), spells states in lower case (`completed`) and marks a
stream's last status update `final: true`; its REST binding (`/v1/...`)
sends the message under `request` with the protobuf's field names
(`message_id`, `content`). An a2a-sdk server speaks both versions on one
endpoint.
"""

from __future__ import annotations

from typing import Any

from ...cassette import Request
from ...cassette.model import agrees_as_recorded, holds_redacted
from .. import json_rpc
from ..json_rpc import MISSING, shown
from ..protocol import KeyedMatcher

__all__ = [
    "CARD_PATHS",
    "CONTEXT_IDS",
    "FINAL_STATES",
    "MESSAGE_IDS",
    "STREAMING",
    "SUBSCRIBING",
    "Payload",
    "a2a",
    "comparable",
    "is_a2a_request",
    "is_final",
    "payload",
    "sent_id",
    "sent_message",
]

CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")
"""Where an agent publishes its card: 1.0's path, and the one before 0.3."""

STREAMING = frozenset({"SendStreamingMessage", "message/stream"})
"""The JSON-RPC methods that send a message and stream the task it starts (1.0, 0.3)."""
SUBSCRIBING = frozenset({"SubscribeToTask", "tasks/resubscribe"})
"""The JSON-RPC methods that subscribe to a task's stream again (1.0, 0.3)."""

#: Every JSON-RPC method of 1.0 and those of 0.3 that MCP does not share (MCP has `tasks/get` and
#: `tasks/cancel` too, with `params.taskId`; A2A's have `params.id`).
_METHODS = frozenset(
    {
        "SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask",
        "CreateTaskPushNotificationConfig", "GetTaskPushNotificationConfig", "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig", "GetExtendedAgentCard",
        "message/send", "message/stream", "tasks/resubscribe", "agent/getAuthenticatedExtendedCard",
    }
)  # fmt: skip
_SHARED = frozenset({"tasks/get", "tasks/cancel"})

#: The field a 1.0 result is wrapped in, and the `kind` a 0.3 result names, for each of the four.
_WRAPPERS = {"task": "task", "message": "message", "statusUpdate": "status", "artifactUpdate": "artifact"}
_KINDS = {"task": "task", "message": "message", "status-update": "status", "artifact-update": "artifact"}

#: The states after which a task's stream has nothing more to say: it ended, or it waits for its client.
FINAL_STATES = frozenset(
    {
        "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED",
        "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED",
        "completed", "failed", "canceled", "rejected", "input-required", "auth-required",
    }
)  # fmt: skip

Payload = tuple[str, dict[str, Any]]
"""What one streamed result is (`task`, `message`, `status` or `artifact`) and its object."""


def is_a2a_request(request: Request) -> bool:
    """Whether a request is A2A's by what it carries: the `A2A-Version` header, or a JSON-RPC 2.0 request with
    one of A2A's methods."""
    if request.header("a2a-version") is not None:
        return True
    if b'"jsonrpc"' not in request.body:
        return False
    body = request.json()
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
        return False
    method, params = body.get("method"), body.get("params")
    return method in _METHODS or (method in _SHARED and isinstance(params, dict) and "id" in params)


def payload(result: Any) -> Payload | None:
    """What a streamed result (a JSON-RPC response's `result`, or a REST event's data) is, in either version;
    None when it is none of the four."""
    if not isinstance(result, dict):
        return None
    kind = result.get("kind")
    if isinstance(kind, str) and (kind := _KINDS.get(kind)) is not None:
        return kind, result
    wrapped = [key for key in result if key in _WRAPPERS]
    if len(wrapped) == 1 and isinstance(inner := result[wrapped[0]], dict):
        return _WRAPPERS[wrapped[0]], inner
    return None


def _state(obj: dict[str, Any]) -> Any:
    status = obj.get("status")
    return status.get("state") if isinstance(status, dict) else None


def is_final(found: Payload) -> bool:
    """Whether a streamed result ends its stream: a message, a status update marked `final` or in a final state,
    a task already in one."""
    kind, obj = found
    if kind == "message":
        return True
    if kind == "status" and obj.get("final") is True:
        return True
    return kind in ("status", "task") and _state(obj) in FINAL_STATES


#: A message's own id and its context's, as 1.0 and 0.3's JSON-RPC spell them, and 0.3's REST binding (the
#: protobuf's field names).
MESSAGE_IDS = ("messageId", "message_id")
CONTEXT_IDS = ("contextId", "context_id")


def sent_message(body: Any) -> dict[str, Any] | None:
    """The message a request sends: `params.message` (JSON-RPC), `message` (REST) or `request` (0.3's REST);
    None when it sends none."""
    if not isinstance(body, dict):
        return None
    params = body.get("params") if body.get("jsonrpc") == "2.0" else body
    if not isinstance(params, dict):
        return None
    message = params.get("message", params.get("request"))
    return message if isinstance(message, dict) else None


def _sent_key(body: dict[str, Any]) -> str:
    return "message" if "message" in body or "request" not in body else "request"


def sent_id(message: dict[str, Any], names: tuple[str, ...]) -> Any:
    """The first of the fields `names` a sent message has (its id under either spelling), or None."""
    return next((message[name] for name in names if name in message), None)


_AN_ID = "<the client's id>"  # what any JSON-RPC id is compared as


def comparable(body: Any) -> Any:
    """A request's body as `a2a` compares it: without the ids its client mints (the message's `messageId` and
    `contextId`, under either spelling, which it may leave out; whether it has a JSON-RPC `id`, not which)."""
    if not isinstance(body, dict):
        return body
    out = {k: (_AN_ID if k == "id" and body.get("jsonrpc") == "2.0" else v) for k, v in body.items()}
    message = sent_message(body)
    if message is not None:
        plain = {k: v for k, v in message.items() if k not in (*MESSAGE_IDS, *CONTEXT_IDS)}
        params = out.get("params")
        if body.get("jsonrpc") == "2.0" and isinstance(params, dict):
            out["params"] = {**params, "message": plain}
        else:
            out[_sent_key(body)] = plain
    return out


def _a2a(request: Request, recorded: Request) -> str | None:
    """The body as A2A: the method, the message's parts and every other field compared as data, never the ids
    the client mints (see `comparable`); a body that is not JSON compared whole."""
    return json_rpc.matched(request, recorded, comparable, _explained)


a2a = KeyedMatcher(
    _a2a,
    part=lambda request: json_rpc.matched_part(request, comparable),
    wild=lambda recorded: holds_redacted(recorded, comparable),
)
"""A2A's matcher: the body as A2A, the method, the message's parts and every other field compared as data, never
the ids the client mints (see `comparable`); a body that is not JSON compared whole. Keyed by that
(`KeyedMatcher`): an index finds a request's recordings by what it asks, not by comparing it with each."""


def _explained(a: Any, b: Any) -> str | None:
    """Why two comparable A2A requests of one method differ: their messages' parts, where those differ."""
    mine, theirs = sent_message(a), sent_message(b)
    key = "parts" if theirs is None or "content" not in theirs else "content"  # 0.3's REST: `content`
    if mine is not None and theirs is not None and not agrees_as_recorded(mine.get(key), theirs.get(key)):
        return (
            f"the message's parts differ: {shown(mine.get(key, MISSING))}, recorded {shown(theirs.get(key, MISSING))}"
        )
    return None
