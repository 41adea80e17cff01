"""The vendors' SDKs as rows of the client matrix (see `matrix`): openai (chat completions and the Responses API,
each as `create` and as its `.stream()` helper), anthropic (`messages.create`, `.stream()` and the tool runner)
and google-genai, each made with a base URL and a key alone, as its README says, and closed when done.

Each tool loop is the one its SDK's docs show: send the conversation with the tool, run the calls the answer
asks for, send their results back, until an answer calls no tool.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
from google import genai
from google.genai import types
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
    Client,
    Weather,
)

# OpenAI: chat completions.

CHAT_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": TOOL_DESCRIPTION, "parameters": WEATHER_SCHEMA},
    }
]


def openai_sdk(url: str) -> openai.OpenAI:
    """The client as the openai README makes one for another server."""
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-test")


def chat_stream(url: str) -> str:
    with openai_sdk(url) as client:
        stream = client.chat.completions.create(
            model=CHAT.model, messages=[{"role": "user", "content": GREETING_PROMPT}], stream=True
        )
        return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def chat_plain(url: str) -> str:
    with openai_sdk(url) as client:
        reply = client.chat.completions.create(
            model=CHAT.model, messages=[{"role": "user", "content": GREETING_PROMPT}]
        )
        return reply.choices[0].message.content or ""


def chat_loop(url: str, weather: Weather) -> str:
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    with openai_sdk(url) as client:
        for _ in range(LOOP_LIMIT):
            message = (
                client.chat.completions.create(model=CHAT.model, messages=messages, tools=CHAT_TOOLS).choices[0].message
            )
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                assert call.type == "function"
                result = weather.call(call.function.name, call.function.arguments)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise AssertionError(f"no answer after {LOOP_LIMIT} model calls")


def chat_streamed_loop(url: str, weather: Weather) -> str:
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    with openai_sdk(url) as client:
        for _ in range(LOOP_LIMIT):
            stream = client.chat.completions.create(model=CHAT.model, messages=messages, tools=CHAT_TOOLS, stream=True)
            text, calls = "", dict[int, dict[str, str]]()
            for chunk in stream:
                if not chunk.choices:
                    continue
                delta = chunk.choices[0].delta
                text += delta.content or ""
                for part in delta.tool_calls or []:
                    call = calls.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
                    call["id"] += part.id or ""
                    call["name"] += part.function.name or "" if part.function else ""
                    call["arguments"] += part.function.arguments or "" if part.function else ""
            if not calls:
                return text
            tool_calls = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls.values()
            ]
            messages.append({"role": "assistant", "content": text or None, "tool_calls": tool_calls})
            for c in calls.values():
                messages.append(
                    {"role": "tool", "tool_call_id": c["id"], "content": weather.call(c["name"], c["arguments"])}
                )
    raise AssertionError(f"no answer after {LOOP_LIMIT} model calls")


def chat_helper_stream(url: str) -> str:
    with (
        openai_sdk(url) as client,
        client.chat.completions.stream(
            model=CHAT.model, messages=[{"role": "user", "content": GREETING_PROMPT}]
        ) as stream,
    ):
        return "".join(event.delta for event in stream if event.type == "content.delta")


def chat_helper_loop(url: str, weather: Weather) -> str:
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    with openai_sdk(url) as client:
        for _ in range(LOOP_LIMIT):
            with client.chat.completions.stream(model=CHAT.model, messages=messages, tools=CHAT_TOOLS) as stream:
                message = stream.get_final_completion().choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True, exclude={"parsed"}))
            for call in message.tool_calls:
                result = weather.call(call.function.name, call.function.arguments)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise AssertionError(f"no answer after {LOOP_LIMIT} model calls")


def chat_extract(url: str) -> str:
    """The call forced, as structured output by a tool does it: the city the model called get_weather with."""
    forced: Any = {"type": "function", "function": {"name": "get_weather"}}
    with openai_sdk(url) as client:
        message = (
            client.chat.completions.create(
                model=CHAT.model, messages=[{"role": "user", "content": QUESTION}], tools=CHAT_TOOLS, tool_choice=forced
            )
            .choices[0]
            .message
        )
        assert message.tool_calls, message
        assert message.tool_calls[0].type == "function"
        return str(json.loads(message.tool_calls[0].function.arguments)["city"])


# OpenAI: the Responses API.

RESPONSES_TOOLS: list[Any] = [
    {"type": "function", "name": "get_weather", "description": TOOL_DESCRIPTION, "parameters": WEATHER_SCHEMA}
]


def responses_stream(url: str) -> str:
    with openai_sdk(url) as client:
        stream = client.responses.create(model=RESPONSES.model, input=GREETING_PROMPT, stream=True)
        return "".join(event.delta for event in stream if event.type == "response.output_text.delta")


def responses_plain(url: str) -> str:
    with openai_sdk(url) as client:
        return client.responses.create(model=RESPONSES.model, input=GREETING_PROMPT).output_text


def responses_loop(url: str, weather: Weather) -> str:
    """The loop of OpenAI's function-calling guide: the whole conversation as a list, the answer's items added."""
    conversation: list[Any] = [{"role": "user", "content": QUESTION}]
    with openai_sdk(url) as client:
        for _ in range(LOOP_LIMIT):
            response = client.responses.create(model=RESPONSES.model, input=conversation, tools=RESPONSES_TOOLS)
            calls = [item for item in response.output if item.type == "function_call"]
            if not calls:
                return response.output_text
            conversation += response.output
            for call in calls:
                output = weather.call(call.name, call.arguments)
                conversation.append({"type": "function_call_output", "call_id": call.call_id, "output": output})
    raise AssertionError(f"no answer after {LOOP_LIMIT} model calls")


def responses_continued_loop(url: str, weather: Weather) -> str:
    """The loop that continues the last response by its id, sending only the tool's results."""
    with openai_sdk(url) as client:
        response = client.responses.create(model=RESPONSES.model, input=QUESTION, tools=RESPONSES_TOOLS)
        for _ in range(LOOP_LIMIT):
            calls = [item for item in response.output if item.type == "function_call"]
            if not calls:
                return response.output_text
            outputs: list[Any] = [
                {
                    "type": "function_call_output",
                    "call_id": call.call_id,
                    "output": weather.call(call.name, call.arguments),
                }
                for call in calls
            ]
            response = client.responses.create(
                model=RESPONSES.model, input=outputs, tools=RESPONSES_TOOLS, previous_response_id=response.id
            )
    raise AssertionError(f"no answer after {LOOP_LIMIT} model calls")


def responses_helper_stream(url: str) -> str:
    with openai_sdk(url) as client, client.responses.stream(model=RESPONSES.model, input=GREETING_PROMPT) as stream:
        return "".join(event.delta for event in stream if event.type == "response.output_text.delta")


def responses_helper_loop(url: str, weather: Weather) -> str:
    conversation: list[Any] = [{"role": "user", "content": QUESTION}]
    with openai_sdk(url) as client:
        for _ in range(LOOP_LIMIT):
            with client.responses.stream(model=RESPONSES.model, input=conversation, tools=RESPONSES_TOOLS) as stream:
                response = stream.get_final_response()
            calls = [item for item in response.output if item.type == "function_call"]
            if not calls:
                return response.output_text
            conversation += [
                item.model_dump(exclude_none=True, exclude={"parsed_arguments"}) for item in response.output
            ]
            for call in calls:
                output = weather.call(call.name, call.arguments)
                conversation.append({"type": "function_call_output", "call_id": call.call_id, "output": output})
    raise AssertionError(f"no answer after {LOOP_LIMIT} model calls")


# Anthropic: the Messages API.

ANTHROPIC_TOOLS: list[Any] = [{"name": "get_weather", "description": TOOL_DESCRIPTION, "input_schema": WEATHER_SCHEMA}]
MAX_TOKENS = 1024
"""The value Anthropic's own docs use."""


def anthropic_sdk(url: str) -> anthropic.Anthropic:
    """The client as the anthropic README makes one for another server."""
    return anthropic.Anthropic(base_url=url, api_key="sk-ant-test")


def text_of(content: Any) -> str:
    """The text blocks of an Anthropic message's content, joined."""
    return "".join(block.text for block in content if block.type == "text")


def messages_stream(url: str) -> str:
    with anthropic_sdk(url) as client:
        stream = client.messages.create(
            model=MESSAGES.model,
            max_tokens=MAX_TOKENS,
            messages=[{"role": "user", "content": GREETING_PROMPT}],
            stream=True,
        )
        return "".join(
            event.delta.text
            for event in stream
            if event.type == "content_block_delta" and event.delta.type == "text_delta"
        )


def messages_plain(url: str) -> str:
    with anthropic_sdk(url) as client:
        message = client.messages.create(
            model=MESSAGES.model, max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": GREETING_PROMPT}]
        )
        return text_of(message.content)


def tool_results(content: Any, weather: Weather) -> list[Any]:
    """The `tool_result` blocks answering each `tool_use` block of an Anthropic message's content."""
    return [
        {"type": "tool_result", "tool_use_id": block.id, "content": weather.call(block.name, block.input)}
        for block in content
        if block.type == "tool_use"
    ]


def messages_loop(url: str, weather: Weather) -> str:
    """The loop of Anthropic's tool-use guide: the assistant's content back as it came, then the results."""
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    with anthropic_sdk(url) as client:
        for _ in range(LOOP_LIMIT):
            message = client.messages.create(
                model=MESSAGES.model, max_tokens=MAX_TOKENS, messages=messages, tools=ANTHROPIC_TOOLS
            )
            if message.stop_reason != "tool_use":
                return text_of(message.content)
            messages.append({"role": "assistant", "content": message.content})
            messages.append({"role": "user", "content": tool_results(message.content, weather)})
    raise AssertionError(f"no answer after {LOOP_LIMIT} model calls")


def messages_helper_stream(url: str) -> str:
    with (
        anthropic_sdk(url) as client,
        client.messages.stream(
            model=MESSAGES.model, max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": GREETING_PROMPT}]
        ) as stream,
    ):
        return "".join(stream.text_stream)


def messages_helper_loop(url: str, weather: Weather) -> str:
    messages: list[Any] = [{"role": "user", "content": QUESTION}]
    with anthropic_sdk(url) as client:
        for _ in range(LOOP_LIMIT):
            with client.messages.stream(
                model=MESSAGES.model, max_tokens=MAX_TOKENS, messages=messages, tools=ANTHROPIC_TOOLS
            ) as stream:
                message = stream.get_final_message()
            if message.stop_reason != "tool_use":
                return text_of(message.content)
            messages.append({"role": "assistant", "content": message.content})
            messages.append({"role": "user", "content": tool_results(message.content, weather)})
    raise AssertionError(f"no answer after {LOOP_LIMIT} model calls")


def runner_loop(url: str, weather: Weather, *, stream: bool = False) -> str:
    """The SDK's own tool runner (`client.beta.messages.tool_runner`), which runs the loop itself."""
    from anthropic import beta_tool

    @beta_tool
    def get_weather(city: str) -> str:
        """Get weather for a city.

        Args:
            city: The city.
        """
        return weather(city)

    with anthropic_sdk(url) as client:
        runner = client.beta.messages.tool_runner(
            model=MESSAGES.model,
            max_tokens=MAX_TOKENS,
            max_iterations=LOOP_LIMIT,
            tools=[get_weather],
            messages=[{"role": "user", "content": QUESTION}],
            stream=stream,
        )
        if stream:
            for message_stream in runner:
                for _ in message_stream:
                    pass
        return text_of(runner.until_done().content)


def runner_streamed_loop(url: str, weather: Weather) -> str:
    return runner_loop(url, weather, stream=True)


# Google: google-genai, on the Gemini API.


def genai_sdk(url: str) -> genai.Client:
    """The client as google-genai's README makes one for another endpoint: a key and a base URL."""
    return genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=url))


def genai_stream(url: str) -> str:
    with genai_sdk(url) as client:
        return "".join(
            chunk.text or ""
            for chunk in client.models.generate_content_stream(model=GEMINI.model, contents=GREETING_PROMPT)
        )


def genai_plain(url: str) -> str:
    with genai_sdk(url) as client:
        return client.models.generate_content(model=GEMINI.model, contents=GREETING_PROMPT).text or ""


def genai_loop(url: str, weather: Weather) -> str:
    """The SDK's automatic function calling: a Python function as the tool, and the SDK runs the loop."""
    config = types.GenerateContentConfig(tools=[weather.function()])
    with genai_sdk(url) as client:
        return client.models.generate_content(model=GEMINI.model, contents=QUESTION, config=config).text or ""


def genai_streamed_loop(url: str, weather: Weather) -> str:
    config = types.GenerateContentConfig(tools=[weather.function()])
    with genai_sdk(url) as client:
        stream = client.models.generate_content_stream(model=GEMINI.model, contents=QUESTION, config=config)
        return "".join(chunk.text or "" for chunk in stream)


def genai_manual_loop(url: str, weather: Weather) -> str:
    """The loop of the Gemini function-calling guide, run by hand: the model's content back, then the responses."""
    declaration = types.FunctionDeclaration(
        name="get_weather", description=TOOL_DESCRIPTION, parameters_json_schema=WEATHER_SCHEMA
    )
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[declaration])])
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text=QUESTION)])]
    with genai_sdk(url) as client:
        for _ in range(LOOP_LIMIT):
            reply = client.models.generate_content(model=GEMINI.model, contents=contents, config=config)
            if not reply.function_calls:
                return reply.text or ""
            assert reply.candidates
            assert reply.candidates[0].content
            contents.append(reply.candidates[0].content)
            parts = [
                types.Part.from_function_response(
                    name=call.name or "",
                    response={"result": json.loads(weather.call(call.name or "", call.args or {}))},
                )
                for call in reply.function_calls
            ]
            contents.append(types.Content(role="user", parts=parts))
    raise AssertionError(f"no answer after {LOOP_LIMIT} model calls")


SDK_CLIENTS = [
    Client(
        "openai-chat",
        CHAT,
        stream=chat_stream,
        plain=chat_plain,
        loop=chat_loop,
        streamed_loop=chat_streamed_loop,
        extract=chat_extract,
    ),
    Client("openai-chat-stream-helper", CHAT, stream=chat_helper_stream, streamed_loop=chat_helper_loop),
    Client("openai-responses", RESPONSES, stream=responses_stream, plain=responses_plain, loop=responses_loop),
    Client("openai-responses-previous-id", RESPONSES, loop=responses_continued_loop),
    Client(
        "openai-responses-stream-helper", RESPONSES, stream=responses_helper_stream, streamed_loop=responses_helper_loop
    ),
    Client("anthropic", MESSAGES, stream=messages_stream, plain=messages_plain, loop=messages_loop),
    Client("anthropic-stream-helper", MESSAGES, stream=messages_helper_stream, streamed_loop=messages_helper_loop),
    Client("anthropic-tool-runner", MESSAGES, loop=runner_loop, streamed_loop=runner_streamed_loop),
    Client(
        "google-genai",
        GEMINI,
        stream=genai_stream,
        plain=genai_plain,
        loop=genai_loop,
        streamed_loop=genai_streamed_loop,
    ),
    Client("google-genai-manual-loop", GEMINI, loop=genai_manual_loop),
]
