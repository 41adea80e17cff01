"""Agent frameworks and gateways as rows of the client matrix (see `matrix`): openai-agents, pydantic-ai, LangChain
and LiteLLM, each on every API it speaks, set up with a base URL and a key alone, as its docs say.

Their tool loops are their own: an agent with the tool runs until it has an answer. LiteLLM has no agent; its
loop is the one its docs show, by hand.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import openai
from matrix import (
    CHAT,
    GEMINI,
    GREETING_PROMPT,
    LOOP_LIMIT,
    MESSAGES,
    QUESTION,
    RESPONSES,
    TOOL_DESCRIPTION,
    WEATHER_SCHEMA,
    Api,
    Client,
    Loop,
    Weather,
)

# openai-agents: its Responses model (the default) and its chat completions model.


def agents_row(name: str, api: Api) -> Client:
    """openai-agents' Agent and Runner on `api` (chat completions or Responses), with its AsyncOpenAI client."""

    async def run(url: str, prompt: str, tools: list[Any], streaming: bool) -> str:
        from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, RunConfig, Runner

        # The docs' way to another server: an AsyncOpenAI client with its base URL, and no tracing sent to OpenAI.
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-test") as client:
            model = (
                OpenAIResponsesModel(api.model, openai_client=client)
                if api is RESPONSES
                else OpenAIChatCompletionsModel(api.model, openai_client=client)
            )
            agent = Agent(name="Assistant", instructions="You are helpful.", model=model, tools=tools)
            config = RunConfig(tracing_disabled=True)
            if not streaming:
                return str((await Runner.run(agent, prompt, run_config=config)).final_output)
            result = Runner.run_streamed(agent, prompt, run_config=config)
            async for _ in result.stream_events():
                pass
            return str(result.final_output)

    def loop(streaming: bool) -> Loop:
        async def tool_loop(url: str, weather: Weather) -> str:
            from agents import function_tool

            return await run(url, QUESTION, [function_tool(weather.function())], streaming)

        return tool_loop

    return Client(
        name,
        api,
        stream=lambda url: run(url, GREETING_PROMPT, [], streaming=True),
        plain=lambda url: run(url, GREETING_PROMPT, [], streaming=False),
        loop=loop(False),
        streamed_loop=loop(True),
    )


# pydantic-ai: its OpenAI (chat and Responses), Anthropic and Google models.


def pydantic_ai_model(api: Api, url: str) -> Any:
    """pydantic-ai's model for `api`, its provider given the server's base URL and a key."""
    if api is CHAT or api is RESPONSES:
        from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
        from pydantic_ai.providers.openai import OpenAIProvider

        provider = OpenAIProvider(base_url=url + "/v1", api_key="sk-test")
        return (
            OpenAIChatModel(api.model, provider=provider)
            if api is CHAT
            else OpenAIResponsesModel(api.model, provider=provider)
        )
    if api is MESSAGES:
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        return AnthropicModel(api.model, provider=AnthropicProvider(base_url=url, api_key="sk-ant-test"))
    from pydantic_ai.models.google import GoogleModel
    from pydantic_ai.providers.google import GoogleProvider

    return GoogleModel(api.model, provider=GoogleProvider(base_url=url, api_key="test-key"))


def pydantic_ai_row(name: str, api: Api, *, streams_always: bool = False) -> Client:
    """pydantic-ai's Agent on `api`: `run`, `run_stream` and, for a streamed tool loop, `run_stream_events`."""

    async def run(url: str, prompt: str, tools: list[Callable[..., str]], streaming: bool) -> str:
        from pydantic_ai import Agent, AgentRunResultEvent

        # Entered, the agent closes its provider's HTTP client when done (pydantic-ai's docs).
        async with Agent(pydantic_ai_model(api, url), tools=tools) as agent:
            if not streaming:
                return (await agent.run(prompt)).output
            if not tools:
                async with agent.run_stream(prompt) as run:
                    return await run.get_output()
            # `run_stream` ends at the first text, which may come before a tool call: the whole run streamed is
            # `run_stream_events`, whose last event is the result.
            async with agent.run_stream_events(prompt) as events:
                last = [event async for event in events][-1]
            assert isinstance(last, AgentRunResultEvent), last
            return str(last.result.output)

    def loop(streaming: bool) -> Loop:
        return lambda url, weather: run(url, QUESTION, [weather.function()], streaming)

    return Client(
        name,
        api,
        stream=lambda url: run(url, GREETING_PROMPT, [], streaming=True),
        plain=lambda url: run(url, GREETING_PROMPT, [], streaming=False),
        loop=loop(False),
        streamed_loop=loop(True),
        streams_always=streams_always,
    )


# LangChain: its chat models for OpenAI (chat and Responses), Anthropic and Google's Gemini API, in its agent.


def langchain_model(api: Api, url: str, streaming: bool) -> Any:
    """LangChain's chat model for `api`, given the server's base URL and a key."""
    if api is CHAT or api is RESPONSES:
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(
            model=api.model,
            base_url=url + "/v1",
            api_key="sk-test",
            streaming=streaming,
            use_responses_api=api is RESPONSES,
        )
    if api is MESSAGES:
        from langchain_anthropic import ChatAnthropic

        return ChatAnthropic(model=api.model, base_url=url, api_key="sk-ant-test", streaming=streaming)
    from langchain_google_genai import ChatGoogleGenerativeAI

    return ChatGoogleGenerativeAI(model=api.model, base_url=url, google_api_key="test-key", streaming=streaming)


def langchain_row(name: str, api: Api) -> Client:
    """LangChain's chat model on `api`, and its agent (`create_agent`) for the tool loops."""

    def stream(url: str) -> str:
        return "".join(chunk.text for chunk in langchain_model(api, url, streaming=True).stream(GREETING_PROMPT))

    def plain(url: str) -> str:
        return str(langchain_model(api, url, streaming=False).invoke(GREETING_PROMPT).text)

    def loop(streaming: bool) -> Loop:
        def tool_loop(url: str, weather: Weather) -> str:
            from langchain.agents import create_agent
            from langchain_core.tools import tool

            agent = create_agent(langchain_model(api, url, streaming), tools=[tool(weather.function())])
            result = agent.invoke({"messages": [{"role": "user", "content": QUESTION}]})
            return str(result["messages"][-1].text)

        return tool_loop

    return Client(name, api, stream=stream, plain=plain, loop=loop(False), streamed_loop=loop(True))


# LiteLLM: one completion call for every provider, by route; the tool loop by hand, as its docs show it.

LITELLM_ROUTES = {CHAT: "openai/", MESSAGES: "anthropic/", GEMINI: "gemini/"}


def litellm_module() -> Any:
    """LiteLLM, imported as its docs say to on a machine with no network: it fetches its model price list from
    GitHub when imported, unless told to read its own copy."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    return litellm


def close_litellm() -> None:
    """Close the HTTP clients LiteLLM keeps for the life of the process, if it was imported: its module's own and
    those it caches by API base and key. It never closes them itself, and each holds its last connection to a
    server long gone, so that their sockets were left open at exit ("unclosed socket" ResourceWarnings)."""
    litellm = sys.modules.get("litellm")
    if litellm is None:
        return
    cache = litellm.in_memory_llm_clients_cache
    for client in [litellm.module_level_client, *cache.cache_dict.values()]:
        # The async ones it made at import have not connected; closing them would need their event loops.
        if isinstance(client, (litellm.HTTPHandler, openai.OpenAI)):
            client.close()
    cache.flush_cache()


def litellm_call(api: Api, url: str, messages: list[Any], **more: Any) -> Any:
    """`litellm.completion` by the route of `api`, with the API base its docs give for a server of one's own."""
    litellm = litellm_module()
    # Its API bases carry the version where the API's paths do (as its Cloudflare gateway example for Gemini).
    base = {CHAT: url + "/v1", MESSAGES: url, GEMINI: url + "/v1beta"}[api]
    key = {CHAT: "sk-test", MESSAGES: "sk-ant-test", GEMINI: "test-key"}[api]
    return litellm.completion(
        model=LITELLM_ROUTES[api] + api.model, api_base=base, api_key=key, messages=messages, **more
    )


LITELLM_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": TOOL_DESCRIPTION, "parameters": WEATHER_SCHEMA},
    }
]


LITELLM_WARNINGS = ("ignore:.* using the `ReadOnly` qualifier:UserWarning",)
"""LiteLLM builds pydantic models of its TypedDicts (its Gemini context caching, its thinking blocks) when first
used, and pydantic warns that it cannot protect their `ReadOnly` items: whichever case builds one first."""


def litellm_row(name: str, api: Api) -> Client:
    """LiteLLM's `completion` on `api`'s route, its tool loop by hand (`stream_chunk_builder` for a streamed one)."""
    greeting = [{"role": "user", "content": GREETING_PROMPT}]

    def stream(url: str) -> str:
        chunks = litellm_call(api, url, greeting, stream=True)
        return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)

    def plain(url: str) -> str:
        return str(litellm_call(api, url, greeting).choices[0].message.content)

    def loop(streaming: bool) -> Loop:
        def tool_loop(url: str, weather: Weather) -> str:
            litellm = litellm_module()
            messages: list[Any] = [{"role": "user", "content": QUESTION}]
            for _ in range(LOOP_LIMIT):
                reply = litellm_call(api, url, messages, tools=LITELLM_TOOLS, stream=streaming)
                if streaming:
                    reply = litellm.stream_chunk_builder(list(reply), messages=messages)
                message = reply.choices[0].message
                if not message.tool_calls:
                    return str(message.content)
                messages.append(message.model_dump(exclude_none=True))
                for call in message.tool_calls:
                    result = weather.call(call.function.name, call.function.arguments)
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            raise AssertionError(f"no answer after {LOOP_LIMIT} model calls")

        return tool_loop

    return Client(
        name,
        api,
        stream=stream,
        plain=plain,
        loop=loop(False),
        streamed_loop=loop(True),
        ignored_warnings=LITELLM_WARNINGS,
    )


FRAMEWORK_CLIENTS = [
    agents_row("openai-agents-responses", RESPONSES),
    agents_row("openai-agents-chat", CHAT),
    pydantic_ai_row("pydantic-ai-openai-chat", CHAT),
    pydantic_ai_row("pydantic-ai-openai-responses", RESPONSES),
    # Its Anthropic model streams every request, and puts the stream together for `run`.
    pydantic_ai_row("pydantic-ai-anthropic", MESSAGES, streams_always=True),
    pydantic_ai_row("pydantic-ai-google", GEMINI),
    langchain_row("langchain-openai-chat", CHAT),
    langchain_row("langchain-openai-responses", RESPONSES),
    langchain_row("langchain-anthropic", MESSAGES),
    langchain_row("langchain-google-genai", GEMINI),
    litellm_row("litellm-openai", CHAT),
    litellm_row("litellm-anthropic", MESSAGES),
    litellm_row("litellm-gemini", GEMINI),
]
