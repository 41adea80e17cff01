"""The models a server's recordings name, listed as each API lists them.

Clients and frameworks often ask which models there are before they ask
anything else. `Catalog` answers a request for an API's model list (its
dialect's `Generation.models_list`: OpenAI's `GET /v1/models`, LM Studio's
`GET /api/v1/models`, Gemini's `GET /v1beta/models`, and `/v1/models` with a
Google API key), and for one model in it (`…/models/{id}`), in that
API's shape, with the models the recordings' requests name, under any path
prefix (a router's `/proj/x/v1/models` too). It stands behind replay: a
recording of such a request answers it first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from . import _json
from .cassette import Chunk, Request, Response
from .dialects import DIALECTS, Generation
from .journal import Answered
from .plan import Plan
from .responder import Attached, Exchange, Host

__all__ = ["Catalog", "models_of"]


def models_of(host: Host, api: Generation) -> list[str]:
    """The models the recordings' requests name, as `api` reads them (`Generation.recorded_model`: OpenAI's
    the body's `model`, Gemini's the path's), in the order they first appear."""
    names: dict[str, None] = {}
    for recording in host.matcher.recordings:
        model = api.recorded_model(recording.interaction.request)
        if model:
            names[model] = None
    return list(names)


class Catalog(Attached):
    """A responder listing the recordings' models, and `more` (a live model's), as the API the path names lists them."""

    def __init__(self, more: Iterable[str] = ()) -> None:
        super().__init__()
        self.more = tuple(more)

    async def respond(self, exchange: Exchange) -> web.StreamResponse | None:
        server = self.host
        request = exchange.request
        path = request.path.rstrip("/")
        if request.method not in ("GET", "HEAD"):
            return None
        found = _lister(request)
        if found is None:
            return None
        api, list_path = found
        exchange.dialect = api  # an unknown model's 404 in the words of the list's API (`/v1/models`: Gemini's too)
        models = list(dict.fromkeys([*self.more, *models_of(server, api)]))
        what = f"{len(models)} model{'s'[: len(models) != 1]}"
        if path.endswith(list_path):
            body: dict[str, Any] = api.models_json(models)
        elif list_path + "/" in path:
            wanted = unquote(path.split(list_path + "/", 1)[1])
            if wanted not in models:
                return await server.error(
                    exchange, 404, f"no model {wanted!r} here: {', '.join(models)}", "model_not_found"
                )
            body, what = api.model_json(wanted), f"the model {wanted}"
        else:
            return None
        response = Response(200, (("content-type", "application/json"),), (Chunk(0.0, _json.dumps(body).encode()),))
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


def _lister(request: Request) -> tuple[Generation, str] | None:
    """The API whose model list `request` asks for, and its list path: of those that say it does
    (`Generation.models_list`), one it says so of beyond its path (`models_claimed`: Gemini's key on
    `/v1/models`), else the one with the longest list path (LM Studio's `/api/v1/models` holds OpenAI's
    `/v1/models`), else the first."""
    listers = [(d, p) for d in DIALECTS.values() if isinstance(d, Generation) and (p := d.models_list(request))]
    return max(listers, key=lambda found: (found[0].models_claimed(request), len(found[1])), default=None)
