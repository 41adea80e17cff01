"""Matching at scale: what a request costs, and what loading costs, as the cassette library grows.

For each size (`--sizes`, interactions loaded), generated MessagePack cassettes of distinct chat requests
(1,000 interactions a file, each cassette saying `match = ["method", "path", "body"]`) are loaded by a process
of its own, which reports:

- load: CPU seconds to load the files (`Cassette.load`) and to build the `Matcher`, and the memory the process
  grew by for each (resident set size);
- CPU per request: `Matcher.find` for requests that each equal one recording, taken in turn, each a fresh
  `Request` parsed anew as a server's is; every one of them is found once before timing (a recording's first
  play reads its phase and answer once), then `--finds` are timed, or as many as `--budget` seconds allow. Once
  for each count of `--asked` (default 10 and 1,000) that the library holds: that many recordings, spread over
  it, are asked for. The same 10 asked at every size is the like-for-like figure: what the library's size
  costs. 1,000 asked in turn touch 100 times the data per round, which costs the processor's caches some
  whatever the size.

With `--server`, the same through `sse-tape serve --pace instant` in a process of its own, one client sending
`--streams` requests one after another over one connection (the 10 asked at every size), each read whole:
the server's CPU per stream (user and system, from /proc), the CPU it took to start (imports, loading), and its
resident set size once loaded.

The sizes run in turn, their order turning each round, `--rounds` times; each figure is the median of the
rounds, and each ratio that of CPU per request to the smallest size's with the same count asked, which is what
to compare on a busy machine.

Run: python bench/matching_scale_bench.py [--sizes 10,1000,10000,100000] [--finds 2000] [--rounds 3]
To compare two commits, run it from each (PYTHONPATH=<worktree>); `--budget` keeps a slow one's rounds short.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sse_tape import Cassette, Chunk, Interaction, Matcher, Request, Response

PATH = "/v1/chat/completions"
PER_FILE = 1000
FRAMES = (
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n',
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hello"}}]}\n\n',
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
)


def _body(n: int) -> bytes:
    """The request body of interaction n: distinct from every other's in its question."""
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": f"Question number {n}: what is {n} times {n + 1}?"},
    ]
    return json.dumps({"model": "gpt-4o-mini", "messages": messages, "temperature": 0.2, "stream": True}).encode()


def _interaction(n: int) -> Interaction:
    headers = (("content-type", "text/event-stream"),)
    chunks = tuple(Chunk(0.01 * i, frame) for i, frame in enumerate(FRAMES))
    request = Request("POST", PATH, headers=(("content-type", "application/json"),), body=_body(n))
    return Interaction(request, Response(200, headers, chunks))


def _library(folder: Path, size: int) -> list[Path]:
    """The cassette files of a library of `size` interactions, written once into a folder of its own in `folder`."""
    files = []
    (folder / str(size)).mkdir(exist_ok=True)
    for start in range(0, size, PER_FILE):
        path = folder / str(size) / f"{start // PER_FILE:04d}.msgpack"
        if not path.exists():
            count = min(PER_FILE, size - start)
            interactions = [_interaction(n) for n in range(start, start + count)]
            Cassette(interactions, match_on=["method", "path", "body"]).save(path)
        files.append(path)
    return files


def _rss() -> int:
    """This process's resident set size, in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _measure(files: list[Path], size: int, asked: list[int], finds: int, budget: float) -> dict[str, float]:
    """One size's figures, in this process (see the module)."""
    base, started = _rss(), time.process_time()
    cassettes = [Cassette.load(path) for path in files]
    loaded, after_load = time.process_time(), _rss()
    matcher = Matcher(cassettes)
    built, after_build = time.process_time(), _rss()
    figures = {
        "load_s": loaded - started,
        "build_s": built - loaded,
        "load_mb": (after_load - base) / 1e6,
        "build_mb": (after_build - after_load) / 1e6,
    }
    headers = (("content-type", "application/json"),)
    for count in (c for c in asked if c <= size):
        bodies = [_body(n) for n in range(0, size, size // count)][:count]
        for body in bodies:  # each recording asked for played once
            matcher.find(Request("POST", PATH, headers=headers, body=body))
        done, start = 0, time.process_time()
        while done < finds and time.process_time() - start < budget:
            found = matcher.find(Request("POST", PATH, headers=headers, body=bodies[done % len(bodies)]))
            done += 1
        figures[f"find_us_{count}"] = (time.process_time() - start) / done * 1e6
        assert found.interaction.request.body == bodies[(done - 1) % len(bodies)]
    return figures


def _cpu(pid: int) -> float:
    """CPU seconds (user and system) a process has used."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve(folder: Path, size: int, streams: int) -> dict[str, float]:
    """One size's figures through a server in a process of its own (see the module)."""
    code = "import sys; from sse_tape.__main__ import main; sys.argv[0] = 'sse-tape'; main()"
    command = [sys.executable, "-c", code, "serve", str(folder / str(size)), "--pace", "instant", "--port", "0"]
    # Started in the cassettes' folder: `-c` puts the working directory first on the path, where a checkout
    # would shadow the `sse_tape` that PYTHONPATH names.
    server = subprocess.Popen(
        [*command, "-q"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=folder
    )
    try:
        assert server.stdout is not None
        host, port = server.stdout.readline().split(" at ")[1].split()[0].split("//")[1].rstrip("/").split(":")
        started = _cpu(server.pid)
        with open(f"/proc/{server.pid}/statm") as statm:
            rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        client = http.client.HTTPConnection(host, int(port))
        bodies = [_body(n) for n in range(0, size, max(1, size // 10))][:10]

        def ask(body: bytes) -> None:
            client.request("POST", PATH, body=body, headers={"content-type": "application/json"})
            answer = client.getresponse()
            assert answer.status == 200
            assert answer.read().endswith(b"data: [DONE]\n\n")

        for body in bodies:
            ask(body)
        before = _cpu(server.pid)
        for n in range(streams):
            ask(bodies[n % len(bodies)])
        spent = _cpu(server.pid) - before
        client.close()
    finally:
        server.terminate()
        server.wait(timeout=60)
    return {"start_s": started, "rss_mb": rss / 1e6, "stream_us": spent / streams * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10,1000,10000,100000", help="interactions loaded, comma-separated")
    parser.add_argument("--asked", default="10,1000", help="how many recordings are asked for, comma-separated")
    parser.add_argument("--finds", type=int, default=2000, help="requests timed a size and round (default 2000)")
    parser.add_argument("--budget", type=float, default=10.0, help="most CPU seconds of finds a size and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, of which the median is shown (default 3)")
    parser.add_argument("--server", action="store_true", help="measure through a server process too")
    parser.add_argument("--streams", type=int, default=2000, help="streams a size and round, with --server")
    parser.add_argument("--folder", help="where the cassettes are written and kept (default: a temporary one)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child's size, its files' folder
    args = parser.parse_args()
    asked = [int(c) for c in args.asked.split(",")]
    if args.one:
        size, folder = args.one.split(":", 1)
        print(json.dumps(_measure(_library(Path(folder), int(size)), int(size), asked, args.finds, args.budget)))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(args.folder or temporary).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        for size in sizes:
            _library(folder, size)
        figures: dict[int, list[dict[str, float]]] = {size: [] for size in sizes}
        for r in range(args.rounds):
            for size in sizes[r % len(sizes) :] + sizes[: r % len(sizes)]:
                command = [sys.executable, __file__, "--one", f"{size}:{folder}", "--asked", args.asked]
                command += ["--finds", str(args.finds), "--budget", str(args.budget)]
                out = subprocess.run(command, capture_output=True, check=True)
                figures[size].append(json.loads(out.stdout))
                if args.server:
                    figures[size][-1].update(_serve(folder, size, args.streams))
    medians = {
        size: {key: statistics.median(f[key] for f in rows) for key in rows[0]} for size, rows in figures.items()
    }
    print(
        f"{'interactions':>12} | load s | Matcher s | load MB | Matcher MB | "
        + " | ".join(f"CPU per request, {c:,} asked: us (ratio)" for c in asked)
    )
    rows = []
    for size, m in medians.items():
        cells = []
        for count in asked:
            key = f"find_us_{count}"
            first = next((medians[s][key] for s in sizes if key in medians[s]), None)
            cells.append(f"{m[key]:.1f} ({m[key] / first:.2f})" if key in m and first else "-")
        rows.append(
            f"{size:>12,} | {m['load_s']:6.2f} | {m['build_s']:9.2f} | {m['load_mb']:7.0f} | {m['build_mb']:10.0f} | "
            + " | ".join(cells)
        )
    print("\n".join(rows))
    if args.server:
        first = medians[sizes[0]]["stream_us"]
        print(f"{'interactions':>12} | server start CPU s | server RSS MB | server CPU per stream us (ratio)")
        for size, m in medians.items():
            ratio = f"{m['stream_us'] / first:.2f}" if first else "-"  # a few streams may cost less than a tick
            print(f"{size:>12,} | {m['start_s']:18.2f} | {m['rss_mb']:13.0f} | {m['stream_us']:.0f} ({ratio})")


if __name__ == "__main__":
    main()
