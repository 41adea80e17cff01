"""The mock server: replays recorded interactions over real HTTP.

`MockServer` is an aiohttp application that answers each request with the
recorded interaction the `Matcher` picks, chunk by chunk and byte for byte, on
the schedule the `Pacing` gives. `aserve` runs one in the current event loop,
`serve` in a background thread for synchronous code.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import socket
import struct
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Self, TypeVar

from aiohttp import web

from ._exceptions import ConfigError, NoMatchError
from .cassette import Cassette, End, Request, bundled_cassettes, find_cassettes
from .dialects import DIALECTS, detect, for_path
from .faults import Fault, Injector, Plan, apply, parse_fault, parse_faults
from .matching import DEFAULT_MATCH_ON, Matcher, MatchOn, Recording
from .pacing import Pacing

__all__ = ["MockServer", "aserve", "load_cassettes", "run_in_thread", "serve"]

# Headers that describe one connection, not the message (RFC 9110 section 7.6.1).
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
)


def end_to_end(headers: Iterable[tuple[str, str]], also_drop: Iterable[str] = ()) -> list[tuple[str, str]]:
    """The headers a proxy or a replay passes on: not hop-by-hop ones, nor those the Connection header names."""
    named = {h.strip().lower() for name, value in headers if name.lower() == "connection" for h in value.split(",")}
    dropped = HOP_BY_HOP | named | {h.lower() for h in also_drop}
    return [(name, value) for name, value in headers if name.lower() not in dropped]


#: The request header that asks for faults in this request alone.
FAULT_HEADER = "X-SSE-Tape-Fault"
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


class MockServer:
    """An HTTP server replaying cassettes; bound to 127.0.0.1 and a free port unless told otherwise."""

    def __init__(
        self,
        cassettes: Iterable[Cassette],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        match_on: Iterable[MatchOn | str] = DEFAULT_MATCH_ON,
        ignore_body_fields: Iterable[str] = (),
        pacing: Pacing | None = None,
        miss_status: int = 404,
        allow_repeats: bool = True,
        faults: Iterable[Fault | str] = (),
        seed: int = 0,
        report: str | os.PathLike[str] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.matcher = Matcher(
            cassettes, match_on=match_on, ignore_body_fields=ignore_body_fields, allow_repeats=allow_repeats
        )
        self.host = host
        self.port = port
        self.pacing = pacing or Pacing()
        self.miss_status = miss_status
        self._log = log
        self._runner: web.AppRunner | None = None
        self._plays: dict[Recording, int] = {}
        self.active_streams = 0
        """Responses being written right now."""
        self.injector = Injector([parse_fault(f) if isinstance(f, str) else f for f in faults], seed)
        self.requests = 0
        """Replays so far."""
        self.injections: deque[dict[str, Any]] = deque(maxlen=1000)
        """The last faults injected: into which request, and what each did (--report keeps them all)."""
        self.report_path = Path(report) if report is not None else None
        if self.report_path is not None:
            try:
                self.report_path.open("a", encoding="utf-8").close()  # fail now, not at the first fault
            except OSError as exc:
                raise ConfigError(f"--report {self.report_path}: cannot write: {exc.strerror or exc}") from None

    @property
    def url(self) -> str:
        """The base URL, such as `http://127.0.0.1:8080`."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        """Bind and start serving; with port 0 the chosen port is in `port` afterwards."""
        app = web.Application(client_max_size=64 * 1024**2)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a client that hangs up cancels its stream at once,
        # even in the middle of a long gap, instead of at the next write.
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self.port = runner.addresses[0][1]
        self._runner = runner

    async def close(self) -> None:
        """Stop listening and end the streams in flight."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            # Let connections already accepted finish their setup before the listener closes:
            # on Python 3.11 one set up after it closed fails inside asyncio and leaks its socket.
            for _ in range(3):
                await asyncio.sleep(0)
            await runner.cleanup()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _handle(self, http: web.Request) -> web.StreamResponse:
        if http.method == "OPTIONS" and "Access-Control-Request-Method" in http.headers:
            return self._preflight(http)
        if http.rel_url.path.startswith(CONTROL_PREFIX):
            return await self._control(http)
        request = Request(
            method=http.method,
            path=http.rel_url.raw_path,
            query=http.rel_url.raw_query_string,
            headers=tuple(http.headers.items()),
            body=await http.read(),
        )
        return await self._answer(http, request)

    async def _answer(self, http: web.Request, request: Request) -> web.StreamResponse:
        try:
            recording = self.matcher.find(request)
        except NoMatchError as exc:
            return self._miss(http, request, exc)
        return await self._play(http, request, recording)

    async def _control(self, http: web.Request) -> web.Response:
        """`/__sse_tape__/faults`: GET what is set and what was injected, POST new faults, DELETE them all."""
        if not _is_loopback(http.remote):
            return web.json_response({"error": "the control endpoint answers loopback clients only"}, status=403)
        if http.rel_url.path != CONTROL_PREFIX + "faults":
            return web.json_response({"error": f"no such endpoint; use {CONTROL_PREFIX}faults"}, status=404)
        if http.method == "POST":
            try:
                body = await http.json()
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
        return web.json_response(
            {
                "faults": [f.spec for f in self.injector.faults],
                "requests": self.requests,
                "injected": self.injector.injected,
                "injections": list(self.injections)[-100:],
            }
        )

    def _miss(self, http: web.Request, request: Request, exc: NoMatchError) -> web.Response:
        # Where a request has no recording. Synthesis (--on-miss synth) will answer here,
        # in the dialect of the request's path.
        self._say(f"{request.method} {request.path} -> {self.miss_status} {exc}")
        return self._error(http, self.miss_status, str(exc), "no_match")

    def _error(self, http: web.Request, status: int, message: str, code: str) -> web.Response:
        """A JSON error shaped as the API of the request's path shapes them (OpenAI's by default).

        The official SDKs raise it with its message.
        """
        dialect = for_path(http.rel_url.raw_path) or DIALECTS["openai-chat"]
        _, headers, body = dialect.http_error(status, f"sse-tape: {message}", code=code)
        return web.Response(status=status, body=body, headers={**dict(headers), **self._cors(http)})

    async def _play(self, http: web.Request, request: Request, recording: Recording) -> web.StreamResponse:
        try:
            asked = self._header_faults(http)
        except ConfigError as exc:
            return self._error(http, 400, f"{FAULT_HEADER}: {exc}", "bad_fault")
        response = recording.interaction.response
        turn = self._plays.get(recording, 0)
        self._plays[recording] = turn + 1
        offsets, end = self.pacing.schedule(response, key=f"{recording}:{turn}")
        plan = Plan.of(response, offsets, end)
        faults = self.injector.choose(request, asked)
        self.requests += 1
        if faults:
            dialect = for_path(request.path) or detect(recording.interaction)
            apply(faults, plan, dialect=dialect, rng=self.injector.rng())
            for fault, note in plan.notes:
                self.injector.applied(fault)
                self._say(f"fault {fault.spec}: {note} -> {request.method} {request.path} (request {self.requests})")
                self._report(
                    {"request": self.requests, "method": request.method, "path": request.path, "fault": fault.spec}
                    | {"what": note, "recording": str(recording)}
                )
        self._say(f"{http.method} {http.rel_url.raw_path} -> {plan.status} {recording}")
        return await self._write(http, plan)

    async def _write(self, http: web.Request, plan: Plan) -> web.StreamResponse:
        """Send a plan: headers, each write at its offset from now, then the end it asks for."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        self.active_streams += 1
        try:
            if plan.hang:
                await asyncio.Event().wait()  # until the client goes or the server stops
            out = web.StreamResponse(status=plan.status)
            for name, value in end_to_end(plan.headers, also_drop=("content-length", "date")):
                out.headers.add(name, value)
            out.headers.update(self._cors(http))
            # A recorded length, or one a fault set, is sent again for the body as it is now.
            if plan.end is End.COMPLETE and _has(plan.headers, "content-length"):
                out.content_length = len(plan.body)
            if plan.headers_at is not None:
                await _sleep_until(loop, start + plan.headers_at)
                await out.prepare(http)
            for at, data in plan.writes:
                delay = start + at - loop.time()  # inline: this loop runs once per event of every stream
                if delay > 0:
                    await asyncio.sleep(delay)
                if not out.prepared:
                    await out.prepare(http)  # the headers go out with the first chunk
                await out.write(data)
            await _sleep_until(loop, start + plan.end_at)
            if not out.prepared:
                await out.prepare(http)
            if plan.end is End.COMPLETE:
                await out.write_eof()
            else:
                # The recorded response never ended properly, or a fault says so: neither does this one.
                drop_connection(http, reset=plan.end is End.UPSTREAM_RESET)
        except (ConnectionResetError, ConnectionAbortedError):
            pass  # the client hung up between two writes
        finally:
            self.active_streams -= 1
        return out

    def _header_faults(self, http: web.Request) -> list[Fault]:
        """Faults asked for by this request alone, in `X-SSE-Tape-Fault` (several separated by `;`)."""
        specs = [s for value in http.headers.getall(FAULT_HEADER, []) for s in value.split(";") if s.strip()]
        return parse_faults(specs)

    def _report(self, entry: dict[str, Any]) -> None:
        self.injections.append(entry)
        if self.report_path is not None:
            try:
                with self.report_path.open("a", encoding="utf-8") as report:
                    report.write(json.dumps(entry, ensure_ascii=False) + "\n")
            except OSError as exc:
                self._say(f"could not write the report {self.report_path}: {exc.strerror or exc}")

    def _preflight(self, http: web.Request) -> web.Response:
        headers = self._cors(http)
        headers["Access-Control-Allow-Methods"] = _CORS_METHODS
        headers["Access-Control-Allow-Headers"] = http.headers.get("Access-Control-Request-Headers", "*")
        headers["Access-Control-Max-Age"] = "86400"
        return web.Response(status=204, headers=headers)

    @staticmethod
    def _cors(http: web.Request) -> dict[str, str]:
        origin = http.headers.get("Origin")
        headers = {"Access-Control-Allow-Origin": origin or "*", "Access-Control-Expose-Headers": "*"}
        if origin:
            headers["Vary"] = "Origin"
        return headers

    def _say(self, line: str) -> None:
        if self._log is not None:
            self._log(line)


async def _sleep_until(loop: asyncio.AbstractEventLoop, when: float) -> None:
    delay = when - loop.time()
    if delay > 0:
        await asyncio.sleep(delay)


def _has(headers: Iterable[tuple[str, str]], name: str) -> bool:
    return any(k.lower() == name for k, _ in headers)


def _is_loopback(remote: str | None) -> bool:
    try:
        return remote is not None and ipaddress.ip_address(remote).is_loopback
    except ValueError:
        return False


def drop_connection(http: web.Request, *, reset: bool) -> None:
    """Close the client's connection without ending the response: with a TCP reset, or a plain close."""
    transport = http.transport
    if transport is None:
        return
    if reset:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Linger on, timeout 0: close() sends RST instead of FIN.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    else:
        transport.close()


@contextlib.asynccontextmanager
async def aserve(*cassettes: CassetteSource, **options: Any) -> AsyncIterator[MockServer]:
    """Serve cassettes (objects, files or folders; none: the bundled ones) while the block runs.

    `options` are `MockServer`'s keywords::

        async with aserve("recordings/", pacing=Pacing.parse("instant")) as server:
            client = AsyncOpenAI(base_url=server.url + "/v1", api_key="test")
    """
    async with MockServer(load_cassettes(cassettes), **options) as server:
        yield server


@contextlib.contextmanager
def serve(*cassettes: CassetteSource, **options: Any) -> Iterator[MockServer]:
    """Like `aserve`, for synchronous code: the server runs in a background thread."""
    with run_in_thread(MockServer(load_cassettes(cassettes), **options)) as server:
        yield server


ServerT = TypeVar("ServerT", bound=contextlib.AbstractAsyncContextManager[Any])


@contextlib.contextmanager
def run_in_thread(server: ServerT) -> Iterator[ServerT]:
    """Enter `server` (any async context manager) in a background thread with its own event loop.

    It runs until the block ends; then it is exited in that thread, which ends.
    """
    ready: Future[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = Future()

    async def main() -> None:
        stop = asyncio.Event()
        async with server:
            ready.set_result((asyncio.get_running_loop(), stop))
            await stop.wait()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                raise

    thread = threading.Thread(target=run, name=f"sse-tape-{type(server).__name__}", daemon=True)
    thread.start()
    loop, stop = ready.result()
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join()
