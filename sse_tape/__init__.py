"""sse-tape: record, replay, fault-inject and synthesize Server-Sent-Events streams."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .__version__ import __version__
from ._exceptions import (
    CassetteError,
    CassetteFormatError,
    CassetteNotFoundError,
    ConfigError,
    NoMatchError,
    SSETapeError,
    StateError,
    StreamError,
    UpstreamError,
)

if TYPE_CHECKING:  # what the names below are, for type checkers; at run time each is imported when first used
    from .cassette import (
        FORMAT_VERSION,
        Cassette,
        Chunk,
        End,
        Interaction,
        Recording,
        Request,
        Response,
        append_interactions,
        bundled_cassettes,
    )
    from .journal import Journal
    from .matching import Matcher, MatchOn
    from .options import MissPolicy, RecordMode, ServeOptions
    from .pacing import PaceMode, Pacing
    from .record import record_once
    from .redaction import REDACTED, Redaction
    from .server import Control, MockServer, arecording, aserve, recording, recording_server, serve
    from .sse import ServerSentEvent, SSEDecoder, encode_comment, encode_event
    from .state import MemoryStore, ReplayStore

# Where each public name lives: `import sse_tape` (and pytest, loading the plugin) imports none of the
# server, the recorder or aiohttp until something is used.
_HOMES = {
    ".cassette": (
        "FORMAT_VERSION", "Cassette", "Chunk", "End", "Interaction", "Recording", "Request", "Response",
        "append_interactions", "bundled_cassettes",
    ),
    ".journal": ("Journal",),
    ".matching": ("Matcher", "MatchOn"),
    ".options": ("MissPolicy", "RecordMode", "ServeOptions"),
    ".pacing": ("PaceMode", "Pacing"),
    ".record": ("record_once",),
    ".redaction": ("REDACTED", "Redaction"),
    ".server": ("Control", "MockServer", "arecording", "aserve", "recording", "recording_server", "serve"),
    ".sse": ("ServerSentEvent", "SSEDecoder", "encode_comment", "encode_event"),
    ".state": ("MemoryStore", "ReplayStore"),
}  # fmt: skip
_LAZY = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "FORMAT_VERSION",
    "REDACTED",
    "Cassette",
    "CassetteError",
    "CassetteFormatError",
    "CassetteNotFoundError",
    "Chunk",
    "ConfigError",
    "Control",
    "End",
    "Interaction",
    "Journal",
    "MatchOn",
    "Matcher",
    "MemoryStore",
    "MissPolicy",
    "MockServer",
    "NoMatchError",
    "PaceMode",
    "Pacing",
    "RecordMode",
    "Recording",
    "Redaction",
    "ReplayStore",
    "Request",
    "Response",
    "SSEDecoder",
    "SSETapeError",
    "ServeOptions",
    "ServerSentEvent",
    "StateError",
    "StreamError",
    "UpstreamError",
    "__version__",
    "append_interactions",
    "arecording",
    "aserve",
    "bundled_cassettes",
    "encode_comment",
    "encode_event",
    "record_once",
    "recording",
    "recording_server",
    "serve",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sse_tape' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
