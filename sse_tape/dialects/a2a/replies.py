"""A2A's answers on replay: with the ids the client minted, and an agent card that names the replay.

A client mints the JSON-RPC `id` of each request and the `messageId` of each
message it sends (the a2a-sdk a UUID each time), and may name the
`contextId` a message belongs to. The recorded answer goes out carrying the
request's own: each JSON-RPC response its `id`; wherever the recorded
client's message id comes back (the task's history echoes the message), the
request's; and where the request named its context, that context in place
of the recorded one (a server uses the context a client names). The task
and context ids the server minted stay as recorded: they are the server's,
and a client learns them from the answer (to resubscribe, to send the next
message of the task).

An agent card names the URLs its agent is reached at
(`supportedInterfaces[].url`; in 0.3 `url` and `additionalInterfaces`),
the recorder's when it was recorded through `sse-tape record`. On replay
they name the replay (scheme and host of the request, the recorded path):
the replay is the agent now, and a client that reads the card reaches it.

A task's stream is kept in the replay's state as it goes out, with how many
of its events its client got (all, or those before a fault cut it). A
subscription to that task again (`SubscribeToTask`, 0.3's
`tasks/resubscribe`, REST's `/tasks/{id}:subscribe`) gets the rest, as an
agent that went on working answers it: first the task as the client's
events left it (a `Task` with its last status and its artifacts so far),
then each event it did not get, once, at the recorded pace. A subscription
to a task whose client got its final event is refused as the a2a-sdk
refuses it (the task is in a terminal state); one to a task this replay
never streamed is matched against the recordings like any request.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from ... import _json
from ...cassette import Request
from ...plan import Plan, data_swapped
from ...sse import encode_event
from ..protocol import Incoming, Kept, Protocol, ProtocolResponder
from .messages import CARD_PATHS, CONTEXT_IDS, MESSAGE_IDS, SUBSCRIBING, is_final, payload, sent_id, sent_message

if TYPE_CHECKING:  # what an answer is: the server's, which imports aiohttp
    from aiohttp import web

__all__ = ["Replies", "subscribed_task"]

_MISSING: Any = object()
_USERS = ("ROLE_USER", "user")
_TASK = "task "  # a task's stream, in the state: `task <id>`
_SUBSCRIBE_PATH = re.compile(r"/tasks/([^/]+):subscribe$")
#: A2A's JSON-RPC error for an operation the task's state does not allow (https://a2a-protocol.org/latest/specification/).
_UNSUPPORTED_OPERATION = -32004


class Replies(ProtocolResponder):
    """A2A's answers with the client's own ids, its agent card naming the replay, and its tasks resubscribed to
    (see the module).

    `dialect` tells its requests (`A2A.speaks`) and frames the faults on a resubscription.
    """

    def __init__(self, dialect: Protocol) -> None:
        self.dialect = dialect

    def concerns(self, request: Request) -> bool:
        return self.dialect.speaks(request)

    async def respond(self, incoming: Incoming) -> web.StreamResponse | None:
        request = incoming.request
        if not self.dialect.speaks(request):
            return None
        if request.path.rstrip("/").endswith(CARD_PATHS):
            host = request.header("host")
            if host is not None:
                incoming.keep(functools.partial(_card, f"http://{host}"))
            return None
        body = request.json()
        task = subscribed_task(request)
        if task is not None and (streamed := incoming.state.get(_TASK + task)) is not None:
            return await self._resubscribed(incoming, task, streamed, body)
        incoming.keep(functools.partial(_answer, incoming.state, body))
        return None

    async def _resubscribed(
        self, incoming: Incoming, task: str, streamed: dict[str, Any], body: Any
    ) -> web.StreamResponse:
        """The rest of a task this replay streamed, after the events its client got: the task as they left it
        (a `Task`, as a server's subscription opens), then the events it did not get, at their recorded pace.
        A task whose client got its final event is over: refused as an a2a-sdk server refuses it."""
        results: list[Any] = streamed["results"]
        times: list[float] = streamed["times"]
        seen: int = streamed["seen"]
        jsonrpc = isinstance(body, dict) and body.get("jsonrpc") == "2.0"
        id = body.get("id") if jsonrpc and isinstance(body, dict) else None
        found = [payload(r) for r in results[:seen]]
        if seen >= len(results) or any(p is not None and is_final(p) for p in found):
            state = next((_state_of(p[1]) for p in reversed(found) if p is not None and p[0] != "artifact"), None)
            if streamed.get("failed"):  # its client saw it fail, not end as recorded
                state = "TASK_STATE_FAILED"
            version = incoming.request.header("a2a-version") or ""
            status, answer = _over(task, state, id if jsonrpc else _MISSING, legacy=version.startswith("0."))
            incoming.note(status, f"task {task} is over: its client got its final event")
            plan = Plan(status, [("content-type", "application/json")], [(0.0, answer)])
            return await incoming.send(plan, stream=False, dialect=self.dialect)
        start = max(seen, 1)  # the task's opening event, or the snapshot in its place
        snapshot = _snapshot(results[:start])
        frames = [_frame(snapshot, id, jsonrpc)] + [_frame(r, id, jsonrpc) for r in results[start:]]
        offsets = [0.0] + [max(t - times[start - 1], 0.0) for t in times[start:]]
        headers = [("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-store")]
        plan = Plan(200, headers, list(zip(offsets, frames, strict=True)), end_at=offsets[-1])
        incoming.note(200, f"task {task} resubscribed after event {seen}")
        try:
            return await incoming.send(plan, stream=True, dialect=self.dialect)
        finally:
            got = incoming.events_sent()
            if got:
                incoming.state[_TASK + task] = {**streamed, "seen": start - 1 + got}


def subscribed_task(request: Request) -> str | None:
    """The task a request subscribes to again (`SubscribeToTask`, `tasks/resubscribe`, REST's
    `/tasks/{id}:subscribe`), or None when it is no subscription."""
    found = _SUBSCRIBE_PATH.search(request.path)
    if found is not None:
        return unquote(found.group(1))
    body = request.json()
    if isinstance(body, dict) and body.get("jsonrpc") == "2.0" and body.get("method") in SUBSCRIBING:
        params = body.get("params")
        task = params.get("id") if isinstance(params, dict) else None
        return task if isinstance(task, str) else None
    return None


def _answer(state: MutableMapping[str, Any], body: Any, plan: Plan) -> Kept | None:
    """The recorded answer `plan` carrying the ids of the request whose body is `body` (see the module); a
    task's stream is kept in `state`, with how much of it the client got, for a resubscription."""
    if not 200 <= plan.status < 300:
        return None
    stream = plan.is_event_stream()
    if stream:
        events = plan.events
        texts = [block.event.data for block in events if block.event is not None]
    else:
        texts = [plan.body.decode("utf-8", "replace")]
    messages = [_parse(text) for text in texts]
    id = body.get("id", _MISSING) if isinstance(body, dict) and body.get("jsonrpc") == "2.0" else _MISSING
    ended = _kept_task(state, messages, [plan.time_at(block.start) for block in events]) if stream else None
    swaps = _swaps(body, messages)
    changed = [_rewritten(text, message, swaps, id) for text, message in zip(texts, messages, strict=True)]
    if all(c is None for c in changed):
        return Kept("as recorded", ended=ended) if ended is not None else None
    if not stream:
        assert changed[0] is not None
        return Kept("with the request's ids", plan.with_body(changed[0].encode()))
    body_bytes = plan.body
    pieces: list[tuple[int, int, bytes]] = []
    for block, text in zip(plan.events, changed, strict=True):
        if text is None or block.event is None:
            continue
        # (data on more than one line is not how A2A's servers write an event: left as it is)
        if (swapped := data_swapped(body_bytes[block.start : block.end], block.event.data, text)) is not None:
            pieces.append((block.start, block.end, swapped))
    return Kept("with the request's ids", plan.spliced(pieces), stream=True, ended=ended)


def _kept_task(
    state: MutableMapping[str, Any], messages: Sequence[Any], times: Sequence[float]
) -> Callable[[int, bool], None] | None:
    """Keep a task's stream (its results and their times) in `state`; what notes how many of its events the
    client got. None for a stream that is no task's."""
    results = [m.get("result") if isinstance(m, dict) and m.get("jsonrpc") == "2.0" else m for m in messages]
    first = payload(results[0]) if results else None
    if first is None or first[0] != "task" or not isinstance(task := first[1].get("id"), str):
        return None
    key = _TASK + task
    state[key] = {"results": results, "times": list(times), "seen": 0}

    def ended(got: int, over: bool) -> None:
        streamed = state.get(key)
        if streamed is not None:  # a stream the client saw end (a fault's failure too) has nothing more to give
            failed = over and got < len(results)  # ended before its recorded end: by a fault's error or failure
            state[key] = {**streamed, "seen": len(results) if over else got, "failed": failed}

    return ended


def _state_of(obj: dict[str, Any]) -> Any:
    status = obj.get("status")
    return status.get("state") if isinstance(status, dict) else None


def _snapshot(results: Sequence[Any]) -> Any:
    """The task as the events `results` (its opening `Task` first) leave it: its last status, its artifacts
    with every chunk appended, as a server's subscription opens with it."""
    found = [p for p in map(payload, results) if p is not None]
    kind, opening = found[0]
    task = copy.deepcopy(opening)
    artifacts: list[dict[str, Any]] = list(task.get("artifacts") or [])
    for kind, obj in found[1:]:
        if kind == "status" and "status" in obj:
            task["status"] = obj["status"]
        elif kind == "artifact" and isinstance(artifact := obj.get("artifact"), dict):
            same = next((a for a in artifacts if a.get("artifactId") == artifact.get("artifactId")), None)
            if same is not None and obj.get("append"):
                same["parts"] = [*same.get("parts", []), *artifact.get("parts", [])]
            elif same is not None:
                artifacts[artifacts.index(same)] = dict(artifact)
            else:
                artifacts.append(dict(artifact))
    if artifacts:
        history = task.pop("history", None)
        task["artifacts"] = artifacts
        if history is not None:
            task["history"] = history
    return task if "kind" in task else {"task": task}


def _frame(result: Any, id: Any, jsonrpc: bool) -> bytes:
    """A result as an event of the subscription: in a JSON-RPC response with its `id`, or alone (REST)."""
    return encode_event(_json.dumps({"id": id, "jsonrpc": "2.0", "result": result} if jsonrpc else result))


def _over(task: str, state: Any, id: Any, *, legacy: bool) -> tuple[int, bytes]:
    """What an a2a-sdk server answers a subscription to a task in a final state: JSON-RPC's unsupported
    operation with the request's id (`id`), or REST's failed precondition (`id` missing; to a 0.3 client,
    `legacy`, the error named by its type, as its REST client reads one)."""
    if isinstance(state, str) and not state.startswith("TASK_STATE_"):  # 0.3's word: named as 1.0 names it
        state = "TASK_STATE_" + state.upper().replace("-", "_")
    message = f"Task {task} is in terminal state: {state}"
    info = {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "UNSUPPORTED_OPERATION",
            "domain": "a2a-protocol.org", "metadata": {}}  # fmt: skip
    if id is _MISSING and legacy:
        return 400, _json.dumps({"type": "UnsupportedOperationError", "message": message}).encode()
    if id is _MISSING:
        error = {"code": 400, "status": "FAILED_PRECONDITION", "message": message, "details": [info]}
        return 400, _json.dumps({"error": error}).encode()
    body = {"error": {"code": _UNSUPPORTED_OPERATION, "message": message, "data": [info]}, "id": id, "jsonrpc": "2.0"}
    return 200, _json.dumps(body).encode()


def _swaps(body: Any, messages: Sequence[Any]) -> dict[str, str]:
    """The recorded client's ids and the request's in their place: its message's id, and its context's where
    it named one."""
    sent = sent_message(body)
    if sent is None:
        return {}
    results = [m.get("result") if isinstance(m, dict) and m.get("jsonrpc") == "2.0" else m for m in messages]
    task = next((obj for kind, obj in filter(None, map(payload, results)) if kind == "task"), None)
    history = task.get("history") if task is not None else None
    echoed = (
        [m for m in history if isinstance(m, dict) and m.get("role") in _USERS] if isinstance(history, list) else []
    )
    out: dict[str, str] = {}
    mine = sent_id(sent, MESSAGE_IDS)
    theirs = echoed[-1].get("messageId") if echoed else None
    if isinstance(mine, str) and isinstance(theirs, str) and mine != theirs:
        out[theirs] = mine
    context, recorded = sent_id(sent, CONTEXT_IDS), task.get("contextId") if task is not None else None
    if isinstance(context, str) and isinstance(recorded, str) and context != recorded:
        out[recorded] = context
    return out


def _swapped(value: Any, swaps: dict[str, str]) -> Any:
    if isinstance(value, str):
        return swaps.get(value, value)
    if isinstance(value, dict):
        return {k: _swapped(v, swaps) for k, v in value.items()}
    if isinstance(value, list):
        return [_swapped(v, swaps) for v in value]
    return value


def _rewritten(text: str, message: Any, swaps: dict[str, str], id: Any) -> str | None:
    """An event's (or a JSON answer's) text with the request's ids; None when it needs no change. The ids are
    replaced where they stand, so the rest of the text is as recorded; text that cannot be is written anew."""
    if message is _MISSING:
        return None
    target = _swapped(message, swaps)
    pairs = dict(swaps)
    if id is not _MISSING and isinstance(target, dict) and target.get("jsonrpc") == "2.0" and "method" not in target:
        if isinstance(target.get("id"), str) and isinstance(id, str):
            pairs[target["id"]] = id
        target = {**target, "id": id}
    if target == message:
        return None
    attempt = text
    for old, new in pairs.items():
        attempt = attempt.replace(_json.dumps(old), _json.dumps(new))
    return attempt if _parse(attempt) == target else _json.dumps(target)


def _card(origin: str, plan: Plan) -> Kept | None:
    """The recorded agent card naming `origin` (the replay) in each URL it is reached at."""
    if not 200 <= plan.status < 300:
        return None
    text = plan.body.decode("utf-8", "replace")
    card = _parse(text)
    if not isinstance(card, dict):
        return None
    urls = [card.get("url")]
    for key in ("supportedInterfaces", "additionalInterfaces"):
        interfaces = card.get(key)
        if isinstance(interfaces, list):
            urls += [i.get("url") for i in interfaces if isinstance(i, dict)]
    swaps = {url: _moved(url, origin) for url in urls if isinstance(url, str) and _moved(url, origin) != url}
    new = _rewritten(text, card, swaps, _MISSING)
    if new is None:
        return None
    return Kept(f"the card names {origin}", plan.with_body(new.encode()))


def _moved(url: str, origin: str) -> str:
    """`url` at `origin` (scheme and host), with its own path."""
    parts, to = urlsplit(url), urlsplit(origin)
    if not parts.scheme.startswith("http"):
        return url  # a gRPC interface, say: not one the replay serves
    return urlunsplit((to.scheme, to.netloc, parts.path, parts.query, parts.fragment))


def _parse(text: str) -> Any:
    try:
        return _json.parse(text, max_depth=None)
    except ValueError:
        return _MISSING
