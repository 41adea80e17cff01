"""The client matrix: every client library people use, as a new user would set it up (a base URL and a key), on
the bundled cassettes served as `sse-tape serve` serves them, at instant and at recorded pace.

Each client streams the greeting, answers it plainly (one JSON body), and runs its tool loop: it offers
get_weather, the recording calls it, the client runs it and sends its result back, and gets the recorded
answer after it. A user's suite runs one agent test after another on one server, so each tool loop also runs
twice in a row on one server, and must play the same recordings the second time. The rows are in
`sdk_clients` (the vendors' SDKs) and `framework_clients` (agent frameworks and gateways).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from framework_clients import FRAMEWORK_CLIENTS
from matrix import Client, Weather, answer_of, as_json, check, streamed
from sdk_clients import SDK_CLIENTS

from sse_tape import MockServer, serve

CLIENTS = [*SDK_CLIENTS, *FRAMEWORK_CLIENTS]


@pytest.fixture(params=["instant", "recorded"])
def server(request: pytest.FixtureRequest) -> Iterator[MockServer]:
    """The bundled cassettes at instant pace, or as `sse-tape serve` serves them with no options."""
    with serve(pace="instant") if request.param == "instant" else serve() as running:
        yield running


def marks(client: Client) -> list[pytest.MarkDecorator]:
    return [pytest.mark.filterwarnings(words) for words in client.ignored_warnings]


def rows(case: str) -> list[object]:
    return [
        pytest.param(client, id=client.name, marks=marks(client))
        for client in CLIENTS
        if getattr(client, case) is not None
    ]


def loops() -> list[object]:
    return [
        pytest.param(client, streaming, id=f"{client.name}-{'streamed' if streaming else 'plain'}", marks=marks(client))
        for client in CLIENTS
        for streaming, loop in ((False, client.loop), (True, client.streamed_loop))
        if loop is not None
    ]


@pytest.mark.parametrize("client", rows("stream"))
async def test_streams_the_greeting(server: MockServer, client: Client) -> None:
    assert client.stream is not None
    got = await answer_of(client.stream(server.url))
    check(server, got, client.api.greeting, [streamed(client.api, 1)])


@pytest.mark.parametrize("client", rows("plain"))
async def test_answers_the_greeting_plainly(server: MockServer, client: Client) -> None:
    assert client.plain is not None
    got = await answer_of(client.plain(server.url))
    shape = streamed if client.streams_always else as_json
    check(server, got, client.api.greeting, [shape(client.api, 1)])


async def run_loop(server: MockServer, client: Client, streaming: bool, times: int) -> None:
    loop = client.streamed_loop if streaming else client.loop
    assert loop is not None
    shape = streamed if streaming or client.streams_always else as_json
    weather = Weather()
    answers = [await answer_of(loop(server.url, weather)) for _ in range(times)]
    want = ([client.api.answer] * times, ["Tokyo"] * times)
    check(server, (answers, weather.cities), want, [shape(client.api, 2), shape(client.api, 3)] * times)


@pytest.mark.parametrize(("client", "streaming"), loops())
async def test_runs_its_tool_loop(server: MockServer, client: Client, streaming: bool) -> None:
    await run_loop(server, client, streaming, times=1)


@pytest.mark.parametrize(("client", "streaming"), loops())
async def test_runs_its_tool_loop_twice_on_one_server(client: Client, streaming: bool) -> None:
    with serve(pace="instant") as server:
        await run_loop(server, client, streaming, times=2)
