"""What the command line says on the terminal besides a command's output: log lines and progress."""

from __future__ import annotations

import sys
from typing import Any

import click

__all__ = ["Progress", "log"]


def log(line: str) -> None:
    """One line on standard error, after `sse-tape: `: standard output stays what a command prints."""
    click.echo(f"sse-tape: {line}", err=True)


class Progress:
    """Progress on a terminal, with click's bar (already a dependency, and enough for one line); plain lines
    on standard error otherwise. Silent until its first report, so a step that does not happen says nothing."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar: Any = None
        self.done = 0
        self.said = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.bar is not None:
            self.bar.render_finish()
        elif self.said and exc_info[0] is None:
            log(f"{self.label}: done")

    def fraction(self, fraction: float) -> None:
        """So much done, from 0 to 1."""
        self.at(round(fraction * 100), 100)

    def at(self, done: int, total: int) -> None:
        """So much done of `total` (bytes, requests)."""
        if not sys.stderr.isatty():
            if not self.said:
                self.said = True
                log(f"{self.label}...")
            return
        if self.bar is None:
            self.bar = click.progressbar(length=total, label=f"sse-tape: {self.label}", file=sys.stderr)
            self.bar.render_progress()
        self.bar.update(done - self.done)
        self.done = done
