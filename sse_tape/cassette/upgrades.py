"""The cassette format's version, and the chain of converters that brings an older file's document up to it.

`format_version` is an integer, separate from the package version (as mitmproxy's file format is: see its
`io/compat.py`). A change to what a cassette document holds that an older sse-tape could not read gets a new
version, and a converter from the version before it in `CONVERTERS`: a document of any older version is
brought to this one a step at a time, so that the rest of the package reads this version only. A document
of a newer version than this sse-tape knows is refused with a request to upgrade sse-tape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._exceptions import CassetteFormatError

__all__ = ["CONVERTERS", "FORMAT_VERSION", "upgrade"]

#: The cassette format this version writes, and the newest it reads.
FORMAT_VERSION = 1

#: `CONVERTERS[n]` turns a document of format `n` into one of format `n + 1` (its `format_version` too).
#: Version 1 is the first: there is nothing older to convert yet.
CONVERTERS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def upgrade(doc: Any) -> Mapping[str, Any]:
    """The cassette document `doc`, as a serializer read it, in this version's format.

    Raises `CassetteFormatError` (whose message names no file: the caller adds it) when `doc` is no cassette
    document, or one written by a newer sse-tape.
    """
    if not isinstance(doc, Mapping) or "format_version" not in doc:
        raise CassetteFormatError("not an sse-tape cassette (no format_version)")
    version = doc["format_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CassetteFormatError(f"not an sse-tape cassette (format_version {version!r})")
    if version > FORMAT_VERSION:
        raise CassetteFormatError(
            f"written by a newer sse-tape (cassette format {version}, this one reads up to "
            f"{FORMAT_VERSION}): upgrade sse-tape"
        )
    upgraded: Mapping[str, Any] = doc
    while version < FORMAT_VERSION:
        upgraded = CONVERTERS[version](dict(upgraded))
        version += 1
    return upgraded
