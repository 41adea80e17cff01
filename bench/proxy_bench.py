"""Latency the recording proxy adds per event: direct vs. `sse-tape record` vs. `mitmdump`.

An upstream process streams events, each stamped with the moment it was
written (time.perf_counter_ns, the system-wide monotonic clock on Linux). A
client process receives them directly, through `sse-tape record --upstream`
(recording every stream to a TOML cassette), and through mitmproxy's
`mitmdump` in reverse-proxy mode with streaming on, alternating rounds in one
run. Latency is receipt minus write; "added" is a path's latency minus the
direct one at the same percentile; "cpu/event" is the proxy process's CPU
time (user and system) over the round, per event relayed.

The 50-stream load runs twice: with every stream started at once, so that
the upstream writes 50 events in the same instant every 20 ms (the worst
case for a single-threaded proxy's median), and with the starts 0.4 ms apart,
as independent clients would come.

Run: python bench/proxy_bench.py [--mitmdump PATH] [--rounds 3]
mitmproxy pins many dependencies; install it in a venv of its own
(python -m venv /tmp/mitm && /tmp/mitm/bin/pip install mitmproxy) and pass
--mitmdump /tmp/mitm/bin/mitmdump. Without it that column is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import re
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from aiohttp import web

from sse_tape import recording_server

PATH = "/v1/chat/completions"
_STAMP = re.compile(rb'"t": (\d+)')


def run_upstream(events: int, gap: float, ready: mp.Queue) -> None:  # type: ignore[type-arg]
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache"})
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i in range(events):
            delay = start + i * gap - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            stamp = time.perf_counter_ns()
            await response.write(
                b'data: {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": " tok"}}], '
                b'"t": %d}\n\n' % stamp
            )
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def main() -> None:
        app = web.Application()
        app.router.add_post(PATH, handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0, backlog=4096).start()
        ready.put(runner.addresses[0][1])
        await asyncio.Event().wait()

    asyncio.run(main())


def run_sse_tape(upstream: str, cassette: str, ready: mp.Queue) -> None:  # type: ignore[type-arg]
    async def main() -> None:
        proxy = recording_server(cassette, upstream, mode="all")
        await proxy.start()
        ready.put(proxy.port)
        await asyncio.Event().wait()

    asyncio.run(main())


@contextmanager
def process(target: Callable[..., None], *args: object) -> Iterator[tuple[int, int]]:
    """Run `target` in a process of its own; yields the port it puts on the queue, and its pid."""
    ready: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    proc = mp.Process(target=target, args=(*args, ready), daemon=True)
    proc.start()
    try:
        yield ready.get(timeout=30), proc.pid or 0
    finally:
        proc.terminate()
        proc.join()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def mitmdump(binary: str, upstream: str) -> Iterator[tuple[int, int]]:
    port = free_port()
    proc = subprocess.Popen(
        [
            *(binary, "-q", "--mode", f"reverse:{upstream}", "--listen-host", "127.0.0.1", "--listen-port", str(port)),
            *("--set", "stream_large_bodies=1", "--set", "connection_strategy=lazy"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait()


async def stream(port: int) -> list[int]:
    """One request; each event's latency in nanoseconds (receipt minus the upstream's write stamp)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Content-Length: 2\r\nConnection: close\r\n\r\n{}".encode()
    )
    latencies: list[int] = []
    buffer = b""
    while data := await reader.read(65536):
        now = time.perf_counter_ns()
        buffer += data
        *complete, buffer = buffer.split(b"\n\n")
        latencies.extend(now - int(m[1]) for event in complete if (m := _STAMP.search(event)))
    writer.close()
    await writer.wait_closed()
    return latencies


async def load(port: int, streams: int, stagger: float = 0.0) -> list[int]:
    async def one(n: int) -> list[int]:
        await asyncio.sleep(n * stagger)
        return await stream(port)

    results = await asyncio.gather(*(one(n) for n in range(streams)))
    return [x for r in results for x in r]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mitmdump", default=shutil.which("mitmdump"), help="path to mitmdump (default: on PATH)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    args = parser.parse_args()
    scenarios = [
        ("1 stream x 300 events, 10 ms gaps", 1, 300, 0.01, 0.0),
        ("50 streams x 100 events, 20 ms gaps, all started at once", 50, 100, 0.02, 0.0),
        ("50 streams x 100 events, 20 ms gaps, started 0.4 ms apart", 50, 100, 0.02, 0.0004),
    ]
    paths = ["direct", "sse-tape"] + (["mitmdump"] if args.mitmdump else [])
    for label, streams, events, gap, stagger in scenarios:
        results: dict[str, list[tuple[float, float, float]]] = {p: [] for p in paths}
        with process(run_upstream, events, gap) as (up_port, _), tempfile.TemporaryDirectory() as tmp:
            upstream = f"http://127.0.0.1:{up_port}"
            for n in range(args.rounds):
                for path in paths:
                    if path == "direct":
                        latencies, cpu = asyncio.run(load(up_port, streams, stagger)), 0.0
                    else:
                        proxy = (
                            process(run_sse_tape, upstream, str(Path(tmp) / f"round{n}.toml"))
                            if path == "sse-tape"
                            else mitmdump(args.mitmdump, upstream)
                        )
                        with proxy as (port, pid):
                            before = cpu_seconds(pid)
                            latencies = asyncio.run(load(port, streams, stagger))
                            cpu = cpu_seconds(pid) - before
                    if len(latencies) != streams * events:
                        raise SystemExit(f"{path}: got {len(latencies)} events of {streams * events}")
                    ms = [x / 1e6 for x in latencies]
                    results[path].append((percentile(ms, 0.5), percentile(ms, 0.99), cpu / len(ms) * 1e6))
        print(f"\n{label}; median of {args.rounds} alternating rounds")
        print(f"{'':12}{'p50 ms':>10}{'p99 ms':>10}{'added p50':>12}{'added p99':>12}{'cpu/event':>12}")
        direct = [statistics.median(r[i] for r in results["direct"]) for i in (0, 1)]
        for path in paths:
            p50, p99, cpu = (statistics.median(r[i] for r in results[path]) for i in (0, 1, 2))
            added = "" if path == "direct" else f"{p50 - direct[0]:>12.3f}{p99 - direct[1]:>12.3f}{cpu:>10.0f}us"
            print(f"{path:12}{p50:>10.3f}{p99:>10.3f}{added}")
    if not args.mitmdump:
        print("\nmitmdump not found: pass --mitmdump PATH to compare with mitmproxy")


if __name__ == "__main__":
    main()
