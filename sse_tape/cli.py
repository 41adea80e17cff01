"""The `sse-tape` command line."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import statistics
from pathlib import Path
from typing import Any

import click

from . import __version__
from ._exceptions import ConfigError, SSETapeError
from .cassette import Cassette, Interaction
from .matching import DEFAULT_MATCH_ON, MatchOn
from .pacing import Pacing
from .server import MockServer, load_cassettes
from .sse import SSEDecoder

__all__ = ["cli", "main"]


class _Failure(click.ClickException):
    exit_code = 2


class _Group(click.Group):
    """Turns every `SSETapeError` into one line on stderr and exit status 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SSETapeError as exc:
            raise _Failure(str(exc)) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="sse-tape")
def cli() -> None:
    """Record, replay and fault-inject Server-Sent-Events streams.

    Cassettes are .toml (readable, the default) or .msgpack (compact) files
    holding each recorded request and the response's raw chunks with their
    timing.
    """


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=8080,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on; 0 picks a free one and prints it.",
)
@click.option(
    "--match",
    "match",
    metavar="PARTS",
    help="What a request must share with a recording, comma-separated from method, path, query, body. "
    "[default: method,path,body; method,path when serving the bundled cassettes]",
)
@click.option(
    "--ignore-body-field",
    multiple=True,
    metavar="FIELD",
    help="A JSON body field to leave out when comparing bodies, as a dotted path "
    "(user, metadata.trace_id, messages.*.name). Repeatable.",
)
@click.option(
    "--pace",
    default="recorded",
    show_default=True,
    help="recorded; xK to scale (x2 twice as fast, x0.5 half speed); instant; a fixed gap (20ms); "
    "or tps:N events per second.",
)
@click.option("--jitter", metavar="AMOUNT", help="Move each gap randomly by up to AMOUNT (5ms, or 10% of the gap).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed for --jitter: same seed, same timing.")
@click.option(
    "--miss-status",
    default=404,
    show_default=True,
    type=click.IntRange(400, 599),
    help="HTTP status of the JSON error sent when no recording matches.",
)
@click.option("-q", "--quiet", is_flag=True, help="Do not log each request on stderr.")
def serve(
    paths: tuple[Path, ...],
    host: str,
    port: int,
    match: str | None,
    ignore_body_field: tuple[str, ...],
    pace: str,
    jitter: str | None,
    seed: int,
    miss_status: int,
    quiet: bool,
) -> None:
    """Replay cassettes as a mock HTTP server.

    PATHS are cassette files or folders of them (searched recursively); with
    none, the cassettes bundled with sse-tape are served, one or more for each
    supported API. Each request gets the recorded response that matches it,
    byte for byte, at the chosen pace. Ctrl-C stops the server.
    """
    if match is None:
        match_on: tuple[MatchOn, ...] = DEFAULT_MATCH_ON if paths else (MatchOn.METHOD, MatchOn.PATH)
    else:
        match_on = _parse_match(match)
    cassettes = load_cassettes(paths)
    server = MockServer(
        cassettes,
        host=host,
        port=port,
        match_on=match_on,
        ignore_body_fields=ignore_body_field,
        pacing=Pacing.parse(pace, jitter=jitter, seed=seed),
        miss_status=miss_status,
        log=None if quiet else _log,
    )
    count = sum(len(c) for c in cassettes)
    asyncio.run(_serve_until_stopped(server, f"{count} interactions from {len(cassettes)} cassettes"))


async def _serve_until_stopped(server: MockServer, what: str) -> None:
    try:
        await server.start()
    except OSError as exc:
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        raise SSETapeError(f"cannot listen on {server.host}:{server.port}: {reason}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    click.echo(f"sse-tape: serving {what} at {server.url} (Ctrl-C stops)")
    try:
        await stop.wait()
    finally:
        await server.close()
    _log("stopped")


def _parse_match(text: str) -> tuple[MatchOn, ...]:
    words = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in words if w not in MatchOn.__members__.values()]
    if bad or not words:
        raise ConfigError(f"--match {text!r}: choose from {', '.join(MatchOn)}")
    return tuple(MatchOn(w) for w in words)


def _log(line: str) -> None:
    click.echo(f"sse-tape: {line}", err=True)


@cli.command()
@click.argument("cassette", type=click.Path(path_type=Path))
@click.option("--events", is_flag=True, help="Print every decoded event in full.")
def show(cassette: Path, events: bool) -> None:
    """Summarize a cassette: each interaction's request, status, timing and events."""
    loaded = Cassette.load(cassette)
    click.echo(f"{cassette}: {len(loaded)} interaction{'s'[: len(loaded) != 1]}")
    for n, interaction in enumerate(loaded, 1):
        click.echo()
        for line in _describe(n, interaction, full=events):
            click.echo(line)


def _describe(n: int, interaction: Interaction, *, full: bool) -> list[str]:
    req, resp = interaction.request, interaction.response
    query = f"?{req.query}" if req.query else ""
    kind = resp.header("content-type") or "no content-type"
    timed = resp.events()
    duration = resp.duration if resp.duration is not None else (resp.chunks[-1].t if resp.chunks else 0.0)
    lines = [
        f"#{n} {req.method} {req.path}{query}",
        f"   -> {resp.status} {kind}, ended: {resp.end}",
        f"   {len(resp.chunks)} chunks, {len(timed)} events, {len(resp.body)} bytes, "
        f"{duration:.3f} s" + (f", first byte at {resp.chunks[0].t:.3f} s" if resp.chunks else ""),
    ]
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(timed)]
    if gaps:
        ms = sorted(g * 1000 for g in gaps)
        p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
        lines.append(
            f"   gaps between events: min {ms[0]:.0f} ms, median {statistics.median(ms):.0f} ms, "
            f"p95 {p95:.0f} ms, max {ms[-1]:.0f} ms"
        )
    decoder = SSEDecoder()
    for chunk in resp.chunks:
        events = decoder.feed(chunk.data)
        if not events:  # a comment such as a heartbeat, or part of an event
            raw = repr(chunk.data)[1:]
            lines.append(f"   {chunk.t:8.3f} s  {'(no event)':<28} {raw[:90] + '...' if len(raw) > 93 else raw}")
        for event in events:
            if full:
                lines.append(f"   {chunk.t:8.3f} s  event: {event.event}" + (f"  id: {event.id}" if event.id else ""))
                lines.extend(f"{'':15}data: {line}" for line in event.data.split("\n"))
            else:
                data = event.data.replace("\n", "\\n")
                lines.append(f"   {chunk.t:8.3f} s  {event.event:<28} {data[:90] + '...' if len(data) > 93 else data}")
    return lines


@cli.command()
@click.argument("source", type=click.Path(path_type=Path))
@click.argument("target", type=click.Path(path_type=Path))
def convert(source: Path, target: Path) -> None:
    """Rewrite a cassette in another encoding, chosen by TARGET's suffix (.toml or .msgpack).

    Lossless: every chunk keeps its exact bytes and timing.
    """
    loaded = Cassette.load(source)
    loaded.save(target)
    click.echo(f"wrote {target} ({len(loaded)} interaction{'s'[: len(loaded) != 1]})")


def main() -> None:
    """The console script's entry point."""
    cli(prog_name="sse-tape")
