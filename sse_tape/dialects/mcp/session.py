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
its session. The answers a session's requests replay carry its id in place
of the recorded one, and the request's JSON-RPC id and progress token (see
`jsonrpc.rewritten`). The protocol version the recorded server chose is
replayed as it was recorded. A 2026-07-28 exchange has no session: nothing
is minted for it, nor asked of it. Its `subscriptions/listen` stream, which
the server holds open until its client leaves, is held so on replay after
its last recorded event when it was recorded open (its client left it, or
the recorder stopped).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from ... import _json
from ...cassette import End, Request
from ...plan import Plan
from ..protocol import Incoming, Kept, Protocol, ProtocolResponder
from .jsonrpc import MISSING, client_ids, rewritten

if TYPE_CHECKING:  # what an answer is: the server's, which imports aiohttp
    from aiohttp import web

__all__ = ["SESSION_HEADER", "Sessions"]

SESSION_HEADER = "mcp-session-id"
"""The header that carries a session's id, both ways."""

_OPEN = "open"

#: How long a listen stream is held open after its last recorded event, at most: till its client leaves.
_HELD = 86400.0

#: How a stream the server still held open was recorded: its client left it, or the recorder stopped.
_LEFT_OPEN = frozenset({End.CLIENT_GONE, End.INTERRUPTED})


class Sessions(ProtocolResponder):
    """MCP's sessions on replay, and the client's ids in every answer (see the module).

    `speaks` says which requests are MCP's; `dialect` frames the errors (the SDKs' JSON-RPC error with no id).
    """

    def __init__(self, dialect: Protocol, speaks: Callable[[Request], bool]) -> None:
        self.dialect = dialect
        self.speaks = speaks

    async def respond(self, incoming: Incoming) -> web.StreamResponse | None:
        request = incoming.request
        if not self.speaks(request):
            return None
        incoming.keep(functools.partial(self._answer, incoming, request.header(SESSION_HEADER)))
        return None

    def _answer(self, incoming: Incoming, session: str | None, plan: Plan) -> Kept | None:
        """The recorded answer `plan` as this request gets it: in its session, with its ids (see the module)."""
        request = incoming.request
        body = request.json() if request.method.upper() == "POST" else None
        id, token = client_ids(body)
        recorded = next((v for k, v in plan.headers if k.lower() == SESSION_HEADER), None)
        initialize = isinstance(body, dict) and body.get("method") == "initialize"
        notes: list[str] = []
        if session is not None and incoming.state.get(session) != _OPEN:
            return Kept(f"refused: no session {session!r} open", _error(self.dialect, 404, "Session not found"))
        if recorded is not None and session is None and not initialize:
            return Kept("refused: no session id", _error(self.dialect, 400, "Bad Request: Missing session ID"))
        if recorded is not None and initialize and 200 <= plan.status < 300:
            session = uuid.uuid4().hex
            incoming.state[session] = _OPEN
            notes.append(f"in a new session {session}")
        if request.method.upper() == "DELETE" and session is not None and 200 <= plan.status < 300:
            incoming.state.pop(session, None)
            notes.append(f"session {session} ended")
        stream = _content_type(plan) == "text/event-stream"
        out = rewritten(plan, id, token, stream=stream) if id is not MISSING and 200 <= plan.status < 300 else None
        if out is not None:
            notes.append(f"with the request's id {_json.dumps(id)}")
        if recorded is not None and session is not None and recorded != session:
            out = out if out is not None else plan.copy()
            out.headers = [(k, session if k.lower() == SESSION_HEADER else v) for k, v in out.headers]
        if isinstance(body, dict) and body.get("method") == "subscriptions/listen" and plan.end in _LEFT_OPEN:
            out = out if out is not None else plan.copy()
            out.end_at = max(out.end_at, _HELD)
            notes.append("held open until the client leaves, as its server held it")
        if out is None:
            return Kept("; ".join(notes)) if notes else None
        return Kept("; ".join(notes) or "in its session", out, stream=stream)


def _error(dialect: Protocol, status: int, message: str) -> Plan:
    """The SDKs' answer to a request refused at the transport: a JSON-RPC error with no id, at this status."""
    status, headers, body = dialect.http_error(status, message)
    return Plan(status, list(headers), [(0.0, body)])


def _content_type(plan: Plan) -> str:
    kind = next((v for k, v in plan.headers if k.lower() == "content-type"), "")
    return kind.split(";")[0].strip().lower()
