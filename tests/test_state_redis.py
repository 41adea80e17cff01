"""The replay state in Redis (`state_redis.RedisStore`): two servers on one real `redis-server` answer as one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import processes
import pytest
from clients import openai_client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from redis_server import redis_server
from sdk_servers import mcp_tools, on_loopback
from waits import until

from sse_tape import Cassette, Chunk, ConfigError, Interaction, MockServer, Request, Response, ServeOptions, StateError
from sse_tape.journal import Journal, Received
from sse_tape.server import run_in_thread
from sse_tape.state import MemoryStore, ReplayStore
from sse_tape.state_redis import RedisStore

SSE = (("content-type", "text/event-stream"),)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture
def url(redis_url: str) -> str:
    """The module's Redis, emptied for each test."""
    RedisStore(redis_url).redis.flushdb()
    return redis_url


def numbered(count: int, path: str = "/stream") -> Cassette:
    """A cassette of `count` recordings of one request, the nth answering `data: n`."""
    request = Request("POST", path, body=b"{}")
    return Cassette(
        [Interaction(request, Response(200, SSE, (Chunk(0.0, f"data: {n}\n\n".encode()),))) for n in range(count)]
    )


@contextlib.contextmanager
def replicas(url: str, cassettes: list[Cassette], options: ServeOptions, count: int = 2) -> Iterator[list[MockServer]]:
    """`count` servers over the same cassettes, each with a store of its own on the Redis at `url`."""
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(run_in_thread(MockServer(cassettes, options=options, state=RedisStore(url))))
            for _ in range(count)
        ]


def test_a_fault_for_one_request_fires_once_across_both_servers(url: str) -> None:
    options = ServeOptions.build(faults=["status:429,times=1"], pace="instant")
    with replicas(url, [numbered(1)], options) as (one, other):
        statuses = [httpx.post(s.url + "/stream", content=b"{}").status_code for s in (one, other, one, other)]
        assert statuses == [429, 200, 200, 200]
        assert one.control.snapshot().injected == other.control.snapshot().injected == {"status:429,times=1": 1}


def test_a_recordings_turns_advance_across_both_servers_and_a_reset_through_one_reaches_the_other(url: str) -> None:
    with replicas(url, [numbered(3)], ServeOptions.build(pace="instant")) as (one, other):

        def bodies(*servers: MockServer) -> list[bytes]:
            return [httpx.post(s.url + "/stream", content=b"{}").content for s in servers]

        assert bodies(one, other, one, other) == [b"data: 0\n\n", b"data: 1\n\n", b"data: 2\n\n", b"data: 0\n\n"]
        seen = other.control.snapshot()
        assert (seen.requests, len(seen.received), len(seen.played)) == (4, 4, 4)
        assert seen.unplayed == ()
        one.control.reset()
        assert bodies(other) == [b"data: 0\n\n"]
        assert one.control.snapshot().requests == 1


def test_faults_and_the_seed_set_through_one_servers_control_reach_the_other(url: str) -> None:
    with replicas(url, [numbered(1)], ServeOptions.build(pace="instant")) as (one, other):
        one.control.set_faults(["status:503,times=2"])
        one.control.set_seed(7)
        assert (other.control.snapshot().faults[0].spec, other.control.snapshot().seed) == ("status:503,times=2", 7)
        statuses = [httpx.post(s.url + "/stream", content=b"{}").status_code for s in (other, one, other)]
        assert statuses == [503, 503, 200]  # one budget of two, spent across both
        # Over HTTP too, and set again: the counts start over for both.
        control = {"faults": ["status:500,times=1"]}
        assert httpx.post(other.url + "/__sse_tape__/faults", json=control).status_code == 200
        statuses = [httpx.post(s.url + "/stream", content=b"{}").status_code for s in (one, other)]
        assert statuses == [500, 200]


def test_a_server_that_starts_sets_its_faults_for_all(url: str) -> None:
    with replicas(url, [numbered(1)], ServeOptions.build(pace="instant"), count=1) as (one,):
        options = ServeOptions.build(pace="instant", faults=["status:429"], seed=3)
        with run_in_thread(MockServer([numbered(1)], options=options, state=RedisStore(url))):
            assert httpx.post(one.url + "/stream", content=b"{}").status_code == 429
            assert one.control.snapshot().seed == 3


def test_the_journal_is_one_whichever_server_is_asked_and_a_reset_empties_it(url: str) -> None:
    options = ServeOptions.build(pace="instant", faults=["status:429,times=1"])
    with replicas(url, [numbered(1)], options) as (one, other):
        assert httpx.post(one.url + "/stream", content=b"{}").status_code == 429
        assert httpx.post(other.url + "/nowhere", content=b"{}").status_code == 404
        wanted = [("received", 1), ("fault", 1), ("received", 2), ("missed", 2)]
        for server in (one, other):

            def steps(server: MockServer = server) -> list[tuple[str, int]]:
                entries = httpx.get(server.url + "/__sse_tape__/journal").json()["entries"]
                return [(e["type"], e["request"]) for e in entries if e["type"] in ("received", "fault", "missed")]

            # Each server shares its entries a batch at a time: the other's come a moment later.
            until(lambda steps=steps: steps() == wanted, "the journal of both servers")
            injections = httpx.get(server.url + "/__sse_tape__/faults").json()["injections"]
            assert [i["fault"] for i in injections] == ["status:429,times=1"]
        httpx.post(other.url + "/__sse_tape__/reset", json={})
        assert httpx.get(one.url + "/__sse_tape__/journal").json()["entries"] == []


def test_a_batch_of_journal_entries_made_before_a_reset_elsewhere_does_not_land_after_it(
    url: str, request: pytest.FixtureRequest
) -> None:
    # A server shares its journal a batch at a time: one made before another server's reset comes after it.
    one, other = RedisStore(url), RedisStore(url)
    for store in (one, other):
        request.addfinalizer(store.redis.close)
    one.next_request()
    before = {"type": "received", "request": 1, "time": time.time()}
    other.reset()
    one.add_entries([before])  # not heard of the reset yet: Redis says it
    assert other.entries(None) == []
    one.next_request()  # heard of it, with its next request's number
    after = {"type": "received", "request": 1, "time": time.time()}
    one.add_entries([before, after])
    assert other.entries(None) == [after]
    one.reset()  # its own reset: what it makes next lands
    later = {"type": "received", "request": 1, "time": time.time()}
    one.add_entries([later])
    assert other.entries(None) == [later]


def test_each_recording_plays_once_across_both_servers_without_repeats(url: str) -> None:
    options = ServeOptions.build(pace="instant", allow_repeats=False)
    with replicas(url, [numbered(2)], options) as (one, other):
        answers = [httpx.post(s.url + "/stream", content=b"{}") for s in (one, other, one)]
        assert [a.content for a in answers[:2]] == [b"data: 0\n\n", b"data: 1\n\n"]
        assert answers[2].status_code == 404  # both played already, one on each server


@pytest.mark.parametrize("count", [1, 2], ids=["alone", "two-replicas"])
async def test_under_concurrent_requests_each_recording_plays_once_without_repeats(url: str, count: int) -> None:
    recordings = 30
    options = ServeOptions.build(pace="instant", allow_repeats=False)
    with replicas(url, [numbered(recordings)], options, count=count) as servers:
        limits = httpx.Limits(max_connections=2 * recordings)
        async with httpx.AsyncClient(limits=limits, timeout=60) as client:
            # Twice as many requests as recordings, all at once, shared out among the servers.
            answers = await asyncio.gather(
                *(client.post(servers[n % count].url + "/stream", content=b"{}") for n in range(2 * recordings))
            )
        played = sorted(a.text for a in answers if a.status_code == 200)
        assert played == sorted(f"data: {n}\n\n" for n in range(recordings))  # each one once: none twice
        assert [a.status_code for a in answers].count(404) == recordings
        seen = servers[0].control.snapshot()
        assert (seen.unplayed, sorted(seen.plays.values())) == ((), [1] * recordings)


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_a_claim_takes_the_first_recording_never_played_and_plays_it(kind: str, redis_url: str) -> None:
    store: ReplayStore = MemoryStore() if kind == "memory" else RedisStore(redis_url, prefix="claims:")
    store.reset()
    store.played("b")
    store.add_received(Request("POST", "/stream", body=b"{}"))
    assert store.claim(["b", "c", "a"]) == "c"  # "b" has played: the first after it that has not
    if isinstance(store, RedisStore):
        store.redis.script_flush()  # as a Redis that restarted has forgotten the scripts: loaded again
    assert store.claim(["b", "c", "a"]) == "a"
    assert store.claim(["b", "c", "a"]) is None  # every one has: nothing noted
    assert store.claim([]) is None
    state = store.snapshot()
    assert (state.answered, dict(state.plays)) == (("b", "c", "a"), {"b": 1, "c": 1, "a": 1})
    assert state.received == (Request("POST", "/stream", body=b"{}"),)  # sent with the claim


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_a_reset_leaves_what_the_responders_named_keep_and_forgets_the_rest(kind: str, redis_url: str) -> None:
    store: ReplayStore = MemoryStore() if kind == "memory" else RedisStore(redis_url, prefix="keeping:")
    store.reset()
    store.kept("mcp:0").update({"session": {"open": True}, "session 1": "1"})
    store.kept("responses:0")["resp_1"] = {"status": "in_progress"}
    store.played("a")
    store.reset(keep=["mcp:0", "never kept"])
    assert dict(store.kept("mcp:0").items()) == {"session": {"open": True}, "session 1": "1"}
    assert not store.kept("responses:0")
    state = store.snapshot()
    assert ({k: set(v) for k, v in state.kept.items() if v}, state.plays) == ({"mcp:0": {"session", "session 1"}}, {})
    store.reset()  # and the next reset that keeps nothing forgets it too
    assert not store.kept("mcp:0")
    if isinstance(store, RedisStore):
        assert store.redis.keys("keeping:*") == [b"keeping:generation"]


def test_the_counts_of_faults_asked_for_and_applied_are_kept_for_the_last_distinct_ones(url: str) -> None:
    store = RedisStore(url, keep=3)
    for spec in ["a", "b", "c", "a", "d"]:  # "b" is the one counted longest ago when "d" comes
        store.count(spec)
        store.note_injected(spec)
    state = store.snapshot()
    assert (state.counts, state.injected) == ({"a": 2, "c": 1, "d": 1}, {"a": 2, "c": 1, "d": 1})
    assert store.count("b") == 0  # forgotten: it starts over
    for n in range(1_000):  # a flood of distinct faults in request headers leaves Redis as it was
        store.count(f"status:{n}")
        store.note_injected(f"status:{n}")
    assert [len(store.redis.keys(f"sse-tape:{name}*")) for name in ("asked", "injected")] == [2, 2]
    assert [store.redis.hlen(f"sse-tape:{name}") for name in ("asked", "injected")] == [3, 3]
    assert [store.redis.zcard(f"sse-tape:{name}-order") for name in ("asked", "injected")] == [3, 3]
    store.reset()
    assert store.redis.keys("sse-tape:*") == [b"sse-tape:generation"]  # the resets counted: it outlives them


def test_a_reset_at_the_moment_another_server_keeps_something_leaves_nothing_unnamed(url: str) -> None:
    # One server keeps a background response under a new key again and again while another resets: whatever a
    # reset leaves, the next reset finds, so that after the last one nothing is kept.
    writer, resetter = RedisStore(url), RedisStore(url)
    done = threading.Event()

    def keep() -> None:
        for n in range(2_000):
            writer.kept(f"responses:{n}")["resp_1"] = n
        done.set()

    thread = threading.Thread(target=keep)
    thread.start()
    while not done.is_set():
        resetter.reset()
    thread.join()
    resetter.reset()
    assert resetter.redis.keys("sse-tape:*") == [b"sse-tape:generation"]  # the resets counted, and nothing else


def test_the_misses_are_one_list_counted_once(url: str) -> None:
    with replicas(url, [numbered(1)], ServeOptions.build(pace="instant")) as (one, other):
        for server in (one, other):
            assert httpx.post(server.url + "/nowhere", content=b"{}").status_code == 404
        seen = one.control.snapshot()
        assert ([m.path for m in seen.misses], seen.missed) == (["/nowhere", "/nowhere"], 2)
        assert [m.request for m in seen.misses] == [1, 2]  # numbered across both


def test_a_background_response_started_on_one_server_is_polled_and_cancelled_on_the_other(
    url: str, in_progress: tuple[Interaction, dict[str, Any]]
) -> None:
    greeting, body = in_progress
    with replicas(url, [Cassette([greeting])], ServeOptions.build(pace="recorded")) as (one, other):
        with openai_client(one.url + "/v1") as first, openai_client(other.url + "/v1") as second:
            created = first.responses.create(model=body["model"], input=body["input"], background=True)
            assert second.responses.retrieve(created.id).status == "in_progress"
            assert second.responses.cancel(created.id).status == "cancelled"
            assert first.responses.retrieve(created.id).status == "cancelled"  # the cancel holds on the other
        assert one.control.snapshot().kept == {"openai-responses:0": (created.id,)}
        other.control.reset()
        with openai_client(one.url + "/v1") as first, pytest.raises(openai.NotFoundError):
            first.responses.retrieve(created.id)


async def test_an_mcp_session_replays_through_a_server_on_redis_and_lives_there(url: str, tmp_path: Path) -> None:
    cassette = tmp_path / "mcp.toml"
    with (
        on_loopback(mcp_tools().streamable_http_app(), "the MCP server") as upstream,
        processes.recording_proxy(upstream, cassette) as proxy,
    ):
        async with streamable_http_client(f"{proxy}/mcp") as (read, write, *_), ClientSession(read, write) as live:
            await live.initialize()
            recorded = await live.call_tool("add", {"a": 2, "b": 3})
    server = MockServer([Cassette.load(cassette)], state=RedisStore(url))
    async with (
        server,
        streamable_http_client(f"{server.url}/mcp") as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        added = await session.call_tool("add", {"a": 2, "b": 3})
        assert (added.structured_content, added.is_error) == (recorded.structured_content, False)
        [(key, sessions)] = server.control.snapshot().kept.items()
        assert key.startswith("mcp")
        assert len(sessions) == 1
        # In Redis, for every server sharing it to answer (see test_mcp_replicas.py); its GET stream is this one's.
        assert RedisStore(url).snapshot().kept == {key: sessions}


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("http://127.0.0.1:6379", "state 'http://127.0.0.1:6379': give a Redis URL, such as redis://127.0.0.1:6379/0"),
        ("redis://:secret@127.0.0.1:1/0", "state redis://127.0.0.1:1/0: Redis does not answer there (ConnectionError)"),
    ],
    ids=["not-redis", "nobody-there"],
)
def test_a_bad_state_is_one_line_without_its_password(given: str, message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sse_tape", "serve", "--state", given], capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stderr) == (2, f"Error: {message}\n")


def test_a_bad_state_url_is_a_config_error_in_python() -> None:
    with pytest.raises(ConfigError, match=re.escape("state redis://127.0.0.1:1/0: Redis does not answer there")):
        RedisStore("redis://127.0.0.1:1/0")


def test_workers_and_a_second_serve_share_one_fault_budget_and_one_turn_order(url: str, tmp_path: Path) -> None:
    numbered(3).save(tmp_path / "n.toml")
    common = ["--port", "0", "--pace", "instant", "--fault", "status:429,times=1", "--state", url, "-q"]
    started = [processes.start(["serve", str(tmp_path), *common, *more]) for more in (["--workers", "2"], [])]
    try:
        answers = []
        for n in range(8):  # a new connection each time: the system shares them out among the workers
            with httpx.Client(timeout=30) as client:
                answers.append(client.post(started[n % 2][1] + "/stream", content=b"{}"))
        assert [a.status_code for a in answers] == [429] + [200] * 7
        # The 429 took the first recording's turn; the rest follow in turn, whichever process answered.
        assert [a.text for a in answers[1:]] == [f"data: {n % 3}\n\n" for n in range(1, 8)]
        with httpx.Client(timeout=30) as client:
            stats = client.get(started[1][1] + "/__sse_tape__/stats").json()
        assert stats["requests"] == 8
    finally:
        for process, _ in started:
            process.terminate()
            process.communicate(timeout=60)


def test_while_redis_is_gone_each_request_is_a_503_in_one_line() -> None:
    lines: list[str] = []
    with redis_server() as gone:
        server = MockServer(
            [numbered(1)], options=ServeOptions.build(pace="instant"), state=RedisStore(gone), log=lines.append
        )
        stack = contextlib.ExitStack()
        stack.enter_context(run_in_thread(server))
    with stack:  # the Redis has stopped; the server goes on
        answer = httpx.post(server.url + "/stream", content=b"{}")
        assert answer.status_code == 503
        message = answer.json()["error"]
        assert message.startswith(f"the replay state's Redis at {gone} does not answer (")
        assert lines[-1] == f"POST /stream -> 503 {message}"
        assert not any("Traceback" in line for line in lines)


def test_while_redis_is_gone_the_journal_says_once_that_it_cannot_share_and_how_many_when_it_is_back(
    request: pytest.FixtureRequest,
) -> None:
    lines: list[str] = []
    with redis_server() as first:
        store = RedisStore(first)
        request.addfinalizer(store.redis.close)
        journal = Journal(log=lines.append, share=store.add_entries)  # off an event loop: each entry shared at once
        journal.add(Received(request=1, method="POST", path="/stream"))
    for n in (2, 3, 4):  # the Redis has stopped: each lost
        journal.add(Received(request=n, method="POST", path="/stream"))
    assert lines == [
        f"could not share journal entries, until the replay state answers again: the replay state's Redis at {first}"
        " does not answer (ConnectionError)"
    ]
    with redis_server(port=int(first.split(":")[2].split("/")[0])):  # back, where it was
        journal.add(Received(request=5, method="POST", path="/stream"))
        assert lines[1:] == ["sharing journal entries again: 3 could not be shared meanwhile"]
        assert [entry["request"] for entry in store.entries(None)] == [5]  # a Redis started anew, holding nothing


def test_when_redis_stops_in_the_middle_of_a_forwarded_stream_it_breaks_off_in_one_line() -> None:
    # The fault acts (and is counted in Redis) at the stream's 4th event, which the upstream sends only once the
    # test has stopped Redis.
    go = threading.Event()
    lines: list[str] = []
    with (
        on_loopback(_gated_upstream(go, 6), "the upstream") as upstream,
        contextlib.ExitStack() as redis,
    ):
        url = redis.enter_context(redis_server())
        options = ServeOptions.build(on_miss="forward", faults=["error:at=4"])
        server = MockServer([], options=options, upstream=upstream, state=RedisStore(url), log=lines.append)
        with run_in_thread(server), httpx.stream("POST", server.url + "/v1/chat/completions", json={}) as answer:
            events = answer.iter_lines()
            assert [next(events), next(events)] == ['data: {"n": 0}', ""]
            redis.close()  # Redis stops
            go.set()
            got = []
            with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
                got.extend(events)
    assert 'data: {"n": 1}' in got
    assert "data: [DONE]" not in got
    [broken] = [line for line in lines if "broken off" in line]
    assert broken.startswith(f"POST /v1/chat/completions -> broken off: the replay state's Redis at {url} does not")
    assert any(line.startswith("POST /v1/chat/completions ended: 200,") and "interrupted" in line for line in lines)
    assert not any("Traceback" in line for line in lines)


def test_when_redis_stops_in_the_middle_of_a_replayed_task_stream_it_ends_in_one_line() -> None:
    # A2A keeps how much of a task's stream its client got, in Redis, when the stream ends; the recording's last
    # events come a while after its first, and Redis stops in between.
    task = {"task": {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_SUBMITTED"}}}
    update = {"taskId": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_COMPLETED"}}
    results = [task, {"statusUpdate": {**update, "status": {"state": "TASK_STATE_WORKING"}}}, {"statusUpdate": update}]
    frames = [json.dumps({"jsonrpc": "2.0", "id": "r1", "result": r}) for r in results]
    body = b'{"jsonrpc":"2.0","id":"r1","method":"SendStreamingMessage","params":{"message":{}}}'
    chunks = tuple(Chunk(0.0 if n < 2 else 2.0, f"data: {frame}\n\n".encode()) for n, frame in enumerate(frames))
    cassette = Cassette([Interaction(Request("POST", "/a2a", body=body), Response(200, SSE, chunks))])
    lines: list[str] = []
    with contextlib.ExitStack() as redis:
        url = redis.enter_context(redis_server())
        server = MockServer(
            [cassette], options=ServeOptions.build(pace="recorded"), state=RedisStore(url), log=lines.append
        )
        with run_in_thread(server), httpx.stream("POST", server.url + "/a2a", content=body) as answer:
            events = answer.iter_lines()
            assert next(events) == f"data: {frames[0]}"
            redis.close()  # Redis stops
            got = [line for line in events if line]
    assert got == [f"data: {frame}" for frame in frames[1:]]  # the whole stream, which ended before the store was asked
    [broken] = [line for line in lines if "broken off" in line]
    assert broken.startswith(f"POST /a2a -> broken off: the replay state's Redis at {url} does not answer (")
    assert not any("Traceback" in line for line in lines)


def _gated_upstream(go: threading.Event, count: int) -> Any:
    """An ASGI upstream that streams `count` events (`{"n": 0}`...) and `[DONE]`, holding all but the first two
    until `go` is set."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for n in range(count):
            if n == 2:
                await asyncio.to_thread(go.wait, 60)
            await send({"type": "http.response.body", "body": b'data: {"n": %d}\n\n' % n, "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})

    return app


def test_what_cannot_be_pickled_is_the_stores_failure_not_a_500(url: str) -> None:
    with pytest.raises(StateError, match="cannot keep responses's 'live': cannot pickle"):
        RedisStore(url).kept("responses")["live"] = threading.Lock()
