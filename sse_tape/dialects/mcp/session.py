"""`Sessions`: MCP's sessions on replay, and every recorded answer handed back in the client's own ids.

A server that keeps sessions mints an `Mcp-Session-Id` in its answer to
`initialize`, and the client sends it with every request after; the server
answers 404 to one it does not know (expired, or ended with `DELETE`), so
that the client initializes again, and 400 to a request without one
(https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#session-management).
On replay, `Sessions` does the same: an `initialize` answered by a recording
whose server minted a session id gets a fresh one (a `uuid4`, as the SDKs
mint them), kept in the server's replay state (a reset forgets them); a
request with a session id the server did not mint, or ended since, is
answered 404, and one with none, 400, when a recording made within a session
answers it (a request no recording answers is left to what follows replay:
while recording, the upstream, whose sessions are its own); a `DELETE` answered with success ends
its session, and so does an answer 404 to one of its requests (a
`session-expired` fault's). The answers a session's requests replay carry its id in place
of the recorded one, and the request's JSON-RPC id and progress token (see
`jsonrpc.rewritten`). The protocol version the recorded server chose is
replayed as it was recorded.

A server with an event store gives each event of its streams an id, unique
across the session's streams, and resumes the stream an id was in when the
client reconnects with it (a `GET` with `Last-Event-ID`) (https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#resumability-and-redelivery).
So does replay: each stream a session is answered with is kept under its
events' ids, and a reconnection with one of them gets that stream from after
it, whichever request it answered. The ids go out as recorded, unless the
session was given one of them already (the same recording played again in
it, or recordings of other sessions that used the same ids): then all that
stream's ids take the first suffix (`~2`, `~3`...) that makes them new in the
session. Each session keeps its own, so two sessions replaying one recording
never take each other's streams. A `GET` stream, the server's way to the
client, stays open after its recorded events, as the server's would, for
`HELD` seconds at most: until its session ends (`DELETE`: its connection
closes), its client goes away or the server stops.

A 2026-07-28 exchange has no session: nothing is minted for it, nor asked
of it. Its `subscriptions/listen` stream, which the server holds open until
its client leaves, is held so on replay after its last recorded event when
it was recorded open (its client left it, or the recorder stopped), for
`HELD` seconds at most too. A stream held open answers no request: it is not
work in flight (`MCP.holds`).
"""

from __future__ import annotations

import asyncio
import functools
import uuid
import weakref
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ... import _json
from ...cassette import End
from ...plan import Plan
from ..json_rpc import MISSING
from ..protocol import Incoming, Kept, Protocol, ProtocolResponder
from .jsonrpc import client_ids, event_ids, rewritten

if TYPE_CHECKING:  # what an answer is: the server's, which imports aiohttp
    from aiohttp import web

__all__ = ["HELD", "MOST_EVENT_IDS", "MOST_SESSIONS", "SESSION_HEADER", "Sessions"]

SESSION_HEADER = "mcp-session-id"
"""The header that carries a session's id, both ways."""

MOST_SESSIONS = 1000
"""How many sessions replay keeps open at most: a new one past them ends the oldest (its `GET` streams close, and
its client gets 404 and starts another), so that a long `serve` whose clients never end theirs holds no more."""
MOST_EVENT_IDS = 10_000
"""How many event ids a session keeps its streams under, at most: the newest (an older one resumes nothing)."""

HELD = 3600.0
"""How long, at most, a replayed `GET` stream stays open after its recorded events, in seconds (unless its
session ends, its client goes away or the server stops first)."""


@dataclass(frozen=True, slots=True)
class _Stream:
    """A stream a session was answered with, kept for a client that reconnects to it (`Last-Event-ID`)."""

    plan: Plan
    """As it was sent, before faults: in the session, with the request's ids and the event ids it was given."""
    request: int
    """The number of the request it answered."""
    held: bool
    """Whether it is a `GET` stream, held open after its events."""


@dataclass(slots=True)
class _Session:
    """An open session on replay: the streams it was answered with, by the ids of their events, and its
    `GET` streams held open (their handlers' tasks), to end with it."""

    streams: dict[str, _Stream] = field(default_factory=dict)
    held: weakref.WeakSet[asyncio.Task[Any]] = field(default_factory=weakref.WeakSet)

    def ids_for(self, ids: list[str]) -> dict[str, str]:
        """New ids for a stream's `ids` where this session gave any of them already (the same recording played
        again): each with the first suffix `~2`, `~3`... that makes them all new; none where they are new."""
        if not any(i in self.streams for i in ids):
            return {}
        n = 2
        while any(f"{i}~{n}" in self.streams for i in ids):
            n += 1
        return {i: f"{i}~{n}" for i in ids}

    def keep(self, ids: list[str], stream: _Stream) -> None:
        """Keep `stream` under each of `ids`, forgetting the oldest ids past `MOST_EVENT_IDS`."""
        for i in ids:
            self.streams[i] = stream
        while len(self.streams) > MOST_EVENT_IDS:
            del self.streams[next(iter(self.streams))]

    def hold(self) -> None:
        """Keep the task answering now (a `GET` stream held open), to cancel when the session ends."""
        task = asyncio.current_task()
        if task is not None:
            self.held.add(task)

    def end(self) -> None:
        """End the session's `GET` streams held open (their connections close)."""
        for task in list(self.held):
            if task is not asyncio.current_task():
                task.cancel()


#: How a stream the server still held open was recorded: its client left it, or the recorder stopped.
_LEFT_OPEN = frozenset({End.CLIENT_GONE, End.INTERRUPTED})


class Sessions(ProtocolResponder):
    """MCP's sessions on replay, and the client's ids in every answer (see the module).

    Its sessions are `lasting`: a client's session goes on through the tests of a shared scope.

    `dialect` tells its requests (`MCP.speaks`) and frames the errors (the SDKs' JSON-RPC error with no id).
    """

    lasting = True

    def __init__(self, dialect: Protocol) -> None:
        self.dialect = dialect

    def forget(self, kept: MutableMapping[str, Any]) -> None:
        """The sessions a reset forgets end as a `DELETE` ends them: their `GET` streams held open close."""
        for session in kept.values():
            if isinstance(session, _Session):
                session.end()

    async def respond(self, incoming: Incoming) -> web.StreamResponse | None:
        request = incoming.request
        if not self.dialect.speaks(request):
            return None
        session = request.header(SESSION_HEADER)
        last = request.header("Last-Event-ID")
        if request.method.upper() == "GET" and session is not None and last:
            known = incoming.state.get(session)
            if isinstance(known, _Session) and (stream := known.streams.get(last)) is not None:
                return await self._resume(incoming, known, stream, last)
        incoming.keep(functools.partial(self._answer, incoming, session))
        return None

    async def _resume(self, incoming: Incoming, session: _Session, stream: _Stream, last: str) -> web.StreamResponse:
        """A reconnection (`GET` with `Last-Event-ID`): the stream that event was in, from after it, as the
        server that replays its event store does, whichever stream of the session it was."""
        plan = stream.plan.copy()
        plan.resume_after(last)
        incoming.note(plan.status, f"the stream of request {stream.request} resumed after event id {last!r}")
        if stream.held:
            session.hold()
        return await incoming.send(plan, stream=True, dialect=self.dialect)

    def _answer(self, incoming: Incoming, session: str | None, plan: Plan) -> Kept | None:
        """The recorded answer `plan` as this request gets it: in its session, with its ids (see the module)."""
        request = incoming.request
        body = request.json() if request.method.upper() == "POST" else None
        id, token = client_ids(body)
        recorded = next((v for k, v in plan.headers if k.lower() == SESSION_HEADER), None)
        initialize = isinstance(body, dict) and body.get("method") == "initialize"
        notes: list[str] = []
        known = incoming.state.get(session) if session is not None else None
        if session is not None and not isinstance(known, _Session):
            return Kept(f"refused: no session {session!r} open", _error(self.dialect, 404, "Session not found"))
        if recorded is not None and session is None and not initialize:
            return Kept("refused: no session id", _error(self.dialect, 400, "Bad Request: Missing session ID"))
        ok = 200 <= plan.status < 300
        if recorded is not None and initialize and ok:
            session = uuid.uuid4().hex
            while len(incoming.state) >= MOST_SESSIONS:  # the oldest ends, as one a server expired
                oldest = next(iter(incoming.state))
                ended = incoming.state.pop(oldest)
                if isinstance(ended, _Session):
                    ended.end()
            known = incoming.state[session] = _Session()
            notes.append(f"in a new session {session}")
        if request.method.upper() == "DELETE" and session is not None and isinstance(known, _Session) and ok:
            incoming.state.pop(session, None)
            known.end()
            notes.append(f"session {session} ended")
        stream = plan.is_event_stream()
        ids = event_ids(plan) if stream and ok and isinstance(known, _Session) else []
        renamed = known.ids_for(ids) if isinstance(known, _Session) and ids else {}
        out = rewritten(plan, id, token, stream=stream, ids=renamed) if (id is not MISSING or renamed) and ok else None
        if out is not None and id is not MISSING:
            notes.append(f"with the request's id {_json.dumps(id)}")
        if renamed:
            notes.append(f"its event ids made new in the session ({ids[0]!r} as {renamed[ids[0]]!r}...)")
        if recorded is not None and session is not None and recorded != session:
            out = out if out is not None else plan.copy()
            out.headers = [(k, session if k.lower() == SESSION_HEADER else v) for k, v in out.headers]
        listening = isinstance(body, dict) and body.get("method") == "subscriptions/listen" and plan.end in _LEFT_OPEN
        held = stream and ok and (listening or (request.method.upper() == "GET" and isinstance(known, _Session)))
        if held:  # as the server's: open after its events, until the session ends or the client goes away
            out = out if out is not None else plan.copy()
            out.end, out.end_at, out.headers_at = End.COMPLETE, max(out.end_at, HELD), 0.0
            notes.append("held open")
        if isinstance(known, _Session) and ids:
            # A copy: the faults that follow act on the plan that goes out, in place.
            kept = _Stream((out if out is not None else plan).copy(), incoming.number, held)
            known.keep([renamed.get(i, i) for i in ids], kept)
        if isinstance(known, _Session) and held:
            known.hold()
        if out is None:
            return Kept("; ".join(notes)) if notes else None
        ends = functools.partial(_ends, incoming.state, session) if session is not None else None
        return Kept("; ".join(notes) or "in its session", out, stream=stream, answered=ends)


def _ends(state: MutableMapping[str, Any], session: str, status: int) -> None:
    """A session whose request is answered 404 (a fault's `session-expired`) is over, as its client takes it:
    forgotten, and its `GET` streams held open end, as a `DELETE` ends them."""
    known = state.pop(session, None) if status == 404 else None
    if isinstance(known, _Session):
        known.end()


def _error(dialect: Protocol, status: int, message: str) -> Plan:
    """The SDKs' answer to a request refused at the transport: a JSON-RPC error with no id, at this status."""
    status, headers, body = dialect.http_error(status, message)
    return Plan(status, list(headers), [(0.0, body)])
