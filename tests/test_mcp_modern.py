"""MCP over Streamable HTTP, revision 2026-07-28 (stateless), with the official `mcp` SDK on both sides, on loopback.

An `MCPServer` made here (a tool answered at once, one that streams
progress, one whose first answer is `input_required`, one that tells
`subscriptions/listen` streams its tools changed) is recorded through
`sse-tape record --upstream` from a `Client` that speaks 2026-07-28: its
`server/discover` probe, and no `initialize`, no session. The cassette is
replayed to new clients that call in another order, so with other JSON-RPC
ids, one after another and two at once: the same results, progress and
listen events, under their own ids, and never a session id.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import anyio
import httpx
import mcp_types
import processes
import pytest
from click.testing import CliRunner
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from pydantic import BaseModel
from sdk_servers import mcp_tools, on_loopback

from sse_tape import Cassette, aserve
from sse_tape.cassette import Chunk, Interaction, Request, Response
from sse_tape.checking import check_interactions
from sse_tape.cli import cli
from sse_tape.dialects import DIALECTS
from sse_tape.dialects.json_rpc import MISSING
from sse_tape.dialects.mcp import jsonrpc
from sse_tape.dialects.mcp.jsonrpc import rewritten
from sse_tape.plan import Plan
from sse_tape.sse import ServerSentEvent, SSEDecoder

_VERSION = "io.modelcontextprotocol/protocolVersion"


class _Name(BaseModel):
    name: str


def _ask_name() -> Elicit[_Name]:
    return Elicit("Who is asking?", _Name)


def _server() -> MCPServer:
    server = mcp_tools()

    @server.tool()
    def greet(who: Annotated[_Name, Resolve(_ask_name)]) -> str:
        """Greet whoever the client says is asking: `input_required` first, the greeting on the retry."""
        return f"hello {who.name}"

    @server.tool()
    async def touch(ctx: Context) -> str:
        """Tell every listen stream that the tools changed."""
        await ctx.notify_tools_changed()
        return "touched"

    return server


@pytest.fixture(params=["sse", "json"])
def upstream(request: pytest.FixtureRequest) -> Iterator[str]:
    """A real MCP server over Streamable HTTP on a free loopback port, answering each request with an SSE stream
    or (`json`) one JSON response (a listen stream is a stream all the same): its base URL."""
    with on_loopback(_server().streamable_http_app(json_response=request.param == "json"), "the MCP server") as url:
        yield url


async def _answer(context: ClientRequestContext, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
    """The client's answer to the server's question: the user's name."""
    return mcp_types.ElicitResult(action="accept", content={"name": "Ada"})


async def _session(url: str, *, progress_first: bool, linger: float = 0.0) -> dict[str, Any]:
    """A whole 2026-07-28 client's work: discovery, the tools listed and called (the progress one first or last,
    so that the JSON-RPC ids differ), one answered `input_required` then on the retry, and a listen stream that
    hears the tools change, then listens `linger` seconds more (hearing nothing: the stream is held open)."""
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with Client(url, elicitation_callback=_answer) as client:
        counted = await client.call_tool("count", {"n": 3}, progress_callback=on_progress) if progress_first else None
        tools = await client.list_tools()
        added = await client.call_tool("add", {"a": 2, "b": 3})
        greeted = await client.call_tool("greet", {})
        if counted is None:
            counted = await client.call_tool("count", {"n": 3}, progress_callback=on_progress)
        async with client.listen(tools_list_changed=True) as subscription:
            touched = await client.call_tool("touch", {})
            heard = await anext(subscription)
            with anyio.move_on_after(linger):  # listening on: the stream is neither lost nor closed, as recorded
                raise AssertionError(f"after the recorded event, {await anext(subscription)!r}")
        version = client.session.protocol_version
    return {
        "version": version,
        "tools": [(t.name, t.description) for t in tools.tools],
        "added": added.structured_content,
        "counted": counted.structured_content,
        "greeted": greeted.structured_content,
        "touched": touched.structured_content,
        "heard": heard,
        "progress": progress,
    }


async def _recorded(upstream: str, cassette: Path) -> dict[str, Any]:
    """What a client gets through `sse-tape record --upstream`; its recording is in `cassette` once it returns."""
    with processes.recording_proxy(upstream, cassette) as url:
        return await asyncio.wait_for(_session(f"{url}/mcp", progress_first=False), 30)


def _streamed(cassette: Path) -> bool:
    return any(
        i.response.header("content-type") == "text/event-stream" and b'"count"' in i.request.body
        for i in Cassette.load(cassette)
    )


async def test_a_recorded_stateless_client_replays_to_new_clients_with_their_own_ids(
    upstream: str, tmp_path: Path
) -> None:
    cassette = tmp_path / "mcp.toml"
    live = await _recorded(upstream, cassette)
    assert live["version"] == "2026-07-28"
    assert (live["added"], live["greeted"], live["touched"]) == (
        {"result": 5},
        {"result": "hello Ada"},
        {"result": "touched"},
    )
    assert type(live["heard"]).__name__ == "ToolsListChanged"
    if _streamed(cassette):
        assert live["progress"] == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]
    async with aserve(cassette) as mock:
        url = f"{mock.url}/mcp"
        for _ in range(3):  # in another order: `count` is request 2 now, recorded as 5
            # Listening past the recorded client, which left at once: the replay holds the stream as the server did.
            assert await asyncio.wait_for(_session(url, progress_first=True, linger=0.5), 30) == live
        both = await asyncio.wait_for(
            asyncio.gather(_session(url, progress_first=True), _session(url, progress_first=False, linger=0.5)), 30
        )
    assert both == [live, live]


async def test_a_stateless_recording_has_no_session_and_says_its_revision(upstream: str, tmp_path: Path) -> None:
    cassette = tmp_path / "mcp.toml"
    await _recorded(upstream, cassette)
    interactions = Cassette.load(cassette).interactions
    bodies = [i.request.json() for i in interactions]
    assert bodies[0]["method"] == "server/discover"
    assert "initialize" not in {b["method"] for b in bodies}
    assert all(b["params"]["_meta"][_VERSION] == "2026-07-28" for b in bodies)
    assert all(i.response.header("mcp-session-id") is None for i in interactions)
    assert all(i.request.header("mcp-session-id") is None for i in interactions)
    # `greet` asked for input, and the retry echoed the server's state with the client's answer.
    asked, retried = [i for i in interactions if b'"greet"' in i.request.body]
    required = json.loads(asked.response.body)["result"]
    assert required["resultType"] == "input_required"
    assert retried.request.json()["params"]["requestState"] == required["requestState"]
    assert retried.request.json()["params"]["inputResponses"] == {
        key: {"action": "accept", "content": {"name": "Ada"}} for key in required["inputRequests"]
    }
    checks = check_interactions(interactions)
    assert [(c.dialect, c.error, c.violations) for c in checks] == [("mcp", None, ())] * len(checks)
    shown = CliRunner().invoke(cli, ["show", str(cassette)])
    assert shown.exit_code == 0, shown.output
    assert "note: MCP revision 2026-07-28: server/discover" in shown.output
    assert "note: MCP revision 2026-07-28: tools/call count" in shown.output
    assert "note: MCP revision 2026-07-28: subscriptions/listen" in shown.output


_HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2026-07-28",
}


async def test_replay_answers_a_stateless_request_in_no_session_with_its_own_id(upstream: str, tmp_path: Path) -> None:
    cassette = tmp_path / "mcp.toml"
    await _recorded(upstream, cassette)
    interactions = Cassette.load(cassette).interactions
    [listing] = [i.request.json() for i in interactions if i.request.json()["method"] == "tools/list"]
    [retry] = [i.request.json() for i in interactions if "requestState" in i.request.json()["params"]]
    async with aserve(cassette) as mock, httpx.AsyncClient(base_url=mock.url, headers=_HEADERS) as client:
        listed = await client.post("/mcp", json={**listing, "id": "mine"})
        assert (listed.status_code, listed.headers.get("mcp-session-id"), listed.json()["id"]) == (200, None, "mine")
        # No session id: nothing to refuse, wherever the request is in the client's work.
        again = await client.post("/mcp", json={**listing, "id": 40})
        assert (again.status_code, again.json()["id"]) == (200, 40)
        # The server's state, altered, is another request: the recorded answer is not its answer.
        forged = {**retry, "params": {**retry["params"], "requestState": "v1.forged"}}
        missed = await client.post("/mcp", json=forged)
        assert missed.status_code >= 400
        assert 'params.requestState is "v1.forged", recorded "v1.' in missed.json()["error"]["message"]


async def _add(url: str, mode: str) -> tuple[str | None, Any]:
    """The revision a `Client` of `mode` (`legacy`: 2025-11-25's `initialize`; `auto`: discovery) speaks, and
    what `add` gives it."""
    async with Client(url, mode=mode) as client:
        return client.session.protocol_version, (await client.call_tool("add", {"a": 1, "b": 2})).structured_content


async def test_a_client_of_each_revision_replays_from_one_cassette(upstream: str, tmp_path: Path) -> None:
    cassette = tmp_path / "mcp.toml"
    with processes.recording_proxy(upstream, cassette) as url:
        old, new = await _add(f"{url}/mcp", "legacy"), await _add(f"{url}/mcp", "auto")
    assert (old, new) == (("2025-11-25", {"result": 3}), ("2026-07-28", {"result": 3}))
    shown = CliRunner().invoke(cli, ["show", str(cassette)]).output
    assert "note: MCP revision 2025-11-25: initialize" in shown
    assert "note: MCP revision 2026-07-28: tools/call add" in shown
    async with aserve(cassette) as mock:
        for _ in range(2):
            assert (await _add(f"{mock.url}/mcp", "legacy"), await _add(f"{mock.url}/mcp", "auto")) == (old, new)
    checks = check_interactions(Cassette.load(cassette))
    assert [(c.error, c.violations) for c in checks] == [(None, ())] * len(checks)


def _meta(**more: Any) -> dict[str, Any]:
    return {
        _VERSION: "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "mcp", "version": "0.1.0"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    } | more


def _call(id: Any, meta: dict[str, Any], **params: Any) -> Request:
    body = {
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": "greet", "arguments": {}, **params, "_meta": meta},
    }
    return Request("POST", "/mcp", body=json.dumps(body).encode())


def test_jsonrpc_never_compares_what_a_client_mints_afresh_for_each_request() -> None:
    traced = _meta(progressToken=9, traceparent="00-aa-bb-01", tracestate="x=1")
    assert jsonrpc(_call(9, traced), _call(3, _meta(progressToken=3, traceparent="00-cc-dd-01"))) is None
    assert jsonrpc(_call(9, traced), _call(3, _meta())) is None


def test_jsonrpc_compares_the_revision_the_client_and_the_servers_state() -> None:
    assert jsonrpc(_call(1, _meta()), _call(1, _meta(**{_VERSION: "2026-09-30"}))) is not None
    elicits = _meta(**{"io.modelcontextprotocol/clientCapabilities": {}})
    assert jsonrpc(_call(1, _meta()), _call(1, elicits)) is not None  # the server answers otherwise without it
    answered = {"inputResponses": {"k": {"action": "accept", "content": {"name": "Ada"}}}}
    assert (
        jsonrpc(_call(2, _meta(), requestState="s1", **answered), _call(6, _meta(), requestState="s1", **answered))
        is None
    )
    differs = jsonrpc(
        _call(2, _meta(), requestState="s2", **answered), _call(6, _meta(), requestState="s1", **answered)
    )
    assert differs is not None
    assert "requestState" in differs
    legacy = Request(
        "POST", "/mcp", body=b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"greet","arguments":{}}}'
    )
    assert jsonrpc(_call(1, _meta()), legacy) is not None  # the revisions never answer each other


@pytest.mark.parametrize("end", ["\n", "\r\n"], ids=["LF", "CRLF"])
def test_a_replayed_listen_stream_names_the_requests_id_as_its_subscription(end: str) -> None:
    def message(text: str) -> str:
        return f"event: message{end}data: {text}{end}{end}"

    ack = message(
        '{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen-1"},"notifications":{"toolsListChanged":true}}}'
    )
    changed = message(
        '{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen-1"}}}'
    )
    closed = message(
        '{"jsonrpc":"2.0","id":"listen-1","result":{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen-1"}}}'
    )
    body = (ack + changed + closed).encode()
    plan = Plan(200, [("content-type", "text/event-stream")], [(0.0, body[: len(ack)]), (0.5, body[len(ack) :])])
    out = rewritten(plan, "listen-7", MISSING, stream=True)
    assert out is not None
    assert out.body == body.replace(b'"listen-1"', b'"listen-7"')
    assert [t for t, _ in out.writes] == [0.0, 0.5]
    assert out.writes[0][1] == ack.replace("listen-1", "listen-7").encode()


def _stream(*messages: str) -> list[ServerSentEvent]:
    return SSEDecoder().feed("".join(f"event: message\ndata: {m}\n\n" for m in messages).encode())


_LISTEN = Request(
    "POST",
    "/mcp",
    body=b'{"jsonrpc":"2.0","id":"listen-1","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true}}}',
)
_ACK = '{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen-1"}}}'
_ASKED = Request("POST", "/mcp", body=b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"count"}}')
_RESULT = '{"jsonrpc":"2.0","id":5,"result":{"content":[]}}'


@pytest.mark.parametrize(
    ("request_", "messages", "violations"),
    [
        pytest.param(_LISTEN, [_ACK], [], id="a listen stream the client left"),
        pytest.param(
            _LISTEN,
            [
                _ACK,
                '{"jsonrpc":"2.0","id":"listen-1","result":{"_meta":{"io.modelcontextprotocol/subscriptionId":"listen-1"}}}',
            ],
            [],
            id="a listen stream closed",
        ),
        pytest.param(
            _LISTEN,
            [_ACK.replace("listen-1", "listen-2")],
            ["""event 1: a listen stream's message names subscription "listen-2", the request's id is "listen-1\""""],
            id="a listen stream for another subscription",
        ),
        pytest.param(
            _ASKED,
            [
                '{"jsonrpc":"2.0","id":5,"method":"notifications/progress","params":{"progressToken":5,"progress":1}}',
                _RESULT,
            ],
            ["event 1: a notification (notifications/progress) with an id"],
            id="a notification with an id",
        ),
        pytest.param(
            _ASKED,
            [_RESULT.replace('"id":5', '"id":"other"')],
            ['event 1: a response to id "other", the request\'s is 5'],
            id="a response to an unknown id",
        ),
        pytest.param(
            _ASKED,
            ['{"jsonrpc":"2.0","id":5,"result":{},"error":{"code":-32603,"message":"x"}}'],
            ["event 1: a response with both a result and an error"],
            id="a result and an error",
        ),
        pytest.param(_ASKED, [], ["the stream has no response to the request (id 5)"], id="no response"),
    ],
)
def test_check_names_the_rule_a_hand_broken_stateless_stream_breaks(
    request_: Request, messages: list[str], violations: list[str]
) -> None:
    assert [str(v) for v in DIALECTS["mcp"].check(_stream(*messages), request_)] == violations


def test_check_holds_a_json_answer_to_its_requests_id_and_one_outcome() -> None:
    mcp = DIALECTS["mcp"]
    assert mcp.check_json(_RESULT.encode(), _ASKED) == []
    assert [str(v) for v in mcp.check_json(b'{"jsonrpc":"2.0","id":6,"result":{}}', _ASKED)] == [
        "a response to id 6, the request's is 5"
    ]
    both = b'{"jsonrpc":"2.0","id":5,"result":{},"error":{"code":-32603,"message":"x"}}'
    assert [str(v) for v in mcp.check_json(both, _ASKED)] == ["a response with both a result and an error"]


def _exchange(request: Request, *headers: tuple[str, str]) -> Interaction:
    return Interaction(
        request, Response(200, (("content-type", "application/json"), *headers), (Chunk(0.0, _RESULT.encode()),))
    )


def test_check_finds_a_session_id_where_the_revision_has_none() -> None:
    stateless = _call(5, _meta())
    [found] = check_interactions([_exchange(stateless, ("mcp-session-id", "abc"))])
    assert [str(v) for v in found.violations] == [
        "an Mcp-Session-Id in the answer: revision 2026-07-28 has no sessions"
    ]
    assert check_interactions([_exchange(stateless)])[0].violations == ()
    for version in ("2025-11-25", "no date"):  # a revision with sessions, and one that says nothing of them
        in_session = Request("POST", "/mcp", headers=(("mcp-protocol-version", version),), body=_ASKED.body)
        assert check_interactions([_exchange(in_session, ("mcp-session-id", "abc"))])[0].violations == ()
