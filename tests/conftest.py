from __future__ import annotations

from collections.abc import Iterator

import pytest

from sse_tape import Cassette, MockServer, Pacing, bundled_cassettes, serve


@pytest.fixture(scope="session")
def bundled() -> dict[str, Cassette]:
    """The bundled cassettes by name (openai-chat, lmstudio-chat, ...)."""
    return {path.stem: Cassette.load(path) for path in bundled_cassettes()}


@pytest.fixture(scope="module")
def instant_server() -> Iterator[MockServer]:
    """The bundled cassettes served at instant pace, default matching, in a background thread."""
    with serve(pacing=Pacing.parse("instant")) as server:
        yield server
