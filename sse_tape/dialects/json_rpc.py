"""What the protocols that speak JSON-RPC 2.0 over SSE share (MCP, A2A): how their matchers compare a request
with a recorded one and say why they differ (`matched`), and how an error response to a request is written
(https://www.jsonrpc.org/specification#error_object)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .. import _json
from ..cassette import Request
from ..cassette.model import agrees_as_recorded
from .events import Error

__all__ = ["INTERNAL_ERROR", "MISSING", "error_response", "matched", "matched_part", "shown"]

MISSING: Any = object()
"""What a member a message does not carry is looked up as, to tell it from a `null` one."""

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


def matched(
    request: Request, recorded: Request, comparable: Callable[[Any], Any], explain: Callable[[Any, Any], str | None]
) -> str | None:
    """A JSON-RPC protocol's matcher: None when `request`'s body agrees with `recorded`'s once `comparable` has
    made each as it is compared (the ids its client mints left out), else why not: the method first, then what
    `explain` says of the two comparable bodies, else `body differs`. Bodies that are not JSON are compared
    whole."""
    here, there = request.json(), recorded.json()
    if here is None and there is None:
        return None if request.body == recorded.body else "body differs"
    a, b = comparable(here), comparable(there)
    if agrees_as_recorded(a, b):
        return None
    if isinstance(a, dict) and isinstance(b, dict) and a.get("method") != b.get("method"):
        return f"method is {shown(a.get('method', MISSING))}, recorded {shown(b.get('method', MISSING))}"
    return explain(a, b) or "body differs"


def matched_part(request: Request, comparable: Callable[[Any], Any]) -> Any:
    """What `matched` compares of a request, as data: its JSON value once `comparable` has made it as it is
    compared, or its bytes where it has none (a body that is not JSON, or is `null`). Two requests it finds agree
    have equal parts, unless the recorded one holds a redacted value (`cassette.model.holds_redacted`)."""
    value = request.json()
    return request.body if value is None else comparable(value)


def shown(value: Any) -> str:
    """A JSON value as a miss's explanation shows it: its JSON, cut at 60 characters; `absent` for `MISSING`."""
    text = _json.dumps(value) if value is not MISSING else "absent"
    return text if len(text) <= 60 else text[:57] + "..."
