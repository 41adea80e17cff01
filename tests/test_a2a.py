"""A2A (the Agent2Agent protocol), with the real `a2a-sdk` on both sides, on loopback.

An a2a-sdk server made here (an agent that streams a task: `working`, its
answer in artifact chunks, `completed`) is recorded through `sse-tape record
--upstream`, over JSON-RPC (protocol 1.0, and 0.3 through the SDK's
compatibility layer) and over the REST binding; the cassette is replayed to a
new a2a-sdk client, which mints other ids. The client must get what the
server gave, under its own ids, and meet the faults as a real server's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import processes
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict
from sdk_servers import on_loopback
from starlette.applications import Starlette

from sse_tape import Cassette, aserve
from sse_tape.cassette import Interaction, Request, Response
from sse_tape.checking import check_interactions
from sse_tape.dialects import DIALECTS, detect
from sse_tape.dialects.a2a import a2a
from sse_tape.dialects.events import Error
from sse_tape.sse import ServerSentEvent, SSEDecoder


class _Echo(AgentExecutor):
    """Streams a task: submitted, working, each word of the message as an artifact chunk, completed."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None
        assert context.context_id is not None
        if context.current_task is None:
            status = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)
            task = Task(id=context.task_id, context_id=context.context_id, status=status, history=[context.message])
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.start_work()
        for i, word in enumerate(context.get_user_input().split()):
            await asyncio.sleep(0.02)
            await updater.add_artifact([Part(text=f"{word} ")], artifact_id="echo", name="echo", append=i > 0)
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Agent:
    """A real a2a-sdk agent on loopback, whose card names `public` (the recorder in front of it), reached in
    `binding` at `version`."""

    url: str
    public: str
    binding: str
    version: str


@pytest.fixture(
    params=[("JSONRPC", "1.0"), ("HTTP+JSON", "1.0"), ("JSONRPC", "0.3"), ("HTTP+JSON", "0.3")],
    ids=["jsonrpc", "rest", "jsonrpc-0.3", "rest-0.3"],
)
def agent(request: pytest.FixtureRequest) -> Iterator[Agent]:
    """A real a2a-sdk agent, reached over JSON-RPC (1.0, 0.3) or REST."""
    with _serving(*request.param) as found:
        yield found


@contextlib.contextmanager
def _serving(binding: str, version: str) -> Iterator[Agent]:
    """A real a2a-sdk agent on a free loopback port, in `binding` at `version`, its card naming a port kept
    free for the recorder in front of it."""
    public = f"http://127.0.0.1:{_free_port()}"
    url = f"{public}/a2a" if binding == "JSONRPC" else public
    card = AgentCard(
        name="echo",
        description="Echoes a message back, a word at a time.",
        version="1.0",
        supported_interfaces=[AgentInterface(url=url, protocol_binding=binding, protocol_version=version)],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="Echoes.", tags=["echo"])],
    )
    handler = DefaultRequestHandler(agent_executor=_Echo(), task_store=InMemoryTaskStore(), agent_card=card)
    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, "/a2a", enable_v0_3_compat=True),
        *create_rest_routes(handler, enable_v0_3_compat=True),
    ]
    with on_loopback(Starlette(routes=routes), "the A2A server") as served:
        yield Agent(served, public, binding, version)


async def _streamed(url: str, binding: str, message_id: str, text: str = "hello big world") -> list[dict[str, Any]]:
    """What an a2a-sdk client reading the card at `url` gets of a streamed task, each event as a dict."""
    factory = ClientFactory(ClientConfig(streaming=True, supported_protocol_bindings=[binding]))
    client = await factory.create_from_url(url)
    try:
        message = Message(message_id=message_id, role=Role.ROLE_USER, parts=[Part(text=text)])
        return [MessageToDict(event) async for event in client.send_message(SendMessageRequest(message=message))]
    finally:
        await client.close()


async def _recorded(agent: Agent, cassette: Path) -> list[dict[str, Any]]:
    """What a client gets of a task through `sse-tape record --upstream`; its recording is in `cassette` once
    this returns."""
    port = agent.public.rsplit(":", 1)[1]
    with processes.recording_proxy(agent.url, cassette, port=port):
        return await asyncio.wait_for(_streamed(agent.public, agent.binding, "m-live"), 30)


def _as_sent_by(events: list[dict[str, Any]], message_id: str) -> list[dict[str, Any]]:
    """`events` as a client that sent its message as `message_id` gets them (the task's history echoes it)."""
    loaded: list[dict[str, Any]] = json.loads(json.dumps(events).replace('"m-live"', json.dumps(message_id)))
    return loaded


def _states(events: list[dict[str, Any]]) -> list[str]:
    return [e[k]["status"]["state"] for e in events for k in ("task", "statusUpdate") if k in e]


def _text(events: list[dict[str, Any]]) -> str:
    return "".join(p["text"] for e in events if "artifactUpdate" in e for p in e["artifactUpdate"]["artifact"]["parts"])


async def test_a_recorded_task_streams_to_new_clients_with_their_own_ids(agent: Agent, tmp_path: Path) -> None:
    cassette = tmp_path / "a2a.toml"
    live = await _recorded(agent, cassette)
    assert _states(live) == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_COMPLETED"]
    assert _text(live) == "hello big world "
    async with aserve(cassette) as mock:
        for n in range(2):
            replayed = await asyncio.wait_for(_streamed(mock.url, agent.binding, f"m-replay-{n}"), 30)
            assert replayed == _as_sent_by(live, f"m-replay-{n}")
        both = await asyncio.wait_for(
            asyncio.gather(*(_streamed(mock.url, agent.binding, f"m-at-once-{n}") for n in range(2))), 30
        )
        assert both == [_as_sent_by(live, f"m-at-once-{n}") for n in range(2)]
        with pytest.raises(A2AError):  # another message is another task: not recorded
            await asyncio.wait_for(_streamed(mock.url, agent.binding, "m-other", "something else"), 30)


async def test_the_replayed_stream_answers_the_requests_json_rpc_id(tmp_path: Path) -> None:
    with _serving("JSONRPC", "1.0") as agent:
        cassette = tmp_path / "a2a.toml"
        await _recorded(agent, cassette)
    [sent] = [i.request for i in Cassette.load(cassette) if i.request.method == "POST"]
    body = sent.json()
    body["id"], body["params"]["message"]["messageId"] = "my-own-id", "my-own-message"
    async with aserve(cassette) as mock, httpx.AsyncClient(base_url=mock.url) as client:
        answer = await client.post("/a2a", json=body, headers={"A2A-Version": "1.0"})
        body["params"]["message"]["contextId"] = "my-own-context"  # a context the client names is the task's
        in_context = await client.post("/a2a", json=body, headers={"A2A-Version": "1.0"})
    events = [json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:")]
    assert [e["id"] for e in events] == ["my-own-id"] * 6
    assert events[0]["result"]["task"]["history"][0]["messageId"] == "my-own-message"
    assert answer.text.startswith('data: {"result": {"task": {"id": ')  # the rest of each event as recorded
    recorded = events[0]["result"]["task"]["contextId"]
    assert in_context.text == answer.text.replace(recorded, "my-own-context")


async def test_check_knows_a_recorded_task_as_a2a(agent: Agent, tmp_path: Path) -> None:
    cassette = tmp_path / "a2a.toml"
    await _recorded(agent, cassette)
    checks = check_interactions(Cassette.load(cassette).interactions)
    assert [(c.dialect, c.error, c.violations) for c in checks] == [("a2a", None, ())] * len(checks)


@pytest.mark.parametrize("fault", ["error:3", "error:3,type=task_failed,message=the agent gave up"])
async def test_a_fault_reaches_the_client_as_a_real_agents_failure(agent: Agent, tmp_path: Path, fault: str) -> None:
    cassette = tmp_path / "a2a.toml"
    live = await _recorded(agent, cassette)
    path = "/a2a" if agent.binding == "JSONRPC" else "/message:stream"  # the message's stream, not the card's
    async with aserve(cassette, faults=[f"{fault},path={path}"]) as mock:
        replayed: list[dict[str, Any]] = []
        if "task_failed" not in fault:
            with pytest.raises(A2AError, match="injected by sse-tape"):
                await asyncio.wait_for(_streamed(mock.url, agent.binding, "m-live"), 30)
        else:
            replayed = await asyncio.wait_for(_streamed(mock.url, agent.binding, "m-live"), 30)
        # Failed before its recorded end, the task is over: subscribing again is refused, as a real agent does.
        factory = ClientFactory(ClientConfig(streaming=True, supported_protocol_bindings=[agent.binding]))
        client = await factory.create_from_url(mock.url)
        with pytest.raises(A2AError, match="is in terminal state: TASK_STATE_FAILED"):
            [event async for event in client.subscribe(SubscribeToTaskRequest(id=live[0]["task"]["id"]))]
        await client.close()
    if "task_failed" not in fault:
        return
    assert replayed[:3] == live[:3]
    assert _states(replayed) == ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_FAILED"]
    failed = replayed[-1]["statusUpdate"]
    assert failed["taskId"] == live[0]["task"]["id"]
    assert [p["text"] for p in failed["status"]["message"]["parts"]] == ["the agent gave up"]


def test_a2a_matches_the_message_never_the_ids_the_client_mints() -> None:
    def sent(id: str, message_id: str, text: str, context: str | None = None) -> Request:
        message: dict[str, Any] = {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": text}]}
        if context is not None:
            message["contextId"] = context
        body = {"jsonrpc": "2.0", "id": id, "method": "SendStreamingMessage", "params": {"message": message}}
        return Request("POST", "/a2a", body=json.dumps(body).encode())

    assert a2a(sent("1", "m1", "hi"), sent("2", "m2", "hi", context="c2")) is None
    assert a2a(sent("1", "m1", "hi"), sent("1", "m1", "ho")) == (
        """the message's parts differ: [{"text":"hi"}], recorded [{"text":"ho"}]"""
    )
    rest = Request("POST", "/message:stream", body=b'{"message":{"messageId":"a","parts":[{"text":"hi"}]}}')
    again = Request("POST", "/message:stream", body=b'{"message":{"messageId":"b","parts":[{"text":"hi"}]}}')
    assert a2a(rest, again) is None


def test_a_recording_at_any_endpoint_is_told_by_its_method_even_mcps_shared_ones() -> None:
    def found(body: bytes) -> str | None:
        dialect = detect(Interaction(Request("POST", "/agent", body=body), Response(200)))
        return dialect.name if dialect is not None else None

    assert found(b'{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{}}') == "a2a"
    assert found(b'{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"id":"t"}}') == "a2a"
    assert found(b'{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t"}}') == "mcp"
    assert found(b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}') == "mcp"


def _stream(*messages: Any, event: str = "") -> list[ServerSentEvent]:
    return [ServerSentEvent(data=json.dumps(m), event=event or "message") for m in messages]


_TASK = {"task": {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_SUBMITTED"}}}
_WORKING = {"statusUpdate": {"taskId": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING"}}}
_DONE = {"statusUpdate": {"taskId": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_COMPLETED"}}}
_CHUNK = {"artifactUpdate": {"taskId": "t1", "artifact": {"artifactId": "a", "parts": [{"text": "x"}]}}}


def _rpc(result: Any, id: Any = "r1") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "result": result}


_ASKED = Request(
    "POST", "/a2a", body=b'{"jsonrpc":"2.0","id":"r1","method":"SendStreamingMessage","params":{"message":{}}}'
)


@pytest.mark.parametrize(
    ("messages", "violations"),
    [
        ([_rpc(_TASK), _rpc(_WORKING), _rpc(_CHUNK), _rpc(_DONE)], []),
        ([_rpc(_TASK), _rpc(_WORKING)], ["final-status: the stream ends with no final status"]),
        ([_rpc(_TASK), _rpc(_DONE), _rpc(_WORKING)], ["event 3: after-final: an event after the stream's final"]),
        ([_rpc(_TASK), _rpc(_DONE, id="r2")], ['event 2: jsonrpc-response: a response to id "r2", the request']),
        ([_TASK, _rpc(_DONE)], ["event 1: jsonrpc-response: data is not a JSON-RPC 2.0 response"]),
        ([_rpc(_TASK), _rpc({"thing": 1}), _rpc(_DONE)], ["event 2: result-kind: the result is not a Task"]),
        (
            [_rpc(_TASK), _rpc({"statusUpdate": {**_DONE["statusUpdate"], "taskId": "t2"}})],
            ['event 2: task-id: an update for task "t2" in task "t1"'],
        ),
        (
            [_rpc({"kind": "task", "id": "t1", "status": {"state": "submitted"}}),
             _rpc({"kind": "status-update", "taskId": "t1", "status": {"state": "working"}, "final": True})],
            [],
        ),
    ],
    ids=["whole", "no-final", "after-final", "other-id", "no-envelope", "not-a-result", "other-task", "v0.3-final"],
)  # fmt: skip
def test_check_names_the_rule_a_hand_broken_stream_breaks(messages: list[Any], violations: list[str]) -> None:
    found = [str(v) for v in DIALECTS["a2a"].check(_stream(*messages), _ASKED)]
    assert len(found) == len(violations)
    assert all(f.startswith(v) for f, v in zip(found, violations, strict=True)), found


def test_check_holds_a_rest_stream_to_the_same_rules_without_the_envelope() -> None:
    rest = Request("POST", "/message:stream", body=b'{"message":{}}')
    assert DIALECTS["a2a"].check(_stream(_TASK, _WORKING, _DONE), rest) == []
    assert [str(v) for v in DIALECTS["a2a"].check(_stream(_TASK, _CHUNK), rest)] == [
        "final-status: the stream ends with no final status (completed, failed, canceled, rejected, "
        "input-required) nor a message"
    ]


async def test_a_task_cut_short_by_a_disconnect_resubscribes_and_gets_the_rest_once(
    agent: Agent, tmp_path: Path
) -> None:
    cassette = tmp_path / "a2a.toml"
    live = await _recorded(agent, cassette)
    factory = ClientFactory(ClientConfig(streaming=True, supported_protocol_bindings=[agent.binding]))
    path = "/a2a" if agent.binding == "JSONRPC" else "/message:stream"  # the message's stream, not the card's
    async with aserve(cassette, faults=[f"disconnect:after=3,times=1,path={path}"]) as mock:
        client = await factory.create_from_url(mock.url)
        got: list[dict[str, Any]] = []
        message = Message(message_id="m-live", role=Role.ROLE_USER, parts=[Part(text="hello big world")])
        with pytest.raises(A2AError):
            await _read_into(got, client.send_message(SendMessageRequest(message=message)))
        assert got == live[:3]
        request = SubscribeToTaskRequest(id=live[0]["task"]["id"])
        rest = [MessageToDict(event) async for event in client.subscribe(request)]
        with pytest.raises(A2AError, match="is in terminal state: TASK_STATE_COMPLETED"):  # the client had it all
            [event async for event in client.subscribe(request)]
        await client.close()
        assert any(key.startswith("a2a:") for key in mock.control.snapshot().kept)
        mock.control.reset(protocols=False)  # as between the tests of a shared scope: a task is a test's own
        assert not any(key.startswith("a2a:") for key in mock.control.snapshot().kept)
    snapshot = rest[0]["task"]
    assert snapshot["status"] == live[1]["statusUpdate"]["status"]
    assert snapshot["artifacts"] == [live[2]["artifactUpdate"]["artifact"]]
    assert rest[1:] == live[3:]


async def _read_into(got: list[dict[str, Any]], events: AsyncIterator[StreamResponse]) -> None:
    """Each event of `events` into `got`, as it comes (those before a failure stay there)."""
    async for event in events:
        got.append(MessageToDict(event))


def test_an_error_before_any_event_names_the_requests_own_id() -> None:
    a2a = DIALECTS["a2a"]
    request = Request("POST", "/a2a", body=json.dumps({"jsonrpc": "2.0", "id": "req-1", "method": "SendStreamingMessage", "params": {}}).encode())  # fmt: skip
    [frame] = a2a.answer_error_frames(Error("the agent broke"), request)
    [event] = SSEDecoder().feed(frame)
    assert event.event == "error"
    assert json.loads(event.data) == {
        "id": "req-1",
        "jsonrpc": "2.0",
        "error": {"code": -32603, "message": "the agent broke"},
    }
    rest = Request("POST", "/message:stream", body=b'{"message": {"parts": []}}')
    [frame] = a2a.answer_error_frames(Error("the agent broke"), rest)
    assert json.loads(SSEDecoder().feed(frame)[0].data)["error"]["status"] == "INTERNAL"


def test_an_error_whose_code_is_no_number_keeps_it_in_data_rather_than_failing() -> None:
    request = Request(
        "POST", "/a2a", body=b'{"jsonrpc": "2.0", "id": 3, "method": "SendStreamingMessage", "params": {}}'
    )
    [frame] = DIALECTS["a2a"].answer_error_frames(Error("m", "server_error", "--5"), request)
    error = json.loads(SSEDecoder().feed(frame)[0].data)["error"]
    assert error == {"code": -32603, "message": "m", "data": {"code": "--5"}}
