"""What the pytest fixture costs a test: its server's start and stop, measured two ways in one run.

- per test: a generated module of N tests that take `sse_tape` (a one-recording cassette, no request)
  against the same N tests taking a plain fixture, each in a fresh pytest process, alternated; the
  difference over N is what the fixture adds to each test.
- bare: `serve(...)` entered and left N times in this process (the thread, the loop, the socket).

Run: python bench/fixture_bench.py [--tests 500] [--rounds 3]
Figures vary with the machine and its load; the aim is under 20 ms a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sse_tape import Cassette, bundled_cassettes, serve

MODULE = """
import pytest

@pytest.fixture
def plain():
    yield None

@pytest.mark.parametrize("n", range({tests}))
@pytest.mark.sse_tape("greeting", allow_unused=True)
def test_case(n, {fixture}):
    pass
"""


def session_seconds(folder: Path, fixture: str, tests: int) -> float:
    """Wall time of a pytest process running `tests` tests that take `fixture`."""
    (folder / "test_bench.py").write_text(MODULE.format(tests=tests, fixture=fixture), encoding="utf-8")
    started = time.perf_counter()
    # Only this plugin: the others installed here cost seconds to import, and would be noise.
    only_ours = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "sse_tape.pytest_plugin", str(folder)],
        check=True,
        capture_output=True,
        cwd=folder,
        env=only_ours,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    bundled = Cassette.load(next(p for p in bundled_cassettes() if p.stem == "openai-chat"))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "cassettes").mkdir()
        Cassette(interactions=[bundled.interactions[0]], match_on=bundled.match_on).save(
            folder / "cassettes" / "greeting.toml"
        )
        (folder / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        added = []
        for n in range(args.rounds):
            plain = session_seconds(folder, "plain", args.tests)
            taped = session_seconds(folder, "sse_tape", args.tests)
            added.append((taped - plain) / args.tests)
            print(f"round {n + 1}: plain {plain:.2f} s, sse_tape {taped:.2f} s for {args.tests} tests")
        bare = []
        greeting = folder / "cassettes" / "greeting.toml"
        for _ in range(args.tests):
            started = time.perf_counter()
            with serve(greeting):
                pass
            bare.append(time.perf_counter() - started)
    print(f"sse_tape adds {statistics.median(added) * 1000:.2f} ms a test (median of {args.rounds} rounds)")
    print(
        f"serve() start and stop: p50 {statistics.median(bare) * 1000:.2f} ms, "
        f"p99 {statistics.quantiles(bare, n=100)[98] * 1000:.2f} ms over {args.tests}"
    )


if __name__ == "__main__":
    main()
