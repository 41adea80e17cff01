"""Matching speed: how long `Matcher.find` takes to choose a recording, in-process, with no server.

Three cases, each the median of `--rounds` runs of `--finds` requests:

- bundled: the bundled cassettes (each says `match = ["method", "path"]`), an agent's three requests
  (a greeting, a tool call, the tool's result) in the chat API, in turn;
- many: one cassette of `--recordings` chat recordings of one path (a greeting each, with other words),
  matched on method and path, so that every request is weighed against all of them;
- exact: the same cassette matched on method, path and body (the default), every request one of them.

Run: python bench/matching_bench.py [--finds 2000] [--recordings 500] [--rounds 5]
To compare two commits, run it from each side by side (PYTHONPATH=<worktree>) and compare the ratios:
figures vary with the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from sse_tape import Cassette, Chunk, Interaction, Matcher, Request, Response, bundled_cassettes

PATH = "/v1/chat/completions"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def _chat(words: str) -> Interaction:
    body = {"model": "m", "messages": [{"role": "user", "content": words}], "max_tokens": 16, "stream": True}
    frames = [
        b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    headers = (("content-type", "text/event-stream"),)
    return Interaction(
        Request("POST", PATH, body=json.dumps(body).encode()),
        Response(200, headers, tuple(Chunk(0.01 * i, f) for i, f in enumerate(frames))),
    )


def _agent_requests() -> list[Request]:
    asked = [{"role": "user", "content": "Weather in Tokyo?"}]
    call = {"id": "call_weather", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    after = [*asked, {"role": "assistant", "tool_calls": [call]}, {"role": "tool", "tool_call_id": "call_weather"}]
    bodies = [
        {"model": "local-model", "messages": [{"role": "user", "content": "Hello!"}], "stream": True},
        {"model": "local-model", "messages": asked, "tools": TOOLS, "stream": True},
        {"model": "local-model", "messages": after, "tools": TOOLS, "stream": True},
    ]
    return [Request("POST", PATH, body=json.dumps(b).encode()) for b in bodies]


def _time(matcher: Matcher, requests: list[Request], finds: int) -> float:
    """Microseconds a find, over `finds` requests taken in turn."""
    start = time.perf_counter()
    for n in range(finds):
        matcher.find(requests[n % len(requests)])
    return (time.perf_counter() - start) / finds * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--finds", type=int, default=2000, help="requests matched a round (default 2000)")
    parser.add_argument("--recordings", type=int, default=500, help="recordings of the large cassette (default 500)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, of which the median is shown (default 5)")
    args = parser.parse_args()
    bundled = [Cassette.load(p) for p in bundled_cassettes() if p.name == "openai-chat.toml"]
    many = Cassette([_chat(f"Hello number {n}!") for n in range(args.recordings)])
    asked = [many.interactions[n].request for n in range(0, args.recordings, max(1, args.recordings // 10))]
    cases = {
        "bundled, method+path, an agent's 3 requests": (lambda: Matcher(bundled), _agent_requests()),
        f"{args.recordings} recordings, method+path": (
            lambda: Matcher([many], match_on=["method", "path"]),
            asked,
        ),
        f"{args.recordings} recordings, method+path+body": (lambda: Matcher([many]), asked),
    }
    for name, (make, requests) in cases.items():
        times = [_time(make(), requests, args.finds) for _ in range(args.rounds)]
        print(f"{name}: {statistics.median(times):,.0f} us a find (median of {args.rounds})")


if __name__ == "__main__":
    main()
