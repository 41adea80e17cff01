"""Replay speed: sse-tape's server against the simplest hand-written aiohttp SSE server.

Both servers run in their own process and send the same bytes on the same
schedule; one client process measures both, alternately, in one run:

- held: many concurrent streams with 50 ms gaps; how late each event arrives
  against its schedule (p50/p99), how late each stream's first event, how
  much the server's memory grows per stream held, and how many streams
  completed;
- instant: events per second when no pacing applies;
- fidelity: a bundled cassette replayed at its recorded pace; how far the
  gaps a client observes are from the recorded gaps, and how late the first
  event comes.

With --baseline DIR (another checkout, or `git archive` of an earlier commit
unpacked there), sse-tape from DIR is measured too, in the same rounds: the
figures of a change against the code before it, beside the same floor.

Run: python bench/replay_bench.py [--streams 1000] [--events 60] [--rounds 3] [--held-only] [--baseline DIR]
Figures vary with the machine and its load; compare the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing as mp
import os
import select
import socket
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from sse_tape import Cassette, Chunk, Interaction, MockServer, Request, Response, ServeOptions, bundled_cassettes
from sse_tape.stats import percentile

PATH = "/v1/chat/completions"


def bundled_chat() -> Cassette:
    """The bundled `openai-chat.toml`, whose first recording the benchmarks replay as the recorded chat stream."""
    return next(c for c in map(Cassette.load, bundled_cassettes()) if c.path and c.path.stem == "openai-chat")


def make_interaction(events: int, gap: float) -> Interaction:
    chunks = []
    for i in range(events):
        payload = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1763790000,
            "model": "bench",
            "choices": [{"index": 0, "delta": {"content": f" token{i}"}, "finish_reason": None}],
        }
        chunks.append(Chunk(round(0.05 + i * gap, 6), f"data: {json.dumps(payload)}\n\n".encode()))
    headers = (("content-type", "text/event-stream"), ("cache-control", "no-cache"))
    return Interaction(Request("POST", PATH, body=b"{}"), Response(200, headers, tuple(chunks)))


# --- the two servers -------------------------------------------------------------------


def baseline_app(interaction: Interaction, instant: bool) -> web.Application:
    """The simplest aiohttp SSE server that keeps the same schedule."""
    schedule = [(0.0 if instant else c.t, c.data) for c in interaction.response.chunks]

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        loop = asyncio.get_running_loop()
        start = loop.time()
        response = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache"})
        for at, data in schedule:
            delay = start + at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if not response.prepared:
                await response.prepare(request)
            await response.write(data)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post(PATH, handler)
    return app


def run_server(kind: str, interaction: Interaction, pace: str, ready: mp.Queue) -> None:  # type: ignore[type-arg]
    async def main() -> None:
        if kind == "baseline":
            runner = web.AppRunner(baseline_app(interaction, pace == "instant"), access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
            await site.start()
            ready.put(runner.addresses[0][1])
        else:
            options = ServeOptions.build(match_on=["path"], pace=pace)
            server = MockServer([Cassette([interaction])], options=options)
            await server.start()
            from sse_tape.server import collect_for_serving  # here: peers_bench's --baseline has none

            collect_for_serving()  # as `sse-tape serve` does once it listens
            ready.put(server.port)
        await asyncio.Event().wait()

    asyncio.run(main())


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process (all its threads) and its children (`serve --workers` forks
    them) have used so far."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    total = 0
    for each in (pid, *map(int, children)):
        fields = Path(f"/proc/{each}/stat").read_text().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


class ServerProcess:
    def __init__(self, kind: str, interaction: Interaction, pace: str, *, tree: Path | None = None) -> None:
        # A fresh interpreter, not a fork of this one: a forked server would reuse the memory this process
        # freed, as much as it happens to have, and its resident memory would grow by less than it uses.
        spawn = mp.get_context("spawn")
        ready: mp.Queue = spawn.Queue()  # type: ignore[type-arg]
        self.proc = spawn.Process(target=run_server, args=(kind, interaction, pace, ready), daemon=True)
        # With `tree` (another checkout), the new interpreter imports sse_tape from there: it takes this
        # process's import path as it is when it starts.
        if tree is not None:
            sys.path.insert(0, str(tree))
        try:
            self.proc.start()
        finally:
            if tree is not None:
                sys.path.remove(str(tree))
        self.port = ready.get(timeout=30)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.join()


# --- the client: raw sockets, so that its own cost stays small ----------------------------


async def stream(port: int, body: bytes = b"{}") -> tuple[float, list[float]]:
    """Send one request; return when it was sent and when each event (blank line) arrived."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    sent = time.perf_counter()
    writer.write(head.encode() + body)
    arrivals: list[float] = []
    tail = b""
    while True:
        data = await reader.read(65536)
        if not data:
            break
        now = time.perf_counter()
        # Each event ends with a blank line; chunked framing never adds one.
        arrivals.extend([now] * (tail + data).count(b"\n\n"))
        tail = data[-1:]
    writer.close()
    await writer.wait_closed()
    return sent, arrivals


class _Held:
    __slots__ = ("arrivals", "sent", "sock", "tail")

    def __init__(self, sock: socket.socket, sent: float) -> None:
        self.sock = sock
        self.sent = sent
        self.arrivals: list[float] = []
        self.tail = b""


def rss_kib(pid: int) -> int:
    """A process's resident memory, KiB."""
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def held_streams(port: int, pid: int, offsets: Sequence[float], streams: int, ramp: float) -> dict[str, float]:
    """`streams` requests started evenly over `ramp` seconds, read to their end by one epoll loop over raw
    sockets (an asyncio client of 1,000 streams takes a core of its own and measures its own lateness):
    how late each event arrives against its recorded offset from the request's sending, and how much the
    server process `pid`'s resident memory grew at its most, per stream."""
    request = (
        f"POST {PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Content-Length: 2\r\nConnection: close\r\n\r\n{}"
    ).encode()
    poller = select.epoll()
    open_, done = dict[int, _Held](), list[_Held]()
    started = 0
    idle_rss = peak_rss = rss_kib(pid)
    sampled = 0.0
    begin, client_cpu = time.perf_counter(), time.process_time()
    while started < streams or open_:
        now = time.perf_counter()
        if now - sampled > 0.05:
            peak_rss, sampled = max(peak_rss, rss_kib(pid)), now
        while started < streams and now >= begin + ramp * started / streams:
            sock = socket.create_connection(("127.0.0.1", port))
            sock.setblocking(False)
            sent = time.perf_counter()
            sock.send(request)
            open_[sock.fileno()] = _Held(sock, sent)
            poller.register(sock.fileno(), select.EPOLLIN)
            started += 1
        due = begin + ramp * started / streams - time.perf_counter() if started < streams else 60.0
        ready = poller.poll(max(due, 0))
        now = time.perf_counter()
        for fd, _ in ready:
            held = open_[fd]
            try:
                data = held.sock.recv(262144)
            except ConnectionError:
                data = b""
            if data:
                # Each event ends with a blank line; chunked framing never adds one.
                held.arrivals += [now] * (held.tail + data).count(b"\n\n")
                held.tail = data[-1:]
                continue
            poller.unregister(fd)
            held.sock.close()
            del open_[fd]
            if len(held.arrivals) == len(offsets):
                done.append(held)
        if not ready and started == streams and open_:
            raise SystemExit(f"port {port}: {len(open_)} streams heard nothing for 60 s")
    poller.close()
    client_cpu = (time.process_time() - client_cpu) / (time.perf_counter() - begin)
    late = [(a - h.sent - t) * 1000 for h in done for a, t in zip(h.arrivals, offsets, strict=True)]
    first = [(h.arrivals[0] - h.sent - offsets[0]) * 1000 for h in done]
    return {
        "completed": len(done),
        "p50": percentile(late, 0.5),
        "p99": percentile(late, 0.99),
        "first50": percentile(first, 0.5),
        "first99": percentile(first, 0.99),
        "memory": (peak_rss - idle_rss) / streams * 1.024,
        "client": client_cpu,
    }


async def instant_rate(port: int, streams: int) -> float:
    start = time.perf_counter()
    results = await asyncio.gather(*(stream(port) for _ in range(streams)))
    elapsed = time.perf_counter() - start
    return sum(len(arrivals) for _, arrivals in results) / elapsed


async def fidelity(port: int, interaction: Interaction, repeats: int) -> tuple[list[float], list[float]]:
    """Over `repeats` replays, in ms: the first event's arrival after the request was sent, less its
    recorded time (time to first byte, which also holds a new connection and the request's handling);
    and each observed gap between consecutive events less the recorded one."""
    recorded = [t for t, _ in interaction.response.events()]
    first, gaps = [], []
    for _ in range(repeats):
        sent, arrivals = await stream(port, interaction.request.body)
        observed = [a - sent for a in arrivals]
        if len(observed) != len(recorded):
            raise SystemExit(f"fidelity: got {len(observed)} events, the recording has {len(recorded)}")
        first.append((observed[0] - recorded[0]) * 1000)
        pairs = zip(itertools.pairwise(observed), itertools.pairwise(recorded), strict=True)
        gaps += [((o2 - o1) - (r2 - r1)) * 1000 for (o1, o2), (r1, r2) in pairs]
    return first, gaps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=1000, help="concurrent streams held (default 1000)")
    parser.add_argument("--events", type=int, default=60, help="events per held stream (default 60)")
    parser.add_argument("--gap", type=float, default=0.05, help="seconds between events (default 0.05)")
    parser.add_argument("--ramp", type=float, default=1.0, help="seconds over which streams start (default 1)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per server (default 3)")
    parser.add_argument("--held-only", action="store_true", help="only the held streams: no instant, no fidelity")
    parser.add_argument("--baseline", type=Path, help="another checkout whose sse-tape is measured too (held streams)")
    args = parser.parse_args()
    if args.baseline is not None and not (args.baseline / "sse_tape" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: no sse_tape package there (a checkout's root, or a git archive's)")

    held = make_interaction(args.events, args.gap)
    offsets = [c.t for c in held.response.chunks]
    instant = make_interaction(20_000, 0.0)
    kinds = ("baseline", "sse-tape", "before") if args.baseline else ("baseline", "sse-tape")
    table: dict[str, dict[str, list[float]]] = {kind: {} for kind in kinds}

    for _ in range(args.rounds):
        for kind in kinds:
            tree = args.baseline if kind == "before" else None
            with ServerProcess("sse-tape" if tree else kind, held, "recorded", tree=tree) as server:
                cpu = cpu_seconds(server.proc.pid)
                result = held_streams(server.port, server.proc.pid, offsets, args.streams, args.ramp)
                result["cpu"] = (cpu_seconds(server.proc.pid) - cpu) / (args.streams * args.events) * 1e6
            for key, value in result.items():
                table[kind].setdefault(key, []).append(value)
            if args.held_only or kind == "before":
                continue
            with ServerProcess(kind, instant, "instant") as server:
                rate = asyncio.run(instant_rate(server.port, 4))
            table[kind].setdefault("events/s", []).append(rate)

    print(f"{args.streams} streams x {args.events} events, {args.gap * 1000:.0f} ms gaps, started over {args.ramp} s;")
    instant_line = "" if args.held_only else "instant: 4 streams x 20000 events. "
    print(f"{instant_line}Median of {args.rounds} alternating rounds [min-max]; ratio of medians.")
    if args.baseline:
        print(f"before: sse-tape from {args.baseline}; after: this tree's (the ratio column is after / baseline).")
    named = {"baseline": "baseline", "sse-tape": "after" if args.baseline else "sse-tape", "before": "before"}
    extra = f"{'before/base':>12}{'after/before':>13}" if args.baseline else ""
    print(f"{'':22}" + "".join(f"{named[kind]:>24}" for kind in kinds) + f"{'ratio':>8}{extra}")
    rows = [
        ("streams completed", "completed", "{:.0f}"),
        ("lateness p50 (ms)", "p50", "{:.2f}"),
        ("lateness p99 (ms)", "p99", "{:.1f}"),
        ("first event late p50", "first50", "{:.2f}"),
        ("first event late p99", "first99", "{:.1f}"),
        ("memory/stream (kB)", "memory", "{:.1f}"),
        ("server CPU/event (µs)", "cpu", "{:.1f}"),
        ("client CPU (cores)", "client", "{:.2f}"),
        ("instant events/s", "events/s", "{:.0f}"),
    ]
    for label, key, fmt in rows:
        if key not in table["sse-tape"]:
            continue
        cells, medians = [], {}
        for kind in kinds:
            values = table[kind].get(key)
            if not values:
                cells.append("")
                continue
            spread = f"[{fmt.format(min(values))}-{fmt.format(max(values))}]"
            cells.append(f"{fmt.format(statistics.median(values))} {spread}")
            medians[kind] = statistics.median(values)
        ratios = [("sse-tape", "baseline"), ("before", "baseline"), ("sse-tape", "before")][: 3 if args.baseline else 1]
        widths = [8, 12, 13]
        shown = "".join(
            f"{_ratio(medians, over, under):>{width}.2f}" for (over, under), width in zip(ratios, widths, strict=False)
        )
        print(f"{label:22}" + "".join(f"{cell:>24}" for cell in cells) + shown)
    if args.held_only:
        return

    recording = bundled_chat().interactions[0]
    first: dict[str, list[float]] = {"baseline": [], "sse-tape": []}
    gaps: dict[str, list[float]] = {"baseline": [], "sse-tape": []}
    for _ in range(args.rounds):
        for kind in ("baseline", "sse-tape"):
            with ServerProcess(kind, recording, "recorded") as server:
                # The first replay of a recording prepares it (sse-tape) and warms the server: not counted.
                asyncio.run(fidelity(server.port, recording, 1))
                f, g = asyncio.run(fidelity(server.port, recording, 20))
            first[kind] += f
            gaps[kind] += g
    print(
        f"\nreplay fidelity, openai-chat.toml #1 at recorded pace, {args.rounds} alternating rounds of 20 replays "
        f"({len(gaps['sse-tape'])} gaps, {len(first['sse-tape'])} first events each), ms:"
    )
    print(f"{'':36}{'baseline':>12}{'sse-tape':>12}")
    for label, values, q in (
        ("gap error, |observed - recorded| p50", gaps, 0.5),
        ("gap error p99", gaps, 0.99),
        ("gap error max", gaps, 1.0),
        ("first event, late by: p50", first, 0.5),
        ("first event, late by: p99", first, 0.99),
    ):
        cells = [percentile([abs(v) for v in values[kind]], q) for kind in ("baseline", "sse-tape")]
        print(f"{label:36}{cells[0]:>12.2f}{cells[1]:>12.2f}")


def _ratio(medians: dict[str, float], over: str, under: str) -> float:
    a, b = medians.get(under), medians.get(over)
    return b / a if a and b is not None else float("nan")


if __name__ == "__main__":
    main()
