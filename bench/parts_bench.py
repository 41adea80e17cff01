"""What a part of an instant answer costs: `MockServer` from several source trees, side by side.

Each DIR is the root of an sse-tape source tree (a checkout, or `git archive` of a commit unpacked there),
usually a copy of this one with one part of answering a request changed, or taken away (`Matcher.find`
returning its one recording, say, or `Journal.add` returning at once): what the server then saves is what
that part costs. Each tree's `MockServer` runs in a process of its own that imports `sse_tape` from it
(peers_bench's `--server`), all of them up at once; one client process drives them in turn, round after
round (the order turns each round), with the 14-event chat stream of openai-chat.toml #1 sent instantly to
50 keep-alive clients. It prints each tree's server CPU time (user + system, from /proc) per stream: the
median and quartiles of its rounds, and the ratio to the first tree's median.

A part that costs 1% of a stream is below what one round can tell on a shared machine; many rounds of many
streams, alternating, tell a few percent apart. The first tree is the reference: put the unchanged one
first, or the same tree twice to see the spread.

Run: python bench/parts_bench.py DIR [DIR ...] [--rounds 16] [--streams 20000] [--clients 50]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from peers_bench import drive, http_request, python_server, warm
from replay_bench import bundled_chat

from sse_tape import Cassette
from sse_tape.stats import median, percentile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", type=Path, metavar="DIR", help="source trees, the reference first")
    parser.add_argument("--rounds", type=int, default=16, help="alternating rounds (default 16)")
    parser.add_argument("--streams", type=int, default=20000, help="streams per tree per round (default 20000)")
    parser.add_argument("--clients", type=int, default=50, help="keep-alive clients at once (default 50)")
    args = parser.parse_args()
    roots = [root.resolve() for root in args.roots]
    for root in roots:
        if not (root / "sse_tape" / "__init__.py").is_file():
            raise SystemExit(f"{root}: no sse_tape package there")

    bundled = bundled_chat()
    recording = bundled.interactions[0]
    events = len(recording.response.events())
    request = http_request(recording.request.body)
    names = [str(root) for root in roots]
    cpu: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as servers:
        cassette = Cassette([recording], match_on=bundled.match_on).save(Path(tmp) / "chat.toml")
        started: dict[str, tuple[int, int]] = {}
        for name, root in zip(names, roots, strict=True):
            if name in started:
                continue  # the same tree twice: one server, measured twice as often
            port, pid = started[name] = servers.enter_context(python_server("sse-tape", cassette, root))
            warm(port, pid, request, events, 5000)
        for n in range(args.rounds):
            for name in names[n % len(names) :] + names[: n % len(names)]:
                port, pid = started[name]
                load = drive(port, pid, request, args.clients, args.streams, events, keep_alive=True)
                cpu[name].append(load.server_cpu / load.streams * 1e6)
            print(f"  round {n + 1} of {args.rounds} done", file=sys.stderr)
    reference = median(cpu[names[0]])
    print(f"server CPU per stream, {args.streams} streams from {args.clients} keep-alive clients, {args.rounds} rounds")
    for name in dict.fromkeys(names):
        values = cpu[name]
        middle, low, high = median(values), percentile(values, 0.25), percentile(values, 0.75)
        print(f"{name}: {middle:.1f} µs [quartiles {low:.1f}-{high:.1f}], {middle / reference:.3f} of the first")


if __name__ == "__main__":
    main()
