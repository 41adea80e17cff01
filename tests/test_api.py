import sse_tape


def test_public_api_is_pinned() -> None:
    # A change to this list is a change to what users may import: make it on purpose.
    assert sse_tape.__all__ == [
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


def test_every_error_derives_from_the_base_and_a_builtin() -> None:
    assert issubclass(sse_tape.CassetteNotFoundError, (sse_tape.SSETapeError, FileNotFoundError))
    assert issubclass(sse_tape.CassetteFormatError, ValueError)
    assert issubclass(sse_tape.ConfigError, ValueError)
    assert issubclass(sse_tape.NoMatchError, LookupError)
