"""What a responder is, and what it may use of the server it answers for.

A request goes through a chain of responders (replay, forwarding to an
upstream, and more) until one answers. A responder sees the request as an
`Exchange` and the server as a `Host`: its journal, its matcher and replay
state, its options, and how it writes errors and plans. Responders live in
modules of their own (`record.Forwarder`) that import this, never the server;
so it lies outside the `server` package, whose `__init__` imports the app,
and the app the responders. The responders a protocol brings meet a smaller
contract, which a dialect can import (`dialects.protocol.ProtocolResponder`);
`server.protocols.Lent` puts them in the chain.
"""

from __future__ import annotations

import asyncio
import bisect
import random
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from aiohttp import web

from . import dialects
from .cassette import Request
from .dialects.protocol import Kept
from .faults import Fault, Injector, Stage, apply
from .journal import FaultInjected, Journal
from .matching import Matcher
from .options import ServeOptions
from .plan import Plan, Write
from .recorder import Recorder
from .redaction import Redaction
from .state import ReplayStore
from .wire import Live, Progress

__all__ = [
    "IN_PLACE",
    "NOTED_FAULTS",
    "Attached",
    "Exchange",
    "Host",
    "Reply",
    "Responder",
    "inject",
    "note_faults",
    "thorough",
]

_T = TypeVar("_T")

Reply = web.StreamResponse | Awaitable[web.StreamResponse] | None
"""What a responder answers with: the response it sent; the send its answer ends with, not yet awaited
(`Host.send(...)`), which the server awaits for it; or None, to leave the request to the next responder. A
responder with nothing to do once its answer is sent hands the server the send, and holds no memory of its own
while a long stream plays."""

#: A request body of at most this many bytes is parsed, and walked, on the event loop; a larger one in a thread.
IN_PLACE = 64 * 1024

#: How many faults' notes one request's answer puts in the journal (so in the log), at most: a server may hold
#: a thousand faults (`server.control.MAX_FAULTS`), and each request is not a thousand lines.
NOTED_FAULTS = 64


@dataclass(slots=True)
class Exchange:
    """One request on its way through the responders, and how its answer went."""

    http: web.BaseRequest
    request: Request
    number: int
    """The request's number, counted from 1 since the server started (or was reset)."""
    faults: list[Fault]
    """Faults the request asked for in its `X-SSE-Tape-Fault` header."""
    dialect: dialects.Protocol
    """The protocol of the request's path, which frames its errors (OpenAI's for a path that names none)."""
    started: float
    """When it arrived, on the event loop's clock: what a plan's times count from."""
    api: dialects.Generation | None = None
    """The API the request's path names (`dialects.for_path`), looked up once for every responder; None for
    a path that names none (whose errors `dialect` frames as OpenAI's)."""
    protocol: dialects.Protocol | None = None
    """The protocol the request speaks by its path (`dialects.for_request`: an LLM API's, as `api`, or another
    protocol's), looked up once for every responder and for matching; None for none. The server sets it when
    it makes the exchange: one made without it tells matching the request speaks none."""
    miss: str | None = None
    """Why replay did not answer: the closest recordings and how each differs."""
    status: int = 0
    progress: Progress = field(default_factory=Progress)
    """How far its answer got, and how it ended."""
    event_ends: Sequence[int] = ()
    """Where each event of the body sent ends, to count the events that went out."""
    keep: Callable[[Plan], Kept | None] | None = None
    """What a protocol's responder in front of replay asked to be handed of replay's answer (`Incoming.keep`)."""
    ends_later: bool = False
    """Its answer is over when its source is, after the client left (a forwarded stream read to its end for
    the client that had its answer): the responder notes its end, not the server."""
    noted: int = 0
    """How many faults' notes were given for it (`note_faults`), journaled or not."""
    held: bool = False
    """Its answer is a stream held open as the server's own (`Protocol.holds`): not counted in flight."""

    def events_sent(self) -> int:
        """How many events of its answer went out whole (all it ever will, once the answer is over)."""
        return bisect.bisect_right(self.event_ends, self.progress.bytes)


class Host(Protocol):
    """What a responder may use of the server it answers for."""

    options: ServeOptions
    journal: Journal
    matcher: Matcher
    closing: bool
    recorder: Recorder | None
    """What keeps the answers the responders make or forward, when the server records."""

    @property
    def state(self) -> ReplayStore:
        """What replay counts and keeps between requests."""
        ...

    @property
    def injector(self) -> Injector:
        """What chooses the faults of each request."""
        ...

    def settled(self) -> None:
        """Something in flight is over (a stream a responder recorded): the server may be idle now."""
        ...

    def hold(self, exchange: Exchange) -> None:
        """The exchange's answer is held open as the server's own stream (`Protocol.holds`): not in flight."""
        ...

    async def error(
        self, exchange: Exchange, status: int, message: str, code: str, *, retry_after: int | None = None
    ) -> web.StreamResponse:
        """Answer the exchange with the API's JSON error."""
        ...

    def cors(self, http: web.BaseRequest) -> dict[str, str]:
        """The CORS headers an answer carries."""
        ...

    def refused(self, http: web.BaseRequest) -> str | None:
        """Why `http` may not reach what only the user's own clients may (the upstream, with the credentials of
        its URL): a `Host` or an `Origin` that is not the server's own, nor one the user allows; None when it may."""
        ...

    @property
    def redaction(self) -> Redaction:
        """What is kept out of what the server says of a request."""
        ...

    def shown_query(self, query: str) -> str:
        """A query string as the journal shows it: its secrets redacted."""
        ...

    def send(
        self,
        exchange: Exchange,
        plan: Plan,
        writes: list[Write] | None = None,
        *,
        live: Live | None = None,
        cors: bool = True,
    ) -> Coroutine[Any, Any, web.StreamResponse]:
        """Write the exchange's answer, once awaited: a plan (`writes`: what `coalesced(plan)` gave, for a plan
        sent unchanged again and again), or with `live` a body still being made (see `wire.send`); with `cors`,
        the headers any page's fetch needs to read it, else only those for the pages the user named. A responder
        may return it unawaited (see `Reply`)."""
        ...

    def ended(self, exchange: Exchange) -> None:
        """Note in the journal how the exchange's answer ended."""
        ...

    def cut_off(self, transport: asyncio.BaseTransport | None) -> bool:
        """Whether the server closed this connection because its client took nothing of its answer, rather
        than the client hanging up."""
        ...


class Responder(Protocol):
    """Answers requests, or passes them on: replay, forwarding to an upstream, and more."""

    async def start(self, host: Host) -> None:
        """Called once the server's event loop runs, before the first request."""
        ...

    async def respond(self, exchange: Exchange) -> Reply:
        """Answer the request (streaming as it likes), or return None to leave it to the next responder (see
        `Reply`)."""
        ...

    async def close(self) -> None:
        """Called when the server stops, after the streams in flight were cut."""
        ...


class Attached:
    """The part most responders share: the server they answer for, known once it starts; nothing to close."""

    def __init__(self) -> None:
        self._host: Host | None = None

    @property
    def host(self) -> Host:
        """The server this responder answers for."""
        assert self._host is not None, "start() the responder first"
        return self._host

    async def start(self, host: Host) -> None:
        self._host = host

    async def close(self) -> None:
        return


def inject(
    host: Host,
    exchange: Exchange,
    plan: Plan,
    *,
    dialect: dialects.Protocol,
    recording: str | None = None,
    stream: bool = True,
    also: Sequence[Fault] = (),
) -> bool:
    """Apply the faults that act on this exchange (the server's and its request's own) to its plan, noting
    each in the journal; whether any acted.

    An answer that is no `stream` takes only the faults before the stream (a status, a delay, a hang, an
    empty body) and those that say what they do to one JSON answer (`FaultKind.document`: the protocol's error
    answer); the others are noted as left alone. `dialect` frames what the faults write; `recording`
    names the recording the plan replays, if one does; `also` are faults that act besides those chosen
    (a recording's own), one written as a chosen one is acting once.
    """
    if not (host.injector.faults or exchange.faults or also):
        return False  # most requests: nothing to choose from
    faults, rng = host.injector.choose(exchange.request, dialect, exchange.faults)
    chosen = {f.spec for f in faults}
    faults += [f for f in also if f.spec not in chosen]
    if not faults:
        return False
    rng = rng or random.Random(f"{host.injector.seed}:{recording}:{exchange.number}")
    acting = faults if stream else [f for f in faults if f.stage is Stage.BEFORE or f.kind.document is not None]
    applied = apply(acting, plan, dialect=dialect, rng=rng, request=exchange.request, document=not stream)
    note_faults(host, exchange, applied, recording=recording)
    noted = {id(f) for f, _ in applied}
    left = [] if stream else [(f, "an answer that is not a stream: left alone") for f in faults if id(f) not in noted]
    note_faults(host, exchange, left, recording=recording, acted=False)
    return bool(applied)


def note_faults(
    host: Host,
    exchange: Exchange,
    notes: Sequence[tuple[Fault, str]],
    *,
    recording: str | None = None,
    acted: bool = True,
) -> None:
    """Journal what each fault did to this exchange's answer (`recording`: the recording it replays, if
    one does), and count it injected unless it did not act (`acted`: false for faults left out). Past the first
    `NOTED_FAULTS` of an exchange, a fault is counted but not journaled, and the first one left out says so."""
    request = exchange.request
    for fault, what in notes:
        if acted:
            host.state.note_injected(fault.spec)
        exchange.noted += 1
        if exchange.noted > NOTED_FAULTS + 1:
            continue
        if exchange.noted == NOTED_FAULTS + 1:
            what += f"; the faults after the first {NOTED_FAULTS} of a request are counted, not journaled"
        host.journal.add(
            FaultInjected(
                request=exchange.number,
                method=request.method,
                path=request.path,
                fault=fault.spec,
                what=what,
                recording=recording,
            )
        )


async def thorough(work: Callable[[Request], _T], request: Request) -> _T:
    """`work(request)`, for work that walks the request's body (redaction, a miss's explanation): in a
    thread when the body is large, so that the event loop is not held for the whole walk."""
    if len(request.body) <= IN_PLACE:
        return work(request)
    return await asyncio.to_thread(work, request)
