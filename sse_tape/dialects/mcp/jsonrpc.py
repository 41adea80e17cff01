"""JSON-RPC as MCP's Streamable HTTP carries it: matched without the client's ids, answered with them.

A client numbers its requests (`id`) and names its progress notifications
(`params._meta.progressToken`) as it likes: a new session's `tools/call`
is the recorded one with other numbers. So a request is matched by what it
asks (`jsonrpc`: the body without those two), and the recorded answer goes
out carrying the request's own (`rewritten`, which `session.Sessions` asks
for): its response (`result` or `error`, in a JSON answer or in the stream)
takes the request's `id`, and each progress notification in the stream the
request's `progressToken`. The server's own
requests and other notifications in the stream keep theirs, as they are the
server's (https://modelcontextprotocol.io/specification/2025-11-25/basic/transports).
A client's answer to one of them is matched by its `result`, never its `id`.
`rewritten` also gives a stream's events other ids, where a session was given
theirs already (see `session.Sessions`; `event_ids` lists them).

Revision 2026-07-28 puts the protocol version, the client's info and its
capabilities in every request's `params._meta`: they are what the client
is, the same on each of its requests, and compared as data (a server may
answer otherwise to other capabilities). A `subscriptions/listen` stream
names its subscription, the listen request's id, in each message's `_meta`
(`io.modelcontextprotocol/subscriptionId`): replayed, it names the
request's. The W3C trace context an SDK adds to `_meta` when tracing is on
(`traceparent`, `tracestate`) is new on every request, in both revisions,
and never compared. An `input_required` result's `requestState` is compared
as it is: the client echoes the blob it was given, byte for byte, and the
replay gave it the recorded one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ... import _json
from ...cassette import Request
from ...cassette.model import agrees_as_recorded, holds_redacted
from ...plan import Plan, data_swapped
from .. import json_rpc
from ..json_rpc import MISSING, shown
from ..protocol import KeyedMatcher

__all__ = ["SUBSCRIPTION_ID", "client_ids", "comparable", "event_ids", "jsonrpc", "rewritten"]


SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
"""The `_meta` key by which a `subscriptions/listen` stream's messages name the listen request's id (2026-07-28)."""

_AN_ID = "<the client's id>"  # what any id is compared as

#: What a client's `params._meta` carries that is new on every request: the request's progress token, and the
#: W3C trace context the SDKs add when tracing is on (https://www.w3.org/TR/trace-context/).
_FRESH = frozenset({"progressToken", "traceparent", "tracestate"})


def client_ids(body: Any) -> tuple[Any, Any]:
    """A JSON-RPC request's `id` and its `params._meta.progressToken` (`MISSING` where it has none)."""
    if not isinstance(body, dict):
        return MISSING, MISSING
    params = body.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    token = meta.get("progressToken", MISSING) if isinstance(meta, dict) else MISSING
    return body.get("id", MISSING), token


def comparable(body: Any) -> Any:
    """A JSON-RPC message as `jsonrpc` compares it: whether it has an `id` (a request, not a notification), not
    which, and without what `params._meta` carries new on every request (its `progressToken`, a trace
    context), nor a `_meta` left empty by that, as a client that asks for no progress sends none."""
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
        return body
    out = {k: (_AN_ID if k == "id" else v) for k, v in body.items()}
    params = out.get("params")
    if isinstance(params, dict) and isinstance(params.get("_meta"), dict) and _FRESH & params["_meta"].keys():
        meta = {k: v for k, v in params["_meta"].items() if k not in _FRESH}
        params = {k: v for k, v in params.items() if k != "_meta"} | ({"_meta": meta} if meta else {})
        out["params"] = params
    return out


def _jsonrpc(request: Request, recorded: Request) -> str | None:
    """The body as JSON-RPC: method and params compared as data, never the client's `id`, its
    `progressToken` nor a trace context; a body that is not JSON-RPC compared whole, as the `body` matcher does."""
    return json_rpc.matched(request, recorded, comparable, _explained)


jsonrpc = KeyedMatcher(
    _jsonrpc,
    part=lambda request: json_rpc.matched_part(request, comparable),
    wild=lambda recorded: holds_redacted(recorded, comparable),
)
"""MCP's matcher: the body as JSON-RPC, method and params compared as data, never the client's `id`, its
`progressToken` nor a trace context; a body that is not JSON-RPC compared whole, as the `body` matcher does.
Keyed by that (`KeyedMatcher`): an index finds a request's recordings by its method and params."""


def _explained(a: Any, b: Any) -> str | None:
    """Why two comparable JSON-RPC messages of one method differ: a request against a notification, else the
    first member of their params (or result, or error) that differs."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return None
    if ("id" in a) != ("id" in b):
        kinds = ("a notification (no id)", "a request") if "id" in b else ("a request", "a notification (no id)")
        return f"body is {kinds[0]}, recorded {kinds[1]}"
    for key in ("params", "result", "error"):
        if not agrees_as_recorded(a.get(key), b.get(key)):
            path, here, there = _first_difference(key, a.get(key, MISSING), b.get(key, MISSING))
            return f"{path} is {shown(here)}, recorded {shown(there)}"
    return None


def _first_difference(path: str, here: Any, there: Any) -> tuple[str, Any, Any]:
    """Where two JSON values that differ first differ, and what each holds there: down through the objects both
    are, so that a long `params` (a 2026-07-28 request's `_meta`) says which member differs."""
    while isinstance(here, dict) and isinstance(there, dict):
        key = next(k for k in [*here, *(k for k in there if k not in here)] if not _agree(here, there, k))
        path, here, there = f"{path}.{key}", here.get(key, MISSING), there.get(key, MISSING)
    return path, here, there


def _agree(here: dict[str, Any], there: dict[str, Any], key: str) -> bool:
    return key in here and key in there and agrees_as_recorded(here[key], there[key])


def _answering(message: Any, id: Any, token: Any) -> Any:
    """`message` carrying the request's `id` (a response, and the subscription id a listen stream's messages
    name) or `token` (a progress notification); the very same object when it needs no change."""
    if not isinstance(message, dict):
        return message
    if "method" not in message and ("result" in message or "error" in message) and id is not MISSING:
        message = message if message.get("id") == id else {**message, "id": id}
        return _subscribed(message, "result", id)
    if message.get("method") == "notifications/progress" and token is not MISSING:
        params = message.get("params")
        if isinstance(params, dict) and params.get("progressToken") != token:
            return {**message, "params": {**params, "progressToken": token}}
    if "method" in message and "id" not in message and id is not MISSING:
        return _subscribed(message, "params", id)
    return message


def _subscribed(message: dict[str, Any], key: str, id: Any) -> dict[str, Any]:
    """`message` whose `key` (its `params` or `result`) names the subscription `id` in its `_meta`, where it
    names one (a `subscriptions/listen` stream's messages do); the same object when it needs no change."""
    inner = message.get(key)
    if not isinstance(inner, dict):
        return message
    meta = inner.get("_meta")
    if not isinstance(meta, dict) or SUBSCRIPTION_ID not in meta or meta[SUBSCRIPTION_ID] == id:
        return message
    return {**message, key: {**inner, "_meta": {**meta, SUBSCRIPTION_ID: id}}}


def rewritten(plan: Plan, id: Any, token: Any, *, stream: bool, ids: Mapping[str, str] | None = None) -> Plan | None:
    """`plan` answering the request whose `id` and progress `token` are given: a copy whose response carries
    that id (and a listen stream's messages it as their subscription id) and whose progress notifications that
    token, and (a stream) whose events' ids are changed as `ids` says; None when it needs no change.

    A stream's events are rewritten one by one, each where it was: the writes keep their times, and a write
    that ended inside a rewritten event ends at the same place in its new text.
    """
    if not stream:
        try:
            body = _json.parse(plan.body, max_depth=None)
        except ValueError:
            return None
        changed = _answering(body, id, token)
        if changed is body:
            return None
        return plan.with_body(_json.dumps(changed).encode())
    body = plan.body
    pieces: list[tuple[int, int, bytes]] = []  # (start, end, new bytes) of each event rewritten
    for block in plan.blocks if ids else plan.events:
        old = new = body[block.start : block.end]
        if ids:
            new = _with_ids(old, ids)
        message = changed = None
        if block.event is not None:
            try:
                message = _json.parse(block.event.data, max_depth=None)
            except ValueError:
                pass
            else:
                changed = _answering(message, id, token)
        if changed is not message:
            assert block.event is not None
            # (data on more than one line is not how MCP's servers write a message: left as it is)
            new = data_swapped(new, block.event.data, _json.dumps(changed)) or new
        if new != old:
            pieces.append((block.start, block.end, new))
    return plan.spliced(pieces) if pieces else None


def event_ids(plan: Plan) -> list[str]:
    """The ids a stream's events set (its `id:` fields), in order, each once."""
    body, found = plan.body, dict[str, None]()
    for block in plan.blocks:
        for line in _LINES.split(body[block.start : block.end]):
            if line.startswith(b"id:"):
                found[_field_value(line).decode("utf-8", "replace")] = None
    return list(found)


def _with_ids(block: bytes, ids: Mapping[str, str]) -> bytes:
    """A block whose `id:` field is changed as `ids` says."""
    parts = _LINE_ENDS.split(block)  # lines and the ends between them
    for i in range(0, len(parts), 2):
        line = parts[i]
        if line.startswith(b"id:"):
            new = ids.get(_field_value(line).decode("utf-8", "replace"))
            if new is not None:
                parts[i] = b"id: " + new.encode()
    return b"".join(parts)


def _field_value(line: bytes) -> bytes:
    """An SSE field's value: what follows the colon, less one space (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation)."""
    value = line.partition(b":")[2]
    return value[1:] if value.startswith(b" ") else value


_LINE_ENDS = re.compile(rb"(\r\n|\r|\n)")
_LINES = re.compile(rb"\r\n|\r|\n")
