"""MCP's sessions on two replicas sharing a real `redis-server`: one server to the client, whichever answers.

A session recorded from a real MCP server with an event store (each event
an id, as in test_mcp_resume.py), through `sse-tape record`, is
replayed by two `MockServer`s, each with a `RedisStore` of its own on one
Redis: a session initialized through one goes on through the other (the
official SDK client, its requests dealt to them in turn), a `DELETE` through
one ends it on both (the other's `GET` stream held open closes), a stream
one answered resumes on the other (`Last-Event-ID`), and a reset through one
ends the sessions on both unless it keeps what lasts. Where the order of two
replicas' steps matters (one answering a session's request while the other
answers another, or ends the session), a proxy between one replica and Redis
(`Between`) holds that replica's write until the other has answered.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import itertools
import os
import socket
import tempfile
import threading
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
from waits import until

from sse_tape import Cassette, MockServer
from sse_tape.dialects.mcp import session as session_module
from sse_tape.journal import Answered, Matched
from sse_tape.server import run_in_thread
from sse_tape.sse import ServerSentEvent, SSEDecoder
from sse_tape.state_redis import RedisStore
from sse_tape.state_workers import WorkersStore

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


class Between:
    """A TCP proxy on loopback between one replica's store and the Redis at `url`: it counts the bytes Redis
    sends and the replica's looks, and, once `hold()` is called, holds that replica's next write to a hash (`HSET`: what a responder
    keeps; or the command `hold` names) until `release()`, so that another replica's request comes between that
    replica's reads and its write."""

    WRITE = b"HSET"

    def __init__(self, url: str) -> None:
        host, port = url.split("//")[1].split("/")[0].split(":")
        self._to = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self._listener.getsockname()[1]}/0"
        self.read = 0
        """Bytes Redis sent the replica."""
        self.looks = 0
        """How many of the replica's writes asked whether something is kept (`HEXISTS`), as a look does."""
        self._armed = threading.Event()
        self._command = b""
        self.holding = threading.Event()
        """Set while it holds a write."""
        self._released = threading.Event()
        self._sockets: list[socket.socket] = [self._listener]
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def hold(self, command: bytes = WRITE) -> None:
        self._command = b"$%d\r\n%s\r\n" % (len(command), command)  # as the command's name goes in Redis's protocol
        self._released.clear()
        self._armed.set()

    def release(self) -> None:
        self._released.set()

    def close(self) -> None:
        self._released.set()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(30)

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self._listener.accept()
                server = socket.create_connection(self._to)
                self._sockets += [client, server]
                for args in ((client, server, True), (server, client, False)):
                    thread = threading.Thread(target=self._pump, args=args, daemon=True)
                    self._threads.append(thread)
                    thread.start()

    def _pump(self, source: socket.socket, to: socket.socket, writes: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(1 << 16):
                if writes and self._armed.is_set() and self._command in data:
                    self._armed.clear()
                    self.holding.set()
                    self._released.wait(60)
                    self.holding.clear()
                if not writes:
                    self.read += len(data)
                elif b"$7\r\nHEXISTS\r\n" in data:
                    self.looks += 1
                to.sendall(data)
            to.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def threaded_replicas(url: str, cassette: Path) -> Iterator[tuple[Between, httpx.Client, httpx.Client]]:
    """Two servers over `cassette` on the Redis at `url` (emptied first), each in a thread of its own, the first
    through a `Between`: it, and a client of each speaking MCP's HTTP."""
    RedisStore(url).redis.flushdb()
    between = Between(url)
    try:
        with (
            run_in_thread(MockServer([Cassette.load(cassette)], state=RedisStore(between.url))) as one,
            run_in_thread(MockServer([Cassette.load(cassette)], state=RedisStore(url))) as other,
            httpx.Client(base_url=one.url, headers=HEADERS, timeout=30) as first,
            httpx.Client(base_url=other.url, headers=HEADERS, timeout=30) as second,
        ):
            yield between, first, second
    finally:
        between.close()


def opened_in(client: httpx.Client, cassette: Path) -> dict[str, str]:
    """`opened`, for a client of a server in a thread."""
    answer = client.post("/mcp", content=Cassette.load(cassette).interactions[0].request.body)
    headers = {"mcp-session-id": answer.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    notified = client.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    assert notified.status_code == 202
    return headers


def calls(redis: Any, command: str) -> int:
    """How many times Redis has run `command` since it started (`INFO commandstats`)."""
    found: dict[str, Any] = redis.info("commandstats").get(f"cmdstat_{command}", {})
    return int(found.get("calls", 0))


def add(id: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": id,
        "method": "tools/call",
        "params": {"name": "add", "arguments": {"a": 2, "b": 3}},
    }


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


def test_a_sessions_request_reads_only_its_session_being_open_however_many_streams_it_kept(
    redis_url: str, recorded: tuple[Path, dict[str, Any]]
) -> None:
    cassette, _ = recorded
    with threaded_replicas(redis_url, cassette) as (between, first, _):
        headers = opened_in(first, cassette)

        def read_by_a_request() -> int:
            before = between.read
            assert first.post("/mcp", json=LISTED, headers=headers).status_code == 200
            return between.read - before

        alone = read_by_a_request()
        for n in range(10):  # ten streams kept, each of six events with ids
            assert first.post("/mcp", json=count(20 + n), headers=headers).status_code == 200
        redis = RedisStore(redis_url).redis
        [name] = redis.keys("sse-tape:kept:mcp*")
        sizes = [redis.hstrlen(name, field) for field in redis.hkeys(name)]
        redis.close()
        # Each stream (the initialize's, the listing's, ten counts) under a key of its own, none holding another's:
        assert sum(size > 1000 for size in sizes) == 12
        assert max(sizes) < 2 * min(size for size in sizes if size > 1000)
        # and a request of the session reads none of them (a round trip's small answers may land in either).
        assert read_by_a_request() < alone + 200


def test_two_streams_of_one_session_answered_at_once_by_two_replicas_both_resume(
    redis_url: str, recorded: tuple[Path, dict[str, Any]]
) -> None:
    cassette, _ = recorded
    with (
        threaded_replicas(redis_url, cassette) as (between, first, second),
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        headers = opened_in(first, cassette)
        between.hold()  # the first replica's `count` has read the session, and waits to keep its stream
        counted = pool.submit(first.post, "/mcp", json=count(31), headers=headers)
        until(between.holding.is_set, "the first replica's write")
        added = second.post("/mcp", json=add(32), headers=headers)  # the other's stream, kept meanwhile
        between.release()
        for answer, client in ((counted.result(30), second), (added, first)):
            after = events(answer.content)[1].id
            resumed = client.get("/mcp", headers={**headers, "last-event-id": after})
            assert resumed.status_code == 200
            assert [e.data for e in events(resumed.content)] == [e.data for e in events(answer.content)[2:]]


def test_a_stream_kept_as_another_replica_ends_the_session_does_not_bring_it_back(
    redis_url: str, recorded: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    cassette, _ = recorded
    with (
        threaded_replicas(redis_url, cassette) as (between, first, second),
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        headers = opened_in(first, cassette)
        between.hold()
        counted = pool.submit(first.post, "/mcp", json=count(41), headers=headers)
        until(between.holding.is_set, "the first replica's write")
        assert second.delete("/mcp", headers=headers).status_code == 200  # ended, as the first keeps its stream
        between.release()
        assert counted.result(30).status_code == 200
        for client in (first, second):
            assert client.post("/mcp", json=LISTED, headers=headers).status_code == 404
        # What that stream left of the session goes as a new one opens past the things kept (here, one).
        monkeypatch.setattr(session_module, "MOST_SESSIONS", 1)
        new = opened_in(second, cassette)["mcp-session-id"]
        redis = RedisStore(redis_url).redis
        [name] = redis.keys("sse-tape:kept:mcp*")
        kept = [key.decode() for key in redis.hkeys(name)]
        assert new in kept
        assert all(key.startswith(new) for key in kept)
        redis.close()


@pytest.mark.parametrize(
    ("held", "renamed"),
    [(b"HSET", 1), (b"EVALSHA", 0)],  # (the claim is a script)
    ids=["held-as-it-keeps-its-stream", "held-as-it-claims-its-ids"],
)
def test_one_recording_answered_in_one_session_at_once_by_two_replicas_gives_each_stream_ids_of_its_own(
    redis_url: str, recorded: tuple[Path, dict[str, Any]], held: bytes, renamed: int
) -> None:
    # The first replica found the recording's ids new in the session: held as it keeps its stream (it claimed the
    # ids), or before it claims them (the other claims them first).
    cassette, _ = recorded
    with (
        threaded_replicas(redis_url, cassette) as (between, first, second),
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        headers = opened_in(first, cassette)
        between.hold(held)
        counted = pool.submit(first.post, "/mcp", json=count(51), headers=headers)
        until(between.holding.is_set, "the first replica's write")
        again = second.post("/mcp", json=count(52), headers=headers)  # the same recording, on the other
        between.release()
        answers = (counted.result(30), again)
        ids = [[e.id for e in events(answer.content)] for answer in answers]
        assert ids[renamed] == [f"{i}~2" for i in ids[1 - renamed]]
        for answer, client in zip(answers, (second, first), strict=True):
            resumed = client.get("/mcp", headers={**headers, "last-event-id": events(answer.content)[1].id})
            assert [e.data for e in events(resumed.content)] == [e.data for e in events(answer.content)[2:]]


def test_a_reset_that_keeps_the_sessions_through_one_replica_leaves_the_others_get_stream_open(
    redis_url: str, recorded: tuple[Path, dict[str, Any]]
) -> None:
    # The reset keeps the sessions in the step that forgets the rest: it writes no hash (where a reset that emptied
    # the state, then wrote them back, would wait for the write held here), and the other replica, holding a GET
    # stream open, never finds its session gone.
    cassette, _ = recorded
    RedisStore(redis_url).redis.flushdb()
    resetting, holding = Between(redis_url), Between(redis_url)
    with (
        contextlib.closing(resetting),
        contextlib.closing(holding),
        run_in_thread(MockServer([Cassette.load(cassette)], state=RedisStore(resetting.url))) as one,
        run_in_thread(MockServer([Cassette.load(cassette)], state=RedisStore(holding.url))) as other,
        httpx.Client(base_url=other.url, headers=HEADERS, timeout=30) as client,
        concurrent.futures.ThreadPoolExecutor(2) as pool,
    ):
        headers = opened_in(client, cassette)
        stream = client.send(client.build_request("GET", "/mcp", headers=headers), stream=True)
        assert stream.status_code == 200
        rest = pool.submit(stream.read)
        looks = holding.looks
        until(lambda: holding.looks > looks, "a look")  # its watcher looks, and finds the session open
        resetting.hold()
        reset = pool.submit(one.control.reset, protocols=False)
        reset.result(30)
        assert not resetting.holding.is_set()  # no write to a hash: the sessions stayed where they were
        looks = holding.looks
        until(lambda: holding.looks > looks + 1 or rest.done(), "two looks after, or the stream's end")
        assert not rest.done()  # still open
        assert client.delete("/mcp", headers=headers).status_code == 200  # its session ends: it closes
        with pytest.raises(httpx.RemoteProtocolError):
            rest.result(30)
        stream.close()


def test_forked_workers_setting_one_item_at_once_leave_it_to_one_of_them() -> None:
    # As two workers claim the same stream's event ids (`setdefault`): each item is the one worker's that set it,
    # the other reads that worker's.
    store, items = WorkersStore(2), [f"session {n}" for n in range(500)]

    def worker(claimed: str, n: int) -> int:  # sets each item, and writes down those it set
        store.in_worker(n)
        kept = store.kept("mcp:0")
        won = [item for item in items if kept.setdefault(item, f"worker {n}") == f"worker {n}"]
        Path(claimed, str(n)).write_text("\n".join(won))
        return 0

    with tempfile.TemporaryDirectory() as claimed:
        pids = [processes.fork(functools.partial(worker, claimed, n)) for n in range(2)]
        failures: list[str] = []
        store.hold(failures.append)
        assert [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids] == [0, 0]
        won = [Path(claimed, str(n)).read_text().splitlines() for n in range(2)]
    assert sorted(won[0] + won[1]) == sorted(items)  # each set by one of them, the other read it
    kept = store.kept("mcp:0")
    assert all(kept[item] == f"worker {n}" for n in range(2) for item in won[n])
    assert failures == []


def test_a_session_that_ends_deletes_what_it_kept_in_one_command_however_many_streams(
    redis_url: str, recorded: tuple[Path, dict[str, Any]]
) -> None:
    cassette, _ = recorded
    with threaded_replicas(redis_url, cassette) as (_, first, second):
        headers = opened_in(first, cassette)
        for n in range(10):  # ten streams kept, each of six events with ids
            assert first.post("/mcp", json=count(60 + n), headers=headers).status_code == 200
        redis = RedisStore(redis_url).redis
        [name] = redis.keys("sse-tape:kept:mcp*")
        assert redis.hlen(name) > 60
        deletions = calls(redis, "hdel")
        assert second.delete("/mcp", headers=headers).status_code == 200
        assert calls(redis, "hdel") == deletions + 1  # the session and all it kept, in one
        assert redis.hlen(name) == 0
        redis.close()
        assert first.post("/mcp", json=LISTED, headers=headers).status_code == 404


def test_a_reset_that_keeps_the_sessions_reads_none_of_them_however_many_streams(
    redis_url: str, recorded: tuple[Path, dict[str, Any]]
) -> None:
    cassette, _ = recorded
    RedisStore(redis_url).redis.flushdb()
    with (
        run_in_thread(MockServer([Cassette.load(cassette)], state=RedisStore(redis_url))) as server,
        httpx.Client(base_url=server.url, headers=HEADERS, timeout=30) as client,
    ):
        headers = opened_in(client, cassette)
        answers = [client.post("/mcp", json=count(70 + n), headers=headers) for n in range(10)]
        redis = RedisStore(redis_url).redis
        reads = calls(redis, "hget"), calls(redis, "hgetall")
        server.control.reset(protocols=False)
        assert (calls(redis, "hget"), calls(redis, "hgetall")) == reads
        redis.close()
        for answer in answers:  # each stream kept through it
            resumed = client.get("/mcp", headers={**headers, "last-event-id": events(answer.content)[1].id})
            assert [e.data for e in events(resumed.content)] == [e.data for e in events(answer.content)[2:]]


def test_an_item_found_kept_as_a_replica_sets_it_is_read_in_the_same_step_though_another_deletes_it_at_once(
    redis_url: str,
) -> None:
    # As a replica claims a stream's first event id (`setdefault`) that another claimed, and another server ends
    # the session: the claim reads what it found, never a KeyError. Were the read a step of its own (`HGET`), the
    # proxy would hold it until the item is gone.
    RedisStore(redis_url).redis.flushdb()
    between = Between(redis_url)
    with contextlib.closing(between), concurrent.futures.ThreadPoolExecutor(1) as pool:
        mine, other = RedisStore(between.url).kept("mcp:0"), RedisStore(redis_url).kept("mcp:0")
        other["s 1"] = "the other's"
        between.hold(b"HGET")
        claimed = pool.submit(mine.setdefault, "s 1", "mine")
        until(lambda: between.holding.is_set() or claimed.done(), "the claim, or a read after it")
        del other["s 1"]
        between.release()
        assert claimed.result(30) == "the other's"
        assert mine.setdefault("s 1", "mine") == "mine"  # none kept: the one given, kept
        assert other["s 1"] == "mine"
