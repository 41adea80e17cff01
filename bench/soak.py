"""Soak `sse-tape serve`: thousands of streams of every kind, then check that nothing stayed behind.

A server process serves the bundled cassettes at x20 pace with short client
timeouts. For `--seconds`, `--clients` coroutines send requests of every
kind a server meets: streams read to the end, streams hung up on after the
first chunk, streams with a fault asked for in the header (a mid-stream
error, a reset, a stall with heartbeats, one-byte writes, garbage, a 429, a
hang the client gives up on), and slow clients that trickle a request head
and never finish it. Before and after (once the load has stopped and the
timeouts have run out), it reads the server's open descriptors and RSS from
/proc and its connections, streams in flight and tasks from
/__sse_tape__/stats, and prints them side by side.

With `--check`, it exits 1 when anything grew without bound: descriptors,
connections, streams or tasks not back where they started, or RSS grown by
more than `--max-rss-growth` MiB.

Run: python bench/soak.py [--seconds 60] [--clients 50] [--check]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx

CHAT = {"model": "local-model", "messages": [{"role": "user", "content": "Hello!"}], "stream": True}
FAULTS = [
    "error:3",
    "disconnect:5,mode=reset",
    "stall:2,for=300ms,heartbeat=20ms",
    "fragment:1",
    "garbage:4,size=512",
    "status:429,retry_after=1",
    "hang",
]
TIMEOUTS = ("--request-timeout", "1s", "--keep-alive", "1s")


def snapshot(pid: int, url: str) -> dict[str, int]:
    """The server's open descriptors and RSS (KiB), and what it says it holds."""
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    rss = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS")
    )
    stats = httpx.get(url + "/__sse_tape__/stats", timeout=10).json()
    return {"descriptors": fds, "rss_kib": rss, **stats}


async def one(client: httpx.AsyncClient, url: str, rng: random.Random, counts: dict[str, int]) -> None:
    kind = rng.choices(["full", "hang-up", "fault", "slow"], weights=[5, 2, 2, 1])[0]
    counts[kind] = counts.get(kind, 0) + 1
    if kind == "slow":
        reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # and never the rest
        await reader.read()  # until the server gives up on it
        writer.close()
        await writer.wait_closed()
        return
    headers = {"X-SSE-Tape-Fault": rng.choice(FAULTS)} if kind == "fault" else {}
    try:
        async with client.stream("POST", url + "/v1/chat/completions", json=CHAT, headers=headers) as response:
            async for _ in response.aiter_raw():
                if kind == "hang-up":
                    break
    except (httpx.TransportError, httpx.TimeoutException):
        counts["broken"] = counts.get("broken", 0) + 1  # what the faults are for


async def load(url: str, seconds: float, clients: int, seed: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    deadline = time.monotonic() + seconds
    timeout = httpx.Timeout(3.0, pool=None)
    async with httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=clients)) as client:

        async def worker(n: int) -> None:
            rng = random.Random(f"{seed}:{n}")
            while time.monotonic() < deadline:
                await one(client, url, rng, counts)

        await asyncio.gather(*(worker(n) for n in range(clients)))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the load runs (default 60)")
    parser.add_argument("--clients", type=int, default=50, help="concurrent clients (default 50)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true", help="exit 1 when anything grew without bound")
    parser.add_argument("--max-rss-growth", type=float, default=64.0, help="MiB of RSS growth allowed (default 64)")
    args = parser.parse_args()
    command = [sys.executable, "-m", "sse_tape", "serve", "--port", "0", "--pace", "x20", "-q", *TIMEOUTS]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split(" at ")[1].split()[0]
        asyncio.run(load(url, 1.0, min(args.clients, 5), args.seed))  # warm up: first imports, first buffers
        time.sleep(2.5)
        before = snapshot(server.pid, url)
        counts = asyncio.run(load(url, args.seconds, args.clients, args.seed))
        time.sleep(2.5)  # past the request and keep-alive timeouts: what is left now, stays
        after = snapshot(server.pid, url)
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    print(json.dumps({"requests": counts}, indent=None))
    print(f"{'':22}{'before':>12}{'after':>12}")
    for key in before:
        print(f"{key:22}{before[key]:>12}{after[key]:>12}")
    problems = [
        f"{key} went from {before[key]} to {after[key]}"
        for key in ("descriptors", "connections", "active_streams", "tasks")
        if after[key] > before[key]
    ]
    if (after["rss_kib"] - before["rss_kib"]) / 1024 > args.max_rss_growth:
        problems.append(f"RSS grew by {(after['rss_kib'] - before['rss_kib']) / 1024:.0f} MiB")
    if "Traceback" in err:
        problems.append("the server printed a traceback:\n" + err)
    for problem in problems:
        print(f"grew: {problem}")
    if args.check and problems:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
