"""Model misbehaviour faults, met by the openai SDK's streaming helpers as a real server would send them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from clients import openai_client

from sse_tape import Cassette, MockServer
from sse_tape.dialects import dialect_for
from sse_tape.faults import FAULTS, Stage
from sse_tape.framing import SSE, by_content_type
from sse_tape.journal import FaultInjected
from sse_tape.sse import ServerSentEvent

MISBEHAVIOURS = sorted(name for name, kind in FAULTS.items() if kind.stage is Stage.ANSWER)


@pytest.fixture(scope="module")
def client(instant_server: MockServer) -> Iterator[openai.OpenAI]:
    with openai_client(instant_server.url + "/v1") as client:
        yield client


def body(bundled: dict[str, Cassette], cassette: str, n: int) -> dict[str, Any]:
    """A recorded request's body, less `stream` (the SDK's helpers set it)."""
    recorded = json.loads(bundled[cassette].interactions[n].request.body)
    return {k: v for k, v in recorded.items() if k not in ("stream", "stream_options")}


def fault(spec: str) -> dict[str, Any]:
    return {"extra_headers": {"X-SSE-Tape-Fault": spec}}


# --- chat completions, through client.chat.completions.stream -------------------------------------------


def chat(client: openai.OpenAI, request: dict[str, Any], spec: str) -> Any:
    with client.chat.completions.stream(**request, **fault(spec)) as stream:
        return stream.get_final_completion().choices[0]


def test_chat_tool_arguments_that_break_the_schema(client: openai.OpenAI, bundled: dict[str, Cassette]) -> None:
    choice = chat(client, body(bundled, "openai-chat", 1), "bad-args:schema")
    call = choice.message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": 12345})


def test_chat_an_answer_with_no_call_turns_into_a_call_with_broken_arguments(
    client: openai.OpenAI, bundled: dict[str, Cassette]
) -> None:
    # The turn after the tool's result answers in text; the request still offers get_weather.
    choice = chat(client, body(bundled, "openai-chat", 2), "bad-args")
    assert choice.message.content in (None, "")
    assert [c.function.name for c in choice.message.tool_calls] == ["get_weather"]
    with pytest.raises(json.JSONDecodeError):
        json.loads(choice.message.tool_calls[0].function.arguments)


def test_chat_two_tool_calls_with_the_same_id(client: openai.OpenAI, bundled: dict[str, Cassette]) -> None:
    calls = chat(client, body(bundled, "openai-chat", 1), "duplicate-tool-id").message.tool_calls
    assert [c.id for c in calls] == ["call_weather", "call_weather"]
    assert [c.function.arguments for c in calls] == ['{"city":"Tokyo"}'] * 2


def test_chat_an_answer_that_turns_into_a_refusal(client: openai.OpenAI, bundled: dict[str, Cassette]) -> None:
    request = body(bundled, "openai-chat", 0)
    whole = chat(client, request, "latency:0ms").message.content
    choice = chat(client, request, "refusal:at=3,message=I can't help with that.")
    assert choice.message.refusal == "I can't help with that."
    assert choice.message.content
    assert whole.startswith(choice.message.content)
    assert choice.message.content != whole
    assert choice.finish_reason == "stop"


def test_chat_a_stop_by_the_content_filter_mid_answer(client: openai.OpenAI, bundled: dict[str, Cassette]) -> None:
    request = body(bundled, "openai-chat", 0)
    whole = chat(client, request, "latency:0ms").message.content
    with pytest.raises(openai.ContentFilterFinishReasonError) as info:
        chat(client, request, "content-filter:at=3")
    partial = info.value.completion.choices[0].message.content
    assert partial
    assert whole.startswith(partial)
    assert partial != whole


def test_chat_a_stop_for_length_inside_a_tool_calls_arguments(
    client: openai.OpenAI, bundled: dict[str, Cassette]
) -> None:
    with pytest.raises(openai.LengthFinishReasonError) as info:
        chat(client, body(bundled, "openai-chat", 1), "length")
    arguments = info.value.completion.choices[0].message.tool_calls[0].function.arguments
    assert arguments == '{"city":'  # half of {"city":"Tokyo"}
    with pytest.raises(json.JSONDecodeError):
        json.loads(arguments)


def test_chat_an_empty_answer(client: openai.OpenAI, bundled: dict[str, Cassette]) -> None:
    choice = chat(client, body(bundled, "openai-chat", 0), "empty-answer")
    assert choice.message.content in (None, "")
    assert choice.message.tool_calls in (None, [])
    assert choice.finish_reason == "stop"


def test_chat_reasoning_with_no_answer(client: openai.OpenAI, bundled: dict[str, Cassette]) -> None:
    reasoning = []
    with client.chat.completions.stream(**body(bundled, "openai-chat", 0), **fault("reasoning-only:Hmm.")) as stream:
        for event in stream:
            if event.type == "chunk" and event.chunk.choices:
                reasoning.append((event.chunk.choices[0].delta.model_extra or {}).get("reasoning_content"))
        choice = stream.get_final_completion().choices[0]
    assert "".join(r for r in reasoning if r) == "Hmm."
    assert choice.message.content in (None, "")
    assert choice.finish_reason == "stop"


def test_a_request_for_no_stream_gets_the_misbehaving_answer_whole(
    client: openai.OpenAI, bundled: dict[str, Cassette]
) -> None:
    completion = client.chat.completions.create(**body(bundled, "openai-chat", 1), **fault("bad-args"))
    assert completion.choices[0].message.tool_calls[0].function.arguments == '{"city":"Tokyo",}'
    refused = client.chat.completions.create(**body(bundled, "openai-chat", 0), **fault("refusal:0,message=No."))
    assert (refused.choices[0].message.refusal, refused.choices[0].message.content) == ("No.", None)


# --- the Responses API, through client.responses.stream ------------------------------------------------------


def respond(client: openai.OpenAI, request: dict[str, Any], spec: str) -> Any:
    with client.responses.stream(**request, **fault(spec)) as stream:
        return stream.get_final_response()


def test_responses_two_calls_with_one_call_id(client: openai.OpenAI, bundled: dict[str, Cassette]) -> None:
    request = body(bundled, "openai-responses", 1)
    # The SDK's stream helper tells function calls apart by call_id: two with one id stop it.
    with pytest.raises(RuntimeError, match="conflicting output identities"):
        respond(client, request, "duplicate-tool-id")
    with client.responses.create(**request, stream=True, **fault("duplicate-tool-id")) as stream:
        done = [e.item for e in stream if e.type == "response.output_item.done"]
    assert [item.type for item in done] == ["function_call", "function_call"]
    assert done[0].call_id == done[1].call_id
    assert done[0].id != done[1].id  # two items, as the API would send them


def test_responses_a_refusal(client: openai.OpenAI, bundled: dict[str, Cassette]) -> None:
    response = respond(client, body(bundled, "openai-responses", 0), "refusal:0,message=No.")
    parts = [part for item in response.output if item.type == "message" for part in item.content]
    assert [(p.type, getattr(p, "refusal", None)) for p in parts] == [("refusal", "No.")]


def incomplete(client: openai.OpenAI, request: dict[str, Any], spec: str) -> Any:
    """The response a stream ends with when it ends incomplete (the SDK's `get_final_response()` wants a
    `response.completed`, and raises)."""
    with client.responses.stream(**request, **fault(spec)) as stream:
        last = list(stream)[-1]
        with pytest.raises(RuntimeError, match=r"response\.completed"):
            stream.get_final_response()
    assert last.type == "response.incomplete"
    return last.response


def test_responses_the_content_filter_and_length_leave_the_response_incomplete(
    client: openai.OpenAI, bundled: dict[str, Cassette]
) -> None:
    filtered = incomplete(client, body(bundled, "openai-responses", 0), "content-filter")
    assert (filtered.status, filtered.incomplete_details.reason) == ("incomplete", "content_filter")
    assert filtered.output_text
    assert "Hello! How can I help you today?".startswith(filtered.output_text)
    cut = incomplete(client, body(bundled, "openai-responses", 1), "length")
    assert (cut.status, cut.incomplete_details.reason) == ("incomplete", "max_output_tokens")
    (call,) = [item for item in cut.output if item.type == "function_call"]
    assert call.arguments == '{"city":'


def test_responses_empty_and_reasoning_only(client: openai.OpenAI, bundled: dict[str, Cassette]) -> None:
    empty = respond(client, body(bundled, "openai-responses", 0), "empty-answer")
    assert (empty.status, empty.output_text, empty.output) == ("completed", "", [])
    thinking = respond(client, body(bundled, "openai-responses", 0), "reasoning-only:Hmm.")
    assert thinking.output_text == ""
    assert [item.type for item in thinking.output] == ["reasoning"]


# --- the same misbehaviour in both APIs, through each one's stream helper ---------------------------------


def chat_calls(client: openai.OpenAI, request: dict[str, Any], spec: str) -> tuple[list[tuple[str, str]], str]:
    """The tool calls a chat stream assembles, (name, arguments) each, and how its choice finished."""
    choice = chat(client, request, spec)
    return [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []], choice.finish_reason


def responses_calls(client: openai.OpenAI, request: dict[str, Any], spec: str) -> tuple[list[tuple[str, str]], str]:
    """The function calls a Responses stream assembles, (name, arguments) each, and the response's status."""
    response = respond(client, request, spec)
    return [(item.name, item.arguments) for item in response.output if item.type == "function_call"], response.status


BOTH_APIS = pytest.mark.parametrize(
    ("cassette", "calls", "done"),
    [("openai-chat", chat_calls, "tool_calls"), ("openai-responses", responses_calls, "completed")],
    ids=["chat", "responses"],
)
Calls = Callable[[openai.OpenAI, dict[str, Any], str], tuple[list[tuple[str, str]], str]]


@BOTH_APIS
def test_tool_arguments_that_are_not_json(
    client: openai.OpenAI, bundled: dict[str, Cassette], cassette: str, calls: Calls, done: str
) -> None:
    made, finished = calls(client, body(bundled, cassette, 1), "bad-args")
    assert (made, finished) == ([("get_weather", '{"city":"Tokyo",}')], done)
    with pytest.raises(json.JSONDecodeError):
        json.loads(made[0][1])


@BOTH_APIS
def test_a_call_to_a_tool_the_request_did_not_offer(
    client: openai.OpenAI, bundled: dict[str, Cassette], cassette: str, calls: Calls, done: str
) -> None:
    request = body(bundled, cassette, 1)
    made, finished = calls(client, request, "unknown-tool:drop_database")
    assert (made, finished) == ([("drop_database", '{"city":"Tokyo"}')], done)
    assert "drop_database" not in json.dumps(request["tools"])


# --- every misbehaviour, every bundled stream: framed as its API frames it, judged by `check` -----------

# What `check` says of a stream that shows each misbehaviour: a server may send any of these, except
# two calls with one id, a call to a tool the request did not offer, and arguments that are not JSON.
FORBIDS = {
    "bad-args": "arguments are not valid JSON",
    "unknown-tool": "which the request did not offer",
    "duplicate-tool-id": "have the same id",
}


def _messages(content_type: str | None, body: bytes) -> list[ServerSentEvent]:
    """The messages of a body, in the framing its content type names (Bedrock's event stream), else SSE."""
    framing = by_content_type(content_type) or SSE
    return [block.event for block in framing.blocks(body) if block.event is not None]


@pytest.mark.parametrize("name", MISBEHAVIOURS)
def test_every_misbehaviour_on_every_bundled_stream_is_framed_as_its_api_frames_it(
    instant_server: MockServer, bundled: dict[str, Cassette], name: str
) -> None:
    shown = set()
    with httpx.Client(base_url=instant_server.url, timeout=30) as http:
        for stem, cassette in bundled.items():
            for n, interaction in enumerate(cassette):
                request = interaction.request
                if interaction.response.status != 200:
                    continue
                headers = {"content-type": "application/json", "X-SSE-Tape-Fault": name}
                url = f"{request.path}?{request.query}" if request.query else request.path  # Gemini's alt=sse
                answer = http.request(request.method, url, content=request.body, headers=headers)
                note = [e for e in instant_server.journal if isinstance(e, FaultInjected)][-1].what
                events = _messages(answer.headers.get("content-type"), answer.content)
                dialect = dialect_for(request.path, interaction)
                recorded = _messages(interaction.response.header("content-type"), interaction.response.body)
                where = f"{stem}#{n} ({note})"
                if note.endswith("left alone"):
                    assert events == recorded, where
                    continue
                shown.add(dialect.name)
                assert answer.status_code == 200, where
                problems = [str(v) for v in dialect.check(events, request)]
                expected = FORBIDS.get(name)
                assert all(expected and expected in p for p in problems), (where, problems)
                assert bool(problems) == bool(expected), (where, problems)
    # Every misbehaviour shows in the chat and Responses APIs; the ones a dialect has words for, in it.
    assert {"openai-chat", "openai-responses"} <= shown
