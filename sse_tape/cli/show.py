"""`sse-tape show`: what cassettes hold, per interaction, as text or as one HTML page."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .._exceptions import SSETapeError
from ..cassette import Cassette
from ..show import html_page, lines, view
from .loading import load_each

__all__ = ["show"]


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--events", is_flag=True, help="Also print every event of each stream, as it was on the wire.")
@click.option(
    "--html",
    "html_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write one self-contained HTML page with a timeline per interaction to this file.",
)
def show(paths: tuple[Path, ...], events: bool, html_file: Path | None) -> None:
    """Show what cassettes hold: per interaction, what was asked, the answer and its timing.

    PATHS are cassette files or folders of them. Each interaction shows its
    request line and the prompt's last message, the status, the answer put
    together by its API's decoder (text, reasoning, refusal, tool calls,
    finish reason, usage), then its timing: first byte, first token, end,
    tokens per second, the gaps between events and the stalls. A cassette
    that cannot be read is one error line, and the others are shown all the
    same; the exit status is then 2.
    """
    loaded = load_each(paths, "show")
    readable = [(Path(source), c) for source, c in loaded if isinstance(c, Cassette)]
    if html_file is not None:
        for source, why in loaded:
            if isinstance(why, str):
                _unreadable_line(source, why)
        if readable:
            shown = [(path.name, view(n, i)) for path, c in readable for n, i in enumerate(c, 1)]
            title = "sse-tape: " + ", ".join(path.name for path, _ in readable)
            try:
                html_file.write_text(html_page(title, shown), encoding="utf-8")
            except OSError as exc:
                raise SSETapeError(f"cannot write {html_file}: {exc.strerror or exc}") from None
            click.echo(f"wrote {html_file} ({len(shown)} interaction{'s'[: len(shown) != 1]})")
    else:
        shown_any = False
        for source, cassette in loaded:
            if isinstance(cassette, str):  # said where it comes, so it reads beside the files around it
                _unreadable_line(source, cassette)
                continue
            if shown_any:
                click.echo()
            shown_any = True
            click.echo(f"{source}: {len(cassette)} interaction{'s'[: len(cassette) != 1]}")
            if cassette.description:
                click.echo(f"   {cassette.description}")
            for n, interaction in enumerate(cassette, 1):
                click.echo()
                for line in lines(view(n, interaction), events=events):
                    click.echo(line)
    if len(readable) < len(loaded):
        sys.exit(2)


def _unreadable_line(source: str, why: str) -> None:
    """Why a cassette cannot be read, on stderr as the command's other errors are: stdout stays what was shown."""
    click.echo(f"Error: {source}: {why}", err=True)
