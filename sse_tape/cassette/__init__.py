"""Cassettes: what crossed the wire, kept as raw byte chunks with their timing.

The package by concept:

- `model`: the values: an `Interaction` of a `Request` and a `Response`, the response's body as timed
  `Chunk` values and how it ended (`End`), the `Recording` a replay found.
- `document`: the model as the plain document both encodings hold, and back, checked.
- `serializers`: the encodings, chosen by a file's suffix: TOML (`toml`, the default: readable and
  diffable, with a parsed-TOML `cache` for big files) and MessagePack (`msgpack`: compact and quick).
- `upgrades`: `FORMAT_VERSION`, and the chain of converters that brings an older file's document up to it;
  a file written by a newer sse-tape is refused with a request to upgrade.
- `persistence`: `Cassette`, loaded, saved atomically and appended to in place, under a lock on its folder,
  with the `spools` recorders write beside it.
- `discovery`: finding cassette files, the bundled examples, and checking a path.

A cassette may carry settings for whoever replays it: a free-text `description`, `match` (the matchers a
request must satisfy to get a recording, by name, as in `match = ["method", "path"]`: see `matching`) and `ignore_body_fields`.
Options given to a server override them.
"""

from __future__ import annotations

from .discovery import bundled_cassettes, check_cassette_path, find_cassettes
from .model import (
    REDACTED,
    Chunk,
    End,
    Headers,
    Injection,
    Interaction,
    Recording,
    Request,
    Response,
    storable_headers,
)
from .persistence import Cassette, append_interactions
from .upgrades import FORMAT_VERSION

__all__ = [
    "FORMAT_VERSION",
    "REDACTED",
    "Cassette",
    "Chunk",
    "End",
    "Headers",
    "Injection",
    "Interaction",
    "Recording",
    "Request",
    "Response",
    "append_interactions",
    "bundled_cassettes",
    "check_cassette_path",
    "find_cassettes",
    "storable_headers",
]
