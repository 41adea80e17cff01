"""Serving from several processes on one port: `sse-tape serve --workers N`.

One Python process answers on one core. `run` forks the server N times
after its cassettes are loaded (the children share those pages with the
parent until one writes to them), and each child listens on the same port
with SO_REUSEPORT, so the system shares the connections out among them.
The parent holds the port from before the first fork (bound, never
listening: no connection goes to it), waits until every worker listens, and
then only watches: Ctrl-C or SIGTERM stops them all, and a worker that dies
stops the rest.

The workers answer as one server: their replay state (which recording plays
next, `times=` budgets of faults, seeded chance, the journal, the faults set
through the control endpoints) is in one store, the server's. A shared one
(`--state redis://...`) needs nothing more; one the parent holds for them
(`state_workers.WorkersStore`, given as `held`) is handed each worker's end
as it is forked, and answered by the parent once they all are. The
`--report` file is shared, each line written whole (`docs/scaling.md`).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import os
import select
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from ._exceptions import SSETapeError, cannot_listen
from .server import MockServer
from .server.connections import dual_stack_socket
from .state_workers import WorkersStore

__all__ = ["run"]


def run(
    server: MockServer,
    workers: int,
    serve: Callable[[MockServer, Callable[[], object]], Coroutine[Any, Any, None]],
    *,
    listening: Callable[[list[int]], None],
    say: Callable[[str], None],
    held: WorkersStore | None = None,
) -> int:
    """Serve `server` from `workers` processes on its port; returns the exit status.

    `serve(server, ready)` runs one worker until it is told to stop, calling
    `ready()` once it listens; `listening(pids)` is called once every worker
    does. `say` gets the lines about what went wrong. `held`: the server's
    store, where it is one this process holds for its workers (made for
    `workers` of them).
    """
    try:
        port = _port(server.host, server.port)
    except OSError as exc:
        raise cannot_listen(server.host, server.port, exc) from None
    server.port, server.reuse_port = port.getsockname()[1], True
    gc.freeze()  # what the children share stays shared: the collector never writes to those pages
    ready_read, ready_write = os.pipe()
    parent, pids = os.getpid(), []
    for n in range(workers):
        sys.stdout.flush()
        sys.stderr.flush()
        # Ctrl-C is the parent's to answer: it stops every worker (SIGTERM). A worker keeps SIGINT blocked
        # from its fork on, so that no KeyboardInterrupt ever takes it back into the parent's code (one that
        # came while it started, or after its event loop put Python's handler back, printed a second line).
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        pid = -1
        try:
            pid = os.fork()
        finally:
            if pid != 0:  # the parent, which hears a Ctrl-C that came meanwhile now
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        if pid == 0:
            _die_with(parent)
            port.close()
            os.close(ready_read)
            if held is not None:
                held.in_worker(n)
            os._exit(_worker(server, serve, ready_write, say))
        pids.append(pid)
    os.close(ready_write)
    if held is not None:
        held.hold(say)
    return _watch(pids, ready_read, port, listening, say)


def _port(host: str, port: int) -> socket.socket:
    """The port the workers will share, bound as they bind it (`::` for IPv4 too), never listening."""
    if (every := dual_stack_socket(host, port, reuse_port=True)) is not None:
        return every
    bound = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        bound.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        bound.bind((host, port))
    except OSError:
        bound.close()
        raise
    return bound


def _die_with(parent: int) -> None:
    """Have the system stop this worker when its parent dies, even by SIGKILL: no worker outlives the
    server, holding the port (Linux's PR_SET_PDEATHSIG; elsewhere, the parent's signals stop them)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before that took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _worker(
    server: MockServer,
    serve: Callable[[MockServer, Callable[[], object]], Coroutine[Any, Any, None]],
    ready: int,
    say: Callable[[str], None],
) -> int:
    try:
        asyncio.run(serve(server, lambda: os.write(ready, b".")))
    except SSETapeError as exc:
        say(f"worker {os.getpid()}: {exc}")
        return 2
    except BaseException as exc:  # a worker's failure is a line; the parent stops the others
        say(f"worker {os.getpid()} failed: {exc!r}")
        return 1
    finally:
        os.close(ready)
    return 0


def _watch(
    pids: list[int], ready: int, port: socket.socket, listening: Callable[[list[int]], None], say: Callable[[str], None]
) -> int:
    """Wait until the workers listen, then until they end; stop them all when told to or when one dies.
    Ctrl-C before they all listen interrupts the server, as it does a server of one process: exit status 130."""
    stopping = interrupted = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping, interrupted
        interrupted = interrupted or (signum == signal.SIGINT and up < len(pids) and not stopping)
        stopping = True
        for pid in running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    running = set(pids)
    up, status = 0, 0
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    while running:
        if up < len(pids):  # each worker writes a byte once it listens
            if select.select([ready], [], [], 0.1)[0]:
                up += len(os.read(ready, len(pids)))
                if up == len(pids):
                    listening(pids)
            pid, code = os.waitpid(-1, os.WNOHANG)
        else:
            pid, code = os.waitpid(-1, 0)
        if pid == 0:
            continue
        running.discard(pid)
        if not stopping:
            code = os.waitstatus_to_exitcode(code)
            say(f"worker {pid} ended (status {code}): stopping the others")
            status = code if code > 0 else 1
            stop(signal.SIGTERM, None)
    os.close(ready)
    port.close()
    if interrupted:
        say("interrupted")
        return 130
    return status
