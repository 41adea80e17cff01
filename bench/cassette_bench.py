"""Cassette load and save: sse-tape's TOML and MessagePack against cassetter's YAML, on the same content.

The content is N chat-completion streams of M events each (realistic OpenAI chunks, a little non-ASCII, a
`[DONE]` at the end), with their requests. Each round runs every contender in a fresh process of its own,
one after the other, and each process builds its cassette from the content, saves it once and loads it
twice:

- sse-tape, TOML: save; load with an empty parsed-TOML cache (cold), then load again (warm);
- sse-tape, MessagePack: save and load;
- the same, for sse-tape at `--baseline PATH` (an export of an earlier commit, say) when given: its code
  measured in the same run;
- cassetter (its Rust core's YAML, read and written by its `Cassette.load` and `save`) when
  `--cassetter-python` names a Python that has it (installed apart: it is no dependency of ours); each
  interaction holds the same request and the stream's bytes as one text body, which is how cassetter keeps
  a stream;
- PyYAML's C codec (`CSafeLoader`, `CSafeDumper`, what vcrpy uses) on cassetter's document shape, when
  this Python has it.

Run: python bench/cassette_bench.py [--interactions 1000] [--events 30] [--rounds 5]
        [--cassetter-python PATH] [--baseline PATH]
Prints the median of the rounds and [min-max] across them, in milliseconds, twice: on the wall clock, and
in CPU time of the measuring process, which a busy shared machine disturbs less. Figures vary with the
machine and its load; compare within a run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORDS = ["Hi", " there", "!", " How", " can", " I", " help", " you", " today", "?", " Café", " 東京", "\n\n"]


def content(interactions: int, events: int) -> list[dict[str, Any]]:
    """The streams: each a request body and its chunks as [seconds, text]."""
    out = []
    for i in range(interactions):
        cid = f"chatcmpl-{i:016x}"
        body = {"model": "local-model", "messages": [{"role": "user", "content": f"Question {i}?"}], "stream": True}
        chunks = []
        for j in range(events):
            delta = {"role": "assistant", "content": ""} if j == 0 else {"content": WORDS[(i + j) % len(WORDS)]}
            finish = "stop" if j == events - 1 else None
            if finish:
                delta = {}
            event = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": 1763790000 + i,
                "model": "local-model",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            text = f"data: {json.dumps(event, separators=(',', ':'), ensure_ascii=False)}\n\n"
            chunks.append([round(0.2 + j * 0.0231 + (i % 7) * 0.0003, 4), text])
        chunks.append([round(0.2 + events * 0.0231, 4), "data: [DONE]\n\n"])
        out.append({"body": json.dumps(body), "chunks": chunks})
    return out


# --- the workers: one measurement each, in a fresh process, printed as JSON ------------------------


def timed(fn: Any, *args: Any) -> tuple[float, float]:
    """Seconds `fn(*args)` took: on the wall clock, and of this process's CPU time."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - wall, time.process_time() - cpu


def work_sse_tape(streams: list[dict[str, Any]], folder: Path) -> dict[str, Any]:
    from sse_tape import Cassette, Chunk, Interaction, Request, Response

    interactions = [
        Interaction(
            Request(
                "POST", "/v1/chat/completions", headers=(("content-type", "application/json"),), body=s["body"].encode()
            ),
            Response(
                200,
                (("content-type", "text/event-stream"), ("cache-control", "no-cache")),
                tuple(Chunk(t, text.encode()) for t, text in s["chunks"]),
            ),
            recorded_at="2026-11-24T05:00:00+00:00",
        )
        for s in streams
    ]
    cassette = Cassette(interactions)
    result = {}
    for suffix in (".toml", ".msgpack"):
        path = folder / f"cassette{suffix}"
        result[f"{suffix} save"] = timed(cassette.save, path)
        result[f"{suffix} load"] = timed(Cassette.load, path)
        if suffix == ".toml":
            result[f"{suffix} load again"] = timed(Cassette.load, path)
        result[f"{suffix} bytes"] = path.stat().st_size
    return result


def yaml_doc(streams: list[dict[str, Any]]) -> dict[str, Any]:
    """cassetter's document shape: the request, the response with the stream as one text body."""
    return {
        "version": 1,
        "interactions": [
            {
                "request": {
                    "method": "POST",
                    "uri": "http://127.0.0.1:8080/v1/chat/completions",
                    "headers": {"content-type": ["application/json"]},
                    "body": {"type": "json", "content": json.loads(s["body"])},
                },
                "response": {
                    "status": 200,
                    "headers": {"cache-control": ["no-cache"], "content-type": ["text/event-stream"]},
                    "body": {"type": "text", "content": "".join(text for _, text in s["chunks"])},
                },
                "recorded_at": "2026-11-24T05:00:00+00:00",
            }
            for s in streams
        ],
    }


def work_cassetter(streams: list[dict[str, Any]], folder: Path) -> dict[str, Any]:
    from cassetter._core import Body, HttpInteraction, HttpRequest, HttpResponse
    from cassetter._core import Cassette as Core

    cassette = Core()
    for item in yaml_doc(streams)["interactions"]:
        req, resp = item["request"], item["response"]
        cassette.add_interaction(
            HttpInteraction(
                HttpRequest(req["method"], req["uri"], req["headers"], Body("json", req["body"]["content"])),
                HttpResponse(resp["status"], resp["headers"], Body("text", resp["body"]["content"])),
                item["recorded_at"],
            )
        )
    path = folder / "cassette.yaml"
    result = {"save": timed(cassette.save, str(path)), "load": timed(Core.load, str(path))}
    result["bytes"] = path.stat().st_size
    return result


def work_pyyaml(streams: list[dict[str, Any]], folder: Path) -> dict[str, Any]:
    import yaml

    doc = yaml_doc(streams)
    path = folder / "cassette.yaml"

    def save() -> None:
        path.write_text(yaml.dump(doc, Dumper=yaml.CSafeDumper, allow_unicode=True, sort_keys=False), "utf-8")

    def load() -> None:
        yaml.load(path.read_text("utf-8"), Loader=yaml.CSafeLoader)

    result = {"save": timed(save), "load": timed(load)}
    result["bytes"] = path.stat().st_size
    return result


WORKERS = {"sse-tape": work_sse_tape, "cassetter": work_cassetter, "pyyaml": work_pyyaml}


def worker(kind: str, content_path: str) -> None:
    streams = json.loads(Path(content_path).read_text("utf-8"))
    with tempfile.TemporaryDirectory() as folder:
        print(json.dumps(WORKERS[kind](streams, Path(folder))))


# --- the driver -----------------------------------------------------------------------------------


def run(python: str, kind: str, content_path: Path, pythonpath: str | None = None) -> dict[str, Any]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    with tempfile.TemporaryDirectory() as cache:
        env["SSE_TAPE_TOML_CACHE"] = cache  # every round starts with no parsed-TOML cache: the first load is cold
        out = subprocess.run(
            [python, __file__, "--worker", kind, "--content", str(content_path)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
    if out.returncode != 0:
        sys.exit(f"{kind} ({python}) failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def has(python: str, module: str) -> bool:
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True, check=False).returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--interactions", type=int, default=1000)
    parser.add_argument("--events", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cassetter-python", help="a Python that can import cassetter (in a venv of its own)")
    parser.add_argument("--baseline", help="the root of another sse-tape checkout or export, measured alongside")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--content", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.content)
        return

    here = str(Path(__file__).resolve().parent.parent)
    contenders: list[tuple[str, str, str, str | None]] = [("sse-tape", sys.executable, "sse-tape", here)]
    if args.baseline:
        contenders.insert(0, ("baseline", sys.executable, "sse-tape", str(Path(args.baseline).resolve())))
    if args.cassetter_python:
        if not has(args.cassetter_python, "cassetter"):
            sys.exit(f"{args.cassetter_python} cannot import cassetter")
        contenders.append(("cassetter", args.cassetter_python, "cassetter", None))
    else:
        print("cassetter: not measured (give --cassetter-python PATH, a Python with cassetter installed)")
    if has(sys.executable, "yaml"):
        contenders.append(("PyYAML C", sys.executable, "pyyaml", None))

    with tempfile.TemporaryDirectory() as tmp:
        content_path = Path(tmp) / "content.json"
        content_path.write_text(json.dumps(content(args.interactions, args.events)), "utf-8")
        results: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in contenders}
        for n in range(args.rounds):
            for name, python, kind, pythonpath in contenders:
                results[name].append(run(python, kind, content_path, pythonpath))
            print(f"round {n + 1} of {args.rounds} done", file=sys.stderr)

    for clock, label in ((0, "wall clock"), (1, "CPU time of the process")):
        print(
            f"\n{args.interactions} interactions x {args.events} events, {label}, ms: median of {args.rounds} rounds [min-max]"
        )
        print(f"| {'contender':<34} | {'size':>8} | {'save':>18} | {'load':>18} |")
        print(f"|{'-' * 36}|{'-' * 10}|{'-' * 20}|{'-' * 20}|")
        for name, rounds in results.items():
            if name in ("sse-tape", "baseline"):
                row(f"{name} TOML", rounds, clock, ".toml bytes", ".toml save", ".toml load")
                row(f"{name} TOML, loaded again", rounds, clock, None, None, ".toml load again")
                row(f"{name} MessagePack", rounds, clock, ".msgpack bytes", ".msgpack save", ".msgpack load")
            else:
                row(f"{name} YAML", rounds, clock, "bytes", "save", "load")


def row(label: str, rounds: list[dict[str, Any]], clock: int, size: str | None, save: str | None, load: str) -> None:
    def cell(key: str | None) -> str:
        if key is None:
            return ""
        values = [r[key][clock] * 1000 for r in rounds]
        return f"{statistics.median(values):.1f} [{min(values):.0f}-{max(values):.0f}]"

    mb = f"{rounds[0][size] / 1e6:.2f} MB" if size else ""
    print(f"| {label:<34} | {mb:>8} | {cell(save):>18} | {cell(load):>18} |")


if __name__ == "__main__":
    main()
