"""JSON as sse-tape reads it from requests, recordings and users: bounded, and always encodable.

Request bodies and recorded events come from anyone. `parse` refuses text
nested deeper than a limit, or (a request's body, as the server reads it)
holding more keys and values than a limit, before the standard parser reads
it (`check`, which counts on the bytes themselves: a body of 100,000 `[`
would otherwise end in a RecursionError, and one of millions of keys would
keep every walk over it busy), and `dumps`
escapes a lone surrogate (`"\\ud800"` is valid JSON text, but no UTF-8), so
that what is parsed can always be written back.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import re
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_VALUES", "STEPWISE_FROM", "TooLarge", "check", "dumps", "parse"]

#: How deeply request bodies may nest; the APIs sse-tape speaks nest a few levels.
MAX_DEPTH = 64
#: How many keys, items and containers a request's body may hold; a long conversation holds some thousands.
#: Recorded answers are not held to it: an embeddings answer holds a number per dimension.
MAX_VALUES = 100_000

# What `check` keeps of a text's bytes: the marks of its structure, and the quotes that say what is in a string.
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'"[]{}:,')))
_NOT_MARKS = bytes(sorted(set(range(256)) - set(b"[]{}:,")))
_BRACKETS = bytes.maketrans(b"{}", b"[]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# How much of a text the stepwise parser reads in one step of the C scanner, or decodes in one.
_WINDOW = 256 * 1024
#: From how long a text is worth reading `stepwise` in a thread (shorter ones are read in one step as quickly).
STEPWISE_FROM = 4 * _WINDOW
_c_scanstring: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


class TooLarge(ValueError):
    """JSON text nested deeper, or holding more keys and values, than the limits `parse` was given."""


def check(data: bytes, *, max_depth: int | None = MAX_DEPTH, max_values: int | None = MAX_VALUES) -> None:
    """Raise `TooLarge` when the JSON text `data` nests deeper than `max_depth` or holds more than `max_values`
    keys, items and containers; text that is not JSON may pass (the parser refuses it). It works on the bytes
    with a few passes of bytes methods, not a loop of Python steps, and parses nothing."""
    # Most bodies are within both bounds by their sizes alone: each mark counted below is one of the text's bytes,
    # and no text nests deeper than it has brackets.
    if (max_values is None or len(data) <= max_values) and (
        max_depth is None or data.count(b"[") + data.count(b"{") <= max_depth
    ):
        return
    # One pass, a window at a time (a thread checking a large body lets others run between windows); a body of
    # long strings leaves little.
    if len(data) <= _WINDOW:  # most bodies: one window
        marks = data.translate(None, _NOT_MARKS)
    else:
        marks = b"".join(data[n : n + _WINDOW].translate(None, _NOT_MARKS) for n in range(0, len(data), _WINDOW))
    brackets = marks.count(b"[") + marks.count(b"{")
    if (max_depth is None or brackets <= max_depth) and (max_values is None or len(marks) - brackets <= max_values):
        return  # counted with what strings hold too, and still within bounds
    # Escapes out, then everything but the structure and the quotes (UTF-8 never has these bytes inside a
    # character); what is left between two quotes is inside a string.
    marks = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    if max_values is not None and marks.count(b'"') // 2 > max_values + 1:  # each string is a key or a value
        raise TooLarge(f"JSON holds more than {max_values:,} keys and values")
    if b'"' in marks:
        marks = b"".join(marks.split(b'"')[0::2])
    # The depth first where that costs little (it says more of a text that is both), the count first elsewhere.
    for limit in ("depth", "values") if len(marks) <= 4 * (max_values or len(marks)) else ("values", "depth"):
        if limit == "depth" and max_depth is not None and _deeper(marks, max_depth):
            raise TooLarge(f"JSON nested more than {max_depth} deep")
        if limit == "values" and max_values is not None and len(marks.translate(None, b"]}")) > max_values:
            raise TooLarge(f"JSON holds more than {max_values:,} keys and values")


def _deeper(marks: bytes, depth: int) -> bool:
    """Whether the structure `marks` (brackets, braces, colons and commas) nests deeper than `depth`."""
    marks = marks.translate(_BRACKETS, b":,")
    for _ in range(depth):  # each pass takes away the innermost pairs: one level
        if not marks:
            return False
        marks = marks.replace(b"[]", b"")
    return b"[]" in marks or b"[" * (depth + 1) in marks  # deeper, or as deep and never closed


def parse(
    data: str | bytes,
    *,
    max_depth: int | None = MAX_DEPTH,
    max_values: int | None = None,
    stepwise: bool = False,
) -> Any:
    """The JSON value of `data`; raises `TooLarge` when it nests deeper than `max_depth` or holds more than
    `max_values` keys and values (see `check`), ValueError when it is not JSON.

    `stepwise` reads its structure with the standard library's Python scanner rather than its C one, and its
    long strings a window at a time: slower, but in a thread it lets the event loop run between its steps,
    where the C scanner holds the interpreter for the whole text (for texts longer than `STEPWISE_FROM`; on the
    event loop itself, the C scanner is the quicker)."""
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
            decoder.parse_string = _scanstring  # type: ignore[attr-defined]
            decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
            return decoder.decode(text)
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deep to read") from None


def _scanstring(text: str, end: int, strict: bool = True, window: int = _WINDOW) -> tuple[str, int]:
    """The standard library's `scanstring` (the string that starts at `end`, just after its quote, and where it
    ends), a window at a time for a long one: each window is read by the C scanner, its end moved back to
    before any escape it would cut in two."""
    if len(text) - end <= window:
        return _c_scanstring(text, end, strict)
    pieces: list[str] = []
    start = end
    while True:
        stop = min(start + window, len(text))
        close = _closing(text, start, stop)
        if close != -1:
            stop = close
        elif stop < len(text) and (escape := text.find("\\", stop - 6, stop)) != -1:
            stop = _run_start(text, escape, start)  # an escape is at most 6 long: none starts before
            if stop == start:  # a window of backslashes: the whole string in one step after all
                return _c_scanstring(text, end, strict)
        piece = _c_scanstring('"' + text[start:stop] + '"', 1, strict)[0]
        cut_pair = text[start] == text[start - 6] == "\\"  # two escapes met here: a surrogate pair, perhaps
        if cut_pair and pieces and "\ud800" <= pieces[-1][-1:] <= "\udbff" and "\udc00" <= piece[:1] <= "\udfff":
            high, low = ord(pieces[-1][-1]) - 0xD800, ord(piece[0]) - 0xDC00  # a surrogate pair cut in two
            pieces[-1], piece = pieces[-1][:-1] + chr(0x10000 + (high << 10) + low), piece[1:]
        pieces.append(piece)
        if close != -1:
            return "".join(pieces), close + 1
        if stop >= len(text):
            raise json.JSONDecodeError("Unterminated string starting at", text, end - 1)
        start = stop


def _closing(text: str, start: int, stop: int) -> int:
    """Where the string's closing quote is in `text[start:stop]`, or -1: the first quote no backslash escapes."""
    quote = text.find('"', start, stop)
    while quote != -1 and (quote - _run_start(text, quote, start)) % 2:
        quote = text.find('"', quote + 1, stop)
    return quote


def _run_start(text: str, at: int, start: int) -> int:
    """Where the run of backslashes just before `at` (or at it) begins, not before `start`."""
    while at > start and text[at - 1] == "\\":
        at -= 1
    return at


def dumps(obj: Any, *, compact: bool = True) -> str:
    """JSON text of `obj`, keeping non-ASCII text as it is and escaping lone surrogates."""
    separators = (",", ":") if compact else None
    text = json.dumps(obj, ensure_ascii=False, separators=separators)
    if _SURROGATE.search(text):
        return json.dumps(obj, ensure_ascii=True, separators=separators)
    return text
