"""The agent frameworks users build on, as clients of `sse-tape serve` on the bundled cassettes.

An agent with a tool asks, runs the tool the recording calls, sends its
result back, and must get the recorded final answer that uses it: the turn
after the tool call is in the bundled cassettes, and matching by method and
path picks it because the conversation ends with a tool's result.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest

from sse_tape import MockServer, serve
from sse_tape.journal import Matched

ANSWER = "It's 18°C with light rain in Tokyo right now, so take an umbrella."
QUESTION = "What's the weather in Tokyo?"


def weather(city: str) -> str:
    return json.dumps({"city": city, "temperature_c": 18, "conditions": "light rain"})


@pytest.fixture
def server() -> Iterator[MockServer]:
    with serve(pace="instant") as running:
        yield running


def played(server: MockServer) -> list[str]:
    return [e.recording.split(" (")[0] for e in server.journal if isinstance(e, Matched)]


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("streaming", [False, True], ids=["run", "run_stream"])
async def test_a_pydantic_ai_agent_with_a_tool_runs_to_its_answer(
    server: MockServer, api: str, streaming: bool
) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    # A client the test closes: one left to the garbage collector would warn of its open socket.
    client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)
    provider = OpenAIProvider(openai_client=client)
    model = (
        OpenAIChatModel("local-model", provider=provider)
        if api == "chat"
        else OpenAIResponsesModel("claude-sonnet-4-20250514", provider=provider)
    )
    cities: list[str] = []

    def get_weather(city: str) -> str:
        """Get weather for a city."""
        cities.append(city)
        return weather(city)

    agent = Agent(model, tools=[get_weather])
    async with client:
        if streaming:
            async with agent.run_stream(QUESTION) as run:
                output = await run.get_output()
        else:
            output = (await agent.run(QUESTION)).output
    assert output == ANSWER
    assert cities == ["Tokyo"]
    cassette = "openai-chat.toml" if api == "chat" else "openai-responses.toml"
    assert played(server) == [f"{cassette} #2", f"{cassette} #3"]  # the tool call, then the turn after it


@pytest.mark.parametrize("streaming", [False, True])
def test_a_langchain_agent_with_a_tool_runs_to_its_answer(server: MockServer, streaming: bool) -> None:
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    cities: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Get weather for a city."""
        cities.append(city)
        return weather(city)

    with httpx.Client() as http:
        model = ChatOpenAI(
            model="local-model", base_url=server.url + "/v1", api_key="sk-test", streaming=streaming, http_client=http
        )
        agent = create_agent(model, tools=[get_weather])
        result = agent.invoke({"messages": [{"role": "user", "content": QUESTION}]})
    assert result["messages"][-1].content == ANSWER
    assert cities == ["Tokyo"]
    assert played(server) == ["openai-chat.toml #2", "openai-chat.toml #3"]
