"""`Sessions`: MCP's sessions on replay, and every recorded answer handed back in the client's own ids.

A server that keeps sessions mints an `Mcp-Session-Id` in its answer to
`initialize`, and the client sends it with every request after; the server
answers 404 to one it does not know (expired, or ended with `DELETE`), so
that the client initializes again, and 400 to a request without one
(https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#session-management).
On replay, `Sessions` does the same: an `initialize` answered by a recording
whose server minted a session id gets a fresh one (a `uuid4`, as the SDKs
mint them), kept in the server's replay state (a reset forgets them), so
that servers sharing one (`serve --state redis://...`, `--workers N`)
answer a session as one server, whichever gets each request; a
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

What the replay state keeps of a session is what any server may need, each
under a key of its own, so that a request reads and writes only what it
needs (pickled, where the state is shared): that the session is open (a
header under its id, written once, as it opens), and each stream it was
answered with, under the stream's first event id, and that id under each of
its others. A request reads the header (is it open?); one whose answer's
events have ids looks once whether the session gave any of them already,
claims the first (so that two answers of one recording at the same moment,
by two servers, never give the same ids), and keeps its stream in one write,
which touches none of the session's other streams: two streams of one
session answered at the same moment by two servers are both kept, and a
stream kept as another server ends the session brings nothing of it back (the header is never written again: what the
stream left, the next tidy takes, `Sessions._tidy`). A reconnection reads
the stream it resumes (and the header). Ending a session (`DELETE`, a 404, a
reset) deletes its header and what it keeps, which it finds among the
state's keys: one look at the keys, and one deletion of them all. The `GET`
streams held open are the process's that holds them (`Sessions`): it
closes them when the session ends there, and, where the state is shared,
looks every `LOOK` seconds, in one look at whether their sessions are still
open, whether a session ended elsewhere (a `DELETE` or a
404 through another server, a reset), to close its streams too. A reset
that keeps what lasts keeps the sessions in the same step as it forgets the
rest (`ReplayStore.reset`): no look finds them gone meanwhile. A look per
process, not a message per end: the replay state needs no channel of its
own, and a server that missed a message (restarted, or Redis gone a moment)
still closes them.

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
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ... import _json
from ..._exceptions import StateError
from ...cassette import End, Request
from ...plan import Plan
from ...state import forget
from ..json_rpc import MISSING
from ..protocol import Incoming, Kept, Protocol, ProtocolResponder
from .jsonrpc import client_ids, event_ids, rewritten

if TYPE_CHECKING:  # what an answer is: the server's, which imports aiohttp
    from aiohttp import web

__all__ = ["HELD", "LOOK", "MOST_EVENT_IDS", "MOST_SESSIONS", "SESSION_HEADER", "Sessions"]

SESSION_HEADER = "mcp-session-id"
"""The header that carries a session's id, both ways."""

MOST_SESSIONS = 1000
"""How many sessions replay keeps open at most: a new one past them ends the oldest (its `GET` streams close, and
its client gets 404 and starts another), so that a long `serve` whose clients never end theirs holds no more. In
Redis, the one its hash lists first: not always the oldest."""
MOST_EVENT_IDS = 10_000
"""How many event ids a session keeps its streams under: the newest (an older one resumes nothing). Held to it
as a new session opens past `MOST_SESSIONS` keys kept, and by each server once it kept as many since it last
did so: between, a session may keep more."""

HELD = 3600.0
"""How long, at most, a replayed `GET` stream stays open after its recorded events, in seconds (unless its
session ends, its client goes away or the server stops first)."""
LOOK = 1.0
"""Where several servers share the replay state: how often, in seconds, one holding `GET` streams open looks
whether their sessions are still open (ended by another server, they close)."""


@dataclass(frozen=True, slots=True)
class _Stream:
    """A stream a session was answered with, kept for a client that reconnects to it (`Last-Event-ID`)."""

    plan: Plan
    """As it was sent, before faults: in the session, with the request's ids and the event ids it was given."""
    request: int
    """The number of the request it answered."""
    held: bool
    """Whether it is a `GET` stream, held open after its events."""


@dataclass(frozen=True, slots=True)
class _Session:
    """An open session on replay, as the replay state keeps it under its id: written once, as it opens, and
    never again (its streams are kept under keys of their own: see `_key`). Its `GET` streams held open are this
    process's (`Sessions`)."""


#: Between a session's id (a `uuid4`'s hex, with no space) and an event id, in the key of what the session keeps
#: under that event id: its stream, under the stream's first id; the first id, under each of the others.
_IN = " "


def _key(session: str, event_id: str) -> str:
    """The key of what `session` keeps under `event_id` (see `_IN`)."""
    return f"{session}{_IN}{event_id}"


def _claimed(state: MutableMapping[str, Any], session: str, ids: list[str]) -> dict[str, str]:
    """New ids for a stream's `ids` where `session` gave any of them already (the same recording played again):
    each with the first suffix `~2`, `~3`... that makes them all new; none where they are new. The first of them
    is claimed (`setdefault`, one step where the state is shared, its stream set there later), so that two
    answers of one recording at the same moment, by two servers, never name their streams alike: where another
    claimed it first, the next suffix. One look at the keys for each suffix tried, and the claim."""
    claim = "#" + uuid.uuid4().hex  # names no stream (see `_stream`) until the stream is set in its place
    n = 1
    while True:
        names = [i if n == 1 else f"{i}~{n}" for i in ids]
        new = not state.keys() & {_key(session, name) for name in names}
        if new and state.setdefault(_key(session, names[0]), claim) == claim:
            return dict(zip(ids, names, strict=True)) if n > 1 else {}
        n += 1


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
        self._held: dict[str, weakref.WeakSet[asyncio.Task[Any]]] = {}  # this process's `GET` streams, by session
        self._watch: asyncio.Task[None] | None = None  # where the state is shared: ends those of sessions gone
        self._kept = 0  # event ids this process kept since it last tidied the state (see `_tidy`)

    def forget(self, kept: MutableMapping[str, Any]) -> None:
        """The sessions a reset forgets end as a `DELETE` ends them: their `GET` streams held open close (those
        of other servers sharing the state, at their next look: see the module)."""
        for session in list(self._held):
            self._end(session)

    def concerns(self, request: Request) -> bool:
        # MCP's request, by its path or what it carries (`MCP.speaks`): no other is answered or kept here.
        return self.dialect.speaks(request)

    async def respond(self, incoming: Incoming) -> web.StreamResponse | None:
        request = incoming.request
        if not self.dialect.speaks(request):
            return None
        session = request.header(SESSION_HEADER)
        last = request.header("Last-Event-ID")
        if request.method.upper() == "GET" and session is not None and last:
            stream = _stream(incoming.state, session, last)
            if stream is not None:
                return await self._resume(incoming, session, stream, last)
        incoming.keep(functools.partial(self._answer, incoming, session))
        return None

    async def _resume(self, incoming: Incoming, session: str, stream: _Stream, last: str) -> web.StreamResponse:
        """A reconnection (`GET` with `Last-Event-ID`): the stream that event was in, from after it, as the
        server that replays its event store does, whichever stream of the session it was."""
        plan = stream.plan.copy()
        plan.resume_after(last)
        incoming.note(plan.status, f"the stream of request {stream.request} resumed after event id {last!r}")
        if stream.held:
            self._hold(incoming, session)
        return await incoming.send(plan, stream=True, dialect=self.dialect)

    def _answer(self, incoming: Incoming, session: str | None, plan: Plan) -> Kept | None:
        """The recorded answer `plan` as this request gets it: in its session, with its ids (see the module)."""
        request = incoming.request
        state = incoming.state
        body = request.json() if request.method.upper() == "POST" else None
        id, token = client_ids(body)
        recorded = next((v for k, v in plan.headers if k.lower() == SESSION_HEADER), None)
        initialize = isinstance(body, dict) and body.get("method") == "initialize"
        notes: list[str] = []
        live = session is not None and _opened(state, session)  # what it keeps is read where needed
        if session is not None and not live:
            return Kept(f"refused: no session {session!r} open", _error(self.dialect, 404, "Session not found"))
        if recorded is not None and session is None and not initialize:
            return Kept("refused: no session id", _error(self.dialect, 400, "Bad Request: Missing session ID"))
        ok = 200 <= plan.status < 300
        if recorded is not None and initialize and ok:
            session = uuid.uuid4().hex
            if len(state) >= MOST_SESSIONS:  # the oldest end, as sessions a server expired
                self._tidy(state, room=1)
            state[session], live = _Session(), True
            notes.append(f"in a new session {session}")
        if request.method.upper() == "DELETE" and session is not None and live and ok:
            self._forget(state, session)
            live = False  # gone: nothing of it is kept again
            notes.append(f"session {session} ended")
        stream = plan.is_event_stream()
        ids = event_ids(plan) if stream and ok and live else []
        renamed = _claimed(state, session, ids) if session is not None and ids else {}
        out = rewritten(plan, id, token, stream=stream, ids=renamed) if (id is not MISSING or renamed) and ok else None
        if out is not None and id is not MISSING:
            notes.append(f"with the request's id {_json.dumps(id)}")
        if renamed:
            notes.append(f"its event ids made new in the session ({ids[0]!r} as {renamed[ids[0]]!r}...)")
        if recorded is not None and session is not None and recorded != session:
            out = out if out is not None else plan.copy()
            out.headers = [(k, session if k.lower() == SESSION_HEADER else v) for k, v in out.headers]
        listening = isinstance(body, dict) and body.get("method") == "subscriptions/listen" and plan.end in _LEFT_OPEN
        held = stream and ok and (listening or (request.method.upper() == "GET" and live))
        if held:  # as the server's: open after its events, until the session ends or the client goes away
            out = out if out is not None else plan.copy()
            out.end, out.end_at, out.headers_at = End.COMPLETE, max(out.end_at, HELD), 0.0
            notes.append("held open")
        if session is not None and live and ids:
            # A copy: the faults that follow act on the plan that goes out, in place. Under keys of its own, in one
            # write: what the session keeps of its other streams is neither read nor written, and a stream kept
            # as another server ends the session brings nothing of it back (what it leaves, `_tidy` takes).
            kept = _Stream((out if out is not None else plan).copy(), incoming.number, held)
            first, *others = [renamed.get(i, i) for i in ids]
            state.update({_key(session, first): kept, **{_key(session, i): first for i in others}})
            self._kept += len(ids)
            if self._kept >= MOST_EVENT_IDS:
                self._tidy(state, room=0)
        if session is not None and live and held:
            self._hold(incoming, session)
        if out is None:
            return Kept("; ".join(notes)) if notes else None
        ends = functools.partial(self._expired, state, session) if session is not None else None
        return Kept("; ".join(notes) or "in its session", out, stream=stream, answered=ends)

    def _expired(self, state: MutableMapping[str, Any], session: str, status: int) -> None:
        """A session whose request is answered 404 (a fault's `session-expired`) is over, as its client takes
        it: forgotten, and its `GET` streams held open end, as a `DELETE` ends them."""
        if status == 404:
            self._forget(state, session)

    def _forget(self, state: MutableMapping[str, Any], session: str, keys: list[str] | None = None) -> None:
        """End `session`: gone from the state with what it keeps (unless another server sharing it ended it
        already), and its `GET` streams held open here closed. `keys`: what it keeps, where the caller listed
        them (else they are looked for among all the state's keys)."""
        if keys is None:
            keys = [key for key in state if key.startswith(session + _IN)]
        forget(state, [session, *keys])  # in one step where the state is shared
        self._end(session)

    def _tidy(self, state: MutableMapping[str, Any], room: int) -> None:
        """Hold the state to its bounds, in one look at its keys: what sessions ended left (a stream kept as
        another server ended its session) goes, so do each session's oldest event ids past `MOST_EVENT_IDS`, and
        the oldest sessions past `MOST_SESSIONS`, less `room` (for sessions about to open), end. Done as a new
        session opens where the state holds `MOST_SESSIONS` keys or more, and by each process once it kept
        `MOST_EVENT_IDS` event ids since it last did: the oldest are the first the state lists (in Redis, not
        always the oldest)."""
        self._kept = 0
        keys = list(state)
        sessions = [key for key in keys if _IN not in key]
        kept: dict[str, list[str]] = {session: [] for session in sessions}
        gone: list[str] = []
        for key in keys:
            if _IN in key:
                kept.get(key.partition(_IN)[0], gone).append(key)
        for session in sessions[: max(len(sessions) - MOST_SESSIONS + room, 0)]:
            self._forget(state, session, kept.pop(session))
        for session_keys in kept.values():
            gone.extend(session_keys[: max(len(session_keys) - MOST_EVENT_IDS, 0)])
        forget(state, gone)

    def _end(self, session: str) -> None:
        """Close the `GET` streams this process holds open for `session` (their connections close), but the one
        answering now."""
        for task in list(self._held.pop(session, ())):
            if task is not asyncio.current_task():
                task.cancel()

    def _hold(self, incoming: Incoming, session: str) -> None:
        """Keep the task answering now (a `GET` stream held open) among `session`'s, to cancel when the session
        ends: where the state is shared, it may end in another server, which this one sees at its next look."""
        task = asyncio.current_task()
        if task is None:
            return
        self._held.setdefault(session, weakref.WeakSet()).add(task)
        task.add_done_callback(functools.partial(self._let_go, session))
        if incoming.shared and self._watch is None:
            self._watch = asyncio.get_running_loop().create_task(self._watching(incoming.state))

    def _let_go(self, session: str, task: asyncio.Task[Any]) -> None:
        """A `GET` stream held open has ended: one less of `session`'s (and, the last of all, no more looks)."""
        held = self._held.get(session)
        if held is not None:
            held.discard(task)
            if not held:
                del self._held[session]
        if not self._held and self._watch is not None:
            self._watch.cancel()
            self._watch = None

    async def _watching(self, state: MutableMapping[str, Any]) -> None:
        """Where the state is shared, every `LOOK` seconds while this process holds `GET` streams open: close
        those of the sessions ended since (by another server's `DELETE`, a 404, a reset), in one look at whether
        they are open."""
        while self._held:
            await asyncio.sleep(LOOK)
            held = set(self._held)
            try:
                missing = held - (state.keys() & held)
            except StateError:  # the state does not answer now: look again later
                continue
            for session in missing:
                self._end(session)


def _stream(state: Mapping[str, Any], session: str, last: str) -> _Stream | None:
    """The stream `session` gave the event id `last` in, while the session is open; None where it gave none (or
    the stream is not kept yet: see `_claimed`)."""
    found = state.get(_key(session, last))
    if isinstance(found, str):  # one of its later ids: the stream is under its first
        found = state.get(_key(session, found))
    return found if isinstance(found, _Stream) and _opened(state, session) else None


def _opened(state: Mapping[str, Any], session: str) -> bool:
    """Whether `session` is open: its header kept (an id with a space in it, never minted, names none: see
    `_IN`)."""
    return _IN not in session and session in state


def _error(dialect: Protocol, status: int, message: str) -> Plan:
    """The SDKs' answer to a request refused at the transport: a JSON-RPC error with no id, at this status."""
    status, headers, body = dialect.http_error(status, message)
    return Plan(status, list(headers), [(0.0, body)])
