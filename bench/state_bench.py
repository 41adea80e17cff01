"""The cost of a shared replay state (`serve --state redis://...`, `serve --workers N`) against the default, in
memory.

Two measurements, on a redis-server of the bench's own (Debian's, on a free loopback port, nothing saved):

- CPU per stream: `sse-tape serve` (the bundled cassettes, `--pace instant`) in a process of its own, with
  `MemoryStore`, with `RedisStore`, in 2 workers whose parent holds the state (`WorkersStore`) and in 2
  workers on Redis, in alternating rounds, one keep-alive client asking for the bundled chat greeting (13
  events) `--streams` times (so one worker answers them all); the server's CPU per stream (its workers' and
  its parent's together), and redis-server's, from /proc;
- round trips per request, for a replayed stream, the same with a fault set on the server, and a miss: to Redis,
  from a `MockServer` in this process on a `RedisStore`, each request sent to Redis counted (redis-py's
  `Connection.send_packed_command`: one per command, or per pipeline); and to the parent holding the state, from
  a `MockServer` on a `WorkersStore` in a forked worker (its `asked`).

Run: python bench/state_bench.py [--streams 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import redis.connection

from sse_tape import Cassette, MockServer, ServeOptions, bundled_cassettes
from sse_tape.server import load_cassettes, run_in_thread
from sse_tape.state_redis import RedisStore
from sse_tape.state_workers import WorkersStore

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hello!"}], "stream": True}
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process `pid` and its children running now have used."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    with open(f"/proc/{pid}/task/{pid}/children") as children:
        running = [int(child) for child in children.read().split()]
    return (int(fields[11]) + int(fields[12])) / TICK + sum(cpu_seconds(child) for child in running)


@contextmanager
def redis_server() -> Iterator[tuple[str, int]]:
    """A redis-server on a free loopback port while the block runs: its URL and pid."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    with tempfile.TemporaryDirectory() as folder, socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        args = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", folder]
        process = subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{port}/0"
        for _ in range(500):
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.ConnectionError:
                time.sleep(0.01)
        try:
            yield url, process.pid
        finally:
            process.terminate()
            process.wait()


def one_round(state: list[str], streams: int, redis_pid: int) -> tuple[float, float, float]:
    """Server CPU per stream, redis-server's, and streams/s, for `serve` with these `--state` words."""
    code = "from sse_tape.cli import main; main()"  # its arguments are this process's: python -c CODE ARGS
    args = ["serve", "--port", "0", "--pace", "instant", "-q", *state]
    server = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    url = server.stdout.readline().split(" at ")[1].split()[0]
    try:
        with httpx.Client(base_url=url, timeout=60) as client:
            for _ in range(200):  # warm
                client.post("/v1/chat/completions", json=CHAT).raise_for_status()
            client.post("/__sse_tape__/reset", json={}).raise_for_status()
            cpu, store_cpu, wall = cpu_seconds(server.pid), cpu_seconds(redis_pid), time.perf_counter()
            for _ in range(streams):
                client.post("/v1/chat/completions", json=CHAT).raise_for_status()
            wall = time.perf_counter() - wall
            cpu, store_cpu = cpu_seconds(server.pid) - cpu, cpu_seconds(redis_pid) - store_cpu
    finally:
        server.terminate()
        server.wait()
    return cpu / streams * 1e6, store_cpu / streams * 1e6, streams / wall


#: What `round_trips` measures: a name, the server's faults, and the path asked for.
CASES = [
    ("a replayed stream", [], "/v1/chat/completions"),
    ("the same, one fault set", ["ttfb:1ms"], "/v1/chat/completions"),
    ("a miss", [], "/v1/nowhere"),
]


def chat_cassettes() -> list[Cassette]:
    """The bundled chat cassette, loaded."""
    return load_cassettes([p for p in bundled_cassettes() if p.name == "openai-chat.toml"])


def asked_per_request(server: MockServer, path: str, counted: Callable[[], int]) -> float:
    """The round trips (`counted()`, a running count) per request for `path`, over 100 requests, after a first one
    (which takes the settings the server set at its start)."""
    with run_in_thread(server), httpx.Client(base_url=server.url, timeout=60) as client:
        client.post(path, json=CHAT)
        before = counted()
        for _ in range(100):
            client.post(path, json=CHAT)
        return (counted() - before) / 100


def round_trips(url: str) -> dict[str, float]:
    """Redis round trips per request, by what the request met."""
    sent = [0]
    original = redis.connection.Connection.send_packed_command

    def counted(self: redis.connection.Connection, *args: object, **kwargs: object) -> None:
        sent[0] += 1
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    redis.connection.Connection.send_packed_command = counted  # type: ignore[method-assign]
    try:
        found: dict[str, float] = {}
        for name, faults, path in CASES:
            options = ServeOptions.build(pace="instant", faults=faults)
            server = MockServer(chat_cassettes(), options=options, state=RedisStore(url))
            found[name] = asked_per_request(server, path, lambda: sent[0])
        return found
    finally:
        redis.connection.Connection.send_packed_command = original  # type: ignore[method-assign]


def parent_round_trips() -> dict[str, float]:
    """Round trips to the parent holding the state, per request, by what the request met: each case's server in
    a worker forked from this process, as `serve --workers` forks it."""
    found: dict[str, float] = {}
    for name, faults, path in CASES:
        store = WorkersStore(1)
        server = MockServer(chat_cassettes(), options=ServeOptions.build(pace="instant", faults=faults), state=store)
        answer_read, answer_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(answer_read)
            store.in_worker(0)
            trips = asked_per_request(server, path, lambda store=store: store.asked)
            os.write(answer_write, str(trips).encode())
            os._exit(0)
        os.close(answer_write)
        store.hold(print)
        with os.fdopen(answer_read) as answer:
            found[name] = float(answer.read())
        os.waitpid(pid, 0)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with redis_server() as (url, pid):
        cases = {
            "memory": [],
            "redis": ["--state", url],
            "2 workers, the parent's": ["--workers", "2"],
            "2 workers, redis": ["--workers", "2", "--state", url],
        }
        results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, words in cases.items():
                results[name].append(one_round(words, args.streams, pid))
        load = os.getloadavg()[0]
        print(f"{args.streams} instant streams x {args.rounds} rounds, alternating; load {load:.1f}")
        for name, runs in results.items():
            cpu = statistics.median(r[0] for r in runs)
            store = statistics.median(r[1] for r in runs)
            rate = statistics.median(r[2] for r in runs)
            print(
                f"  {name:24}: serve {cpu:6.0f} us/stream, redis-server {store:5.0f} us/stream, {rate:6.0f} streams/s"
            )
        memory = statistics.median(r[0] for r in results["memory"])
        for name in list(cases)[1:]:
            shared = statistics.median(r[0] + r[1] for r in results[name])
            print(f"  {name} / memory, serve's CPU + redis-server's: {shared / memory:.2f}")
        for name, trips in round_trips(url).items():
            print(f"  Redis round trips per request, {name}: {trips:g}")
        for name, trips in parent_round_trips().items():
            print(f"  round trips to the workers' parent per request, {name}: {trips:g}")
        used = redis.Redis.from_url(url).info("memory")["used_memory"]
        print(f"  redis-server's memory after the runs: {used / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
