"""What keeps output constrained to a tool's JSON schema valid JSON: the grammar's strings, and whole UTF-8 characters.

Three holes let a forced tool call write arguments that no JSON parser reads:

- llama-cpp-python's `json_schema_to_gbnf` (a port of llama.cpp's
  json-schema-to-grammar) lets a string hold any character but `"` and `\\`,
  raw control characters included, which JSON forbids (RFC 8259, section 7);
  llama.cpp's own converter excludes `\\x00-\\x1F` and `\\x7F`.
- It writes a constant (an `enum` or `const` value, a property's name) into
  the grammar without escaping its backslashes, so one whose JSON holds an
  escape (`"a\\"b"`, `"\\b"`) makes a grammar llama.cpp refuses, or one
  that allows what the schema does not.
- llama.cpp's grammar reads a token's bytes as UTF-8 without checking it
  well-formed: three bytes that decode to nothing (an overlong `E0 80 80`)
  count as no character at all, and a surrogate's `ED A0 80` as one. Such bytes
  become replacement characters in the text, which then breaks a string's
  `maxLength`, or any client that checks its UTF-8.

`json_schema_grammar` converts with llama.cpp's rules for the first two (and
keeps `\\u` escapes off the UTF-16 surrogates, which no UTF-8 text holds);
`Utf8Guard` says which tokens would make the output ill-formed after what it
ends in, so the sampler never picks one (the Unicode Standard, table 3-7).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from llama_cpp.llama_grammar import SchemaConverter

__all__ = ["Utf8Guard", "json_schema_grammar", "unfinished"]

# llama-cpp-python's rules (llama_cpp/llama_grammar.py: PRIMITIVE_RULES["char"], DOT), and what each becomes.
_FIXES = {
    r'[^"\\] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])': (
        r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F] | [dD] [0-7]) '
        r"[0-9a-fA-F] [0-9a-fA-F])"
    ),
    # A pattern's `.`, inside a JSON string: no raw control character there either, nor an unescaped quote.
    r"[^\x0A\x0D]": r'[^"\\\x7F\x00-\x1F]',
}
_LITERAL_ESCAPES = {"\r": "\\r", "\n": "\\n", '"': '\\"', "\\": "\\\\"}
_LITERAL_ESCAPE = re.compile(r'[\r\n"\\]')


class _Converter(SchemaConverter):
    """llama-cpp-python's converter, with llama.cpp's rules for strings and literals."""

    def _format_literal(self, literal: str) -> str:
        return '"' + _LITERAL_ESCAPE.sub(lambda m: _LITERAL_ESCAPES[m.group(0)], literal) + '"'

    def _add_rule(self, name: str, rule: str) -> str:
        return str(super()._add_rule(name, _FIXES.get(rule, rule)))  # type: ignore[no-untyped-call]


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """The GBNF grammar of the JSON values that follow `schema`, as `json_schema_to_gbnf` makes it, with
    strings that hold only what a JSON string may. Raises what the converter raises for a schema it cannot take."""
    # llama-cpp-python's converter has no type hints.
    converter = _Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)  # type: ignore[no-untyped-call]
    converter.visit(converter.resolve_refs(schema, "stdin"), "")  # type: ignore[no-untyped-call]
    return str(converter.format_grammar())  # type: ignore[no-untyped-call]


# The bytes that may follow each lead byte: how many, and the range of the first (the others are 80..BF).
_LEADS: dict[int, tuple[int, int, int]] = {
    **{b: (1, 0x80, 0xBF) for b in range(0xC2, 0xE0)},
    0xE0: (2, 0xA0, 0xBF),
    **{b: (2, 0x80, 0xBF) for b in (*range(0xE1, 0xED), 0xEE, 0xEF)},
    0xED: (2, 0x80, 0x9F),  # not the surrogates
    0xF0: (3, 0x90, 0xBF),
    **{b: (3, 0x80, 0xBF) for b in range(0xF1, 0xF4)},
    0xF4: (3, 0x80, 0x8F),  # nothing past U+10FFFF
}


def unfinished(data: bytes) -> bytes | None:
    """The bytes of the character `data` ends in the middle of (empty if none), or None when `data` is not the
    start of well-formed UTF-8."""
    i, n = 0, len(data)
    while i < n:
        byte = data[i]
        if byte < 0x80:
            i += 1
            continue
        lead = _LEADS.get(byte)
        if lead is None:
            return None
        need, low, high = lead
        if i + 1 < n and not low <= data[i + 1] <= high:
            return None
        if any(not 0x80 <= b <= 0xBF for b in data[i + 2 : i + 1 + need]):
            return None
        if i + 1 + need > n:
            return data[i:]
        i += 1 + need
    return b""


class Utf8Guard:
    """Which tokens of a vocabulary (each token's bytes, by id) cannot come next in well-formed UTF-8."""

    def __init__(self, pieces: Sequence[bytes]) -> None:
        self._pieces = pieces
        # Only a token that starts with a continuation byte can finish a character.
        self._continuing = [i for i, piece in enumerate(pieces) if piece and 0x80 <= piece[0] <= 0xBF]
        self._banned: dict[bytes, npt.NDArray[np.intp]] = {}

    def banned(self, pending: bytes) -> npt.NDArray[np.intp]:
        """The ids of the tokens that cannot follow output ending in `pending`, the start of a character (or
        nothing). None are banned when no token could finish the character: the sampler must pick one."""
        found = self._banned.get(pending)
        if found is None:
            allowed = np.zeros(len(self._pieces), dtype=bool)
            candidates = self._continuing if pending else range(len(self._pieces))
            for i in candidates:
                piece = self._pieces[i]
                allowed[i] = (not pending and piece.isascii()) or unfinished(pending + piece) is not None
            found = np.flatnonzero(~allowed) if allowed.any() else np.zeros(0, dtype=np.intp)
            self._banned[pending] = found
        return found
