"""Loading a local model from the words `model_options` added (serve --model, record --model, synth).

Synthesis is an optional extra (sse-tape[synth]): it is imported when a model is opened, and its absence
is one line saying what to install.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .._exceptions import ConfigError
from .terminal import Progress, log

__all__ = ["open_model", "synthesizer"]


def open_model(spec: str, words: dict[str, Any], seed: int | None) -> tuple[Any, Any, Any]:
    """The engine (loaded, with progress on the terminal), how it loaded, and the sampling settings."""
    from ..synth import require

    require()
    from ..synth.batch import open_model as open_engine
    from ..synth.pipeline import Settings

    think = words["think"]
    markers = None if think == "none" else tuple(think.split(","))
    if markers is not None and (len(markers) != 2 or not all(markers)):
        raise ConfigError(f"--think {think!r}: write the two markers as OPEN,CLOSE, or none")
    template = words["chat_template"]
    if template is not None and (Path(template).is_file() or os.sep in template):  # a file, not a name
        try:
            template = Path(template).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--chat-template {template}: cannot read it: {exc.strerror or exc}") from None
    elif template is not None:  # a name: refused now, not at the first request after a load
        from ..synth.engine import builtin_templates

        if template not in (names := builtin_templates()):
            raise ConfigError(
                f"--chat-template {template}: no such file, and not one of llama.cpp's templates: {', '.join(names)}"
            )
    settings = Settings(
        temperature=words["temperature"],
        top_k=words["top_k"],
        top_p=words["top_p"],
        min_p=words["min_p"],
        seed=seed,
        max_tokens=words["max_tokens"],
        stop=tuple(words["stop"]),
        think=markers,
    )
    with Progress("assembling the model") as assembling, Progress("loading the model") as loading:
        engine, load = open_engine(
            spec,
            gpu_layers=words["gpu_layers"],
            ctx=words["ctx"],
            threads=words["threads"],
            parallel=words["parallel"],
            chat_template=template,
            on_assemble=assembling.at,
            on_load=loading.fraction,
        )
    where = f"{engine.gpu_layers} of {engine.layers + 1} layers on the GPU" if engine.gpu_layers else "on the CPU"
    log(f"loaded {engine.name} in {load.seconds:.2f} s, {where}, chat template: {engine.template_source}")
    return engine, load, settings


def synthesizer(model: str, words: dict[str, Any], seed: int, max_queue: int) -> Any:
    """The responder that answers with the model, loaded now (a bad model stops us before we listen)."""
    engine, _, settings = open_model(model, words, seed)
    from ..synth.live import Synthesizer

    return Synthesizer(engine, settings, max_queue=max_queue)
