"""Ollama's native API (`ollama-chat`, `ollama-generate`): NDJSON streams read by the official `ollama` client,
from the bundled cassettes, from an openai-chat recording translated, and from a tiny model; its errors before
and during the stream raise the client's `ResponseError`; recorded from a loopback NDJSON server byte for byte;
checked by the rules its streams keep."""

from __future__ import annotations

import itertools
import json
import signal
import time
from contextlib import closing, nullcontext
from dataclasses import replace
from pathlib import Path

import httpx
import ollama
import pytest
from click.testing import CliRunner
from framed import messages
from hypothesis import given, settings
from hypothesis import strategies as st
from processes import start
from upstream import OLLAMA_TEXT, Upstream, ollama_lines

from sse_tape import Cassette, Chunk, ServerSentEvent, bundled_cassettes, recording, serve
from sse_tape.cassette import Request
from sse_tape.checking import check_interaction
from sse_tape.cli import cli
from sse_tape.dialects import DIALECTS, Answer, for_request
from sse_tape.server import run_in_thread
from sse_tape.translation import translate

MODEL = "llama3.2"
HELLO = [{"role": "user", "content": "Hello!"}]
GREETING = "Hello! How can I help you today?"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK = [{"role": "user", "content": "Weather in Tokyo?"}]
RESULT = json.dumps({"city": "Tokyo", "temperature_c": 18, "conditions": "light rain"})


def bundled(name: str) -> Path:
    return next(p for p in bundled_cassettes() if p.name == name)


def tool_loop(client: ollama.Client, *, stream: bool) -> tuple[list[ollama.Message.ToolCall], str]:
    """A client's agent loop with one tool: the call the model asks for, then the answer after its result."""
    if stream:
        calls = [
            c for part in client.chat(MODEL, ASK, tools=[WEATHER], stream=True) for c in part.message.tool_calls or []
        ]
    else:
        calls = list(client.chat(MODEL, ASK, tools=[WEATHER]).message.tool_calls or [])
    turns = [*ASK, {"role": "assistant", "content": "", "tool_calls": calls}]
    turns.append({"role": "tool", "content": RESULT, "tool_name": "get_weather"})
    if stream:
        answer = "".join(p.message.content or "" for p in client.chat(MODEL, turns, tools=[WEATHER], stream=True))
    else:
        answer = client.chat(MODEL, turns, tools=[WEATHER]).message.content or ""
    return calls, answer


# --- the bundled cassettes ----------------------------------------------------------------------------------


def test_the_client_streams_the_bundled_greeting_line_by_line_and_gets_it_whole_without_a_stream() -> None:
    with serve(pace="instant") as server, closing(ollama.Client(host=server.url)) as client:
        parts = list(client.chat(MODEL, HELLO, stream=True))
        plain = client.chat(MODEL, HELLO)
        raw = httpx.post(f"{server.url}/api/chat", json={"model": MODEL, "messages": HELLO})  # stream by default
    assert "".join(p.message.content or "" for p in parts) == GREETING
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    last = parts[-1]
    assert (last.done_reason, last.eval_count, last.prompt_eval_count) == ("stop", 10, 27)
    assert last.eval_duration
    assert last.total_duration
    assert last.total_duration > last.eval_duration
    assert (plain.message.content, plain.done, plain.eval_count) == (GREETING, True, 10)
    assert raw.headers["content-type"] == "application/x-ndjson"
    assert len(raw.content.splitlines()) == len(parts)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "plain"])
def test_a_tool_loop_gets_the_call_with_its_arguments_an_object_then_the_answer(stream: bool) -> None:
    with serve(pace="instant") as server, closing(ollama.Client(host=server.url)) as client:
        calls, answer = tool_loop(client, stream=stream)
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [("get_weather", {"city": "Tokyo"})]
    assert answer == "It's 18°C with light rain in Tokyo right now."


def test_generate_streams_and_answers_whole_with_its_context() -> None:
    with serve(pace="instant") as server, closing(ollama.Client(host=server.url)) as client:
        parts = list(client.generate(MODEL, "Why is the sky blue?", stream=True))
        plain = client.generate(MODEL, "Why is the sky blue?")
        models = client.list()
    text = "".join(p.response or "" for p in parts)
    assert text.startswith("The sky looks blue because")
    assert parts[-1].done
    assert parts[-1].context
    assert parts[-1].eval_count == 18
    assert (plain.response, plain.done_reason) == (text, "stop")
    assert MODEL in [m.model for m in models.models]  # GET /api/tags, the models the recordings name


# --- an openai-chat recording, translated ------------------------------------------------------------------


def test_an_openai_chat_recording_converted_to_ollama_chat_is_read_by_the_client_and_converts_back(
    tmp_path: Path,
) -> None:
    source = Cassette.load(bundled("openai-chat.toml"))
    converted = Cassette([translate(i, DIALECTS["ollama-chat"]) for i in source], match_on=("method", "path"))
    converted.save(tmp_path / "ollama.toml")
    again = Cassette.load(tmp_path / "ollama.toml")
    assert all(i.response.header("content-type") == "application/x-ndjson" for i in again)
    assert all(check_interaction(i).violations == () for i in again)
    with serve(tmp_path / "ollama.toml", pace="instant") as server, closing(ollama.Client(host=server.url)) as client:
        greeting = "".join(p.message.content or "" for p in client.chat("local-model", HELLO, stream=True))
        calls, answer = tool_loop(client, stream=True)
    assert greeting == "Hi there! How can I help you today?"
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [("get_weather", {"city": "Tokyo"})]
    assert answer.startswith("It's 18°C")
    chat = DIALECTS["openai-chat"]
    for original, ollama_one in zip(source, again, strict=True):
        back = translate(ollama_one, chat)
        before, after = Answer.of(chat.decode(messages(original))), Answer.of(chat.decode(messages(back)))
        assert (after.text, [(c.name, json.loads(c.arguments)) for c in after.calls]) == (
            before.text,
            [(c.name, json.loads(c.arguments)) for c in before.calls],
        )
        assert chat.check(messages(back), back.request) == []


def test_convert_to_ollama_generate_names_the_tool_calls_it_cannot_carry(tmp_path: Path) -> None:
    out = tmp_path / "generate.toml"
    convert = ["convert", str(bundled("openai-chat.toml")), str(out), "--to-dialect", "ollama-generate"]
    refused = CliRunner().invoke(cli, convert)
    assert refused.exit_code == 2
    assert "#2 (POST /v1/chat/completions): ollama-generate cannot carry its tool calls (get_weather)" in refused.output
    assert not out.exists()
    assert CliRunner().invoke(cli, [*convert, "--lossy"]).exit_code == 0
    checked = CliRunner().invoke(cli, ["check", str(out)])
    assert (checked.exit_code, checked.output.splitlines()[-1]) == (0, "checked 3 interactions: 0 violations")


# --- errors in Ollama's words ------------------------------------------------------------------------------


def test_a_status_fault_is_ollamas_error_body_and_the_client_raises_response_error() -> None:
    with serve(pace="instant", faults=["status:code=404,message=model 'llama3.2' not found"]) as server:
        raw = httpx.post(f"{server.url}/api/chat", json={"model": MODEL, "messages": HELLO})
        with closing(ollama.Client(host=server.url)) as client, pytest.raises(ollama.ResponseError) as caught:
            list(client.chat(MODEL, HELLO, stream=True))
    assert (raw.status_code, raw.json()) == (404, {"error": "model 'llama3.2' not found"})
    assert (caught.value.status_code, caught.value.error) == (404, "model 'llama3.2' not found")


def test_an_error_mid_stream_is_an_error_line_after_which_nothing_comes() -> None:
    with serve(pace="instant", faults=["error:at=3,message=model runner has unexpectedly stopped"]) as server:
        raw = httpx.post(f"{server.url}/api/chat", json={"model": MODEL, "messages": HELLO})
        got: list[str] = []
        with closing(ollama.Client(host=server.url)) as client:
            parts = client.chat(MODEL, HELLO, stream=True)
            got += [next(parts).message.content or "" for _ in range(3)]
            with pytest.raises(ollama.ResponseError) as caught:
                next(parts)
    lines = raw.content.splitlines()
    assert len(lines) == 4
    assert json.loads(lines[-1]) == {"error": "model runner has unexpectedly stopped"}
    assert "".join(got) == "Hello! How"
    assert caught.value.error == "model runner has unexpectedly stopped"


@pytest.mark.parametrize(
    ("fault", "text", "raises"),
    [
        ("fragment:3", GREETING, None),  # lines split anywhere, even inside a character: the client joins them
        ("eol:crlf", GREETING, None),
        ("duplicate:at=1", "Hello!! How can I help you today?", None),
        ("corrupt:at=2", "Hello!", json.JSONDecodeError),
        ("disconnect:after=3", "Hello! How", httpx.RemoteProtocolError),  # cut inside the chunked body
    ],
)
def test_wire_faults_act_on_the_lines_as_the_client_reads_them(
    fault: str, text: str, raises: type[Exception] | None
) -> None:
    got: list[str] = []
    with serve(pace="instant", faults=[fault]) as server, closing(ollama.Client(host=server.url)) as client:
        parts = client.chat(MODEL, HELLO, stream=True)
        with pytest.raises(raises) if raises is not None else nullcontext():
            for part in parts:
                got.append(part.message.content or "")
    assert "".join(got) == text


@settings(max_examples=50)
@given(cuts=st.lists(st.integers(min_value=0, max_value=2100), max_size=10))
def test_any_split_of_a_bundled_stream_decodes_to_the_same_events(cuts: list[int]) -> None:
    for name in ("ollama-chat.toml", "ollama-generate.toml"):
        for interaction in Cassette.load(bundled(name)):
            dialect = DIALECTS[name.removesuffix(".toml")]
            body = interaction.response.body
            at = sorted({min(c, len(body)) for c in cuts})
            pieces = [body[a:b] for a, b in zip([0, *at], [*at, len(body)], strict=True)]
            split = replace(interaction.response, chunks=tuple(Chunk(0.0, piece) for piece in pieces))
            again = replace(interaction, response=split)
            assert dialect.decode(messages(again)) == dialect.decode(messages(interaction))


# --- recorded from a loopback NDJSON server ----------------------------------------------------------------


def test_a_recorded_ndjson_stream_passes_through_untouched_and_replays_byte_for_byte(tmp_path: Path) -> None:
    cassette = tmp_path / "ollama.toml"
    seen: list[float] = []
    parts = []
    with (
        run_in_thread(Upstream()) as up,
        recording(cassette, up.url) as server,
        closing(ollama.Client(host=server.url)) as client,
    ):
        sent = time.monotonic()
        for part in client.chat(MODEL, HELLO, stream=True):
            seen.append(time.monotonic() - sent)
            parts.append(part)
    assert [p.message.content for p in parts[:-1]] == OLLAMA_TEXT
    assert all(b - a >= 0.04 for a, b in itertools.pairwise(seen))  # each line came as the upstream wrote it
    (interaction,) = Cassette.load(cassette).interactions
    assert [c.data for c in interaction.response.chunks] == ollama_lines()
    assert check_interaction(interaction).violations == ()
    with serve(cassette, pace="instant") as replay:
        body = httpx.post(f"{replay.url}/api/chat", content=interaction.request.body).content
    assert body == b"".join(ollama_lines())


# --- check ---------------------------------------------------------------------------------------------------


def _lines(*objects: object) -> list[ServerSentEvent]:
    return [ServerSentEvent(data=json.dumps(obj)) for obj in objects]


def test_check_names_each_rule_a_hand_broken_stream_breaks() -> None:
    head = {"model": MODEL, "created_at": "2025-11-22T09:20:00.1Z"}
    said = {**head, "message": {"role": "assistant", "content": "Hi"}, "done": False}
    call = {"function": {"name": "get_weather", "arguments": '{"city": "Tokyo"}'}}
    done = {**head, "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop"}
    stats = {"total_duration": 10, "eval_count": 1.5, "eval_duration": -1}
    stream = _lines(
        said,
        {**said, "message": {"role": "assistant", "content": "", "tool_calls": [call]}},
        {**done, "done_reason": "finished", **stats},
        said,
    )
    found = [str(v) for v in DIALECTS["ollama-chat"].check(stream)]
    assert found == [
        "event 2: tool call 0 (get_weather) arguments are not an object",
        "event 3: done_reason 'finished' is not one of stop, length, load, unload",
        "event 3: eval_count is 1.5, not a count (a whole number, at least 0)",
        "event 3: eval_duration is -1, not a count (a whole number, at least 0)",
        "event 4: line after the done line",
    ]
    assert [str(v) for v in DIALECTS["ollama-chat"].check(_lines(said))] == ["no line with done: true"]
    assert [str(v) for v in DIALECTS["ollama-chat"].check(_lines(said, {"error": "boom"}, said))] == [
        "event 3: line after the error line"
    ]
    assert [str(v) for v in DIALECTS["ollama-chat"].check(_lines({**done, "done_reason": "length"}))] == [
        "event 1: done line without total_duration, eval_count, eval_duration"
    ]


# --- a tiny model ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_serve_model_answers_the_client_in_ndjson(tiny_model_path: Path) -> None:
    process, url = start(["serve", "--model", str(tiny_model_path), "--port", "0", "--seed", "3"])
    try:
        with closing(ollama.Client(host=url)) as client:
            parts = list(client.chat("tiny", HELLO, stream=True, options={"num_predict": 6}))
            plain = client.chat("tiny", HELLO, options={"num_predict": 6})
        raw = httpx.post(f"{url}/api/chat", json={"model": "tiny", "messages": HELLO, "options": {"num_predict": 4}})
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert "".join(p.message.content or "" for p in parts).strip()
    assert (parts[-1].done, parts[-1].done_reason, parts[-1].eval_count) == (True, "length", 6)
    assert parts[-1].eval_duration
    assert parts[-1].eval_duration > 0
    assert plain.message.content
    assert plain.done_reason == "length"
    assert raw.headers["content-type"] == "application/x-ndjson"
    assert all(json.loads(line)["model"] == "tiny" for line in raw.content.splitlines())


def test_the_chat_path_ollama_shares_with_an_ai_sdk_apps_route_is_told_apart_by_the_body() -> None:
    ollama = Request(
        "POST", "/api/chat", body=b'{"model": "llama3.2", "messages": [{"role": "user", "content": "Hi"}]}'
    )
    use_chat = Request("POST", "/api/chat", body=b'{"id": "c1", "messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "Hi"}]}], "trigger": "submit-message"}')  # fmt: skip
    assert for_request(ollama) is DIALECTS["ollama-chat"]
    assert for_request(use_chat) is None  # no API's: its recording is told by its stream (the UI message stream)
