"""bench/fidelity_bench.py, briefly: the timing record's script runs and reads every stream whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent.parent / "bench" / "fidelity_bench.py"


@pytest.mark.slow
def test_a_short_fidelity_benchmark_reads_every_stream_whole() -> None:
    # Without aimock: the floor and MockServer, 1 stream twice and 6 at once over 2 client processes.
    args = ["--rounds", "1", "--events", "5", "--gap", "0.02", "--streams", "1,6", "--repeats", "2"]
    result = subprocess.run(
        [sys.executable, str(BENCH), *args, "--per-process", "3"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 x 1 stream in a row" in result.stdout
    assert "6 concurrent streams, over 2 client processes" in result.stdout
    lines = result.stdout.splitlines()
    rows = [line for line in lines if line.startswith(("aiohttp floor ", "sse-tape ")) and " / " not in line]
    assert len(rows) == 4
    assert [row.split()[-2:] for row in rows] == [["2", "[2-2]"], ["2", "[2-2]"], ["6", "[6-6]"], ["6", "[6-6]"]]
    assert not [line for line in lines if line.startswith("aimock")]  # its column is left out without --aimock
