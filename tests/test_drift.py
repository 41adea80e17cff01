"""`sse-tape check --drift`: each recorded request re-sent to a real server, and how its answer's shape drifted.

Against llama-cpp-python's server (the tiny model) and our own upstream; the shapes compared are those of the
bundled cassettes and of real recordings, edited the way an API changes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from upstream import Upstream

from sse_tape import Cassette, Chunk, End, Interaction, Request, Response, bundled_cassettes, record_once
from sse_tape.drift import AnswerShape, DriftCheck, resent_request, shape_drift
from sse_tape.redaction import REDACTED
from sse_tape.server import run_in_thread

BUNDLED = {p.stem: p for p in bundled_cassettes()}
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0, "seed": 1}


def drift(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sse_tape", "check", "--drift", *args], capture_output=True, text=True, timeout=120
    )


def edited(interaction: Interaction, edit: Callable[[list[bytes]], list[bytes]]) -> Interaction:
    """`interaction` with the data of its SSE blocks (a block per chunk, as llama-cpp-python writes them)
    changed by `edit`."""
    chunks = [chunk.data for chunk in interaction.response.chunks]
    new = tuple(Chunk(n * 0.01, data) for n, data in enumerate(edit(chunks)))
    return replace(interaction, response=replace(interaction.response, chunks=new))


def each_json(change: Callable[[dict[str, object]], None]) -> Callable[[list[bytes]], list[bytes]]:
    """An edit that changes the JSON of each `data:` block but `[DONE]`."""

    def edit(chunks: list[bytes]) -> list[bytes]:
        out = []
        for data in chunks:
            text = data.decode()
            if text.startswith("data: {"):
                value = json.loads(text.removeprefix("data: "))
                change(value)
                text = f"data: {json.dumps(value)}\n\n"
            out.append(text.encode())
        return out

    return edit


@pytest.fixture(scope="module")
def recorded(llama_server: str, tmp_path_factory: pytest.TempPathFactory) -> Cassette:
    """A stream and a JSON answer from llama-cpp-python's server, recorded with `record_once`."""
    cassette = tmp_path_factory.mktemp("drift") / "llama.toml"
    url = llama_server + "/v1/chat/completions"
    headers = [("content-type", "application/json")]
    for body in ({**CHAT, "stream": True}, CHAT):
        asyncio.run(record_once(url, cassette, method="POST", headers=headers, body=json.dumps(body).encode()))
    return Cassette.load(cassette)


def test_a_recording_of_llama_cpp_server_shows_no_drift_against_it(
    recorded: Cassette, llama_server: str, tmp_path: Path
) -> None:
    cassette = recorded.save(tmp_path / "same.toml")
    result = drift(str(cassette), "--upstream", llama_server)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        f"{cassette} #1 POST /v1/chat/completions: same shape",
        f"{cassette} #2 POST /v1/chat/completions: same shape",
        f"re-sent 2 requests to {llama_server}: 0 drifted",
    ]


def test_recorded_answers_edited_show_exactly_that_drift(recorded: Cassette, llama_server: str, tmp_path: Path) -> None:
    stream, answer = recorded.interactions

    def extra(chunk: dict[str, object]) -> None:  # a field the server does not send (any longer)
        for choice in chunk["choices"]:  # type: ignore[attr-defined]
            choice.setdefault("delta", {})["reasoning_content"] = ""

    def fewer(chunk: dict[str, object]) -> None:  # a field the server sends, that it did not
        del chunk["created"]

    def done_first(chunks: list[bytes]) -> list[bytes]:  # the terminal frame before the last chunk
        return [*chunks[:-2], chunks[-1], chunks[-2]]

    plain = json.loads(answer.response.body)
    del plain["usage"]
    plain["system_fingerprint"] = "fp_1"
    edited_answer = replace(answer, response=replace(answer.response, chunks=(Chunk(0.0, json.dumps(plain).encode()),)))
    cassette = Cassette(
        [
            edited(stream, each_json(extra)),
            edited(stream, each_json(fewer)),
            edited(stream, done_first),
            edited_answer,
            stream,
        ]
    ).save(tmp_path / "edited.toml")
    result = drift(str(cassette), "--upstream", llama_server)
    assert (result.returncode, result.stderr) == (1, "")
    where = f"{cassette} #{{}} POST /v1/chat/completions"
    assert result.stdout.splitlines() == [
        where.format(1) + ": drifted: missing field choices[].delta.reasoning_content",
        where.format(2) + ": drifted: new field created",
        where.format(3) + ": drifted: event order message > [DONE] > message, now message > [DONE]",
        where.format(4) + ": drifted: new field usage; missing field system_fingerprint",
        where.format(5) + ": same shape",
        f"re-sent 5 requests to {llama_server}: 4 drifted",
    ]
    rows = json.loads(drift(str(cassette), "--upstream", llama_server, "--json").stdout)
    assert [row["drift"] for row in rows] == [
        ["missing field choices[].delta.reasoning_content"],
        ["new field created"],
        ["event order message > [DONE] > message, now message > [DONE]"],
        ["new field usage", "missing field system_fingerprint"],
        [],
    ]


def test_an_upstream_that_is_down_or_no_url_is_one_line_and_exit_2(recorded: Cassette, tmp_path: Path) -> None:
    cassette = recorded.save(tmp_path / "c.toml")
    down = drift(str(cassette), "--upstream", "http://user:hunter2@127.0.0.1:9")
    assert down.returncode == 2
    assert down.stderr.startswith("Error: cannot reach http://")
    assert "127.0.0.1:9/v1/chat/completions: " in down.stderr
    assert len(down.stderr.splitlines()) == 1
    assert "hunter2" not in down.stdout + down.stderr
    bad = drift(str(cassette), "--upstream", "ftp://example.com")
    assert (bad.returncode, bad.stderr) == (
        2,
        "Error: 'ftp://example.com': give an http:// or https:// URL with a host\n",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["c.toml"], "check --drift CASSETTE... --upstream URL: give both"),
        (["--upstream", "http://127.0.0.1:9"], "check --drift CASSETTE... --upstream URL: give both"),
        (["c.toml", "--upstream", "http://127.0.0.1:9", "--secrets"], "--drift re-sends the cassettes' requests"),
        (["c.toml", "--upstream", "http://127.0.0.1:9", "-d", "{}"], "--drift re-sends the cassettes' requests"),
    ],
)
def test_drift_usage_errors_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    result = drift(*args)
    assert result.returncode == 2
    assert result.stderr.startswith(f"Error: {message}")
    assert len(result.stderr.splitlines()) == 1


def test_upstream_without_drift_is_a_usage_error() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sse_tape", "check", "c.toml", "--upstream", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (2, "Error: --upstream goes with --drift\n")


@pytest.fixture
def our_upstream() -> Iterator[Upstream]:
    with run_in_thread(Upstream()) as up:
        yield up


def test_the_credentials_given_go_in_place_of_those_redacted_and_are_never_printed(
    our_upstream: Upstream, tmp_path: Path
) -> None:
    request = Request(
        "POST",
        "/leaky/chat",
        f"alt=sse&key={REDACTED}",
        (("authorization", REDACTED), ("x-api-key", REDACTED), ("content-type", "application/json")),
        b"{}",
    )
    sse = (("content-type", "text/event-stream"),)
    cassette = Cassette([Interaction(request, Response(200, sse, (Chunk(0.0, b"data: ok\n\n"),)))])
    path = cassette.save(tmp_path / "keys.toml")
    result = drift(str(path), "--upstream", our_upstream.url, "-H", "Authorization: Bearer sk-live-abc123")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"{path} #1 POST /leaky/chat: same shape"
    [seen] = our_upstream.seen_headers
    assert seen["Authorization"] == "Bearer sk-live-abc123"
    assert REDACTED not in json.dumps(seen)  # neither the redacted key header nor the query's key went
    assert our_upstream.seen_paths == ["/leaky/chat?alt=sse"]
    assert "sk-live-abc123" not in result.stdout + result.stderr


def test_a_recording_cut_short_is_not_compared_and_an_error_says_its_message(
    our_upstream: Upstream, tmp_path: Path
) -> None:
    sse = (("content-type", "text/event-stream"),)
    cut = Interaction(
        Request("GET", "/feed"), Response(200, sse, (Chunk(0.0, b"id: 1\ndata: x\n\n"),), End.CLIENT_GONE)
    )
    # Recorded 200, the upstream answers it 429 now.
    limited = Interaction(Request("POST", "/limited", body=b"{}"), Response(200, sse, (Chunk(0.0, b"data: ok\n\n"),)))
    path = Cassette([cut, limited]).save(tmp_path / "c.toml")
    result = drift(str(path), "--upstream", our_upstream.url)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{path} #1 GET /feed: not compared: recorded cut short (client-gone), not the server's whole answer",
        f"{path} #2 POST /limited: drifted: status 200, now 429: Rate limit reached",
        f"re-sent 1 request to {our_upstream.url}: 1 drifted",
    ]


# The shapes alone, of the bundled cassettes' answers.


def test_the_kinds_of_events_are_their_names_or_the_type_their_data_gives() -> None:
    responses = AnswerShape.of(Cassette.load(BUNDLED["openai-responses"]).interactions[0])
    assert responses.kinds[:2] == ("response.created", "response.in_progress")
    assert responses.kinds[-2:] == ("response.completed", "[DONE]")  # as the gateway of the seeds sends it
    anthropic = AnswerShape.of(Cassette.load(BUNDLED["anthropic-messages"]).interactions[0])
    assert anthropic.kinds[:2] == ("message_start", "content_block_start")
    chat = AnswerShape.of(Cassette.load(BUNDLED["openai-chat"]).interactions[0])
    assert chat.kinds == ("message", "[DONE]")
    assert ("message", "choices[].delta.content") in chat.fields
    assert ("message", "choices[].delta") in chat.fields


def test_a_field_of_one_kind_of_event_is_said_with_its_kind_and_a_new_kind_once() -> None:
    first = Cassette.load(BUNDLED["anthropic-messages"]).interactions[0]

    def more(chunks: list[bytes]) -> list[bytes]:
        out = []
        for data in chunks:
            text = data.decode()
            if "event: message_delta" in text:
                text = text.replace('"usage":{', '"usage":{"service_tier":"standard",', 1)
            out.append(text.encode())
        return [*out, b'event: ping_extra\ndata: {"type": "ping_extra", "extra": 1}\n\n']

    now = AnswerShape.of(edited(first, more))
    assert shape_drift(AnswerShape.of(first), now) == [
        "new event type ping_extra",
        "new field usage.service_tier (in message_delta)",
    ]


def test_the_keys_of_a_calls_arguments_are_its_text_not_its_shape() -> None:
    call = Cassette.load(BUNDLED["gemini"]).interactions[1]  # get_weather(city="Tokyo")

    def other_arguments(chunks: list[bytes]) -> list[bytes]:
        return [c.replace(b'"args": {"city": "Tokyo"}', b'"args": {"place": "Tokyo", "unit": "C"}') for c in chunks]

    now = edited(call, other_arguments)
    assert now.response.body != call.response.body
    assert shape_drift(AnswerShape.of(call), AnswerShape.of(now)) == []


def test_a_stream_answered_now_as_one_json_answer_says_only_that() -> None:
    chat = Cassette.load(BUNDLED["openai-chat"]).interactions[0]
    headers = (("content-type", "application/json"),)
    plain = replace(chat, response=Response(200, headers, (Chunk(0.0, b'{"id": "x", "choices": []}'),)))
    assert shape_drift(AnswerShape.of(chat), AnswerShape.of(plain)) == ["a stream, now one JSON answer"]
    assert shape_drift(AnswerShape.of(plain), AnswerShape.of(chat)) == ["one JSON answer, now a stream"]


def test_an_error_answers_message_is_said_with_credentials_redacted() -> None:
    chat = Cassette.load(BUNDLED["openai-chat"]).interactions[0]
    body = b'{"error": {"message": "Incorrect API key provided: sk-proj-abcdefghijklmnopqrstuvwxyz0123456789."}}'
    refused = replace(chat, response=Response(401, (("content-type", "application/json"),), (Chunk(0.0, body),)))
    [said] = shape_drift(AnswerShape.of(chat), AnswerShape.of(refused))
    assert said == f"status 200, now 401: Incorrect API key provided: {REDACTED}."


def test_resent_requests_leave_out_what_was_redacted_and_take_the_headers_given() -> None:
    request = Request(
        "POST", "/v1beta/models/m:generateContent", f"key={REDACTED}&alt=sse", (("x-goog-api-key", REDACTED),), b"{}"
    )
    again = resent_request(request, [("x-goog-api-key", "AIza-given")])
    assert (again.query, again.headers, again.body) == ("alt=sse", (("x-goog-api-key", "AIza-given"),), b"{}")
    check = DriftCheck("c.toml", 1, "POST", "/x")
    assert (check.drifted, check.line()) == (False, "c.toml #1 POST /x: same shape")


def test_a_cassette_that_cannot_be_read_is_one_line_the_others_are_compared_and_exit_2(
    our_upstream: Upstream, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("format_version = 1\n[[interactions]\n")
    sse = (("content-type", "text/event-stream"),)
    good = Cassette([Interaction(Request("GET", "/leaky/x"), Response(200, sse, (Chunk(0.0, b"data: ok\n\n"),)))])
    path = good.save(tmp_path / "good.toml")
    result = drift(str(broken), str(path), "--upstream", our_upstream.url)
    assert result.returncode == 2
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{broken}: truncated or corrupt TOML")
    assert lines[1:] == [
        f"{path} #1 GET /leaky/x: same shape",
        f"re-sent 1 request to {our_upstream.url}: 0 drifted; 1 cassette unreadable",
    ]
    rows = json.loads(drift(str(broken), str(path), "--upstream", our_upstream.url, "--json").stdout)
    assert [(row["interaction"], row["error"] is not None, row["drift"]) for row in rows] == [
        (None, True, []),
        (1, False, []),
    ]


def test_a_key_the_recording_redacted_and_none_given_is_named_when_the_server_refuses(
    our_upstream: Upstream, tmp_path: Path
) -> None:
    request = Request("POST", "/guarded", "", (("Authorization", REDACTED),), b"{}")
    sse = (("content-type", "text/event-stream"),)
    path = Cassette([Interaction(request, Response(200, sse, (Chunk(0.0, b"data: ok\n\n"),)))]).save(
        tmp_path / "k.toml"
    )
    refused = drift(str(path), "--upstream", our_upstream.url)
    assert refused.returncode == 1
    assert refused.stdout.splitlines()[0] == (
        f"{path} #1 POST /guarded: drifted: status 200, now 401: Incorrect API key provided. "
        "(the recorded Authorization was redacted, so not sent: give it with -H)"
    )
    given = drift(str(path), "--upstream", our_upstream.url, "-H", "Authorization: Bearer sk-guarded-key")
    assert (given.returncode, given.stdout.splitlines()[0]) == (0, f"{path} #1 POST /guarded: same shape")
