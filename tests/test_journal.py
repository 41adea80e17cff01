"""The journal and the replay state, seen through a real server: the log, the report, the control endpoint."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from clients import openai_client

from sse_tape import Cassette, MemoryStore, Request, serve
from sse_tape.dialects import DIALECTS
from sse_tape.faults import Injector, parse_fault
from sse_tape.journal import Ended, FaultInjected, Matched, Missed, Received

CHAT = {"model": "local-model", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16, "stream": True}


def test_the_journal_endpoint_lists_a_match_a_miss_and_an_injected_fault() -> None:
    with serve(pace="instant", match_on="method,path,body") as server:
        url = server.url + "/v1/chat/completions"
        assert httpx.post(url, json=CHAT).status_code == 200
        assert httpx.post(url, json={**CHAT, "max_tokens": 99}).status_code == 404
        httpx.post(url, json=CHAT, headers={"X-SSE-Tape-Fault": "error:3,message=boom"})
        entries = httpx.get(server.url + "/__sse_tape__/journal").json()["entries"]
        assert httpx.get(server.url + "/__sse_tape__/journal?limit=2").json()["entries"] == entries[-2:]
    kinds = [(e["request"], e["type"]) for e in entries]
    assert kinds == [
        (1, "received"), (1, "matched"), (1, "ended"),
        (2, "received"), (2, "missed"), (2, "ended"),
        (3, "received"), (3, "fault"), (3, "matched"), (3, "ended"),
    ]  # fmt: skip
    matched, missed, fault = entries[1], entries[4], entries[7]
    assert matched["recording"] == "openai-chat.toml #1 (POST /v1/chat/completions)"
    assert missed["status"] == 404
    assert (
        "closest: openai-chat.toml #1 (POST /v1/chat/completions): body.max_tokens is 99, recorded 16"
        in missed["reason"]
    )
    assert fault["fault"] == "error:3,message=boom"
    assert fault["what"] == "openai-chat error after event 3"
    first_end, faulted_end = entries[2], entries[9]
    assert (first_end["status"], first_end["end"], first_end["events"]) == (200, "complete", 13)
    assert faulted_end["events"] == 5  # three events, then the error event and [DONE]


def test_reset_makes_a_played_recording_playable_again(bundled: dict[str, Cassette]) -> None:
    chat = bundled["openai-chat"]
    with serve(chat, pace="instant", allow_repeats=False, match_on="method,path") as server:
        client = openai_client(server.url + "/v1")
        control = server.control
        assert [str(r) for r in control.snapshot().unplayed] == [
            "openai-chat.toml #1 (POST /v1/chat/completions)",
            "openai-chat.toml #2 (POST /v1/chat/completions)",
            "openai-chat.toml #3 (POST /v1/chat/completions)",
        ]
        for interaction in chat.interactions:  # one request of each phase: a greeting, a tool call, its result
            list(client.chat.completions.create(**interaction.request.json()))
        assert control.snapshot().unplayed == ()
        assert httpx.post(server.url + "/v1/chat/completions", json=CHAT).status_code == 404
        [miss] = control.snapshot().misses
        assert (miss.request, miss.path) == (4, "/v1/chat/completions")
        assert "has been played already" in miss.reason  # the one recording of its phase
        control.reset()
        now = control.snapshot()
        assert (now.misses, now.requests, len(control.journal)) == ((), 0, 0)
        assert len(now.unplayed) == 3
        assert "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(**CHAT)) != ""
        assert control.snapshot().requests == 1


def test_serve_logs_each_stream_when_it_starts_and_when_it_ends() -> None:
    lines: list[str] = []
    with serve(pace="instant", log=lines.append, match_on="method,path,body") as server:
        httpx.post(server.url + "/v1/chat/completions", json=CHAT)
        httpx.post(server.url + "/v1/chat/completions", json={**CHAT, "max_tokens": 99})
    # The recording has the usage chunk; a request that does not ask for usage gets the stream without it.
    assert lines[0] == "POST /v1/chat/completions -> 200 openai-chat.toml #1 (POST /v1/chat/completions) without usage"
    assert lines[1].startswith("POST /v1/chat/completions ended: 200, 13 events, 2277 bytes, ")
    assert lines[1].endswith(" s, complete")
    assert lines[2].startswith("POST /v1/chat/completions -> 404 no recorded interaction matches")
    assert lines[3].startswith("POST /v1/chat/completions ended: 404, 0 events, ")


def test_the_report_has_every_entry_as_a_json_line(tmp_path: Path) -> None:
    report = tmp_path / "report.jsonl"
    with serve(pace="instant", report=report, faults=["empty:times=1"]) as server:
        for _ in range(2):
            httpx.post(server.url + "/v1/chat/completions", json=CHAT)
    # Read once the server stopped: a stream's end is noted just after its last byte reached the client.
    kept = [entry.to_json() for entry in server.journal]
    written = [json.loads(line) for line in report.read_text().splitlines()]
    assert written == kept
    assert [e["type"] for e in written] == ["received", "fault", "matched", "ended", "received", "matched", "ended"]


def test_entries_are_typed_values(tmp_path: Path) -> None:
    with serve(pace="instant") as server:
        httpx.post(server.url + "/v1/chat/completions", json=CHAT, headers={"X-SSE-Tape-Fault": "empty"})
        httpx.post(server.url + "/nowhere", json={})
    kinds = [type(e) for e in server.journal]
    assert kinds == [Received, FaultInjected, Matched, Ended, Received, Missed, Ended]


@pytest.mark.parametrize("limit", ["x", "-"])
def test_a_bad_journal_limit_is_a_400(limit: str) -> None:
    with serve(pace="instant") as server:
        got = httpx.get(server.url + f"/__sse_tape__/journal?limit={limit}")
    assert (got.status_code, got.json()) == (400, {"error": "limit must be a whole number"})


def test_what_request_headers_bring_is_kept_for_a_bounded_number_of_faults() -> None:
    state = MemoryStore(keep=100)
    injector = Injector([], seed=0, state=state)
    request = Request("POST", "/v1/chat/completions")
    for n in range(1000):
        chosen, _ = injector.choose(request, DIALECTS["openai-chat"], [parse_fault(f"empty:times={n + 1}")])
        for fault in chosen:
            state.note_injected(fault.spec)
    now = state.snapshot()
    assert len(now.counts) == len(now.injected) == 100
    assert list(now.counts)[-1] == "empty:times=1000"  # the newest are kept


def test_a_status_fault_is_said_with_its_status_not_the_recordings(tmp_path: Path) -> None:
    # The faults act before the match is said: its line names the status the client gets.
    lines: list[str] = []
    with serve(pace="instant", faults=["status:code=429"], log=lines.append) as server:
        assert httpx.post(server.url + "/v1/chat/completions", json=CHAT).status_code == 429
    [matched] = [e for e in server.journal if isinstance(e, Matched)]
    assert matched.status == 429
    assert not [line for line in lines if "-> 200" in line]
