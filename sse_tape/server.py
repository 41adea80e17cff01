"""The server: each request is answered by an ordered chain of responders.

`MockServer` is an aiohttp application. A request goes to its responders in
turn until one answers: `Background` (the Responses API's background
responses replay kept, polled, resumed and cancelled); `Replay` (the
recording the matcher picks, at the server's pace, with its faults, keeping
background responses); behind it, what the miss policy puts there
(an upstream the request is forwarded to, recording what passes); last, the
`Catalog` of the recordings' models, for clients that list them first.
A request no responder answers gets the API's JSON error naming the closest
recordings. Every step goes into the server's `journal`; every counter replay
depends on lives in its `state`.

`aserve` runs a server in the current event loop, `serve` in a background
thread for synchronous code.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import gc
import ipaddress
import logging
import os
import resource
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Self

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from . import _json
from ._exceptions import CassetteNotFoundError, ConfigError, NoMatchError
from ._http import ConnectionGuard, coalesced, run_in_thread, write_plan
from .background import Background, BackgroundResponse, json_plan
from .cassette import (
    Cassette,
    End,
    Interaction,
    Recording,
    Request,
    Response,
    bundled_cassettes,
    check_cassette_path,
    find_cassettes,
)
from .catalog import Catalog
from .dialects import Generation as Dialect
from .dialects import dialect_for, for_path
from .faults import MAX_HEADER_FAULTS, Fault, Injector, parse_fault, parse_faults
from .journal import Ended, Journal, Matched, Received, ReplayState
from .matching import CUT_SHORT, Matcher, last_event_id
from .options import MissPolicy, RecordMode, ServeOptions
from .pacing import Pacing
from .plan import Plan, Write, event_ends
from .responder import Attached, Exchange, Host, Responder, inject
from .shape import Recorded, Shape, collapse, reshape

if TYPE_CHECKING:  # recording and forwarding are imported when used: serving alone starts sooner
    from .record import Recorder
    from .redaction import Redaction
    from .upstream import Upstream

__all__ = [
    "Exchange",
    "Limits",
    "MockServer",
    "Replay",
    "Responder",
    "aserve",
    "collect_for_serving",
    "load_cassettes",
    "serve",
]

#: The request header that asks for faults in this request alone.
FAULT_HEADER = "X-SSE-Tape-Fault"
_FAULT_HEADER_LOWER = FAULT_HEADER.lower()
#: Where the control endpoints live.
CONTROL_PREFIX = "/__sse_tape__/"
_CORS_METHODS = "GET, POST, PUT, PATCH, DELETE, OPTIONS"

CassetteSource = Cassette | str | os.PathLike[str]


def load_cassettes(sources: Iterable[CassetteSource] = ()) -> list[Cassette]:
    """Cassettes from a mix of `Cassette` objects, files and folders; none given means the bundled ones."""
    sources = list(sources)
    if not sources:
        return [Cassette.load(p) for p in bundled_cassettes()]
    cassettes = [s for s in sources if isinstance(s, Cassette)]
    paths = find_cassettes(s for s in sources if not isinstance(s, Cassette))
    return cassettes + [Cassette.load(p) for p in paths]


def collect_for_serving() -> None:
    """Set the garbage collector for a process that does nothing but serve, once its cassettes are loaded.

    What is loaded by then lives as long as the server: frozen, no collection
    walks it again (a full one of a big cassette held every stream back for
    tens of milliseconds). The young generation is collected after 10,000
    new objects rather than 700: at 1,000 paced streams the default made a
    full collection of every open connection's objects (30 ms, every stream
    waiting) every few seconds, and a middle one every few hundred ms.
    Not for a process that is also the user's (the pytest plugin, `serve()`).
    """
    gc.freeze()
    gc.set_threshold(10_000, *gc.get_threshold()[1:])


@dataclass(frozen=True, slots=True)
class _Known:
    """What replay reads of a recording on every request, found at its first."""

    name: str
    """How the journal names it."""
    recorded: Recorded
    """The shapes its answer can take."""
    dialect: Dialect
    """What frames its faults when the request's path names no API: the recording's own, else OpenAI's."""
    last_id: str | None
    """The `Last-Event-ID` it was recorded with."""

    @classmethod
    def of(cls, recording: Recording) -> _Known:
        interaction = recording.interaction
        dialect = dialect_for(interaction.request.path, interaction)
        return cls(str(recording), Recorded.of(interaction), dialect, last_event_id(interaction.request))


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A recording's response as it is sent: in the shape the request asked for, and where its events end."""

    response: Response
    event_ends: list[int]
    converted: str | None
    stands_for: Response | None = None
    """For a stream answered as one JSON document: that stream, whose pace and faults the answer follows."""
    plan: Plan | None = None
    """Its plan at the server's pace when every replay gets the same one (no jitter): sent as it is where
    nothing changes it, else a copy."""
    writes: list[Write] | None = None
    """What goes on the wire for `plan` unchanged (see `coalesced`)."""


#: A recording of at most this many bytes is prepared for its first play on the event loop, not in a thread.
_PREPARED_IN_PLACE = 8192


def _prepared(interaction: Interaction, shape: Shape, pace: Pacing, *, faulted: bool) -> _Prepared:
    response, converted = reshape(interaction, shape)
    stands_for = interaction.response if shape.stream is False and converted is not None else None
    plan = writes = None
    if pace.repeats:
        plan = pace.plan(stands_for if stands_for is not None else response)
        if faulted:  # its events decoded now, off the event loop, for the faults that work between them
            plan.blocks  # noqa: B018
        writes = coalesced(plan)
    return _Prepared(response, event_ends(response.body), converted, stands_for, plan, writes)


class Replay(Attached):
    """Answers from the recordings the server's matcher holds, at the server's pace, with its faults.

    A request that asks for no stream, answered by a streamed recording, gets
    the API's JSON answer built from it, and the other way round (see
    `shape`). The JSON answer goes out when the stream would have ended at
    the server's pace, and the stream's faults make it what that faulted
    stream adds up to (an error in it, a 500; a disconnect, no answer).
    A request for a background response (the Responses API's
    `"background": true`) that a recorded stream answers is kept in the
    replay state (see `background`); if it asked for no stream, it is
    answered at once with the response, queued.

    With the `recorded_faults` option, a recording that notes the faults its
    client got (`Interaction.injected`) gets them again, besides the
    server's and the request's own (one of the same text acts once), unless
    a reconnection resumes it: the replay is what that client got.

    A reconnection (`Last-Event-ID`) answered by a recording of the same
    reconnection gets it as recorded; answered by one made without the
    header, it gets that stream from after the event it names.
    """

    def __init__(self) -> None:
        super().__init__()
        # Per recording, and per recording and shape asked for: worked out at its first replay (a shape off the
        # event loop).
        self._known: dict[Recording, _Known] = {}
        self._prepared: dict[tuple[Recording, Shape], _Prepared] = {}
        self._preparing: dict[tuple[Recording, Shape], asyncio.Task[_Prepared]] = {}
        """First plays being prepared: requests that come meanwhile wait for the same preparation."""
        self._recorded_faults: dict[Recording, list[Fault]] = {}

    async def start(self, host: Host) -> None:
        await super().start(host)
        if host.options.recorded_faults:  # a bad fault in a cassette stops the server now, with one line
            for recording in host.matcher.recordings:
                self._faults_of(recording)

    async def close(self) -> None:
        preparing = list(self._preparing.values())
        for task in preparing:
            task.cancel()  # its thread finishes on its own; no request waits for it any more
        await asyncio.gather(*preparing, return_exceptions=True)

    async def respond(self, exchange: Exchange) -> web.StreamResponse | None:
        server = self.host
        request = exchange.request
        try:
            recording = server.matcher.find(request)
        except NoMatchError as exc:
            exchange.miss = f"{exchange.miss}; {exc}" if exchange.miss else str(exc)
            return None
        known = self._known.get(recording)
        if known is None:
            known = self._known[recording] = _Known.of(recording)
        prepared = await self._prepare(recording, known, request)
        if prepared.plan is not None:
            # Sent as it is, unless a fault or a resumption may change it.
            faultless = not (server.injector.faults or exchange.faults or server.options.recorded_faults)
            stream = prepared.plan if faultless and last_event_id(request) is None else prepared.plan.copy()
        else:  # a schedule of this replay's own: jitter, seeded by the recording and how often it played
            key = f"{known.name}:{server.state.plays[recording] - 1}"
            paced = prepared.stands_for if prepared.stands_for is not None else prepared.response
            stream = server.options.pace.plan(paced, key=key)
        background = BackgroundResponse.of(request, stream, exchange.started)
        resumed, cut = None, False
        if prepared.stands_for is None and (last_id := last_event_id(request)) is not None:
            if known.last_id == last_id:  # a recording of this very reconnection
                resumed = f"as recorded after event id {last_id!r}"
            else:  # the stream goes on after the event it names (an id it never set: all of it)
                cut = stream.resume_after(last_id)
                resumed = f"after event id {last_id!r}" if cut else f"from the start: no event id {last_id!r}"
        # A recording's own faults act again (not on a resumption: they were the first connection's).
        again = self._faults_of(recording) if server.options.recorded_faults and not cut else []
        server.journal.add(
            Matched(
                request=exchange.number,
                method=request.method,
                path=request.path,
                recording=known.name,
                status=prepared.response.status,
                converted=prepared.converted if background is None or background.streamed else None,
                resumed=resumed,
                background=background.id if background is not None else None,
            )
        )
        dialect = exchange.api or known.dialect
        if background is not None:
            server.state.background[background.id] = background
            if not background.streamed:  # created, and answered at once: it runs on without the client
                plan = json_plan(background.created())
                inject(server, exchange, plan, dialect=dialect, recording=known.name, stream=False)
                return await server.send(exchange, plan)
        injected = inject(server, exchange, stream, dialect=dialect, recording=known.name, also=again)
        if prepared.stands_for is not None:
            if injected:
                plan = await asyncio.to_thread(collapse, stream, recording.interaction, dialect)
            else:
                plan = Plan.of(prepared.response, [stream.end_at] * len(prepared.response.chunks), stream.end_at)
            exchange.event_ends = []
        else:
            plan = stream
            exchange.event_ends = [b.end for b in plan.events] if injected or resumed else prepared.event_ends
        return await server.send(exchange, plan, prepared.writes if plan is prepared.plan else None)

    def _faults_of(self, recording: Recording) -> list[Fault]:
        """The faults a recording notes its client got, to act on every replay of it (not by chance, nor a
        number of times); raises `ConfigError` naming the recording for one that is not a fault."""
        faults = self._recorded_faults.get(recording)
        if faults is None:
            faults = []
            for note in recording.interaction.injected:
                try:
                    fault = parse_fault(note.fault)
                except ConfigError as exc:
                    raise ConfigError(f"{recording}: injected {exc}") from None
                if fault.spec not in (f.spec for f in faults):
                    faults.append(replace(fault, p=1.0, times=None, path=None))
            self._recorded_faults[recording] = faults
        return faults

    async def _prepare(self, recording: Recording, known: _Known, request: Request) -> _Prepared:
        """The recording's response in the shape the request asks for (see `shape`)."""
        shape = known.recorded.asked(request) if self.host.matcher.reshape else Shape(None)
        key = (recording, shape)
        prepared = self._prepared.get(key)
        if prepared is not None:
            return prepared
        task = self._preparing.get(key)
        if task is None:
            # A long recording takes a while to convert: the streams in flight go on meanwhile. Its events are
            # decoded for the server's own faults; a request's own faults decode its copy's (25 µs an event,
            # which the first play of a long recording would otherwise wait for, fault or none). A short one is
            # prepared here: a fraction of a millisecond, less than a thread's hand-off (the first of which
            # starts the loop's default executor, 2 ms of CPU time).
            options = self.host.options
            faulted = bool(self.host.injector.faults) or options.recorded_faults
            prepare = functools.partial(_prepared, recording.interaction, shape, options.pace, faulted=faulted)
            if sum(len(chunk.data) for chunk in recording.interaction.response.chunks) <= _PREPARED_IN_PLACE:
                prepared = self._prepared[key] = prepare()
                return prepared
            task = self._preparing[key] = asyncio.create_task(asyncio.to_thread(prepare))
            task.add_done_callback(functools.partial(self._ready, key))
        # Shielded: a client that goes away leaves the preparation to those still waiting, and to later plays.
        return await asyncio.shield(task)

    def _ready(self, key: tuple[Recording, Shape], task: asyncio.Task[_Prepared]) -> None:
        del self._preparing[key]
        if not task.cancelled() and task.exception() is None:  # one that failed is tried again by the next play
            self._prepared[key] = task.result()


def _default_max_connections() -> int:
    # Each connection is a descriptor (two when it is forwarded upstream); keep clear of the limit.
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 10_000 if soft == resource.RLIM_INFINITY else max(8, min(10_000, (soft - 64) // 2))


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """How long a client may take, and how many may be connected at once.

    A request's head must arrive within `request_timeout` of its first byte
    (or of the connection opening), and its body within `request_timeout` of
    the head; a connection may sit idle between requests for `keep_alive`.
    Past either, the connection is closed (a body too slow gets a 408 first).
    Answers themselves have no deadline. Beyond `max_connections` (by default,
    what the process's descriptor limit leaves room for), a new connection
    gets a 503 and is closed.
    """

    request_timeout: float = 10.0
    keep_alive: float = 60.0
    max_connections: int = field(default_factory=_default_max_connections)


class MockServer:
    """An HTTP server answering from cassettes; bound to 127.0.0.1 and a free port unless told otherwise.

    `options` say how it answers (`ServeOptions`). Behind replay, the miss
    policy `options.on_miss` puts: nothing (`error`), or an `upstream` each
    miss is forwarded to (`forward`), its answers kept by `recorder`
    (`record`), or a `model` responder that answers it (`synth`; its answers
    kept by `recorder` when there is one); `models` are listed at
    `/v1/models` besides those the recordings name. With `replay` off, every request goes to the upstream. `log`
    gets a line for each logged journal entry; what the journal (so the log, the report and the control
    endpoint) and a miss's explanation say of a request has its secrets redacted, as a cassette has them
    (see `redaction`). `limits` keep slow and idle
    clients from holding connections. The fault header and the control
    endpoints answer loopback clients only, unless `allow_remote_control`.
    With `reuse_port`, other processes may listen on the same port, and the
    system shares the connections out among them.
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
        replay: bool = True,
        limits: Limits | None = None,
        allow_remote_control: bool = False,
        reuse_port: bool = False,
    ) -> None:
        self.options = options or ServeOptions()
        self.reuse_port = reuse_port
        """Listen with SO_REUSEPORT, beside other processes on the same port (`serve --workers`)."""
        self.host = host
        self.port = port
        self.limits = limits or Limits()
        self.allow_remote_control = allow_remote_control
        self.state = ReplayState()
        """Every counter replay depends on; `reset()` starts them over."""
        self._redaction = recorder.redaction if recorder is not None else None
        self._shown_queries: dict[str, str] = {}
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
            state=self.state,
            redact=self._redacted,
        )
        self.injector = Injector(self.options.faults, self.options.seed, self.state)
        self.journal = Journal(log=log, report=self.options.report)
        self._log = log
        """What happened to each request, newest last."""
        recording = self.options.on_miss in (MissPolicy.RECORD, MissPolicy.SYNTH)
        self.recorder = recorder if recording else None
        """What keeps the answers forwarded (the `record` policy) or synthesized (`synth`) on a miss."""
        behind = _behind_replay(self.options.on_miss, upstream, self.recorder, model)
        replaying: list[Responder] = [Background(), Replay()] if replay else []
        self.responders: list[Responder] = [*replaying, *behind, Catalog(models)]
        """The chain each request goes through, in order."""
        self.active_streams = 0
        """Requests being answered right now."""
        self.closing = False
        """Set while the server stops: streams cut now were interrupted, not abandoned by their clients."""
        self._runner: web.AppRunner | None = None
        self._handlers: set[asyncio.Task[Any]] = set()  # the requests being answered, to cancel when stopping
        self._listener: asyncio.Server | None = None
        self._guard: ConnectionGuard | None = None
        self._loop_errors: _LoopErrors | None = None

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
            from .redaction import Redaction  # only a query or a miss needs it: serving starts without

            self._redaction = Redaction()
        return self._redaction

    def shown_query(self, query: str) -> str:
        """A request's query string as the journal shows it: the values of secret parameters redacted."""
        shown = self._shown_queries.get(query)
        if shown is None:  # a client sends the same few queries again and again: each is worked out once
            if len(self._shown_queries) >= 1024:
                self._shown_queries.clear()
            shown = self._shown_queries[query] = self.redaction.query(query)
        return shown

    def _redacted(self, request: Request) -> Request:
        return self.redaction.request(request)

    def stats(self) -> dict[str, int]:
        """What the server holds right now: connections, streams being answered, tasks, journal entries."""
        return {
            "connections": len(self._guard.open) if self._guard is not None else 0,
            "active_streams": self.active_streams,
            "tasks": len(asyncio.all_tasks()),
            "requests": self.state.requests,
            "journal_entries": len(self.journal),
            "refused_connections": self._guard.refused if self._guard is not None else 0,
            "pid": os.getpid(),
        }

    def reset(self) -> None:
        """Start replay over: every recording unplayed, every count at zero, the journal empty."""
        self.state.reset()
        self.journal.clear()

    async def start(self) -> None:
        """Bind and start serving; with port 0 the chosen port is in `port` afterwards."""
        for responder in self.responders:
            await responder.start(self)
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(
            app,
            access_log=None,
            # A client that hangs up cancels its stream at once, even in the middle of a long gap.
            handler_cancellation=True,
            shutdown_timeout=0.5,
            keepalive_timeout=self.limits.keep_alive,
            logger=_one_line_logger(self._log),  # a bad request is a line, not a traceback
        )
        await runner.setup()
        loop = asyncio.get_running_loop()
        assert runner.server is not None
        self._guard = ConnectionGuard(
            runner.server,
            request_timeout=self.limits.request_timeout,
            keep_alive=self.limits.keep_alive,
            max_connections=self.limits.max_connections,
            log=self._log,
        )
        try:
            self._listener = await loop.create_server(
                self._guard, self.host, self.port, reuse_address=True, reuse_port=self.reuse_port or None, backlog=1024
            )
        except OSError:
            await runner.cleanup()
            await self._close_responders()
            raise
        self.port = self._listener.sockets[0].getsockname()[1]
        self._runner = runner
        self._loop_errors = _LoopErrors.install(loop, self._log)

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
            await self._close_responders()
            if self._loop_errors is not None:
                self._loop_errors.uninstall()
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

    async def _handle(self, http: web.Request) -> web.StreamResponse:
        assert self._guard is not None
        self._guard.busy(http.transport, True)
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            return await self._answer(http)
        finally:
            self._handlers.discard(handler)
            self._guard.busy(http.transport, False)

    async def _answer(self, http: web.Request) -> web.StreamResponse:
        is_control = http.rel_url.path.startswith(CONTROL_PREFIX)
        if http.method == "OPTIONS" and "Access-Control-Request-Method" in http.headers:
            return self._preflight(http, control=is_control)
        if is_control:
            return await self._control(http)
        headers = tuple(http.headers.items())
        if faults_asked := FAULT_HEADER in http.headers:
            # The fault header is said to sse-tape, not to the API: never matched on, forwarded or recorded.
            headers = tuple((k, v) for k, v in headers if k.lower() != _FAULT_HEADER_LOWER)
        url = http.rel_url
        request = Request(http.method, url.raw_path, url.raw_query_string, headers)
        self.state.requests += 1
        number = self.state.requests
        query = request.query
        shown = self.shown_query(query) if query else query
        self.journal.add(Received(request=number, method=request.method, path=request.path, query=shown))
        found = for_path(request.path)  # the only time: every responder reads it from the exchange
        api = found if isinstance(found, Dialect) else None
        exchange = Exchange(
            http,
            request,
            number,
            [],
            api or dialect_for(request.path),
            api=api,
            started=asyncio.get_running_loop().time(),
        )
        self.active_streams += 1
        try:
            try:
                # Most bodies come with the head: one that is still on its way has a deadline.
                if http.content.is_eof():
                    body = await http.read()
                else:
                    body = await asyncio.wait_for(http.read(), self.limits.request_timeout)
            except TimeoutError:
                if http.transport is not None:
                    http.transport.close()  # whatever of the body is still coming is not read
                return self.error(exchange, 408, "the request body did not arrive in time", "request_timeout")
            exchange.request = Request(request.method, request.path, request.query, request.headers, body)
            # Kept as it arrived, in a request of its own: the body that answering parses (and keeps, see
            # `Request.json`) goes with the answer, not into the last 10,000 requests kept here.
            self.state.received.append(Request(request.method, request.path, request.query, request.headers, body))
            try:
                exchange.faults = self._header_faults(http) if faults_asked else []
            except ConfigError as exc:
                return self.error(exchange, 400, f"{FAULT_HEADER}: {exc}", "bad_fault")
            if exchange.faults and not self._controls(http):
                message = f"{FAULT_HEADER} is obeyed for loopback clients only (see --allow-remote-control)"
                return self.error(exchange, 403, message, "forbidden")
            for responder in self.responders:
                answer = await responder.respond(exchange)
                if answer is not None:
                    return answer
            return self._miss(exchange)
        except asyncio.CancelledError:
            exchange.end = End.INTERRUPTED if self.closing else End.CLIENT_GONE
            raise
        finally:
            self.active_streams -= 1
            if not exchange.ends_later:
                self.ended(exchange)

    def ended(self, exchange: Exchange) -> None:
        """Note in the journal how an exchange's answer ended: after how many bytes and events, and how long."""
        request = exchange.request
        self.journal.add(
            Ended(
                request=exchange.number,
                method=request.method,
                path=request.path,
                status=exchange.status,
                end=exchange.end,
                bytes=exchange.progress.bytes,
                events=bisect.bisect_right(exchange.event_ends, exchange.progress.bytes),
                seconds=round(asyncio.get_running_loop().time() - exchange.started, 6),
            )
        )

    async def send(self, exchange: Exchange, plan: Plan, writes: list[Write] | None = None) -> web.StreamResponse:
        """Write a plan as the answer to `exchange`, noting its status, its progress and how it ended;
        `writes`, what `coalesced(plan)` gave, for a plan sent unchanged again and again."""
        exchange.status = plan.status
        cors = self.cors(exchange.http)
        response, exchange.end = await write_plan(
            exchange.http, plan, exchange.progress, cors, started=exchange.started, writes=writes
        )
        return response

    def error(self, exchange: Exchange, status: int, message: str, code: str) -> web.Response:
        """A JSON error shaped as the API of the request's path shapes them (OpenAI's by default).

        The official SDKs raise it with its message.
        """
        _, headers, body = exchange.dialect.http_error(status, f"sse-tape: {message}", code=code)
        exchange.status = status
        exchange.progress.bytes = len(body)
        return web.Response(status=status, body=body, headers={**dict(headers), **self.cors(exchange.http)})

    def _miss(self, exchange: Exchange) -> web.Response:
        from .incidents import Miss, Missed

        request = exchange.request
        reason = exchange.miss or self.matcher.explain_miss(request)
        status = self.options.miss_status
        self.state.misses.append(Miss(exchange.number, request.method, request.path, reason))
        self.journal.add(
            Missed(request=exchange.number, method=request.method, path=request.path, status=status, reason=reason)
        )
        return self.error(exchange, status, reason, "no_match")

    def _header_faults(self, http: web.Request) -> list[Fault]:
        """Faults asked for by this request alone, in `X-SSE-Tape-Fault` (several separated by `;`)."""
        specs = [s for value in http.headers.getall(FAULT_HEADER, []) for s in value.split(";") if s.strip()]
        if len(specs) > MAX_HEADER_FAULTS:
            raise ConfigError(f"{len(specs)} faults: a request may ask for {MAX_HEADER_FAULTS} at most")
        return parse_faults(specs)

    # --- the control endpoints -----------------------------------------------------------------------

    async def _control(self, http: web.Request) -> web.Response:
        """`/__sse_tape__/faults`, `/journal`, `/reset` and `/stats`."""
        if not self._controls(http):
            return web.json_response(
                {"error": "the control endpoints answer loopback clients only (see --allow-remote-control)"},
                status=403,
            )
        if (origin := http.headers.get("Origin")) is not None and origin != _own_origin(http):
            # A web page the user has open must not drive the server: only pages the server itself served may.
            return web.json_response({"error": f"the control endpoints refuse requests from {origin}"}, status=403)
        if http.method == "POST" and http.content_type != "application/json":
            # A browser sends a JSON body (or a DELETE) only after asking the server (a preflight), which is
            # refused to foreign pages; a form or text/plain POST would not ask.
            return web.json_response({"error": "send the control endpoints Content-Type: application/json"}, status=415)
        endpoint = http.rel_url.path.removeprefix(CONTROL_PREFIX)
        if endpoint == "faults":
            return await self._control_faults(http)
        if endpoint == "journal" and http.method == "GET":
            try:
                limit = int(http.query.get("limit", "100"))
            except ValueError:
                return web.json_response({"error": "limit must be a whole number"}, status=400)
            entries = self.journal.last(max(limit, 0))
            return web.json_response({"entries": [e.to_json() for e in entries]})
        if endpoint == "reset" and http.method == "POST":
            self.reset()
            return web.json_response({"reset": True})
        if endpoint == "stats" and http.method == "GET":
            return web.json_response(self.stats())
        known = ", ".join(
            f"{method} {CONTROL_PREFIX}{name}"
            for method, name in (("GET", "faults"), ("GET", "journal"), ("POST", "reset"), ("GET", "stats"))
        )
        return web.json_response({"error": f"no such endpoint; use {known}"}, status=404)

    def _controls(self, http: web.Request) -> bool:
        """Whether this client may set faults: one on this machine, or anyone when remote control is allowed."""
        return self.allow_remote_control or _is_loopback(http.remote)

    async def _control_faults(self, http: web.Request) -> web.Response:
        """GET what is set and what was injected, POST new faults, DELETE them all."""
        from .incidents import FaultInjected

        if http.method == "POST":
            try:
                body = _json.parse(await http.read())
                specs = body.get("faults") if isinstance(body, dict) else None
                if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
                    raise ValueError("faults must be a list of fault specifications")
                self.injector.set(parse_faults(specs))
            except ValueError as exc:  # ConfigError too: a bad spec
                return web.json_response({"error": f'give {{"faults": ["spec", ...]}}: {exc}'}, status=400)
        elif http.method == "DELETE":
            self.injector.set([])
        elif http.method != "GET":
            return web.json_response({"error": "use GET, POST or DELETE"}, status=405)
        injections = [e.to_json() for e in self.journal if isinstance(e, FaultInjected)]
        return web.json_response(
            {
                "faults": [f.spec for f in self.injector.faults],
                "requests": self.state.requests,
                "injected": dict(self.state.injected),
                "injections": injections[-100:],
            }
        )

    def _preflight(self, http: web.Request, *, control: bool) -> web.Response:
        if control and http.headers.get("Origin") != _own_origin(http):
            return web.Response(status=403, text="the control endpoints refuse other origins\n")
        headers = self.cors(http)
        headers["Access-Control-Allow-Methods"] = _CORS_METHODS
        headers["Access-Control-Allow-Headers"] = http.headers.get("Access-Control-Request-Headers", "*")
        headers["Access-Control-Max-Age"] = "86400"
        return web.Response(status=204, headers=headers)

    @staticmethod
    def cors(http: web.Request) -> dict[str, str]:
        """The CORS headers an answer to `http` carries, so that a web page's fetch can read it."""
        origin = http.headers.get("Origin")
        headers = {"Access-Control-Allow-Origin": origin or "*", "Access-Control-Expose-Headers": "*"}
        if origin:
            headers["Vary"] = "Origin"
        return headers


def recording_server(
    cassette: str | os.PathLike[str],
    upstream: str | None,
    *,
    mode: RecordMode | str = RecordMode.NEW_EPISODES,
    redaction: Redaction | None = None,
    idle_timeout: float = 300.0,
    options: ServeOptions | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    log: Callable[[str], None] | None = None,
    limits: Limits | None = None,
    allow_remote_control: bool = False,
    model: Responder | None = None,
    also: Iterable[Cassette] = (),
) -> MockServer:
    """A server that records into `cassette` what it forwards to `upstream`, and replays by `mode`.

    `upstream` is a base URL such as `http://127.0.0.1:8000` or
    `https://api.example.com/v1`; a request for `/chat/completions` goes to
    the upstream's base URL plus that path. `options` say how replays are
    matched and paced; the mode says whether recordings repeat: each replays
    once under `new_episodes` (as VCR.py does), and they repeat under the others.
    With `model` (a responder such as `synth.Synthesizer`) in place of the
    upstream, the model answers what replay does not, and that is recorded.
    The cassettes `also` are replayed besides, as they are: nothing is recorded into them.
    """
    from .record import Recorder
    from .upstream import AiohttpUpstream

    path = check_cassette_path(cassette)
    if (upstream is None) == (model is None):
        raise ConfigError("record from an upstream or a model: give one of them")
    forwarded = None
    if upstream is not None:
        forwarded = AiohttpUpstream(upstream, idle_timeout=idle_timeout, redaction=redaction)
    try:
        mode = RecordMode(mode)
    except ValueError:
        raise ConfigError(f"record mode {mode!r}: choose from {', '.join(RecordMode)}") from None
    # Read it now: a cassette that cannot be read must stop us before we record over it. It holds
    # what killed sessions left in their spools too: it exists if either does.
    try:
        existing: Cassette | None = Cassette.load(path)
    except CassetteNotFoundError:
        existing = None
    replay_only = mode is RecordMode.NONE or (mode is RecordMode.ONCE and existing is not None)
    if replay_only and existing is not None and log is not None:
        _say_cut_short(existing, mode, log)
    chosen = replace(
        options or ServeOptions(),
        on_miss=MissPolicy.ERROR if replay_only else MissPolicy.SYNTH if model is not None else MissPolicy.RECORD,
        allow_repeats=mode is not RecordMode.NEW_EPISODES,
    )
    return MockServer(
        [*also, *([existing] if existing is not None and mode is not RecordMode.ALL else [])],
        options=chosen,
        host=host,
        port=port,
        log=log,
        upstream=forwarded,
        model=model,
        # What new_episodes records replays from the next request on; once and all record every request.
        recorder=Recorder(existing or Cassette(path=path), redaction, playable=mode is RecordMode.NEW_EPISODES),
        replay=mode is not RecordMode.ALL,
        limits=limits,
        allow_remote_control=allow_remote_control,
    )


def _say_cut_short(cassette: Cassette, mode: RecordMode, log: Callable[[str], None]) -> None:
    """A replay-only record mode replays a stream cut short as it was recorded: say so, and how to fetch it."""
    ends = Counter(str(i.response.end) for i in cassette.interactions if i.response.end in CUT_SHORT)
    if ends:
        count = sum(ends.values())
        how = ", ".join(f"{n} {end}" for end, n in sorted(ends.items()))
        them = "them" if count != 1 else "it"
        log(
            f"{cassette.name} holds {count} stream{'s'[: count != 1]} cut short when recorded ({how}): "
            f"record mode {mode} replays {them} as recorded; record mode new_episodes fetches {them} again"
        )


@contextlib.asynccontextmanager
async def arecording(
    cassette: str | os.PathLike[str], upstream: str | None, **keywords: Any
) -> AsyncIterator[MockServer]:
    """Run a recording server while the block runs; its keywords are `recording_server`'s."""
    async with recording_server(cassette, upstream, **keywords) as server:
        yield server


@contextlib.contextmanager
def recording(cassette: str | os.PathLike[str], upstream: str | None, **keywords: Any) -> Iterator[MockServer]:
    """Like `arecording`, for synchronous code: the server runs in a background thread."""
    with run_in_thread(recording_server(cassette, upstream, **keywords)) as server:
        yield server


def _behind_replay(
    policy: MissPolicy, upstream: str | Upstream | None, recorder: Recorder | None, model: Responder | None
) -> list[Responder]:
    """The responders the miss policy puts behind replay."""
    if policy is MissPolicy.ERROR:
        return []
    if policy is MissPolicy.SYNTH:
        if model is None:
            raise ConfigError("on miss synth: give the model that answers misses (--model)")
        return [model]
    if upstream is None:
        raise ConfigError(f"on miss {policy}: give the upstream to send misses to")
    if policy is MissPolicy.RECORD and recorder is None:
        raise ConfigError("on miss record: give the recorder that keeps what is forwarded")
    from .record import Forwarder
    from .upstream import AiohttpUpstream

    if isinstance(upstream, str):
        upstream = AiohttpUpstream(upstream, redaction=recorder.redaction if recorder is not None else None)
    return [Forwarder(upstream, recorder)]


def _own_origin(http: web.Request) -> str:
    return f"{http.scheme}://{http.host}"


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


def _is_loopback(remote: str | None) -> bool:
    try:
        return remote is not None and ipaddress.ip_address(remote).is_loopback
    except ValueError:
        return False


def _server(
    cassettes: Iterable[CassetteSource],
    host: str,
    port: int,
    log: Callable[[str], None] | None,
    upstream: str | None,
    options: ServeOptions | None,
    words: dict[str, Any],
) -> MockServer:
    """The server `serve` and `aserve` run: options given, or built from the words."""
    if options is not None and words:
        raise TypeError(f"give options or keywords, not both (got {', '.join(words)})")
    chosen = options if options is not None else ServeOptions.build(**words)
    return MockServer(load_cassettes(cassettes), options=chosen, host=host, port=port, log=log, upstream=upstream)


@contextlib.asynccontextmanager
async def aserve(
    *cassettes: CassetteSource,
    host: str = "127.0.0.1",
    port: int = 0,
    log: Callable[[str], None] | None = None,
    upstream: str | None = None,
    options: ServeOptions | None = None,
    **words: Any,
) -> AsyncIterator[MockServer]:
    """Serve cassettes (objects, files or folders; none: the bundled ones) while the block runs.

    `words` are `ServeOptions.build`'s keywords (or give `options`); with
    `on_miss="forward"`, misses go to `upstream`::

        async with aserve("recordings/", pace="instant", faults=["error:5"]) as server:
            client = AsyncOpenAI(base_url=server.url + "/v1", api_key="test")
    """
    async with _server(cassettes, host, port, log, upstream, options, words) as server:
        yield server


@contextlib.contextmanager
def serve(
    *cassettes: CassetteSource,
    host: str = "127.0.0.1",
    port: int = 0,
    log: Callable[[str], None] | None = None,
    upstream: str | None = None,
    options: ServeOptions | None = None,
    **words: Any,
) -> Iterator[MockServer]:
    """Like `aserve`, for synchronous code: the server runs in a background thread."""
    with run_in_thread(_server(cassettes, host, port, log, upstream, options, words)) as server:
        yield server
