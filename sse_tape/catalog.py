"""The models a server's recordings name, listed as each API lists them.

Clients and frameworks often ask which models there are before they ask
anything else. `Catalog` answers `GET /v1/models` (and `/v1/models/{id}`)
as OpenAI does, and `GET /api/v1/models` (and `/api/v1/models/{key}`) as LM Studio does, with the models
the recordings' requests name, under any path prefix (a router's
`/proj/x/v1/models` too). It stands behind replay: a recording of such a
request answers it first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from . import _json
from .cassette import Chunk, Response
from .plan import Plan
from .responder import Attached, Exchange, Host

__all__ = ["Catalog", "models_of"]

_OPENAI_LIST = "/v1/models"
_LMSTUDIO_LIST = "/api/v1/models"
# What an LM Studio entry says of a model it knows nothing more of.
_CONTEXT_LENGTH = 4096


def models_of(host: Host) -> list[str]:
    """The models the recordings' requests name, in the order they first appear."""
    names: dict[str, None] = {}
    for recording in host.state.recordings:
        body = recording.interaction.request.json()
        model = body.get("model") if isinstance(body, dict) else None
        if isinstance(model, str) and model:
            names[model] = None
    return list(names)


class Catalog(Attached):
    """A responder listing the recordings' models, and `more` (a live model's), in OpenAI's shape or LM Studio's."""

    def __init__(self, more: Iterable[str] = ()) -> None:
        super().__init__()
        self.more = tuple(more)

    async def respond(self, exchange: Exchange) -> web.StreamResponse | None:
        server = self.host
        request = exchange.request
        path = request.path.rstrip("/")
        if request.method not in ("GET", "HEAD") or _OPENAI_LIST not in path:
            return None
        models = list(dict.fromkeys([*self.more, *models_of(server)]))
        what = f"{len(models)} model{'s'[: len(models) != 1]}"
        lmstudio = _LMSTUDIO_LIST in path
        list_path = _LMSTUDIO_LIST if lmstudio else _OPENAI_LIST
        shape = _lmstudio_model if lmstudio else _openai_model
        if path.endswith(list_path):
            body: dict[str, Any] = (
                {"models": [shape(m) for m in models]}
                if lmstudio
                else {"object": "list", "data": [shape(m) for m in models]}
            )
        elif list_path + "/" in path:
            wanted = unquote(path.split(list_path + "/", 1)[1])
            if wanted not in models:
                return server.error(exchange, 404, f"no model {wanted!r} here: {', '.join(models)}", "model_not_found")
            body, what = shape(wanted), f"the model {wanted}"
        else:
            return None
        response = Response(200, (("content-type", "application/json"),), (Chunk(0.0, _json.dumps(body).encode()),))
        from .incidents import Answered  # here, not above: a server that is never asked for models never needs it

        server.journal.add(
            Answered(
                request=exchange.number,
                method=request.method,
                path=request.path,
                status=200,
                what=what,
            )
        )
        return await server.send(exchange, Plan.of(response, [0.0], 0.0))


def _openai_model(name: str) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": 0,
        "owned_by": name.partition("/")[0] if "/" in name else "sse-tape",
    }


def _lmstudio_model(name: str) -> dict[str, Any]:
    return {
        "type": "llm",
        "publisher": name.partition("/")[0] if "/" in name else "sse-tape",
        "key": name,
        "display_name": name,
        "architecture": None,
        "quantization": None,
        "size_bytes": 0,
        "params_string": None,
        "loaded_instances": [{"id": name, "config": {"context_length": _CONTEXT_LENGTH}}],
        "max_context_length": _CONTEXT_LENGTH,
        "format": None,
    }
