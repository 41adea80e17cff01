"""`sse-tape serve --workers N`: N processes on one port, started, shared out and stopped together."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import processes
import pytest
from clients import openai_client
from gateways import nginx_site
from redis_server import redis_server
from waits import SAFETY_NET, until

from sse_tape import Cassette, Chunk, Interaction, Request, Response, StateError
from sse_tape.state import forget
from sse_tape.state_workers import WorkersStore

ROOT = Path(__file__).parent.parent

CHAT = {"model": "m", "messages": [{"role": "user", "content": "Hello!"}], "stream": True}


def workers_of(process: subprocess.Popen[str]) -> list[int]:
    with open(f"/proc/{process.pid}/task/{process.pid}/children") as children:
        return [int(pid) for pid in children.read().split()]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_two_workers_share_one_port_answer_alike_and_stop_together() -> None:
    process, url = processes.start(["serve", "--workers", "2", "--port", "0"])
    try:
        pids = workers_of(process)
        assert len(pids) == 2
        seen = set()
        for _ in range(200):  # a new connection each time: the system shares them out among the workers
            with httpx.Client(base_url=url, timeout=30) as client:
                seen.add(client.get("/__sse_tape__/stats").json()["pid"])
                answer = client.post("/v1/chat/completions", json=CHAT)
                assert answer.status_code == 200
                assert answer.text.endswith("data: [DONE]\n\n")
            if seen == set(pids):
                break
        assert seen == set(pids)
        process.send_signal(signal.SIGTERM)  # to the parent alone: it stops its workers
        assert process.wait(timeout=60) == 0
        assert not any(alive(pid) for pid in pids)
    finally:
        process.kill()
        process.communicate()


SSE = (("content-type", "text/event-stream"),)


def numbered(count: int) -> Cassette:
    """A cassette of `count` recordings of one request, the nth answering `data: n`."""
    request = Request("POST", "/stream", body=b"{}")
    return Cassette(
        [Interaction(request, Response(200, SSE, (Chunk(0.0, f"data: {n}\n\n".encode()),))) for n in range(count)]
    )


@contextlib.contextmanager
def served(args: list[str]) -> Iterator[tuple[str, list[int]]]:
    """`sse-tape serve ARGS` in 2 workers while the block runs: its URL and the workers' pids."""
    process, url = processes.start(["serve", *args, "--workers", "2", "--port", "0", "-q"])
    try:
        yield url, workers_of(process)
    finally:
        process.terminate()
        _, err = process.communicate(timeout=60)
        assert "Traceback" not in err


@contextlib.contextmanager
def connected(url: str, pid: int) -> Iterator[httpx.Client]:
    """A client whose one connection the system gave to the worker `pid` (a new connection until it does)."""
    for _ in range(1000):
        client = httpx.Client(base_url=url, timeout=30, limits=httpx.Limits(max_connections=1))
        try:
            if client.get("/__sse_tape__/stats").json()["pid"] == pid:
                yield client
                return
        finally:
            client.close()
    raise AssertionError(f"no connection reached worker {pid}")


def test_workers_answer_as_one_server_one_fault_budget_and_one_turn_order(tmp_path: Path) -> None:
    numbered(3).save(tmp_path / "n.toml")
    with served([str(tmp_path), "--pace", "instant", "--fault", "status:429,times=1"]) as (url, (one, other)):
        answers = []
        for pid in (one, other, one, other, other, one):
            with connected(url, pid) as client:
                answers.append(client.post("/stream", content=b"{}"))
        assert [a.status_code for a in answers] == [429] + [200] * 5
        # The 429 took the first recording's turn; the rest follow in turn, whichever worker answered.
        assert [a.text for a in answers[1:]] == [f"data: {n % 3}\n\n" for n in range(1, 6)]
        with connected(url, other) as client:
            assert client.get("/__sse_tape__/stats").json()["requests"] == 6

            def injections() -> list[str]:
                return [i["fault"] for i in client.get("/__sse_tape__/faults").json()["injections"]]

            # The 429 was `one`'s: its journal entries come to the other a batch at a time, a moment later.
            until(lambda: injections() == ["status:429,times=1"], "the other worker's injection")


def test_a_fault_asked_for_in_a_header_has_one_budget_across_workers(tmp_path: Path) -> None:
    # A fault set on the server is counted in the memory the workers share; one a header asks for, by its
    # text, by the parent (a round trip): one budget too.
    numbered(1).save(tmp_path / "n.toml")
    with served([str(tmp_path), "--pace", "instant"]) as (url, (one, other)):
        statuses = []
        for pid in (other, one, other, one):
            with connected(url, pid) as client:
                answer = client.post("/stream", content=b"{}", headers={"X-SSE-Tape-Fault": "status:429,times=2"})
                statuses.append(answer.status_code)
        assert statuses == [429, 429, 200, 200]


def test_forked_workers_claim_each_recording_once_from_the_store_their_parent_holds() -> None:
    # With `allow_repeats` off (Python and pytest), a claim is one step across the workers: none plays twice.
    store, ids = WorkersStore(2), [f"r{n}" for n in range(1000)]
    claimed = tempfile.TemporaryDirectory()

    def worker(n: int) -> int:  # claims until nothing is left, and writes what it got
        store.in_worker(n)
        store.played("told")  # sent without waiting for an answer
        got = []
        while (one := store.claim(ids)) is not None:
            got.append(one)
        Path(claimed.name, str(n)).write_text(" ".join(got))
        return 0

    with claimed:
        pids = [processes.fork(functools.partial(worker, n)) for n in range(2)]
        failures: list[str] = []
        store.hold(failures.append)
        assert [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids] == [0, 0]
        got = [Path(claimed.name, str(n)).read_text().split() for n in range(2)]
    assert sorted(got[0] + got[1]) == sorted(ids)  # each once, in all
    assert store.claim(ids) is None  # the parent's own view: every one played
    assert store.snapshot().plays["told"] == 2
    assert failures == []


def test_what_one_worker_told_its_parent_is_found_by_the_next_worker_a_client_turns_to() -> None:
    # A worker tells its parent what it keeps (an MCP session, a background response) without waiting, behind
    # the bodies of the requests it received; the client then turns to the other worker, which asks for it.
    store, rounds = WorkersStore(2), 50
    told_read, told_write = os.pipe()  # the first worker's answer reached the client
    asked_read, asked_write = os.pipe()  # the other's did

    def worker(n: int) -> int:
        store.in_worker(n)
        missing = 0
        for i in range(rounds):
            if n == 0:
                store.next_request()
                for _ in range(20):
                    store.add_received(Request("POST", "/v1/responses", body=b"x" * 50_000))
                store.kept("responses")[f"resp_{i}"] = i
                os.write(told_write, b".")
                os.read(asked_read, 1)
            else:
                os.read(told_read, 1)
                missing += f"resp_{i}" not in store.kept("responses")
                os.write(asked_write, b".")
        return min(missing, 100)

    pids = [processes.fork(functools.partial(worker, n)) for n in range(2)]
    store.hold(print)
    assert [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids] == [0, 0]  # none missing
    for end in (told_read, told_write, asked_read, asked_write):
        os.close(end)


def test_forked_workers_number_their_requests_and_count_a_faults_as_one_without_waiting_for_their_parent() -> None:
    # A request's number and the count of a fault set on the server (for `times=` and `p=`) are no question to
    # the parent: the workers count while it answers nothing yet.
    store, each = WorkersStore(2), 500
    numbered = tempfile.TemporaryDirectory()

    def worker(n: int) -> int:
        signal.alarm(int(SAFETY_NET))  # a worker left waiting for an answer ends, and the test fails
        store.in_worker(n)
        got = [(store.next_request(), store.count(0)) for _ in range(each)]
        Path(numbered.name, str(n)).write_text(" ".join(f"{number},{seen}" for number, seen in got))
        return store.asked  # 0: no question to the parent

    with numbered:
        pids = [processes.fork(functools.partial(worker, n)) for n in range(2)]
        statuses = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]
        store.hold(print)  # only now
        assert statuses == [0, 0]
        got = [
            [tuple(map(int, pair.split(","))) for pair in Path(numbered.name, str(n)).read_text().split()]
            for n in (0, 1)
        ]
    assert all(pairs == sorted(pairs) for pairs in got)  # each worker's in the order it took them
    numbers, seen = (sorted(values) for values in zip(*got[0], *got[1], strict=True))
    assert numbers == list(range(1, 2 * each + 1))  # one count: none taken twice, none left out
    assert seen == list(range(2 * each))  # one fault budget
    state = store.snapshot()
    assert store.requests() == state.requests == 2 * each
    assert state.counts == {0: 2 * each}
    store.restart_counts()
    assert store.count(0) == 0
    store.reset()
    assert (store.requests(), store.next_request(), store.snapshot().counts) == (0, 1, {})


def test_forked_workers_take_turns_as_one_asking_their_parent_once_where_a_groups_turns_are() -> None:
    store, each = WorkersStore(2), 300
    turns = tempfile.TemporaryDirectory()

    def worker(n: int) -> int:
        store.in_worker(n)
        got = [store.next_turn("r1 r2 r3") for _ in range(each)]
        Path(turns.name, str(n)).write_text(" ".join(map(str, got)))
        return store.asked  # 1: where the group's turns are, once

    with turns:
        pids = [processes.fork(functools.partial(worker, n)) for n in range(2)]
        store.hold(print)
        assert [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids] == [1, 1]
        got = [[int(turn) for turn in Path(turns.name, str(n)).read_text().split()] for n in range(2)]
    assert sorted(got[0] + got[1]) == list(range(2 * each))  # one turn order: none taken twice
    store.reset()
    assert (store.next_turn("r1 r2 r3"), store.next_turn("another")) == (0, 0)


def test_a_worker_reads_counts_and_deletes_many_of_what_a_responder_keeps_in_one_question_each() -> None:
    # As a snapshot reads all a responder keeps, an `initialize` counts the sessions, and a session that ends
    # deletes its streams: one question each, however many are kept.
    store, kept_here = WorkersStore(1), {f"session {n}": {"n": n} for n in range(200)}

    def worker(found: str) -> int:
        signal.alarm(int(SAFETY_NET))
        store.in_worker(0)
        kept = store.kept("mcp:0")
        for item, value in kept_here.items():
            kept[item] = value  # told, not asked
        before = store.asked
        counted, read = len(kept), dict(kept.items())
        forget(kept, [*list(kept_here)[:150], "never kept"])
        Path(found, "0").write_text(repr((counted, read == kept_here, len(kept))))
        return store.asked - before

    with tempfile.TemporaryDirectory() as found:
        pid = processes.fork(functools.partial(worker, found))
        store.hold(print)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 4  # len, items, the deletion, len
        assert Path(found, "0").read_text() == repr((200, True, 50))
    assert dict(store.kept("mcp:0").items()) == dict(list(kept_here.items())[150:])


def test_a_reset_through_a_worker_leaves_what_the_responders_named_keep_and_forgets_the_rest() -> None:
    store = WorkersStore(1)

    def worker() -> int:
        signal.alarm(int(SAFETY_NET))
        store.in_worker(0)
        store.kept("mcp:0")["session"] = {"open": True}
        store.kept("responses:0")["resp_1"] = {"status": "in_progress"}
        store.reset(keep=["mcp:0"])
        return (
            0
            if (dict(store.kept("mcp:0").items()), len(store.kept("responses:0"))) == ({"session": {"open": True}}, 0)
            else 1
        )

    pid = processes.fork(worker)
    store.hold(print)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert (dict(store.kept("mcp:0").items()), dict(store.kept("responses:0").items())) == (
        {"session": {"open": True}},
        {},
    )


def test_what_a_worker_cannot_pickle_is_the_stores_failure() -> None:
    store = WorkersStore(0)  # the parent's own (no worker): what it keeps is pickled as a worker's would be
    with pytest.raises(StateError, match="cannot keep responses's 'live': cannot pickle"):
        store.kept("responses")["live"] = threading.Lock()
    store.kept("responses")["kept"] = {"id": "resp_1"}
    assert store.kept("responses")["kept"] == {"id": "resp_1"}


def test_faults_set_through_one_worker_and_a_reset_through_the_other_reach_both(tmp_path: Path) -> None:
    numbered(2).save(tmp_path / "n.toml")
    with served([str(tmp_path), "--pace", "instant"]) as (url, (one, other)):
        with connected(url, one) as client:
            assert client.post("/__sse_tape__/faults", json={"faults": ["status:503,times=2"]}).status_code == 200
        statuses = []
        for pid in (other, one, other):
            with connected(url, pid) as client:
                statuses.append(client.post("/stream", content=b"{}").status_code)
        assert statuses == [503, 503, 200]  # one budget of two, spent across both
        with connected(url, one) as client:
            assert client.post("/stream", content=b"{}").text == "data: 1\n\n"
        with connected(url, other) as client:
            client.post("/__sse_tape__/reset", json={})
        with connected(url, one) as client:
            assert client.post("/stream", content=b"{}").status_code == 503  # the budget starts over
            assert client.get("/__sse_tape__/stats").json()["requests"] == 1

        def journal() -> list[tuple[str, int]]:
            with connected(url, other) as client:  # the entries of the request `one` answered
                entries = client.get("/__sse_tape__/journal").json()["entries"]
            return [(e["type"], e["request"]) for e in entries if e["type"] in ("received", "fault")]

        # Each worker shares its entries a batch at a time: the other's come a moment later.
        until(lambda: journal() == [("received", 1), ("fault", 1)], "one journal for both workers")


def test_a_background_response_started_on_one_worker_is_polled_and_cancelled_on_the_other(
    tmp_path: Path, in_progress: tuple[Interaction, dict[str, Any]]
) -> None:
    greeting, body = in_progress
    Cassette([greeting]).save(tmp_path / "background.toml")
    with served([str(tmp_path), "--pace", "recorded"]) as (url, (one, other)):

        def sdk(client: httpx.Client) -> openai.OpenAI:
            return openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0, http_client=client)

        with connected(url, one) as client:
            created = sdk(client).responses.create(model=body["model"], input=body["input"], background=True)
        with connected(url, other) as client:
            assert sdk(client).responses.retrieve(created.id).status == "in_progress"
            assert sdk(client).responses.cancel(created.id).status == "cancelled"
        with connected(url, one) as client:
            assert sdk(client).responses.retrieve(created.id).status == "cancelled"  # the cancel holds on the other
            client.post("/__sse_tape__/reset", json={})
        with connected(url, other) as client, pytest.raises(openai.NotFoundError):
            sdk(client).responses.retrieve(created.id)


def test_a_worker_that_dies_stops_the_others_and_the_exit_status_says_so() -> None:
    process, _ = processes.start(["serve", "--workers", "2", "--port", "0"])
    try:
        first, second = workers_of(process)
        os.kill(first, signal.SIGKILL)
        assert process.wait(timeout=60) != 0
        assert not alive(second)
        assert f"worker {first} ended (status -9): stopping the others" in process.communicate()[1]
    finally:
        process.kill()
        process.communicate()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "0"], "Invalid value for '--workers': 0 is not in the range 1<=x<=256."),
        (["--workers", "2", "--model", "x.gguf"], "--workers is for replay: each worker would load the model again"),
    ],
)
def test_bad_workers_are_one_line(args: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sse_tape", "serve", *args], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_two_replicas_on_one_redis_behind_the_nginx_in_docs_scaling_md_answer_as_one() -> None:
    docs = (ROOT / "docs" / "scaling.md").read_text(encoding="utf-8")
    [block] = re.findall(r"<!-- docs-test: nginx.conf -->\n```nginx\n(.*?)\n```", docs, re.DOTALL)
    with redis_server() as state:
        args = ["serve", "--port", "0", "--fault", "status:429,times=1", "--state", state, "--allow-host", "sse_tape"]
        replicas = [processes.start([*args, "-q"]) for _ in range(2)]
        try:
            ports = [url.rsplit(":", 1)[1] for _, url in replicas]

            def site(port: int) -> str:
                ours = block.replace("10.0.0.11:8000", f"127.0.0.1:{ports[0]}")
                ours = ours.replace("10.0.0.12:8000", f"127.0.0.1:{ports[1]}")
                return ours.replace("listen 8080;", f"listen 127.0.0.1:{port};")

            with nginx_site(site) as url, httpx.Client(base_url=url, timeout=30) as http:
                pids = [http.get("/__sse_tape__/stats").json()["pid"] for _ in range(4)]
                first = http.post("/v1/chat/completions", json=CHAT)
                assert pids[0] != pids[1]
                assert pids[:2] == pids[2:]  # round robin over the two replicas
                assert first.status_code == 429  # once across both
                with openai_client(url + "/v1") as client:
                    for _ in range(2):  # one from each replica
                        stream = client.chat.completions.create(
                            model="m", messages=[{"role": "user", "content": "Hi"}], stream=True
                        )
                        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
                        assert text == "Hi there! How can I help you today?"
                assert http.get("/__sse_tape__/stats").json()["requests"] == 3  # counted across both
        finally:
            for process, _ in replicas:
                process.terminate()
                process.communicate(timeout=60)


def test_workers_on_a_busy_port_are_one_line_and_exit_2() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "sse_tape", "serve", "--workers", "2", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert (result.returncode, result.stderr) == (
        2,
        f"Error: cannot listen on 127.0.0.1:{port}: address already in use\n",
    )


def test_an_unknown_host_is_said_in_the_resolvers_words() -> None:
    # The resolver answers for a name it does not know as glibc's does, without asking this machine's DNS.
    unknown = (
        "import socket\n"
        "def unknown(*args, **kwargs): raise socket.gaierror(socket.EAI_NONAME, 'Name or service not known')\n"
        "socket.getaddrinfo = unknown\n"
    )
    args = ["serve", "--host", "no-such-host.invalid", "--port", "8080"]
    code = f"{unknown}import sys; sys.argv[1:] = {args!r}\nfrom sse_tape.cli import main; main()"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (
        2,
        "Error: cannot listen on no-such-host.invalid:8080: Name or service not known\n",
    )


def descriptors_of(pids: list[int]) -> int:
    """How many descriptors these processes hold in all."""
    return sum(len(os.listdir(f"/proc/{pid}/fd")) for pid in pids)


def test_workers_give_back_the_descriptors_of_clients_gone_while_their_pipelined_requests_waited(
    tmp_path: Path,
) -> None:
    # A thousand clients (as many as the descriptors allow) each send 40 requests at once for a stream that
    # waits ten minutes after its first event, read nothing, and hang up. aiohttp stops reading a client that
    # many requests ahead, so the system told the workers nothing: they held the descriptors until each
    # stream's next write (986 of 1,000 three seconds later). Now a worker asks, and closes them.
    stream = (Chunk(0.0, b"data: first\n\n"), Chunk(600.0, b"data: late\n\n"))
    head = (("content-type", "text/event-stream"),)
    cassette = Cassette([Interaction(Request("GET", "/late"), Response(200, head, stream))], path=tmp_path / "c.toml")
    cassette.save()
    count = min(1000, processes.descriptors(2400) - 300)
    process, url = processes.start(["serve", str(cassette.path), "--workers", "2", "--port", "0", "-q"])
    clients: list[socket.socket] = []
    try:
        pids = workers_of(process)
        before = descriptors_of(pids)
        for _ in range(count):
            sock = socket.socket()
            sock.connect(("127.0.0.1", int(url.rsplit(":", 1)[1])))
            sock.sendall(b"GET /late HTTP/1.1\r\nHost: x\r\n\r\n" * 40)
            clients.append(sock)
        for sock in clients:  # each has its first event, unread: its hanging up resets the connection
            sock.settimeout(SAFETY_NET)
            sock.recv(1, socket.MSG_PEEK)
        assert descriptors_of(pids) >= before + count
        for sock in clients:
            sock.close()
        until(lambda: descriptors_of(pids) <= before, "the descriptors given back")
    finally:
        for sock in clients:
            sock.close()
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=SAFETY_NET)
