"""Amazon Bedrock's `InvokeModelWithResponseStream` for Anthropic's models (`bedrock-invoke`), read by boto3's own
`bedrock-runtime` client pointed at `sse-tape serve` with dummy credentials: the bundled cassette and an openai-chat
recording converted to it, streamed (`invoke_model_with_response_stream`: AWS's event stream of chunks, each the
base64 of a Messages API event) and not (`invoke_model`), through a tool loop; boto3's own exceptions under the
faults; recorded through `sse-tape record` and replayed byte for byte; synthesized by `serve --model`; and
`check`'s rules, each named by a stream that breaks it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import signal
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import processes
import pytest
from aiohttp import web
from aws import bedrock_client, bundled_cassette
from botocore.exceptions import ClientError, EventStreamError
from click.testing import CliRunner
from upstream import on_loopback

from sse_tape import Cassette, MockServer, bundled_cassettes, serve
from sse_tape.checking import check_interaction
from sse_tape.cli import cli
from sse_tape.dialects import DIALECTS, detect, for_path
from sse_tape.faults import apply, parse_fault
from sse_tape.framing import EVENT_STREAM
from sse_tape.pacing import Pacing
from sse_tape.sse import ServerSentEvent
from sse_tape.translation import translate

pytestmark = pytest.mark.usefixtures("collected")

MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
GREETING = "Hello! How can I help you today?"
TOOL = {
    "name": "get_weather",
    "description": "Get the current weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
HELLO = [{"role": "user", "content": "Hello!"}]
ASK = {"role": "user", "content": "What's the weather in Tokyo?"}
INVOKE = DIALECTS["bedrock-invoke"]


def body(messages: list[dict[str, Any]], **more: Any) -> str:
    """A Messages body as Bedrock takes it: `anthropic_version`, no model and no `stream`."""
    return json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 512, "messages": messages, **more})


def events(
    url: str, messages: list[dict[str, Any]], into: list[dict[str, Any]] | None = None, model: str = MODEL, **more: Any
) -> Any:
    """The Messages events of an `invoke_model_with_response_stream`, each put in `into` as it comes (so that
    the ones before an exception are there)."""
    got = [] if into is None else into
    with bedrock_client(url) as bedrock:
        answer = bedrock.invoke_model_with_response_stream(modelId=model, body=body(messages, **more))
        try:
            for event in answer["body"]:
                got.append(json.loads(event["chunk"]["bytes"]))
        finally:
            answer["body"].close()  # after an exception too: its connection is not the pool's to close
    return got


def streamed(found: list[dict[str, Any]]) -> tuple[str, list[tuple[str, str, Any]], str | None]:
    """What a client makes of the Messages events: the text, the tool uses (id, name, input), the stop reason."""
    text, uses, stop = "", [], None
    inputs: dict[int, str] = {}
    for event in found:
        if event["type"] == "content_block_start" and event["content_block"]["type"] == "tool_use":
            block = event["content_block"]
            uses.append((block["id"], block["name"], event["index"]))
        elif event["type"] == "content_block_delta":
            delta = event["delta"]
            text += delta.get("text", "")
            if delta["type"] == "input_json_delta":
                inputs[event["index"]] = inputs.get(event["index"], "") + delta["partial_json"]
        elif event["type"] == "message_delta":
            stop = event["delta"]["stop_reason"]
    return text, [(id, name, json.loads(inputs.get(index) or "{}")) for id, name, index in uses], stop


def plain(answer: dict[str, Any]) -> tuple[str, list[tuple[str, str, Any]], str | None]:
    """The same of an `invoke_model` answer: the Messages API's message."""
    blocks = answer["content"]
    text = "".join(b.get("text", "") for b in blocks if b["type"] == "text")
    uses = [(b["id"], b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"]
    return text, uses, answer["stop_reason"]


def call(url: str, messages: list[dict[str, Any]], *, stream: bool, model: str = MODEL, **more: Any) -> Any:
    """One call, streamed or not, as the client makes it out."""
    if stream:
        return streamed(events(url, messages, model=model, **more))
    with bedrock_client(url) as bedrock:
        answer = bedrock.invoke_model(modelId=model, body=body(messages, **more))
        assert answer["contentType"] == "application/json"
        return plain(json.loads(answer["body"].read()))


def tool_loop(
    url: str, model: str = MODEL, *, stream: bool
) -> list[tuple[str, list[tuple[str, str, Any]], str | None]]:
    """A greeting, then an agent's loop: ask with a tool offered, run the tool it uses, send its result."""
    greeting = call(url, HELLO, stream=stream, model=model)
    asked = call(url, [ASK], stream=stream, model=model, tools=[TOOL])
    [(use_id, name, given)] = asked[1]
    used = {"role": "assistant", "content": [{"type": "tool_use", "id": use_id, "name": name, "input": given}]}
    result = json.dumps({"temperature_c": 18, "conditions": "sunny"})
    answered = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use_id, "content": result}]}
    after = call(url, [ASK, used, answered], stream=stream, model=model, tools=[TOOL])
    return [greeting, asked, after]


@pytest.fixture(scope="module")
def bundled_server() -> Iterator[MockServer]:
    with serve(bundled_cassette("bedrock-invoke.toml"), pace="instant") as server:
        yield server


BUNDLED_ANSWERS = [
    (GREETING, [], "end_turn"),
    (
        "I'll check the weather in Tokyo for you.",
        [("toolu_bdrk_01D7FLsDrWGaRF4BzBqE9Bv5", "get_weather", {"city": "Tokyo"})],
        "tool_use",
    ),
    ("It's 18°C and sunny in Tokyo.", [], "end_turn"),
]


def test_the_stream_gets_the_bundled_greeting_chunk_by_chunk(bundled_server: MockServer) -> None:
    got = events(bundled_server.url, HELLO)
    assert [e["type"] for e in got] == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * 3,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert got[0]["message"]["model"] == "claude-3-5-haiku-20241022"
    assert got[-1]["amazon-bedrock-invocationMetrics"] == {
        "inputTokenCount": 9,
        "outputTokenCount": 12,
        "invocationLatency": 481,
        "firstByteLatency": 381,
    }
    assert streamed(got) == (GREETING, [], "end_turn")


@pytest.mark.parametrize("stream", [True, False], ids=["invoke_model_with_response_stream", "invoke_model"])
def test_a_tool_loop_reads_the_bundled_cassette_streamed_and_not(bundled_server: MockServer, stream: bool) -> None:
    assert tool_loop(bundled_server.url, stream=stream) == BUNDLED_ANSWERS


def test_invoke_model_reports_the_streams_usage(bundled_server: MockServer) -> None:
    with bedrock_client(bundled_server.url) as bedrock:
        answer = json.loads(bedrock.invoke_model(modelId=MODEL, body=body(HELLO))["body"].read())
    assert (answer["usage"]["input_tokens"], answer["usage"]["output_tokens"]) == (9, 12)


def test_an_openai_chat_recording_converted_to_bedrock_invoke_gives_boto3_its_text_and_tool_call(
    tmp_path: Path,
) -> None:
    source = next(p for p in bundled_cassettes() if p.name == "openai-chat.toml")
    converted = tmp_path / "invoke.toml"
    result = CliRunner().invoke(cli, ["convert", str(source), str(converted), "--to-dialect", "bedrock-invoke"])
    assert result.exit_code == 0, result.output
    recorded = Cassette.load(converted)
    assert {i.response.header("content-type") for i in recorded} == {"application/vnd.amazon.eventstream"}
    assert [check_interaction(i).violations for i in recorded] == [(), (), ()]
    with serve(recorded, pace="instant") as server:
        for stream in (True, False):
            greeting, asked, after = tool_loop(server.url, "local-model", stream=stream)
            assert greeting == ("Hi there! How can I help you today?", [], "end_turn")
            assert asked == ("", [("call_weather", "get_weather", {"city": "Tokyo"})], "tool_use")
            assert after[0] == "It's 18°C with light rain in Tokyo right now, so take an umbrella."


@pytest.mark.parametrize("other", ["openai-chat", "anthropic-messages", "bedrock-converse"])
def test_the_bundled_streams_convert_to_another_dialect_and_back_with_the_same_events(
    bundled: dict[str, Cassette], other: str
) -> None:
    for interaction in bundled["bedrock-invoke"]:
        back = translate(translate(interaction, DIALECTS[other]), INVOKE)
        assert detect(back) is INVOKE
        assert check_interaction(back).violations == ()
        before, after = (INVOKE.decode(_messages(i.response.body)) for i in (interaction, back))
        assert [type(e) for e in after] == [type(e) for e in before]
        assert INVOKE.prompt(back.request.json()).messages == INVOKE.prompt(interaction.request.json()).messages


def test_a_request_body_is_the_messages_apis_without_model_or_stream() -> None:
    prompt = INVOKE.request_prompt(json.loads(body([ASK], tools=[TOOL])), f"/model/{MODEL}/invoke")
    assert prompt.model == MODEL
    assert INVOKE.request_body(prompt) == {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 512,
        "messages": [ASK],
        "tools": [TOOL],
    }
    assert (
        INVOKE.request_path(prompt) == "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/invoke-with-response-stream"
    )


def _messages(body: bytes) -> list[ServerSentEvent]:
    return [b.event for b in EVENT_STREAM.blocks(body) if b.event is not None]


@pytest.mark.parametrize(
    ("fault", "code"),
    [
        ("error:at=3", "modelStreamErrorException"),
        ("error:at=3,type=rate_limit_error,message=Too many tokens", "throttlingException"),
        ("error:at=0,type=overloaded_error", "serviceUnavailableException"),
        ("error:at=3,code=validationException", "validationException"),
    ],
)
def test_an_error_mid_stream_is_an_exception_message_boto3_raises(fault: str, code: str) -> None:
    with serve(bundled_cassette("bedrock-invoke.toml"), pace="instant") as server:
        server.control.set_faults([fault])
        got: list[dict[str, Any]] = []
        with pytest.raises(EventStreamError) as raised:
            events(server.url, HELLO, into=got)
    assert raised.value.response["Error"]["Code"] == code
    assert raised.value.response["Error"]["Message"] == (
        "Too many tokens" if "message" in fault else "injected by sse-tape"
    )
    assert got[0]["type"] == "message_start"
    assert len(got) == (1 if "at=0" in fault else 3)


@pytest.mark.parametrize("stream", [True, False])
def test_a_429_before_the_answer_is_boto3s_throttling_exception(stream: bool) -> None:
    with serve(bundled_cassette("bedrock-invoke.toml"), pace="instant") as server:
        server.control.set_faults(["status:code=429"])
        with pytest.raises(ClientError) as raised:
            call(server.url, HELLO, stream=stream)
    error = raised.value.response["Error"]
    assert (error["Code"], error["Message"]) == ("ThrottlingException", "injected by sse-tape: status 429")


def test_an_error_at_every_position_of_a_bundled_stream_is_an_exception_after_the_chunks_before_it() -> None:
    for interaction in bundled_cassette("bedrock-invoke.toml"):
        original = [(e.event, e.data) for e in _messages(interaction.response.body)]
        terminal = next(
            n for n, (name, data) in enumerate(original) if INVOKE.is_terminal(ServerSentEvent(data=data, event=name))
        )
        for at in range(len(original) + 1):
            plan = Pacing().plan(interaction.response)
            plan.framing = EVENT_STREAM
            apply(
                [parse_fault(f"error:{at},type=rate_limit_error,message=boom")],
                plan,
                dialect=INVOKE,
                rng=random.Random(0),
            )
            got = _messages(plan.body)
            kept = min(at, terminal) or 1  # before the message_delta; after the message_start, which opens it
            # At 0 the error comes after a message_start of the encoder's own, which opens the stream.
            assert [(e.event, e.data) for e in got][1 if at == 0 else 0 :] == [
                *original[1 if at == 0 else 0 : kept],
                ("throttlingException", '{"message":"boom"}'),
            ]
            assert INVOKE.check(got, interaction.request) == [], at
            assert EVENT_STREAM.problems(plan.body) == []


def test_the_dialect_is_known_by_its_path_and_a_moved_recording_by_its_stream(bundled: dict[str, Cassette]) -> None:
    assert for_path("/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/invoke-with-response-stream") is INVOKE
    assert for_path("/bedrock/model/m/invoke") is INVOKE
    assert for_path("/model/m/converse") is DIALECTS["bedrock-converse"]
    for interaction in bundled["bedrock-invoke"]:
        moved = replace(interaction, request=replace(interaction.request, path="/somewhere"))
        assert detect(moved) is INVOKE


def _chunk(obj: dict[str, Any]) -> tuple[str, Any]:
    return "chunk", {"bytes": base64.b64encode(json.dumps(obj).encode()).decode()}


START = _chunk({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": []}})
OPEN = _chunk({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
HI = _chunk({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}})
CLOSE = _chunk({"type": "content_block_stop", "index": 0})
DELTA = _chunk({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}})
METRICS = {"inputTokenCount": 1, "outputTokenCount": 1, "invocationLatency": 5, "firstByteLatency": 4}
STOP = _chunk({"type": "message_stop", "amazon-bedrock-invocationMetrics": METRICS})


def _sse(*messages: tuple[str, Any]) -> list[ServerSentEvent]:
    return [ServerSentEvent(data=json.dumps(payload), event=name) for name, payload in messages]


@pytest.mark.parametrize(
    ("messages", "found"),
    [
        ([START, OPEN, HI, CLOSE, DELTA, STOP], []),
        (
            [START, OPEN, HI, CLOSE, DELTA, _chunk({"type": "message_stop"})],
            ["event 6: message_stop without amazon-bedrock-invocationMetrics (inputTokenCount, outputTokenCount)"],
        ),
        (
            [START, ("chunk", {"bytes": "not base64!"})],
            ["event 2: chunk without bytes: the base64 of a JSON object", "no terminal event (message_stop or error)"],
        ),
        (
            [START, ("contentBlockDelta", {})],
            ["event 2: unknown event 'contentBlockDelta', not a chunk", "no terminal event (message_stop or error)"],
        ),
        (
            [START, OPEN, ("throttlingException", {"message": "slow down"}), HI],
            ["event 4: chunk after throttlingException"],
        ),
        ([START, ("modelTimeoutException", {"message": "late"})], []),
        (
            [START, ("oopsException", {})],
            [
                "event 2: oopsException is not one of the stream's exceptions (validationException, throttlingException, modelStreamErrorException, internalServerException, serviceUnavailableException, modelTimeoutException)",
                "event 2: oopsException without a message",
            ],
        ),
        # The Messages API's rules, on the events the chunks carry, at their chunks' positions.
        (
            [START, HI, CLOSE, DELTA, STOP],
            [
                "event 2: content_block_delta for block 0, which is not open",
                "event 3: content_block_stop for block 0, which is not open",
            ],
        ),
        ([START, OPEN, HI, CLOSE], ["no terminal event (message_stop or error)"]),
    ],
)
def test_check_names_the_rule_a_stream_breaks(messages: list[tuple[str, Any]], found: list[str]) -> None:
    assert [str(v) for v in INVOKE.check(_sse(*messages))] == found


def test_serve_model_streams_a_synthesized_answer_to_boto3_in_chunks(tiny_model_path: Path) -> None:
    process, url = processes.start(["serve", "--model", str(tiny_model_path), "--port", "0", "--seed", "3"])
    try:
        got = events(url, HELLO, model="tiny", max_tokens=6)
        with bedrock_client(url) as bedrock:
            whole = json.loads(bedrock.invoke_model(modelId="tiny", body=body(HELLO, max_tokens=6))["body"].read())
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert [e["type"] for e in got][:1] + [e["type"] for e in got][-2:] == [
        "message_start",
        "message_delta",
        "message_stop",
    ]
    text, uses, stop = streamed(got)
    assert (bool(text), uses, stop) == (True, [], "max_tokens")
    assert got[-1]["amazon-bedrock-invocationMetrics"]["outputTokenCount"] == 6
    assert (whole["stop_reason"], whole["usage"]["output_tokens"]) == ("max_tokens", 6)


@pytest.mark.parametrize("stream", [True, False])
def test_an_error_mid_stream_asked_for_no_stream_is_the_apis_error(stream: bool) -> None:
    with serve(bundled_cassette("bedrock-invoke.toml"), pace="instant") as server:
        server.control.set_faults(["error:at=3,type=rate_limit_error"])
        with pytest.raises((ClientError, EventStreamError)) as raised:
            call(server.url, HELLO, stream=stream)
    assert raised.value.response["Error"]["Code"] == ("throttlingException" if stream else "ThrottlingException")


async def bedrock_upstream(request: web.Request) -> web.StreamResponse:
    """Bedrock's answer: the bundled greeting's chunks, a message a write."""
    await request.read()
    response = web.StreamResponse(headers={"content-type": "application/vnd.amazon.eventstream"})
    await response.prepare(request)
    for chunk in bundled_cassette("bedrock-invoke.toml").interactions[0].response.chunks:
        await response.write(chunk.data)
    await response.write_eof()
    return response


async def test_recorded_through_sse_tape_record_redacted_and_replayed_byte_for_byte(tmp_path: Path) -> None:
    cassette = tmp_path / "invoke.toml"
    sent = [c.data for c in bundled_cassette("bedrock-invoke.toml").interactions[0].response.chunks]
    async with on_loopback("/model/{model}/invoke-with-response-stream", bedrock_upstream) as upstream:
        with processes.recording_proxy(upstream, cassette) as url:
            live = await asyncio.to_thread(events, url, HELLO)
    assert streamed(live) == (GREETING, [], "end_turn")
    (interaction,) = Cassette.load(cassette).interactions
    assert [c.data for c in interaction.response.chunks] == sent
    assert interaction.request.header("authorization") == "<redacted>"
    assert check_interaction(interaction).violations == ()
    with serve(cassette, pace="instant") as replay:
        assert streamed(await asyncio.to_thread(events, replay.url, HELLO)) == (GREETING, [], "end_turn")
