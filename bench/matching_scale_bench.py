"""Matching at scale: what a request costs, and what loading costs, as the cassette library grows.

For each library (`--libraries`) and size (`--sizes`, interactions loaded), generated MessagePack cassettes
(1,000 interactions a file) are loaded by a process of its own. The libraries:

- `body`: distinct chat requests, each cassette saying `match = ["method", "path", "body"]` (the default rule);
- `loose`: many conversations on one path, each recorded in three phases (a question; the same with a tool
  offered, answered by a call; the call's result, with the tool, answered in words), each cassette saying
  `match = ["method", "path"]`, as a library of LLM recordings often does: every recording agrees with every
  request, and the phase decides;
- `a2a`: distinct A2A messages (`SendStreamingMessage`, JSON-RPC, one endpoint), each answered by a task's
  stream, each cassette saying `match = ["method", "path", "a2a"]` (A2A's own rule). A request is sent with ids
  of its own (the JSON-RPC `id`, the message's `messageId`), as a new client's are, never the recorded ones.

The process reports:

- load: CPU seconds to load the files (`Cassette.load`) and to build the `Matcher`, and the memory the process
  grew by for each (resident set size);
- CPU per request: `Matcher.find` for requests that each equal one recording, taken in turn, each a fresh
  `Request` parsed anew as a server's is; every one of them is found once before timing (a recording's first
  play reads its phase and answer once), then `--finds` are timed, or as many as `--budget` seconds allow. Once
  for each count of `--asked` (default 10 and 1,000) that the library holds: that many recordings, spread over
  it, are asked for. The same 10 asked at every size is the like-for-like figure: what the library's size
  costs. 1,000 asked in turn touch 100 times the data per round, which costs the processor's caches some
  whatever the size;
- the first find: the CPU time of the first request of all, and the memory the process grew by in it (in the
  `loose` library, until the phases of a path's many recordings were read at load, the first request to the
  path read every one once, and indexed them).

With `--server`, the same through `sse-tape serve --pace instant` in a process of its own, one client sending
`--streams` requests one after another over one connection (the 10 asked at every size), each read whole:
the server's CPU per stream (user and system, from /proc), the CPU it took to start (imports, loading), its
resident set size once loaded, and how long (wall clock) its first request took to answer, start to end: what
any work left for the first request costs, during which the server's event loop answers no other client. Then
`--misses` requests that match no recording (each a body recorded nowhere, all different), each answered 404
with the closest recordings named, as a server explains a miss: the server's CPU per miss.

The sizes run in turn, their order turning each round, `--rounds` times; each figure is the median of the
rounds, and each ratio that of CPU per request to the smallest size's with the same count asked, which is what
to compare on a busy machine.

With `--baseline DIR` (another checkout, or a `git archive` of an earlier commit unpacked there), every figure
is measured of that code too, in the same rounds, each size's processes one after the other: its processes
import `sse_tape` from DIR, this script's harness the same. `--budget` keeps a slow one's rounds short.

Run: python bench/matching_scale_bench.py [--libraries body,loose,a2a] [--sizes 10,1000,10000,100000] [--finds 2000]
[--rounds 3] [--baseline DIR]
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

import sse_tape
from sse_tape import Cassette, Chunk, Interaction, Matcher, Request, Response

PATH = "/v1/chat/completions"
#: Where each library's requests are sent.
PATHS = {"body": PATH, "loose": PATH, "a2a": "/a2a"}
#: Where this script's `sse_tape` is imported from: what its processes import, beside a baseline.
HERE = Path(sse_tape.__file__).resolve().parent.parent
#: What each library's cassettes are matched by.
RULES = {"body": ["method", "path", "body"], "loose": ["method", "path"], "a2a": ["method", "path", "a2a"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
CALL = (
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant",'
    b'"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather",'
    b'"arguments":"{}"}}]}}]}\n\n',
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}'
    b"\n\n",
    b"data: [DONE]\n\n",
)
#: A task's stream, as an a2a-sdk agent sends it over JSON-RPC (1.0): replay gives each response the request's id.
TASK = tuple(
    b'data: {"jsonrpc":"2.0","id":"r","result":' + result + b"}\n\n"
    for result in (
        b'{"task":{"id":"t1","contextId":"c1","status":{"state":"TASK_STATE_SUBMITTED"}}}',
        b'{"statusUpdate":{"taskId":"t1","contextId":"c1","status":{"state":"TASK_STATE_WORKING"}}}',
        b'{"artifactUpdate":{"taskId":"t1","artifact":{"artifactId":"a1","parts":[{"text":"Hello"}]}}}',
        b'{"statusUpdate":{"taskId":"t1","contextId":"c1","status":{"state":"TASK_STATE_COMPLETED"}}}',
    )
)
#: What the last event of each library's answer holds.
LAST = {"body": b"data: [DONE]", "loose": b"data: [DONE]", "a2a": b"TASK_STATE_COMPLETED"}
PER_FILE = 1000
FRAMES = (
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n',
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hello"}}]}\n\n',
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
)


def _body(n: int, library: str = "body", client: str = "recorded") -> bytes:
    """The request body of interaction n of a library: in `body`, distinct from every other's in its question; in
    `loose`, conversation n // 3 in phase n % 3 (asked; a tool offered; the tool's result given); in `a2a`, a
    message distinct from every other's, with the ids `client` mints."""
    if library == "a2a":
        message = {"messageId": f"{client}-{n}", "role": "ROLE_USER", "parts": [{"text": f"Question number {n}"}]}
        rpc = {
            "jsonrpc": "2.0",
            "id": f"{client}-{n}",
            "method": "SendStreamingMessage",
            "params": {"message": message},
        }
        return json.dumps(rpc).encode()
    number, phase = (n, 0) if library == "body" else divmod(n, 3)
    messages: list[dict[str, object]] = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": f"Question number {number}: what is {number} times {number + 1}?"},
    ]
    body: dict[str, object] = {"model": "gpt-4o-mini", "messages": messages, "temperature": 0.2, "stream": True}
    if phase:
        body["tools"] = [WEATHER]
    if phase == 2:
        call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": "call_1", "content": "18C"})
    return json.dumps(body).encode()


def _interaction(n: int, library: str) -> Interaction:
    headers = (("content-type", "text/event-stream"),)
    frames = TASK if library == "a2a" else CALL if library == "loose" and n % 3 == 1 else FRAMES
    chunks = tuple(Chunk(0.01 * i, frame) for i, frame in enumerate(frames))
    request = Request("POST", PATHS[library], headers=(("content-type", "application/json"),), body=_body(n, library))
    return Interaction(request, Response(200, headers, chunks))


def _library(folder: Path, library: str, size: int) -> list[Path]:
    """The cassette files of a library of `size` interactions, written once into a folder of its own in `folder`."""
    files = []
    where = folder / library / str(size)
    where.mkdir(parents=True, exist_ok=True)
    for start in range(0, size, PER_FILE):
        path = where / f"{start // PER_FILE:04d}.msgpack"
        if not path.exists():
            count = min(PER_FILE, size - start)
            interactions = [_interaction(n, library) for n in range(start, start + count)]
            Cassette(interactions, match_on=RULES[library]).save(path)
        files.append(path)
    return files


def _rss() -> int:
    """This process's resident set size, in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _measure(
    files: list[Path], library: str, size: int, asked: list[int], finds: int, budget: float
) -> dict[str, float]:
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
    path = PATHS[library]
    first, before_first = time.process_time(), _rss()
    matcher.find(Request("POST", path, headers=headers, body=_body(size // 2, library, "client")))
    figures["first_ms"] = (time.process_time() - first) * 1e3
    figures["first_mb"] = (_rss() - before_first) / 1e6
    for count in (c for c in asked if c <= size):
        numbers = list(range(0, size, size // count))[:count]
        bodies = [_body(n, library, "client") for n in numbers]
        for body in bodies:  # each recording asked for played once
            matcher.find(Request("POST", path, headers=headers, body=body))
        done, start = 0, time.process_time()
        while done < finds and time.process_time() - start < budget:
            found = matcher.find(Request("POST", path, headers=headers, body=bodies[done % len(bodies)]))
            done += 1
        figures[f"find_us_{count}"] = (time.process_time() - start) / done * 1e6
        assert found.interaction.request.body == _body(numbers[(done - 1) % len(bodies)], library)
    return figures


def _cpu(pid: int) -> float:
    """CPU seconds (user and system) a process has used."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _environment(root: Path) -> dict[str, str]:
    """This process's environment, with `sse_tape` imported from `root`."""
    return {**os.environ, "PYTHONPATH": str(root)}


def _serve(folder: Path, library: str, size: int, streams: int, misses: int, root: Path) -> dict[str, float]:
    """One size's figures through a server in a process of its own, importing `sse_tape` from `root` (see the
    module)."""
    code = "import sys; from sse_tape.__main__ import main; sys.argv[0] = 'sse-tape'; main()"
    where = folder / library / str(size)
    command = [sys.executable, "-c", code, "serve", str(where), "--pace", "instant", "--port", "0"]
    # Started in the cassettes' folder: `-c` puts the working directory first on the path, where a checkout
    # would shadow the `sse_tape` that PYTHONPATH names.
    server = subprocess.Popen(
        [*command, "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=folder,
        env=_environment(root),
    )
    try:
        assert server.stdout is not None
        host, port = server.stdout.readline().split(" at ")[1].split()[0].split("//")[1].rstrip("/").split(":")
        started = _cpu(server.pid)
        with open(f"/proc/{server.pid}/statm") as statm:
            rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        client = http.client.HTTPConnection(host, int(port))
        bodies = [_body(n, library, "client") for n in range(0, size, max(1, size // 10))][:10]

        def ask(body: bytes, status: int = 200) -> bytes:
            client.request("POST", PATHS[library], body=body, headers={"content-type": "application/json"})
            answer = client.getresponse()
            assert answer.status == status
            return answer.read()

        began = time.perf_counter()
        assert LAST[library] in ask(bodies[0]).rstrip().rsplit(b"\n\n", 1)[-1]
        first = time.perf_counter() - began
        for body in bodies[1:]:
            ask(body)
        before = _cpu(server.pid)
        for n in range(streams):
            ask(bodies[n % len(bodies)])
        spent = _cpu(server.pid) - before
        assert b"closest" in ask(_body(size + misses, library, "client"), 404)  # the first miss of all, not timed
        before = _cpu(server.pid)
        for n in range(misses):
            ask(_body(size + n, library, "client"), 404)
        missed = _cpu(server.pid) - before
        client.close()
    finally:
        server.terminate()
        server.wait(timeout=60)
    return {
        "start_s": started,
        "rss_mb": rss / 1e6,
        "stream_us": spent / streams * 1e6,
        "first_stream_ms": first * 1e3,
        "miss_us": missed / misses * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--libraries", default="body,loose", help="the libraries measured: body, loose, a2a")
    parser.add_argument("--sizes", default="10,1000,10000,100000", help="interactions loaded, comma-separated")
    parser.add_argument("--asked", default="10,1000", help="how many recordings are asked for, comma-separated")
    parser.add_argument("--finds", type=int, default=2000, help="requests timed a size and round (default 2000)")
    parser.add_argument("--budget", type=float, default=10.0, help="most CPU seconds of finds a size and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, of which the median is shown (default 3)")
    parser.add_argument("--server", action="store_true", help="measure through a server process too")
    parser.add_argument("--streams", type=int, default=2000, help="streams a size and round, with --server")
    parser.add_argument("--misses", type=int, default=200, help="misses a size and round, with --server")
    parser.add_argument("--folder", help="where the cassettes are written and kept (default: a temporary one)")
    parser.add_argument("--baseline", type=Path, help="another checkout or export, measured alongside")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child's library, size and its files' folder
    args = parser.parse_args()
    asked = [int(c) for c in args.asked.split(",")]
    if args.one:
        library, size, folder = args.one.split(":", 2)
        files = _library(Path(folder), library, int(size))
        print(json.dumps(_measure(files, library, int(size), asked, args.finds, args.budget)))
        return
    libraries = [name for name in args.libraries.split(",") if name]
    if not libraries or any(name not in RULES for name in libraries):
        raise SystemExit(f"--libraries {args.libraries!r}: choose from {', '.join(RULES)}")
    codes = {"sse-tape": HERE}
    if args.baseline is not None:
        if not (args.baseline / "sse_tape" / "__init__.py").is_file():
            raise SystemExit(f"--baseline {args.baseline}: no sse_tape package there")
        codes["baseline"] = args.baseline.resolve()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(args.folder or temporary).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        for library in libraries:
            for size in sizes:
                _library(folder, library, size)
        figures: dict[tuple[str, str, int], list[dict[str, float]]] = {}
        for r in range(args.rounds):
            for size in sizes[r % len(sizes) :] + sizes[: r % len(sizes)]:
                for library in libraries:
                    for code, root in codes.items():
                        command = [sys.executable, __file__, "--one", f"{library}:{size}:{folder}"]
                        command += ["--asked", args.asked, "--finds", str(args.finds), "--budget", str(args.budget)]
                        out = subprocess.run(command, capture_output=True, check=True, env=_environment(root))
                        row = json.loads(out.stdout)
                        if args.server:
                            row.update(_serve(folder, library, size, args.streams, args.misses, root))
                        figures.setdefault((code, library, size), []).append(row)
    medians = {key: {k: statistics.median(f[k] for f in rows) for k in rows[0]} for key, rows in figures.items()}
    for library in libraries:
        for code, root in codes.items():
            print(f"{library} library ({','.join(RULES[library])}), {code} from {root}:")
            _table({size: medians[code, library, size] for size in sizes}, asked, args.server)
        if "baseline" in codes:
            print(f"{library} library: sse-tape's figures over the baseline's")
            served = ["stream_us", "first_stream_ms", "miss_us"] if args.server else []
            cells = ["build_s", "first_ms", *(f"find_us_{c}" for c in asked), *served]
            print(f"{'interactions':>12} | " + " | ".join(cells))
            for size in sizes:
                now, then = medians["sse-tape", library, size], medians["baseline", library, size]
                shown = [f"{now[c] / then[c]:.3f}" if c in now and then.get(c) else "-" for c in cells]
                print(f"{size:>12,} | " + " | ".join(shown))


def _table(medians: dict[int, dict[str, float]], asked: list[int], server: bool) -> None:
    """One code's figures for one library, a line a size (see the module)."""
    sizes = list(medians)
    print(
        f"{'interactions':>12} | load s | Matcher s | load MB | Matcher MB | first find ms, MB | "
        + " | ".join(f"CPU per request, {c:,} asked: us (ratio)" for c in asked)
    )
    for size, m in medians.items():
        cells = []
        for count in asked:
            key = f"find_us_{count}"
            first = next((medians[s][key] for s in sizes if key in medians[s]), None)
            cells.append(f"{m[key]:.1f} ({m[key] / first:.2f})" if key in m and first else "-")
        print(
            f"{size:>12,} | {m['load_s']:6.2f} | {m['build_s']:9.2f} | {m['load_mb']:7.0f} | {m['build_mb']:10.0f} | "
            f"{m['first_ms']:10.1f}, {m['first_mb']:3.0f} | " + " | ".join(cells)
        )
    if server:
        first = medians[sizes[0]]["stream_us"]
        print(
            f"{'interactions':>12} | server start CPU s | server RSS MB | server CPU per stream us (ratio) | "
            "first request ms | server CPU per miss us"
        )
        for size, m in medians.items():
            ratio = f"{m['stream_us'] / first:.2f}" if first else "-"  # a few streams may cost less than a tick
            print(
                f"{size:>12,} | {m['start_s']:18.2f} | {m['rss_mb']:13.0f} | {m['stream_us']:.0f} ({ratio}) | "
                f"{m['first_stream_ms']:.1f} | {m['miss_us']:.0f}"
            )


if __name__ == "__main__":
    main()
