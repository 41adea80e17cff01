"""The Vercel AI SDK's UI message stream: a chat route's stream, recorded, recognised by its header or its first
part whatever its path, replayed, faulted in its own words (an `error` part, then `[DONE]`) and checked; the `ai`
package's own reader (`readUIMessageStream`, in node) reads the replay whole."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from aiohttp import web
from matrix import NodeModules, Workers
from upstream import on_loopback

from sse_tape import Cassette, arecording, aserve, serve
from sse_tape.checking import check_interaction
from sse_tape.dialects import DIALECTS, detect
from sse_tape.sse import ServerSentEvent, SSEDecoder

FIXTURE = Path(__file__).parent / "fixtures" / "agent-ui" / "ai-sdk-ui.toml"
"""Recorded with `sse-tape record` from tests/js/ui_stream_server.mjs: streamText's toUIMessageStreamResponse()."""
PRODUCED = Cassette.load(FIXTURE).interactions[0]
CHAT = {
    "id": "chat-1",
    "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "What's the weather in Tokyo?"}]}],
    "trigger": "submit-message",
}
"""What `useChat` posts to its route."""
ANSWER = "It's 18°C with light rain in Tokyo."
NODE = NodeModules()


@pytest.fixture
async def route() -> AsyncIterator[str]:
    """A chat route on a free loopback port that sends what the `ai` package's route sent (its headers, and
    each chunk in a write of its own)."""

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        kept = ("content-type", "cache-control", "x-accel-buffering", "x-vercel-ai-ui-message-stream")
        headers = {k: v for k, v in PRODUCED.response.headers if k.lower() in kept}
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        for chunk in PRODUCED.response.chunks:
            await response.write(chunk.data)
        await response.write_eof()
        return response

    async with on_loopback("/api/chat", chat) as url:
        yield url


async def parts(url: str, fault: str | None = None) -> list[str]:
    """The data of each event a client reads from the chat route at `url`."""
    headers = {"X-SSE-Tape-Fault": fault} if fault else {}
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{url}/api/chat", json=CHAT, headers=headers)
    assert response.status_code == 200
    assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
    return [sse.data for sse in SSEDecoder().feed(response.content)]


async def test_a_recorded_stream_is_recognised_replayed_and_faulted_in_its_own_words(
    route: str, tmp_path: Path
) -> None:
    produced = [sse.data for _, sse in PRODUCED.response.events()]
    cassette = tmp_path / "chat.toml"
    async with arecording(cassette, route) as recorder:
        assert await parts(recorder.url) == produced
    [interaction] = Cassette.load(cassette).interactions
    assert detect(interaction) is DIALECTS["ai-sdk-ui"]  # by its header: the path says nothing
    assert check_interaction(interaction).violations == ()

    async with aserve(cassette, pace="instant") as replay:
        assert await parts(replay.url) == produced
        failed = await parts(replay.url, "error:at=3,message=the weather service is down")
        assert failed == [*produced[:3], '{"type":"error","errorText":"the weather service is down"}', "[DONE]"]
        # At the end, the error comes before finish, the first part that ends the message: finish never comes.
        failed = await parts(replay.url, "error:at=100%,message=overloaded")
        assert failed == [*produced[:-2], '{"type":"error","errorText":"overloaded"}', "[DONE]"]
        for stream in (failed, await parts(replay.url, "error:at=0,message=down")):
            assert DIALECTS["ai-sdk-ui"].check([ServerSentEvent(data=data) for data in stream]) == []


def test_a_stream_without_its_header_is_known_by_its_first_part() -> None:
    bare = replace(PRODUCED, response=replace(PRODUCED.response, headers=(("content-type", "text/event-stream"),)))
    assert detect(bare) is DIALECTS["ai-sdk-ui"]
    assert check_interaction(bare).violations == ()


def test_the_ai_packages_reader_reads_the_replay_whole(workers: Workers) -> None:
    with serve(FIXTURE, pace="instant") as replay:  # in a thread of its own: node's reads block this one
        url = f"{replay.url}/api/chat"
        whole = workers.ask(NODE, "ai-sdk-ui-reader", "whole", url)["answer"]
        failed = workers.ask(NODE, "ai-sdk-ui-reader", "error:at=11,message=overloaded", url)["answer"]
    assert (whole["header"], whole["errors"]) == ("v1", [])
    message = whole["message"]
    assert (message["id"], message["role"]) == ("msg-1", "assistant")
    [call] = [part for part in message["parts"] if part["type"] == "tool-get_weather"]
    assert (call["state"], call["input"]) == ("output-available", {"city": "Tokyo"})
    assert call["output"] == {"city": "Tokyo", "temperature_c": 18, "conditions": "light rain"}
    assert [part["text"] for part in message["parts"] if part["type"] == "text"] == [ANSWER]
    # The fault's error part reaches the reader as the stream's error, after the text so far.
    assert failed["errors"] == ["overloaded"]
    assert [part["text"] for part in failed["message"]["parts"] if part["type"] == "text"] == ["It's 18°C"]


def frames(*parts: object) -> list[ServerSentEvent]:
    return [ServerSentEvent(data=part if isinstance(part, str) else json.dumps(part)) for part in parts]


START = {"type": "start", "messageId": "m"}
OPEN = {"type": "text-start", "id": "t"}
SAY = {"type": "text-delta", "id": "t", "delta": "hi"}
CLOSE = {"type": "text-end", "id": "t"}
FINISH = {"type": "finish"}
DONE = "[DONE]"


@pytest.mark.parametrize(
    ("stream", "said"),
    [
        pytest.param([OPEN, SAY, CLOSE, FINISH, DONE], "event 1: the stream opens with text-start", id="no start"),
        pytest.param(
            [START, SAY, FINISH, DONE],
            "event 2: text-delta for the text part t, which is not open (no text-start)",
            id="delta outside its part",
        ),
        pytest.param(
            [START, OPEN, {**SAY, "id": "u"}, CLOSE, FINISH, DONE],
            "event 3: text-delta for the text part u, which is not open",
            id="delta under another id",
        ),
        pytest.param(
            [START, {"type": "reasoning-delta", "id": "r", "delta": "hm"}, FINISH, DONE],
            "event 2: reasoning-delta for the reasoning part r, which is not open",
            id="reasoning outside its part",
        ),
        pytest.param(
            [START, OPEN, SAY, FINISH, DONE], "event 4: finish with the text part t still open", id="left open"
        ),
        pytest.param(
            [START, {"type": "tool-input-delta", "toolCallId": "c", "inputTextDelta": "{"}, FINISH, DONE],
            "event 2: tool-input-delta for the tool call c, whose input is not streaming",
            id="input outside its call",
        ),
        pytest.param(
            [START, {"type": "tool-output-available", "toolCallId": "c", "output": 1}, FINISH, DONE],
            "event 2: tool-output-available for the tool call c, whose input never came",
            id="output before input",
        ),
        pytest.param(
            [START, {"type": "finish-step"}, FINISH, DONE], "event 2: finish-step with no step started", id="step"
        ),
        pytest.param([START, FINISH, SAY, DONE], "event 3: text-delta after finish", id="after finish"),
        pytest.param([START, OPEN, SAY, CLOSE, DONE], "event 5: [DONE] before any finish", id="done before finish"),
        pytest.param([START, FINISH], "the stream never ends: no [DONE]", id="no done"),
        pytest.param([START, FINISH, DONE, DONE], "event 4: an event after [DONE]", id="after done"),
        pytest.param([START, {"type": "text"}, FINISH, DONE], "event 2: text is no UI message part type", id="type"),
        pytest.param([START, {"type": "error"}, DONE], "event 2: an error part with no errorText", id="error"),
    ],
)
def test_check_names_the_rule_a_broken_stream_breaks(stream: list[object], said: str) -> None:
    violations = [str(v) for v in DIALECTS["ai-sdk-ui"].check(frames(*stream))]
    assert any(v.startswith(said) for v in violations), violations


def test_data_parts_and_an_error_then_done_keep_the_rules() -> None:
    stream = [START, {"type": "data-weather", "data": {"city": "Tokyo"}}, {"type": "error", "errorText": "x"}, DONE]
    assert DIALECTS["ai-sdk-ui"].check(frames(*stream)) == []
