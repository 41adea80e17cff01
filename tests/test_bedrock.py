"""Amazon Bedrock's Converse API (`bedrock-converse`), read by boto3's own `bedrock-runtime` client pointed at
`sse-tape serve` with dummy credentials: the bundled cassette and an openai-chat recording converted to it,
streamed (`converse_stream`, AWS's binary event stream) and not (`converse`), through a tool loop; boto3's own
exceptions under the faults; recorded through `sse-tape record` from a loopback server of ours that speaks the
event stream, redacted, and replayed byte for byte; and `check`'s rules, each named by a stream that breaks it.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import processes
import pytest
from aiohttp import web
from aws import bedrock_client, bundled_cassette
from botocore.eventstream import ChecksumMismatch
from botocore.exceptions import ClientError, EventStreamError
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from upstream import on_loopback

from sse_tape import Cassette, MockServer, bundled_cassettes, serve
from sse_tape.checking import check_interaction
from sse_tape.cli import cli
from sse_tape.dialects import DIALECTS, detect, for_path
from sse_tape.faults import apply, parse_fault
from sse_tape.framing import EVENT_STREAM
from sse_tape.framing.event_stream import encode_message
from sse_tape.pacing import Pacing
from sse_tape.sse import ServerSentEvent
from sse_tape.translation import translate

pytestmark = pytest.mark.usefixtures("collected")

MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
GREETING = "Hello! How can I help you today?"
TOOLS = {
    "tools": [
        {
            "toolSpec": {
                "name": "get_weather",
                "description": "Get the current weather for a city",
                "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}}}},
            }
        }
    ]
}
HELLO = [{"role": "user", "content": [{"text": "Hello!"}]}]
ASK = {"role": "user", "content": [{"text": "What's the weather in Tokyo?"}]}
BEDROCK = DIALECTS["bedrock-converse"]


def greet(url: str, call: str = "converse_stream", into: list[dict[str, Any]] | None = None, **keys: str) -> Any:
    """Say hello with a new client: a `converse_stream`'s events, each put in `into` as it comes (so that the
    ones before an exception are there), or a `converse`'s answer."""
    got = [] if into is None else into
    with bedrock_client(url, **keys) as bedrock:
        answer = getattr(bedrock, call)(modelId=MODEL, messages=HELLO)
        if call == "converse":
            return answer
        try:
            for event in answer["stream"]:
                got.append(event)
        finally:
            answer["stream"].close()  # after an exception too: its connection is not the pool's to close
    return got


def streamed(events: Iterable[dict[str, Any]]) -> tuple[str, list[tuple[str, str, Any]], str | None]:
    """What a client makes of a `converse_stream` answer's events: the text, the tool uses (id, name, input)
    and the stop reason."""
    text, uses, stop = "", [], None
    inputs: dict[int, str] = {}
    for event in events:
        if "contentBlockStart" in event:
            start = event["contentBlockStart"]
            tool = start["start"]["toolUse"]
            uses.append((tool["toolUseId"], tool["name"], start["contentBlockIndex"]))
        elif "contentBlockDelta" in event:
            delta = event["contentBlockDelta"]["delta"]
            text += delta.get("text", "")
            if "toolUse" in delta:
                index = event["contentBlockDelta"]["contentBlockIndex"]
                inputs[index] = inputs.get(index, "") + delta["toolUse"]["input"]
        elif "messageStop" in event:
            stop = event["messageStop"]["stopReason"]
    return text, [(id, name, json.loads(inputs.get(index, "{}"))) for id, name, index in uses], stop


def plain(answer: dict[str, Any]) -> tuple[str, list[tuple[str, str, Any]], str | None]:
    """The same of a `converse` answer."""
    blocks = answer["output"]["message"]["content"]
    text = "".join(b.get("text", "") for b in blocks)
    uses = [(b["toolUse"]["toolUseId"], b["toolUse"]["name"], b["toolUse"]["input"]) for b in blocks if "toolUse" in b]
    return text, uses, answer["stopReason"]


def tool_loop(url: str, model: str, *, stream: bool) -> list[tuple[str, list[tuple[str, str, Any]], str | None]]:
    """A greeting, then an agent's loop: ask with a tool offered, run the tool it uses, send its result."""
    with bedrock_client(url) as bedrock:
        call, read = (bedrock.converse_stream, lambda a: streamed(a["stream"])) if stream else (bedrock.converse, plain)
        greeting = read(call(modelId=model, messages=HELLO))
        asked = read(call(modelId=model, messages=[ASK], toolConfig=TOOLS))
        [(use_id, name, given)] = asked[1]
        used = {"role": "assistant", "content": [{"toolUse": {"toolUseId": use_id, "name": name, "input": given}}]}
        result = {"temperature_c": 18, "conditions": "sunny"}
        answered = {"role": "user", "content": [{"toolResult": {"toolUseId": use_id, "content": [{"json": result}]}}]}
        after = read(call(modelId=model, messages=[ASK, used, answered], toolConfig=TOOLS))
    return [greeting, asked, after]


@pytest.fixture(scope="module")
def bundled_server() -> Iterator[MockServer]:
    with serve(bundled_cassette("bedrock-converse.toml"), pace="instant") as server:
        yield server


BUNDLED_ANSWERS = [
    (GREETING, [], "end_turn"),
    (
        "I'll check the weather in Tokyo for you.",
        [("tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "get_weather", {"city": "Tokyo"})],
        "tool_use",
    ),
    ("It's 18°C and sunny in Tokyo.", [], "end_turn"),
]


def test_converse_stream_gets_the_bundled_greeting_event_by_event(bundled_server: MockServer) -> None:
    with bedrock_client(bundled_server.url) as bedrock:
        answer = bedrock.converse_stream(modelId=MODEL, messages=HELLO)
        events = list(answer["stream"])
    assert answer["ResponseMetadata"]["HTTPHeaders"]["content-type"] == "application/vnd.amazon.eventstream"
    assert events == [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"delta": {"text": "Hello"}, "contentBlockIndex": 0}},
        {"contentBlockDelta": {"delta": {"text": "! How can I"}, "contentBlockIndex": 0}},
        {"contentBlockDelta": {"delta": {"text": " help you today?"}, "contentBlockIndex": 0}},
        {"contentBlockStop": {"contentBlockIndex": 0}},
        {"messageStop": {"stopReason": "end_turn"}},
        {
            "metadata": {
                "usage": {"inputTokens": 9, "outputTokens": 12, "totalTokens": 21},
                "metrics": {"latencyMs": 381},
            }
        },
    ]


@pytest.mark.parametrize("stream", [True, False], ids=["converse_stream", "converse"])
def test_a_tool_loop_reads_the_bundled_cassette_streamed_and_not(bundled_server: MockServer, stream: bool) -> None:
    assert tool_loop(bundled_server.url, MODEL, stream=stream) == BUNDLED_ANSWERS


def test_converse_reports_the_streams_usage(bundled_server: MockServer) -> None:
    answer = greet(bundled_server.url, "converse")
    assert answer["usage"] == {"inputTokens": 9, "outputTokens": 12, "totalTokens": 21}


def test_an_openai_chat_recording_converted_to_bedrock_gives_boto3_its_text_and_tool_call(tmp_path: Path) -> None:
    source = next(p for p in bundled_cassettes() if p.name == "openai-chat.toml")
    converted = tmp_path / "bedrock.toml"
    result = CliRunner().invoke(cli, ["convert", str(source), str(converted), "--to-dialect", "bedrock-converse"])
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


def test_the_bundled_streams_convert_to_openai_chat_and_back(bundled: dict[str, Cassette]) -> None:
    for interaction in bundled["bedrock-converse"]:
        back = translate(translate(interaction, DIALECTS["openai-chat"]), BEDROCK)
        assert detect(back) is BEDROCK
        # Every message byte for byte, but the latency: OpenAI's usage does not carry it.
        before, after = (_messages(i.response.body) for i in (interaction, back))
        assert before[:-1] == after[:-1]
        assert json.loads(after[-1][1]) == {**json.loads(before[-1][1]), "metrics": {"latencyMs": 0}}


def _messages(body: bytes) -> list[tuple[str, str]]:
    return [(b.event.event, b.event.data) for b in EVENT_STREAM.blocks(body) if b.event is not None]


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
    with serve(bundled_cassette("bedrock-converse.toml"), pace="instant") as server:
        server.control.set_faults([fault])
        got: list[dict[str, Any]] = []
        with pytest.raises(EventStreamError) as raised:
            greet(server.url, into=got)
    assert raised.value.response["Error"]["Code"] == code
    assert raised.value.response["Error"]["Message"] == (
        "Too many tokens" if "message" in fault else "injected by sse-tape"
    )
    assert got[0] == {"messageStart": {"role": "assistant"}}
    assert len(got) == (1 if "at=0" in fault else 3)


@pytest.mark.parametrize("call", ["converse_stream", "converse"])
def test_a_429_before_the_stream_is_boto3s_throttling_exception(call: str) -> None:
    with serve(bundled_cassette("bedrock-converse.toml"), pace="instant") as server:
        server.control.set_faults(["status:code=429"])
        with pytest.raises(ClientError) as raised:
            greet(server.url, call)
    error = raised.value.response["Error"]
    assert (error["Code"], error["Message"]) == ("ThrottlingException", "injected by sse-tape: status 429")
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 429


def test_an_error_mid_stream_asked_for_no_stream_is_the_apis_error() -> None:
    with serve(bundled_cassette("bedrock-converse.toml"), pace="instant") as server:
        server.control.set_faults(["error:at=3,type=rate_limit_error"])
        with pytest.raises(ClientError) as raised:
            greet(server.url, "converse")
    assert raised.value.response["Error"]["Code"] == "ThrottlingException"


@pytest.mark.parametrize("kind", ["json", "utf8"])
def test_a_corrupt_message_fails_its_crc_and_boto3_raises_checksum_mismatch(kind: str) -> None:
    with serve(bundled_cassette("bedrock-converse.toml"), pace="instant") as server:
        server.control.set_faults([f"corrupt:at=2,kind={kind}"])
        got: list[dict[str, Any]] = []
        with pytest.raises(ChecksumMismatch):
            greet(server.url, into=got)
    assert len(got) == 2  # the messages before the corrupt one came whole


@pytest.mark.parametrize("fault", ["fragment:size=1", "fragment:size=5", "split:at=15b"])
def test_boto3_reads_a_stream_whose_messages_and_preludes_are_split(fault: str) -> None:
    with serve(bundled_cassette("bedrock-converse.toml"), pace="instant") as server:
        server.control.set_faults([fault])
        got = streamed(greet(server.url))
    assert got == (GREETING, [], "end_turn")


# --- recording from a server that speaks the event stream ------------------------------------------------

UPSTREAM_MESSAGES = [
    ("messageStart", {"role": "assistant", "p": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQR"}),
    ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hello"}, "p": "abcdefghijklmnop"}),
    ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": " from upstream"}, "p": "abcd"}),
    ("contentBlockStop", {"contentBlockIndex": 0, "p": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"}),
    ("messageStop", {"stopReason": "end_turn", "p": "abcdefghij"}),
    ("metadata", {"usage": {"inputTokens": 7, "outputTokens": 4, "totalTokens": 11}, "metrics": {"latencyMs": 212}}),
]
"""A `ConverseStream` answer as Bedrock writes it, padding (`p`) and all."""


def upstream_frames() -> list[bytes]:
    headers = {":content-type": "application/json", ":message-type": "event"}
    return [
        encode_message({":event-type": name, **headers}, json.dumps(payload, separators=(",", ":")).encode())
        for name, payload in UPSTREAM_MESSAGES
    ]


async def event_stream(last_written: list[float], request: web.Request) -> web.StreamResponse:
    """Bedrock's answer, a message a write, 0.2 s apart: the first before the rest exists; when it wrote the
    last one goes in `last_written` (`time.monotonic`)."""
    await request.read()
    response = web.StreamResponse(headers={"content-type": "application/vnd.amazon.eventstream"})
    await response.prepare(request)
    frames = upstream_frames()
    for n, frame in enumerate(frames):
        if n:
            await asyncio.sleep(0.2)
        if n == len(frames) - 1:
            last_written.append(time.monotonic())
        await response.write(frame)
    await response.write_eof()
    return response


async def test_recorded_through_sse_tape_record_streams_untouched_redacted_and_replays_byte_for_byte(
    tmp_path: Path,
) -> None:
    cassette = tmp_path / "bedrock.toml"
    last_written: list[float] = []
    async with on_loopback("/model/{model}/converse-stream", partial(event_stream, last_written)) as upstream:
        with processes.recording_proxy(upstream, cassette) as url:
            live = await asyncio.to_thread(_read_timed, url, aws_session_token="FwoGZXIvYXdzEXAMPLESESSIONTOKEN")
    events, first = live
    assert [next(iter(e)) for e in events] == [name for name, _ in UPSTREAM_MESSAGES]
    assert first < last_written[-1]  # the stream reached boto3 as the upstream wrote it, not once it was over
    (interaction,) = Cassette.load(cassette).interactions
    assert [c.data for c in interaction.response.chunks] == upstream_frames()
    headers = {k.lower(): v for k, v in interaction.request.headers}
    assert (headers["authorization"], headers["x-amz-security-token"]) == ("<redacted>", "<redacted>")
    assert len(headers["x-amz-date"]) == len("20261128T003723Z")  # kept: no secret
    assert "FwoGZXIvYXdzEXAMPLESESSIONTOKEN" not in cassette.read_text()
    assert check_interaction(interaction).violations == ()
    assert interaction.request.path == "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream"

    with serve(cassette, pace="instant") as replay:
        raw = await asyncio.to_thread(_raw_body, replay.url)
        again = streamed(await asyncio.to_thread(greet, replay.url))
    assert raw == b"".join(upstream_frames())
    assert again == ("Hello from upstream", [], "end_turn")


def _read_timed(url: str, **credentials: str) -> tuple[list[dict[str, Any]], float]:
    """The events of a greeting, and when the first came (`time.monotonic`)."""
    events, times = [], []
    with bedrock_client(url, **credentials) as bedrock:
        for event in bedrock.converse_stream(modelId=MODEL, messages=HELLO)["stream"]:
            events.append(event)
            times.append(time.monotonic())
    return events, times[0]


def _raw_body(url: str) -> bytes:
    path = f"/model/{MODEL.replace(':', '%3A')}/converse-stream"
    return httpx.post(url + path, json={"messages": HELLO}).content


# --- the framing and the rules ---------------------------------------------------------------------------


def test_the_dialect_is_known_by_its_path_and_a_moved_recording_by_its_stream(bundled: dict[str, Cassette]) -> None:
    assert for_path("/model/amazon.nova-lite-v1%3A0/converse-stream") is BEDROCK
    assert for_path("/bedrock/model/m/converse") is BEDROCK
    assert for_path("/model/m/invoke") is DIALECTS["bedrock-invoke"]  # InvokeModel: tests/test_bedrock_invoke.py
    for interaction in bundled["bedrock-converse"]:
        moved = replace(interaction, request=replace(interaction.request, path="/somewhere"))
        assert detect(moved) is BEDROCK


@given(st.lists(st.integers(min_value=0, max_value=2000), max_size=12))
def test_any_split_of_a_bundled_stream_gives_the_same_messages(cuts: list[int]) -> None:
    for interaction in bundled_cassette("bedrock-converse.toml"):
        body = interaction.response.body
        expected = [(b.event.event, b.event.data) for b in EVENT_STREAM.blocks(body) if b.event is not None]
        at = sorted({min(c, len(body)) for c in cuts})
        pieces = [body[a:b] for a, b in zip([0, *at], [*at, len(body)], strict=True)]
        got, held = [], b""
        for piece in pieces:
            held += piece
            whole = EVENT_STREAM.whole(held)
            got += [(b.event.event, b.event.data) for b in EVENT_STREAM.blocks(held[:whole]) if b.event is not None]
            held = held[whole:]
        assert (got, held) == (expected, b"")


def _sse(*messages: tuple[str, Any]) -> list[ServerSentEvent]:
    return [ServerSentEvent(data=json.dumps(payload), event=name) for name, payload in messages]


START = ("messageStart", {"role": "assistant"})
HI = ("contentBlockDelta", {"delta": {"text": "Hi"}, "contentBlockIndex": 0})
STOP0 = ("contentBlockStop", {"contentBlockIndex": 0})
END = ("messageStop", {"stopReason": "end_turn"})
META = ("metadata", {"usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}, "metrics": {"latencyMs": 5}})
USE = ("contentBlockStart", {"start": {"toolUse": {"toolUseId": "t1", "name": "f"}}, "contentBlockIndex": 1})


@pytest.mark.parametrize(
    ("messages", "found"),
    [
        ([START, HI, STOP0, END, META], []),
        ([START, HI, STOP0, ("throttlingException", {"message": "slow down"})], []),
        ([HI, STOP0, END], ["event 1: first event is contentBlockDelta, not messageStart"]),
        ([START, START, HI, STOP0, END], ["event 2: messageStart repeated"]),
        (
            [START, HI, USE, STOP0, END],
            [
                "event 3: block 1 starts while block 0 is open",
                "event 4: contentBlockStop for block 0, which is not open",
                "event 5: messageStop while block 1 is open",
                "tool call 0 arguments are not valid JSON: ''",  # a tool use with no input at all
            ],
        ),
        (
            [
                START,
                HI,
                STOP0,
                ("contentBlockDelta", {"delta": {"text": "!"}, "contentBlockIndex": 2}),
                ("contentBlockStop", {"contentBlockIndex": 2}),
                END,
            ],
            ["event 4: block 2 starts where block 1 was next"],
        ),
        (
            [START, HI, STOP0, HI, END],
            ["event 4: block 0 starts where block 1 was next", "event 5: messageStop while block 0 is open"],
        ),
        (
            [
                START,
                HI,
                ("contentBlockDelta", {"delta": {"toolUse": {"input": "{}"}}, "contentBlockIndex": 0}),
                STOP0,
                END,
            ],
            ["event 3: a toolUse delta in a text block"],
        ),
        ([START, HI, STOP0, END, END], ["event 5: messageStop repeated"]),
        (
            [START, HI, STOP0, META, END],
            ["event 4: metadata before messageStop", "event 5: messageStop after metadata"],
        ),
        ([START, HI, STOP0, END, META, HI], ["event 6: contentBlockDelta after metadata"]),
        (
            [START, HI, STOP0, ("messageStop", {"stopReason": "done"})],
            [
                "event 4: stopReason 'done' is not one of end_turn, tool_use, max_tokens, stop_sequence, guardrail_intervened, content_filtered, malformed_model_output, malformed_tool_use, model_context_window_exceeded"
            ],
        ),
        (
            [START, HI, STOP0, ("messageStop", {"stopReason": "tool_use"})],
            ["event 4: stopReason is 'tool_use' but no toolUse block was streamed"],
        ),
        ([START, HI, STOP0], ["no messageStop (or exception)"]),
        (
            [START, HI, STOP0, END, ("metadata", {"usage": {}})],
            [
                "event 5: metadata without usage.inputTokens, outputTokens and totalTokens",
                "event 5: metadata without metrics.latencyMs",
            ],
        ),
        ([START, ("boom", {})], ["event 2: unknown event 'boom'", "no messageStop (or exception)"]),
        (
            [START, ("oopsException", {"message": "x"})],
            [
                "event 2: oopsException is not one of the stream's exceptions (validationException, throttlingException, modelStreamErrorException, internalServerException, serviceUnavailableException)"
            ],
        ),
        (
            [
                START,
                ("contentBlockStart", {"start": {"toolUse": {"toolUseId": "t1", "name": "f"}}, "contentBlockIndex": 0}),
                ("contentBlockDelta", {"delta": {"toolUse": {"input": '{"a":'}}, "contentBlockIndex": 0}),
                STOP0,
                ("messageStop", {"stopReason": "tool_use"}),
            ],
            ["tool call 0 arguments are not valid JSON: '{\"a\":'"],
        ),
    ],
)
def test_check_names_the_rule_a_stream_breaks(messages: list[tuple[str, Any]], found: list[str]) -> None:
    assert [str(v) for v in BEDROCK.check(_sse(*messages))] == found


def test_an_error_at_every_position_of_a_bundled_stream_is_an_exception_after_the_messages_before_it() -> None:
    for interaction in bundled_cassette("bedrock-converse.toml"):
        original = _messages(interaction.response.body)
        terminal = next(n for n, (name, _) in enumerate(original) if name == "messageStop")
        for at in range(len(original) + 1):
            plan = Pacing().plan(interaction.response)
            plan.framing = EVENT_STREAM
            apply(
                [parse_fault(f"error:{at},type=rate_limit_error,message=boom")],
                plan,
                dialect=BEDROCK,
                rng=random.Random(0),
            )
            got = _messages(plan.body)
            kept = min(at, terminal) or 1  # before the messageStop; after the messageStart, which opens it
            assert got == [*original[:kept], ("throttlingException", '{"message":"boom"}')], at
            assert (
                BEDROCK.check([ServerSentEvent(data=data, event=name) for name, data in got], interaction.request) == []
            )
            assert EVENT_STREAM.problems(plan.body) == []


def test_serve_model_streams_a_synthesized_answer_to_boto3_in_the_event_stream(tiny_model_path: Path) -> None:
    process, url = processes.start(["serve", "--model", str(tiny_model_path), "--port", "0", "--seed", "3"])
    try:
        with bedrock_client(url) as bedrock:
            config = {"maxTokens": 6}
            answer = bedrock.converse_stream(modelId="tiny", messages=HELLO, inferenceConfig=config)
            events = list(answer["stream"])
            whole = bedrock.converse(modelId="tiny", messages=HELLO, inferenceConfig=config)
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert answer["ResponseMetadata"]["HTTPHeaders"]["content-type"] == "application/vnd.amazon.eventstream"
    assert [next(iter(e)) for e in events][:1] + [next(iter(e)) for e in events][-2:] == [
        "messageStart",
        "messageStop",
        "metadata",
    ]
    text, uses, stop = streamed(events)
    assert (bool(text), uses, stop) == (True, [], "max_tokens")
    assert events[-1]["metadata"]["usage"]["outputTokens"] == 6
    assert (whole["stopReason"], whole["usage"]["outputTokens"]) == ("max_tokens", 6)
