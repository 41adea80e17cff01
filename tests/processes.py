"""sse-tape in a process of its own, for the tests that need one: a limit set on it, a signal sent to it."""

from __future__ import annotations

import subprocess
import sys


def start(args: list[str], *, setup: str = "") -> tuple[subprocess.Popen[str], str]:
    """Run `sse-tape ARGS` after the Python statements `setup` (a resource limit, say); returns the process and
    the URL it announced."""
    code = f"{setup}\nimport sys; sys.argv[1:] = {args!r}\nfrom sse_tape.cli import main; main()"
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    return process, process.stdout.readline().split(" at ")[1].split()[0]
