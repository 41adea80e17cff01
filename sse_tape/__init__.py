"""sse-tape: record, replay, fault-inject and synthesize Server-Sent-Events streams."""

from __future__ import annotations

from .__version__ import __version__
from ._exceptions import (
    CassetteError,
    CassetteFormatError,
    CassetteNotFoundError,
    ConfigError,
    NoMatchError,
    SSETapeError,
)
from .cassette import FORMAT_VERSION, Cassette, Chunk, End, Interaction, Request, Response, bundled_cassettes
from .matching import Matcher, MatchOn, Recording
from .pacing import PaceMode, Pacing
from .server import MockServer, aserve, serve
from .sse import ServerSentEvent, SSEDecoder, encode_comment, encode_event

__all__ = [
    "FORMAT_VERSION",
    "Cassette",
    "CassetteError",
    "CassetteFormatError",
    "CassetteNotFoundError",
    "Chunk",
    "ConfigError",
    "End",
    "Interaction",
    "MatchOn",
    "Matcher",
    "MockServer",
    "NoMatchError",
    "PaceMode",
    "Pacing",
    "Recording",
    "Request",
    "Response",
    "SSEDecoder",
    "SSETapeError",
    "ServerSentEvent",
    "__version__",
    "aserve",
    "bundled_cassettes",
    "encode_comment",
    "encode_event",
    "serve",
]
