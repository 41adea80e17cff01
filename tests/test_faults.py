"""Fault injection, seen by the clients users run: the official openai SDK, httpx-sse, httpx."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import processes
import pytest
from allocations import peak_allocated
from clients import openai_client
from framed import messages
from httpx_sse import connect_sse
from hypothesis import given
from hypothesis import strategies as st
from upstream import Upstream, chat_chunk
from waits import SAFETY_NET, auntil

from sse_tape import (
    Cassette,
    Chunk,
    ConfigError,
    End,
    Interaction,
    MockServer,
    Pacing,
    Request,
    Response,
    SSEDecoder,
    aserve,
    bundled_cassettes,
    serve,
)
from sse_tape.dialects import DIALECTS, dialect_for
from sse_tape.dialects.events import Error
from sse_tape.faults import (
    FAULTS,
    PROFILES,
    Act,
    Fault,
    FaultedStream,
    FaultKind,
    Run,
    Stage,
    apply,
    load_profile,
    parse_fault,
    parse_faults,
    register,
)
from sse_tape.framing import SSE
from sse_tape.journal import FaultInjected
from sse_tape.matching import framing_of
from sse_tape.options import ServeOptions
from sse_tape.plan import Plan
from sse_tape.position import Position
from sse_tape.synth.batch import open_model
from sse_tape.synth.live import Synthesizer
from sse_tape.synth.pipeline import Settings

CHAT_BODY = {
    "model": "local-model",
    "messages": [{"role": "user", "content": "Hello!"}],
    "max_tokens": 16,
    "stream": True,
}
TEXT = "Hi there! How can I help you today?"


@pytest.fixture(scope="module")
def server() -> Iterator[MockServer]:
    with serve(pace="instant", match_on=["method", "path"]) as running:
        yield running


def sdk(server: MockServer, retries: int = 0) -> openai.OpenAI:
    return openai_client(server.url + "/v1", api_key="x", max_retries=retries)


def chat(server: MockServer, fault: str, retries: int = 0) -> str:
    stream = sdk(server, retries).chat.completions.create(**CHAT_BODY, extra_headers={"X-SSE-Tape-Fault": fault})
    return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def raw(server: MockServer, fault: str, path: str = "/v1/chat/completions", body: Any = None) -> httpx.Response:
    return httpx.post(server.url + path, json=body or CHAT_BODY, headers={"X-SSE-Tape-Fault": fault}, timeout=10)


def injections(server: MockServer) -> list[FaultInjected]:
    return [entry for entry in server.journal if isinstance(entry, FaultInjected)]


def events(data: bytes) -> list[tuple[str, str]]:
    return [(e.event, e.data) for e in SSEDecoder().feed(data)]


# --- the grammar ----------------------------------------------------------------------------------


def test_grammar() -> None:
    fault = parse_fault("disconnect:after=50%,mode=reset,p=0.25,times=3,path=/v1/chat/completions")
    assert (fault.name, fault["after"], fault["mode"]) == ("disconnect", Position.parse("50%"), "reset")
    assert (fault.p, fault.times, fault.path) == (0.25, 3, "/v1/chat/completions")


@pytest.mark.parametrize(
    ("short", "long"),
    [
        ("status:429", "status:code=429"),
        ("eol:crlf", "eol:style=crlf"),
        ("error:5", "error:at=5"),
        ("disconnect:10", "disconnect:after=10"),
        ("stall:5,for=3s", "stall:at=5,for=3s"),
        ("fragment:3,p=0.5", "fragment:size=3,p=0.5"),
    ],
)
def test_a_faults_main_value_needs_no_key(short: str, long: str) -> None:
    a, b = parse_fault(short), parse_fault(long)
    assert (a.kind, a.values, a.p, a.times, a.path) == (b.kind, b.values, b.p, b.times, b.path)


@pytest.mark.parametrize(
    ("spec", "seconds"),
    [("stall:for=250ms", 0.25), ("stall:for=1.5s", 1.5), ("stall:for=1m", 60.0), ("stall:for=0.5m", 30.0),
     ("stall:for=1h", 3600.0)],
)  # fmt: skip
def test_durations_are_written_in_ms_s_m_or_h(spec: str, seconds: float) -> None:
    assert parse_fault(spec)["for"] == seconds


def test_a_time_position_takes_the_same_units() -> None:
    assert parse_fault("disconnect:after=1m")["after"] == Position.parse("60s")


def test_every_key_has_its_default_once_parsed() -> None:
    stall = parse_fault("stall")
    assert (stall["at"], stall["for"], stall["heartbeat"]) == (Position.parse("50%"), 5.0, None)
    assert parse_fault("garbage")["size"] == 64
    assert parse_fault("latency")["delay"] == 0.1


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("disconect", "unknown fault 'disconect' (did you mean 'disconnect'?); faults are status, ttfb, hang, empty"),
        (
            "eror:3",
            "unknown fault 'eror' (did you mean 'error'?); faults are status, ttfb, hang, empty, session-expired, error, drop",
        ),
        ("wobble", "unknown fault 'wobble'; faults are status, ttfb, hang, empty, session-expired, error, drop"),
        ("disconnect:afterr=5", "disconnect takes no 'afterr' (did you mean 'after'?); its keys are after, mode, p"),
        ("error:at=2,at=6", "at is given twice (2 and 6); give it once"),
        ("error:5,at=6", "at is given twice (5 and 6); give it once"),
        ("stall:for=1s,heartbeat=1s,for=2s", "for is given twice (1s and 2s); give it once"),
        ("latency:p=0.5,p=1", "p is given twice (0.5 and 1); give it once"),
        ("disconnect:after", "'after' is not key=value"),
        ("error:at=half", "'half' is not a position: write 5 (events), 50%, 200b or 1.5s"),
        ("status", "status needs code=, such as status:code=429"),
        ("status:code=42", "code '42' is not an HTTP status"),
        ("stall:for=soon", "'soon' is not a duration: write it like 20ms, 1.5s, 2m or 1h"),
        ("stall:for=2h", "for '2h' is out of bounds: from 0 s to 3600 s"),
        ("drop:at=foo", "'foo' is not a position: write 5 (events), 50%, 200b, 1.5s, role (the role frame) or done"),
        ("disconnect:mode=explode", "mode 'explode': use close or reset"),
        ("fragment:size=0", "size '0' is not a whole number above 0"),
        ("latency:p=2", "p is a probability from 0 to 1"),
        ("disconnect:after=nan%", "'nan%' is not a position: it must be 0 or more"),
        ("disconnect:after=inf%", "'inf%' is not a position"),
        ("error:at=-3b", "'-3b' is not a position: it must be 0 or more"),
        ("error:at=150%", "'150%' is not a position"),
        ("status:code=101", "code '101' is not an HTTP status with a body"),
        ("status:code=204", "code '204' is not an HTTP status with a body"),
        # Every value is bounded: no spec can make a server wait for ever or build a body of any size.
        (f"stall:at=1,for={'9' * 400}s,heartbeat=1s", "for '" + "9" * 400 + "s' is out of bounds: from 0 s to 3600 s"),
        ("stall:for=20000s,heartbeat=1ms", "for '20000s' is out of bounds: from 0 s to 3600 s"),
        ("stall:heartbeat=0ms", "heartbeat '0ms' is out of bounds: from 0.001 s to 3600 s"),
        ("garbage:size=300000000", "size '300000000' is out of bounds: at most 16,777,216"),
        ("fragment:size=" + "9" * 500, "is out of bounds: at most 1,048,576"),
        ("error:at=" + "9" * 400, "is not a position: write 5 (events)"),
        ("error:at=99999999999", "'99999999999' is past any stream: at most 1,000,000,000 events"),
        ("empty:times=" + "9" * 500, "times '99999999999999999999' is out of bounds: at most 1,000,000,000"),
        ("error:message=" + "x" * 1001, "message is 1,001 characters long: at most 1,000"),
        ("latency:delay=61s", "delay '61s' is out of bounds: from 0 s to 60 s"),
        ("empty:p=" + "9" * 400, "p is a probability from 0 to 1"),
        ("empty:p=1," + "x" * 2000, "a spec is at most 2,000 characters"),
        # Two faults in one, as a header gives them: the `;` told, after what it broke.
        (
            "status:code=429;error:at=2",
            "code '429;error:at=2' is not an HTTP status with a body (200-599, not 204 or 304); `;` separates "
            "faults in a request's header only: give each fault on its own",
        ),
    ],
)
def test_bad_specs_name_the_bad_part(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_fault(spec)
    assert message in str(info.value)
    assert len(str(info.value)) < 3000


def serve_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`sse-tape serve ...` that is expected to stop at start-up."""
    return subprocess.run(
        [sys.executable, "-m", "sse_tape", "serve", *args], capture_output=True, text=True, timeout=60
    )


def test_a_bad_fault_stops_serve_at_start_up_with_one_line() -> None:
    result = serve_cli("--fault", "disconnect:afterr=5")
    assert (result.returncode, result.stderr) == (
        2,
        "Error: fault 'disconnect:afterr=5': disconnect takes no 'afterr' (did you mean 'after'?); "
        "its keys are after, mode, p, path, rpc, times\n",
    )


def test_a_bad_fault_header_is_a_400_naming_it(server: MockServer) -> None:
    got = raw(server, "status:code=abc")
    assert got.status_code == 400
    assert (
        got.json()["error"]["message"]
        == "sse-tape: X-SSE-Tape-Fault: fault 'status:code=abc': code 'abc' is not an HTTP status with a body (200-599, not 204 or 304)"
    )


# --- before the stream ---------------------------------------------------------------------------


def test_429_once_is_retried_by_the_sdk_which_then_succeeds() -> None:
    with serve(pace="instant", faults=["status:code=429,retry_after=1,times=1"]) as running:
        assert chat(running, "", retries=2) == TEXT
        assert running.control.snapshot().injected == {"status:code=429,retry_after=1,times=1": 1}


def test_status_uses_the_dialects_error_shape_and_retry_after(server: MockServer) -> None:
    got = raw(server, "status:code=429,retry_after=7,message=slow down")
    assert (got.status_code, got.headers["retry-after"]) == (429, "7")
    assert got.json()["error"]["message"] == "slow down"
    lms = raw(server, "status:code=503", path="/api/v1/chat", body={"model": "m", "input": "?", "stream": True})
    assert lms.json() == {"error": {"type": "internal_error", "message": "injected by sse-tape: status 503"}}


def test_a_429_on_openai_paths_is_openais_rate_limit_body_as_the_sdk_sees_it(server: MockServer) -> None:
    with pytest.raises(openai.RateLimitError) as raised:
        chat(server, "status:429")
    assert (raised.value.type, raised.value.code) == ("requests", "rate_limit_exceeded")
    responses = raw(server, "status:429", path="/v1/responses", body={"model": "m", "input": "?", "stream": True})
    assert responses.json() == {
        "error": {
            "message": "injected by sse-tape: status 429",
            "type": "requests",
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }


def test_a_status_replaces_the_stream_so_stream_faults_pass_it_by(server: MockServer) -> None:
    got = raw(server, "status:code=500;error:at=2;fragment:size=1")
    assert got.status_code == 500
    assert got.json()["error"]["message"] == "injected by sse-tape: status 500"


def test_empty_is_a_200_without_a_body(server: MockServer) -> None:
    got = raw(server, "empty")
    assert (got.status_code, got.content, got.headers["content-length"]) == (200, b"", "0")
    assert chat(server, "empty") == ""


async def test_ttfb_holds_the_headers_back() -> None:
    async with aserve(pace="instant", match_on=["path"]) as running, httpx.AsyncClient() as client:
        loop = asyncio.get_running_loop()
        started = loop.time()
        async with client.stream(
            "POST",
            running.url + "/v1/chat/completions",
            json=CHAT_BODY,
            headers={"X-SSE-Tape-Fault": "ttfb:delay=300ms"},
        ):
            assert loop.time() - started >= 0.29  # a floor: the headers cannot come sooner


async def test_hang_answers_nothing_and_leaks_nothing_when_the_client_gives_up() -> None:
    async with aserve(pace="instant", match_on=["path"]) as running:
        baseline = len(asyncio.all_tasks())
        async with httpx.AsyncClient(timeout=0.3) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.post(
                    running.url + "/v1/chat/completions", json=CHAT_BODY, headers={"X-SSE-Tape-Fault": "hang"}
                )
        async with asyncio.timeout(SAFETY_NET):
            await running.control.idle()
        assert running.control.snapshot().streams == 0
        await auntil(lambda: len(asyncio.all_tasks()) == baseline, "the hanging answer's task to end")


# --- during the stream ------------------------------------------------------------------------------


def test_sdk_raises_the_injected_mid_stream_error(server: MockServer) -> None:
    with pytest.raises(openai.APIError, match="model crashed"):
        chat(server, "error:at=3,message=model crashed,code=model_error")
    body = raw(server, "error:at=3,message=model crashed").content
    assert events(body)[-2:] == [
        ("error", '{"error":{"message":"model crashed","type":"server_error","code":null}}'),
        ("message", "[DONE]"),
    ]
    assert len(events(body)) == 5  # three events, then the error and its [DONE]


def test_responses_error_is_response_failed_with_what_came_before(server: MockServer) -> None:
    body = {"model": "claude-sonnet-4-20250514", "input": "Hello!", "stream": True}
    got = events(
        raw(server, "error:at=6,message=Request timed out,code=request_timeout", "/v1/responses", body).content
    )
    failed = json.loads(got[-2][1])
    assert got[-2][0] == "response.failed"
    assert failed["response"]["error"] == {"code": "request_timeout", "message": "Request timed out"}
    assert got[-1] == ("message", "[DONE]")
    assert (
        DIALECTS["openai-responses"].check(SSEDecoder().feed(raw(server, "error:at=6", "/v1/responses", body).content))
        == []
    )


def test_lmstudio_error_is_followed_by_chat_end_with_the_partial_result(server: MockServer) -> None:
    body = {"model": "m", "input": "?", "stream": True}
    with (
        httpx.Client() as client,
        connect_sse(
            client,
            "POST",
            server.url + "/api/v1/chat",
            json=body,
            headers={"X-SSE-Tape-Fault": "error:at=33,type=internal_error,message=boom"},
        ) as source,
    ):
        got = [(e.event, e.json()) for e in source.iter_sse()]
    assert got[-2] == ("error", {"type": "error", "error": {"type": "internal_error", "message": "boom"}})
    assert got[-1][0] == "chat.end"
    message = "".join(d["content"] for kind, d in got if kind == "message.delta")
    assert got[-1][1]["result"]["output"][-1] == {"type": "message", "content": message}
    assert message  # what had streamed before the error, not the whole answer
    assert message != "The current top‑trending model on Hugging Face is **moonshotai/Kimi-K2-Thinking**."  # noqa: RUF001


@pytest.mark.parametrize("mode", ["close", "reset"])
def test_sdk_raises_on_a_disconnect(server: MockServer, mode: str) -> None:
    with pytest.raises(openai.APIConnectionError):
        chat(server, f"disconnect:after=3,mode={mode}")


def read_until_broken(server: MockServer, fault: str, got: bytearray) -> None:
    """Read the chat stream into `got` until it ends or breaks."""
    with httpx.stream(
        "POST", server.url + "/v1/chat/completions", json=CHAT_BODY, headers={"X-SSE-Tape-Fault": fault}
    ) as r:
        for piece in r.iter_raw():
            got.extend(piece)


@pytest.mark.parametrize(("mode", "error"), [("close", httpx.RemoteProtocolError), ("reset", httpx.ReadError)])
def test_disconnect_keeps_what_came_before(server: MockServer, mode: str, error: type[Exception]) -> None:
    got = bytearray()
    with pytest.raises(error):
        read_until_broken(server, f"disconnect:after=3,mode={mode}", got)
    assert len(events(bytes(got))) == 3


def test_stall_with_heartbeats(server: MockServer) -> None:
    got = raw(server, "stall:at=2,for=500ms,heartbeat=200ms")
    assert got.elapsed.total_seconds() >= 0.49
    text = got.content.decode()
    assert text.count(": heartbeat\n\n") == 2
    assert [e[1] for e in events(got.content)] == [e[1] for e in events(raw(server, "").content)]


def test_latency_and_bandwidth_slow_the_stream_down(server: MockServer) -> None:
    assert raw(server, "latency:delay=300ms").elapsed.total_seconds() >= 0.29
    body = raw(server, "").content
    slow = raw(server, "bandwidth:rate=4000")
    assert slow.content == body
    assert slow.elapsed.total_seconds() >= (len(body) - 400) / 4000


# --- on the wire --------------------------------------------------------------------------------------


def test_httpx_sse_reassembles_one_byte_writes_including_split_characters(
    server: MockServer, bundled: dict[str, Cassette]
) -> None:
    body = json.loads(bundled["lmstudio-chat"].interactions[0].request.body)  # the recording with the character

    def lmstudio_events(fault: str) -> list[tuple[str, str]]:
        with (
            httpx.Client() as client,
            connect_sse(
                client, "POST", server.url + "/api/v1/chat", json=body, headers={"X-SSE-Tape-Fault": fault}
            ) as source,
        ):
            return [(e.event, e.data) for e in source.iter_sse()]

    whole = lmstudio_events("")
    assert any("‑" in data for _, data in whole)  # noqa: RUF001 - a three-byte character, split by size=1
    assert lmstudio_events("fragment:size=1") == whole
    assert lmstudio_events("fragment:size=3,gap=1ms") == whole


@pytest.mark.parametrize("style", ["crlf", "cr"])
def test_cr_and_crlf_line_ends_decode_to_the_same_events(server: MockServer, style: str) -> None:
    got = raw(server, f"eol:style={style}").content
    if style == "crlf":
        assert b"\n" not in got.replace(b"\r\n", b"")  # every LF is part of a CRLF
    else:
        assert b"\n" not in got
        assert b"\r" in got
    assert events(got) == events(raw(server, "").content)
    assert chat(server, f"eol:style={style}") == TEXT
    with (
        httpx.Client() as client,
        connect_sse(
            client,
            "POST",
            server.url + "/v1/chat/completions",
            json=CHAT_BODY,
            headers={"X-SSE-Tape-Fault": f"eol:style={style}"},
        ) as source,
    ):
        assert [e.data for e in source.iter_sse()] == [d for _, d in events(raw(server, "").content)]


def test_coalesce_sends_the_same_bytes(server: MockServer) -> None:
    assert raw(server, "coalesce").content == raw(server, "").content


def test_corrupt_json_makes_the_sdk_raise(server: MockServer) -> None:
    with pytest.raises(json.JSONDecodeError):
        chat(server, "corrupt:at=2")


def test_corrupt_utf8_reaches_the_client_as_replacement_characters(server: MockServer) -> None:
    got = raw(server, "corrupt:at=2,kind=utf8").content
    assert b"\xff\xfe" in got
    assert "\ufffd" in events(got)[2][1]


def test_drop_and_duplicate(server: MockServer) -> None:
    whole = events(raw(server, "").content)
    assert events(raw(server, "drop:at=done").content) == whole[:-1]
    assert events(raw(server, "drop:at=role").content) == whole[1:]
    # at=N: the event after the first N, counting from 0.
    assert events(raw(server, "duplicate:at=2").content) == [*whole[:3], whole[2], *whole[3:]]
    assert events(raw(server, "drop:at=2").content) == [*whole[:2], *whole[3:]]
    violations = [str(v) for v in DIALECTS["openai-chat"].check(SSEDecoder().feed(raw(server, "drop:at=done").content))]
    assert violations == ["no terminal frame (data: [DONE])"]


def test_garbage_then_close(server: MockServer) -> None:
    got = bytearray()
    with pytest.raises(httpx.RemoteProtocolError):
        read_until_broken(server, "garbage:at=2,size=32", got)
    first_two = raw(server, "").content.split(b"\n\n")[:2]
    prefix = b"\n\n".join(first_two) + b"\n\n"  # the two events before the position
    assert bytes(got).startswith(prefix)
    assert len(got) == len(prefix) + 32


# --- under the SSE layer: HTTP's own framing ---------------------------------------------------------


def test_a_bad_chunk_breaks_the_http_framing_after_the_events_before_it(server: MockServer) -> None:
    got = bytearray()
    with pytest.raises(httpx.RemoteProtocolError):  # h11: a chunk header it cannot read
        read_until_broken(server, "bad-chunk:at=2", got)
    first_two = raw(server, "").content.split(b"\n\n")[:2]
    assert bytes(got) == b"\n\n".join(first_two) + b"\n\n"
    assert injections(server)[-1].what.startswith(f"a chunk size line that is not one at byte {len(got)} ")


async def test_the_async_sdk_meets_a_bad_chunk_with_a_connection_error(server: MockServer) -> None:
    got: list[str | None] = []

    async def read(client: openai.AsyncOpenAI) -> None:
        stream = await client.chat.completions.create(**CHAT_BODY, extra_headers={"X-SSE-Tape-Fault": "bad-chunk:3"})
        async for chunk in stream:
            got.append(chunk.choices[0].delta.content if chunk.choices else None)

    async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as client:
        with pytest.raises(openai.APIConnectionError):
            await read(client)
    assert got == [None, "Hi", " there"]  # the role frame and two pieces of text, then the break


def test_slow_close_holds_the_end_of_the_body_after_its_last_byte(server: MockServer) -> None:
    with httpx.stream(
        "POST", server.url + "/v1/chat/completions", json=CHAT_BODY, headers={"X-SSE-Tape-Fault": "slow-close:600s"}
    ) as r:
        lines = r.iter_lines()
        assert "data: [DONE]" in iter(lines)  # every byte of the stream has come...
        assert server.control.snapshot().streams == 1  # ...and its response has not ended
    assert server.control.wait_idle(SAFETY_NET)  # the client left: the server stops waiting
    assert injections(server)[-1].what == "the body's end (the last chunk) 600 s after its last byte"
    assert chat(server, "slow-close:600s") == TEXT  # the sync SDK stops at [DONE] and closes


async def test_the_async_sdk_stops_waiting_for_a_slow_close_after_done(server: MockServer) -> None:
    # After [DONE] the async client drains the rest of the body for a moment (to reuse the connection), then
    # closes it: a slow close costs it that moment, not the close's 600 s. The wait_for is a safety net.
    async with openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as client:

        async def read() -> str:
            stream = await client.chat.completions.create(
                **CHAT_BODY, extra_headers={"X-SSE-Tape-Fault": "slow-close:600s"}
            )
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

        assert await asyncio.wait_for(read(), timeout=120) == TEXT


# --- choosing: seeds, times, paths, the header, the control endpoint, the report ---------------------


def _injected_requests(seed: int) -> list[int]:
    with serve(pace="instant", faults=["disconnect:after=2,p=0.5"], seed=seed) as running:
        for _ in range(20):
            got = bytearray()
            with contextlib.suppress(httpx.RemoteProtocolError):
                read_until_broken(running, "", got)
        return [entry.request for entry in injections(running)]


def test_the_same_seed_gives_the_same_faults_and_another_seed_others() -> None:
    first, again, other = _injected_requests(1), _injected_requests(1), _injected_requests(2)
    assert first == again
    assert first != other
    assert 2 <= len(first) <= 18  # p=0.5 over 20 requests


def test_times_and_path_limit_a_fault(server: MockServer) -> None:
    with serve(pace="instant", faults=["empty:times=2,path=/v1/chat/completions"]) as running:
        assert [len(raw(running, "").content) for _ in range(3)] == [0, 0, 2277]
        completions = {"model": "local-model", "prompt": "Once upon a time", "max_tokens": 32, "stream": True}
        assert raw(running, "", "/v1/completions", completions).content  # another path: untouched


def test_what_a_fault_does_to_one_replay_stays_out_of_the_next(server: MockServer) -> None:
    # Every replay of a recording starts from a copy of one plan worked out for it: a fault that cuts,
    # splices or rewrites its copy leaves the plan whole for the replays after it.
    recorded = raw(server, "").content
    for fault in ("error:at=2", "drop:at=3", "duplicate:at=1", "corrupt:at=2", "eol:crlf"):
        assert raw(server, fault).content != recorded, fault
        assert raw(server, "").content == recorded, fault


def test_control_endpoint_sets_counts_and_clears_faults(tmp_path: Path) -> None:
    report = tmp_path / "report.jsonl"
    with serve(pace="instant", report=report) as running:
        control = running.url + "/__sse_tape__/faults"
        assert httpx.post(control, json={"faults": ["empty"]}).json()["faults"] == ["empty"]
        assert raw(running, "").content == b""
        state = httpx.get(control).json()
        assert (state["injected"], state["requests"]) == ({"empty": 1}, 1)
        assert httpx.post(control, json={"faults": ["bogus"]}).status_code == 400
        assert httpx.delete(control).json()["faults"] == []
        assert raw(running, "").content.endswith(b"data: [DONE]\n\n")
    [entry] = [e for line in report.read_text().splitlines() if (e := json.loads(line))["type"] == "fault"]
    assert entry.pop("time") > 0
    assert entry == {
        "type": "fault",
        "request": 1,
        "method": "POST",
        "path": "/v1/chat/completions",
        "fault": "empty",
        "what": "200 with no body",
        "recording": "openai-chat.toml #1 (POST /v1/chat/completions)",
    }


# --- profiles -------------------------------------------------------------------------------------------


def test_shipped_profiles_parse() -> None:
    for name in PROFILES:
        assert load_profile(name, folder=Path("/nonexistent"))


def test_profiles_from_sse_tape_toml_and_pyproject(tmp_path: Path) -> None:
    (tmp_path / "sse-tape.toml").write_text(
        '[profiles.ci]\nfaults = ["status:code=429,times=1", "latency:delay=5ms"]\n'
    )
    (tmp_path / "pyproject.toml").write_text('[tool.sse-tape.profiles.nightly]\nfaults = ["disconnect:after=50%"]\n')
    assert [f.spec for f in load_profile("ci", folder=tmp_path)] == ["status:code=429,times=1", "latency:delay=5ms"]
    assert [f.spec for f in load_profile("nightly", folder=tmp_path)] == ["disconnect:after=50%"]
    with pytest.raises(
        ConfigError, match="unknown profile 'nope': profiles are ci, flaky-network, nightly, overloaded"
    ):
        load_profile("nope", folder=tmp_path)


def test_a_bad_fault_in_a_pyproject_profile_names_the_profile_and_the_file(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.sse-tape.profiles.nightly]\nfaults = ["eror:3"]\n')
    result = subprocess.run(
        [sys.executable, "-m", "sse_tape", "serve", "--profile", "nightly"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert (result.returncode, result.stderr) == (
        2,
        f"Error: {tmp_path / 'pyproject.toml'}: profile 'nightly': fault 'eror:3': unknown fault 'eror' "
        f"(did you mean 'error'?); faults are {', '.join(FAULTS)}\n",
    )


# --- every fault against every bundled cassette --------------------------------------------------------------

MATRIX = {
    "status": "status:code=503,retry_after=1",
    "ttfb": "ttfb:delay=10ms",
    "hang": "hang",
    "empty": "empty",
    "session-expired": "session-expired",
    "error": "error:at=50%",
    "drop": "drop:at=1",
    "duplicate": "duplicate:at=1",
    "corrupt": "corrupt:at=1,kind=utf8",
    "tool-error": "tool-error:message=boom",
    "progress-flood": "progress-flood:count=50",
    "stall": "stall:at=1,for=20ms,heartbeat=5ms",
    "latency": "latency:delay=5ms,jitter=5ms",
    "bandwidth": "bandwidth:rate=200000",
    "fragment": "fragment:size=5",
    "coalesce": "coalesce",
    "split": "split:at=60%",
    "eol": "eol:style=cr",
    "garbage": "garbage:at=50%,size=16",
    "disconnect": "disconnect:after=50%,mode=reset",
    "bad-chunk": "bad-chunk:at=2",
    "slow-close": "slow-close:for=20ms",
    "refusal": "refusal:at=2",
    "content-filter": "content-filter",
    "length": "length",
    "bad-args": "bad-args:schema",
    "unknown-tool": "unknown-tool",
    "duplicate-tool-id": "duplicate-tool-id",
    "empty-answer": "empty-answer",
    "reasoning-only": "reasoning-only",
}


# Byte and time positions, and faults combined, over the same cassettes.
MORE = [
    "error:at=150b",
    "error:at=200ms;error:at=100%",
    "stall:at=100ms,for=10ms,heartbeat=3ms",
    "disconnect:after=1s",
    "drop:at=done",
    "fragment:size=1;eol:style=crlf",
    "status:code=429;error:at=2;fragment:size=3",
    "corrupt:at=150b,kind=json",
    "bad-args;error:at=3;disconnect:after=80%",
    "refusal:at=0;fragment:size=7",
]


def test_the_matrix_covers_every_fault() -> None:
    assert set(MATRIX) == set(FAULTS)


@pytest.mark.timeout(480)  # seconds of CPU, a third of them the 1-byte fragments: a busy machine stretches it
async def test_every_fault_against_every_bundled_interaction_crashes_nothing_and_leaks_nothing(
    bundled: dict[str, Cassette],
) -> None:
    # The plain event stream for EventSource too: faults framed for an API it does not speak must not break it.
    cassettes = [*bundled.values(), Cassette.load(next(p for p in bundled_cassettes() if p.stem == "events"))]
    interactions = [i for c in cassettes for i in c]
    baseline = len(asyncio.all_tasks())
    open_files = len(os.listdir("/proc/self/fd"))
    async with aserve(*cassettes, pace="instant") as running:
        connections = asyncio.Semaphore(50)

        async def one(fault: str, interaction: Any) -> int:
            # A raw socket read to its end: an HTTP client's parsing would take most of the time, and broken
            # framing is one of the faults. Only reads have a limit (what ends a `hang`).
            request = interaction.request
            head = (
                f"{request.method} {request.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(request.body)}\r\nX-SSE-Tape-Fault: {fault}\r\nConnection: close\r\n\r\n"
            )
            async with connections:
                reader, writer = await asyncio.open_connection("127.0.0.1", running.port)
                writer.write(head.encode() + request.body)
                answer = b""
                with contextlib.suppress(TimeoutError, ConnectionError):
                    while data := await asyncio.wait_for(reader.read(65536), 2):
                        answer += data
                writer.close()
                with contextlib.suppress(ConnectionError):
                    await writer.wait_closed()
            status = re.match(rb"HTTP/1\.1 (\d{3}) ", answer)
            return int(status[1]) if status else -1

        specs = [*MATRIX.values(), *MORE]
        statuses = await asyncio.gather(*(one(f, i) for f in specs for i in interactions))
        async with asyncio.timeout(SAFETY_NET):
            await running.control.idle()
        await auntil(lambda: len(asyncio.all_tasks()) == baseline, "every answer's task to end")
        assert 500 not in statuses  # no fault made the server itself fail
        assert {200, 429, 503} <= set(statuses)  # the answers were read: a status fault's too
        assert running.control.snapshot().requests == len(specs) * len(interactions)
    assert len(os.listdir("/proc/self/fd")) == open_files  # every socket, of both sides, is closed


# Faults whose bytes a live stream and a replay both make, with no random choice in them.
EVENT_FAULTS = ["error:at=0", "error:at=2", "drop:at=1", "drop:at=done", "duplicate:at=3", "corrupt:at=2"]
WIRE_FAULTS = ["disconnect:after=3", "garbage:at=2,size=8", "eol:crlf", "error:at=40b"]
# Several in one stage: each counts its position in what the ones before it made of the stream.
CHAINS = ["drop:at=1;error:at=3", "error:at=3;drop:at=1", "duplicate:at=1;drop:at=2;error:at=4", "drop:at=0;drop:at=0"]
# Those that need the whole stream: a live stream gets them once it has ended.
WHOLE_FAULTS = ["error:at=50%", "split:at=60%", "disconnect:after=50%", "coalesce", "refusal:at=2"]


def bundled_streams() -> Iterator[tuple[Path, Interaction]]:
    """Every bundled interaction answered with an event stream, with its cassette's path."""
    for path in bundled_cassettes():
        for interaction in Cassette.load(path):
            response = interaction.response
            if response.status == 200 and response.header("content-type") == "text/event-stream":
                yield path, interaction


def fed(spec: str, interaction: Interaction, pieces: Iterable[tuple[float, bytes]]) -> tuple[bytes, End, FaultedStream]:
    """What the faults of `spec` make of a stream fed to them in these pieces, as a live stream is: the bytes
    sent (with any noise after them) and how it ends."""
    dialect = dialect_for(interaction.request.path, interaction)
    faulted = FaultedStream(
        parse_faults(spec.split(";")), head=Plan(200, [], []), dialect=dialect, rng=random.Random(7)
    )
    writes = []
    for piece in pieces:
        writes += faulted.feed([piece])
    writes += faulted.close(interaction.response.end_time)
    noise = b"".join(data for _, data in faulted.run.head.noise or ())
    return b"".join(data for _, data in writes) + noise, faulted.end or End.COMPLETE, faulted


@pytest.mark.parametrize("spec", EVENT_FAULTS + WIRE_FAULTS + CHAINS + WHOLE_FAULTS)
def test_a_live_stream_cut_anywhere_gets_what_a_replay_of_it_gets(spec: str) -> None:
    # An upstream's reads cut events anywhere: fed one byte at a time, the faults act on whole events, and
    # make of every bundled stream (the EventSource feed's leading retry: too) the bytes a replay makes.
    for path, interaction in bundled_streams():
        response = interaction.response
        body = response.body
        live, live_end, faulted = fed(spec, interaction, ((0.0, body[n : n + 1]) for n in range(len(body))))
        plan = Plan.of(response, [c.t for c in response.chunks], response.end_time)
        apply(parse_faults(spec.split(";")), plan, dialect=faulted.run.dialect, rng=random.Random(7))
        assert live == plan.body + b"".join(data for _, data in plan.noise or ()), path.name
        assert live_end is plan.end, path.name


def test_an_event_to_drop_that_never_came_leaves_the_stream_alone() -> None:
    # Past the last event, or a [DONE] a stream has not: nothing to drop, on a live stream as on a replay.
    for _, interaction in bundled_streams():
        events = SSEDecoder().feed(interaction.response.body)
        past = f"drop:at={len(events)}"
        sent, _, faulted = fed(past, interaction, [(c.t, c.data) for c in interaction.response.chunks])
        assert sent == interaction.response.body
        assert [what for _, what in faulted.run.notes] == [f"the stream ended before {len(events)}: left alone"]


@pytest.mark.parametrize("spec", ["latency:delay=100ms", "stall:at=2,for=1s", "ttfb:1s", "error:at=3"])
def test_a_live_stream_is_due_when_a_replay_of_it_is(spec: str) -> None:
    # Each byte of every bundled stream, fed as recorded, is due when the replay sends it: a latency delays
    # each write by its delay, not by the delays of all the writes before it.
    for path, interaction in bundled_streams():
        response = interaction.response
        dialect = dialect_for(interaction.request.path, interaction)
        faulted = FaultedStream([parse_fault(spec)], head=Plan(200, [], []), dialect=dialect, rng=random.Random(7))
        writes = [w for chunk in response.chunks for w in faulted.feed([(chunk.t, chunk.data)])]
        writes += faulted.close(response.end_time)
        plan = Plan.of(response, [c.t for c in response.chunks], response.end_time)
        apply([parse_fault(spec)], plan, dialect=dialect, rng=random.Random(7))
        assert [t for t, data in writes for _ in data] == [t for t, data in plan.writes for _ in data], path.name


def test_the_faults_command_describes_every_fault_and_profile() -> None:
    result = subprocess.run([sys.executable, "-m", "sse_tape", "faults"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    kinds = result.stdout.split("\nevery fault also takes")[0]
    names = {line.split()[0] for line in kinds.splitlines() if not line.startswith(" ")}
    assert names == set(FAULTS)
    flowing = " ".join(result.stdout.split())
    assert "except split, the misbehaviours and those at a % position, which need the whole stream" in flowing
    assert re.search(r"\ndisconnect +drop the connection at a position: a clean close or a TCP reset", result.stdout)
    assert (
        "keys: at=<position, default 50%>, for=<duration, default 5s>, heartbeat=<duration>; stall:VALUE sets at"
        in result.stdout
    )
    assert all(f"  {name}: " in result.stdout for name in PROFILES)


@pytest.mark.parametrize(
    ("remote", "allowed"),
    [
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("10.1.2.3", False),
        ("192.168.0.7", False),
        (None, False),
    ],
)
def test_the_control_endpoint_answers_loopback_clients_only(remote: str | None, allowed: bool) -> None:
    from sse_tape.server.app import is_loopback

    assert is_loopback(remote) is allowed


def test_stream_faults_leave_a_response_that_is_not_a_stream_alone(tmp_path: Path) -> None:
    body = b'{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}'
    interaction = Interaction(
        Request("POST", "/v1/chat/completions"),
        Response(429, (("content-type", "application/json"), ("content-length", str(len(body)))), (Chunk(0.0, body),)),
    )
    with serve(Cassette([interaction]), match_on=["path"], faults=["error:at=50%", "drop:at=0"]) as running:
        got = httpx.post(running.url + "/v1/chat/completions", json={})
        notes = [entry.what for entry in injections(running)]
    assert (got.status_code, got.content) == (429, body)
    assert notes == ["not an event stream: left alone", "no event to drop"]


# --- what a second review found -------------------------------------------------------------------


@pytest.mark.parametrize("at", ["150b", "1b", "0.3s", "100%", "99", "3"])
def test_an_error_always_comes_whole_between_events_and_before_the_terminal_frame(server: MockServer, at: str) -> None:
    got = events(raw(server, f"error:at={at},message=boom").content)
    assert got[-2:] == [
        ("error", '{"error":{"message":"boom","type":"server_error","code":null}}'),
        ("message", "[DONE]"),
    ]
    assert ("message", "[DONE]") not in got[:-1]
    with pytest.raises(openai.APIError, match="boom"):
        chat(server, f"error:at={at},message=boom")


@pytest.mark.parametrize(
    ("path", "body", "at"),
    [
        ("/v1/responses", {"model": "claude-sonnet-4-20250514", "input": "Hello!", "stream": True}, "100%"),
        ("/api/v1/chat", None, "100%"),
        ("/api/v1/chat", None, "47"),
    ],
)
def test_errors_in_every_dialect_keep_the_stream_valid(
    server: MockServer, bundled: dict[str, Cassette], path: str, body: Any, at: str
) -> None:
    body = body or json.loads(bundled["lmstudio-chat"].interactions[0].request.body)
    dialect = DIALECTS["openai-responses" if path == "/v1/responses" else "lmstudio-chat"]
    got = SSEDecoder().feed(raw(server, f"error:at={at}", path, body).content)
    assert dialect.check(got) == []


def test_an_error_at_every_position_of_every_bundled_stream_continues_that_stream(
    bundled: dict[str, Cassette],
) -> None:
    """The events before the position, then the error, framed as that server frames it: its sequence
    numbers go on, its open blocks close, and the stream keeps its dialect's contract."""
    checked = 0
    for interaction in (i for c in bundled.values() for i in c if i.response.status == 200):
        if framing_of(interaction) is not SSE:
            continue  # Bedrock's event stream, whose exceptions carry no code: tests/test_bedrock.py
        dialect = dialect_for(interaction.request.path, interaction)
        framing = framing_of(interaction) or SSE  # Ollama's NDJSON, framed in its own words too
        original = messages(interaction)
        terminal = next(n for n, event in enumerate(original) if dialect.is_terminal(event))
        for at in range(len(original) + 1):
            kept = min(at, terminal)  # an error comes before the terminal frame
            if any(isinstance(e, Error) for e in dialect.decode(original[:kept])):
                continue  # a recording that failed already is left alone
            plan = Pacing().plan(interaction.response)
            plan.framing = framing
            apply([parse_fault(f"error:{at},message=boom,code=c7")], plan, dialect=dialect, rng=random.Random(0))
            got = [b.event for b in framing.blocks(plan.body) if b.event is not None]
            assert got[:kept] == original[:kept]
            *before, error = dialect.decode(got)
            # Ollama's error line is a message alone: its type and code are not on the wire.
            alone = dialect.name in ("ollama-chat", "ollama-generate")
            assert error == (Error("boom") if alone else Error("boom", "server_error", "c7"))
            # Nothing sent yet: the stream still opens as the recording opened it.
            assert before == (dialect.decode(original[:kept]) if kept else dialect.decode(original)[: len(before)])
            assert dialect.check(got, interaction.request) == [], (dialect.name, at)
            checked += 1
    assert checked > 150


def test_a_second_error_leaves_the_stream_alone(server: MockServer) -> None:
    body = {"model": "claude-sonnet-4-20250514", "input": "Hello!", "stream": True}
    got = raw(server, "error:at=50%;error:at=100%", "/v1/responses", body)
    assert got.status_code == 200
    assert [e for e, _ in events(got.content)].count("response.failed") == 1


def test_heartbeats_of_a_stall_come_between_events(server: MockServer) -> None:
    got = raw(server, "stall:at=150b,for=300ms,heartbeat=100ms").content
    assert [d for _, d in events(got)] == [d for _, d in events(raw(server, "").content)]
    assert b"\n\n: heartbeat\n\n" in got


async def test_a_disconnect_at_a_time_comes_then_even_during_a_stall() -> None:
    # The stall lasts an hour: a disconnect that waited for its end would run the test past its timeout.
    async def read(client: httpx.AsyncClient, url: str) -> None:
        fault = {"X-SSE-Tape-Fault": "stall:at=2,for=1h;disconnect:after=300ms"}
        async with client.stream("POST", url, json=CHAT_BODY, headers=fault) as response:
            async for _ in response.aiter_raw():
                pass

    async with aserve(pace="instant", match_on=["path"]) as running, httpx.AsyncClient() as client:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(httpx.RemoteProtocolError):
            await read(client, running.url + "/v1/chat/completions")
        assert loop.time() - started >= 0.29  # not before its time


def test_empty_answers_when_the_stream_would_have_begun(bundled: dict[str, Cassette]) -> None:
    thinking = bundled["router-chat"].interactions[2]  # 18.7 s long, first byte at 0.46 s
    with serve(Cassette([thinking]), match_on=["path"]) as running:
        got = httpx.post(
            running.url + "/proj_ABC123/my-endpoint/v1/chat/completions",
            json={"stream": True},
            headers={"X-SSE-Tape-Fault": "empty"},
        )
    assert got.content == b""
    # Its plan ends when the first byte was due, not with the recording (which the writer honours: a plan's
    # end is when its response ends, tested with the writer).
    response = thinking.response
    plan = Plan.of(response, [c.t for c in response.chunks], response.end_time)
    apply([parse_fault("empty")], plan, dialect=dialect_for(thinking.request.path, thinking), rng=random.Random(1))
    assert (plan.writes, plan.end_at) == ([], response.chunks[0].t)
    assert plan.end_at < response.end_time


def test_fragment_gaps_push_the_rest_back(server: MockServer) -> None:
    whole = raw(server, "").content
    got = raw(server, "fragment:size=100,gap=20ms")
    assert got.content == whole
    assert got.elapsed.total_seconds() >= (len(whole) // 100 - 13) * 0.02  # 13 recorded writes; the rest spaced


def http_chunks(server: MockServer, fault: str) -> list[bytes]:
    """The body as the client's HTTP layer hands it over: one piece per chunk of the chunked encoding."""
    with httpx.stream(
        "POST", server.url + "/v1/chat/completions", json=CHAT_BODY, headers={"X-SSE-Tape-Fault": fault}
    ) as response:
        return list(response.iter_raw())


@pytest.mark.parametrize("at", [1, 100, 101, 1000])
def test_split_sends_the_body_as_exactly_two_writes_cut_at_the_byte(server: MockServer, at: int) -> None:
    whole = raw(server, "").content
    assert http_chunks(server, "") == [whole]  # at instant pace, the writes all due at once go as one
    assert http_chunks(server, f"split:at={at}b") == [whole[:at], whole[at:]]


@pytest.mark.parametrize("past", [0, 1000])
def test_split_outside_the_body_sends_one_write_and_says_where_it_was_asked(server: MockServer, past: int) -> None:
    whole = raw(server, "").content
    at = f"{len(whole) + past}b"
    assert http_chunks(server, f"split:at={at}") == [whole]
    assert injections(server)[-1].what == f"one write: {at} is the body's end, not inside its {len(whole)} bytes"
    assert http_chunks(server, "split:at=0") == [whole]
    assert injections(server)[-1].what == f"one write: 0 is the body's start, not inside its {len(whole)} bytes"


def test_bandwidth_never_bursts_past_the_rate(server: MockServer) -> None:
    whole = raw(server, "").content
    got = raw(server, "bandwidth:rate=2000")
    assert got.content == whole
    assert got.elapsed.total_seconds() >= (len(whole) - 100) / 2000  # at most rate/20 bytes before the clock runs


@pytest.mark.parametrize("at", ["1b", "5b", "200b"])
def test_split_with_a_stall_sends_the_heartbeats_before_the_body_never_inside_a_line(
    server: MockServer, at: str
) -> None:
    whole = raw(server, "").content
    got = http_chunks(server, f"split:at={at};stall:at=1,for=60ms,heartbeat=20ms")
    beats, body = got[:-2], got[-2:]
    assert b"".join(body) == whole
    assert len(body[0]) == int(at[:-1])
    assert beats
    assert set(beats) == {b": heartbeat\n\n"}
    assert events(b"".join(got)) == events(whole)


def test_of_two_statuses_on_a_request_the_first_answers_and_only_it_is_injected(server: MockServer) -> None:
    before = len(injections(server))
    assert raw(server, "status:500;status:429").status_code == 500
    assert [i.fault for i in injections(server)[before:]] == ["status:500"]


def test_times_counts_per_source_and_starts_over_when_faults_are_set() -> None:
    with serve(pace="instant", faults=["status:code=418,times=2"]) as running:
        both = [raw(running, "status:code=418,times=2").status_code for _ in range(3)]
        assert both == [418, 418, 200]  # the server's fault and the header's each counted their own requests once
        control = running.url + "/__sse_tape__/faults"
        httpx.post(control, json={"faults": ["status:code=429,times=1"]})
        assert raw(running, "").status_code == 429
        httpx.delete(control)
        httpx.post(control, json={"faults": ["status:code=429,times=1"]})
        assert raw(running, "").status_code == 429  # counts started over


@pytest.mark.parametrize(
    "body", [{"faults": [1]}, {"faults": None}, {"faults": {"a": 1}}, ["empty"], {"faults": ["nope"]}]
)
def test_a_bad_control_body_is_a_400(server: MockServer, body: Any) -> None:
    got = httpx.post(server.url + "/__sse_tape__/faults", json=body)
    assert got.status_code == 400
    assert got.json()["error"].startswith('give {"faults": ["spec", ...]}')


def test_control_json_nested_a_hundred_thousand_deep_is_a_400_not_a_500(server: MockServer) -> None:
    body = b'{"faults": ' + b"[" * 100_000
    got = httpx.post(server.url + "/__sse_tape__/faults", content=body, headers={"content-type": "application/json"})
    assert got.status_code == 400
    assert "nested more than 64 deep" in got.json()["error"]


def test_an_unwritable_report_stops_serve_at_start_up() -> None:
    result = serve_cli("--report", "/nonexistent/dir/r.jsonl")
    assert (result.returncode, result.stderr) == (
        2,
        "Error: --report /nonexistent/dir/r.jsonl: cannot write: No such file or directory\n",
    )


def test_injected_counts_match_what_was_applied() -> None:
    with serve(pace="instant") as running:
        raw(running, "status:code=500;error:at=2")
        state = httpx.get(running.url + "/__sse_tape__/faults").json()
    assert state["injected"] == {"status:code=500": 1}  # the error passed the replaced response by
    assert [i["fault"] for i in state["injections"]] == ["status:code=500"]


def test_the_control_endpoint_refuses_other_than_loopback() -> None:
    from aiohttp.test_utils import make_mocked_request

    request = make_mocked_request("GET", "/__sse_tape__/faults", transport=_Transport("10.1.2.3"))
    assert asyncio.run(MockServer([]).answer(request)).status == 403
    assert asyncio.run(MockServer([], allow_remote_control=True).answer(request)).status == 200


def test_a_page_from_another_origin_cannot_drive_the_control_endpoints(server: MockServer) -> None:
    control = server.url + "/__sse_tape__/faults"
    evil = {"Origin": "https://evil.example"}
    # What a form or fetch(..., {mode: "no-cors"}) sends without asking first: refused.
    text = httpx.post(control, content='{"faults": ["hang"]}', headers={**evil, "content-type": "text/plain"})
    assert text.status_code == 403
    assert httpx.post(control, json={"faults": ["hang"]}, headers=evil).status_code == 403
    # The question a browser asks before a JSON POST or a DELETE: not approved.
    preflight = httpx.options(control, headers={**evil, "Access-Control-Request-Method": "DELETE"})
    assert preflight.status_code == 403
    assert "access-control-allow-origin" not in preflight.headers
    # Without an origin (curl, the SDKs) or from the server's own pages, it works; a POST must say it is JSON.
    assert httpx.post(control, content='{"faults": []}', headers={"content-type": "text/plain"}).status_code == 415
    own = {"Origin": server.url}
    assert httpx.post(control, json={"faults": []}, headers=own).json()["faults"] == []
    assert httpx.get(control).json()["faults"] == []


def test_the_fault_header_is_obeyed_for_loopback_clients_only() -> None:
    from aiohttp.test_utils import make_mocked_request

    async def status(server: MockServer) -> int:
        async with server:
            headers = {"X-SSE-Tape-Fault": "status:500"}
            request = make_mocked_request("POST", "/v1/nowhere", headers=headers, transport=_Transport("10.1.2.3"))
            response = await server.answer(request)
            return response.status

    assert asyncio.run(status(MockServer([]))) == 403
    assert asyncio.run(status(MockServer([], allow_remote_control=True))) == 404  # obeyed: the miss comes first


class _Transport:
    """Just enough of a transport for aiohttp to read the peer's address."""

    def __init__(self, host: str) -> None:
        self.host = host

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return (self.host, 40000) if name == "peername" else default


def test_faults_at_their_bounds_neither_block_nor_swell_the_server() -> None:
    # The server in a process of its own with its address space capped at 512 MiB: an hour of heartbeats
    # every millisecond or 16 MiB of random bytes built up front would not fit; made as they are sent, they do.
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 29, 1 << 29))"
    server, base = processes.start(["serve", "--port", "0", "--pace", "instant", "-q"], setup=limit)
    url = base + "/v1/chat/completions"
    try:
        heavy = ["stall:at=1,for=3600s,heartbeat=1ms", "garbage:at=1,size=16777216"] * 3
        with httpx.Client(timeout=30) as client:
            for spec in heavy:
                with client.stream("POST", url, json=CHAT_BODY, headers={"X-SSE-Tape-Fault": spec}) as streamed:
                    got = b""
                    for piece in streamed.iter_raw():
                        got += piece
                        if len(got) > 4000:
                            break
                assert len(got) > 4000
            assert client.post(url, json=CHAT_BODY).status_code == 200  # still answering
        assert server.poll() is None
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    assert "Error" not in err


async def test_garbage_is_made_as_it_is_sent_not_joined_up_front() -> None:
    # 16 MiB of random bytes due at one moment: joined into one write they would be built whole before a byte
    # went out. The client reads to the end and keeps nothing; what Python allocated at its peak says which.
    chunks = (Chunk(0.0, b"data: one\n\n"), Chunk(0.0, b"data: two\n\n"))
    response = Response(200, (("content-type", "text/event-stream"),), chunks)
    cassette = Cassette([Interaction(Request("POST", "/v1/chat/completions", body=b"{}"), response)])
    async with aserve(cassette, pace="instant") as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        try:
            with peak_allocated() as peak:
                writer.write(
                    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n"
                    b"X-SSE-Tape-Fault: garbage:at=1,size=16777216\r\n\r\n{}"
                )
                received = 0
                while piece := await reader.read(1 << 20):
                    received += len(piece)
                held = peak()
        finally:
            writer.close()
    assert received > 16 * 2**20
    assert held < 8 * 2**20


@pytest.mark.fuzz
@given(
    spec=st.text(max_size=80)
    | st.builds(lambda name, rest: f"{name}:{rest}", st.sampled_from(sorted(FAULTS)), st.text(max_size=60))
)
def test_any_text_is_a_fault_or_one_clear_error(spec: str) -> None:
    try:
        fault = parse_fault(spec)
    except ConfigError as exc:
        message = str(exc)
    else:
        assert fault.name in FAULTS
        return
    assert message.startswith("fault ")


# --- a fault defined outside sse-tape ---------------------------------------------------------------------------


class Shout(Act):
    """A test's own fault: the stream's letters in capitals, as it passes."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        self.note("letters in capitals")

    def feed(self, writes: list[tuple[float, bytes]]) -> list[tuple[float, bytes]]:
        return [(t, data.upper()) for t, data in writes]


SHOUT = FaultKind("shout", Stage.WIRE, "the stream's letters in capitals (a test's own fault)", (), Shout)


@pytest.fixture
def shout() -> Iterator[None]:
    register(SHOUT)
    yield
    del FAULTS["shout"]


@pytest.mark.usefixtures("shout")
async def test_a_fault_defined_outside_sse_tape_acts_on_replayed_forwarded_and_synthesized_streams(
    tiny_model_path: Path,
) -> None:
    body = b'data: {"choices":[{"delta":{"content":"quiet"}}]}\n\ndata: [DONE]\n\n'
    recorded = Interaction(
        Request("POST", "/v1/chat/completions"),
        Response(200, (("content-type", "text/event-stream"),), (Chunk(0.0, body),)),
    )
    loud = {"X-SSE-Tape-Fault": "shout"}
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 4}
    async with httpx.AsyncClient(timeout=60) as client:
        async with aserve(Cassette([recorded]), pace="instant", match_on=["path"]) as replay:
            replayed = await client.post(replay.url + "/v1/chat/completions", json={}, headers=loud)
        async with Upstream() as upstream, aserve(Cassette(), upstream=upstream.url, on_miss="forward") as proxy:
            forwarded = await client.post(proxy.url + "/v1/chat/completions?events=2&gap=0", json={}, headers=loud)
        engine, _ = open_model(str(tiny_model_path))
        synth = ServeOptions.build(on_miss="synth")
        async with MockServer(options=synth, model=Synthesizer(engine, Settings(seed=1))) as model:
            synthesized = await client.post(model.url + "/v1/chat/completions", json=chat, headers=loud)
    assert replayed.content == body.upper()
    assert forwarded.content == (chat_chunk(0) + chat_chunk(1) + b"data: [DONE]\n\n").upper()
    assert synthesized.content.isupper()
    assert synthesized.content.endswith(b"DATA: [DONE]\n\n")
    for server in (replay, proxy, model):
        assert [(e.fault, e.what) for e in injections(server)] == [("shout", "letters in capitals")]
