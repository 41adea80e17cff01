"""Latency the recording proxy adds per event: direct vs. `sse-tape record` vs. `mitmdump`.

An upstream process streams events, each stamped with the moment it was
written (time.perf_counter_ns, the system-wide monotonic clock on Linux). A
client process receives them directly, through `sse-tape record --upstream`
(recording every stream to a TOML cassette), and through mitmproxy's
`mitmdump` in reverse-proxy mode with streaming on, alternating rounds in one
run. Latency is receipt minus write; "added" is a path's latency minus the
direct one at the same percentile; "cpu/event" is the proxy process's CPU
time (user and system) over the round, per event relayed; "burst" is the
median number of events the upstream wrote back to back with an event (less
than 0.2 ms apart, their stamps say), which is how much of the load stayed in
step: a proxy that forwards the 50 requests slowly spreads their streams over
the 20 ms gap, and the upstream's bursts shrink with it.

The 50-stream load runs three ways. "at-once": every stream started at once,
each paced from its own start, so that the upstream writes 50 events in the
same instant every 20 ms if its 50 requests came together (the worst case for
a single-threaded proxy's median), and fewer, the later a path delivers them.
"in-step": the same, with every stream's events written on the ticks of one
20 ms clock, so that the bursts are the same for every path, however fast it
forwards requests. "apart": the starts 0.4 ms apart, as independent clients
would come.

Run: python bench/proxy_bench.py [--mitmdump PATH] [--rounds 3] [--scenario at-once]
        [--baseline PATH]
`--baseline` measures another sse-tape alongside (the root of a checkout, or
of `git archive` of an earlier commit): each sse-tape runs in a fresh process
with its root on PYTHONPATH.
mitmproxy pins many dependencies; install it in a venv of its own
(python -m venv /tmp/mitm && /tmp/mitm/bin/pip install mitmproxy) and pass
--mitmdump /tmp/mitm/bin/mitmdump. Without it that column is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import multiprocessing as mp
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from aiohttp import web

from sse_tape.stats import percentile

PATH = "/v1/chat/completions"
_STAMP = re.compile(rb'"t": (\d+)')


def run_upstream(events: int, gap: float, in_step: bool, ready: mp.Queue) -> None:  # type: ignore[type-arg]
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache"})
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        start = loop.time()
        if in_step:  # on the next tick of a clock every stream shares, however late its request came
            start = (start // gap + 1) * gap
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


def serve_proxy(upstream: str, cassette: str) -> None:
    """The sse-tape contender: record everything forwarded to `upstream`; prints its port and where its code is."""
    import sse_tape

    async def main() -> None:
        proxy = sse_tape.recording_server(cassette, upstream, mode="all")
        await proxy.start()
        print(proxy.port, sse_tape.__file__, flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


@contextmanager
def sse_tape(root: str, upstream: str, cassette: str) -> Iterator[tuple[int, int]]:
    """Run the sse-tape found at `root` as a recording proxy in a fresh process; yields its port and pid."""
    env = {**os.environ, "PYTHONPATH": root}
    command = [sys.executable, __file__, "--serve-proxy", upstream, cassette]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port, _, where = proc.stdout.readline().strip().partition(" ")
        if not port.isdigit():
            raise SystemExit(f"the sse-tape at {root} did not start")
        if not where.startswith(root + os.sep):
            raise SystemExit(f"the proxy meant to run the sse-tape at {root} imported {where}")
        yield int(port), proc.pid
    finally:
        proc.terminate()
        proc.wait()


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


async def stream(port: int) -> list[tuple[int, int]]:
    """One request; each event's write stamp and its latency in nanoseconds (receipt minus the stamp)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Content-Length: 2\r\nConnection: close\r\n\r\n{}".encode()
    )
    latencies: list[tuple[int, int]] = []
    buffer = b""
    while data := await reader.read(65536):
        now = time.perf_counter_ns()
        buffer += data
        *complete, buffer = buffer.split(b"\n\n")
        stamps = (int(m[1]) for event in complete if (m := _STAMP.search(event)))
        latencies.extend((stamp, now - stamp) for stamp in stamps)
    writer.close()
    await writer.wait_closed()
    return latencies


async def load(port: int, streams: int, stagger: float = 0.0) -> tuple[list[int], int]:
    """Latencies of every event of `streams` streams, in nanoseconds, and the median burst."""

    async def one(n: int) -> list[tuple[int, int]]:
        await asyncio.sleep(n * stagger)
        return await stream(port)

    results = await asyncio.gather(*(one(n) for n in range(streams)))
    return [latency for r in results for _, latency in r], burst(sorted(stamp for r in results for stamp, _ in r))


def burst(stamps: list[int], within: int = 200_000) -> int:
    """The median number of events written back to back with an event: sorted stamps less than `within` ns apart."""
    sizes: list[int] = []
    run = 1
    for before, after in itertools.pairwise(stamps):
        if after - before < within:
            run += 1
        else:
            sizes += [run] * run
            run = 1
    sizes += [run] * run
    return sorted(sizes)[len(sizes) // 2]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


SCENARIOS = {
    "one": ("1 stream x 300 events, 10 ms gaps", 1, 300, 0.01, 0.0, False),
    "at-once": ("50 streams x 100 events, 20 ms gaps, all started at once", 50, 100, 0.02, 0.0, False),
    "in-step": ("50 streams x 100 events, 20 ms gaps, written on one clock", 50, 100, 0.02, 0.0, True),
    "apart": ("50 streams x 100 events, 20 ms gaps, started 0.4 ms apart", 50, 100, 0.02, 0.0004, False),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mitmdump", default=shutil.which("mitmdump"), help="path to mitmdump (default: on PATH)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument(
        "--scenario", choices=SCENARIOS, action="append", help="run only this load (repeatable; default: all)"
    )
    parser.add_argument("--baseline", help="the root of another sse-tape checkout or export, measured alongside")
    parser.add_argument("--serve-proxy", nargs=2, metavar=("UPSTREAM", "CASSETTE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_proxy:
        serve_proxy(*args.serve_proxy)
        return
    here = str(Path(__file__).resolve().parent.parent)
    roots = {"sse-tape": here} | ({"baseline": str(Path(args.baseline).resolve())} if args.baseline else {})
    paths = ["direct", *roots] + (["mitmdump"] if args.mitmdump else [])
    for label, streams, events, gap, stagger, in_step in (SCENARIOS[name] for name in args.scenario or SCENARIOS):
        results: dict[str, list[tuple[float, float, float, float]]] = {p: [] for p in paths}
        with process(run_upstream, events, gap, in_step) as (up_port, _), tempfile.TemporaryDirectory() as tmp:
            upstream = f"http://127.0.0.1:{up_port}"
            for n in range(args.rounds):
                for path in paths:
                    if path == "direct":
                        (latencies, together), cpu = asyncio.run(load(up_port, streams, stagger)), 0.0
                    else:
                        proxy = (
                            sse_tape(roots[path], upstream, str(Path(tmp) / f"{path}-{n}.toml"))
                            if path in roots
                            else mitmdump(args.mitmdump, upstream)
                        )
                        with proxy as (port, pid):
                            before = cpu_seconds(pid)
                            latencies, together = asyncio.run(load(port, streams, stagger))
                            cpu = cpu_seconds(pid) - before
                    if len(latencies) != streams * events:
                        raise SystemExit(f"{path}: got {len(latencies)} events of {streams * events}")
                    ms = [x / 1e6 for x in latencies]
                    results[path].append((percentile(ms, 0.5), percentile(ms, 0.99), cpu / len(ms) * 1e6, together))
        print(f"\n{label}; ms, median of {args.rounds} alternating rounds [min-max]\n")
        print("| path | p50 | p99 | added p50 | added p99 | cpu/event, µs | burst |")
        print("|---|---|---|---|---|---|---|")
        direct = [statistics.median(r[i] for r in results["direct"]) for i in (0, 1)]
        for path in paths:
            rounds = results[path]
            p50, p99, cpu, together = (spread([r[i] for r in rounds]) for i in range(4))
            added = [f"{statistics.median(r[i] for r in rounds) - direct[i]:.3f}" for i in (0, 1)]
            if path == "direct":
                print(f"| direct | {p50(3)} | {p99(2)} | | | | {together(0)} |")
            else:
                print(f"| {path} | {p50(3)} | {p99(2)} | {added[0]} | {added[1]} | {cpu(0)} | {together(0)} |")
    if not args.mitmdump:
        print("\nmitmdump not found: pass --mitmdump PATH to compare with mitmproxy")


def spread(values: list[float]) -> Callable[[int], str]:
    """The median and range of `values`, with that many decimals."""
    return lambda d: f"{statistics.median(values):.{d}f} [{min(values):.{d}f}-{max(values):.{d}f}]"


if __name__ == "__main__":
    main()
