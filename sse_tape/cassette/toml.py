"""The TOML serializer: cassette documents written as TOML that a reviewer can read, and read back fast.

tomli-w writes every string as a basic string, so each quote in a JSON chunk
reads as `\\"`; and its multi-line mode writes CRLF raw, which TOML readers
may normalize to LF (tomllib does), losing bytes. Here strings holding quotes,
backslashes or line breaks become multi-line literal strings, kept exactly as
they are with no escapes at all, whenever TOML allows; text with other control
characters (a CR, say) becomes a multi-line basic string with just those
escaped. Numbers, keys and arrays are left to tomli-w.

A stream's chunks may come as `TextTables`, an array of like tables kept as columns (as a cassette has
them in memory and the parsed-TOML cache keeps them), and are written from the columns: tens of thousands
of rows in a few passes in C, with no table nor string made for each.

`parse` reads a file with `tomllib`'s semantics, refusing what nests too deep for it first. `loads`, which
it tries first, finds the chunks' tables apart from `tomllib` (which looks at each character in Python, and
would spend nearly all of its time on them), and reads the lines of the other tables apart from it where
each is one this module writes (`read_heads`).
"""

from __future__ import annotations

import functools
import json
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby, repeat
from typing import Any, cast

import tomli_w

from .._exceptions import CassetteFormatError

__all__ = ["TextTables", "encode", "expand", "interaction_chunks", "loads", "parse", "read_heads"]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
# Control characters TOML forbids raw in literal strings (tab and LF are allowed).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class TextTables:
    """An array of tables that each hold just `t`, a float, and `text`, a string, kept as two columns:
    `t`, the floats, and `text`, each string's UTF-8 bytes (a stream's chunks, as a cassette holds them
    and the parsed-TOML cache keeps them). Never empty."""

    t: list[float]
    text: list[bytes]

    def __len__(self) -> int:
        return len(self.t)

    def tables(self) -> list[dict[str, Any]]:
        """The tables, as `tomllib` reads them from what `encode` writes."""
        return [{"t": t, "text": text.decode()} for t, text in zip(self.t, self.text, strict=True)]

    @classmethod
    def of(cls, tables: list[Any]) -> TextTables | None:
        """The tables as columns; None unless there are some and each holds `t`, a float, then `text`, a
        string, and nothing else."""
        times, texts = [], []
        for table in tables:
            if type(table) is not dict or len(table) != 2 or next(iter(table)) != "t":
                return None
            t, text = table["t"], table.get("text")
            if type(t) is not float or type(text) is not str:
                return None
            times.append(t)
            texts.append(text)
        if not times:
            return None
        try:
            return cls(times, [text.encode() for text in texts])
        except UnicodeEncodeError:  # a lone surrogate, which tomllib never gives: kept as tables
            return None


def encode(doc: Mapping[str, Any], *, by_column: bool = True) -> bytes:
    """The TOML text, in UTF-8, of a document of tables, arrays of tables (or `TextTables`), and values.

    An array of like tables (a stream's chunks) is written a column at a time; `by_column=False` writes
    every array one table at a time instead, the same text more slowly: what the column writers are held to.
    """
    lines: list[str | bytes] = []  # bytes: the rows of a `TextTables`, written as bytes from its columns
    _table(lines, doc, (), by_column)
    pieces: list[bytes] = []
    for kind, group in groupby(lines, type):
        if kind is bytes:
            pieces += cast("Iterator[bytes]", group)
        else:
            pieces.append("\n".join(cast("Iterator[str]", group)).encode())
    pieces.append(b"")  # the line break at the end
    return b"\n".join(pieces)


def _table(lines: list[str | bytes], table: Mapping[str, Any], path: tuple[str, ...], by_column: bool) -> None:
    nested = []
    for key, value in table.items():
        kind = type(value)
        if kind is str:  # the common cases first: a cassette has tens of thousands of chunks
            lines.append(f"{_key(key)} = {_string(value)}")
        elif kind is float or kind is int:
            lines.append(f"{_key(key)} = {value}")  # as tomli-w writes them
        elif (
            kind is dict
            or kind is TextTables
            or (kind is list and value and type(value[0]) is dict)
            or isinstance(value, Mapping)
            or (value and isinstance(value, list) and isinstance(value[0], Mapping))
        ):
            nested.append((key, value))
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in nested:
        inner = (*path, key)
        dotted = ".".join(map(_key, inner))
        if type(value) is dict or isinstance(value, Mapping):
            lines.append(f"\n[{dotted}]")  # a blank line before each header
            _table(lines, value, inner, by_column)
            continue
        header = f"\n[[{dotted}]]"
        if type(value) is TextTables:
            if by_column and (block := _text_rows(header, value)) is not None:
                lines.append(block)
                continue
            value = value.tables()
        if by_column and (rows := _flat_tables(header, value)) is not None:
            lines += rows
            continue
        for item in value:
            lines.append(header)
            _table(lines, item, inner, by_column)


def _text_rows(header: str, tables: TextTables) -> bytes | None:
    """The lines of `tables` as `_flat_tables` writes them, joined, in UTF-8: None unless every text ends
    with a line break and none holds `'''` nor a control character (as a stream's chunks do), so that each
    is written as a multi-line literal string, as it is."""
    texts = tables.text
    if not all(map(bytes.endswith, texts, repeat(b"\n"))):  # then each has a line break and no quote last
        return None
    joined = b"".join(texts)
    if b"'''" in joined or len(joined.translate(None, _CONTROL_BYTES)) != len(joined):
        return None
    row = header.replace("%", "%%").encode() + b"\nt = %a\ntext = '''\n%b'''"
    values: list[float | bytes] = [*tables.t, *texts]
    values[::2], values[1::2] = tables.t, texts  # each row's time, then its text
    return b"\n".join(repeat(row, len(texts))) % tuple(values)  # %a of a float is its repr


def _flat_tables(header: str, tables: list[Any]) -> Iterator[str] | None:
    """The lines of an array of tables that all hold the same keys, in the same order, each a string or a
    number (a cassette's chunks), written as `_table` writes them but a column at a time; None for any
    other array. Each step is a pass in C over the array: a cassette has tens of thousands of chunks."""
    if set(map(type, tables)) != {dict}:
        return None
    key_orders = set(map(tuple, tables))
    if len(key_orders) != 1:
        return None
    [keys] = key_orders
    if not keys:
        return None
    # Each row: the text before its first value, the value, the text between it and the next, ... the end.
    parts: list[Iterable[str]] = []
    before = header
    for key, column in zip(keys, zip(*map(dict.values, tables), strict=True), strict=True):
        kinds = set(map(type, column))
        if kinds == {str} and _literals(column):
            parts += [repeat(f"{before}\n{_key(key)} = '''\n"), column]  # as `_string` writes each of them
            before = "'''"
            continue
        if kinds == {str}:
            parts += [repeat(f"{before}\n{_key(key)} = "), _strings(column)]
        elif kinds <= {float, int}:
            parts += [repeat(f"{before}\n{_key(key)} = "), map(repr, column)]  # what an f-string writes too
        else:
            return None
        before = ""
    parts.append(repeat(before))
    return map("".join, zip(*parts, strict=False))  # as long as the columns: the rest repeat


def _literals(texts: Sequence[str]) -> bool:
    """Whether `_string` writes every one of the texts as a multi-line literal string: each has a line
    break, no control character, no `'''`, and does not end with a quote (as most chunks of a stream do).
    Each check is one pass in C."""
    if any(map(str.endswith, texts, repeat("'"))) or not all(map(str.__contains__, texts, repeat("\n"))):
        return False
    joined = "".join(texts).encode("utf-8", "surrogatepass")  # a lone surrogate is refused later, when encoded
    # Found in bytes, where searching is quicker; or `'''` only across two texts: then `_string` looks at each.
    return b"'''" not in joined and len(joined.translate(None, _CONTROL_BYTES)) == len(joined)


@functools.lru_cache(maxsize=1024)
def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def _value(value: Any) -> str:
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list) and all(isinstance(v, str) and "\n" not in v for v in value):
        return "[" + ", ".join(map(_string, value)) + "]"  # a short list of words, on one line

    return tomli_w.dumps({"v": value}).removeprefix("v = ").rstrip("\n")


# The control characters of `_CONTROL` as UTF-8 bytes, which no other character's encoding holds.
_CONTROL_BYTES = bytes([*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F])


def _strings(texts: Sequence[str]) -> list[str]:
    """`_string` of each text, with one check for control characters over them all: a regular expression
    looks at each character in Python's loop, `bytes.translate` in C's."""
    joined = "".join(texts).encode("utf-8", "surrogatepass")  # a lone surrogate is refused later, when encoded
    if len(joined.translate(None, _CONTROL_BYTES)) != len(joined):
        return list(map(_string, texts))
    return [_string(s, control=False) for s in texts]


def _string(s: str, *, control: bool = True) -> str:
    """`s` as a TOML string; `control=False` says it holds no control character TOML forbids in literals."""
    if not control or s.isprintable() or not _CONTROL.search(s):  # printable: no control characters, quickly
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


# --- reading ----------------------------------------------------------------------------------------------

# A table of a stream's chunks as `_text_rows` writes it, at a line's start: a float time as `repr` writes
# one (TOML reads it as Python's `float` does) and a multi-line literal string (no `'''`, no quote at its
# end), followed by a line break. That the string holds no control character but tab and line feed, so that
# TOML reads it as it is, is checked apart, for a run of them at once: a negated class of one character is
# what the regular expression engine matches quickest.
#
# These patterns are compiled when first used (by `re.compile`, which keeps what it compiled): serving
# cassettes the parsed-TOML cache holds needs none of them.
_TEXT_ROW = (
    rb"(?<=\n)\[\[interactions\.response\.chunks\]\]\n"
    rb"t = (-?(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:e[+-]?[0-9]+)?|e[+-]?[0-9]+))\n"
    rb"text = '''\n([^']*(?:'(?!'')[^']*)*)'''\n"
)


def loads(raw: bytes, parse_text: Callable[[str], Any]) -> Any | None:
    """The TOML document in `raw` (valid UTF-8), as `parse_text` (`tomllib`'s, with whatever checks the
    caller adds) gives it for the whole text, but for the form of a stream's chunks: an interaction's chunks
    are `TextTables` where all of them are tables as `_text_rows` writes them. None when the file holds
    anything that might make the two differ: then `parse_text` should read the whole file.

    The chunks' tables are found by a regular expression in the file's bytes, and the rest is read apart,
    where each run of them (one after the other, with at most a blank line between) stands as one table
    holding a key no file holds (a random one): read by `read_heads` when each of its lines is one `encode`
    writes for a table's head, else by `parse_text`. What `read_heads` reads is `tomllib`'s document, without the
    caller's checks: it nests no deeper than a header's 16 keys and holds no number longer than 18 digits,
    so that nothing is left for them to refuse. The text before a run is the file's own, so where the rest
    is read with a run's stand-in as a table, the file has those tables there; and where it is not (say,
    inside a string), the stand-in is missing from the document. A key or a sub-table that follows such a
    table in the file lands in the stand-in instead. Either way, and on any error (whose message would name
    the wrong line), the answer is None."""
    parts = re.compile(_TEXT_ROW).split(raw)  # the text before each row, the row's time, its text, ..., the rest
    between, times, texts = parts[0::3], parts[1::3], parts[2::3]
    key = f"sse-tape {os.urandom(16).hex()}"
    runs: list[TextTables] = []
    pieces = [between[0]]  # the text with a stand-in for each run
    if rows := len(times):
        joined = b"".join(texts)
        if len(joined.translate(None, _CONTROL_BYTES)) != len(joined):  # which TOML refuses raw in a literal
            return None
        stand_in = b'[[interactions.response.chunks]]\n"%s" = %%d\n' % key.encode()
        seconds = list(map(float, times))
        starts = [0, *(row for row in range(1, rows) if len(between[row]) > 1)]  # more than a line break
        for n, (start, end) in enumerate(zip(starts, [*starts[1:], rows], strict=True)):
            runs.append(TextTables(seconds[start:end], texts[start:end]))
            pieces += [stand_in % n, between[end]]
    text = b"".join(pieces).decode()
    doc = read_heads(text)
    if doc is None:
        if not runs:
            return None  # `parse_text` reads the same text
        try:
            doc = parse_text(text)
        except Exception:  # what `parse_text` refuses, it says so itself when it reads the whole file (its lines)
            return None
    found = 0
    for response, chunks in interaction_chunks(doc):
        if type(chunks) is not list:
            continue
        tables: list[Any] = []  # and runs in their stand-ins' places
        for table in chunks:
            if type(table) is dict and key in table:
                if len(table) != 1 or table[key] != found:
                    return None
                tables.append(runs[found])
                found += 1
            else:
                tables.append(table)
        if len(tables) == 1 and type(tables[0]) is TextTables:
            response["chunks"] = tables[0]
        elif any(type(table) is TextTables for table in tables):
            response["chunks"] = [*_tables(tables)]
    return doc if found == len(runs) else None


# The lines `encode` writes for tables' heads, each matched whole, up to its line break, with any blank
# lines before it: an array of tables' header or a table's header; a key with a string, an integer, a float
# as `repr` writes one, a boolean, or an array of strings on one line. Keys are bare, or quoted with nothing
# to escape.
# Whatever else TOML allows (spaces, comments, dotted keys, inline tables, dates, other forms of numbers,
# a CR anywhere) matches none of them, and `_unescaped` refuses the escapes TOML 1.0 lacks and line-ending
# backslashes, which the strings' patterns take as any backslash and the character after it: `read_heads`
# leaves such a text to `tomllib`.
# Compiled when first used, as `_TEXT_ROW` is.
_C = r"\x00-\x08\x0a-\x1f\x7f"  # the control characters TOML refuses in a string on one line: all but tab
_MC = r"\x00-\x08\x0b-\x1f\x7f"  # and in a multi-line string, which may hold line feeds
_BASIC = rf'"([^"\\{_C}]*(?:\\[^{_C}][^"\\{_C}]*)*)"'
_LITERAL = rf"'([^'{_C}]*)'"
_KEY = rf'(?:[A-Za-z0-9_-]+|"[^"\\{_C}]*")'  # bare, or quoted with nothing to escape
_KEY_PARTS = rf'([A-Za-z0-9_-]+)|"([^"\\{_C}]*)"'
_LINE_STRING = rf"\"[^\"\\{_C}]*(?:\\[^{_C}][^\"\\{_C}]*)*\"|'[^'{_C}]*'"  # either, without a group
_HEAD_LINE = (
    rf"\n*(?:\[\[({_KEY}(?:\.{_KEY}){{0,15}})\]\]"  # blank lines, then 1: [[a.b]]
    rf"|\[({_KEY}(?:\.{_KEY}){{0,15}})\]"  # 2: [a.b]
    rf'|(?:([A-Za-z0-9_-]+)|"([^"\\{_C}]*)") = (?:'  # 3, 4: the key, bare or quoted
    rf"{_BASIC}"  # 5
    rf"|{_LITERAL}"  # 6
    rf"|'''\n([^'{_MC}]*(?:'(?!'')[^'{_MC}]*)*)'''"  # 7: multi-line literal
    rf'|"""\n([^"\\{_MC}]*(?:(?:\\[^{_MC}]|"(?!""))[^"\\{_MC}]*)*)"""'  # 8: multi-line basic
    r"|(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:e[+-]?[0-9]+)?|e[+-]?[0-9]+))"  # 9: a float
    r"|(-?(?:0|[1-9][0-9]{0,17}))"  # 10: an integer, well short of the digits `int` refuses
    r"|(true|false)"  # 11
    rf"|(\[(?:(?:{_LINE_STRING})(?:, (?:{_LINE_STRING}))*)?\])"  # 12: an array of strings
    r"))?\n"
)
_ARRAY_STRINGS = rf"{_BASIC}|{_LITERAL}"
# A basic string's escapes, as TOML reads them; anything else after a backslash (one at a line's end, say)
# is for `tomllib` to read or refuse.
_ESCAPE = r'\\(?:([btnfr"\\])|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|([\s\S]))'
_ESCAPED = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


class _Unread(Exception):
    """What `read_heads` leaves to `tomllib`."""


def read_heads(text: str) -> Any | None:
    """The document in `text` as `tomllib` reads it, when each line is one `_HEAD_LINE` matches (as the
    lines `encode` writes for tables' heads are) and each table is made once, by its own header or on the
    way to one after it; None for any other text, which `tomllib` may read otherwise, or refuse. A line is
    one match and a step or two, where `tomllib` looks at each character in Python.

    What it reads is `tomllib`'s document without the checks `parse` adds (see `loads`)."""
    root: dict[str, Any] = {}
    table = root
    arrays: set[int] = set()  # the arrays of tables, by `id`: an array of strings takes no tables
    done = 0
    try:
        for line in re.compile(_HEAD_LINE).finditer(text):
            if line.start() != done:
                return None
            done = line.end()
            kind = line.lastindex
            if kind is None:  # blank lines, with no line after them that matches
                continue
            if kind <= 2:  # a header
                keys = line[kind]
                *path, name = keys.split(".") if '"' not in keys else [a or b for a, b in re.findall(_KEY_PARTS, keys)]
                parent = _nested(root, path, arrays)
                if kind == 2:
                    if name in parent:  # a table made twice, or made on the way to another: left to tomllib
                        return None
                    table = parent[name] = {}
                    continue
                array = parent.get(name)
                if array is None:
                    array = parent[name] = []
                    arrays.add(id(array))
                elif id(array) not in arrays:
                    return None
                table = {}
                array.append(table)
                continue
            name = line[3] if line[3] is not None else line[4]
            if name in table:
                return None
            value = line[kind]
            table[name] = value if kind == 6 or (kind == 5 and "\\" not in value) else _head_value(kind, value)
    except _Unread:
        return None
    return root if done == len(text) else None


def _nested(root: dict[str, Any], path: list[str], arrays: set[int]) -> dict[str, Any]:
    """The table at `path`, as a header names it: an array of tables' last one, tables made on the way."""
    table = root
    for name in path:
        inner = table.get(name)
        if inner is None:
            inner = table[name] = {}
        elif type(inner) is list and id(inner) in arrays:
            inner = inner[-1]
        elif type(inner) is not dict:
            raise _Unread
        table = inner
    return table


def _head_value(kind: int, text: str) -> Any:
    """The value of a key's line that `_HEAD_LINE` matched as `kind` (its group), from that group's text."""
    if kind == 5 or kind == 8:
        return _unescaped(text) if "\\" in text else text
    if kind == 6 or kind == 7:
        return text
    if kind == 9:
        return float(text)
    if kind == 10:
        return int(text)
    if kind == 11:
        return text == "true"
    return [_head_value(5 if basic else 6, basic or literal) for basic, literal in re.findall(_ARRAY_STRINGS, text)]


def _unescaped(text: str) -> str:
    """A basic string's text with its escapes read."""

    def one(escape: re.Match[str]) -> str:
        if escape[1] is not None:
            return _ESCAPED[escape[1]]
        if escape[4] is not None:
            raise _Unread
        code = int(escape[2] or escape[3], 16)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:  # tomllib refuses these
            raise _Unread
        return chr(code)

    return re.sub(_ESCAPE, one, text)


def _tables(tables: list[Any]) -> Iterator[Any]:
    for table in tables:
        if type(table) is TextTables:
            yield from table.tables()
        else:
            yield table


def interaction_chunks(doc: Any) -> Iterator[tuple[dict[str, Any], Any]]:
    """Each interaction's response table in a cassette document, with its chunks."""
    items = doc.get("interactions") if type(doc) is dict else None
    for item in items if type(items) is list else ():
        response = item.get("response") if type(item) is dict else None
        if type(response) is dict and "chunks" in response:
            yield response, response["chunks"]


def expand(doc: Any) -> Any:
    """A document `loads` or `parse` (or the parsed-TOML cache) gave, as `tomllib` gives it: each `TextTables`
    turned back into its tables (in place)."""
    for response, chunks in interaction_chunks(doc):
        if type(chunks) is TextTables:
            response["chunks"] = chunks.tables()
    return doc


# --- a whole file, with tomllib's semantics and a cassette's limits ---------------------------------------


def parse(raw: bytes) -> Any:
    """What `tomllib` reads in the file's bytes, but that a stream's chunks may be `TextTables` (see `loads`).

    Raises `CassetteFormatError` (whose message names no file: the caller adds it) for bytes that are not
    UTF-8 or not TOML, and for a document that nests far deeper than any cassette.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CassetteFormatError(f"not a TOML file: invalid UTF-8 at byte {exc.start}") from None
    doc = loads(raw, _parse_text)
    return doc if doc is not None else _parse_text(text)


def _parse_text(text: str) -> Any:
    _check_depth(text)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CassetteFormatError(f"truncated or corrupt TOML: {exc}") from None
    except (ValueError, RecursionError) as exc:  # a 5,000-digit number, say
        raise CassetteFormatError(f"not a cassette TOML can hold: {str(exc).splitlines()[0][:120]}") from None


# What a cassette nests is shallow; a file nesting far deeper is refused before the parser walks into it
# (an array 500 deep recurses past Python's limit, 16,000 dotted key levels take a gigabyte).
_MAX_DEPTH = 32
# Strings and comments, each found as `"""[\s\S]*?"""` would find it but without a step back at every character
# (a multi-line basic string's escaped quote, `\"`, taken for no end of it).
_STRINGS = re.compile(
    r'"""[^"\\]*(?:(?:\\[\s\S]|"(?!""))[^"\\]*)*"""'
    r"|'''[^']*(?:'(?!'')[^']*)*'''"
    r'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
    r"|'[^'\n]*'"
    r"|#[^\n]*"
)
_KEYS = re.compile(r"^[ \t]*(?:\[\[?([^\]\n]*)|([^=\n\[]+)=)", re.MULTILINE)
_NESTING = re.compile(r"[\[\]{}]")
# A line with enough dots to hold a key nested too deep, found from its first dot: few lines need a closer look.
_MANY_DOTS = re.compile(rf"\.(?:[^.\n]*\.){{{_MAX_DEPTH - 1}}}")
# Table headers, when lines end at "\n" (or "\r\n") only; str.splitlines also ends them at these.
_HEADER_LINES = re.compile(r"\n[^\S\n]*\[[^\n]*")
_ODD_LINE_BREAKS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def _check_depth(text: str) -> None:
    bare = _STRINGS.sub('""', text)
    for dots in _MANY_DOTS.finditer(bare):
        key = _KEYS.match(bare, bare.rfind("\n", 0, dots.start()) + 1)
        if key and (key[1] or key[2] or "").count(".") >= _MAX_DEPTH:
            raise CassetteFormatError(f"keys nest deeper than {_MAX_DEPTH} levels: not a cassette")
    if any(c in bare for c in _ODD_LINE_BREAKS) or bare.count("\r") != bare.count("\r\n"):
        values = "\n".join(line for line in bare.splitlines() if not line.lstrip().startswith("["))
    else:
        values = _HEADER_LINES.sub("\n", "\n" + bare)  # the same, in one pass
    depth = 0
    for mark in _NESTING.findall(values):
        depth += 1 if mark in "[{" else -1
        if depth > _MAX_DEPTH:
            raise CassetteFormatError(f"values nest deeper than {_MAX_DEPTH} levels: not a cassette")
