"""AG-UI: a run an agent server made with `ag_ui.encoder.EventEncoder` streams, recorded, recognised from its
stream whatever its path, replayed, faulted in AG-UI's own words (`RUN_ERROR`) and checked, with the package's
own event models reading every replayed event."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import httpx
import pytest
from ag_ui.core import (
    BaseEvent,
    Event,
    EventType,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder
from aiohttp import web
from pydantic import TypeAdapter
from upstream import on_loopback

from sse_tape import Cassette, arecording, aserve
from sse_tape.checking import check_interaction
from sse_tape.dialects import DIALECTS, detect
from sse_tape.sse import ServerSentEvent, SSEDecoder

FIXTURE = Path(__file__).parent / "fixtures" / "agent-ui" / "ag-ui.toml"
EVENTS: TypeAdapter[BaseEvent] = TypeAdapter(Event)
RUN = {
    "threadId": "thread-1",
    "runId": "run-1",
    "state": {},
    "messages": [{"id": "u1", "role": "user", "content": "What's the weather in Tokyo?"}],
    "tools": [],
    "context": [],
    "forwardedProps": {},
}
"""What the UI asks the agent: RunAgentInput, as AG-UI clients send it."""


def run_of(asked: RunAgentInput) -> list[BaseEvent]:
    """What the agent streams for a run: state, a tool call, a state change, the answer in three pieces."""
    thread, run = asked.thread_id, asked.run_id
    return [
        RunStartedEvent(thread_id=thread, run_id=run),
        StateSnapshotEvent(snapshot={"city": None, "steps": 0}),
        ToolCallStartEvent(tool_call_id="call-1", tool_call_name="get_weather", parent_message_id="m1"),
        ToolCallArgsEvent(tool_call_id="call-1", delta='{"city": '),
        ToolCallArgsEvent(tool_call_id="call-1", delta='"Tokyo"}'),
        ToolCallEndEvent(tool_call_id="call-1"),
        StateDeltaEvent(delta=[{"op": "replace", "path": "/city", "value": "Tokyo"}]),
        TextMessageStartEvent(message_id="m1", role="assistant"),
        TextMessageContentEvent(message_id="m1", delta="It's 18°C"),
        TextMessageContentEvent(message_id="m1", delta=" with light rain"),
        TextMessageContentEvent(message_id="m1", delta=" in Tokyo."),
        TextMessageEndEvent(message_id="m1"),
        RunFinishedEvent(thread_id=thread, run_id=run),
    ]


@pytest.fixture
async def agent() -> AsyncIterator[str]:
    """An AG-UI agent server on a free loopback port, at a path of the application's choosing."""
    encoder = EventEncoder()

    async def run(request: web.Request) -> web.StreamResponse:
        asked = RunAgentInput.model_validate(await request.json())
        response = web.StreamResponse(headers={"Content-Type": encoder.get_content_type()})
        await response.prepare(request)
        for event in run_of(asked):
            await response.write(encoder.encode(event).encode())
        await response.write_eof()
        return response

    async with on_loopback("/api/copilot/agent", run) as url:
        yield url


async def read_run(url: str, fault: str | None = None) -> tuple[list[BaseEvent], bool]:
    """The events an AG-UI client reads of a run, each parsed by the package's own models, and whether the
    stream ended cleanly."""
    got = b""
    headers = {"Accept": "text/event-stream"} | ({"X-SSE-Tape-Fault": fault} if fault else {})
    clean = True
    async with httpx.AsyncClient() as client:
        try:
            async with client.stream("POST", f"{url}/api/copilot/agent", json=RUN, headers=headers) as response:
                assert response.status_code == 200
                async for chunk in response.aiter_bytes():
                    got += chunk
        except (httpx.RemoteProtocolError, httpx.ReadError):
            clean = False
    return [EVENTS.validate_json(sse.data) for sse in SSEDecoder().feed(got)], clean


def kinds(events: Sequence[BaseEvent]) -> list[str]:
    return [EventType(event.type).value for event in events]


async def test_a_recorded_run_is_recognised_replayed_whole_and_faulted_in_ag_ui_words(
    agent: str, tmp_path: Path
) -> None:
    cassette = tmp_path / "agent.toml"
    async with arecording(cassette, agent) as recorder:
        recorded, clean = await read_run(recorder.url)
    assert clean
    expected = run_of(RunAgentInput.model_validate(RUN))
    assert recorded == expected
    [interaction] = Cassette.load(cassette).interactions
    assert detect(interaction) is DIALECTS["ag-ui"]  # the path says nothing: its first event does
    assert check_interaction(interaction).violations == ()

    async with aserve(cassette, pace="instant") as replay:
        for _ in range(2):
            replayed, clean = await read_run(replay.url)
            assert (replayed, clean) == (expected, True)
        failed, clean = await read_run(replay.url, "error:at=3,message=the weather service is down,code=UPSTREAM")
        assert clean
        assert failed[:3] == expected[:3]
        assert failed[3:] == [RunErrorEvent(message="the weather service is down", code="UPSTREAM")]
        # At the end, the error takes RUN_FINISHED's place: one terminal event, as the protocol wants.
        failed, clean = await read_run(replay.url, "error:at=100%,message=overloaded")
        assert kinds(failed) == [*kinds(expected[:-1]), "RUN_ERROR"]
        cut, clean = await read_run(replay.url, "disconnect:after=5,mode=reset")
        assert (cut, clean) == (expected[:5], False)


def test_the_bundled_recording_checks_and_its_events_are_ag_ui_events() -> None:
    [interaction] = Cassette.load(FIXTURE).interactions
    assert detect(interaction) is DIALECTS["ag-ui"]
    assert check_interaction(interaction).violations == ()
    events = [EVENTS.validate_json(sse.data) for _, sse in interaction.response.events()]
    assert events == run_of(RunAgentInput.model_validate(RUN))


def frames(*events: dict[str, object]) -> list[ServerSentEvent]:
    return [ServerSentEvent(data=json.dumps(event)) for event in events]


START = {"type": "RUN_STARTED", "threadId": "t", "runId": "r"}
FINISH = {"type": "RUN_FINISHED", "threadId": "t", "runId": "r"}
OPEN = {"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}
SAY = {"type": "TEXT_MESSAGE_CONTENT", "messageId": "m", "delta": "hi"}
CLOSE = {"type": "TEXT_MESSAGE_END", "messageId": "m"}


@pytest.mark.parametrize(
    ("events", "said"),
    [
        pytest.param([OPEN, SAY, CLOSE, FINISH], "event 1: the run opens with TEXT_MESSAGE_START", id="no start"),
        pytest.param(
            [START, SAY, FINISH],
            "event 2: TEXT_MESSAGE_CONTENT for the text message m, which is not open (no TEXT_MESSAGE_START)",
            id="content outside its message",
        ),
        pytest.param(
            [START, OPEN, {**SAY, "messageId": "other"}, CLOSE, FINISH],
            "event 3: TEXT_MESSAGE_CONTENT for the text message other, which is not open",
            id="content under another id",
        ),
        pytest.param(
            [START, OPEN, {**SAY, "delta": ""}, CLOSE, FINISH],
            "event 3: TEXT_MESSAGE_CONTENT with no delta",
            id="empty delta",
        ),
        pytest.param(
            [START, OPEN, SAY, FINISH], "event 4: RUN_FINISHED with the text message m still open", id="left open"
        ),
        pytest.param(
            [START, {"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "{}"}, FINISH],
            "event 2: TOOL_CALL_ARGS for the tool call c, which is not open",
            id="args outside their call",
        ),
        pytest.param(
            [START, OPEN, SAY, CLOSE, FINISH, SAY],
            "event 6: TEXT_MESSAGE_CONTENT after the run ended (event 5)",
            id="after the end",
        ),
        pytest.param(
            [START, FINISH, {"type": "RUN_ERROR", "message": "late"}],
            "event 3: RUN_ERROR after the run ended",
            id="two terminal events",
        ),
        pytest.param([START, OPEN, SAY, CLOSE], "the run never ends: no RUN_FINISHED or RUN_ERROR", id="no end"),
        pytest.param(
            [START, {**FINISH, "runId": "other"}], "event 2: RUN_FINISHED runId is 'other', the run's 'r'", id="run id"
        ),
        pytest.param(
            [START, {"type": "STATE_DELTA", "delta": {"city": "Tokyo"}}, FINISH],
            "event 2: STATE_DELTA whose delta is not a JSON Patch",
            id="state delta",
        ),
    ],
)
def test_check_names_the_rule_a_broken_run_breaks(events: list[dict[str, object]], said: str) -> None:
    violations = [str(v) for v in DIALECTS["ag-ui"].check(frames(*events))]
    assert any(v.startswith(said) for v in violations), violations


def test_a_run_that_fails_before_it_starts_is_only_run_error() -> None:
    assert DIALECTS["ag-ui"].check(frames({"type": "RUN_ERROR", "message": "no such agent"})) == []
