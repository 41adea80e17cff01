"""sse-tape in a process of its own, for the tests that need one: a limit set on it, a signal sent to it, a
recording proxy in front of an upstream (`recording_proxy`); the descriptors for a thousand clients of it; a
child forked to run a part of a test (`fork`); and any process a test started, stopped (`stop`)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def fork(child: Callable[[], int]) -> int:
    """Fork a child that runs `child` and exits with the status it returns (70, its traceback on stderr, when it
    raises): whatever happens in it, it never goes on as a second pytest. The child's pid."""
    pid = os.fork()
    if pid == 0:
        status = 70
        try:
            status = child()
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(status)
    return pid


def start(args: list[str], *, setup: str = "") -> tuple[subprocess.Popen[str], str]:
    """Run `sse-tape ARGS` after the Python statements `setup` (a resource limit, say); returns the process and
    the URL it announced."""
    code = f"{setup}\nimport sys; sys.argv[1:] = {args!r}\nfrom sse_tape.cli import main; main()"
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    return process, process.stdout.readline().split(" at ")[1].split()[0]


@contextmanager
def recording_proxy(upstream: str, cassette: Path, *, port: str = "0", options: Sequence[str] = ()) -> Iterator[str]:
    """`sse-tape record --upstream UPSTREAM -c CASSETTE [OPTIONS]` in a process of its own while the block runs:
    its URL. Ctrl-C stops it after the block, and it must end cleanly: the recording is in `cassette` then."""
    proxy, url = start(["record", "--upstream", upstream, "-c", str(cassette), "--port", port, "-q", *options])
    try:
        yield url
    finally:
        proxy.send_signal(signal.SIGINT)
        _, err = proxy.communicate(timeout=30)
    assert proxy.returncode in (0, 130), err


def descriptors(wanted: int) -> int:
    """Raise this process's descriptor limit (which the processes it starts inherit) to `wanted`, or as near
    as the hard limit lets it; returns the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return wanted if soft == resource.RLIM_INFINITY else soft


def stop(process: subprocess.Popen[Any], *, timeout: float, signum: int = signal.SIGTERM) -> None:
    """Stop `process`: `signum`, then SIGKILL if it has not ended within `timeout` seconds; waits for it."""
    process.send_signal(signum)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
