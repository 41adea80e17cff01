"""The control (`server.control`) and the replay store behind it, against real servers on loopback: driven
from other threads than the server's, and from other event loops."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Collection, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from clients import openai_client
from redis_server import redis_server
from upstream import Upstream
from waits import SAFETY_NET

from sse_tape import (
    Cassette,
    Chunk,
    ConfigError,
    Interaction,
    Matcher,
    MemoryStore,
    MockServer,
    Request,
    Response,
    ServeOptions,
    arecording,
    bundled_cassettes,
    serve,
)
from sse_tape.journal import Ended, Miss
from sse_tape.server import Snapshot, run_in_thread
from sse_tape.state import FaultKey, ReplayStore, State
from sse_tape.state_redis import RedisStore

SSE = (("content-type", "text/event-stream"),)


def numbered(count: int, path: str = "/stream") -> Cassette:
    """A cassette of `count` recordings of one request, the nth answering `data: n`."""
    request = Request("POST", path, body=b"{}")
    return Cassette(
        [Interaction(request, Response(200, SSE, (Chunk(0.0, f"data: {n}\n\n".encode()),))) for n in range(count)]
    )


def in_thread(call: object) -> None:
    """Run `call` in a thread of its own, to its end, raising what it raised."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            call()  # type: ignore[operator]
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]


def test_faults_set_from_another_thread_act_on_the_next_request() -> None:
    with serve(numbered(1), pace="instant") as server:
        url = server.url + "/stream"
        in_thread(lambda: server.control.set_faults(["status:code=429,times=1"]))
        assert [httpx.post(url, content=b"{}").status_code for _ in range(2)] == [429, 200]
        in_thread(lambda: server.control.add_faults(["empty"]))
        assert httpx.post(url, content=b"{}").content == b""
        now = server.control.snapshot()
        assert [f.spec for f in now.faults] == ["status:code=429,times=1", "empty"]
        assert now.injected == {"status:code=429,times=1": 1, "empty": 1}
        in_thread(lambda: server.control.set_faults([]))
        assert httpx.post(url, content=b"{}").content == b"data: 0\n\n"
        assert server.control.snapshot().faults == ()


def test_setting_faults_starts_their_counts_over_and_adding_keeps_them() -> None:
    with serve(numbered(1), pace="instant") as server:
        url = server.url + "/stream"
        server.control.set_faults(["status:code=503,times=1"])
        assert [httpx.post(url, content=b"{}").status_code for _ in range(2)] == [503, 200]
        server.control.add_faults(["empty"])  # the 503 has had its one time
        assert httpx.post(url, content=b"{}").status_code == 200
        server.control.set_faults(["status:code=503,times=1"])  # a new set: its time comes again
        assert httpx.post(url, content=b"{}").status_code == 503


def test_a_bad_fault_is_refused_in_the_callers_thread_and_changes_nothing() -> None:
    with serve(numbered(1), pace="instant", faults=["empty"]) as server:
        with pytest.raises(ConfigError, match="nonsense"):
            server.control.set_faults(["empty", "nonsense:1"])
        assert [f.spec for f in server.control.snapshot().faults] == ["empty"]


def test_the_seed_set_through_the_control_repeats_the_faults_chances() -> None:
    with serve(numbered(1), pace="instant", faults=["status:code=500,p=0.5"]) as server:

        def statuses() -> list[int]:
            server.control.reset()
            server.control.set_seed(7)
            server.control.set_faults(["status:code=500,p=0.5"])
            return [httpx.post(server.url + "/stream", content=b"{}").status_code for _ in range(16)]

        first = statuses()
        assert server.control.snapshot().seed == 7
        assert statuses() == first
        assert set(first) == {200, 500}


def test_wait_idle_returns_when_the_stream_in_flight_ends() -> None:
    with serve(numbered(1), pace="instant") as server:
        headers = {"X-SSE-Tape-Fault": "slow-close:600s"}  # the body's end is held back until the client goes
        with httpx.stream("POST", server.url + "/stream", content=b"{}", headers=headers) as answer:
            lines = answer.iter_lines()  # kept: a reader let go of closes the response
            assert next(lines) == "data: 0"
            assert server.control.snapshot().streams == 1
            assert server.control.wait_idle(0.2) is False  # the stream is still being answered
        assert server.control.wait_idle(SAFETY_NET) is True
        # Woken once the server noted the stream's end: it is in the journal already.
        [ended] = [e for e in server.control.journal if isinstance(e, Ended)]
        assert ended.request == 1
        assert server.control.snapshot().streams == 0


async def test_idle_is_awaited_from_another_event_loop_than_the_servers() -> None:
    with run_in_thread(MockServer([numbered(1)])) as server:
        headers = {"X-SSE-Tape-Fault": "slow-close:600s"}
        async with httpx.AsyncClient() as client:
            async with client.stream("POST", server.url + "/stream", content=b"{}", headers=headers) as answer:
                lines = answer.aiter_lines()  # kept: a reader let go of closes the response
                assert await anext(lines) == "data: 0"
                waiting = asyncio.ensure_future(server.control.idle())
                await asyncio.sleep(0.1)  # a floor, not a wait: the stream is held for 600 s
                assert not waiting.done()
            async with asyncio.timeout(SAFETY_NET):
                await waiting
        assert server.control.snapshot().streams == 0


async def test_on_the_servers_own_loop_calls_run_at_once_and_wait_idle_is_refused() -> None:
    async with MockServer([numbered(2)]) as server, httpx.AsyncClient() as client:
        server.control.set_faults(["empty:times=1"])
        assert (await client.post(server.url + "/stream", content=b"{}")).content == b""
        await server.control.idle()  # nothing in flight: at once
        assert server.control.snapshot().requests == 1
        with pytest.raises(RuntimeError, match="await idle"):
            server.control.wait_idle(1)


def test_a_snapshot_taken_while_requests_run_is_consistent() -> None:
    cassette = numbered(3)
    clients, each = 4, 25
    with serve(cassette, pace="instant", faults=["empty:p=0.5"]) as server:
        done = threading.Event()
        seen: list[Snapshot] = []

        def request() -> None:
            with httpx.Client(base_url=server.url) as client:
                for n in range(each):
                    client.post("/stream" if n % 5 else "/nowhere", content=b"{}")

        def watch() -> None:
            while not done.is_set():
                seen.append(server.control.snapshot())

        watcher = threading.Thread(target=watch)
        watcher.start()
        threads = [threading.Thread(target=request) for _ in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        done.set()
        watcher.join()
        assert server.control.wait_idle(SAFETY_NET)
        last = server.control.snapshot()
    for now in [*seen, last]:
        assert sum(now.plays.values()) == len(now.played)  # every play is in both, or in neither
        assert len(now.received) <= now.requests
        assert len(now.played) + len(now.misses) <= now.requests
        assert sum(now.injected.values()) <= len(now.played)
        assert set(now.unplayed) == {r for r in now.recordings if r not in now.played}
    assert last.requests == len(last.received) == clients * each
    assert (len(last.played), len(last.misses)) == (clients * each * 4 // 5, clients * each // 5)
    assert last.unplayed == ()


def test_a_call_from_another_thread_runs_on_the_servers_loop() -> None:
    class Noting(MemoryStore):
        """The default store, noting the thread each reset and snapshot runs in."""

        def __init__(self) -> None:
            super().__init__()
            self.threads: list[str] = []

        def reset(self, keep: Collection[str] = ()) -> None:
            self.threads.append(threading.current_thread().name)
            super().reset(keep)

        def snapshot(self) -> State:
            self.threads.append(threading.current_thread().name)
            return super().snapshot()

    store = Noting()
    with run_in_thread(MockServer([numbered(1)], state=store)) as server:
        server.control.reset()
        server.control.snapshot()
        in_thread(server.control.snapshot)
    assert store.threads == ["sse-tape-MockServer"] * 3
    assert threading.current_thread().name not in store.threads


class KeyValues:
    """A store of our own, kept as a shared store would keep it: every value under a string key (see
    `sse_tape.state.ReplayStore`). Replay must answer through it exactly as through the default one."""

    shared = False  # one server's

    def __init__(self) -> None:
        self.values: dict[str, object] = {}

    def _number(self, key: str) -> int:
        n = self.values.get(key, 0)
        assert isinstance(n, int)
        return n

    def _add(self, key: str) -> int:
        n = self._number(key)
        self.values[key] = n + 1
        return n

    def _list(self, key: str) -> list[object]:
        found = self.values.setdefault(key, [])
        assert isinstance(found, list)
        return found

    def next_request(self) -> int:
        return self._add("requests") + 1

    def requests(self) -> int:
        return self._number("requests")

    def add_received(self, request: Request) -> None:
        self._list("received").append(request)

    def next_turn(self, key: str) -> int:
        return self._add(f"turn {key}")

    def played(self, recording_id: str) -> None:
        self._list("answered").append(recording_id)
        self._add(f"plays {recording_id}")

    def plays(self, recording_id: str) -> int:
        return self._number(f"plays {recording_id}")

    def claim(self, recording_ids: Sequence[str]) -> str | None:
        fresh = next((rid for rid in recording_ids if not self.plays(rid)), None)
        if fresh is not None:
            self.played(fresh)
        return fresh

    def count(self, fault_key: FaultKey) -> int:
        return self._add(f"placed {fault_key}" if isinstance(fault_key, int) else f"asked {fault_key}")

    def restart_counts(self) -> None:
        for key in [k for k in self.values if k.startswith("placed ")]:
            del self.values[key]

    def note_injected(self, spec: str) -> None:
        self._add(f"injected {spec}")

    def share_settings(self, faults: Sequence[str], seed: int) -> None:
        self.values["settings"] = (tuple(faults), seed)

    def settings(self) -> tuple[tuple[str, ...], int] | None:
        return None  # the only server: what it set is what it has

    def add_miss(self, miss: Miss) -> None:
        self._list("misses").append(miss)

    def add_entries(self, entries: Sequence[Mapping[str, Any]]) -> None:
        raise AssertionError("a store that is not shared keeps no journal")

    def entries(self, limit: int | None) -> list[Mapping[str, Any]]:
        raise AssertionError("a store that is not shared keeps no journal")

    def kept(self, key: str) -> MutableMapping[str, Any]:
        found = self.values.setdefault(f"kept {key}", {})
        assert isinstance(found, dict)
        return found

    def snapshot(self) -> State:
        def under(prefix: str) -> dict[str, int]:
            return {k.removeprefix(prefix): self._number(k) for k in self.values if k.startswith(prefix)}

        counts: dict[FaultKey, int] = {int(k): n for k, n in under("placed ").items()}
        counts.update((k, n) for k, n in under("asked ").items())
        return State(
            requests=self._number("requests"),
            received=tuple(r for r in self._list("received") if isinstance(r, Request)),
            answered=tuple(a for a in self._list("answered") if isinstance(a, str)),
            plays=under("plays "),
            misses=tuple(m for m in self._list("misses") if isinstance(m, Miss)),
            missed=len(self._list("misses")),
            injected=under("injected "),
            counts=counts,
            kept={
                k.removeprefix("kept "): tuple(self.kept(k.removeprefix("kept ")))
                for k in self.values
                if k.startswith("kept ")
            },
        )

    def reset(self, keep: Collection[str] = ()) -> None:
        kept = {f"kept {key}" for key in keep}
        for key in [k for k in self.values if k not in kept]:
            del self.values[key]


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(params=["memory", "key-values", "redis"])
def store(request: pytest.FixtureRequest) -> ReplayStore:
    """A new store of each kind: the default, one of our own, and one in a real Redis (emptied first)."""
    if request.param == "redis":
        shared = RedisStore(request.getfixturevalue("redis_url"))
        shared.redis.flushdb()
        return shared
    return MemoryStore() if request.param == "memory" else KeyValues()


def test_replay_answers_alike_through_any_store(store: ReplayStore) -> None:
    cassettes = [numbered(3), numbered(2, "/once")]
    options = ServeOptions.build(faults=["empty:times=2,path=/stream"], pace="instant")
    with run_in_thread(MockServer(cassettes, options=options, state=store)) as server:

        def bodies(path: str, times: int) -> list[bytes]:
            return [httpx.post(server.url + path, content=b"{}").content for _ in range(times)]

        # Equally good recordings in turn (the first two emptied by the fault); past the last, they start over.
        assert bodies("/stream", 5) == [b"", b"", b"data: 2\n\n", b"data: 0\n\n", b"data: 1\n\n"]
        assert httpx.post(server.url + "/nowhere", content=b"{}").status_code == 404
        now = server.control.snapshot()
        assert now.requests == 6
        assert [str(r) for r in now.unplayed] == ["<memory> #1 (POST /once)", "<memory> #2 (POST /once)"]
        assert now.injected == {"empty:times=2,path=/stream": 2}
        assert [m.path for m in now.misses] == ["/nowhere"]
        server.control.reset()  # every count starts over: the turns, and the fault's times
        assert bodies("/stream", 3) == [b"", b"", b"data: 2\n\n"]
        assert server.control.snapshot().requests == 3
        assert httpx.get(server.url + "/__sse_tape__/stats").json()["requests"] == 3


def test_each_recording_answers_once_through_any_store_without_repeats(store: ReplayStore) -> None:
    options = ServeOptions.build(pace="instant", allow_repeats=False)
    with run_in_thread(MockServer([numbered(2)], options=options, state=store)) as server:
        answers = [httpx.post(server.url + "/stream", content=b"{}") for _ in range(3)]
        assert [a.content for a in answers[:2]] == [b"data: 0\n\n", b"data: 1\n\n"]
        assert answers[2].status_code == 404  # both played
        assert sorted(server.control.snapshot().plays.values()) == [1, 1]


def test_a_background_response_is_kept_in_any_store_and_a_reset_forgets_it(
    store: ReplayStore, bundled: dict[str, Cassette]
) -> None:
    recorded = bundled["openai-responses"].interactions[0]
    body = {**recorded.request.json(), "background": True}
    greeting = replace(recorded, request=replace(recorded.request, body=json.dumps(body).encode()))
    options = ServeOptions.build(pace="instant")
    with run_in_thread(MockServer([Cassette([greeting])], options=options, state=store)) as server:
        client = openai_client(server.url + "/v1")
        created = client.responses.create(model=body["model"], input=body["input"], background=True)
        assert client.responses.retrieve(created.id).status == "completed"
        assert server.control.snapshot().kept == {"openai-responses:0": (created.id,)}
        server.control.reset()
        assert server.control.snapshot().kept == {}
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(created.id)


def test_a_recordings_id_is_the_same_in_every_load_and_two_cassettes_of_one_name_differ(tmp_path: Path) -> None:
    [path] = [p for p in bundled_cassettes() if p.name == "openai-chat.toml"]
    first, second = Matcher([Cassette.load(path)]), Matcher([Cassette.load(path)])
    ids = [first.id_of(r) for r in first.recordings]
    assert ids == [second.id_of(r) for r in second.recordings]
    assert ids[0].startswith("openai-chat.toml#1:")
    assert len(set(ids)) == len(ids)
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        numbered(1).save(tmp_path / folder / "same.toml")
    both = Matcher([Cassette.load(tmp_path / "a" / "same.toml"), Cassette.load(tmp_path / "b" / "same.toml")])
    one, other = (both.id_of(r) for r in both.recordings)
    assert other == one + "~2"


async def test_idle_waits_for_what_the_recorder_reads_on_after_a_fault_cut_its_client_short(
    tmp_path: Path,
) -> None:
    async with Upstream() as upstream, arecording(tmp_path / "c.toml", upstream.url) as proxy:
        async with httpx.AsyncClient() as client:
            url = proxy.url + "/v1/chat/completions?events=5&gap=0.2"
            headers = {"X-SSE-Tape-Fault": "disconnect:after=1"}
            async with client.stream("POST", url, content=b"{}", headers=headers) as answer:
                with pytest.raises(httpx.RemoteProtocolError):
                    await answer.aread()
        async with asyncio.timeout(SAFETY_NET):
            await proxy.control.idle()
        # Not done with the client's copy alone: the recorder had the upstream's last event when it came.
        assert upstream.last_write is not None
        assert proxy.control.snapshot().recording == 0


def test_a_server_keeps_its_replay_state_in_the_store_it_is_given() -> None:
    store = MemoryStore(keep=2)
    with run_in_thread(MockServer([numbered(1)], state=store)) as server:
        for _ in range(3):
            httpx.post(server.url + "/stream", content=b"{}")
        now = server.control.snapshot()
    assert (now.requests, len(now.received)) == (3, 2)  # the store keeps the last two
    assert store.snapshot().requests == 3


def test_the_store_keeps_the_last_misses_and_counts_the_rest_and_a_reset_forgets_them() -> None:
    store = MemoryStore(keep_misses=3)
    with run_in_thread(MockServer([numbered(1)], state=store)) as server:
        for n in range(5):
            httpx.post(server.url + f"/nowhere/{n}", content=b"{}")
        now = server.control.snapshot()
        assert [m.path for m in now.misses] == ["/nowhere/2", "/nowhere/3", "/nowhere/4"]
        assert now.missed == 5
        server.control.reset()
        assert (server.control.snapshot().misses, server.control.snapshot().missed) == ((), 0)


def test_past_the_bytes_it_keeps_the_store_keeps_the_oldest_requests_without_their_bodies() -> None:
    # Each request brings 10,000 bytes of body and a head of a few hundred: past 25,000 bytes, the oldest lose
    # their bodies (keeping the header that said how long they were), then go; the newest is kept whole,
    # however large.
    store = MemoryStore(keep_bytes=25_000)
    bodies = [str(n).encode() * 10_000 for n in range(4)]
    with run_in_thread(MockServer([numbered(1)], state=store)) as server:
        for body in bodies:
            httpx.post(server.url + "/stream", content=body)
        received = server.control.snapshot().received
        assert [r.body for r in received] == [b"", b"", *bodies[2:]]
        assert [r.header("content-length") for r in received] == ["10000"] * 4
        httpx.post(server.url + "/stream", content=b"x" * 100_000)
        [newest] = server.control.snapshot().received
        assert newest.body == b"x" * 100_000
        server.control.reset()
        assert server.control.snapshot().received == ()
