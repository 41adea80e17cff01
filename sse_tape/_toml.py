"""Writes cassette documents as TOML that a reviewer can read.

tomli-w writes every string as a basic string, so each quote in a JSON chunk
reads as `\\"`; and its multi-line mode writes CRLF raw, which TOML readers
may normalize to LF (tomllib does), losing bytes. Here strings holding quotes,
backslashes or line breaks become multi-line literal strings, kept exactly as
they are with no escapes at all, whenever TOML allows; text with other control
characters (a CR, say) becomes a multi-line basic string with just those
escaped. Numbers, keys and arrays are left to tomli-w.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["dumps"]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# Control characters TOML forbids raw in literal strings (tab and LF are allowed).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def dumps(doc: Mapping[str, Any]) -> str:
    """TOML text for a document of tables, arrays of tables, and values."""
    lines: list[str] = []
    _table(lines, doc, ())
    return "\n".join(lines) + "\n"


def _table(lines: list[str], table: Mapping[str, Any], path: tuple[str, ...]) -> None:
    nested = []
    for key, value in table.items():
        kind = type(value)
        if kind is str:  # the common cases first: a cassette has tens of thousands of chunks
            lines.append(f"{_key(key)} = {_string(value)}")
        elif kind is float or kind is int:
            lines.append(f"{_key(key)} = {value}")  # as tomli-w writes them
        elif isinstance(value, Mapping) or (value and isinstance(value, list) and isinstance(value[0], Mapping)):
            nested.append((key, value))
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in nested:
        inner = (*path, key)
        dotted = ".".join(map(_key, inner))
        if isinstance(value, Mapping):
            lines.append(f"\n[{dotted}]")  # a blank line before each header
            _table(lines, value, inner)
            continue
        header = f"\n[[{dotted}]]"
        for item in value:
            lines.append(header)
            _table(lines, item, inner)


@functools.lru_cache(maxsize=1024)
def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def _value(value: Any) -> str:
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list) and all(isinstance(v, str) and "\n" not in v for v in value):
        return "[" + ", ".join(map(_string, value)) + "]"  # a short list of words, on one line
    import tomli_w  # only when writing: serving never needs it

    return tomli_w.dumps({"v": value}).removeprefix("v = ").rstrip("\n")


def _string(s: str) -> str:
    if not _CONTROL.search(s):
        if '"' not in s and "\\" not in s and "\n" not in s:
            return f'"{s}"'  # plain text: nothing to escape
        if "\n" not in s and "'" not in s:
            return f"'{s}'"
        if "'''" not in s and not s.endswith("'"):
            return f"'''\n{s}'''"  # the newline after the opening quotes is not part of the string
    # A multi-line basic string, line breaks kept, every other control character escaped.
    text = s.replace("\\", "\\\\")
    text = _CONTROL.sub(lambda m: "\\r" if m[0] == "\r" else f"\\u{ord(m[0]):04x}", text)
    if '"""' in text or text.endswith('"'):
        text = text.replace('"', '\\"')
    return f'"""\n{text}"""'
