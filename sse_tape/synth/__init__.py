"""Synthesis: fresh streams from a local GGUF model, through the same event pipeline as replay.

`models` finds the model file (a path, or an installed model package
assembled once into a cache); `engine` runs it on llama.cpp token by token
(with `constraints`, what keeps a tool call to its schema, the only module
that imports llama-cpp-python); `generation` cuts its text
into reasoning, text and tool calls; `pipeline` turns one request into the
dialect's stream as the tokens come; `batch` makes cassettes of many
requests (`sse-tape synth`); `live` answers requests on a server
(`serve --model`, the `synth` miss policy).

Only `models` and `generation` import without llama-cpp-python; call
`require()` before importing the others, for a clear message when it is not
installed.
"""

from __future__ import annotations

from .._exceptions import ModelError

__all__ = ["require"]


def require() -> None:
    """Raise `ModelError` saying how to install llama-cpp-python, unless it is installed."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        raise ModelError("synthesis needs llama-cpp-python: pip install 'sse-tape[synth]'") from None
