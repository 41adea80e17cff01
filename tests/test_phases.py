"""Matching by the conversation's phase, in every LLM dialect, on the bundled cassettes.

Each dialect sends one conversation in every phase (no tools, tools offered, a tool forced, tools of
which none is recorded, a tool's result), with settings (`max_tokens`, temperature, metadata) equal to
the recordings' and different, and must get a recording of the right phase every time, twice in a row:
what a request offers and demands decides, never an incidental equal value.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import anthropic
import httpx
import openai
import pytest

from sse_tape import (
    Cassette,
    Chunk,
    Interaction,
    Matcher,
    MockServer,
    NoMatchError,
    Request,
    Response,
    bundled_cassettes,
    serve,
)
from sse_tape.journal import Matched, Missed


@pytest.fixture(scope="module")
def server() -> Iterator[MockServer]:
    with serve(pace="instant") as running:  # the bundled cassettes, as each says it is matched
        yield running


@dataclass(frozen=True)
class Dialect:
    """How one API says each part of the conversation, and which bundled recordings are of which phase."""

    path: str
    ask: Callable[[bool], dict[str, Any]]
    """The body of the conversation; with True, ended by the tool's result."""
    tools: Callable[[list[str]], dict[str, Any]]
    """The fields that offer these tools (an empty list: the field sent empty)."""
    choice: Callable[[str], dict[str, Any]]
    """The fields of a `tool_choice`: `none`, `auto`, `required` or a tool's name."""
    settings: list[dict[str, Any]]
    """Incidental settings, equal to a recording's and not."""
    plain: frozenset[str]
    """The recordings of the phase without tools."""
    call: str
    """The recording that calls get_weather."""
    after: str
    """The recording that answers the tool's result."""


def _chat_tool(name: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    return {"type": "function", "function": {"name": name, "description": name, "parameters": schema}}


CHAT = Dialect(
    path="/v1/chat/completions",
    ask=lambda after: {
        "model": "local-model",
        "messages": [
            {"role": "user", "content": "Weather in Tokyo?"},
            *(
                [
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_weather",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": '{"city": "Tokyo"}'},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "call_weather", "content": '{"temp_c": 18}'},
                ]
                if after
                else []
            ),
        ],
        "stream": True,
    },
    tools=lambda names: {"tools": [_chat_tool(n) for n in names]},
    choice=lambda c: {
        "tool_choice": c if c in ("none", "auto", "required") else {"type": "function", "function": {"name": c}}
    },
    settings=[
        {},
        {"max_tokens": 16},
        {"max_tokens": 1024, "temperature": 0.2, "user": "u-1"},
        {"metadata": {"a": "b"}},
    ],
    plain=frozenset({"openai-chat.toml #1"}),
    call="openai-chat.toml #2",
    after="openai-chat.toml #3",
)

RESPONSES = Dialect(
    path="/v1/responses",
    ask=lambda after: {
        "model": "claude-sonnet-4-20250514",
        "input": [
            {"role": "user", "content": "Weather in Tokyo?"},
            *(
                [
                    {
                        "type": "function_call",
                        "call_id": "call_K7vX2mQ9pL4sT8wB",
                        "name": "get_weather",
                        "arguments": '{"city":"Tokyo"}',
                    },
                    {"type": "function_call_output", "call_id": "call_K7vX2mQ9pL4sT8wB", "output": "18C"},
                ]
                if after
                else []
            ),
        ],
        "stream": True,
    },
    tools=lambda names: {"tools": [{"type": "function", **_chat_tool(n)["function"]} for n in names]},
    choice=lambda c: {"tool_choice": c if c in ("none", "auto", "required") else {"type": "function", "name": c}},
    settings=[{}, {"max_output_tokens": 64}, {"temperature": 1.0, "metadata": {"run": "7"}}, {"user": "u-1"}],
    plain=frozenset({"openai-responses.toml #1"}),
    call="openai-responses.toml #2",
    after="openai-responses.toml #3",
)

MESSAGES = Dialect(
    path="/v1/messages",
    ask=lambda after: {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1024,
        "messages": [
            {"role": "user", "content": "What's the weather like in Tokyo?"},
            *(
                [
                    {
                        "role": "assistant",
                        "content": [
                            {
                                "type": "tool_use",
                                "id": "toolu_01A09q90qw90lq917835lq9",
                                "name": "get_weather",
                                "input": {"city": "Tokyo"},
                            }
                        ],
                    },
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "18C"}
                        ],
                    },
                ]
                if after
                else []
            ),
        ],
        "stream": True,
    },
    tools=lambda names: {
        "tools": [{"name": n, "description": n, "input_schema": _chat_tool(n)["function"]["parameters"]} for n in names]
    },
    choice=lambda c: {
        "tool_choice": {"type": "any"}
        if c == "required"
        else {"type": c}
        if c in ("none", "auto")
        else {"type": "tool", "name": c}
    },
    # 1024 is the greeting's max_tokens and the tool call's; 2048 the haiku's.
    settings=[{}, {"max_tokens": 2048}, {"temperature": 0.0, "metadata": {"user_id": "u-1"}}, {"max_tokens": 99}],
    plain=frozenset({"anthropic-messages.toml #1", "anthropic-messages.toml #4"}),
    call="anthropic-messages.toml #2",
    after="anthropic-messages.toml #3",
)

GEMINI = Dialect(
    path="/v1beta/models/gemini-2.5-flash:streamGenerateContent",
    ask=lambda after: {
        "contents": [
            {"role": "user", "parts": [{"text": "Weather in Tokyo?"}]},
            *(
                [
                    {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Tokyo"}}}]},
                    {
                        "role": "user",
                        "parts": [{"functionResponse": {"name": "get_weather", "response": {"temp_c": 18}}}],
                    },
                ]
                if after
                else []
            ),
        ]
    },
    tools=lambda names: {
        "tools": [
            {"functionDeclarations": [{"name": n, "description": n, "parameters": {"type": "OBJECT"}} for n in names]}
        ]
        if names
        else []
    },
    choice=lambda c: {
        "toolConfig": {
            "functionCallingConfig": {"mode": c.upper()}
            if c in ("none", "auto")
            else {"mode": "ANY"}
            if c == "required"
            else {"mode": "ANY", "allowedFunctionNames": [c]}
        }
    },
    # 1.2 is the haiku's temperature.
    settings=[{}, {"generationConfig": {"temperature": 1.2}}, {"generationConfig": {"maxOutputTokens": 64}}],
    plain=frozenset({"gemini.toml #1", "gemini.toml #4", "gemini.toml #5"}),
    call="gemini.toml #2",
    after="gemini.toml #3",
)

DIALECTS = {"openai-chat": CHAT, "openai-responses": RESPONSES, "anthropic-messages": MESSAGES, "gemini": GEMINI}


def _post(server: MockServer, dialect: Dialect, **given: Any) -> httpx.Response:
    """A POST to the dialect's path (`json=` a body, or `content=` its bytes), read whole."""
    query = "?alt=sse" if "streamGenerateContent" in dialect.path else ""
    return httpx.post(server.url + dialect.path + query, timeout=30, **given)


def _last(server: MockServer) -> str:
    """The recording that answered the last request (`openai-chat.toml #2`), or the miss's reason."""
    last = [e for e in server.control.journal.last(4) if isinstance(e, Matched | Missed)][-1]
    return last.recording.split(" (")[0] if isinstance(last, Matched) else f"miss: {last.reason}"


def _answer(server: MockServer, dialect: Dialect, body: dict[str, Any]) -> str:
    """The recording that answered `body` (`openai-chat.toml #2`), or the miss's reason."""
    _post(server, dialect, json=body)
    return _last(server)


def _twice(server: MockServer, dialect: Dialect, body: dict[str, Any]) -> str:
    first, second = _answer(server, dialect, body), _answer(server, dialect, body)
    assert first == second, "a repeat took another phase's turn"
    return first


@pytest.mark.parametrize("name", DIALECTS)
def test_each_phase_gets_its_recording_whatever_the_settings(server: MockServer, name: str) -> None:
    d = DIALECTS[name]
    for setting in d.settings:
        asked = d.ask(False) | setting
        for offered in ({}, d.tools([]), d.choice("none")):  # no tools: nothing to call
            assert _twice(server, d, asked | offered) in d.plain, (setting, offered)
        for choice in ({}, d.choice("auto"), d.choice("required"), d.choice("get_weather")):
            assert _twice(server, d, asked | d.tools(["get_weather"]) | choice) == d.call, (setting, choice)
        both = d.tools(["get_time", "get_weather"])
        assert _twice(server, d, asked | both) == d.call, setting
        after = d.ask(True) | setting | d.tools(["get_weather"])
        for choice in ({}, d.choice("auto"), d.choice("none")):
            assert _twice(server, d, after | choice) == d.after, (setting, choice)
        without = _twice(server, d, d.ask(True) | setting)  # a result sent without its tools: another phase
        assert "the request offers no tools, the recorded one tools (get_weather)" in without


@pytest.mark.parametrize("name", DIALECTS)
def test_a_request_no_recording_of_its_phase_answers_is_a_miss_that_says_why(server: MockServer, name: str) -> None:
    d = DIALECTS[name]
    asked = d.ask(False)
    only_another = _answer(server, d, asked | d.tools(["get_time"]))
    assert "the recorded answer calls get_weather, which the request does not offer" in only_another
    forced_other = _answer(server, d, asked | d.tools(["get_time", "get_weather"]) | d.choice("get_time"))
    assert "tool_choice names get_time, the recorded answer calls get_weather" in forced_other
    none = _answer(server, d, asked | d.tools(["get_weather"]) | d.choice("none"))
    assert "tool_choice is none, the recorded answer calls get_weather" in none
    required = _answer(server, d, d.ask(True) | d.tools(["get_weather"]) | d.choice("required"))
    assert "tool_choice requires a tool call, the recorded answer calls none" in required


def test_the_string_and_list_forms_of_one_input_are_one_conversation(server: MockServer) -> None:
    # The Responses API's bundled greeting was sent as `input: "Hello!"`; every form of it gets it, whatever
    # another recording's settings say.
    forms: list[Any] = [
        "Hello!",
        [{"role": "user", "content": "Hello!"}],
        [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello!"}]}],
    ]
    for form, extra in itertools.product(forms, ({}, {"temperature": 0.5})):
        body = {"model": "claude-sonnet-4-20250514", "input": form, "stream": True} | extra
        assert _twice(server, RESPONSES, body) == "openai-responses.toml #1", form


def test_the_anthropic_tool_runner_runs_its_thread_to_the_answer_twice_in_a_row(server: MockServer) -> None:
    # The SDK's runner holds the conversation in a server thread: its second request sends only the tool's
    # result, with `thread: {"type": "continue", "previous_message_id": ...}` and no tools.
    ran: list[str] = []

    @anthropic.beta_tool
    def get_weather(city: str) -> str:
        """Get the weather for a city."""
        ran.append(city)
        return "18C, sunny"

    with anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0) as client:
        for _ in range(2):
            runner = client.beta.messages.tool_runner(
                model="claude-sonnet-4-6",
                max_tokens=1024,
                tools=[get_weather],
                messages=[{"role": "user", "content": "What's the weather like in Tokyo?"}],
            )
            replies = list(itertools.islice(runner, 5))  # a loop that never ends would be cut here, and fail
            assert [reply.stop_reason for reply in replies] == ["tool_use", "end_turn"]
    assert ran == ["Tokyo", "Tokyo"]


def test_a_responses_continuation_gets_the_answer_to_its_tool_result(server: MockServer) -> None:
    tools: Any = RESPONSES.tools(["get_weather"])["tools"]
    with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as client:
        for _ in range(2):
            first = client.responses.create(model="claude-sonnet-4-20250514", input="Weather in Tokyo?", tools=tools)
            [call] = [item for item in first.output if item.type == "function_call"]
            result = {"type": "function_call_output", "call_id": call.call_id, "output": "18C"}
            then = client.responses.create(
                model="claude-sonnet-4-20250514", previous_response_id=first.id, input=[result], tools=tools
            )
            assert [item.type for item in then.output] == ["message"]
            assert "Tokyo" in then.output_text


# --- what a review found: continuations, ignored fields, mixed turns, arrays, long chains -------------------


def test_a_continuation_offering_no_tools_never_gets_a_tool_call(server: MockServer) -> None:
    # The final answer's id, continued with "tools": [] (openai-agents sends it): the Responses API keeps no
    # tools, and a thread keeps them only for a request that names none.
    with openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as client:
        tools: Any = RESPONSES.tools(["get_weather"])["tools"]
        first = client.responses.create(model="claude-sonnet-4-20250514", input="Weather in Tokyo?", tools=tools)
        [call] = [item for item in first.output if item.type == "function_call"]
        result = {"type": "function_call_output", "call_id": call.call_id, "output": "18C"}
        final = client.responses.create(
            model="claude-sonnet-4-20250514", previous_response_id=first.id, input=[result], tools=tools
        )
        for offered in ({"tools": []}, {}):
            then = client.responses.create(
                model="claude-sonnet-4-20250514", previous_response_id=final.id, input="Thanks!", **offered
            )
            assert [item.type for item in then.output] == ["message"], offered
    after = MESSAGES.ask(True) | MESSAGES.tools(["get_weather"]) | {"stream": False}
    final_id = httpx.post(server.url + MESSAGES.path, json=after, timeout=30).json()["id"]
    continued = {"type": "continue", "previous_message_id": final_id}
    thanks = {"model": "claude-sonnet-4-6", "max_tokens": 1024, "messages": [{"role": "user", "content": "Thanks!"}]}
    assert _answer(server, MESSAGES, thanks | {"thread": continued, "tools": []}) in MESSAGES.plain


def test_ignored_fields_do_not_change_a_requests_phase() -> None:
    [chat] = [Cassette.load(p) for p in bundled_cassettes() if p.name == "openai-chat.toml"]
    recorded = chat.interactions[1].request  # the tool call
    matcher = Matcher([chat], match_on=["method", "path", "body"], ignore_body_fields=["tools"])
    assert matcher.find(recorded).index == 2


@pytest.mark.parametrize("name", ["anthropic-messages", "gemini"])
def test_a_tool_result_with_text_in_the_same_turn_gets_the_answer_to_the_result(server: MockServer, name: str) -> None:
    d = DIALECTS[name]
    body = d.ask(True) | d.tools(["get_weather"])
    turns = body["messages" if name == "anthropic-messages" else "contents"]
    if name == "anthropic-messages":
        turns[-1]["content"].append({"type": "text", "text": "Here is the result."})
    else:
        turns[-1]["parts"].append({"text": "Here is the result."})
    assert _twice(server, d, body) == d.after


def test_a_recorded_json_array_is_read_for_the_tools_its_answer_calls() -> None:
    [gemini] = [Cassette.load(p) for p in bundled_cassettes() if p.name == "gemini.toml"]
    call = gemini.interactions[1]  # the get_weather call, recorded as SSE: recorded here as Google's array
    elements = [event.data for _, event in call.response.events()]
    body = ("[" + ",\r\n".join(elements) + "]").encode()
    array = Interaction(
        replace(call.request, query=""),
        Response(200, (("content-type", "application/json; charset=UTF-8"),), (Chunk(0.0, body),)),
    )
    matcher = Matcher([Cassette([array])], match_on=["method", "path"])
    asked = GEMINI.ask(False)
    with pytest.raises(NoMatchError, match="the recorded answer calls get_weather, which the request does not offer"):
        matcher.find(Request("POST", GEMINI.path, body=json.dumps(asked | GEMINI.tools(["get_time"])).encode()))
    forced = asked | GEMINI.tools(["get_weather"]) | GEMINI.choice("required")
    assert matcher.find(Request("POST", GEMINI.path, body=json.dumps(forced).encode())).index == 1


def test_a_long_chain_of_continuations_is_followed_without_recursion() -> None:
    def turn(n: int) -> Interaction:
        asked: dict[str, Any] = {"model": "m", "input": f"turn {n}"}
        if n:
            asked["previous_response_id"] = f"resp_{n - 1}"
        message = {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed"}
        message["content"] = [{"type": "output_text", "text": f"ok {n}", "annotations": []}]
        answer = {"id": f"resp_{n}", "object": "response", "status": "completed", "model": "m", "output": [message]}
        headers = (("content-type", "application/json"),)
        return Interaction(
            Request("POST", RESPONSES.path, body=json.dumps(asked).encode()),
            Response(200, headers, (Chunk(0.0, json.dumps(answer).encode()),)),
        )

    chain = Cassette([turn(n) for n in range(1500)])
    matcher = Matcher([chain])
    assert matcher.find(chain.interactions[1498].request).index == 1499
    assert matcher.find(chain.interactions[3].request).index == 4


@pytest.mark.parametrize(
    ("name", "choice"),
    [
        ("openai-chat", {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": []}}),
        ("openai-responses", {"type": "allowed_tools", "mode": "required", "tools": []}),
    ],
)
def test_allowed_tools_are_read_by_their_mode(server: MockServer, name: str, choice: dict[str, Any]) -> None:
    d = DIALECTS[name]
    required = d.ask(True) | d.tools(["get_weather"]) | {"tool_choice": choice}
    assert "tool_choice requires a tool call, the recorded answer calls none" in _answer(server, d, required)


@pytest.mark.parametrize("name", DIALECTS)
@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'{"model": "m", "messages": [{"role": "user", "content": "Hi"}', "has a body that is not a JSON object"),
        (b'[{"role": "user", "content": "Hi"}]', "has a body that is not a JSON object"),
        (b"", "has no body"),
    ],
)
def test_a_body_the_api_would_answer_400_gets_no_recording_whatever_match_says(
    server: MockServer, name: str, body: bytes, said: str
) -> None:
    # The bundled cassettes match on method and path: before, broken JSON got the first recording, a 200, where
    # the API answers 400, and a client's bug passed.
    answer = _post(server, DIALECTS[name], content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 404, answer.text
    assert f"the request {said}, the recorded one a JSON object (the API answers it 400)" in answer.text
    missed = _last(server)
    assert missed.startswith("miss: ")
    assert said in missed


@pytest.mark.parametrize("name", DIALECTS)
@pytest.mark.parametrize(
    ("body", "headers", "said"),
    [
        (b'{"mod', (), "a body that is not a JSON object"),
        # A recorder keeps the request's headers, Content-Length among them: a body sent empty says so. (One with
        # no body and no such header, as cassettes written by hand give, still answers any body.)
        (b"", (("content-length", "0"),), "none, sent so (Content-Length: 0)"),
    ],
)
def test_a_recorded_400_to_a_bad_body_answers_bad_bodies_alone(
    name: str, body: bytes, headers: tuple[tuple[str, str], ...], said: str
) -> None:
    # A recorder forwards a body the API answers 400 and keeps the answer. Before, that recording (which has no
    # phase) agreed with every request to its path, and answered a good one, in a phase nothing else recorded,
    # with the 400 instead of its being recorded.
    d = DIALECTS[name]
    query = "?alt=sse" if "streamGenerateContent" in d.path else ""
    refused = Response(400, (("content-type", "application/json"),), (Chunk(0.0, b'{"error": "bad body"}'),))
    recorded = Request("POST", d.path, query.removeprefix("?"), (("content-type", "application/json"), *headers), body)
    with serve(Cassette([Interaction(recorded, refused)], match_on=["method", "path"]), pace="instant") as server:
        for sent in (b'{"mod', b'{"model": "m"', b"[]", b""):
            assert _post(server, d, content=sent, headers={"Content-Type": "application/json"}).status_code == 400
        answer = _post(server, d, json=d.ask(False) | d.tools(["get_weather"]))
        assert answer.status_code == 404, answer.text
        assert f"the request has a JSON object as its body, the recorded one {said}" in answer.text
        assert _last(server).startswith("miss: ")
