"""Timing fidelity, measured by the probe: how closely a server keeps a stream's recorded pace.

One chat stream of 30 events, each 50 ms after the one before but the last
(`data: [DONE]`, sent with the finish chunk before it, as OpenAI sends it),
is served at its recorded pace by three servers, each in a fresh process of
its own, alternating round after round (the order turns each round):

- the aiohttp floor: replay_bench's hand-written server (`baseline_app`),
  which sleeps until each chunk's recorded time;
- sse-tape's `MockServer` at `--pace recorded`, as replay_bench runs it;
- aimock's `llmock` (with --aimock), whose fixture holds the same chat
  stream (its id, model and content deltas) and, as `recordedTimings`, the
  same delays: 50 ms before the first chunk and between each two after.
  aimock sleeps that long (`setTimeout`, whole milliseconds) after each
  write, where the other two sleep until each chunk's time from the
  request's start; it writes `[DONE]` straight after the last chunk.

Each is read by the probe's own client (`sse_tape.probe.fidelity`) over
direct connections, with 1 stream (`--repeats` times in a row), and with
100 and 1,000 concurrent streams, all sent at once. For each load: every
gap between two consecutive events as read, less its recorded gap
(|error|: p50, p99, max); how late each stream's first event came against
its recorded time from the request's sending (p50, p99), which holds the
connection's set-up and the request's handling; and how late its last one
came (the first's lateness plus every gap's error: what drifts over the
stream). The client runs in processes of its own, `--per-process` streams
in each at most, all started together; their CPU share is printed, per
process: one near a whole core is measuring its own lateness too.

Run: python bench/fidelity_bench.py [--aimock PATH] [--rounds 3] [--events 30] [--gap 0.05]
        [--streams 1,100,1000] [--per-process 250] [--repeats 20]
aimock is a Node package; install it outside the repository
(npm install --prefix /tmp/peers @copilotkit/aimock@1.43.0) and pass
--aimock /tmp/peers/node_modules/.bin/llmock. Without it that column is skipped.
The machine's load moves every figure; compare the ratios and the ranges.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import multiprocessing.synchronize
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from peers_bench import aimock_argv, aimock_fixture, find_aimock, free_port, header, http_request, spawned, table
from replay_bench import PATH, ServerProcess

from sse_tape import Chunk, Interaction, Request, Response
from sse_tape.probe import Fidelity, fidelity
from sse_tape.stats import percentile

Server = Callable[[], AbstractContextManager[str]]
"""Starts a server at the recorded pace; the context yields its URL."""

_CONTENDERS = ("aiohttp floor", "sse-tape", "aimock")


def chat_stream(events: int, gap: float) -> Interaction:
    """An OpenAI chat stream of `events` events: a role chunk, content deltas, a finish chunk and `[DONE]`; each
    `gap` seconds after the one before, the first `gap` after the request, `[DONE]` with the finish chunk."""
    if events < 4:
        raise SystemExit("--events: at least 4 (a role chunk, a content delta, a finish chunk and [DONE])")
    body = {"model": "bench", "messages": [{"role": "user", "content": "fidelity"}], "stream": True}
    request = Request("POST", PATH, headers=(("content-type", "application/json"),), body=json.dumps(body).encode())
    deltas = [{"role": "assistant"}, *({"content": f" token{i}"} for i in range(events - 3)), {}]
    chunks = []
    for i, delta in enumerate(deltas):
        payload = {
            "id": "chatcmpl-fidelity",
            "object": "chat.completion.chunk",
            "created": 1764300000,
            "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None if delta else "stop"}],
        }
        chunks.append(Chunk(round(gap * (i + 1), 6), f"data: {json.dumps(payload)}\n\n".encode()))
    chunks.append(Chunk(chunks[-1].t, b"data: [DONE]\n\n"))
    headers = (("content-type", "text/event-stream"), ("cache-control", "no-cache"))
    return Interaction(request, Response(200, headers, tuple(chunks)))


def paced_fixture(interaction: Interaction, gap: float) -> dict[str, object]:
    """aimock's fixture for `interaction`, with its pace as `recordedTimings`: `gap` before each chunk."""
    fixture = aimock_fixture(interaction)
    entries = fixture["fixtures"]
    assert isinstance(entries, list)
    chunks = len(interaction.response.chunks) - 1  # [DONE] is aimock's own, with no delay before it
    ms = gap * 1000
    entries[0]["recordedTimings"] = {
        "ttftMs": ms,
        "interChunkDelaysMs": [ms] * (chunks - 1),
        "totalDurationMs": ms * chunks,
    }
    return fixture


@contextmanager
def python_server(kind: str, interaction: Interaction) -> Iterator[str]:
    """replay_bench's floor (`baseline`) or sse-tape's MockServer, at the recorded pace, in a process of its own."""
    with ServerProcess(kind, interaction, "recorded") as server:
        yield f"http://127.0.0.1:{server.port}"


@contextmanager
def aimock_server(cli: Path, fixture: Path, request: bytes) -> Iterator[str]:
    port = free_port()
    with spawned(aimock_argv(cli, fixture, port), port, request, "aimock"):
        yield f"http://127.0.0.1:{port}"


# --- the client: the probe's own, in processes of its own ------------------------------------------


def client(
    url: str,
    interaction: Interaction,
    streams: int,
    go: multiprocessing.synchronize.Event,
    out: mp.Queue[tuple[Fidelity, float, float]],
) -> None:
    """Read `streams` copies at once once `go` is set; put what `fidelity` saw, with this process's CPU seconds
    and the wall seconds it took."""
    go.wait()
    start, cpu = time.perf_counter(), time.process_time()
    seen = asyncio.run(fidelity(url, interaction, streams=streams))
    out.put((seen, time.process_time() - cpu, time.perf_counter() - start))


def measure(url: str, interaction: Interaction, streams: int, per_process: int) -> tuple[list[Fidelity], list[float]]:
    """`streams` concurrent streams over as few client processes as hold `per_process` each, started together:
    what each process saw, and each one's CPU share (CPU seconds over wall seconds)."""
    processes = math.ceil(streams / per_process)
    shares = [streams // processes + (i < streams % processes) for i in range(processes)]
    go = mp.Event()
    out: mp.Queue[tuple[Fidelity, float, float]] = mp.Queue()
    procs = [mp.Process(target=client, args=(url, interaction, n, go, out), daemon=True) for n in shares]
    for proc in procs:
        proc.start()
    go.set()
    got = [out.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join()
    return [seen for seen, _, _ in got], [cpu / wall for _, cpu, wall in got]


def figures(seen: list[Fidelity]) -> dict[str, float]:
    """Percentiles, in ms, of what the readings saw."""
    errors = [abs(e) * 1000 for f in seen for e in f.gap_errors]
    first = [t * 1000 for f in seen for t in f.first_late]
    last = [t * 1000 for f in seen for t in f.last_late]
    nan = float("nan")
    return {
        "completed": sum(f.completed for f in seen),
        "gap p50": percentile(errors, 0.5),
        "gap p99": percentile(errors, 0.99),
        "gap max": max(errors, default=nan),
        "first p50": percentile(first, 0.5),
        "first p99": percentile(first, 0.99),
        "last p50": percentile(last, 0.5),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--aimock", help="aimock's llmock script (node_modules/.bin/llmock) or its package folder")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--events", type=int, default=30, help="events per stream (default 30)")
    parser.add_argument("--gap", type=float, default=0.05, help="seconds between events (default 0.05)")
    parser.add_argument("--streams", default="1,100,1000", help="concurrent streams per load (default 1,100,1000)")
    parser.add_argument("--per-process", type=int, default=250, help="streams per client process, at most (250)")
    parser.add_argument("--repeats", type=int, default=20, help="1-stream reads in a row per round (default 20)")
    args = parser.parse_args()
    loads = [int(n) for n in args.streams.split(",")]
    aimock = find_aimock(args.aimock) if args.aimock else None
    header(aimock, None)

    interaction = chat_stream(args.events, args.gap)
    request = http_request(interaction.request.body)
    results: dict[int, dict[str, dict[str, list[float]]]] = {n: {k: {} for k in _CONTENDERS} for n in loads}
    cpu: dict[int, list[float]] = {n: [] for n in loads}
    with tempfile.TemporaryDirectory() as tmp:
        servers: dict[str, Server] = {
            "aiohttp floor": lambda: python_server("baseline", interaction),
            "sse-tape": lambda: python_server("sse-tape", interaction),
        }
        if aimock is not None:
            fixture = Path(tmp) / "aimock.json"
            fixture.write_text(json.dumps(paced_fixture(interaction, args.gap)))
            servers["aimock"] = lambda: aimock_server(aimock.cli, fixture, request)
        for r in range(args.rounds):
            names = list(servers)
            for name in names[r % len(names) :] + names[: r % len(names)]:
                with servers[name]() as url:
                    # Not counted: the first replay prepares the recording (sse-tape) and warms the server.
                    measure(url, interaction, min(max(loads), 100), args.per_process)
                    for n in loads:
                        seen, shares = [], []
                        for _ in range(args.repeats if n == 1 else 1):
                            got, share = measure(url, interaction, n, args.per_process)
                            seen += got
                            shares += share
                        for key, value in figures(seen).items():
                            results[n][name].setdefault(key, []).append(value)
                        cpu[n] += shares
            print(f"  round {r + 1} of {args.rounds} done", file=sys.stderr)

    print(
        f"\n{args.events} events, {args.gap * 1000:g} ms apart (the last with the one before), at the recorded pace; "
        f"read by sse_tape.probe.fidelity over direct connections, all sent at once. Median of {args.rounds} "
        "alternating rounds [min-max]; |gap error| = |observed gap - recorded gap|; ms"
    )
    columns = [
        ("gap p50", "gap p50", "{:.2f}"),
        ("gap p99", "gap p99", "{:.2f}"),
        ("gap max", "gap max", "{:.1f}"),
        ("first late p50", "first p50", "{:.2f}"),
        ("first late p99", "first p99", "{:.1f}"),
        ("last late p50", "last p50", "{:.1f}"),
        ("read whole", "completed", "{:.0f}"),
    ]
    ratios = [("sse-tape", "aiohttp floor"), ("sse-tape", "aimock")]
    for n in loads:
        processes = math.ceil(n / args.per_process)
        reads = f"{args.repeats} x 1 stream in a row" if n == 1 else f"{n} concurrent streams"
        split = f", over {processes} client processes" if processes > 1 else ""
        table(f"{reads}{split}", results[n], columns, ratios)
        share = cpu[n]
        print(f"client CPU share, per process: median {statistics.median(share):.0%} of a core, most {max(share):.0%}")


if __name__ == "__main__":
    main()
