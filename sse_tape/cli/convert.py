"""`sse-tape convert`: a cassette in the other encoding, and, if asked, in another API (`sse_tape.conversion`)."""

from __future__ import annotations

from pathlib import Path

import click

from .. import conversion
from .._exceptions import ConfigError
from ..dialects import DIALECTS

__all__ = ["convert"]


@click.command()
@click.argument("source", type=click.Path(path_type=Path))
@click.argument("target", type=click.Path(path_type=Path))
@click.option(
    "--to-dialect",
    metavar="NAME",
    help=f"Also translate every interaction into this API: {', '.join(DIALECTS)}. Timing is kept.",
)
@click.option(
    "--dialect",
    "from_dialect",
    metavar="NAME",
    help="With --to-dialect: the source's dialect, if its paths do not tell; a stream that is not this API's stops "
    "the conversion.",
)
@click.option(
    "--lossy",
    is_flag=True,
    help="With --to-dialect: leave out what the other API cannot carry (tool calls, reasoning, a refusal, "
    "log probabilities) instead of refusing to convert.",
)
def convert(source: Path, target: Path, to_dialect: str | None, from_dialect: str | None, lossy: bool) -> None:
    """Rewrite a cassette in another encoding, chosen by TARGET's suffix (.toml or .msgpack).

    Lossless: every chunk keeps its exact bytes and timing. With --to-dialect,
    each stream is decoded and encoded again as the other API would send it,
    each new event at the time of the original one, and each request's path
    and body are rewritten for that API: record once from an OpenAI-compatible
    server, test an LM Studio or Responses client. An interaction with what
    the other API has no words for (tool calls in the completions API, say)
    stops the conversion, naming it, and nothing is written; --lossy leaves
    that out instead.
    """
    if lossy and to_dialect is None:
        raise ConfigError("--lossy goes with --to-dialect: a change of encoding alone loses nothing")
    if from_dialect is not None and to_dialect is None:
        raise ConfigError(
            "--dialect goes with --to-dialect: it names the dialect the streams are translated from, "
            "and a change of encoding alone reads no stream"
        )

    written = conversion.convert(source, target, into=to_dialect, origin=from_dialect, lossy=lossy)
    click.echo(f"wrote {target} ({len(written)} interaction{'s'[: len(written) != 1]})")
