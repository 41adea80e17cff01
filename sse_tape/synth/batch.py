"""Cassettes from a model: each request run, its answer kept as an interaction with its real timing.

`open_model` finds and loads the model, noting the load's progress so that
the first answer can tell it (LM Studio's `model_load.*` events).
`synthesize` runs requests (all submitted at once: with `parallel` slots,
several decode together) and returns their interactions, each request
exactly as a client of the dialect sends it and each response as its server
streams it, chunk by chunk at the times the model produced them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from .. import _json
from .._exceptions import ModelError
from ..cassette import Chunk, End, Interaction, Request, Response
from ..dialects import Generation as Dialect
from ..dialects import Prompt
from .engine import Engine
from .models import Progress, model_file
from .pipeline import Load, Settings, Stats, Synthesis

__all__ = ["Made", "open_model", "prompt_body", "synthesize"]

_LOAD_STEP = 0.05


@dataclass(frozen=True, slots=True)
class Made:
    """One synthesized interaction, with what it took."""

    interaction: Interaction
    stats: Stats


def open_model(
    spec: str,
    *,
    gpu_layers: int | None = None,
    ctx: int | None = None,
    threads: int | None = None,
    parallel: int = 1,
    chat_template: str | None = None,
    on_assemble: Progress | None = None,
    on_load: Callable[[float], None] | None = None,
) -> tuple[Engine, Load]:
    """The model `spec` names, loaded, and how its load went. Raises `ModelError` with one line."""
    path = model_file(spec, progress=on_assemble)
    progress: list[tuple[float, float]] = []
    started = time.perf_counter()

    def loading(fraction: float) -> None:
        # llama.cpp reports after every tensor: a step of 5% is what a client's progress bar can show.
        if not progress or fraction - progress[-1][1] >= _LOAD_STEP or (fraction >= 1.0 > progress[-1][1]):
            progress.append((round(time.perf_counter() - started, 6), fraction))
        if on_load is not None:
            on_load(fraction)

    engine = Engine(
        path,
        gpu_layers=gpu_layers,
        ctx=ctx,
        threads=threads,
        parallel=parallel,
        chat_template=chat_template,
        on_load=loading,
    )
    return engine, Load(tuple(progress), round(time.perf_counter() - started, 6))


def prompt_body(dialect: Dialect, model: str, text: str, *, max_tokens: int | None = None) -> bytes:
    """The minimal streaming request of `dialect` for a one-message prompt (completions: the text as given).

    An API whose requests must say how many tokens they allow (Anthropic's) is told `max_tokens`, when given.
    """
    prompt = Prompt(model=model, messages=[{"role": "user", "content": text}])
    body = dialect.request_body(prompt)
    if max_tokens is not None and "max_tokens" in body:
        body = dialect.request_body(replace(prompt, max_tokens=max_tokens))
    return _json.dumps(body, compact=False).encode()


def synthesize(
    engine: Engine,
    dialect: Dialect,
    bodies: Sequence[bytes],
    settings: Settings,
    *,
    load: Load | None = None,
    path: str | None = None,
    on_made: Callable[[Made], None] | None = None,
) -> list[Made]:
    """Run each request body on the model and return the interactions, in the order given.

    `load`, if given, is told by the first answer. Every request is checked
    before any runs: one the model cannot take raises `ModelError` naming it.
    `path` is the request path (by default the dialect's own streaming path,
    which names the model in Gemini's).
    """
    runs: list[tuple[Synthesis, list[Chunk], Request]] = []
    for n, raw in enumerate(bodies, 1):
        try:
            body = _json.parse(raw)
        except ValueError as exc:
            raise ModelError(f"request {n}: the body is not JSON ({exc})", status=400) from None
        if not isinstance(body, dict):
            raise ModelError(f"request {n}: the body is not a JSON object", status=400)
        chunks: list[Chunk] = []
        prompt = dialect.prompt(body)
        target = path or dialect.request_path(replace(prompt, model=prompt.model or engine.id))
        try:
            synthesis = Synthesis(
                engine,
                dialect,
                body,
                settings,
                _collector(chunks),
                load=load if n == 1 else None,
                path=target,
                framing=dialect.stream_framing(Request("POST", target, dialect.query)),
            )
        except ModelError as exc:
            raise ModelError(f"request {n}: {exc}", status=exc.status) from None
        headers = (("content-type", "application/json"), ("content-length", str(len(raw))))
        runs.append((synthesis, chunks, Request("POST", target, dialect.query, headers=headers, body=raw)))
    made: list[Made] = []
    for n, (synthesis, _, _) in enumerate(runs):
        # The first answer's clock starts with the model's load, as a server that loads it for a request does.
        synthesis.started = time.perf_counter() - (load.seconds if load is not None and n == 0 else 0.0)
        engine.submit(synthesis.job)
    for synthesis, chunks, request in runs:
        synthesis.done.wait()
        response = Response(synthesis.status, synthesis.headers, tuple(chunks), End.COMPLETE)
        recorded_at = datetime.now(UTC).isoformat(timespec="seconds")
        result = Made(Interaction(request, response, recorded_at), synthesis.stats)
        made.append(result)
        if on_made is not None:
            on_made(result)
    return made


def _collector(chunks: list[Chunk]) -> Callable[[float, bytes], None]:
    def sink(t: float, data: bytes) -> None:
        chunks.append(Chunk(t, data))

    return sink
