"""The responders the protocols bring, in the server's chain: each lent every request as `Incoming`.

A protocol's responder (`dialects.protocol.ProtocolResponder`) sees a request
through the small contract its dialect can import; `Lent` stands it in the
chain and makes that contract of the server's own (`Exchange`, `Host`).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping, MutableMapping
from typing import Any

from aiohttp import web

from ..dialects import Generation, Protocol
from ..dialects.protocol import Incoming, Kept, ProtocolResponder
from ..journal import Answered
from ..plan import Plan
from ..responder import Attached, Exchange, Host, inject

__all__ = ["Lent"]


class Lent(Attached):
    """A protocol's responder in the server's chain, lent each request as `Incoming`; what it keeps lives in the
    server's replay state under `key`."""

    def __init__(self, responder: ProtocolResponder, key: str, dialect: Protocol) -> None:
        super().__init__()
        self.responder = responder
        self.key = key
        self.dialect = dialect
        """The protocol that brought it."""

    def lent_for(self, api: Generation | None) -> bool:
        """Whether requests to `api` (`Exchange.api`) may be lent it: a request to the path of another LLM API,
        which that API speaks, is that API's, and no other protocol's responder is lent it."""
        return api is None or api.name == self.dialect.name  # by name: a registry refreshed makes its dialects anew

    def concerns(self, exchange: Exchange) -> bool:
        """Whether the request may be one of the protocol's feature's (`ProtocolResponder.concerns`), of an API
        it is lent (`lent_for`): the server lends it no other."""
        return self.lent_for(exchange.api) and self.responder.concerns(exchange.request)

    def respond(self, exchange: Exchange) -> Coroutine[Any, Any, web.StreamResponse | None]:
        # The protocol's responder's own coroutine, as it is: one more around it would wait as long as its answer.
        return self.responder.respond(_Incoming(self.host, exchange, self.key))


class _Incoming(Incoming):
    """A `Incoming` over the server's exchange. Its query and state are looked up when a responder asks for
    them: most requests are passed on without either."""

    def __init__(self, host: Host, exchange: Exchange, key: str) -> None:
        self._host = host
        self.shared = host.state.shared
        self._exchange = exchange
        self._key = key
        self.request = exchange.request
        self.number = exchange.number
        self.arrived = exchange.started

    @property
    def query(self) -> Mapping[str, str]:  # type: ignore[override]  # read where asked, not set
        return self._exchange.http.query

    @property
    def state(self) -> MutableMapping[str, Any]:  # type: ignore[override]  # read where asked, not set
        return self._host.state.kept(self._key)

    def keep(self, hook: Callable[[Plan], Kept | None]) -> None:
        if self._exchange.keep is None:  # the first protocol in the registry's order to keep a request has it
            self._exchange.keep = hook

    def pass_on(self, reason: str) -> None:
        self._exchange.miss = reason

    def send(self, plan: Plan, *, stream: bool, dialect: Protocol | None) -> Coroutine[Any, Any, web.StreamResponse]:
        exchange = self._exchange
        if dialect is not None:
            inject(self._host, exchange, plan, dialect=dialect, stream=stream)
        if stream:
            exchange.event_ends = [b.end for b in plan.events]
        return self._host.send(exchange, plan)  # the wire's coroutine, as it is (see `Host.send`)

    async def error(self, status: int, message: str, code: str, *, dialect: Protocol) -> web.StreamResponse:
        self._exchange.dialect = dialect
        return await self._host.error(self._exchange, status, message, code)

    def events_sent(self) -> int:
        return self._exchange.events_sent()

    def note(self, status: int, what: str) -> None:
        request = self.request
        self._host.journal.add(
            Answered(request=self.number, method=request.method, path=request.path, status=status, what=what)
        )
