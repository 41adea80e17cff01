"""MCP's sessions on two replicas sharing a real `redis-server`: one server to the client, whichever answers.

A session recorded from a real MCP server with an event store (each event
an id, as in test_mcp_resume.py), through `sse-tape record`, is
replayed by two `MockServer`s, each with a `RedisStore` of its own on one
Redis: a session initialized through one goes on through the other (the
official SDK client, its requests dealt to them in turn), a `DELETE` through
one ends it on both (the other's `GET` stream held open closes), a stream
one answered resumes on the other (`Last-Event-ID`), and a reset through one
ends the sessions on both unless it keeps what lasts.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import processes
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from redis_server import redis_server
from sdk_servers import Events, mcp_tools, on_loopback
from test_workers import connected, served

from sse_tape import Cassette, MockServer
from sse_tape.journal import Answered, Matched
from sse_tape.sse import ServerSentEvent, SSEDecoder
from sse_tape.state_redis import RedisStore

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
LISTED = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


async def session(url: str, http: httpx2.AsyncClient | None = None) -> dict[str, Any]:
    """A whole client session through `url`: initialize, `add`, `count` with progress, then closed (`DELETE`)."""
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async with (
        streamable_http_client(url, http_client=http) as (read, write, *_),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        added = await client.call_tool("add", {"a": 2, "b": 3})
        counted = await client.call_tool("count", {"n": 4}, progress_callback=on_progress)
    return {"added": added.structured_content, "counted": counted.structured_content, "progress": progress}


def events(body: bytes) -> list[ServerSentEvent]:
    """A stream's events, the priming one (an id, no data) among them."""
    return [e for e in SSEDecoder().feed(body) if e.id or e.data]


def count(id: int) -> dict[str, Any]:
    params = {"name": "count", "arguments": {"n": 4}, "_meta": {"progressToken": id}}
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}


async def opened(client: httpx.AsyncClient, cassette: Path) -> dict[str, str]:
    """A new session's headers, after `initialize` (as the recorded client asked) and `notifications/initialized`."""
    answer = await client.post("/mcp", content=Cassette.load(cassette).interactions[0].request.body)
    headers = {"mcp-session-id": answer.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    notified = await client.post(
        "/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
    )
    assert notified.status_code == 202
    return headers


async def rest_of(pieces: AsyncIterator[bytes]) -> bytes:
    return b"".join([piece async for piece in pieces])


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A session (see `session`) recorded from a real MCP server with an event store: its cassette, and what its
    client got."""
    cassette = tmp_path_factory.mktemp("mcp") / "mcp.toml"
    app = mcp_tools().streamable_http_app(event_store=Events(), retry_interval=50)
    with on_loopback(app, "the MCP server") as upstream, processes.recording_proxy(upstream, cassette) as proxy:
        live = asyncio.run(asyncio.wait_for(session(f"{proxy}/mcp"), 30))
    assert live == {"added": {"result": 5}, "counted": {"result": "counted 4"}, "progress": [1.0, 2.0, 3.0, 4.0]}
    return cassette, live


@contextlib.asynccontextmanager
async def replicas(url: str, cassette: Path) -> AsyncIterator[tuple[MockServer, MockServer]]:
    """Two servers over `cassette`, each with a store of its own on the Redis at `url` (emptied first)."""
    RedisStore(url).redis.flushdb()
    one = MockServer([Cassette.load(cassette)], state=RedisStore(url))
    other = MockServer([Cassette.load(cassette)], state=RedisStore(url))
    async with one, other:
        yield one, other


@contextlib.asynccontextmanager
async def clients(url: str, cassette: Path) -> AsyncIterator[tuple[MockServer, httpx.AsyncClient, httpx.AsyncClient]]:
    """The two `replicas`, a client of the first and one of the other speaking MCP's HTTP: the other replica and
    both clients."""
    async with (
        replicas(url, cassette) as (one, other),
        httpx.AsyncClient(base_url=one.url, headers=HEADERS) as first,
        httpx.AsyncClient(base_url=other.url, headers=HEADERS) as second,
    ):
        yield other, first, second


class _InTurn(httpx2.AsyncBaseTransport):
    """Deals each request to the next of `urls` in turn, as a round-robin balancer in front of them would."""

    def __init__(self, urls: list[str]) -> None:
        self._next = itertools.cycle([httpx2.URL(u) for u in urls])
        self._transport = httpx2.AsyncHTTPTransport()
        self.dealt: list[tuple[str, str]] = []  # each request's method, and the port it went to

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        to = next(self._next)
        request.url = request.url.copy_with(host=to.host, port=to.port)
        request.headers["host"] = f"{to.host}:{to.port}"
        self.dealt.append((request.method, str(to.port)))
        return await self._transport.handle_async_request(request)

    async def aclose(self) -> None:
        await self._transport.aclose()


def _kinds(journal: Any, method: str) -> list[Matched | Answered]:
    return [e for e in journal if isinstance(e, (Matched, Answered)) and e.method == method]


async def test_the_sdk_client_gets_one_server_from_two_replicas_answering_in_turn(
    redis_url: str, recorded: tuple[Path, dict[str, Any]]
) -> None:
    cassette, live = recorded
    async with replicas(redis_url, cassette) as (one, other):
        dealer = _InTurn([one.url, other.url])
        async with httpx2.AsyncClient(transport=dealer, timeout=httpx2.Timeout(30, read=300)) as http:
            assert await asyncio.wait_for(session(f"{one.url}/mcp", http), 30) == live
        # Both answered requests of the session, and the GET stream one held open closed with it (the client's
        # DELETE, whichever got it): nothing of the session is left in either.
        ports = {port for _, port in dealer.dealt}
        assert ports == {str(one.port), str(other.port)}
        assert {"GET", "DELETE"} <= {method for method, _ in dealer.dealt}
        for server in (one, other):
            assert not any(e.status == 404 for e in _kinds(server.control.journal, "POST"))
            assert server.control.snapshot().kept == {}
            await asyncio.wait_for(server.control.idle(), 30)


async def test_a_delete_through_one_replica_ends_the_session_on_both_and_closes_the_others_get_stream(
    redis_url: str, recorded: tuple[Path, dict[str, Any]]
) -> None:
    cassette, _ = recorded
    async with clients(redis_url, cassette) as (_, first, second):
        headers = await opened(first, cassette)
        assert (await second.post("/mcp", json=LISTED, headers=headers)).status_code == 200  # known on the other
        async with first.stream("GET", "/mcp", headers=headers) as stream:
            assert stream.status_code == 200
            rest = asyncio.ensure_future(rest_of(stream.aiter_bytes()))
            await asyncio.sleep(0.2)
            assert not rest.done()  # held open
            assert (await second.delete("/mcp", headers=headers)).status_code == 200
            with pytest.raises(httpx.RemoteProtocolError):  # ended on the other: so is this one's GET stream
                await asyncio.wait_for(rest, 30)
        for client in (first, second):
            assert (await client.post("/mcp", json=LISTED, headers=headers)).status_code == 404
        assert (await first.delete("/mcp", headers=headers)).status_code == 404


async def test_a_stream_one_replica_answered_resumes_on_the_other_and_its_ids_stay_new_in_the_session(
    redis_url: str, recorded: tuple[Path, dict[str, Any]]
) -> None:
    cassette, _ = recorded
    [interaction] = [i for i in Cassette.load(cassette) if b'"count"' in i.request.body]
    ids = [e.id for e in events(interaction.response.body)]
    async with clients(redis_url, cassette) as (other, first, second):
        headers = await opened(first, cassette)
        answered = await first.post("/mcp", json=count(11), headers=headers)
        again = await second.post("/mcp", json=count(12), headers=headers)  # the same recording, on the other
        assert [e.id for e in events(answered.content)] == ids
        assert [e.id for e in events(again.content)] == [f"{i}~2" for i in ids]
        for answer, id, client in ((answered, 11, second), (again, 12, first)):  # each on the replica that did not
            after = events(answer.content)[2].id
            resumed = await client.get("/mcp", headers={**headers, "last-event-id": after})
            assert resumed.status_code == 200
            assert [e.data for e in events(resumed.content)] == [e.data for e in events(answer.content)[3:]]
            assert f'"id":{id}' in events(resumed.content)[-1].data.replace(" ", "")
        [resumed] = [e for e in _kinds(other.control.journal, "GET") if isinstance(e, Answered)]
        assert resumed.what.endswith(f"resumed after event id {events(answered.content)[2].id!r}")


async def test_a_reset_through_one_replica_ends_the_sessions_on_both_unless_it_keeps_what_lasts(
    redis_url: str, recorded: tuple[Path, dict[str, Any]]
) -> None:
    cassette, _ = recorded
    async with clients(redis_url, cassette) as (other, first, second):
        headers = await opened(first, cassette)
        other.control.reset(protocols=False)  # for the clients already there: their sessions go on
        assert (await first.post("/mcp", json=LISTED, headers=headers)).status_code == 200
        async with first.stream("GET", "/mcp", headers=headers) as stream:
            rest = asyncio.ensure_future(rest_of(stream.aiter_bytes()))
            await asyncio.sleep(0.2)
            assert not rest.done()
            other.control.reset()  # a whole reset: the session ends, and its GET stream held on the other closes
            with pytest.raises(httpx.RemoteProtocolError):
                await asyncio.wait_for(rest, 30)
        assert (await second.post("/mcp", json=LISTED, headers=headers)).status_code == 404


def test_two_workers_answer_a_session_as_one_server(recorded: tuple[Path, dict[str, Any]]) -> None:
    # `serve --workers 2`, without Redis: their parent holds the sessions for both.
    cassette, _ = recorded
    with served([str(cassette)]) as (url, (one, other)), connected(url, one) as first:
        answer = first.post("/mcp", content=Cassette.load(cassette).interactions[0].request.body, headers=HEADERS)
        headers = {**HEADERS, "mcp-session-id": answer.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        with connected(url, other) as second:
            assert second.post("/mcp", json=initialized, headers=headers).status_code == 202
            assert second.post("/mcp", json=LISTED, headers=headers).status_code == 200
            with first.stream("GET", "/mcp", headers=headers) as stream:
                assert stream.status_code == 200
                assert second.delete("/mcp", headers=headers).status_code == 200
                with pytest.raises(httpx.RemoteProtocolError):  # closed by its worker, the session ended
                    stream.read()
            assert second.post("/mcp", json=LISTED, headers=headers).status_code == 404
