"""MCP over Streamable HTTP (revision 2025-11-25), with the official `mcp` SDK on both sides, on loopback.

An `MCPServer` made here (a tool answered at once, one that streams progress)
is recorded through `sse-tape record --upstream`; the cassette is replayed to
new `ClientSession`s that call in another order, so with other JSON-RPC ids,
one after another and two at once. The client must get what the server gave:
the same tools, results and progress notifications, under its own ids.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import processes
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from sdk_servers import mcp_tools, on_loopback

from sse_tape import Cassette, aserve
from sse_tape.cassette import REDACTED, Interaction, Request, Response
from sse_tape.checking import check_interactions
from sse_tape.dialects import DIALECTS, detect
from sse_tape.dialects.mcp import jsonrpc
from sse_tape.dialects.mcp import session as session_module
from sse_tape.dialects.mcp.jsonrpc import rewritten
from sse_tape.plan import Plan
from sse_tape.redaction import find_secrets
from sse_tape.sse import ServerSentEvent, SSEDecoder


@pytest.fixture(params=["sse", "json"])
def upstream(request: pytest.FixtureRequest) -> Iterator[str]:
    """A real MCP server over Streamable HTTP on a free loopback port, answering each request with an SSE stream
    or (`json`) one JSON response: its base URL."""
    with on_loopback(mcp_tools().streamable_http_app(json_response=request.param == "json"), "the MCP server") as url:
        yield url


async def _session(url: str, *, progress_first: bool) -> dict[str, Any]:
    """A whole client session: initialize, the tools listed and both called (the progress one first or last,
    so that its JSON-RPC ids differ), then closed (DELETE)."""
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with streamable_http_client(url) as (read, write, *_), ClientSession(read, write) as session:
        init = await session.initialize()
        counted = await session.call_tool("count", {"n": 3}, progress_callback=on_progress) if progress_first else None
        tools = await session.list_tools()
        added = await session.call_tool("add", {"a": 2, "b": 3})
        if counted is None:
            counted = await session.call_tool("count", {"n": 3}, progress_callback=on_progress)
    return {
        "version": init.protocol_version,
        "server": init.server_info.name,
        "tools": [(t.name, t.description) for t in tools.tools],
        "added": (added.structured_content, added.is_error),
        "counted": (counted.structured_content, counted.is_error),
        "progress": progress,
    }


async def _recorded(upstream: str, cassette: Path) -> dict[str, Any]:
    """What a session through `sse-tape record --upstream` gets; its recording is in `cassette` once it returns."""
    with processes.recording_proxy(upstream, cassette) as url:
        return await asyncio.wait_for(_session(f"{url}/mcp", progress_first=False), 30)


async def test_a_recorded_session_replays_to_new_sessions_with_their_own_ids(upstream: str, tmp_path: Path) -> None:
    cassette = tmp_path / "mcp.toml"
    live = await _recorded(upstream, cassette)
    if "text/event-stream" in {
        i.response.header("content-type") for i in Cassette.load(cassette) if i.request.method == "POST"
    }:
        assert live["progress"] == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]
    assert live["added"] == ({"result": 5}, False)
    async with aserve(cassette) as mock:
        url = f"{mock.url}/mcp"
        for _ in range(3):  # in another order: `count` is request 2 now, recorded as 4
            assert await asyncio.wait_for(_session(url, progress_first=True), 30) == live
        both = await asyncio.wait_for(
            asyncio.gather(_session(url, progress_first=True), _session(url, progress_first=False)), 30
        )
    assert both == [live, live]


async def test_the_session_id_and_progress_token_are_recorded_as_they_are(upstream: str, tmp_path: Path) -> None:
    cassette = tmp_path / "mcp.toml"
    await _recorded(upstream, cassette)
    interactions = Cassette.load(cassette).interactions
    minted = interactions[0].response.header("mcp-session-id")
    assert minted is not None
    assert minted != REDACTED
    assert all(i.request.header("mcp-session-id") == minted for i in interactions[1:])
    [called] = [i for i in interactions if b'"count"' in i.request.body]
    assert called.request.json()["params"]["_meta"]["progressToken"] == called.request.json()["id"]
    assert [find_secrets(i) for i in interactions] == [[]] * len(interactions)


async def test_check_knows_every_answer_of_a_session_as_mcp(upstream: str, tmp_path: Path) -> None:
    cassette = tmp_path / "mcp.toml"
    await _recorded(upstream, cassette)
    interactions = Cassette.load(cassette).interactions
    assert {i.request.method for i in interactions} == {"POST", "GET", "DELETE"}
    assert {i.response.status for i in interactions} >= {200, 202}
    checks = check_interactions(interactions)
    assert [(c.dialect, c.error, c.violations) for c in checks] == [("mcp", None, ())] * len(checks)


def test_a_recording_away_from_mcp_is_told_by_its_json_rpc() -> None:
    request = Request("POST", "/tools", body=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}')
    found = detect(Interaction(request, Response(200)))
    assert found is not None
    assert found.name == "mcp"


def _call(id: Any, token: Any = None, **arguments: Any) -> Request:
    params: dict[str, Any] = {"name": "count", "arguments": arguments}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return Request(
        "POST", "/mcp", body=json.dumps({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).encode()
    )


def test_jsonrpc_matches_by_method_and_params_never_the_clients_ids() -> None:
    assert jsonrpc(_call(2, 2, n=3), _call(4, 4, n=3)) is None
    assert jsonrpc(_call(2, None, n=3), _call(4, None, n=3)) is None
    assert jsonrpc(_call(2, 2, n=3), _call(2, 2, n=4)) == "params.arguments.n is 3, recorded 4"
    assert jsonrpc(_call(1, n=3), Request("POST", "/mcp", body=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}')) == (
        'method is "tools/call", recorded "tools/list"'
    )


@pytest.mark.parametrize("end", ["\n", "\r\n"], ids=["LF", "CRLF"])
def test_a_replayed_stream_carries_the_requests_id_and_token_each_write_at_its_time(end: str) -> None:
    progress = f'event: message{end}data: {{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":4,"progress":1}}}}{end}{end}'
    answer = f'event: message{end}data: {{"jsonrpc":"2.0","id":4,"result":{{"content":[]}}}}{end}{end}'
    server_request = f'event: message{end}data: {{"jsonrpc":"2.0","id":0,"method":"roots/list"}}{end}{end}'
    body = (server_request + progress + answer).encode()
    split = len(server_request) + len(progress) + 20  # in the middle of the response's data
    plan = Plan(200, [("content-type", "text/event-stream")], [(0.1, body[:split]), (0.5, body[split:])])
    out = rewritten(plan, 12, "t", stream=True)
    assert out is not None
    expected = (
        server_request
        + progress.replace('"progressToken":4', '"progressToken":"t"')
        + answer.replace('"id":4', '"id":12')
    ).encode()
    assert out.body == expected
    assert [t for t, _ in out.writes] == [0.1, 0.5]
    assert out.writes[0][1] == expected[: split + len('"t"') - 1]
    assert plan.body == body  # the recording's plan is left as it was
    assert rewritten(plan, 4, 4, stream=True) is None  # already the request's: replayed byte for byte


_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "mcp", "version": "0.1.0"}},
}


def _message(response: httpx.Response) -> Any:
    """The JSON-RPC message an answer carries: its JSON, or its stream's last event's data."""
    if response.headers["content-type"].startswith("application/json"):
        return response.json()
    return json.loads([line for line in response.text.splitlines() if line.startswith("data: ")][-1][6:])


async def test_replay_mints_a_session_per_initialize_and_honours_it_as_the_spec_says(
    upstream: str, tmp_path: Path
) -> None:
    cassette = tmp_path / "mcp.toml"
    await _recorded(upstream, cassette)
    recorded = Cassette.load(cassette).interactions[0].response.header("mcp-session-id")
    listing = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
    async with aserve(cassette) as mock, httpx.AsyncClient(base_url=mock.url, headers=_HEADERS) as client:
        first, second = [await client.post("/mcp", json=_INITIALIZE) for _ in range(2)]
        minted = [first.headers["mcp-session-id"], second.headers["mcp-session-id"]]
        assert len({*minted, recorded}) == 3
        # The version the recorded server chose, as it chose it.
        assert _message(first)["result"]["protocolVersion"] == "2025-11-25"
        assert _message(first)["id"] == 0
        session = {"mcp-session-id": minted[0]}
        listed = await client.post("/mcp", json=listing, headers=session)
        assert (listed.status_code, listed.headers["mcp-session-id"], _message(listed)["id"]) == (200, minted[0], 7)
        unknown = await client.post("/mcp", json=listing, headers={"mcp-session-id": recorded})
        assert (unknown.status_code, unknown.json()) == (
            404,
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}},
        )
        missing = await client.post("/mcp", json=listing)
        assert (missing.status_code, missing.json()["error"]["message"]) == (400, "Bad Request: Missing session ID")
        assert (await client.delete("/mcp", headers=session)).status_code == 200
        ended = await client.post("/mcp", json=listing, headers=session)
        assert ended.status_code == 404
        other = await client.post("/mcp", json=listing, headers={"mcp-session-id": minted[1]})
        assert (other.status_code, _message(other)["id"]) == (200, 7)  # the other session goes on


def _stream(*messages: str) -> list[ServerSentEvent]:
    return SSEDecoder().feed("".join(f"event: message\ndata: {m}\n\n" for m in messages).encode())


_ASKED = Request("POST", "/mcp", body=b'{"jsonrpc":"2.0","id":5,"method":"tools/list"}')
_RESULT = '{"jsonrpc":"2.0","id":5,"result":{"tools":[]}}'
_PROGRESS = '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":5,"progress":1}}'


@pytest.mark.parametrize(
    ("messages", "violations"),
    [
        pytest.param([_PROGRESS, _RESULT], [], id="progress then the response"),
        pytest.param(
            ['{"jsonrpc":"2.0","id":6,"result":{}}'],
            ["event 1: a response to id 6, the request's is 5"],
            id="a response to another id",
        ),
        pytest.param([_RESULT, _RESULT], ["event 2: a second response in one request's stream"], id="two responses"),
        pytest.param(
            ['{"jsonrpc":"2.0","id":5,"result":{},"error":{"code":1,"message":"x"}}'],
            ["event 1: a response with both a result and an error"],
            id="a result and an error",
        ),
        pytest.param([_PROGRESS], ["the stream has no response to the request (id 5)"], id="no response"),
        pytest.param(
            [_RESULT, _PROGRESS], ["event 2: a message after the response: the stream ends with it"], id="after it"
        ),
        pytest.param(
            ['{"id":5,"result":{}}'],
            ["event 1: data is not a JSON-RPC 2.0 message", "the stream has no response to the request (id 5)"],
            id="not JSON-RPC",
        ),
    ],
)
def test_check_names_the_rule_a_hand_broken_stream_breaks(messages: list[str], violations: list[str]) -> None:
    assert [str(v) for v in DIALECTS["mcp"].check(_stream(*messages), _ASKED)] == violations


def test_check_holds_a_json_answer_to_the_request_and_lets_a_notifications_be_empty() -> None:
    mcp = DIALECTS["mcp"]
    notified = Request("POST", "/mcp", body=b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    assert mcp.check_json(b"", notified) == []
    assert mcp.check_json(_RESULT.encode(), _ASKED) == []
    assert [str(v) for v in mcp.check_json(b"", _ASKED)] == ["the answer to request id 5 is empty"]
    assert [str(v) for v in mcp.check_json(b'{"tools":[]}', _ASKED)] == ["the answer is not a JSON-RPC 2.0 response"]


def test_jsonrpc_tells_a_request_from_a_notification_of_the_same_method() -> None:
    notified = Request("POST", "/mcp", body=b'{"jsonrpc":"2.0","method":"tools/list"}')
    asked = Request("POST", "/mcp", body=b'{"jsonrpc":"2.0","id":3,"method":"tools/list"}')
    assert jsonrpc(notified, asked) == "body is a notification (no id), recorded a request"
    assert jsonrpc(asked, notified) == "body is a request, recorded a notification (no id)"


@pytest.mark.parametrize(
    ("path", "body", "error"),
    [
        ("/rpc", {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}, "jsonrpc"),  # MCP's, told by its JSON-RPC
        ("/rpc", {"jsonrpc": "2.0", "id": "a", "method": "SendStreamingMessage", "params": {}}, "a2a"),  # A2A's
        ("/rpc", {"model": "m", "messages": []}, "openai"),  # no protocol's: OpenAI's, as ever
    ],
    ids=["mcp", "a2a", "none"],
)
async def test_a_miss_away_from_the_protocols_paths_is_answered_in_the_words_its_request_speaks(
    path: str, body: dict[str, Any], error: str
) -> None:
    async with aserve() as mock, httpx.AsyncClient(base_url=mock.url) as client:
        answer = await client.post(path, json=body)
    assert answer.status_code == 404
    got = answer.json()
    if error == "jsonrpc":  # the SDKs' JSON-RPC error, with no id
        assert (got["jsonrpc"], got["id"], got["error"]["code"]) == ("2.0", None, -32600)
    elif error == "a2a":  # the REST binding's error, which an a2a-sdk client raises over either binding
        assert (got["error"]["status"], got["error"]["details"][0]["reason"]) == ("NOT_FOUND", "NO_MATCH")
    else:
        assert got["error"]["type"] == "invalid_request_error"
    assert "sse-tape" in json.dumps(got)


async def test_replay_keeps_so_many_sessions_open_at_most_ending_the_oldest(
    upstream: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_module, "MOST_SESSIONS", 3)
    cassette = tmp_path / "mcp.toml"
    await _recorded(upstream, cassette)
    listing = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
    async with aserve(cassette) as mock, httpx.AsyncClient(base_url=mock.url, headers=_HEADERS) as client:
        minted = [(await client.post("/mcp", json=_INITIALIZE)).headers["mcp-session-id"] for _ in range(5)]
        assert sum(len(ids) for ids in mock.control.snapshot().kept.values()) == 3
        answered = [
            (await client.post("/mcp", json=listing, headers={"mcp-session-id": s})).status_code for s in minted
        ]
    assert answered == [404, 404, 200, 200, 200]  # the two oldest ended, as sessions a server expired
