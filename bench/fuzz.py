"""Fuzz, for long, what takes input from anyone: the SSE decoder, cassette loading, the fault grammar.

With atheris installed (`pip install atheris`), each target runs under
coverage-guided fuzzing for its share of `--seconds`; a crash stops it with
the input that caused it. Without atheris, the `fuzz`-marked hypothesis
tests (which run briefly in the suite) run with `--examples` examples each.

A target passes when every input gives a result or sse-tape's own error:
events or StreamError from the decoder, a cassette or CassetteError from a
load, a fault or ConfigError from the grammar.

Run: python bench/fuzz.py [--seconds 600] [--examples 20000]   (or `just fuzz`)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TARGETS = ("decoder", "toml", "msgpack", "faults")


def fuzz_one(target: str, data: bytes, folder: Path) -> None:
    """Feed one input to a target; anything but sse-tape's own errors propagates (and is a finding)."""
    from sse_tape import CassetteError, ConfigError, SSEDecoder, StreamError
    from sse_tape.cassette import Cassette
    from sse_tape.faults import parse_fault

    if target == "decoder":
        decoder = SSEDecoder(max_size=4096)
        cut = data[0] if data else 0
        with contextlib.suppress(StreamError):
            decoder.feed(data[1 : 1 + cut])
            decoder.feed(data[1 + cut :])
    elif target in ("toml", "msgpack"):
        path = folder / f"c.{target}"
        path.write_bytes(data)
        with contextlib.suppress(CassetteError):
            Cassette.load(path)
    else:
        with contextlib.suppress(ConfigError):
            parse_fault(data.decode("utf-8", "replace"))


def _dictionary(target: str) -> list[str]:
    """libFuzzer's -dict option for a target: the words the fault grammar knows, so the fuzzer speaks it."""
    if target != "faults":
        return []
    from sse_tape.faults import FAULTS

    words = {*FAULTS, *(k.name for kind in FAULTS.values() for k in kind.keys), "p", "times", "path"}
    words |= {":", ",", "=", "ms", "s", "%", "b", "crlf", "cr", "reset", "close", "json", "utf8", "role", "done"}
    path = Path(tempfile.mkdtemp()) / "faults.dict"
    path.write_text("".join(f'"{word}"\n' for word in sorted(words)))
    return [f"-dict={path}"]


def run_atheris(target: str, seconds: int) -> int:
    """Fuzz one target in a process of its own; its exit status."""
    options = [f"-max_total_time={seconds}", "-rss_limit_mb=2048", *_dictionary(target)]
    code = (
        "import sys, tempfile, pathlib, atheris\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import sse_tape, sse_tape.cassette, sse_tape.faults, sse_tape.sse\n"
        "atheris.instrument_all()\n"
        "import fuzz\n"
        "folder = pathlib.Path(tempfile.mkdtemp())\n"
        f"atheris.Setup([sys.argv[0], *{options!r}],"
        f" lambda data: fuzz.fuzz_one({target!r}, data, folder))\n"
        "atheris.Fuzz()\n"
    )
    return subprocess.run([sys.executable, "-c", code]).returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=600, help="with atheris: seconds in all (default 600)")
    parser.add_argument("--examples", type=int, default=20_000, help="without: hypothesis examples per test")
    args = parser.parse_args()
    if importlib.util.find_spec("atheris") is None:
        print(f"atheris is not installed: running the fuzz-marked tests with {args.examples} examples each")
        root = Path(__file__).resolve().parent.parent
        command = [sys.executable, "-m", "pytest", "-m", "fuzz", "-p", "no:cacheprovider", "--hypothesis-profile=fuzz"]
        env = {**os.environ, "SSE_TAPE_FUZZ_EXAMPLES": str(args.examples)}
        raise SystemExit(subprocess.run(command, cwd=root, env=env).returncode)
    failed = [t for t in TARGETS if run_atheris(t, max(args.seconds // len(TARGETS), 1)) != 0]
    print("fuzzed:", ", ".join(TARGETS), "; failed:", ", ".join(failed) or "none")
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
