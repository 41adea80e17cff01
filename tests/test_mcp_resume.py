"""MCP's resumable streams, its GET stream and its server-to-client requests, replayed (revision 2025-11-25).

An `MCPServer` made here with an event store (as the SDK's examples keep
one, in memory: each event gets an id, each stream opens with a priming
event, `retry:` sets the client's reconnection delay) is recorded through
`sse-tape record --upstream` with the official `ClientSession`, and replayed
to new ones: a stream a `disconnect` fault cuts is resumed with
`Last-Event-ID` from after that event, whichever stream of the session it
was; the `GET` stream stays open until the session ends; a tool that asks
the client (elicitation, sampling) gets the client's answer matched back.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import processes
import pytest
from mcp import types
from mcp.client.context import ClientRequestContext
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel
from sdk_servers import Events, on_loopback
from waits import auntil

from sse_tape import Cassette, aserve
from sse_tape.cassette import Request
from sse_tape.checking import check_interactions
from sse_tape.dialects.mcp import jsonrpc
from sse_tape.dialects.mcp import session as session_module
from sse_tape.dialects.mcp.jsonrpc import event_ids, rewritten
from sse_tape.journal import Answered, Ended, Matched, Missed
from sse_tape.plan import Plan
from sse_tape.sse import ServerSentEvent, SSEDecoder

# Sampling is revision 2025-11-25's (the SDK, speaking 2026-07-28 too, warns that that revision drops it).
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


class _Name(BaseModel):
    name: str


def _server() -> MCPServer:
    server = MCPServer("resumable")

    @server.tool()
    async def count(n: int, ctx: Context) -> str:
        """Count to n, reporting each step as progress."""
        for i in range(n):
            await ctx.report_progress(i + 1, n, f"step {i + 1}")
        return f"counted {n}"

    @server.tool()
    async def greet(ctx: Context) -> str:
        """Ask the client whom to greet."""
        answer = await ctx.elicit("Whom shall I greet?", _Name)
        return f"hello {answer.data.name}" if answer.action == "accept" and answer.data else "no one"

    @server.tool()
    async def haiku(topic: str, ctx: Context) -> str:
        """Ask the client's model for a line."""
        message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=topic))
        # On the call's own stream (the SDK sends a request related to none on the GET stream).
        sampled = await ctx.session.create_message([message], max_tokens=20, related_request_id=ctx.request_id)
        return sampled.content.text if isinstance(sampled.content, types.TextContent) else ""

    @server.tool()
    async def touch(ctx: Context) -> str:
        """Tell the client, twice, on its GET stream (the notifications relate to no request), that the
        resources changed."""
        for _ in range(2):
            await ctx.session.send_resource_list_changed()
        return "touched"

    return server


@pytest.fixture
def upstream() -> Iterator[str]:
    """A real MCP server over Streamable HTTP with an event store on a free loopback port: its base URL."""
    with on_loopback(_server().streamable_http_app(event_store=Events(), retry_interval=50), "the MCP server") as url:
        yield url


async def _elicited(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Ada"})


async def _sampled(
    context: ClientRequestContext, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    asked = params.messages[0].content
    text = asked.text if isinstance(asked, types.TextContent) else ""
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text=f"{text} at dusk"), model="a-model"
    )


async def _session(
    url: str, *, listed_first: bool = False, ready: asyncio.Event | None = None, go: asyncio.Event | None = None
) -> dict[str, Any]:
    """A whole client session: initialize, `count` called with progress (after `tools/list` if `listed_first`,
    so under other ids), the tools that ask the client called, then closed (DELETE). `ready` is set once it
    has initialized, and it waits for `go` before calling."""
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with (
        streamable_http_client(url) as (read, write, *_),
        ClientSession(read, write, elicitation_callback=_elicited, sampling_callback=_sampled) as session,
    ):
        await session.initialize()
        if listed_first:
            await session.list_tools()
        if ready is not None and go is not None:
            ready.set()
            await go.wait()
        counted = await session.call_tool("count", {"n": 4}, progress_callback=on_progress)
        greeted = await session.call_tool("greet", {})
        sampled = await session.call_tool("haiku", {"topic": "rain"})
    return {
        "counted": counted.structured_content,
        "progress": progress,
        "greeted": greeted.structured_content,
        "sampled": sampled.structured_content,
    }


def _gets(journal: Any) -> list[Matched | Answered]:
    """The journal's answers to `GET`s: the streams opened, and resumed."""
    return [e for e in journal if isinstance(e, (Matched, Answered)) and e.method == "GET"]


async def _touched(url: str) -> dict[str, Any]:
    """A session that calls `touch` (whose notifications go on the GET stream), waits for them, and closes."""
    changed = asyncio.Event()
    notified: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceListChangedNotification):
            notified.append(message.method)
            if len(notified) == 2:
                changed.set()

    async with (
        streamable_http_client(url) as (read, write, *_),
        ClientSession(read, write, message_handler=on_message) as session,
    ):
        await session.initialize()
        touched = await session.call_tool("touch", {})
        await asyncio.wait_for(changed.wait(), 30)
    return {"touched": touched.structured_content, "notified": notified}


async def _recorded(upstream: str, cassette: Path, session: Any = _session) -> dict[str, Any]:
    """What a `session` through `sse-tape record --upstream` gets; its recording is in `cassette` once it
    returns."""
    with processes.recording_proxy(upstream, cassette) as url:
        return await asyncio.wait_for(session(f"{url}/mcp"), 30)


@pytest.fixture
async def recorded(upstream: str, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A session recorded from the resumable server: its cassette, and what its client got."""
    cassette = tmp_path / "mcp.toml"
    live = await _recorded(upstream, cassette)
    assert live == {
        "counted": {"result": "counted 4"},
        "progress": [(float(i), 4.0, f"step {i}") for i in range(1, 5)],
        "greeted": {"result": "hello Ada"},
        "sampled": {"result": "rain at dusk"},
    }
    return cassette, live


async def test_a_cut_stream_resumes_from_after_its_last_event_id_in_each_session(
    recorded: tuple[Path, dict[str, Any]],
) -> None:
    cassette, live = recorded
    async with aserve(cassette) as mock:
        url = f"{mock.url}/mcp"
        ready, go = [asyncio.Event(), asyncio.Event()], asyncio.Event()
        # Two sessions at once, under other ids (one lists the tools first): each `count` stream is cut after
        # its priming event and two progress notifications, and each client reconnects with the id of the last.
        sessions = asyncio.gather(
            _session(url, ready=ready[0], go=go), _session(url, listed_first=True, ready=ready[1], go=go)
        )
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in ready)), 30)
        await auntil(lambda: len(_gets(mock.control.journal)) == 2, "both GET streams to open")
        mock.control.set_faults(["disconnect:after=3,times=2"])
        go.set()
        both = await asyncio.wait_for(sessions, 30)
        journal = list(mock.control.journal)
    assert both == [live, live]  # every progress notification once, and the result, in each session
    cut = [e for e in journal if isinstance(e, Ended) and e.method == "POST" and e.end == "interrupted"]
    assert len(cut) == 2
    resumed = {e.what.split(" resumed")[0] for e in _gets(journal) if isinstance(e, Answered)}
    assert resumed == {f"the stream of request {e.request}" for e in cut}
    assert len(_gets(journal)) == 4  # one GET stream held open per session, and a resumption each


_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _events(body: bytes) -> list[ServerSentEvent]:
    """A stream's events, the priming one (an id, no data) among them."""
    decoder = SSEDecoder()
    return [e for e in decoder.feed(body) if e.id or e.data]


async def _opened(client: httpx.AsyncClient, cassette: Path) -> dict[str, str]:
    """A new session's headers, after `initialize` (as the recorded client asked) and `notifications/initialized`."""
    answer = await client.post("/mcp", content=Cassette.load(cassette).interactions[0].request.body)
    session = {"mcp-session-id": answer.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    notified = await client.post(
        "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
    )
    assert notified.status_code == 202
    return session


def _count(id: int) -> dict[str, Any]:
    params = {"name": "count", "arguments": {"n": 4}, "_meta": {"progressToken": id}}
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}


async def test_a_recording_played_again_in_a_session_gives_event_ids_of_its_own_to_resume_after(
    recorded: tuple[Path, dict[str, Any]],
) -> None:
    cassette, _ = recorded
    [interaction] = [i for i in Cassette.load(cassette) if b'"count"' in i.request.body]
    ids = [e.id for e in _events(interaction.response.body)]
    assert len(set(ids)) == len(ids) == 6  # the priming event, four progress notifications, the result
    async with aserve(cassette) as mock, httpx.AsyncClient(base_url=mock.url, headers=_HEADERS) as client:
        session = await _opened(client, cassette)
        first, second = [await client.post("/mcp", json=_count(id), headers=session) for id in (11, 12)]
        assert [e.id for e in _events(first.content)] == ids  # as recorded, the first time in the session
        assert [e.id for e in _events(second.content)] == [f"{i}~2" for i in ids]
        assert [e.data for e in _events(first.content)] != [e.data for e in _events(second.content)]
        for answer, id in ((second, 12), (first, 11)):  # each id resumes its own stream, whichever came last
            after = _events(answer.content)[2].id  # after the priming event and the first progress
            resumed = await client.get("/mcp", headers={**session, "last-event-id": after})
            assert resumed.status_code == 200
            assert resumed.headers["mcp-session-id"] == session["mcp-session-id"]
            assert [e.data for e in _events(resumed.content)] == [e.data for e in _events(answer.content)[3:]]
            assert json.loads(_events(resumed.content)[-1].data)["id"] == id
        # Another session knows none of the first one's streams: its GET is its own (the recorded GET stream).
        other = await _opened(client, cassette)
        async with client.stream("GET", "/mcp", headers={**other, "last-event-id": ids[2]}) as elsewhere:
            assert elsewhere.status_code == 200
            opened = await auntil(lambda: [e for e in _gets(mock.control.journal) if isinstance(e, Matched)])
        assert [(e.resumed, e.kept) for e in opened] == [(f"from the start: no event id {ids[2]!r}", "held open")]


async def test_a_session_keeps_its_streams_under_its_newest_event_ids_only(
    recorded: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_module, "MOST_EVENT_IDS", 6)  # one `count` stream's: the newest stream alone
    cassette, _ = recorded
    async with aserve(cassette) as mock, httpx.AsyncClient(base_url=mock.url, headers=_HEADERS) as client:
        session = await _opened(client, cassette)
        answers = [await client.post("/mcp", json=_count(id), headers=session) for id in (21, 22)]
        older, newer = (_events(answer.content)[2].id for answer in answers)
        resumed = await client.get("/mcp", headers={**session, "last-event-id": newer})
        assert [e.data for e in _events(resumed.content)] == [e.data for e in _events(answers[1].content)[3:]]
        async with client.stream("GET", "/mcp", headers={**session, "last-event-id": older}) as forgotten:
            assert forgotten.status_code == 200  # left to replay: the recorded GET stream, from the start
            opened = await auntil(lambda: [e for e in _gets(mock.control.journal) if isinstance(e, Matched)])
        assert [e.resumed for e in opened] == [f"from the start: no event id {older!r}"]


async def test_a_session_id_naming_what_a_session_keeps_is_no_session(recorded: tuple[Path, dict[str, Any]]) -> None:
    cassette, _ = recorded
    async with aserve(cassette) as mock, httpx.AsyncClient(base_url=mock.url, headers=_HEADERS) as client:
        session = await _opened(client, cassette)
        answer = await client.post("/mcp", json=_count(31), headers=session)
        forged = {**session, "mcp-session-id": f"{session['mcp-session-id']} {_events(answer.content)[0].id}"}
        listing = {"jsonrpc": "2.0", "id": 32, "method": "tools/list"}
        assert (await client.post("/mcp", json=listing, headers=forged)).status_code == 404
        assert (await client.post("/mcp", json=listing, headers=session)).status_code == 200


async def _rest(pieces: AsyncIterator[bytes]) -> bytes:
    return b"".join([piece async for piece in pieces])


async def test_the_get_stream_stays_open_after_its_events_until_its_session_ends(
    recorded: tuple[Path, dict[str, Any]],
) -> None:
    cassette, _ = recorded
    [get] = [i for i in Cassette.load(cassette) if i.request.method == "GET"]
    lasted = get.response.duration or 0.0
    async with aserve(cassette) as mock, httpx.AsyncClient(base_url=mock.url, headers=_HEADERS) as client:
        session = await _opened(client, cassette)
        async with client.stream("GET", "/mcp", headers=session) as stream:
            # What the recorded GET stream carried (nothing), then it stays open for longer than the recorded
            # one lasted (a stream that ended would send its client reconnecting).
            rest = asyncio.ensure_future(_rest(stream.aiter_bytes()))
            done, _ = await asyncio.wait([rest], timeout=lasted + 0.5)
            assert not done
            # Held open as the server's own, it is no request in flight: a wait for the server to be idle ends.
            await asyncio.wait_for(mock.control.idle(), 30)
            assert (await client.delete("/mcp", headers=session)).status_code == 200
            with pytest.raises(httpx.RemoteProtocolError):  # the session ended: so does its GET stream
                await asyncio.wait_for(rest, 30)
        journal = list(mock.control.journal)
    [held] = [e for e in journal if isinstance(e, Matched) and e.method == "GET"]
    assert held.kept == "held open"


async def test_the_clients_answers_to_the_servers_requests_are_matched_by_their_result(
    recorded: tuple[Path, dict[str, Any]],
) -> None:
    cassette, live = recorded
    answers = {  # the recorded client's answers to the server's requests (elicitation, sampling), each answered 202
        n: i.request.json()
        for n, i in enumerate(Cassette.load(cassette), 1)
        if "result" in (i.request.json() or {}) and i.response.status == 202
    }
    assert len(answers) == 2
    async with aserve(cassette) as mock:
        assert await asyncio.wait_for(_session(f"{mock.url}/mcp"), 30) == live
        journal = list(mock.control.journal)
    matched = [e for e in journal if isinstance(e, Matched) and e.status == 202 and e.method == "POST"]
    assert sorted(n for e in matched for n in answers if f" #{n} (" in e.recording) == sorted(answers)


async def test_a_client_answering_otherwise_than_recorded_is_told_it_is_a_miss(
    recorded: tuple[Path, dict[str, Any]],
) -> None:
    cassette, _ = recorded

    async def declined(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    async with aserve(cassette) as mock:
        url = f"{mock.url}/mcp"
        async with (
            streamable_http_client(url) as (read, write, *_),
            ClientSession(read, write, elicitation_callback=declined, sampling_callback=_sampled) as session,
        ):
            await session.initialize()
            await session.call_tool("count", {"n": 4})
            greeted = await session.call_tool("greet", {})
        journal = list(mock.control.journal)
    [missed] = [e for e in journal if isinstance(e, Missed)]
    assert (missed.method, missed.status) == ("POST", 404)
    assert greeted.structured_content == {"result": "hello Ada"}  # the recorded stream goes on as recorded
    # Why: the answer is matched by its result, never by its id (the server's own, replayed as recorded).
    [answer] = [i.request for i in Cassette.load(cassette) if b'"action"' in i.request.body]
    other = Request("POST", "/mcp", body=json.dumps({**answer.json(), "result": {"action": "decline"}}).encode())
    assert jsonrpc(other, answer) == 'result.action is "decline", recorded "accept"'
    renumbered = Request("POST", "/mcp", body=json.dumps({**answer.json(), "id": 99}).encode())
    assert jsonrpc(renumbered, answer) is None


async def test_check_passes_a_resumable_session_with_the_servers_requests_in_it(
    recorded: tuple[Path, dict[str, Any]],
) -> None:
    cassette, _ = recorded
    interactions = Cassette.load(cassette).interactions
    streams = [i for i in interactions if i.response.header("content-type") == "text/event-stream"]
    assert all(i.response.body.startswith(b"id: ") for i in streams if i.request.method == "POST")  # primed
    checks = check_interactions(interactions)
    assert [(c.dialect, c.error, c.violations) for c in checks] == [("mcp", None, ())] * len(checks)


@pytest.mark.parametrize("end", ["\n", "\r", "\r\n"], ids=["LF", "CR", "CRLF"])
def test_a_streams_event_ids_are_rewritten_in_place_each_write_at_its_time(end: str) -> None:
    priming = f"id: a{end}data: {end}retry: 50{end}{end}"
    progress = f'id:b{end}event: message{end}data: {{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":4,"progress":1}}}}{end}{end}'
    answer = f'id: c{end}event: message{end}data: {{"jsonrpc":"2.0","id":4,"result":{{}}}}{end}{end}'
    body = (priming + progress + answer).encode()
    split = len(priming) + 2  # inside the progress notification's id line
    plan = Plan(200, [("content-type", "text/event-stream")], [(0.1, body[:split]), (0.5, body[split:])])
    out = rewritten(plan, 9, 9, stream=True, ids={"a": "a~2", "b": "b~2", "c": "c~2"})
    assert out is not None
    assert (
        out.body
        == (
            priming.replace("id: a", "id: a~2")
            + progress.replace("id:b", "id: b~2").replace('"progressToken":4', '"progressToken":9')
            + answer.replace("id: c", "id: c~2").replace('"id":4', '"id":9')
        ).encode()
    )
    assert [t for t, _ in out.writes] == [0.1, 0.5]
    assert event_ids(out) == ["a~2", "b~2", "c~2"]
    assert event_ids(plan) == ["a", "b", "c"]  # the recording's plan is left as it was


async def test_a_get_stream_resumed_after_its_last_event_id_goes_on_and_stays_open(
    upstream: str, tmp_path: Path
) -> None:
    cassette = tmp_path / "mcp.toml"
    live = await _recorded(upstream, cassette, _touched)
    assert live == {"touched": {"result": "touched"}, "notified": ["notifications/resources/list_changed"] * 2}
    async with aserve(cassette) as mock, httpx.AsyncClient(base_url=mock.url, headers=_HEADERS) as client:
        session = await _opened(client, cassette)
        async with client.stream("GET", "/mcp", headers=session) as stream:
            decoder, first = SSEDecoder(), []
            async for piece in stream.aiter_bytes():
                if first := [e for e in decoder.feed(piece) if e.data]:
                    break
        # Cut after its first notification: the client reconnects with its id, and gets the second.
        after = {**session, "last-event-id": first[0].id}
        async with client.stream("GET", "/mcp", headers=after) as resumed:
            pieces = resumed.aiter_bytes()
            decoder, rest = SSEDecoder(), []
            async for piece in pieces:
                if rest := [e for e in decoder.feed(piece) if e.data]:
                    break
            assert [json.loads(e.data)["method"] for e in rest] == ["notifications/resources/list_changed"]
            assert rest[0].id != first[0].id
            left = asyncio.ensure_future(_rest(pieces))
            done, _ = await asyncio.wait([left], timeout=0.5)
            assert not done  # held open, as the GET stream it resumes
            await asyncio.wait_for(mock.control.idle(), 30)  # and no request in flight
            assert (await client.delete("/mcp", headers=session)).status_code == 200
            with pytest.raises(httpx.RemoteProtocolError):
                await asyncio.wait_for(left, 30)
        journal = list(mock.control.journal)
    [opened] = [e for e in _gets(journal) if isinstance(e, Matched)]
    [again] = [e for e in _gets(journal) if isinstance(e, Answered)]
    assert again.what == f"the stream of request {opened.request} resumed after event id {first[0].id!r}"


async def test_a_reset_ends_the_get_streams_of_the_sessions_it_forgets(recorded: tuple[Path, dict[str, Any]]) -> None:
    cassette, _ = recorded
    async with aserve(cassette) as mock, httpx.AsyncClient(base_url=mock.url, headers=_HEADERS) as client:
        session = await _opened(client, cassette)
        async with client.stream("GET", "/mcp", headers=session) as stream:
            rest = asyncio.ensure_future(_rest(stream.aiter_bytes()))
            done, _ = await asyncio.wait([rest], timeout=0.5)
            assert not done  # held open
            mock.control.reset(protocols=False)  # between the tests of a shared scope: the session lasts
            done, _ = await asyncio.wait([rest], timeout=0.5)
            assert not done
            mock.control.reset()  # the session is forgotten: its GET stream closes, as on its DELETE
            with pytest.raises(httpx.RemoteProtocolError):
                await asyncio.wait_for(rest, 30)
