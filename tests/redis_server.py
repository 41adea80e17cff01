"""Debian's `redis-server` on a free loopback port, for the tests of the replay state in Redis: nothing saved to
disk, gone when the block ends."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import processes
import pytest
from waits import until

REDIS_SERVER = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/bin:/usr/sbin")
"""Debian's redis-server, when installed (`apt-get install redis-server`)."""


@contextlib.contextmanager
def redis_server(port: int | None = None) -> Iterator[str]:
    """A redis-server of its own on a free loopback port (or `port`, to start one again where one stopped) while
    the block runs: its URL (database 0). Skips the test where redis-server or redis-py is not installed."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    pytest.importorskip("redis", reason="redis-py is not installed (pip install 'sse-tape[redis]')")
    with tempfile.TemporaryDirectory(prefix="sse-tape-redis-") as folder:
        if port is None:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
        command = [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        log = f"{folder}/redis.log"
        process = subprocess.Popen([*command, "--dir", folder, "--logfile", log], stdout=subprocess.DEVNULL)
        try:
            until(lambda: process.poll() is not None or _listens(port), f"redis-server to listen on port {port}")
            if process.poll() is not None:
                raise RuntimeError(f"redis-server did not start: {Path(log).read_text(errors='replace')}")
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            processes.stop(process, timeout=30)


def _listens(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
