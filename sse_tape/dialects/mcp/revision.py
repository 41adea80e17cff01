"""Which MCP revision a recording speaks, as it says itself: `revision_of`, and whether it is `stateless`.

Revision 2025-11-25 negotiates its version once, in `initialize` (the
client asks for one in `params.protocolVersion`, the server answers with
the one it chose), and the client sends it after in the
`Mcp-Protocol-Version` header
(https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#protocol-version-header).
Revision 2026-07-28 has no `initialize`: every request carries its version
in `params._meta` (`io.modelcontextprotocol/protocolVersion`) and in the
header, and no session (no `Mcp-Session-Id`). So a recorded exchange says
its revision, and a cassette which ones it holds, with no note beside it.
"""

from __future__ import annotations

import re
from typing import Any

from ... import _json
from ...cassette import Interaction, Request

__all__ = ["STATELESS", "VERSION_META", "method_of", "revision_of", "stateless"]

STATELESS = "2026-07-28"
"""The first revision with no `initialize` and no sessions: its version and capabilities in each request's `_meta`."""

VERSION_META = "io.modelcontextprotocol/protocolVersion"
"""The `params._meta` key that carries a request's protocol version, from revision 2026-07-28 on."""

_HEADER = "mcp-protocol-version"
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def stateless(version: str) -> bool:
    """Whether revision `version` (a date, `YYYY-MM-DD`) is 2026-07-28 or later: stateless, with no sessions;
    a version that is no date is not."""
    return _DATE.fullmatch(version) is not None and version >= STATELESS


def revision_of(interaction: Interaction) -> str | None:
    """The MCP revision an exchange speaks: the one its request's `_meta` or `Mcp-Protocol-Version` header
    names, or, for `initialize`, the one the server chose (else the one the client asked for); None when it
    names none (a client's first request of a revision that the recording does not say)."""
    request = interaction.request
    body = request.json() if request.body else None
    params = body.get("params") if isinstance(body, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    if isinstance(meta, dict) and isinstance(meta.get(VERSION_META), str):
        return str(meta[VERSION_META])
    if (header := request.header(_HEADER)) is not None:
        return header
    if isinstance(body, dict) and body.get("method") == "initialize":
        chosen = _chosen(interaction)
        if chosen is not None:
            return chosen
        if isinstance(params, dict) and isinstance(params.get("protocolVersion"), str):
            return str(params["protocolVersion"])
    return None


def method_of(request: Request) -> str | None:
    """The JSON-RPC method a request calls, with the tool, prompt or resource it names (`tools/call add`)."""
    body = request.json() if request.body else None
    if not isinstance(body, dict) or not isinstance(body.get("method"), str):
        return None
    params = body.get("params")
    named = next(
        (params[k] for k in ("name", "uri") if isinstance(params, dict) and isinstance(params.get(k), str)), None
    )
    return f"{body['method']} {named}" if named is not None else str(body["method"])


def _chosen(interaction: Interaction) -> str | None:
    """The protocol version an `initialize` answer chose: its JSON's, or its stream's response's."""
    response = interaction.response
    messages: list[Any] = []
    if events := response.events():
        for _, event in events:
            try:
                messages.append(_json.parse(event.data, max_depth=None))
            except ValueError:
                continue
    elif response.body:
        try:
            messages.append(_json.parse(response.body, max_depth=None))
        except ValueError:
            return None
    for message in messages:
        result = message.get("result") if isinstance(message, dict) else None
        if isinstance(result, dict) and isinstance(result.get("protocolVersion"), str):
            return str(result["protocolVersion"])
    return None
