import pytest

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


# Each public error and the built-in a caller already catches for it; the tree is drawn in _exceptions.py.
ERRORS = [
    (sse_tape.CassetteNotFoundError, FileNotFoundError),
    (sse_tape.CassetteFormatError, ValueError),
    (sse_tape.ConfigError, ValueError),
    (sse_tape.NoMatchError, LookupError),
    (sse_tape.StreamError, ValueError),
    (sse_tape.UpstreamError, ConnectionError),
]


@pytest.mark.parametrize(("error", "builtin"), ERRORS, ids=[error.__name__ for error, _ in ERRORS])
def test_every_error_derives_from_the_base_and_a_builtin(error: type[Exception], builtin: type[Exception]) -> None:
    # Checked one base at a time: `issubclass(error, (A, B))` holds when either does.
    assert issubclass(error, sse_tape.SSETapeError)
    assert issubclass(error, builtin)


@pytest.mark.parametrize("error", [sse_tape.CassetteNotFoundError, sse_tape.CassetteFormatError])
def test_the_cassette_errors_derive_from_cassette_error(error: type[Exception]) -> None:
    assert issubclass(error, sse_tape.CassetteError)
