"""Faults in MCP's words, as the official `mcp` SDK's client meets them, on loopback.

A real `MCPServer` (a tool answered at once, one that streams progress) is
recorded once through `sse-tape record --upstream`; each test replays the
cassette to a new `ClientSession` and sets its faults once the session is
initialized (a fault set before would act on `initialize` too). The client must
see what it would see from a real server that failed so: a JSON-RPC error for
its request, a tool's error result, a stream cut or a response that never
comes, a session that expired, a flood of progress notifications.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import processes
import pytest
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_REQUEST, REQUEST_TIMEOUT, TextContent
from sdk_servers import mcp_tools, on_loopback
from waits import auntil

from sse_tape import MockServer, aserve
from sse_tape.cassette import Request
from sse_tape.dialects import DIALECTS
from sse_tape.dialects.events import Error
from sse_tape.faults import apply, parse_fault
from sse_tape.journal import Ended, FaultInjected
from sse_tape.plan import Plan
from sse_tape.sse import SSEDecoder

_STEPS = [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]


@contextmanager
def _upstream(*, json_response: bool) -> Iterator[str]:
    """A real MCP server over Streamable HTTP, answering each request with an SSE stream or (`json_response`)
    one JSON answer: its base URL."""
    with on_loopback(mcp_tools().streamable_http_app(json_response=json_response), "the MCP server") as url:
        yield url


async def _whole_session(url: str) -> None:
    async with streamable_http_client(url) as (read, write, *_), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        await session.call_tool("add", {"a": 2, "b": 3})
        await session.call_tool("count", {"n": 3}, progress_callback=_ignored)


async def _ignored(done: float, total: float | None, message: str | None) -> None:
    pass


def _record(path: Path, *, json_response: bool) -> Path:
    """A session of the SDK's client with the real server, recorded through `sse-tape record --upstream`."""
    with _upstream(json_response=json_response) as upstream, processes.recording_proxy(upstream, path) as url:
        asyncio.run(asyncio.wait_for(_whole_session(f"{url}/mcp"), 30))
    return path


@pytest.fixture(scope="module")
def cassette(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's answers recorded as SSE streams."""
    return _record(tmp_path_factory.mktemp("mcp") / "mcp.toml", json_response=False)


@pytest.fixture(scope="module")
def json_cassette(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The server's answers recorded as JSON (`json_response=True`)."""
    return _record(tmp_path_factory.mktemp("mcp") / "mcp-json.toml", json_response=True)


async def _modern_session(url: str) -> None:
    async with Client(url) as client:  # speaks 2026-07-28 to a server that does
        await client.call_tool("count", {"n": 3}, progress_callback=_ignored)


@pytest.fixture(scope="module")
def modern_cassette(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Calls of the SDK's `Client` in revision 2026-07-28 (no session), recorded as SSE streams."""
    path = tmp_path_factory.mktemp("mcp") / "mcp-modern.toml"
    with _upstream(json_response=False) as upstream, processes.recording_proxy(upstream, path) as url:
        asyncio.run(asyncio.wait_for(_modern_session(f"{url}/mcp"), 30))
    return path


@asynccontextmanager
async def _session(cassette: Path, *faults: str, read_timeout: float | None = None) -> AsyncIterator[Any]:
    """An initialized `ClientSession` with the replay, whose faults are set once it is (`read_timeout`: the
    seconds its requests wait for a response); yields it and the replay."""
    async with (
        aserve(cassette) as mock,
        streamable_http_client(f"{mock.url}/mcp") as (read, write, *_),
        ClientSession(read, write, read_timeout_seconds=read_timeout) as session,
    ):
        await session.initialize()
        # The client sends `notifications/initialized` after `initialize` returns: once it is answered, the
        # faults act on what the test asks, not on it.
        await auntil(lambda: _posts_answered(mock) >= 2, "notifications/initialized to be answered")
        mock.control.set_faults(list(faults))
        yield session, mock
        mock.control.set_faults([])  # the client's DELETE, as it closes, is answered as recorded


def _posts_answered(mock: MockServer) -> int:
    return sum(isinstance(entry, Ended) and entry.method == "POST" for entry in mock.control.journal)


class _Progress:
    """A progress callback that keeps what it is told."""

    def __init__(self) -> None:
        self.told: list[tuple[float, float | None, str | None]] = []

    async def __call__(self, done: float, total: float | None, message: str | None) -> None:
        self.told.append((done, total, message))


def _did(mock: MockServer, spec: str) -> list[str]:
    """What the journal says the fault `spec` did to each POST (the client's GET stream, which it opens again and
    again, takes the faults too)."""
    return [
        e.what for e in mock.control.journal if isinstance(e, FaultInjected) and e.fault == spec and e.method == "POST"
    ]


@pytest.mark.parametrize(
    ("spec", "code", "message", "steps"),
    [
        pytest.param("error:at=2", INTERNAL_ERROR, "injected by sse-tape", 2, id="mid-stream, internal error"),
        pytest.param("error:at=0", INTERNAL_ERROR, "injected by sse-tape", 0, id="the whole answer"),
        pytest.param("error:at=1,type=timeout", REQUEST_TIMEOUT, "injected by sse-tape", 1, id="request timeout"),
        pytest.param("error:at=100%,code=-32001,message=upstream slow", REQUEST_TIMEOUT, "upstream slow", 3, id="code"),
        pytest.param("error:at=2,code=-32602,message=n is too big", -32602, "n is too big", 2, id="any code"),
    ],
)
async def test_an_error_is_the_json_rpc_error_for_the_request_which_the_sdk_raises(
    cassette: Path, spec: str, code: int, message: str, steps: int
) -> None:
    progress = _Progress()
    async with _session(cassette, spec) as (session, mock):
        with pytest.raises(MCPError) as raised:
            await asyncio.wait_for(session.call_tool("count", {"n": 3}, progress_callback=progress), 30)
        assert (raised.value.error.code, raised.value.error.message, raised.value.error.data) == (code, message, None)
        assert progress.told == _STEPS[:steps]
        assert _did(mock, spec)[-1] == f"mcp error after event {steps}"
        # The session goes on: with the fault gone, the next call is answered as recorded.
        mock.control.set_faults([])
        added = await asyncio.wait_for(session.call_tool("add", {"a": 2, "b": 3}), 30)
        assert added.structured_content == {"result": 5}


async def test_the_error_carries_the_requests_own_id_and_passes_check(cassette: Path) -> None:
    asked = {
        "jsonrpc": "2.0",
        "id": 41,
        "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 2, "b": 3}},
    }
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    async with aserve(cassette) as mock, httpx.AsyncClient(base_url=mock.url, headers=headers) as client:
        opened = await client.post("/mcp", json={**_initialize(), "id": 0})
        headers = {"mcp-session-id": opened.headers["mcp-session-id"], "x-sse-tape-fault": "error:at=0,code=c7"}
        answer = await client.post("/mcp", json=asked, headers=headers)
    assert answer.text == (
        'event: message\ndata: {"jsonrpc":"2.0","id":41,"error":'
        '{"code":-32603,"message":"injected by sse-tape","data":{"code":"c7"}}}\n\n'
    )
    request = Request("POST", "/mcp", body=json.dumps(asked).encode())
    assert DIALECTS["mcp"].check(SSEDecoder().feed(answer.content), request) == []


async def test_a_fault_for_one_json_rpc_method_leaves_the_rest_of_the_session_alone(cassette: Path) -> None:
    spec = "error:at=0,rpc=tools/call,message=no tools today"
    async with (
        aserve(cassette, faults=[spec]) as mock,  # set before the session opens: initialize is not a tools/call
        streamable_http_client(f"{mock.url}/mcp") as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await asyncio.wait_for(session.initialize(), 30)
        assert [t.name for t in (await asyncio.wait_for(session.list_tools(), 30)).tools] == ["add", "count"]
        with pytest.raises(MCPError) as raised:
            await asyncio.wait_for(session.call_tool("add", {"a": 2, "b": 3}), 30)
        assert (raised.value.error.code, raised.value.error.message) == (INTERNAL_ERROR, "no tools today")
    acted = [e for e in mock.control.journal if isinstance(e, FaultInjected) and e.fault == spec]
    assert len(acted) == 1  # the tool call alone: not initialize, the notification, the GET stream nor the DELETE


async def test_a_session_expiring_once_set_from_the_start_spends_itself_on_a_request_in_the_session(
    cassette: Path,
) -> None:
    async with (
        aserve(cassette, faults=["session-expired:times=1"]) as mock,  # initialize is in no session: not it
        streamable_http_client(f"{mock.url}/mcp") as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await asyncio.wait_for(session.initialize(), 30)
        with pytest.raises(MCPError):  # the first request made in the session finds it expired
            await asyncio.wait_for(session.call_tool("add", {"a": 2, "b": 3}), 30)
    [said] = [e.what for e in mock.control.journal if isinstance(e, FaultInjected)]  # none of a request left alone
    assert said.endswith("expired")


def _initialize() -> dict[str, Any]:
    client = {"name": "mcp", "version": "0.1.0"}
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}
    return {"jsonrpc": "2.0", "method": "initialize", "params": params}


async def test_a_tool_error_is_a_result_the_sdk_hands_back_not_an_exception(cassette: Path) -> None:
    progress = _Progress()
    async with _session(cassette, "tool-error:message=the counter broke") as (session, mock):
        result = await asyncio.wait_for(session.call_tool("count", {"n": 3}, progress_callback=progress), 30)
        assert (result.is_error, result.content, result.structured_content) == (
            True,
            [TextContent(type="text", text="the counter broke")],
            None,
        )
        assert progress.told == _STEPS  # the progress before it, as recorded
        listed = await asyncio.wait_for(session.list_tools(), 30)  # no tool call: left alone
        assert [tool.name for tool in listed.tools] == ["add", "count"]
        # The tool call alone: a request that calls no tool is not the fault's, and spends none of its times=.
        assert _did(mock, "tool-error:message=the counter broke") == [
            "the tool's error result in place of its answer, after event 3"
        ]


async def test_a_stream_cut_before_the_response_fails_the_call_with_what_came_before(cassette: Path) -> None:
    progress = _Progress()
    async with _session(cassette, "disconnect:after=2") as (session, _):
        with pytest.raises(MCPError) as raised:
            await asyncio.wait_for(session.call_tool("count", {"n": 3}, progress_callback=progress), 30)
    # The recording's stream has no event ids, so the client cannot resume it: it gives up at once.
    assert raised.value.error.code == CONNECTION_CLOSED
    assert progress.told == _STEPS[:2]


@pytest.mark.parametrize("spec", ["stall:at=2,for=10m", "hang"], ids=["a stall after progress", "no answer"])
async def test_a_response_never_sent_ends_in_the_clients_read_timeout(cassette: Path, spec: str) -> None:
    progress = _Progress()
    async with _session(cassette, spec, read_timeout=1) as (session, mock):
        with pytest.raises(MCPError) as raised:
            await asyncio.wait_for(session.call_tool("count", {"n": 3}, progress_callback=progress), 30)
        assert (raised.value.error.code, raised.value.error.message) == (
            REQUEST_TIMEOUT,
            "Request 'tools/call' timed out",
        )
        # What came before the silence, as far as it reached the client in its second (all of it, but on a
        # machine too busy to deliver it in time).
        assert progress.told == _STEPS[: len(progress.told)]
        assert len(progress.told) <= (2 if spec.startswith("stall") else 0)
        said = "accepted and never answered" if spec == "hang" else "silent for 600 s at byte "
        assert _did(mock, spec)[-1].startswith(said)


async def test_an_expired_session_gets_404_until_the_app_starts_a_new_one(cassette: Path) -> None:
    async with _session(cassette, "session-expired:times=1") as (session, mock):
        with pytest.raises(MCPError) as raised:
            await asyncio.wait_for(session.call_tool("add", {"a": 2, "b": 3}), 30)
        assert (raised.value.error.code, raised.value.error.message) == (INVALID_REQUEST, "Session not found")
        # The replay forgot the session, as the server whose session expired has: mcp 2.3's client does not
        # initialize again by itself, and `initialize()` again gives what it had and sends nothing.
        with pytest.raises(MCPError, match="Session not found"):
            await asyncio.wait_for(session.list_tools(), 30)
        assert (await asyncio.wait_for(session.initialize(), 30)).server_info.name == "recorded"
        with pytest.raises(MCPError, match="Session not found"):
            await asyncio.wait_for(session.call_tool("add", {"a": 2, "b": 3}), 30)
        # The app must start a new session: a new transport (the session id is its) and client.
        async with (
            streamable_http_client(f"{mock.url}/mcp") as (read, write, *_),
            ClientSession(read, write) as again,
        ):
            await asyncio.wait_for(again.initialize(), 30)
            added = await asyncio.wait_for(again.call_tool("add", {"a": 2, "b": 3}), 30)
        assert added.structured_content == {"result": 5}
        assert _did(mock, "session-expired:times=1")[0].startswith("answered 404 before the stream: session ")


async def test_with_no_times_every_session_expires_but_a_new_one_starts(cassette: Path) -> None:
    async with _session(cassette, "session-expired") as (session, mock):
        with pytest.raises(MCPError, match="Session not found"):
            await asyncio.wait_for(session.list_tools(), 30)
        async with (
            streamable_http_client(f"{mock.url}/mcp") as (read, write, *_),
            ClientSession(read, write) as again,
        ):
            initialized = await asyncio.wait_for(again.initialize(), 30)  # in no session yet: not the fault's
            assert initialized.server_info.name == "recorded"
            with pytest.raises(MCPError, match="Session not found"):
                await asyncio.wait_for(again.list_tools(), 30)
        assert all(said.endswith("expired") for said in _did(mock, "session-expired"))


async def test_a_progress_flood_reaches_the_callback_before_the_result(cassette: Path) -> None:
    progress = _Progress()
    async with _session(cassette, "progress-flood:count=500") as (session, mock):
        result = await asyncio.wait_for(session.call_tool("count", {"n": 3}, progress_callback=progress), 60)
        assert result.structured_content == {"result": "counted 3"}
        assert progress.told == _STEPS + [(3.0 + n, None, None) for n in range(1, 501)]
        added = await asyncio.wait_for(session.call_tool("add", {"a": 2, "b": 3}), 30)  # asked for no progress
        assert added.structured_content == {"result": 5}
        # The call that asked for progress alone: one that asked for none is not the fault's.
        assert _did(mock, "progress-flood:count=500") == [
            "500 progress notifications before the response, after event 3"
        ]


async def test_on_a_json_answer_an_error_and_a_tool_error_are_the_whole_answer(json_cassette: Path) -> None:
    # The tool call's alone: the client's GET stream, opened again after the faults are set (soon or late, as the
    # machine goes), would spend the one time and leave the call unfaulted.
    slow = "error:code=-32001,message=too slow,times=1,rpc=tools/call"
    async with _session(json_cassette, slow) as (session, mock):
        with pytest.raises(MCPError) as raised:
            await asyncio.wait_for(session.call_tool("count", {"n": 3}), 30)
        assert (raised.value.error.code, raised.value.error.message) == (REQUEST_TIMEOUT, "too slow")
        mock.control.set_faults(["tool-error:message=no adding today"])
        added = await asyncio.wait_for(session.call_tool("add", {"a": 2, "b": 3}), 30)
        assert (added.is_error, added.content) == (True, [TextContent(type="text", text="no adding today")])
        assert _did(mock, slow) == ["mcp error in place of the answer"]
        assert _did(mock, "tool-error:message=no adding today")[0] == "the tool's error result in place of its answer"


async def test_on_a_json_answer_the_faults_a_stream_needs_leave_it_alone(json_cassette: Path) -> None:
    progress = _Progress()
    async with _session(json_cassette, "progress-flood:count=5", "disconnect:after=1") as (session, mock):
        counted = await asyncio.wait_for(session.call_tool("count", {"n": 3}, progress_callback=progress), 30)
        assert (counted.structured_content, progress.told) == ({"result": "counted 3"}, [])
        assert set(_did(mock, "progress-flood:count=5")) == {"an answer that is not a stream: left alone"}
        assert mock.control.snapshot().injected == {}


def test_the_pytest_markers_faults_reach_an_mcp_client_in_mcps_words(
    cassette: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Set from the start: `tool-error` and `progress-flood` leave `initialize` and its notification alone.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        "addopts = -p sse_tape.pytest_plugin -p pytest_asyncio.plugin\n"
    )
    (pytester.path / "cassettes").mkdir()
    (pytester.path / "cassettes" / "tools.toml").write_bytes(cassette.read_bytes())
    pytester.makepyfile(
        """
import pytest
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

@pytest.mark.asyncio
@pytest.mark.sse_tape("tools", faults=["tool-error:message=broke", "progress-flood:count=20"], allow_unused=True)
async def test_tools(async_sse_tape):
    told = []

    async def on_progress(done, total, message):
        told.append(done)

    async with streamable_http_client(async_sse_tape.url + "/mcp") as (read, write, *_):
        async with ClientSession(read, write) as session:
            await session.initialize()
            counted = await session.call_tool("count", {"n": 3}, progress_callback=on_progress)
    assert (counted.is_error, counted.content[0].text) == (True, "broke")
    assert told == [float(n) for n in range(1, 24)]
"""
    )
    pytester.runpytest_subprocess().assert_outcomes(passed=1)


async def test_a_2026_07_28_client_meets_the_same_faults_and_has_no_session_to_expire(modern_cassette: Path) -> None:
    progress = _Progress()
    async with aserve(modern_cassette) as mock, Client(f"{mock.url}/mcp") as client:
        mock.control.set_faults(["error:at=2,code=-32001"])
        with pytest.raises(MCPError) as raised:
            await asyncio.wait_for(client.call_tool("count", {"n": 3}, progress_callback=progress), 30)
        assert (raised.value.error.code, progress.told) == (REQUEST_TIMEOUT, _STEPS[:2])
        mock.control.set_faults(["tool-error:message=broke", "progress-flood:count=2", "session-expired"])
        progress.told.clear()
        result = await asyncio.wait_for(client.call_tool("count", {"n": 3}, progress_callback=progress), 30)
        assert (result.is_error, result.content) == (True, [TextContent(type="text", text="broke")])
        assert progress.told == [*_STEPS, (4.0, None, None), (5.0, None, None)]
        assert _did(mock, "session-expired") == []  # a 2026-07-28 request is in no session: not the fault's


_CALL = Request("POST", "/mcp", body=b'{"jsonrpc":"2.0","id":"a-7","method":"tools/call","params":{"name":"t"}}')


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        pytest.param(Error("boom"), {"code": -32603, "message": "boom"}, id="an internal error by default"),
        pytest.param(Error("slow", "timeout"), {"code": -32001, "message": "slow"}, id="the timeout type"),
        pytest.param(Error("x", "timeout", "-32099"), {"code": -32099, "message": "x"}, id="a code over the type"),
        pytest.param(
            Error("x", code="9" * 17), {"code": -32603, "message": "x", "data": {"code": "9" * 17}}, id="too large"
        ),
    ],
)
def test_mcps_error_answer_carries_the_requests_id_and_the_code_asked_for(error: Error, expected: Any) -> None:
    assert json.loads(DIALECTS["mcp"].error_answer(error, _CALL) or b"") == {
        "jsonrpc": "2.0",
        "id": "a-7",
        "error": expected,
    }


def test_a_recorded_error_answer_to_a_tool_call_becomes_the_tools_error_result_and_other_answers_do_not() -> None:
    mcp = DIALECTS["mcp"]
    failed = '{"jsonrpc":"2.0","id":"a-7","error":{"code":-32603,"message":"down"}}'
    assert json.loads(mcp.tool_error(_CALL, "no", failed) or "") == {
        "jsonrpc": "2.0",
        "id": "a-7",
        "result": {"content": [{"type": "text", "text": "no"}], "isError": True},
    }
    progress = '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}'
    assert mcp.tool_error(_CALL, "no", progress) is None
    listing = Request("POST", "/mcp", body=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}')
    assert mcp.tool_error(listing, "no", '{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}') is None


_CHAT = (
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


@pytest.mark.parametrize(
    ("spec", "note"),
    [
        ("tool-error", "no answer to a tool call (openai-chat): left alone"),
        ("progress-flood", "no progress asked for (openai-chat): left alone"),
        ("session-expired", "a request in no session (openai-chat): left alone"),
    ],
)
def test_where_mcps_faults_make_no_sense_the_stream_is_left_alone_and_the_journal_says_why(
    spec: str, note: str
) -> None:
    request = Request("POST", "/v1/chat/completions", body=b'{"model":"m","stream":true,"messages":[]}')
    plan = Plan(200, [("content-type", "text/event-stream")], [(0.0, _CHAT)])
    notes = apply([parse_fault(spec)], plan, dialect=DIALECTS["openai-chat"], rng=random.Random(1), request=request)
    assert [what for _, what in notes] == [note]
    assert (plan.status, plan.body) == (200, _CHAT)
