"""Side by side with the peers: sse-tape against aimock and the aiohttp floor, in one run.

Every server runs in a fresh process of its own (the Python ones through this
script's `--server`); one client process measures them all, alternating
between them round after round (the order turns each round):

- instant: the 14-event chat stream of openai-chat.toml #1, sent with no
  pacing, to 1 client and to 50 concurrent clients, over keep-alive
  connections and with a new connection for each stream: streams/s, and the
  server process's CPU time (user + system, all its threads, from /proc) per
  stream. Contenders: the aiohttp floor (replay_bench's hand-written server),
  sse-tape's `MockServer` in a process, the `sse-tape serve` command,
  aimock's `llmock` command, and the bare aiohttp app of the cold start (one
  route that reads the body and writes the recorded bytes: what aiohttp
  itself costs a request, all that sse-tape adds left out).
- events: 60-event instant streams at 1, 50 and 500 clients, keep-alive:
  events/s, sse-tape's `MockServer` against the aiohttp floor.
- with --baseline DIR (another checkout, or `git archive` of an earlier
  commit unpacked there), that code's `MockServer` too, in both figures
  above and in the profile: its process imports `sse_tape` from DIR, with
  this script's harness, so before and after are measured in one run.
- workers: `sse-tape serve --workers N` for N = 1 and 2, the same instant
  stream from 50 and 500 keep-alive clients: streams/s, and the CPU time of
  the server and all its workers per stream; with --baseline DIR, that
  code's `serve --workers 2` too.
- cold: from spawning a process to the first complete answer, polling its
  port: `python -m sse_tape serve` of one cassette and of the bundled ones,
  a bare aiohttp app that serves one route, and aimock's `llmock`. The
  Python ones start from compiled bytecode, as an installed package does.

The client reads raw sockets through epoll, without asyncio, so that it
costs little beside the servers; its own CPU share is printed. It checks
every answer: status 200 and the stream's number of events. Each server
first answers streams that are not counted (--warm): aimock's figures take
a few thousand requests to settle, while Node's JIT compiles its hot paths.

aimock cannot be given bytes to send: it builds its chunks from a fixture's
content. Its fixture here holds the recording's id, created, model and each
content delta as a text block, and it makes the usage chunk itself, as the
request asks for it (with token counts of its own estimate), so it sends the
same 14 events with the same content; its JSON adds `"logprobs":null` to every chunk and `"content":""` to
the first (the run prints the sizes).

Run: python bench/peers_bench.py [--aimock PATH] [--rounds 5] [--only instant|events|workers|cold]
        [--baseline DIR] [--profile FOLDER]
aimock is a Node package; install it outside the repository
(npm install --prefix /tmp/peers @copilotkit/aimock@1.43.0) and pass
--aimock /tmp/peers/node_modules/.bin/llmock. Without it that column is skipped.
--profile FOLDER runs one more 50-client instant load against sse-tape and
one against the floor (and the baseline) under cProfile, writes their stats
to FOLDER, and prints the calls each makes per stream and sse-tape's
costliest functions.
The machine's load moves every figure; compare the ratios and the ranges.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import errno
import json
import os
import platform
import pstats
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import aiohttp
from aiohttp import web
from replay_bench import baseline_app, bundled_chat, cpu_seconds, make_interaction

import sse_tape
from sse_tape import Cassette, Interaction, MockServer, ServeOptions

PATH = "/v1/chat/completions"
HERE = Path(sse_tape.__file__).resolve().parent.parent
"""The root of the sse_tape measured (the one this script imports, as PYTHONPATH says)."""
_END = b"\r\n0\r\n\r\n"  # the last chunk of a chunked body
_TIMEOUT = 30.0  # seconds without a byte before the client gives up: a safety net, not a measure

# --- the servers, each in a process of its own -------------------------------------------------

Server = Callable[[], AbstractContextManager[tuple[int, int]]]
"""Starts a server; the context yields its port and the pid whose CPU time counts."""


def run_python_server(kind: str, source: Path) -> None:
    """The floor or sse-tape's MockServer (`--server`): prints its port, then obeys its stdin, where the
    client turns a profiler on (`start`) and off (the path to write its stats to), answering `done`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the client's to handle; it stops this process

    async def obey() -> None:
        loop = asyncio.get_running_loop()
        profiler = cProfile.Profile()
        while word := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            if word == "start":
                profiler.enable()  # here, in the event loop's thread
            else:
                profiler.disable()
                profiler.dump_stats(word)
            print("done", flush=True)
        await asyncio.Event().wait()  # stdin closed: serve on until stopped

    async def main() -> None:
        cassette = Cassette.load(source)
        if kind == "floor":
            runner = web.AppRunner(baseline_app(cassette.interactions[0], instant=True), access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0, backlog=4096).start()
            port = runner.addresses[0][1]
        else:
            server = MockServer([cassette], options=ServeOptions.build(match_on="method,path", pace="instant"))
            await server.start()
            # As `sse-tape serve` does once it listens (a --baseline checkout from before 2026-11-24 has no such step).
            if (collect_for_serving := getattr(sse_tape.server, "collect_for_serving", None)) is not None:
                collect_for_serving()
            port = server.port
        print(port, flush=True)
        await obey()

    asyncio.run(main())


@contextmanager
def python_process(kind: str, source: Path, root: Path) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """The floor or sse-tape's MockServer, in a fresh process that imports `sse_tape` from `root`; the
    process and its port."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    argv = [sys.executable, __file__, "--server", kind, str(source)]
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
    with tempfile.TemporaryFile() as log, subprocess.Popen(argv, **pipes, stderr=log, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], _TIMEOUT)
            line = proc.stdout.readline() if ready else ""
            if not line.strip().isdigit():
                raise SystemExit(f"{kind} from {root}: its server did not start: {last_line(log)}")
            yield proc, int(line)
        finally:
            stop(proc)


@contextmanager
def python_server(kind: str, source: Path, root: Path) -> Iterator[tuple[int, int]]:
    """The floor or sse-tape's MockServer from `root`, in a process of its own: its port and pid."""
    with python_process(kind, source, root) as (proc, port):
        yield port, proc.pid


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def last_line(log: IO[bytes]) -> str:
    log.seek(0)
    lines = log.read().decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else "(nothing on stderr)"


def first_answer(proc: subprocess.Popen[bytes], port: int, request: bytes, log: IO[bytes], name: str) -> bytes:
    """Poll the port until a request gets a complete answer; that answer."""
    deadline = time.monotonic() + _TIMEOUT
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited with status {proc.returncode} before answering: {last_line(log)}")
        try:
            return fetch(port, request)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{name} did not answer on port {port} within {_TIMEOUT:.0f} s") from None
            time.sleep(0.002)


@contextmanager
def spawned(argv: list[str], port: int, request: bytes, name: str) -> Iterator[tuple[int, int]]:
    """A command that serves on `port`, once it has answered one request."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
        try:
            first_answer(proc, port, request, log, name)
            yield port, proc.pid
        finally:
            stop(proc)


def command_server(argv: Callable[[int], list[str]], request: bytes, name: str) -> Server:
    """A `Server` that runs the command `argv(port)` gives, on a free port."""

    def server() -> AbstractContextManager[tuple[int, int]]:
        port = free_port()
        return spawned(argv(port), port, request, name)

    return server


def cold_start(
    argv: list[str], port: int, request: bytes, name: str, env: dict[str, str]
) -> tuple[float, float, bytes]:
    """Seconds from spawning `argv` to the first complete answer on `port`, the CPU seconds the process
    used until then, and that answer."""
    with tempfile.TemporaryFile() as log:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, env=env)
        try:
            answer = first_answer(proc, port, request, log, name)
            return time.perf_counter() - start, cpu_seconds(proc.pid), answer
        finally:
            stop(proc)


def serve_argv(cassette: Path | None, port: int) -> list[str]:
    """`sse-tape serve` of `cassette`, or with None of the bundled cassettes (`recording` is one of them)."""
    paths = [str(cassette)] if cassette else []
    return [sys.executable, "-m", "sse_tape", "serve", *paths, "--port", str(port), "--pace", "instant", "-q"]


def aimock_argv(cli: Path, fixture: Path, port: int) -> list[str]:
    node = shutil.which("node") or "node"
    return [node, str(cli), "--port", str(port), "--fixtures", str(fixture), "--log-level", "warn"]


BARE_APP = """
import sys
from aiohttp import web

BODY = {body!r}

async def handler(request):
    await request.read()
    response = web.StreamResponse(headers={{"content-type": "text/event-stream", "cache-control": "no-cache"}})
    await response.prepare(request)
    await response.write(BODY)
    await response.write_eof()
    return response

app = web.Application()
app.router.add_post({path!r}, handler)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


# --- aimock ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Aimock:
    cli: Path
    """Its `llmock` command, the one that takes fixture files."""
    version: str


def find_aimock(given: str) -> Aimock:
    """aimock's llmock script, from that script or the package's folder; a one-line error otherwise."""
    path = Path(given).resolve()
    folder = path if path.is_dir() else path.parent.parent  # .../aimock/dist/cli.js
    manifest = folder / "package.json"
    try:
        package = json.loads(manifest.read_text())
    except (OSError, ValueError):
        raise SystemExit(f"--aimock {given}: not aimock's llmock script nor its package folder") from None
    if package.get("name") != "@copilotkit/aimock":
        raise SystemExit(f"--aimock {given}: {manifest} is {package.get('name')!r}, not @copilotkit/aimock")
    if shutil.which("node") is None:
        raise SystemExit("--aimock: node is not on PATH; aimock runs on Node.js")
    cli = folder / package.get("bin", {}).get("llmock", "dist/cli.js")
    if not cli.is_file():
        raise SystemExit(f"--aimock {given}: {cli} is missing; reinstall @copilotkit/aimock")
    return Aimock(cli, str(package.get("version", "?")))


def aimock_fixture(interaction: Interaction) -> dict[str, object]:
    """An aimock fixture that sends the recording's chat stream: its id, created, model and content deltas."""
    chunks = [json.loads(e.data) for _, e in interaction.response.events() if e.data != "[DONE]"]
    # The usage chunk (no choices) aimock makes itself, as the request asks for it (`include_usage`).
    chunks = [c for c in chunks if c["choices"]]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    if deltas[0] != {"role": "assistant"} or deltas[-1] != {} or any(set(d) != {"content"} for d in deltas[1:-1]):
        raise SystemExit("aimock's fixture: the recording must be a role chunk, content deltas and a stop")
    messages = json.loads(interaction.request.body)["messages"]
    first = chunks[0]
    return {
        "fixtures": [
            {
                "match": {"userMessage": messages[-1]["content"]},
                "chunkSize": 1_000_000,  # one chunk per block
                "response": {
                    "id": first["id"],
                    "created": first["created"],
                    "model": first["model"],
                    "blocks": [{"type": "text", "text": d["content"]} for d in deltas[1:-1]],
                },
            }
        ]
    }


# --- the client: raw sockets and epoll, so that its own cost stays small ----------------------


def http_request(body: bytes, keep_alive: bool = True) -> bytes:
    close = "" if keep_alive else "Connection: close\r\n"
    head = f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{close}"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


def fetch(port: int, request: bytes) -> bytes:
    """One request on a connection of its own; the whole answer, head and chunked body."""
    with socket.create_connection(("127.0.0.1", port), timeout=_TIMEOUT) as sock:
        sock.sendall(request)
        answer = b""
        while not answer.endswith(_END) and (data := sock.recv(65536)):
            answer += data
    return answer


def body_of(answer: bytes) -> bytes:
    """The body of a chunked answer."""
    rest = answer.partition(b"\r\n\r\n")[2]
    body = b""
    while True:
        size, _, rest = rest.partition(b"\r\n")
        n = int(size.split(b";")[0], 16)
        if n == 0:
            return body
        body, rest = body + rest[:n], rest[n + 2 :]


@dataclass(frozen=True)
class Load:
    streams: int
    seconds: float
    server_cpu: float
    client_cpu: float


class _Conn:
    __slots__ = ("events", "fresh", "sock", "tail")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.events = 0
        self.fresh = True
        self.tail = b""


def drive(port: int, pid: int, request: bytes, clients: int, streams: int, events: int, keep_alive: bool) -> Load:
    """`streams` requests from `clients` connections at once, each answered in full before its next."""
    poller = select.epoll()
    conns: dict[int, _Conn] = {}
    opened = finished = 0

    def connect() -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        code = sock.connect_ex(("127.0.0.1", port))
        if code not in (0, errno.EINPROGRESS):
            raise SystemExit(f"port {port}: cannot connect: {os.strerror(code)}")
        conns[sock.fileno()] = _Conn(sock)
        poller.register(sock.fileno(), select.EPOLLOUT)

    cpu_before, client_before = cpu_seconds(pid), time.process_time()
    start = time.perf_counter()
    for _ in range(min(clients, streams)):
        connect()
        opened += 1
    while finished < streams:
        ready = poller.poll(_TIMEOUT)
        if not ready:
            raise SystemExit(f"port {port}: no answer for {_TIMEOUT:.0f} s ({finished} of {streams} streams done)")
        for fd, mask in ready:
            conn = conns[fd]
            if mask & select.EPOLLOUT:
                if code := conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    raise SystemExit(f"port {port}: cannot connect: {os.strerror(code)}")
                conn.sock.send(request)
                poller.modify(fd, select.EPOLLIN)
                continue
            try:
                data = conn.sock.recv(262144)
            except ConnectionError as exc:
                raise SystemExit(f"port {port}: {exc.strerror} in the middle of an answer") from None
            if not data:
                raise SystemExit(f"port {port}: the server closed the connection in the middle of an answer")
            if conn.fresh:
                if not data.startswith(b"HTTP/1.1 200"):
                    status = data.partition(b"\r\n")[0].decode(errors="replace")
                    raise SystemExit(f"port {port}: answered {status}")
                conn.fresh = False
            # An event ends with a blank line; the chunked framing never makes one.
            conn.events += data.count(b"\n\n") + (conn.tail.endswith(b"\n") and data.startswith(b"\n"))
            conn.tail = data[-7:] if len(data) >= 7 else (conn.tail + data)[-7:]
            if conn.tail != _END:
                continue
            finished += 1
            if conn.events != events:
                raise SystemExit(f"port {port}: a stream had {conn.events} events, not {events}")
            if keep_alive and opened < streams:
                conn.events, conn.fresh, conn.tail = 0, True, b""
                conn.sock.send(request)
                opened += 1
                continue
            poller.unregister(fd)
            conn.sock.close()
            del conns[fd]
            if opened < streams:
                connect()
                opened += 1
    seconds = time.perf_counter() - start
    load = Load(streams, seconds, cpu_seconds(pid) - cpu_before, time.process_time() - client_before)
    poller.close()
    for conn in conns.values():
        conn.sock.close()
    return load


# --- tables ------------------------------------------------------------------------------------


def cell(values: list[float], fmt: str) -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


def table(
    title: str,
    results: dict[str, dict[str, list[float]]],
    columns: list[tuple[str, str, str]],
    ratios: list[tuple[str, str]],
) -> None:
    """Rows of contenders, columns of (label, key, format); then `a/b` ratios of the medians."""
    names = [n for n in results if results[n]]
    ratios = [(a, b) for a, b in ratios if a in names and b in names]
    first = max(len(n) for n in [*names, *(f"{a} / {b}" for a, b in ratios)]) + 2
    width = max(len(label) for label, _, _ in columns) + 2
    width = max(width, *(len(cell(results[n][key], fmt)) + 2 for n in names for _, key, fmt in columns))
    print(f"\n{title}")
    print(f"{'':{first}}" + "".join(f"{label:>{width}}" for label, _, _ in columns))
    for name in names:
        print(f"{name:{first}}" + "".join(f"{cell(results[name][key], fmt):>{width}}" for _, key, fmt in columns))
    for a, b in ratios:
        medians = [(statistics.median(results[a][key]), statistics.median(results[b][key])) for _, key, _ in columns]
        row = [x / y if y else float("nan") for x, y in medians]  # nan: a load too short for the clock's ticks
        print(f"{a + ' / ' + b:{first}}" + "".join(f"{r:>{width}.2f}" for r in row))


# --- the figures -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    rounds: int
    """Alternating rounds per figure."""
    streams: int
    """Streams per 50-client instant load; the other loads are sized from it."""
    warmup: int
    """Streams thrown away on each server before its figures."""


def warm(port: int, pid: int, request: bytes, events: int, streams: int) -> None:
    """Requests whose figures are thrown away: imports, caches, and Node's JIT, which takes thousands."""
    drive(port, pid, request, 50, streams, events, keep_alive=True)
    drive(port, pid, request, 1, streams // 3, events, keep_alive=True)


def instant_figure(servers: dict[str, Server], body: bytes, events: int, run: Run) -> None:
    streams, rounds = run.streams, run.rounds
    loads = [
        ("1 client", 1, streams // 5, True),
        ("50 clients", 50, streams, True),
        ("1, new conns", 1, streams // 5, False),
        ("50, new conns", 50, streams, False),
    ]
    results: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
    client_share: list[float] = []
    for n in range(rounds):
        names = list(servers)
        for name in names[n % len(names) :] + names[: n % len(names)]:
            with servers[name]() as (port, pid):
                warm(port, pid, http_request(body), events, run.warmup)
                for label, clients, count, keep_alive in loads:
                    load = drive(port, pid, http_request(body, keep_alive), clients, count, events, keep_alive)
                    results[name].setdefault(f"{label} rate", []).append(load.streams / load.seconds)
                    results[name].setdefault(f"{label} cpu", []).append(load.server_cpu / load.streams * 1e6)
                    client_share.append(load.client_cpu / load.seconds)
        print(f"  instant: round {n + 1} of {rounds} done", file=sys.stderr)
    title = (
        f"instant replay, {events}-event chat stream; {streams // 5} streams from 1 client, {streams} from 50 clients at "
        f"once; keep-alive connections, or a new one per stream. Median of {rounds} alternating rounds [min-max]"
    )
    ratios = [
        ("sse-tape", "aimock"),
        ("sse-tape serve", "aimock"),
        ("sse-tape", "aiohttp floor"),
        ("sse-tape serve", "aiohttp app"),
        ("baseline", "aimock"),
        ("baseline", "aiohttp floor"),
        ("sse-tape", "baseline"),
    ]
    table(title + "\nstreams/s", results, [(label, f"{label} rate", "{:.0f}") for label, *_ in loads], ratios)
    cpus = [(label, f"{label} cpu", "{:.0f}") for label, *_ in loads]
    table("server CPU time (user + system) per stream, µs; same loads", results, cpus, ratios)
    print(
        f"the client's own CPU: {max(client_share):.0%} of one core at most, {statistics.median(client_share):.0%} median"
    )


def events_figure(run: Run, folder: Path, baseline: Path | None) -> None:
    streams, rounds = run.streams // 2, run.rounds
    cassette = Cassette([make_interaction(60, 0.0)]).save(folder / "events.toml")
    servers: dict[str, Server] = {
        "aiohttp floor": lambda: python_server("floor", cassette, HERE),
        "sse-tape": lambda: python_server("sse-tape", cassette, HERE),
    }
    if baseline is not None:
        servers["baseline"] = lambda: python_server("sse-tape", cassette, baseline)
    loads = [(1, streams // 5), (50, streams), (500, streams)]
    results: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
    request = http_request(b"{}")
    for n in range(rounds):
        for name in list(servers)[:: 1 if n % 2 == 0 else -1]:
            with servers[name]() as (port, pid):
                warm(port, pid, request, 60, run.warmup // 10)
                for clients, count in loads:
                    load = drive(port, pid, request, clients, count, 60, keep_alive=True)
                    results[name].setdefault(f"{clients} rate", []).append(count * 60 / load.seconds)
                    results[name].setdefault(f"{clients} cpu", []).append(load.server_cpu / count * 1e6)
        print(f"  events: round {n + 1} of {rounds} done", file=sys.stderr)
    title = (
        f"60-event instant streams, keep-alive; {streams // 5} streams from 1 client, {streams} from 50 and from "
        f"500 clients at once. Median of {rounds} alternating rounds [min-max]\nevents/s"
    )
    ratios = [("sse-tape", "aiohttp floor"), ("baseline", "aiohttp floor"), ("sse-tape", "baseline")]
    table(title, results, [(f"{c} client{'s'[: c > 1]}", f"{c} rate", "{:.0f}") for c, _ in loads], ratios)
    cpus = [(f"{c} client{'s'[: c > 1]}", f"{c} cpu", "{:.0f}") for c, _ in loads]
    table("server CPU time (user + system) per stream, µs; same loads", results, cpus, ratios)


def workers_figure(cassette: Path, body: bytes, events: int, run: Run, baseline: Path | None) -> None:
    """`serve --workers N` for N = 1 and 2 (and the baseline's for 2): the same instant stream from 50 and 500
    keep-alive clients, whose connections the system shares out among the workers."""
    servers = {
        f"--workers {n}": command_server(
            lambda port, n=n: [*serve_argv(cassette, port), "--workers", str(n)], http_request(body), f"workers {n}"
        )
        for n in (1, 2)
    }
    if baseline is not None:
        # `python -c CODE ARGS`: the command's arguments are ARGS; `sse_tape` is imported from the baseline.
        code = f"import sys; sys.path.insert(0, {str(baseline)!r}); from sse_tape.cli import main; main()"
        servers["baseline --workers 2"] = command_server(
            lambda port: [sys.executable, "-c", code, *serve_argv(cassette, port)[3:], "--workers", "2"],
            http_request(body),
            "baseline workers 2",
        )
    loads = [("50 clients", 50, run.streams), ("500 clients", 500, run.streams)]
    results: dict[str, dict[str, list[float]]] = {name: {} for name in servers}
    for n in range(run.rounds):
        for name in list(servers)[:: 1 if n % 2 == 0 else -1]:
            with servers[name]() as (port, pid):
                warm(port, pid, http_request(body), events, run.warmup)
                for label, clients, count in loads:
                    load = drive(port, pid, http_request(body), clients, count, events, keep_alive=True)
                    results[name].setdefault(f"{label} rate", []).append(load.streams / load.seconds)
                    results[name].setdefault(f"{label} cpu", []).append(load.server_cpu / load.streams * 1e6)
        print(f"  workers: round {n + 1} of {run.rounds} done", file=sys.stderr)
    title = (
        f"`sse-tape serve --workers N`, the {events}-event stream instant, {run.streams} streams from 50 and from 500 "
        f"keep-alive clients at once; {os.cpu_count()} cores here. Median of {run.rounds} alternating rounds "
        "[min-max]\nstreams/s"
    )
    ratios = [("--workers 2", "--workers 1"), ("baseline --workers 2", "--workers 1")]
    ratios += [("--workers 2", "baseline --workers 2")]
    table(title, results, [(label, f"{label} rate", "{:.0f}") for label, *_ in loads], ratios)
    cpus = [(label, f"{label} cpu", "{:.0f}") for label, *_ in loads]
    table("server CPU time (user + system, all workers) per stream, µs; same loads", results, cpus, ratios)


def cold_figure(
    starts: dict[str, Callable[[int], list[str]]], request: bytes, events: int, samples: int, tmp: Path
) -> None:
    # Python contenders start from compiled bytecode, as an installed package does (pip compiles it): with
    # PYTHONDONTWRITEBYTECODE set (as on this project's machines) a checkout's modules would be compiled
    # again at every start. Their caches go to a folder of this run's, written by the untimed starts.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    results: dict[str, dict[str, list[float]]] = {name: {"ms": [], "cpu": []} for name in starts}
    for name, argv in starts.items():  # once each, untimed: bytecode and disk caches
        cold_start(argv(port := free_port()), port, request, name, env)
    for n in range(samples):
        names = list(starts)
        for name in names[n % len(names) :] + names[: n % len(names)]:
            seconds, cpu, answer = cold_start(starts[name](port := free_port()), port, request, name, env)
            if body_of(answer).count(b"\n\n") != events:
                raise SystemExit(f"{name}: its first answer is not the {events}-event stream")
            results[name]["ms"].append(seconds * 1000)
            results[name]["cpu"].append(cpu * 1000)
    title = (
        f"cold start: from spawning the process to the first complete answer, and the CPU time (user + system) "
        f"it used until then, ms. Median of {samples}, alternating [min-max]"
    )
    ratios = [("sse-tape serve", "aiohttp app"), ("serve, bundled", "aiohttp app"), ("sse-tape serve", "aimock")]
    table(title, results, [("first answer", "ms", "{:.0f}"), ("its CPU", "cpu", "{:.0f}")], ratios)


def profile_instant(kind: str, source: Path, root: Path, body: bytes, events: int, run: Run, out: Path) -> pstats.Stats:
    """One more 50-client instant load, against `kind` from `root` under cProfile; its stats, also written
    to `out`."""
    with python_process(kind, source, root) as (proc, port):
        request = http_request(body)
        warm(port, proc.pid, request, events, run.warmup)
        tell(proc, "start")
        drive(port, proc.pid, request, 50, run.streams, events, keep_alive=True)
        tell(proc, str(out))
    return pstats.Stats(str(out))


def tell(proc: subprocess.Popen[str], word: str) -> None:
    """Send a `--server` process a word for its profiler, and wait until it has done it."""
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(word + "\n")
    proc.stdin.flush()
    if proc.stdout.readline().strip() != "done":
        raise SystemExit(f"the server process {proc.pid} did not answer {word!r}")


def profile(folder: Path, body: bytes, events: int, cassette: Path, run: Run, baseline: Path | None) -> None:
    """The floor and sse-tape (and the baseline) under cProfile, one 50-client instant load each; the calls
    each makes per stream, and sse-tape's costliest functions."""
    folder.mkdir(parents=True, exist_ok=True)
    stats = {"the floor": profile_instant("floor", cassette, HERE, body, events, run, folder / "floor.prof")}
    if baseline is not None:
        stats["the baseline"] = profile_instant(
            "sse-tape", cassette, baseline, body, events, run, folder / "baseline.prof"
        )
    stats["sse-tape"] = ours = profile_instant("sse-tape", cassette, HERE, body, events, run, folder / "sse-tape.prof")
    print(f"\nunder cProfile, {run.streams} streams from 50 keep-alive clients; stats in {folder}")
    calls = ", ".join(f"{name} {s.total_calls / run.streams:.0f}" for name, s in stats.items())  # type: ignore[attr-defined]
    print(f"function calls per stream: {calls}; sse-tape's by own time:")
    ours.sort_stats("tottime").print_stats(25)


def header(aimock: Aimock | None, baseline: Path | None) -> None:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.processor() or "?",
    )
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip() if aimock else ""
    peers = f"aimock {aimock.version} (Node {node})" if aimock else "aimock: not given"
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; {os.cpu_count()} cores ({model}); Python {platform.python_version()}")
    print(
        f"aiohttp {aiohttp.__version__}; {peers}; sse-tape {sse_tape.__version__} from {Path(sse_tape.__file__).parent}"
    )
    if baseline is not None:
        print(f"baseline: sse-tape's MockServer from {baseline / 'sse_tape'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--aimock", help="aimock's llmock script (node_modules/.bin/llmock) or its package folder")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per figure (default 5)")
    parser.add_argument("--only", choices=["instant", "events", "cold", "workers"], help="run one figure only")
    parser.add_argument("--streams", type=int, default=5000, help="streams per 50-client load (default 5000)")
    parser.add_argument("--warm", type=int, default=3000, help="streams thrown away before measuring (default 3000)")
    parser.add_argument("--starts", type=int, default=10, help="cold starts per contender (default 10)")
    parser.add_argument("--profile", type=Path, help="a folder: also profile sse-tape and the floor under cProfile")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="the root of another sse-tape checkout or export (git archive), its MockServer measured alongside",
    )
    parser.add_argument("--server", nargs=2, metavar=("KIND", "CASSETTE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.server:
        run_python_server(args.server[0], Path(args.server[1]))
        return
    baseline = args.baseline.resolve() if args.baseline else None
    if baseline is not None and not (baseline / "sse_tape" / "__init__.py").is_file():
        raise SystemExit(f"--baseline {args.baseline}: no sse_tape package there")
    # Stopped with SIGTERM, as with Ctrl-C, every server started is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run = Run(args.rounds, args.streams, args.warm)
    aimock = find_aimock(args.aimock) if args.aimock else None
    header(aimock, baseline)

    bundled = bundled_chat()
    recording = bundled.interactions[0]
    events = len(recording.response.events())
    body = recording.request.body
    with tempfile.TemporaryDirectory() as tmp:
        cassette = Cassette([recording], match_on=bundled.match_on).save(Path(tmp) / "chat.toml")
        fixture = Path(tmp) / "aimock.json"
        fixture.write_text(json.dumps(aimock_fixture(recording)))
        app = Path(tmp) / "bare_app.py"
        sent = b"".join(c.data for c in recording.response.chunks)
        app.write_text(textwrap.dedent(BARE_APP.format(body=sent, path=PATH)))

        servers: dict[str, Server] = {
            "aiohttp floor": lambda: python_server("floor", cassette, HERE),
            "sse-tape": lambda: python_server("sse-tape", cassette, HERE),
        }
        if baseline is not None:
            servers["baseline"] = lambda: python_server("sse-tape", cassette, baseline)
        starts: dict[str, Callable[[int], list[str]]] = {
            "sse-tape serve": lambda port: serve_argv(cassette, port),
            "serve, bundled": lambda port: serve_argv(None, port),
            "aiohttp app": lambda port: [sys.executable, str(app), str(port)],
        }
        if aimock:
            starts["aimock"] = lambda port: aimock_argv(aimock.cli, fixture, port)
        for name in ("sse-tape serve", "aiohttp app", "aimock"):
            if name in starts:
                servers[name] = command_server(starts[name], http_request(body), name)

        if args.only in (None, "instant"):
            print(f"\nthe bytes each sends for openai-chat.toml #1 ({len(sent)} bytes, {events} events recorded):")
            for name, server in servers.items():
                with server() as (port, _):
                    got = body_of(fetch(port, http_request(body)))
                count = got.count(b"\n\n")
                same = "the recorded bytes" if got == sent else f"{len(got)} bytes, {count} events"
                print(f"  {name}: {same}")
            instant_figure(servers, body, events, run)
            if args.profile:
                profile(args.profile, body, events, cassette, run, baseline)
        if args.only in (None, "events"):
            events_figure(run, Path(tmp), baseline)
        if args.only in (None, "workers"):
            workers_figure(cassette, body, events, run, baseline)
        if args.only in (None, "cold"):
            cold_figure(starts, http_request(body, keep_alive=False), events, args.starts, Path(tmp))
    if not aimock:
        print("\naimock not given: pass --aimock PATH to compare with it (see this script's docstring)")


if __name__ == "__main__":
    main()
