"""Framing speed: how fast each framing cuts a stream into its messages, in-process, side by side.

The same `--events` messages (a chat chunk's JSON each) are framed by each framing's encoder (SSE, Gemini's
JSON array, Ollama's NDJSON, AWS's binary event stream), then cut back into their messages two ways, each the
median of `--rounds` runs:

- whole: `Framing.blocks` over the whole body, as `check`, `show` and replay's preparation read a recording;
- fed: the body in `--piece`-byte writes through the fault engine's `Blocks`, which waits for each message
  whole (`Framing.whole`), as the faults read a stream that comes a piece at a time.

Run: python bench/framing_bench.py [--events 10000] [--piece 1024] [--rounds 5]
Figures vary with the machine and its load: compare the framings' ratios to SSE's, measured in one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from sse_tape.faults.stream import Blocks
from sse_tape.framing import EVENT_STREAM, JSON_ARRAY, NDJSON, SSE, Framing
from sse_tape.plan import Plan
from sse_tape.sse import ServerSentEvent


def _messages(n: int) -> list[ServerSentEvent]:
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return [
        ServerSentEvent(
            event="contentBlockDelta",  # a name the event stream keeps; the others write unnamed messages
            data=json.dumps({**chunk, "choices": [{"index": 0, "delta": {"content": f"word {i} "}}]}),
        )
        for i in range(n)
    ]


def _body(framing: Framing, messages: list[ServerSentEvent]) -> bytes:
    encoder = framing.encoder()
    return b"".join(encoder.frame(m) for m in messages) + encoder.close()


def _median(rounds: int, run: Callable[[], int]) -> tuple[float, int]:
    times, found = [], 0
    for _ in range(rounds):
        start = time.perf_counter()
        found = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--piece", type=int, default=1024, help="bytes a write, for the fed case")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    messages = _messages(args.events)
    print(f"{args.events:,} messages, median of {args.rounds} rounds; fed in {args.piece}-byte writes")
    print(f"{'framing':<18}{'bytes':>11}{'whole ms':>10}{'MB/s':>8}{'x SSE':>7}{'fed ms':>9}{'MB/s':>8}{'x SSE':>7}")
    base: tuple[float, float] | None = None
    for framing in (SSE, JSON_ARRAY, NDJSON, EVENT_STREAM):
        body = _body(framing, messages)

        def whole(framing: Framing = framing, body: bytes = body) -> int:
            return sum(b.event is not None for b in framing.blocks(body))

        def fed(framing: Framing = framing, body: bytes = body) -> int:
            blocks = Blocks(Plan(200, [], [], framing=framing))
            writes = [(0.0, body[i : i + args.piece]) for i in range(0, len(body), args.piece)]
            return sum(event is not None for _, _, event in blocks.feed(writes) + blocks.rest())

        at_once, found = _median(args.rounds, whole)
        pieces, fed_found = _median(args.rounds, fed)
        assert found == fed_found == args.events, (framing.name, found, fed_found)
        base = base or (at_once, pieces)
        mb = len(body) / 1e6
        print(
            f"{framing.name:<18}{len(body):>11,}{at_once * 1e3:>10.1f}{mb / at_once:>8.1f}{at_once / base[0]:>7.2f}"
            f"{pieces * 1e3:>9.1f}{mb / pieces:>8.1f}{pieces / base[1]:>7.2f}"
        )


if __name__ == "__main__":
    main()
