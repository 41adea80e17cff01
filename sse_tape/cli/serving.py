"""Running a server from the command line (serve, record): its arguments, what it says, and how it stops.

The command modules import this when their command runs: it brings the server (and aiohttp) with it, which
`sse-tape --help`, `--version` and a mistyped option do without.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from typing import Any

import click

from .._exceptions import cannot_listen
from ..options import ServeOptions
from ..server import Limits, MockServer, collect_for_serving, is_loopback_name
from .option_lists import Listening
from .terminal import log

__all__ = ["say_what_stays_whole", "serve_until_stopped", "serve_until_stopped_quietly", "server_arguments"]


def server_arguments(listening: Listening) -> dict[str, Any]:
    """The keyword arguments of `build_server` that say where and how it listens."""
    max_connections = {"max_connections": listening.max_connections} if listening.max_connections is not None else {}
    return {
        "host": listening.host,
        "port": listening.port,
        "log": listening.log,
        "limits": Limits(
            request_timeout=listening.request_timeout,
            keep_alive=listening.keep_alive,
            send_timeout=listening.send_timeout,
            **max_connections,
        ),
        "allow_remote_control": listening.allow_remote_control,
        "allowed_hosts": listening.allowed_hosts,
        "cors_origins": listening.cors_origins,
    }


def say_what_stays_whole(options: ServeOptions, streams: str) -> None:
    """One line for each fault that holds `streams` back until they have ended: it needs them whole first."""
    for fault in options.faults:
        if fault.needs_whole_stream():
            log(f"fault {fault.spec!r} needs the whole stream: {streams} under it reach the client once they end")


async def serve_until_stopped_quietly(server: MockServer, ready: Callable[[], object]) -> None:
    """A worker's serving: no banner; `ready` is called once it listens."""
    await serve_until_stopped(server, "", ready)


async def serve_until_stopped(server: MockServer, what: str, ready: Callable[[], object] | None = None) -> None:
    """Serve until SIGINT or SIGTERM; `ready` (a worker's) is called once listening, in place of the banner."""
    try:
        await server.start()
    except OSError as exc:
        raise cannot_listen(server.host, server.port, exc) from None
    collect_for_serving()  # this process is ours alone
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready()
    else:
        click.echo(f"sse-tape: {what} at {server.url} (Ctrl-C stops)")
    if ready is None and not is_loopback_name(server.host):
        control = (
            "and so can the fault header and the control endpoints, where their Host is allowed (see --allow-host)"
            if server.access.allow_remote_control
            else ("the fault header and the control endpoints still answer this machine only")
        )
        log(f"warning: listening on {server.host}: other machines can reach every recording served; {control}")
    try:
        await stop.wait()
    finally:
        await server.close()
    if ready is None:
        log("stopped")
