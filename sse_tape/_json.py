"""JSON as sse-tape reads it from requests, recordings and users: bounded, and always encodable.

Request bodies and recorded events come from anyone. `parse` refuses text
nested deeper than a limit, or holding more keys and values than a limit,
before the standard parser reads it (`check`, which counts on the bytes
themselves: a body of 100,000 `[` would otherwise end in a RecursionError,
and one of millions of keys would keep every walk over it busy), and `dumps`
escapes a lone surrogate (`"\\ud800"` is valid JSON text, but no UTF-8), so
that what is parsed can always be written back.
"""

from __future__ import annotations

import json
import json.scanner
import re
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_VALUES", "TooLarge", "check", "dumps", "parse"]

#: How deeply request bodies may nest; the APIs sse-tape speaks nest a few levels.
MAX_DEPTH = 64
#: How many keys, items and containers a JSON text may hold; a long conversation holds some thousands.
MAX_VALUES = 100_000

# What `check` keeps of a text's bytes: the marks of its structure, and the quotes that say what is in a string.
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'"[]{}:,')))
_BRACKETS = bytes.maketrans(b"{}", b"[]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class TooLarge(ValueError):
    """JSON text nested deeper, or holding more keys and values, than the limits `parse` was given."""


def check(data: bytes, *, max_depth: int | None = MAX_DEPTH, max_values: int | None = MAX_VALUES) -> None:
    """Raise `TooLarge` when the JSON text `data` nests deeper than `max_depth` or holds more than `max_values`
    keys, items and containers; text that is not JSON may pass (the parser refuses it). It works on the bytes
    with a few passes of bytes methods, not a loop of Python steps, and parses nothing."""
    brackets = data.count(b"[") + data.count(b"{")
    values = brackets + data.count(b":") + data.count(b",")
    if (max_depth is None or brackets <= max_depth) and (max_values is None or values <= max_values):
        return  # counted with what strings hold too, and still within bounds
    # Escapes out, then everything but the structure and the quotes (UTF-8 never has these bytes inside a
    # character); what is left between two quotes is inside a string.
    marks = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    if max_values is not None and marks.count(b'"') // 2 > max_values + 1:  # each string is a key or a value
        raise TooLarge(f"JSON holds more than {max_values:,} keys and values")
    if b'"' in marks:
        marks = b"".join(marks.split(b'"')[0::2])
    if max_values is not None:
        values = marks.count(b"[") + marks.count(b"{") + marks.count(b":") + marks.count(b",")
        if values > max_values:
            raise TooLarge(f"JSON holds more than {max_values:,} keys and values")
    if max_depth is not None:
        marks = marks.translate(_BRACKETS, b":,")
        for _ in range(max_depth):  # each pass takes away the innermost pairs: one level
            if not marks:
                return
            marks = marks.replace(b"[]", b"")
        if b"[]" in marks or b"[" * (max_depth + 1) in marks:  # deeper, or as deep and never closed
            raise TooLarge(f"JSON nested more than {max_depth} deep")


def parse(
    data: str | bytes,
    *,
    max_depth: int | None = MAX_DEPTH,
    max_values: int | None = MAX_VALUES,
    stepwise: bool = False,
) -> Any:
    """The JSON value of `data`; raises `TooLarge` when it nests deeper than `max_depth` or holds more than
    `max_values` keys and values (see `check`), ValueError when it is not JSON.

    `stepwise` reads its structure with the standard library's Python scanner rather than its C one: slower,
    but in a thread it lets the event loop run between its steps, where the C scanner holds the interpreter
    for the whole text."""
    if isinstance(data, bytes):
        check(data, max_depth=max_depth, max_values=max_values)
        text = data.decode("utf-8")
    else:
        text = data
        marks = text.count("[") + text.count("{")
        deep = max_depth is not None and marks > max_depth
        if deep or (max_values is not None and marks + text.count(":") + text.count(",") > max_values):
            check(text.encode("utf-8", "surrogatepass"), max_depth=max_depth, max_values=max_values)
    try:
        if stepwise:
            decoder = json.JSONDecoder()
            decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
            return decoder.decode(text)
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
