"""How an MCP server fails, in MCP's words: what the faults ask the dialect for (see `dialect.MCP`).

A request that fails gets a JSON-RPC error response with its own id
(https://www.jsonrpc.org/specification#error_object): an internal error
(`-32603`) by default, the SDKs' request timeout (`-32001`) for the `timeout`
type, or the code the fault names. A tool that fails answers with a result
that says so (`isError: true`, its message as text content; from revision
2026-07-28 on, `resultType: "complete"` too), which the client hands back to
its caller rather than raising
(https://modelcontextprotocol.io/specification/2025-11-25/server/tools#error-handling).
Progress notifications carry the request's `progressToken` and a `progress`
that grows with each one
(https://modelcontextprotocol.io/specification/2025-11-25/basic/utilities/progress).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ... import _json
from ...cassette import Interaction, Request, Response
from ...sse import ServerSentEvent, encode_event
from .. import json_rpc
from ..events import Error
from ..json_rpc import INTERNAL_ERROR, MISSING
from ..protocol import to_json
from .jsonrpc import client_ids
from .revision import revision_of, stateless

__all__ = ["INTERNAL_ERROR", "REQUEST_TIMEOUT", "error_response", "frame", "progress", "request_id", "tool_error"]

REQUEST_TIMEOUT = -32001
"""The code the MCP SDKs give a request that timed out."""

#: The error `type`s that name a code of their own; any other is an internal error.
_TYPES = {"timeout": REQUEST_TIMEOUT}


def frame(message: Any) -> bytes:
    """One JSON-RPC message as an event, framed as the SDKs frame every message (`event: message`)."""
    return encode_event(to_json(message), event="message")


def error_response(error: Error, id: Any) -> dict[str, Any]:
    """The JSON-RPC error response with this `id` (see `json_rpc.error_response`): a `timeout` is the SDKs'
    request timeout (-32001)."""
    return json_rpc.error_response(error, id, _TYPES)


def request_id(request: Request | None) -> Any:
    """The id of the JSON-RPC request `request` carries; None (JSON-RPC's id for one that cannot be told) where
    it carries none."""
    id, _ = client_ids(request.json() if request is not None else None)
    return None if id is MISSING else id


def tool_error(request: Request | None, message: str, text: str) -> str | None:
    """`text`, the response to a `tools/call`, turned into the tool's error result saying `message` (see the
    module); None when it is no response, or not to a `tools/call`."""
    asked = request.json() if request is not None else None
    if not isinstance(asked, dict) or asked.get("method") != "tools/call":
        return None
    try:
        answer = _json.parse(text, max_depth=None)
    except ValueError:
        return None
    if not isinstance(answer, dict) or "method" in answer or not ("result" in answer or "error" in answer):
        return None
    result: dict[str, Any] = {"content": [{"type": "text", "text": message}], "isError": True}
    version = revision_of(Interaction(request, Response(200))) if request is not None else None
    if version is not None and stateless(version):  # a result says what it is from 2026-07-28 on
        result["resultType"] = "complete"
    return to_json({"jsonrpc": "2.0", "id": answer.get("id"), "result": result})


def progress(request: Request | None, sent: Sequence[ServerSentEvent], count: int) -> list[bytes] | None:
    """`count` progress notifications for the request's `progressToken`, counting on from the last one `sent`
    (without a total: the recorded one, if any, is reached already); None when the request asked for none."""
    _, token = client_ids(request.json() if request is not None else None)
    if token is MISSING:
        return None
    last: float = 0
    for event in sent:
        try:
            message = _json.parse(event.data, max_depth=None)
        except ValueError:
            continue
        if not isinstance(message, dict) or message.get("method") != "notifications/progress":
            continue
        params = message.get("params")
        if (
            isinstance(params, dict)
            and params.get("progressToken") == token
            and isinstance(params.get("progress"), (int, float))
        ):
            last = params["progress"]
    method = "notifications/progress"
    return [
        frame({"jsonrpc": "2.0", "method": method, "params": {"progressToken": token, "progress": last + n}})
        for n in range(1, count + 1)
    ]
