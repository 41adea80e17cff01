"""JSON as sse-tape reads it from requests, recordings and users: bounded, and always encodable.

Request bodies and recorded events come from anyone. `parse` refuses text
nested deeper than a limit before the standard parser recurses into it (a
body of 100,000 `[` would otherwise end in a RecursionError), and `dumps`
escapes a lone surrogate (`"\\ud800"` is valid JSON text, but no UTF-8), so
that what is parsed can always be written back.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MAX_DEPTH", "dumps", "parse"]

#: How deeply request bodies may nest; the APIs sse-tape speaks nest a few levels.
MAX_DEPTH = 64

_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def parse(data: str | bytes, *, max_depth: int | None = MAX_DEPTH) -> Any:
    """The JSON value of `data`; raises ValueError when it is not JSON or nests deeper than `max_depth`."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    if max_depth is not None and (text.count("[") + text.count("{")) > max_depth:
        depth = 0
        for token in _TOKENS.finditer(text):
            mark = token[0]
            if mark in "[{":
                depth += 1
                if depth > max_depth:
                    raise ValueError(f"JSON nested more than {max_depth} deep")
            elif mark in "]}":
                depth -= 1
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deep to read") from None


def dumps(obj: Any, *, compact: bool = True) -> str:
    """JSON text of `obj`, keeping non-ASCII text as it is and escaping lone surrogates."""
    separators = (",", ":") if compact else None
    text = json.dumps(obj, ensure_ascii=False, separators=separators)
    if _SURROGATE.search(text):
        return json.dumps(obj, ensure_ascii=True, separators=separators)
    return text
