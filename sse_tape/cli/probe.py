"""`sse-tape probe`: what a gateway does to streams, with sse-tape on both sides of it."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import click

from .._exceptions import ConfigError, SSETapeError
from .._units import parse_duration
from .terminal import log

__all__ = ["probe"]


def _duration(text: str, option: str) -> float:
    try:
        return parse_duration(text)
    except ConfigError as exc:
        raise ConfigError(f"{option} {text!r}: {exc}") from None


def _writable(path: Path) -> bool:
    """Whether a file can be written at `path` (its folder exists and takes files; a file there is writable)."""
    if path.exists():
        return path.is_file() and os.access(path, os.W_OK)
    folder = path.parent if str(path.parent) else Path(".")
    return folder.is_dir() and os.access(folder, os.W_OK)


def _header(text: str) -> tuple[str, str]:
    name, colon, value = text.partition(":")
    if not colon or not name.strip():
        raise ConfigError(f"--header {text!r}: give it as 'Name: value'")
    return name.strip(), value.strip()


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--through", metavar="URL", help="The gateway's base URL. Without it, the upstream is probed alone.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Where the upstream listens.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="The upstream's port (0: a free one).",
)
@click.option(
    "--fault",
    "faults",
    multiple=True,
    metavar="FAULT",
    help="A fault to put in a stream upstream (repeatable; docs/faults.md). Default: an error frame, a cut, a "
    "stall with heartbeats and a 429.",
)
@click.option("--no-faults", is_flag=True, help="Put no fault in the streams.")
@click.option(
    "--tolerance",
    default="100ms",
    show_default=True,
    help="How much later than straight an event may come through the gateway before it counts as held back.",
)
@click.option(
    "--timeout",
    default="30s",
    show_default=True,
    help="How long a read waits for something to come before it gives up.",
)
@click.option(
    "--header", "headers", multiple=True, metavar="'NAME: VALUE'", help="A header for every request (repeatable)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--html",
    "html_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write the report as one HTML page: per interaction, what was sent against what came, on one time axis.",
)
def probe(
    paths: tuple[Path, ...],
    through: str | None,
    host: str,
    port: int,
    faults: tuple[str, ...],
    no_faults: bool,
    tolerance: str,
    timeout: str,
    headers: tuple[str, ...],
    as_json: bool,
    html_file: Path | None,
) -> None:
    """Probe what a gateway (a proxy, a load balancer, an API gateway) does to streams.

    sse-tape serves PATHS (cassette files or folders; none: the bundled ones)
    as the upstream on --host and --port: point the gateway at it. Each
    interaction is then read straight from the upstream and through the
    gateway at --through, one at a time, and the two answers compared: events
    lost, added, reordered or changed (and whether harmlessly, as line ends),
    buffering, the latency the gateway added per event, coalescing, headers.
    Then each fault is put in the first stream upstream, and the report says
    how the gateway passed it on: as it is, rewritten, retried or hidden.

    The exit status is 0 when the streams passed unbuffered and unchanged, 1
    when the report names a problem, 2 when the probe could not run.
    """
    from ..probe import DEFAULT_FAULTS, Probe, ProbeReport, html_page
    from ..server import load_cassettes

    chosen = () if no_faults else faults or DEFAULT_FAULTS
    extra = [_header(h) for h in headers]
    cassettes = load_cassettes(paths)
    if not any(c.interactions for c in cassettes):
        raise SSETapeError("no interactions to probe with")
    running = Probe(
        cassettes,
        host=host,
        port=port,
        faults=chosen,
        tolerance=_duration(tolerance, "--tolerance"),
        timeout=_duration(timeout, "--timeout"),
        headers=extra,
    )

    if html_file is not None and not _writable(html_file):  # said now, not after the whole probe
        raise SSETapeError(f"cannot write {html_file}")

    async def run() -> ProbeReport:
        try:
            await running.upstream.start()
        except OSError as exc:
            raise SSETapeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        try:
            log(f"upstream listening at {running.url}; probing {'through ' + through if through else 'it straight'}")
            return await (running.through(through) if through else running.direct())
        finally:
            await running.upstream.close()

    report = asyncio.run(run())
    click.echo(report.dumps() if as_json else str(report))
    if html_file is not None:
        try:
            html_file.write_text(html_page(report), encoding="utf-8")
        except OSError as exc:
            raise SSETapeError(f"cannot write {html_file}: {exc.strerror or exc}") from None
        log(f"wrote {html_file}")
    sys.exit(0 if report.clean else 1)
