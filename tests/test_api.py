import sse_tape


def test_public_api_is_pinned() -> None:
    # A change to this list is a change to what users may import: make it on purpose.
    assert sse_tape.__all__ == [
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


def test_every_error_derives_from_the_base_and_a_builtin() -> None:
    assert issubclass(sse_tape.CassetteNotFoundError, (sse_tape.SSETapeError, FileNotFoundError))
    assert issubclass(sse_tape.CassetteFormatError, ValueError)
    assert issubclass(sse_tape.ConfigError, ValueError)
    assert issubclass(sse_tape.NoMatchError, LookupError)
    assert issubclass(sse_tape.UpstreamError, (sse_tape.SSETapeError, ConnectionError))
    assert issubclass(sse_tape.StreamError, sse_tape.SSETapeError)
    assert issubclass(sse_tape.StreamError, ValueError)
