"""Background responses, as the Responses API keeps them: retrieved, resumed and cancelled.

OpenAI's Responses API runs a request with `"background": true` apart from
the connection that asked for it. A request for no stream is answered at once
with the response, `queued`; a stream may drop and be picked up again with
`GET /v1/responses/{id}?stream=true&starting_after=N`, N being the
`sequence_number` of the last event the client got; `GET /v1/responses/{id}`
says how the response stands, and `POST /v1/responses/{id}/cancel` stops it
(https://platform.openai.com/docs/guides/background).

When a recorded Responses stream answers such a request, `Background`, the
responder this dialect brings (see `Protocol.responders`), keeps what replay
plays (`Incoming.keep`) as a `BackgroundResponse`: that stream at the server's
pace, counted from the request's arrival, and what became of it since; a
request for no stream is answered at once with the response, queued. It lives
in the server's replay state, so `reset` forgets it. Standing in front of
replay, `Background` answers the requests for it as the recorded timing has
the response at that moment:

- `GET …/responses/{id}`: `queued` until the stream's first event is due,
  then the `Response` its last lifecycle event due carries (`response.created`,
  `response.in_progress`, ..., last `response.completed`, `.incomplete` or
  `.failed`);
- `GET …/responses/{id}?stream=true&starting_after=N`: the recorded events
  after sequence number N (all of them, without N), those already due at once
  and the rest when due; for a response created with `"stream": true` only,
  as the API refuses the others;
- `POST …/responses/{id}/cancel`: a response still queued or in progress is
  `cancelled` from then on, and the streams asked for later end with what was
  due by then; a cancelled one is answered again; a finished one is refused
  in the API's words.

An id the server keeps no response for is left to replay (a recorded
retrieval answers it) and is a miss when nothing does. Faults act on these
answers as on any other: the streams take them all, the JSON answers the
faults before the stream.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from ... import _json
from ...cassette import End, Request
from ...plan import Plan
from ..generation import Generation
from ..protocol import Incoming, Kept, ProtocolResponder

if TYPE_CHECKING:  # what an answer is: the server's, which imports aiohttp
    from aiohttp import web

__all__ = ["Background", "BackgroundResponse", "asks_for_background", "json_plan"]

# A response, and cancelling it: …/responses/{id} and …/responses/{id}/cancel, under any prefix.
_RESOURCE = re.compile(r"/responses/(?P<id>[^/]+)(?P<cancel>/cancel)?/?$")
_UNFINISHED = ("queued", "in_progress")


def asks_for_background(request: Request) -> bool:
    """Whether a request sets `"background": true` (https://platform.openai.com/docs/guides/background)."""
    if request.method.upper() != "POST" or b'"background"' not in request.body:
        return False  # most requests: no need to read their body
    body = request.json()
    return isinstance(body, dict) and body.get("background") is True


def json_plan(body: Any) -> Plan:
    """The plan that answers at once with `body` as JSON."""
    return Plan(200, [("content-type", "application/json")], [(0.0, _json.dumps(body).encode())])


@dataclass(frozen=True, slots=True)
class _Event:
    """An event of a kept stream: where its block ends in the body, when it is due (from the request's
    arrival), its sequence number, and the `Response` it carries, if it is a lifecycle event."""

    end: int
    due: float
    sequence: int | None
    response: dict[str, Any] | None


class BackgroundResponse:
    """A background response a recorded Responses stream answered: that stream at the server's pace, counted from
    `arrived` (on the event loop's clock), and whether it was cancelled since. Made by `of`."""

    def __init__(
        self, id: str, plan: Plan, events: Sequence[_Event], *, arrived: float, streamed: bool, dialect: Generation
    ) -> None:
        self.id = id
        self.dialect = dialect
        """The API that keeps it: its requests are answered, and their errors framed, in its words."""
        self.arrived = arrived
        self.streamed = streamed
        """Whether it was created with `"stream": true`: only such a response is streamed again."""
        self._plan = plan
        self._events = events
        self._cancelled: tuple[float, dict[str, Any]] | None = None  # when (from `arrived`), and the response then

    @classmethod
    def of(cls, request: Request, plan: Plan, arrived: float, dialect: Generation) -> BackgroundResponse | None:
        """The background response `request` (to `dialect`, the Responses API) asks for, answered with `plan`
        (a copy is kept) from `arrived` on; None when it asks for none, or the plan is no successful Responses
        stream that names its response."""
        if not asks_for_background(request) or not 200 <= plan.status < 300:
            return None
        kept = Plan(plan.status, list(plan.headers), list(plan.writes), plan.end, plan.end_at)
        blocks = kept.events
        events = []
        for block, due in zip(blocks, _due(kept, [b.end for b in blocks]), strict=True):
            obj = _object(block.event.data) if block.event is not None else {}
            sequence, response = obj.get("sequence_number"), obj.get("response")
            events.append(
                _Event(
                    block.end,
                    due,
                    sequence if type(sequence) is int else None,
                    response if isinstance(response, dict) else None,
                )
            )
        first = next((e.response for e in events if e.response is not None), None)
        if first is None or not isinstance(first.get("id"), str) or not first["id"]:
            return None
        body = request.json()  # a JSON object: it asks for background
        streamed = isinstance(body, dict) and dialect.wants_stream(body, request.path)
        return cls(first["id"], kept, events, arrived=arrived, streamed=streamed, dialect=dialect)

    def created(self) -> dict[str, Any]:
        """The response as the request that creates it is answered: `queued`, with no output yet."""
        first = next(e.response for e in self._events if e.response is not None)
        return {**first, "status": "queued", "output": []}

    def at(self, now: float) -> dict[str, Any]:
        """The response as it stands at `now` (on the event loop's clock)."""
        if self._cancelled is not None:
            return self._cancelled[1]
        elapsed = now - self.arrived
        due = [e.response for e in self._events if e.response is not None and e.due <= elapsed]
        return due[-1] if due else self.created()

    def cancel(self, now: float) -> dict[str, Any] | None:
        """Cancel it at `now`: the response, `cancelled` (as it was, if it already was); None when it had finished."""
        current = self.at(now)
        if current.get("status") in _UNFINISHED:
            self._cancelled = (now - self.arrived, {**current, "status": "cancelled"})
            return self._cancelled[1]
        return current if current.get("status") == "cancelled" else None

    def stream(self, now: float, after: int | None = None) -> Plan:
        """Its stream as a request at `now` gets it: the events after sequence number `after` (all, if None),
        those due by now at once and the rest when due, up to a cancel.

        The frames that follow the last numbered event (the gateway's `[DONE]`) come with it, also after it.
        """
        base = self._plan
        plan = Plan(base.status, list(base.headers), list(base.writes), base.end, base.end_at)
        if self._cancelled is not None:
            at = self._cancelled[0]
            plan.cut(max((e.end for e in self._events if e.due <= at), default=0))
            plan.end, plan.end_at = End.COMPLETE, at
        if after is not None:
            start = max((e.end for e in self._events if e.sequence is not None and e.sequence <= after), default=0)
            plan.cut_before(min(start, sum(len(data) for _, data in plan.writes)))
        plan.advance(now - self.arrived)
        return plan


class Background(ProtocolResponder):
    """Keeps the background responses replay answers, and answers the requests for them: retrieve, resume,
    cancel (see the module).

    It stands in front of replay, so that these requests are not matched against the recordings.
    """

    def __init__(self, dialect: Generation) -> None:
        self.dialect = dialect
        """The Responses API, whose requests it keeps and whose words it answers in."""

    def concerns(self, request: Request) -> bool:
        # A request for a background response (retrieve, resume, cancel), or one that starts one.
        return _RESOURCE.search(request.path) is not None or (
            asks_for_background(request) and self.dialect.serves_path(request.path)
        )

    async def respond(self, incoming: Incoming) -> web.StreamResponse | None:
        request = incoming.request
        if asks_for_background(request) and self.dialect.serves_path(request.path):
            incoming.keep(functools.partial(self._keep, incoming))
            return None
        found = _RESOURCE.search(request.path)
        if found is None:
            return None
        cancel = found["cancel"] is not None
        if request.method.upper() != ("POST" if cancel else "GET"):
            return None
        response_id = unquote(found["id"])
        kept: BackgroundResponse | None = incoming.state.get(response_id)
        if kept is None:
            incoming.pass_on(f"no background response {response_id!r} in this session")
            return None  # a recording of this request may answer it
        now = incoming.arrived
        if cancel:
            cancelled = kept.cancel(now)
            if cancelled is None:
                status = str(kept.at(now).get("status"))
                article = "an" if status[:1] in tuple("aeiou") else "a"
                return await self._refuse(incoming, kept, f"Cannot cancel {article} {status} response.")
            incoming.state[kept.id] = kept  # a shared store's value is a copy: set again, the cancel holds for all
            return await self._json(incoming, kept, cancelled, f"background response {kept.id}, cancelled")
        stream = incoming.query.get("stream", "false")
        if stream not in ("true", "false"):
            return await incoming.error(
                400, f"stream {stream!r}: give true or false", "invalid_value", dialect=kept.dialect
            )
        given = incoming.query.get("starting_after")
        try:
            after = int(given) if given is not None else None
        except ValueError:
            message = f"starting_after {given!r} is not a whole number"
            return await incoming.error(400, message, "invalid_value", dialect=kept.dialect)
        if stream == "false":
            response = kept.at(now)
            return await self._json(
                incoming, kept, response, f"background response {kept.id}, {response.get('status')}"
            )
        if not kept.streamed:
            return await self._refuse(
                incoming, kept, "This response cannot be streamed because it was not created with stream=true."
            )
        plan = kept.stream(now, after)
        events = "its events" if after is None else f"its events after {after}"
        incoming.note(plan.status, f"background response {kept.id}, {events}")
        return await incoming.send(plan, stream=True, dialect=kept.dialect)

    def _keep(self, incoming: Incoming, plan: Plan) -> Kept | None:
        """Keep what replay plays for a request that asks for background, if it is a Responses stream; a
        request for no stream is answered at once with the response, queued."""
        kept = BackgroundResponse.of(incoming.request, plan, incoming.arrived, self.dialect)
        if kept is None:
            return None
        incoming.state[kept.id] = kept  # a later one with the same id (the recording played again) takes its place
        answer = None if kept.streamed else json_plan(kept.created())
        return Kept(f"in the background as {kept.id}", answer)

    async def _json(
        self, incoming: Incoming, kept: BackgroundResponse, body: dict[str, Any], what: str
    ) -> web.StreamResponse:
        plan = json_plan(body)
        incoming.note(plan.status, what)
        return await incoming.send(plan, stream=False, dialect=kept.dialect)

    async def _refuse(self, incoming: Incoming, kept: BackgroundResponse, message: str) -> web.StreamResponse:
        """The API's own 400, in its words (not one of sse-tape's errors)."""
        status, headers, body = kept.dialect.http_error(400, message)
        incoming.note(status, message)
        return await incoming.send(Plan(status, list(headers), [(0.0, body)]), stream=False, dialect=None)


def _object(data: str) -> dict[str, Any]:
    """An event's data as a JSON object; empty when it is none (`[DONE]`)."""
    try:
        obj = _json.parse(data, max_depth=None)
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _due(plan: Plan, ends: Sequence[int]) -> list[float]:
    """When each of these places in the body (in order) is reached: when the write holding the byte before it
    is due (an event is dispatched once the last byte of its block has come)."""
    out: list[float] = []
    n, seen = 0, 0
    for end in ends:
        while n < len(plan.writes) and seen + len(plan.writes[n][1]) < end:
            seen += len(plan.writes[n][1])
            n += 1
        out.append(plan.writes[n][0] if n < len(plan.writes) else plan.end_at)
    return out
