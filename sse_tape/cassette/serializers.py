"""The encodings a cassette file may have, each chosen by the file's suffix:

- `.toml` (the default, see `toml`): readable and diffable, because people commit cassettes and review
  them. A chunk that is valid UTF-8 is stored as text, anything else as base64. A big file's parsed
  document is kept in the parsed-TOML cache (see `cache`).
- `.msgpack` (see `msgpack`): compact and quick to load, with chunks as raw bytes.

Both hold the same document (see `document`); `encode` and `decode` take the suffix that says which.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._exceptions import CassetteError
from . import cache, msgpack, toml

__all__ = ["SUFFIXES", "decode", "encode", "encoding_of"]

#: The suffixes of cassette files, one for each encoding.
SUFFIXES = (".toml", ".msgpack")


def encoding_of(path: Path) -> str:
    """The suffix of a cassette file, which names its encoding; raises `CassetteError` for any other."""
    if path.suffix not in SUFFIXES:
        raise CassetteError(f"{path}: unknown cassette type {path.suffix!r}: use .toml or .msgpack")
    return path.suffix


def encode(doc: dict[str, Any], suffix: str) -> bytes:
    """The bytes of a cassette document in the encoding `suffix` names; raises `CassetteError` for text no
    file can hold (a lone surrogate, say)."""
    try:
        if suffix == ".msgpack":
            return msgpack.encode(doc)
        return toml.encode(doc)
    except UnicodeEncodeError as exc:
        raise CassetteError(f"cannot write {exc.object[max(exc.start - 20, 0) : exc.end + 20]!r}: not text") from None


def decode(raw: bytes, suffix: str) -> Any:
    """The document in a file's bytes, in the encoding `suffix` names (a TOML one through the parsed-TOML
    cache, so that a stream's chunks may be `toml.TextTables`). Raises `CassetteFormatError`, whose message
    names no file (the caller adds it)."""
    if suffix == ".msgpack":
        return msgpack.decode(raw)
    return cache.parsed(raw)
