"""How long one client's large or hostile request body holds up another client of `sse-tape serve`.

A server process serves one chat recording at instant pace, with `--max-body 64MiB`. A second client sends
that recording's request again and again, one after another, and its latencies are measured: first alone,
then while a first client sends each body below and until it has its answer. Printed per body: the second
client's p50 / p99 / max alone and meanwhile, how many of its requests overlapped, and how long the body's
own request took.

Bodies: 63 MB of JSON as one string; 63 MB as 1,000 strings; 60 MB of deeply escaped text (a `\\n` every
few characters); a gzip bomb (512 MiB of zeros, refused at the limit); 200,000 keys (refused).

With `--before`, the server is started without `--max-body` (which sse-tape before issue 28 does not have): run it
with PYTHONPATH set to an older checkout to see what the change did.

Run: python bench/bodies_bench.py [--rounds 3] [--before]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import httpx

from sse_tape import Cassette, Chunk, Interaction, Request, Response

CHAT = "/v1/chat/completions"
ASKED = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say hello"}]}
ANSWER = {"id": "chatcmpl-1", "object": "chat.completion", "choices": []}


def _cassette(folder: Path) -> Path:
    request = Request("POST", CHAT, headers=(("content-type", "application/json"),), body=json.dumps(ASKED).encode())
    answer = Response(
        headers=(("content-type", "application/json"),), chunks=(Chunk(0.0, json.dumps(ANSWER).encode()),)
    )
    return Cassette([Interaction(request, answer)]).save(folder / "chat.toml")


def _bomb(expanded: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1024**2)
    return b"".join(packer.compress(zeros) for _ in range(expanded // len(zeros))) + packer.flush()


def _bodies() -> dict[str, tuple[bytes, dict[str, str]]]:
    plain = {"content-type": "application/json"}
    text = ("word " * 5 + "\n") * 2_000_000
    return {
        "63 MB, one string": (json.dumps({**ASKED, "padding": "a" * 63_000_000}).encode(), plain),
        "63 MB, 1,000 strings": (json.dumps({**ASKED, "documents": ["a" * 63_000] * 1000}).encode(), plain),
        "61 MB of escaped text": (json.dumps({**ASKED, "document": text}).encode(), plain),
        "gzip bomb, 512 MiB": (_bomb(512 * 1024**2), {**plain, "content-encoding": "gzip"}),
        "200,000 keys": (json.dumps({**ASKED, **{f"k{n}": n for n in range(200_000)}}).encode(), plain),
    }


def _latencies(url: str, stop: threading.Event, count: int | None = None) -> list[float]:
    took = []
    with httpx.Client(timeout=120) as client:
        while not stop.is_set() and (count is None or len(took) < count):
            started = time.perf_counter()
            client.post(url + CHAT, json=ASKED).raise_for_status()
            took.append(time.perf_counter() - started)
    return took


def _measure(url: str, stop: threading.Event, into: list[float]) -> None:
    into.extend(_latencies(url, stop))


def _ms(took: list[float]) -> str:
    cuts = statistics.quantiles(took, n=100, method="inclusive")
    return f"{cuts[49] * 1000:.1f} / {cuts[98] * 1000:.1f} / {max(took) * 1000:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", action="store_true", help="start the server without --max-body")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        cassette = _cassette(Path(folder))
        command = [sys.executable, "-m", "sse_tape", "serve", str(cassette), "--pace", "instant", "-q"]
        server = subprocess.Popen(
            [*command, *([] if args.before else ["--max-body", "64MiB"]), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert server.stdout is not None
            url = server.stdout.readline().split(" at ")[1].split()[0]
            print(f"{'body':24} {'status':>6} {'own s':>6}  second client p50 / p99 / max ms: alone | meanwhile (n)")
            for name, (body, headers) in _bodies().items():
                for _ in range(args.rounds):
                    alone = _latencies(url, threading.Event(), count=300)
                    stop = threading.Event()
                    during: list[float] = []
                    second = threading.Thread(target=_measure, args=(url, stop, during))
                    second.start()
                    time.sleep(0.05)
                    started = time.perf_counter()
                    status = httpx.post(url + CHAT, content=body, headers=headers, timeout=300).status_code
                    own = time.perf_counter() - started
                    stop.set()
                    second.join()
                    print(f"{name:24} {status:>6} {own:6.2f}  {_ms(alone)} | {_ms(during)} ({len(during)})")
        finally:
            server.terminate()
            server.communicate(timeout=30)


if __name__ == "__main__":
    main()
