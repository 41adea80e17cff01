"""The client matrix: every client library people use, as a new user would set it up (a base URL and a key), on
the bundled cassettes served as `sse-tape serve` serves them, at instant pace and paced (their recorded gaps, four
times as fast).

Each client streams the greeting, answers it plainly (one JSON body), and runs its tool loop: it offers
get_weather, the recording calls it, the client runs it and sends its result back, and gets the recorded
answer after it. A user's suite runs one agent test after another on one server, so each tool loop also runs
twice in a row on one server, and must play the same recordings the second time. Clients whose structured
output forces a tool get the recorded call of it. The rows are in `sdk_clients` (the vendors' SDKs) and
`framework_clients` (agent frameworks and gateways); below are those that need a venv of their own
(`venv_clients`) and the JavaScript ones (`js/clients.mjs`), each run in a process of its own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from framework_clients import FRAMEWORK_CLIENTS, close_litellm
from matrix import (
    CHAT,
    GEMINI,
    MESSAGES,
    RESPONSES,
    Client,
    InWorker,
    NodeModules,
    Venv,
    Weather,
    Workers,
    answer_of,
    as_json,
    check,
    streamed,
)
from sdk_clients import SDK_CLIENTS

from sse_tape import MockServer, serve

OPENAI_2 = Venv(
    "openai-2",
    ("instructor>=1.17", "openai<3", "llama-index-core>=0.14", "llama-index-llms-openai-like>=0.8"),
    why="instructor 1.17 pins jiter<0.15 (openai 3 needs jiter>=0.16) and llama-index-llms-openai 0.8 pins openai<3",
)
VENV_CLIENTS = [
    Client(
        "instructor", CHAT, extract=InWorker("extract"), streamed_extract=InWorker("streamed_extract"), worker=OPENAI_2
    ),
    Client(
        "llama-index",
        CHAT,
        stream=InWorker("stream"),
        plain=InWorker("plain"),
        loop=InWorker("loop"),
        streamed_loop=InWorker("streamed_loop"),
        worker=OPENAI_2,
    ),
]
JS = NodeModules()
EVERY_CASE = {"stream": InWorker("stream"), "plain": InWorker("plain"), "loop": InWorker("loop")}
STREAMED_LOOP = {"streamed_loop": InWorker("streamed_loop")}
JS_CLIENTS = [
    Client("js-openai-chat", CHAT, **EVERY_CASE, **STREAMED_LOOP, worker=JS),
    Client("js-openai-responses", RESPONSES, **EVERY_CASE, **STREAMED_LOOP, worker=JS),
    Client("js-anthropic", MESSAGES, **EVERY_CASE, **STREAMED_LOOP, worker=JS),
    Client("js-anthropic-tool-runner", MESSAGES, loop=InWorker("loop"), **STREAMED_LOOP, worker=JS),
    Client("js-google-genai", GEMINI, **EVERY_CASE, **STREAMED_LOOP, worker=JS),
    Client("ai-sdk-openai-chat", CHAT, **EVERY_CASE, **STREAMED_LOOP, worker=JS),
    Client("ai-sdk-openai-responses", RESPONSES, **EVERY_CASE, **STREAMED_LOOP, worker=JS),
    Client("ai-sdk-anthropic", MESSAGES, **EVERY_CASE, **STREAMED_LOOP, worker=JS),
    Client("ai-sdk-google", GEMINI, **EVERY_CASE, **STREAMED_LOOP, worker=JS),
    Client("js-eventsource", CHAT, stream=InWorker("stream"), worker=JS),
    Client("js-eventsource-parser", CHAT, stream=InWorker("stream"), worker=JS),
]
CLIENTS = [*SDK_CLIENTS, *FRAMEWORK_CLIENTS, *VENV_CLIENTS, *JS_CLIENTS]


@pytest.fixture(params=["instant", "x4"])
def server(request: pytest.FixtureRequest) -> Iterator[MockServer]:
    """The bundled cassettes at instant pace, or paced: each stream comes in pieces over time, as from `sse-tape
    serve` with no options (the recorded pace), at four times its speed (a tool loop at the recorded pace waits
    two to three seconds, and there are a hundred such cases)."""
    with serve(pace=request.param) as running:
        yield running


@pytest.fixture(scope="session", autouse=True)
def litellm_closed() -> Iterator[None]:
    """LiteLLM's clients closed at the end of the session (`close_litellm`)."""
    yield
    close_litellm()


def marks(client: Client) -> list[pytest.MarkDecorator]:
    """The warnings filters a client's tests need for what its library warns of."""
    return [pytest.mark.filterwarnings(words) for words in client.ignored_warnings]


def rows(*cases: str) -> list[object]:
    """A test's parameters: each client with each of `cases` it can make (a `Client` field's name)."""
    return [
        pytest.param(client, case, id=client.name + (f"-{case}" if len(cases) > 1 else ""), marks=marks(client))
        for client in CLIENTS
        for case in cases
        if getattr(client, case) is not None
    ]


@pytest.mark.parametrize(("client", "case"), rows("stream"))
async def test_streams_the_greeting(server: MockServer, workers: Workers, client: Client, case: str) -> None:
    got = await answer_of(client, case, server.url, workers)
    check(server, got, client.api.greeting, [streamed(client.api, 1)])


@pytest.mark.parametrize(("client", "case"), rows("plain"))
async def test_answers_the_greeting_plainly(server: MockServer, workers: Workers, client: Client, case: str) -> None:
    got = await answer_of(client, case, server.url, workers)
    shape = streamed if client.streams_always else as_json
    check(server, got, client.api.greeting, [shape(client.api, 1)])


async def run_loop(server: MockServer, workers: Workers, client: Client, case: str, times: int) -> None:
    shape = streamed if case == "streamed_loop" or client.streams_always else as_json
    weather = Weather()
    answers = [await answer_of(client, case, server.url, workers, weather) for _ in range(times)]
    want = ([client.api.answer] * times, ["Tokyo"] * times)
    check(server, (answers, weather.cities), want, [shape(client.api, 2), shape(client.api, 3)] * times)


@pytest.mark.parametrize(("client", "case"), rows("loop", "streamed_loop"))
async def test_runs_its_tool_loop(server: MockServer, workers: Workers, client: Client, case: str) -> None:
    await run_loop(server, workers, client, case, times=1)


@pytest.mark.parametrize(("client", "case"), rows("loop", "streamed_loop"))
async def test_runs_its_tool_loop_twice_on_one_server(workers: Workers, client: Client, case: str) -> None:
    with serve(pace="instant") as server:
        await run_loop(server, workers, client, case, times=2)


@pytest.mark.parametrize(("client", "case"), rows("extract", "streamed_extract"))
async def test_gets_the_forced_tool_call(server: MockServer, workers: Workers, client: Client, case: str) -> None:
    got = await answer_of(client, case, server.url, workers)
    shape = streamed if case == "streamed_extract" or client.streams_always else as_json
    check(server, got, "Tokyo", [shape(client.api, 2)])
