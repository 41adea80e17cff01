"""The server: an aiohttp application whose requests go to an ordered chain of responders.

`MockServer` answers each request with the first responder of its chain that does: those the protocols
bring (`Protocol.responders`, such as the Responses API's background mode), each `Lent` the request;
`Replay` (the recording the matcher picks, at the server's pace, with its faults); behind it, what the miss policy
puts there (an upstream the request is forwarded to, recording what passes, or a model); last, the
`Catalog` of the recordings' models. A request no responder answers gets the API's JSON error naming
the closest recordings. Every step goes into the server's `journal`; every counter replay depends on
lives in its replay state (see `state`). Its `control` is the way in from outside: the control endpoints
(`/__sse_tape__/`, which answer the user's own clients only: see `access`) use it, as the pytest plugin and library users do."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import HttpVersion11, web
from aiohttp.hdrs import EXPECT
from aiohttp.http_exceptions import HttpProcessingError

from .. import _json
from .._exceptions import ConfigError, StateError
from ..cassette import (
    Cassette,
    End,
    Request,
)
from ..catalog import Catalog
from ..dialects import DIALECTS, Protocol, dialect_for, fallback, for_path, speaking
from ..dialects import Generation as Dialect
from ..faults import MAX_HEADER_FAULTS, Fault, Injector, parse_faults
from ..journal import Ended, FaultInjected, Journal, Miss, Missed, Received
from ..matching import Matcher
from ..options import OPTIONS, MissPolicy, ServeOptions, check_sources
from ..plan import Plan, Write
from ..recorder import Recorder
from ..redaction import Redaction
from ..responder import Exchange, Reply, Responder, thorough
from ..state import MemoryStore, ReplayStore
from ..upstream import AiohttpUpstream, Upstream
from ..wire import Live, drop_connection, half_close, send
from .access import Access, is_loopback
from .bodies import BodyRefused, parsed_body, read_body
from .connections import ConnectionGuard, dual_stack_socket
from .control import Control
from .protocols import Lent
from .replay import Replay

__all__ = [
    "CONTROL_BODY_LIMIT",
    "CONTROL_PREFIX",
    "FAULT_HEADER",
    "Limits",
    "MockServer",
    "is_loopback",
]

FAULT_HEADER = "X-SSE-Tape-Fault"
_FAULT_HEADER_LOWER = FAULT_HEADER.lower()
#: Where the control endpoints live.
CONTROL_PREFIX = "/__sse_tape__/"
#: The most a control request's body may hold, in bytes: one bigger gets a 413, unread.
CONTROL_BODY_LIMIT = 1024**2
_CORS_METHODS = "GET, POST, PUT, PATCH, DELETE, OPTIONS"

CassetteSource = Cassette | str | os.PathLike[str]


def _default_max_connections() -> int:
    # Each connection is a descriptor (two when it is forwarded upstream); keep clear of the limit.
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 10_000 if soft == resource.RLIM_INFINITY else max(8, min(10_000, (soft - 64) // 2))


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """How long a client may take, and how many may be connected at once.

    A request's head must arrive within `request_timeout` of its first byte
    (or of the connection opening), and its body within `request_timeout` of
    the head (one its answer did not wait for, a 415 say, of that answer's
    end); a connection may sit idle between requests for `keep_alive`. Past
    either, the connection is closed (a body too slow gets a 408 first, and
    what the client still sends of it is read and dropped, for `request_timeout`
    at most, rather than met with a reset).
    Answers themselves have no deadline, but a client that takes nothing of
    its answer for `send_timeout` is cut off. Beyond `max_connections` (by
    default, what the process's descriptor limit leaves room for), a new
    connection takes the place of one idle or cut off from its client that
    way (not one still taking in the body of a request answered without
    it), or else gets a 503 and is closed (see `connections`).
    """

    request_timeout: float = OPTIONS["request_timeout"].value
    keep_alive: float = OPTIONS["keep_alive"].value
    max_connections: int = field(default_factory=_default_max_connections)
    send_timeout: float = OPTIONS["send_timeout"].value


class MockServer:
    """An HTTP server answering from cassettes; bound to 127.0.0.1 and a free port unless told otherwise.

    `options` say how it answers (`ServeOptions`). Behind replay, the miss
    policy `options.on_miss` puts: nothing (`error`), or an `upstream` each
    miss is forwarded to (`forward`), its answers kept by `recorder`
    (`record`), or a `model` responder that answers it (`synth`; its answers
    kept by `recorder` when there is one); `models` are listed at
    `/v1/models` besides those the recordings name. With `replay` off, every request goes to the upstream; a
    `Replay` given replays in place of the default one (one that chooses its recordings its own way); without
    `protocols`, the protocols' responders (MCP's sessions, background responses) keep nothing and answer
    nothing before replay, which replays their recordings as they are. `log`
    gets a line for each logged journal entry; what the journal (so the log, the report and the control
    endpoint) and a miss's explanation say of a request has its secrets redacted, as a cassette has them
    (see `redaction`). `limits` keep slow and idle
    clients from holding connections. The fault header and the control
    endpoints answer loopback clients only, unless `allow_remote_control`;
    they, and forwarding to the upstream, refuse a request whose `Host` is
    not a loopback name or address of the server's port (nor one of
    `allowed_hosts`) or whose `Origin` is not the server's own (nor one of
    `cors_origins`, `*` for any): see `access`.
    With `reuse_port`, other processes may listen on the same port, and the
    system shares the connections out among them. What replay counts and
    keeps between requests is in `state` (a `MemoryStore` unless given).

    From outside the server (another thread, a test, the pytest plugin), use
    its `control`: reset, faults, the seed, a snapshot, and waiting until it
    is idle.
    """

    def __init__(
        self,
        cassettes: Iterable[Cassette] = (),
        *,
        options: ServeOptions | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        log: Callable[[str], None] | None = None,
        upstream: str | Upstream | None = None,
        recorder: Recorder | None = None,
        model: Responder | None = None,
        models: Iterable[str] = (),
        replay: bool | Replay = True,
        protocols: bool = True,
        limits: Limits | None = None,
        allow_remote_control: bool = False,
        allowed_hosts: Iterable[str] = (),
        cors_origins: Iterable[str] = (),
        reuse_port: bool = False,
        state: ReplayStore | None = None,
    ) -> None:
        self.options = options or ServeOptions()
        self.reuse_port = reuse_port
        """Listen with SO_REUSEPORT, beside other processes on the same port (`serve --workers`)."""
        self.host = host
        self.port = port
        self.limits = limits or Limits()
        self.access = Access(
            allow_remote_control=allow_remote_control,
            allowed_hosts=tuple(allowed_hosts),
            cors_origins=tuple(cors_origins),
            listen_host=host,
        )
        """Who may use the control endpoints, the fault header and the upstream."""
        self._state: ReplayStore = state or MemoryStore()
        self._redaction = recorder.redaction if recorder is not None else None
        self._shown_queries: dict[str, str] = {}
        self._shown_paths: dict[str, str] = {}
        # A recorder fetches each shape of answer, each reconnection, and each stream it cut short before,
        # from its upstream.
        replays_only = recorder is None or self.options.on_miss not in (MissPolicy.RECORD, MissPolicy.SYNTH)
        self.matcher = Matcher(
            cassettes,
            match_on=self.options.match_on,
            ignore_body_fields=self.options.ignore_body_fields,
            allow_repeats=self.options.allow_repeats,
            reshape=replays_only,
            resume=replays_only,
            refetch=not replays_only,
            state=self._state,
            redact=self._redacted,
        )
        self._injector = Injector(self.options.faults, self.options.seed, self._state)
        shared = self._state.add_entries if self._state.shared else None  # one journal for all who share it
        self.journal = Journal(log=log, report=self.options.report, shown_path=self.shown_path, share=shared)
        self._log = log
        """What happened to each request, newest last."""
        recording = self.options.on_miss in (MissPolicy.RECORD, MissPolicy.SYNTH)
        self.recorder = recorder if recording else None
        """What keeps the answers forwarded (the `record` policy) or synthesized (`synth`) on a miss."""
        behind = _behind_replay(self.options.on_miss, upstream, self.recorder, model)
        lent = _protocols_responders() if replay and protocols else []
        replaying: list[Responder] = [*lent, replay if isinstance(replay, Replay) else Replay()] if replay else []
        self.responders: list[Responder] = [*replaying, *behind, Catalog(models)]
        """The chain each request goes through, in order; as it is when the server is made (each API's requests
        take theirs from it at the first of them: see `_chain`)."""
        self._chains: dict[str | None, list[Responder]] = {}  # the chain of each API's requests (see `_chain`)
        self._answering = 0  # requests being answered right now
        self.control = Control(
            state=self._state,
            matcher=self.matcher,
            injector=self._injector,
            journal=self.journal,
            streams=lambda: self._answering,
            recorder=self.recorder,
            protocols={responder.key: responder.responder for responder in lent},
        )
        """The way in from outside: reset, faults, the seed, a snapshot, and waiting until the server is idle."""
        self.closing = False
        """Set while the server stops: streams cut now were interrupted, not abandoned by their clients."""
        self._runner: web.ServerRunner | None = None
        self._handlers: set[asyncio.Task[Any]] = set()  # the requests being answered, to cancel when stopping
        self._listener: asyncio.Server | None = None
        self._guard: ConnectionGuard | None = None
        self._loop_errors: _LoopErrors | None = None

    @property
    def state(self) -> ReplayStore:
        """What replay counts and keeps between requests, for the server's own parts (its responders), on its
        event loop; from outside, `control.snapshot()`."""
        return self._state

    @property
    def injector(self) -> Injector:
        """What chooses the faults of each request, for the server's own parts (its responders); from outside,
        `control.set_faults()` and `control.snapshot().faults`."""
        return self._injector

    def settled(self) -> None:
        """Something in flight is over (a stream a responder recorded): the server may be idle now."""
        self.control.settle()

    def hold(self, exchange: Exchange) -> None:
        """The exchange's answer is held open as the server's own stream (`Protocol.holds`): not in flight."""
        if not exchange.held:
            exchange.held = True
            self._answering -= 1
            self.control.settle()

    @property
    def url(self) -> str:
        """The base URL, such as `http://127.0.0.1:8080`."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def redaction(self) -> Redaction:
        """What is kept out of what the server says of a request: its recorder's (so that a secret the user
        keeps in the cassette, with `--keep-header` say, is said too), else the defaults."""
        if self._redaction is None:
            self._redaction = Redaction()
        return self._redaction

    def shown_query(self, query: str) -> str:
        """A request's query string as the journal shows it: the values of secret parameters redacted."""
        shown = self._shown_queries.get(query)
        if shown is None:  # a client sends the same few queries again and again: each is worked out once
            shown = self.redaction.query(query)
            if len(query) <= 256:  # a long one is not kept: kilobytes each, a new one each time, would fill it
                if len(self._shown_queries) >= 1024:
                    self._shown_queries.clear()
                self._shown_queries[query] = shown
        return shown

    def shown_path(self, path: str) -> str:
        """A request's path as the journal shows it: the segments that hold a credential redacted."""
        shown = self._shown_paths.get(path)
        if shown is None:  # as for queries: each path is worked out once, and a long one not kept
            shown = self.redaction.path(path)
            if len(path) <= 256:
                if len(self._shown_paths) >= 1024:
                    self._shown_paths.clear()
                self._shown_paths[path] = shown
        return shown

    def cut_off(self, transport: asyncio.BaseTransport | None) -> bool:
        """Whether the server closed this connection because its client took nothing of its answer (see
        `Limits`), rather than the client hanging up."""
        return self._guard is not None and self._guard.cut_off(transport)

    def _redacted(self, request: Request) -> Request:
        return self.redaction.request(request)

    def stats(self) -> dict[str, int]:
        """What the server holds right now: connections, streams being answered, tasks, journal entries."""
        return {
            "connections": len(self._guard.open) if self._guard is not None else 0,
            "active_streams": self._answering,
            "tasks": len(asyncio.all_tasks()),
            "requests": self._state.requests(),
            "journal_entries": len(self.journal),
            "refused_connections": self._guard.refused if self._guard is not None else 0,
            "stalled_connections": self._guard.stalled if self._guard is not None else 0,
            "evicted_connections": self._guard.evicted if self._guard is not None else 0,
            "idle_or_stalled_connections": self._guard.idle_or_stalled if self._guard is not None else 0,
            "pid": os.getpid(),
        }

    async def start(self) -> None:
        """Bind and start serving; with port 0 the chosen port is in `port` afterwards."""
        for responder in self.responders:
            await responder.start(self)
        # aiohttp's low-level server: every request goes to one handler, with no application, router or
        # middleware in front, which only cost each request (docs/benchmarks.md, instant replay beside aimock).
        handling = web.Server(
            self._handle,
            access_log=None,
            # A client that hangs up cancels its stream at once, even in the middle of a long gap.
            handler_cancellation=True,
            auto_decompress=False,  # request bodies are decompressed under the body limit (see `bodies`)
            keepalive_timeout=self.limits.keep_alive,
            # A body its answer did not read (a 415, a 413) has as long to come after it as any body has (or
            # less: the keep-alive counts from the answer's end too).
            lingering_time=self.limits.request_timeout,
            logger=_one_line_logger(self._log),  # a bad request is a line, not a traceback
        )
        runner = web.ServerRunner(handling, shutdown_timeout=0.5)
        await runner.setup()
        loop = asyncio.get_running_loop()
        assert runner.server is not None
        self._guard = ConnectionGuard(
            runner.server,
            request_timeout=self.limits.request_timeout,
            keep_alive=self.limits.keep_alive,
            max_connections=self.limits.max_connections,
            send_timeout=self.limits.send_timeout,
            log=self._log,
        )
        try:
            if (every := dual_stack_socket(self.host, self.port, reuse_port=self.reuse_port)) is not None:
                self._listener = await loop.create_server(self._guard, sock=every, backlog=4096)
            else:
                self._listener = await loop.create_server(
                    self._guard,
                    self.host,
                    self.port,
                    reuse_address=True,
                    reuse_port=self.reuse_port or None,
                    backlog=4096,
                )
        except OSError:
            await runner.cleanup()
            await self._close_responders()
            raise
        self.port = self._listener.sockets[0].getsockname()[1]
        self._runner = runner
        self._loop_errors = _LoopErrors.install(loop, self._log)
        self.control.attach(loop)

    async def close(self) -> None:
        """Stop listening, end the streams in flight, and let the responders finish (saving what they recorded)."""
        if self._runner is not None:
            self.closing = True
            runner, self._runner = self._runner, None
            # Let connections already accepted finish their setup before the listener closes:
            # on Python 3.11 one set up after it closed fails inside asyncio and leaks its socket.
            for _ in range(3):
                await asyncio.sleep(0)
            if self._listener is not None:
                self._listener.close()
            # The answers in flight end now, as interrupted (what a recorder has of them is on the disk
            # already). Left to the runner, each would get `shutdown_timeout` to end by itself, then as much
            # again once cancelled: a second for every stop with a stream in flight.
            handlers = list(self._handlers)
            for handler in handlers:
                handler.cancel()
            if handlers:
                await asyncio.wait(handlers)
            await runner.cleanup()
            if self._guard is not None:
                self._guard.close()
            await self._close_responders()
            if self._loop_errors is not None:
                self._loop_errors.uninstall()
            self.control.detach()
        self.journal.close()

    async def _close_responders(self) -> None:
        for responder in self.responders:
            await responder.close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- answering -------------------------------------------------------------------------------

    def _handle(self, http: web.BaseRequest) -> Coroutine[Any, Any, web.StreamResponse]:
        # aiohttp's handler: the answer's own coroutine, not one more around it that a stream would keep waiting.
        return self._answer(http, None, served=True)

    async def answer(self, http: web.BaseRequest, *, arrived: float | None = None) -> web.StreamResponse:
        """Answer one aiohttp request as this server does (the chain, the control endpoints, the fault
        header), less the bookkeeping of its own connections: for an aiohttp application of your own that
        routes requests to the mock, whose runner must leave request bodies as sent (`auto_decompress=False`):
        the server decompresses them itself, under its body limit. A plan's times count from `arrived`, when
        the request came (on the event loop's clock), or else from now: a server with many requests at once
        comes to each a while after it came, and the recorded pace counts from the client's sending."""
        return await self._answer(http, arrived, served=False)

    async def _answer(self, http: web.BaseRequest, arrived: float | None, *, served: bool) -> web.StreamResponse:
        """Answer a request (see `answer`); `served`: one this server's listener took, whose connection it
        keeps (the guard's deadlines, `Expect: 100-continue`, its handler cut when the server stops) and
        whose shared store's failure it answers here. What only prepares the answer is done in functions that
        return before it plays, and a responder may hand over its send (`Reply`): a stream that replay plays
        waits in this coroutine and the wire's alone (one a responder awaits, in its coroutine too)."""
        handler = asyncio.current_task() if served else None
        if handler is not None:
            assert self._guard is not None
            arrived = self._guard.begin(http.transport, http.content.is_eof)
            self._handlers.add(handler)
        try:
            is_control = http.rel_url.path.startswith(CONTROL_PREFIX)
            if handler is not None and EXPECT in http.headers:
                await _continue(http, CONTROL_BODY_LIMIT if is_control else self.options.max_body)
            if http.method == "OPTIONS" and "Access-Control-Request-Method" in http.headers:
                return self._preflight(http, control=is_control)
            if is_control:
                return await self._control(http)
            found = for_path(http.rel_url.raw_path)  # the only time: every responder reads it from the exchange
            exchange = self._exchange(http, arrived, found)
            self._answering += 1
            try:
                answered: Reply = await self._take(exchange, found)
                if answered is None:
                    for responder in self._chain(exchange.api):
                        if isinstance(responder, Lent) and not responder.concerns(exchange):
                            continue  # a protocol's responder would pass it on untouched: not lent it
                        answered = await responder.respond(exchange)
                        if answered is not None:
                            break
                if answered is None:
                    answered = self._miss(exchange)
                # A responder's send handed over unawaited (see `Reply`) is awaited here, in its place.
                return answered if isinstance(answered, web.StreamResponse) else await answered
            except asyncio.CancelledError:
                exchange.progress.end = End.INTERRUPTED if self.closing else End.CLIENT_GONE
                raise
            except StateError:
                if http.writer.output_size:  # an answer begun breaks off (see below)
                    exchange.progress.end = End.INTERRUPTED
                raise
            finally:
                if not exchange.held:
                    self._answering -= 1
                if not exchange.ends_later:
                    self.ended(exchange)
                self.control.settle()  # after its end is in the journal: whoever waits for idle reads it there
        except StateError as exc:  # a shared store gone: each request is refused, in a line, until it is back
            if handler is None:
                raise
            asked = f"{http.method} {self.shown_path(http.rel_url.raw_path)}"
            if http.writer.output_size:  # an answer begun: its connection closes where it is, in a line
                if self._log is not None:
                    self._log(f"{asked} -> broken off: {exc}")
                drop_connection(http, reset=False)
                return web.StreamResponse()  # never sent: aiohttp lets a write to a closed connection go
            if self._log is not None:
                self._log(f"{asked} -> 503 {exc}")
            return web.json_response({"error": str(exc)}, status=503)
        finally:
            if handler is not None:
                assert self._guard is not None
                self._handlers.discard(handler)
                self._guard.end(http.transport)

    def _chain(self, api: Dialect | None) -> list[Responder]:
        """The responders a request to `api` goes through (`Exchange.api`): all of them, less the protocols'
        responders that are lent no request to it (`Lent.lent_for`). Each API's chain is worked out once, by name,
        at its first request."""
        name = api.name if api is not None else None
        chain = self._chains.get(name)
        if chain is None:
            chain = self._chains[name] = [
                responder for responder in self.responders if not isinstance(responder, Lent) or responder.lent_for(api)
            ]
        return chain

    def _exchange(self, http: web.BaseRequest, arrived: float | None, found: Protocol | None) -> Exchange:
        """A request to the mock, numbered and in the journal, on its way to the responders (its body not yet
        read); `found`, the protocol its path names."""
        headers = tuple(http.headers.items())
        if FAULT_HEADER in http.headers:
            # The fault header is said to sse-tape, not to the API: never matched on, forwarded or recorded.
            headers = tuple((k, v) for k, v in headers if k.lower() != _FAULT_HEADER_LOWER)
        url = http.rel_url
        request = Request(http.method, url.raw_path, url.raw_query_string, headers)
        number = self._state.next_request()
        self._injector.refresh()  # the faults another server sharing the store set
        query = request.query
        shown = self.shown_query(query) if query else query
        self.journal.add(Received(request=number, method=request.method, path=request.path, query=shown))
        return Exchange(
            http,
            request,
            number,
            [],
            found or dialect_for(request.path),
            api=found if isinstance(found, Dialect) else None,
            protocol=found,
            started=asyncio.get_running_loop().time() if arrived is None else arrived,
        )

    async def _take(self, exchange: Exchange, found: Protocol | None) -> web.StreamResponse | None:
        """Read the request's body and what it asks of sse-tape (its fault header), ready for the responders;
        or answer it with the error that says why not (408, 413, 400, 403), and return that answer. `found`,
        the protocol the request's path names."""
        http, request = exchange.http, exchange.request
        try:
            # Most bodies come with the head: one that is still on its way has a deadline. (No name holds
            # the reading: its finished coroutine would stay as long as the answer, a stream's hour say.)
            if http.content.is_eof():
                body, decompressed = await read_body(http, self.options.max_body)
            else:
                body, decompressed = await asyncio.wait_for(
                    read_body(http, self.options.max_body), self.limits.request_timeout
                )
        except TimeoutError:
            late = "the request body did not arrive in time"
            answer = await self.error(exchange, 408, late, "request_timeout", close=True)
            half_close(http)  # the 408 is all the client gets; what it still sends of the body is drained
            return answer
        except BodyRefused as exc:
            return await self.error(exchange, exc.status, str(exc), exc.code)
        if decompressed:  # kept, matched and forwarded as the plain body it is (see `bodies`)
            headers = tuple((k, v) for k, v in request.headers if k.lower() != "content-encoding")
            request = Request(request.method, request.path, request.query, headers)
        try:
            parsed = await parsed_body(body)
        except _json.TooLarge as exc:
            return await self.error(exchange, 413, f"the request body's {exc}", "body_too_large")
        exchange.request = request.with_json(request.path, body, parsed)
        if found is not None and not found.speaks(exchange.request):
            # A path two APIs use (Ollama's `/api/chat`, an AI SDK app's chat route), told apart by the body.
            found = exchange.api = exchange.protocol = None
            exchange.dialect = fallback()
        if found is None and (spoken := speaking(exchange.request)) is not None:
            exchange.dialect = spoken  # a protocol told by what the request carries frames its errors
        if exchange.dialect.holds(exchange.request):
            self.hold(exchange)
        # Kept as it arrived, in a request of its own: the body that answering parses (and keeps, see
        # `Request.json`) goes with the answer, not into the last 1,000 requests kept here.
        self._state.add_received(Request(request.method, request.path, request.query, request.headers, body))
        try:
            exchange.faults = self._header_faults(http) if FAULT_HEADER in http.headers else []
        except ConfigError as exc:
            return await self.error(exchange, 400, f"{FAULT_HEADER}: {exc}", "bad_fault")
        if exchange.faults and (why := self.refused(http, peer=True)) is not None:
            return await self.error(exchange, 403, f"{FAULT_HEADER} refused: {why}", "forbidden")
        return None

    def ended(self, exchange: Exchange) -> None:
        """Note in the journal how an exchange's answer ended: after how many bytes and events, and how long."""
        request = exchange.request
        self.journal.add(
            Ended(
                request=exchange.number,
                method=request.method,
                path=request.path,
                status=exchange.status,
                end=exchange.progress.end,
                bytes=exchange.progress.bytes,
                events=exchange.events_sent(),
                seconds=round(asyncio.get_running_loop().time() - exchange.started, 6),
            )
        )

    def send(
        self,
        exchange: Exchange,
        plan: Plan,
        writes: list[Write] | None = None,
        *,
        live: Live | None = None,
        cors: bool = True,
        close: bool = False,
    ) -> Coroutine[Any, Any, web.StreamResponse]:
        """Write the answer to `exchange`, once awaited (see `wire.send`: a plan, or with `live` a body still
        being made), noting its status, its progress, the events it sent and how it ended; `writes`, what
        `coalesced(plan)` gave, for a plan sent unchanged again and again. With `cors`, the headers a web
        page's fetch needs to read it go with it; without, only for the pages the user named (`cors_origins`)
        and the server's own. With `close`, it says `Connection: close`, and the connection closes after it (see
        `wire.send`)."""
        exchange.status = plan.status
        http = exchange.http
        added = self.cors(http) if cors else self.access.cors(http, self._port(http))
        if live is None:  # the wire's coroutine, as it is: one more around it would wait as long as a stream
            return send(http, plan, exchange.progress, added, started=exchange.started, writes=writes, close=close)
        return self._send_live(exchange, plan, added, live, close)

    async def _send_live(
        self, exchange: Exchange, plan: Plan, added: dict[str, str], live: Live, close: bool
    ) -> web.StreamResponse:
        try:
            return await send(
                exchange.http, plan, exchange.progress, added, started=exchange.started, live=live, close=close
            )
        finally:  # a stream cut off by the server's stop, or its client, too says how many events it sent
            exchange.event_ends = plan.framing.event_ends(bytes(live.sent))

    async def error(
        self,
        exchange: Exchange,
        status: int,
        message: str,
        code: str,
        *,
        retry_after: int | None = None,
        close: bool = False,
    ) -> web.StreamResponse:
        """Answer with a JSON error shaped as the API of the request's path shapes them (OpenAI's by
        default), with `Retry-After` if given; with `close`, `Connection: close` (see `send`). The official
        SDKs raise it with its message."""
        _, headers, body = exchange.dialect.http_error(status, f"sse-tape: {message}", code=code)
        fields = [*headers, ("content-length", str(len(body)))]
        if retry_after is not None:
            fields.append(("retry-after", str(retry_after)))
        return await self.send(exchange, Plan(status, fields, [(0.0, body)]), close=close)

    async def _miss(self, exchange: Exchange) -> web.StreamResponse:
        request = exchange.request
        reason = exchange.miss
        if reason is None:
            reason = await thorough(self.matcher.explain_miss, request)
        if self.options.on_miss is MissPolicy.SYNTH and exchange.api is None:
            # An MCP or A2A request, say: a protocol without generation, which no model speaks.
            reason += "; the model answers the LLM APIs only, and this request is to none of them"
        status = self.options.miss_status
        self._state.add_miss(Miss(exchange.number, request.method, request.path, reason))
        self.journal.add(
            Missed(request=exchange.number, method=request.method, path=request.path, status=status, reason=reason)
        )
        return await self.error(exchange, status, reason, "no_match")

    def _header_faults(self, http: web.BaseRequest) -> list[Fault]:
        """Faults asked for by this request alone, in `X-SSE-Tape-Fault` (several separated by `;`)."""
        specs = [s for value in http.headers.getall(FAULT_HEADER, []) for s in value.split(";") if s.strip()]
        if len(specs) > MAX_HEADER_FAULTS:
            raise ConfigError(f"{len(specs)} faults: a request may ask for {MAX_HEADER_FAULTS} at most")
        return parse_faults(specs)

    # --- the control endpoints -----------------------------------------------------------------------

    async def _control(self, http: web.BaseRequest) -> web.Response:
        """`/__sse_tape__/faults`, `/journal`, `/reset` and `/stats`, for the user's own clients (see `access`)."""
        if (why := self.refused(http, peer=True)) is not None:
            return web.json_response({"error": f"the control endpoints refused: {why}"}, status=403)
        answer = await self._control_answer(http)
        answer.headers.update(self.access.cors(http, self._port(http)))  # for a page the user named
        if answer.status == 408:  # a body too slow: as `_take` does, its 408 sent, then the connection closes
            answer.force_close()  # it says Connection: close, as `send`'s `close` does
            await answer.prepare(http)
            await answer.write_eof()
            half_close(http)
        return answer

    async def _control_answer(self, http: web.BaseRequest) -> web.Response:
        if http.method == "POST" and http.content_type != "application/json":
            # A browser sends a JSON body (or a DELETE) only after asking the server (a preflight), which is
            # refused to foreign pages; a form or text/plain POST would not ask.
            return web.json_response({"error": "send the control endpoints Content-Type: application/json"}, status=415)
        try:
            body, _ = await asyncio.wait_for(read_body(http, CONTROL_BODY_LIMIT), self.limits.request_timeout)
        except TimeoutError:
            return web.json_response({"error": "the request body did not arrive in time"}, status=408)
        except BodyRefused as exc:
            if exc.status == 413:  # its own limit, not --max-body
                most = f"{CONTROL_BODY_LIMIT:,} bytes"
                return web.json_response({"error": f"a control request's body may hold {most} at most"}, status=413)
            return web.json_response({"error": str(exc)}, status=exc.status)
        endpoint = http.rel_url.path.removeprefix(CONTROL_PREFIX)
        if endpoint == "faults":
            return self._control_faults(http, body)
        if endpoint == "journal" and http.method == "GET":
            try:
                limit = int(http.query.get("limit", "100"))
            except ValueError:
                return web.json_response({"error": "limit must be a whole number"}, status=400)
            return web.json_response({"entries": self.control.entries(max(limit, 0))})
        if endpoint == "reset" and http.method == "POST":
            self.control.reset()
            return web.json_response({"reset": True})
        if endpoint == "stats" and http.method == "GET":
            return web.json_response(self.stats())
        known = ", ".join(
            f"{methods} {CONTROL_PREFIX}{name}"
            for methods, name in (
                ("GET/POST/DELETE", "faults"),
                ("GET", "journal"),
                ("POST", "reset"),
                ("GET", "stats"),
            )
        )
        posts = "a POST is sent Content-Type: application/json"
        return web.json_response({"error": f"no such endpoint; use {known} ({posts})"}, status=404)

    def refused(self, http: web.BaseRequest, *, peer: bool = False) -> str | None:
        """Why `http` may not use what only the user's own clients may (the control endpoints, the fault header,
        the upstream): a foreign `Host` or `Origin`, or with `peer` a client on another machine (see
        `access`); None when it may."""
        return self.access.refused(http, self._port(http), peer=peer)

    def _port(self, http: web.BaseRequest) -> int:
        """The port `http` came in on: the server's (or, in an application of the user's, that one's)."""
        sockname = http.transport.get_extra_info("sockname") if http.transport is not None else None
        return sockname[1] if isinstance(sockname, tuple) and len(sockname) >= 2 else self.port

    def _control_faults(self, http: web.BaseRequest, body: bytes) -> web.Response:
        """GET what is set and what was injected, POST new faults (`body`), DELETE them all."""
        if http.method == "POST":
            try:
                given = _json.parse(body)
                specs = given.get("faults") if isinstance(given, dict) else None
                if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
                    raise ValueError("faults must be a list of fault specifications")
                self.control.set_faults(specs)
            except ValueError as exc:  # ConfigError too: a bad spec
                return web.json_response({"error": f'give {{"faults": ["spec", ...]}}: {exc}'}, status=400)
        elif http.method == "DELETE":
            self.control.set_faults([])
        elif http.method != "GET":
            return web.json_response({"error": "use GET, POST or DELETE"}, status=405)
        injections = self.control.entries(kind=FaultInjected.kind)
        now = self.control.snapshot()
        return web.json_response(
            {
                "faults": [f.spec for f in now.faults],
                "requests": now.requests,
                "injected": dict(now.injected),
                "injections": injections[-100:],
            }
        )

    def _preflight(self, http: web.BaseRequest, *, control: bool) -> web.Response:
        asked = {h.strip().lower() for h in http.headers.get("Access-Control-Request-Headers", "").split(",")}
        if control or _FAULT_HEADER_LOWER in asked:
            # What only the user's own clients may use: approved for their pages alone.
            if (why := self.refused(http)) is not None:
                return web.Response(status=403, text=f"sse-tape: refused: {why}\n")
            headers = self.access.cors(http, self._port(http))
        else:
            headers = self.cors(http)
        headers["Access-Control-Allow-Methods"] = _CORS_METHODS
        headers["Access-Control-Allow-Headers"] = http.headers.get("Access-Control-Request-Headers", "*")
        headers["Access-Control-Max-Age"] = "86400"
        return web.Response(status=204, headers=headers)

    @staticmethod
    def cors(http: web.BaseRequest) -> dict[str, str]:
        """The CORS headers an answer to `http` carries, so that a web page's fetch can read it."""
        origin = http.headers.get("Origin")
        headers = {"Access-Control-Allow-Origin": origin or "*", "Access-Control-Expose-Headers": "*"}
        if origin:
            headers["Vary"] = "Origin"
        return headers


async def _continue(http: web.BaseRequest, limit: int) -> None:
    """Tell a client that waits for it (`Expect: 100-continue`, RFC 9110 section 10.1.1) to send its body, unless
    its `Content-Length` is past `limit` bytes: that body is refused for its length alone, unsent (the answer
    says so). Any other expectation is ignored, as the RFC lets a server do: the request is answered."""
    members = {member.strip().lower() for value in http.headers.getall(EXPECT) for member in value.split(",")}
    length = http.content_length
    if http.version >= HttpVersion11 and "100-continue" in members and (length is None or length <= limit):
        await http.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        http.writer.output_size = 0  # the answer has not begun: a failure now is still a status, not a break


class _OneLine(logging.Handler):
    """aiohttp's log, as sse-tape's lines: a request that is not HTTP is one line, not a traceback."""

    def __init__(self, log: Callable[[str], None] | None) -> None:
        super().__init__()
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        if self.log is None:
            return
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or isinstance(exc, HttpProcessingError):
            reason = " ".join(str(exc).split()) if exc is not None else ""
            self.log(f"{record.getMessage()}: {reason}" if reason else record.getMessage())
        else:  # anything else is a bug of ours: keep the whole story
            self.log(logging.Formatter().format(record))


def _one_line_logger(log: Callable[[str], None] | None) -> logging.Logger:
    logger = logging.Logger("sse_tape.server")  # not in the logging tree: a server's own
    logger.addHandler(_OneLine(log))
    return logger


class _LoopErrors:
    """Running out of descriptors is said once, not at every failed accept (asyncio retries each second)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, log: Callable[[str], None] | None) -> None:
        self.loop = loop
        self.log = log
        self.exhausted = 0

    @classmethod
    def install(cls, loop: asyncio.AbstractEventLoop, log: Callable[[str], None] | None) -> _LoopErrors | None:
        if loop.get_exception_handler() is not None:
            return None  # the loop's owner handles its errors
        errors = cls(loop, log)
        loop.set_exception_handler(errors)
        return errors

    def uninstall(self) -> None:
        if self.loop.get_exception_handler() is self:
            self.loop.set_exception_handler(None)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if "out of system resource" in str(context.get("message", "")):
            self.exhausted += 1
            if self.exhausted == 1 and self.log is not None:
                exc = context.get("exception")
                self.log(
                    f"cannot accept connections: {exc or 'out of descriptors'}; raise `ulimit -n` or lower --max-connections"
                )
            return
        loop.default_exception_handler(context)


def _protocols_responders() -> list[Lent]:
    """The responders each protocol brings (`Protocol.responders`), made anew for this server, in the
    dialects' order, each keeping what it keeps under a key of its own."""
    return [
        Lent(responder, f"{dialect.name}:{n}", dialect)
        for dialect in DIALECTS.values()
        for n, responder in enumerate(dialect.responders())
    ]


def _behind_replay(
    policy: MissPolicy, upstream: str | Upstream | None, recorder: Recorder | None, model: Responder | None
) -> list[Responder]:
    """The responders the miss policy puts behind replay."""
    check_sources(
        policy, upstream=upstream is not None, model=model is not None, recording=recorder is not None, unused=False
    )
    if policy is MissPolicy.ERROR:
        return []
    if policy is MissPolicy.SYNTH:
        assert model is not None
        return [model]
    assert upstream is not None
    from ..record import Forwarder  # forwarding: a subsystem of its own, imported by a server that forwards

    if isinstance(upstream, str):
        upstream = AiohttpUpstream(upstream, redaction=recorder.redaction if recorder is not None else None)
    return [Forwarder(upstream, recorder)]
