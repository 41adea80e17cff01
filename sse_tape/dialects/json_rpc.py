"""What the protocols that speak JSON-RPC 2.0 over SSE share (MCP, A2A): how an error response to a request is
written (https://www.jsonrpc.org/specification#error_object)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .events import Error

__all__ = ["INTERNAL_ERROR", "error_response"]

INTERNAL_ERROR = -32603
"""JSON-RPC's code for an internal error."""

#: JSON-RPC codes are integers; the SDKs read them as such (a JSON number past 2**53 is not one to every reader).
_LARGEST = 2**53


def error_response(error: Error, id: Any, types: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The JSON-RPC error response with this `id` for `error`: its `code` where that is a whole number, else
    the code `types` gives its `type` (a protocol's own: MCP's request timeout), else an internal error's; a
    `code` that is not a number goes in the error's `data`, so that it is not lost."""
    number = (types or {}).get(error.type, INTERNAL_ERROR)
    data: dict[str, Any] | None = None
    if error.code is not None:
        try:
            given = int(error.code)
        except ValueError:
            given = None
        if given is not None and abs(given) <= _LARGEST:
            number = given
        else:
            data = {"code": error.code}
    body: dict[str, Any] = {"code": number, "message": error.message}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": id, "error": body}
