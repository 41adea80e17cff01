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
    StreamError,
    UpstreamError,
)
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
from .journal import Journal, ReplayState
from .matching import Matcher, MatchOn
from .options import MissPolicy, ServeOptions
from .pacing import PaceMode, Pacing
from .record import RecordMode, record_once
from .redaction import REDACTED, Redaction
from .server import MockServer, arecording, aserve, recording, recording_server, serve
from .sse import ServerSentEvent, SSEDecoder, encode_comment, encode_event

__all__ = [
    "FORMAT_VERSION",
    "REDACTED",
    "Cassette",
    "CassetteError",
    "CassetteFormatError",
    "CassetteNotFoundError",
    "Chunk",
    "ConfigError",
    "End",
    "Interaction",
    "Journal",
    "MatchOn",
    "Matcher",
    "MissPolicy",
    "MockServer",
    "NoMatchError",
    "PaceMode",
    "Pacing",
    "RecordMode",
    "Recording",
    "Redaction",
    "ReplayState",
    "Request",
    "Response",
    "SSEDecoder",
    "SSETapeError",
    "ServeOptions",
    "ServerSentEvent",
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
