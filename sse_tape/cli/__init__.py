"""The `sse-tape` command line: the group every command belongs to, and how it fails.

Each command is a module of its own (`serve`, `record`, `show`, `check`, `convert`, `faults`, `synth`,
`probe`),
with what several share beside them (`option_lists`, `loading`, `serving`, `model`, `one_shot`,
`terminal`); what `check` and `convert` work out is the library's (`sse_tape.checking`,
`sse_tape.conversion`). A command imports the subsystems it drives (the server, forwarding, synthesis)
when it runs, once its words are understood: `sse-tape --help`, `--version` and a mistyped option import
none of them, and `serve` none of the others'.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any

import click

from .. import __version__
from .._exceptions import SSETapeError
from . import check, convert, faults, probe, record, serve, show, synth
from .terminal import log

__all__ = ["cli", "main"]


class _Failure(click.ClickException):
    exit_code = 2


class _Interrupted(click.ClickException):
    """Ctrl-C before the command was done: one line and exit status 130 (128 + SIGINT), as a shell reports
    a command SIGINT ended; click's own is a blank line, `Aborted!` and exit status 1."""

    exit_code = 130

    def __init__(self) -> None:
        super().__init__("interrupted")

    def show(self, file: Any = None) -> None:
        log(self.message)


class _Group(click.Group):
    """Turns every `SSETapeError` into one line on stderr and exit status 2, and Ctrl-C into `_Interrupted`.

    A server that listens is stopped by Ctrl-C, and says so (`serving.serve_until_stopped`); before that, as
    for every other command, Ctrl-C interrupts it, whatever it was importing, loading or starting.
    """

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            raise _interrupted() from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SSETapeError as exc:
            raise _Failure(str(exc)) from None
        except KeyboardInterrupt:
            raise _interrupted() from None


def _interrupted() -> _Interrupted:
    """The command is on its way out: a second Ctrl-C (or a terminal's, to each of a server's workers and so
    to it again) would only interrupt it saying so, with a second line or a traceback."""
    with contextlib.suppress(ValueError):  # not the main thread: no signal comes to it
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return _Interrupted()


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="sse-tape")
def cli() -> None:
    """Record, replay and fault-inject Server-Sent-Events streams.

    Cassettes are .toml (readable, the default) or .msgpack (compact) files
    holding each recorded request and the response's raw chunks with their
    timing.
    """


cli.add_command(serve.serve)
cli.add_command(record.record)
cli.add_command(show.show)
cli.add_command(check.check)
cli.add_command(faults.list_faults)
cli.add_command(convert.convert)
cli.add_command(synth.synth)
cli.add_command(probe.probe)


def main() -> None:
    """The console script's entry point."""
    cli(prog_name="sse-tape")
