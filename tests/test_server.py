"""The mock server over real loopback sockets, consumed by the clients users run."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import aiohttp
import httpx
import openai
import processes
import pytest
from aiohttp import web
from clients import never_reading, openai_client, unread
from httpx_sse import connect_sse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from waits import SAFETY_NET, auntil, until

from sse_tape import (
    Cassette,
    Chunk,
    End,
    Interaction,
    MockServer,
    Pacing,
    Request,
    Response,
    ServeOptions,
    SSEDecoder,
    aserve,
    serve,
)
from sse_tape.dialects import DIALECTS
from sse_tape.dialects.events import TextDelta
from sse_tape.journal import Ended, Entry, Matched, Received
from sse_tape.plan import Plan
from sse_tape.server import Limits, load_cassettes


def sdk(server: MockServer, prefix: str = "/v1") -> openai.OpenAI:
    return openai_client(server.url + prefix, api_key="sk-test", max_retries=0)


def test_sdk_chat_stream_yields_the_recorded_text(instant_server: MockServer) -> None:
    stream = sdk(instant_server).chat.completions.create(
        model="local-model", messages=[{"role": "user", "content": "Hello!"}], max_tokens=16, stream=True
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Hi there! How can I help you today?"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_sdk_chat_stream_yields_the_recorded_tool_call(instant_server: MockServer) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
    ]
    stream = sdk(instant_server).chat.completions.create(
        model="local-model",
        messages=[{"role": "user", "content": "Weather in Tokyo?"}],
        tools=tools,  # type: ignore[arg-type]
        tool_choice="auto",
        stream=True,
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        for delta in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            call["name"] += delta.function.name or "" if delta.function else ""
            call["arguments"] += delta.function.arguments or "" if delta.function else ""
        finish = chunk.choices[0].finish_reason or finish
    assert calls == {0: {"id": "call_weather", "name": "get_weather", "arguments": '{"city":"Tokyo"}'}}
    assert json.loads(calls[0]["arguments"]) == {"city": "Tokyo"}
    assert finish == "tool_calls"


def test_sdk_completions_stream_yields_the_recorded_text_and_logprobs(
    instant_server: MockServer, bundled: dict[str, Cassette]
) -> None:
    story, with_tokens = (
        [
            e
            for e in DIALECTS["openai-completions"].decode(sse for _, sse in i.response.events())
            if isinstance(e, TextDelta)
        ]
        for i in bundled["openai-completions"].interactions
    )
    client = sdk(instant_server)
    plain = client.completions.create(model="local-model", prompt="Once upon a time", max_tokens=32, stream=True)
    text = "".join(c.choices[0].text for c in plain)
    assert text == "".join(e.text for e in story)
    assert len(text) > 60  # the model's 32 tokens
    with_logprobs = list(
        client.completions.create(
            model="local-model", prompt="Once upon a time", max_tokens=12, logprobs=2, stream=True
        )
    )
    got = [c.choices[0].logprobs for c in with_logprobs if c.choices[0].logprobs]
    recorded = [lp for e in with_tokens for lp in e.logprobs or ()]
    assert [lp.tokens[0] for lp in got] == [lp.token for lp in recorded]
    assert len(got) == 12
    for logprobs in got:  # real ones, from the model's logits: below zero, two alternatives, the best first
        (logprob,) = logprobs.token_logprobs
        (top,) = logprobs.top_logprobs
        assert logprob < 0
        assert len(top) == 2
        assert list(top.values()) == sorted(top.values(), reverse=True)
    assert with_logprobs[-1].choices[0].finish_reason == "length"


def test_sdk_responses_stream_runs_the_full_lifecycle(instant_server: MockServer) -> None:
    events = list(sdk(instant_server).responses.create(model="claude-sonnet-4-20250514", input="Hello!", stream=True))
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 9,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert (
        "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Hello! How can I help you today?"
    )
    assert events[-1].response.output_text == "Hello! How can I help you today?"  # type: ignore[union-attr]


def test_sdk_responses_stream_helper_assembles_the_function_call(instant_server: MockServer) -> None:
    tools = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Get weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "strict": None,
        }
    ]
    with sdk(instant_server).responses.stream(
        model="claude-sonnet-4-20250514",
        input="Weather in Tokyo?",
        tools=tools,  # type: ignore[arg-type]
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == '{"city":"Tokyo"}'
    [call] = final.output
    assert (call.type, call.name, call.arguments) == ("function_call", "get_weather", '{"city":"Tokyo"}')  # type: ignore[union-attr]


def test_sdk_router_stream_with_usage_in_the_last_chunk(instant_server: MockServer) -> None:
    client = sdk(instant_server, "/proj_ABC123/my-endpoint/v1")
    raw = client.chat.completions.with_raw_response.create(
        model="llama-3.1-8b",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    assert raw.headers["x-request-id"] == "chatcmpl-abc123"
    assert raw.headers["x-xerotier-worker-id"] == "worker-7f3a"
    chunks = list(raw.parse())
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "The capital of France is Paris."
    assert [c.usage is not None for c in chunks] == [False] * (len(chunks) - 1) + [True]
    usage = chunks[-1].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (25, 8, 33)
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 12


def test_sdk_router_refusal_with_logprobs(instant_server: MockServer) -> None:
    stream = sdk(instant_server, "/proj_ABC123/my-endpoint/v1").chat.completions.create(
        model="llama-3.1-8b",
        messages=[
            {
                "role": "user",
                "content": "Write step-by-step instructions for picking a lock to break into my neighbour's house.",
            }
        ],
        stream=True,
        logprobs=True,
    )
    chunks = list(stream)
    assert (
        "".join(c.choices[0].delta.refusal or "" for c in chunks) == "I'm sorry, but I cannot help with that request."
    )
    assert all(c.choices[0].delta.content in ("", None) for c in chunks)
    refusal_tokens = [t.token for c in chunks if c.choices[0].logprobs for t in c.choices[0].logprobs.refusal or []]
    assert "".join(refusal_tokens) == "I'm sorry, but I cannot help with that request."


def test_router_heartbeat_comment_is_replayed_and_ignored_by_the_sdk(instant_server: MockServer) -> None:
    body = {
        "model": "llama-3.1-8b",
        "messages": [{"role": "user", "content": "Is there an even prime greater than 2? Think carefully."}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "reasoning_effort": "high",
    }
    raw = httpx.post(instant_server.url + "/proj_ABC123/my-endpoint/v1/chat/completions", json=body)
    assert b"\n\n: heartbeat\n\n" in raw.content
    stream = sdk(instant_server, "/proj_ABC123/my-endpoint/v1").chat.completions.create(**body)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks).startswith("No. Every even number")
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == 612  # type: ignore[union-attr]


def test_httpx_sse_sees_the_recorded_lmstudio_events(instant_server: MockServer, bundled: dict[str, Cassette]) -> None:
    body = json.loads(bundled["lmstudio-chat"].interactions[0].request.body)
    with (
        httpx.Client() as client,
        connect_sse(client, "POST", instant_server.url + "/api/v1/chat", json=body) as source,
    ):
        events = [(e.event, e.json()) for e in source.iter_sse()]
    kinds = [kind for kind, _ in events]
    assert kinds == [
        "chat.start",
        "model_load.start",
        *["model_load.progress"] * 5,
        "model_load.end",
        "prompt_processing.start",
        *["prompt_processing.progress"] * 4,
        "prompt_processing.end",
        "reasoning.start",
        *["reasoning.delta"] * 5,
        "reasoning.end",
        "tool_call.start",
        "tool_call.arguments",
        "tool_call.success",
        "message.start",
        *["message.delta"] * 21,
        "message.end",
        "chat.end",
    ]
    assert all(kind == data["type"] for kind, data in events)
    message = "".join(data["content"] for kind, data in events if kind == "message.delta")
    # The recording has a non-breaking hyphen, as LM Studio's own example does.
    assert message == "The current top‑trending model on Hugging Face is **moonshotai/Kimi-K2-Thinking**."  # noqa: RUF001
    assert events[-1][1]["result"]["output"][2] == {"type": "message", "content": message}


def test_every_bundled_interaction_is_replayed_byte_for_byte(
    instant_server: MockServer, bundled: dict[str, Cassette]
) -> None:
    with httpx.Client(base_url=instant_server.url) as client:
        for cassette in bundled.values():
            for interaction in cassette:
                req = interaction.request
                url = f"{req.path}?{req.query}" if req.query else req.path  # Gemini's alt=sse: the SSE it recorded
                with client.stream(
                    req.method, url, content=req.body, headers={"content-type": "application/json"}
                ) as got:
                    body = b"".join(got.iter_raw())
                assert (got.status_code, body) == (interaction.response.status, interaction.response.body)
                assert got.headers["content-type"] == interaction.response.header("content-type")


def test_miss_is_an_openai_error_the_sdk_raises_with_the_reason() -> None:
    with serve(pace="instant", match_on="method,path,body") as server, pytest.raises(openai.NotFoundError) as info:
        sdk(server).chat.completions.create(
            model="local-model", messages=[{"role": "user", "content": "Bonjour"}], stream=True
        )
    error = info.value.body
    assert isinstance(error, dict)
    assert error["code"] == "no_match"
    assert error["type"] == "invalid_request_error"
    assert 'body.messages[0].content is "Bonjour", recorded "Hello!"' in error["message"]
    assert "openai-chat.toml #1 (POST /v1/chat/completions)" in error["message"]


async def test_miss_status_is_configurable() -> None:
    async with aserve(Cassette(), miss_status=501) as server, httpx.AsyncClient() as client:
        got = await client.post(server.url + "/v1/anything", json={})
    assert got.status_code == 501
    assert (
        got.json()["error"]["message"]
        == "sse-tape: no recorded interaction matches POST /v1/anything (no interactions are loaded)"
    )


def test_cors_preflight_and_response_headers(instant_server: MockServer) -> None:
    origin = {"Origin": "http://localhost:5173"}
    preflight = httpx.options(
        instant_server.url + "/v1/chat/completions",
        headers={**origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"},
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert preflight.headers["access-control-allow-headers"] == "content-type"
    body = {
        "model": "local-model",
        "messages": [{"role": "user", "content": "Hello!"}],
        "max_tokens": 16,
        "stream": True,
    }
    got = httpx.post(instant_server.url + "/v1/chat/completions", json=body, headers=origin)
    assert got.headers["access-control-allow-origin"] == "http://localhost:5173"


def test_hop_by_hop_headers_are_not_replayed(instant_server: MockServer) -> None:
    body = {
        "model": "local-model",
        "messages": [{"role": "user", "content": "Hello!"}],
        "max_tokens": 16,
        "stream": True,
    }
    got = httpx.post(instant_server.url + "/v1/chat/completions", json=body)
    # The recording says transfer-encoding: chunked; the server frames this response itself, once.
    assert got.headers.get_list("transfer-encoding") == ["chunked"]
    assert got.headers["cache-control"] == "no-cache"


def _json_429() -> Cassette:
    body = b'{"error":{"message":"Rate limit reached","type":"rate_limit_error","code":"rate_limit_exceeded"}}'
    return Cassette(
        [
            Interaction(
                Request("POST", "/v1/chat/completions", body=b'{"model":"m"}'),
                Response(
                    status=429,
                    headers=(
                        ("content-type", "application/json"),
                        ("content-length", str(len(body))),
                        ("retry-after", "7"),
                    ),
                    chunks=(Chunk(0.01, body),),
                ),
            )
        ]
    )


async def test_a_recorded_error_response_keeps_status_headers_and_length() -> None:
    async with aserve(_json_429()) as server, httpx.AsyncClient() as client:
        got = await client.post(server.url + "/v1/chat/completions", content=b'{"model": "m"}')
    assert got.status_code == 429
    assert got.headers["retry-after"] == "7"
    assert int(got.headers["content-length"]) == len(got.content)
    assert got.json()["error"]["code"] == "rate_limit_exceeded"


def test_sdk_raises_rate_limit_error_on_a_recorded_429() -> None:
    with (
        serve(_json_429(), match_on=["method", "path"]) as server,
        pytest.raises(openai.RateLimitError, match="Rate limit"),
    ):
        sdk(server).chat.completions.create(model="m", messages=[], stream=True)


def _cut_short(end: End, duration: float | None = None) -> Cassette:
    chunks = (Chunk(0.0, b"data: one\n\n"), Chunk(0.01, b"data: two\n\n"))
    response = Response(headers=(("content-type", "text/event-stream"),), chunks=chunks, end=end, duration=duration)
    return Cassette([Interaction(Request("GET", "/events"), response)])


@pytest.mark.parametrize(
    ("end", "error"),
    [
        (End.UPSTREAM_RESET, httpx.ReadError),  # a TCP reset
        (End.TIMEOUT, httpx.RemoteProtocolError),  # a close before the end of the chunked body
        (End.CLIENT_GONE, httpx.RemoteProtocolError),
        (End.INTERRUPTED, httpx.RemoteProtocolError),
    ],
)
async def test_a_stream_that_never_ended_is_replayed_as_broken(end: End, error: type[Exception]) -> None:
    got = bytearray()

    async def read_all(client: httpx.AsyncClient, url: str) -> None:
        async with client.stream("GET", url) as response:
            async for piece in response.aiter_raw():
                got.extend(piece)

    loop = asyncio.get_running_loop()
    async with aserve(_cut_short(end, duration=0.2)) as server, httpx.AsyncClient() as client:
        started = loop.time()
        with pytest.raises(error):
            await read_all(client, server.url + "/events")
        # The recorded silence before the end is replayed: the break comes no sooner than it did.
        assert loop.time() - started >= 0.19
    assert bytes(got) == b"data: one\n\ndata: two\n\n"


async def test_client_disconnect_stops_the_stream_at_once(bundled: dict[str, Cassette]) -> None:
    heartbeat = bundled["router-chat"].interactions[2]  # 15 s of silence after the role frame
    role, after = heartbeat.response.chunks[:2]
    baseline = len(asyncio.all_tasks())
    async with aserve(Cassette([heartbeat]), match_on=["path"]) as server:
        url = server.url + heartbeat.request.path
        stream = {"stream": True}
        async with httpx.AsyncClient() as client, client.stream("POST", url, json=stream) as response:
            first = await response.aiter_raw().__anext__()
            assert first.startswith(b"data: ")
            assert server.control.snapshot().streams == 1
        # The client is gone while the server sleeps towards the next chunk.
        async with asyncio.timeout(SAFETY_NET):
            await server.control.idle()
        [ended] = [e for e in server.control.journal if isinstance(e, Ended)]
        await auntil(lambda: len(asyncio.all_tasks()) == baseline, "its task's end")
    assert (ended.end, ended.bytes) == (End.CLIENT_GONE, len(role.data))
    assert ended.seconds < after.t  # by the server's own clock: at once, not when the next chunk was due


def _paced(events: list[bytes], gap: float, headers: tuple[tuple[str, str], ...] = ()) -> Cassette:
    chunks = tuple(Chunk(i * gap, data) for i, data in enumerate(events))
    response = Response(200, (("content-type", "text/event-stream"), *headers), chunks)
    return Cassette([Interaction(Request("POST", "/stream", body=b"{}"), response)])


async def _raw_exchange(port: int, head: bytes) -> tuple[bytes, bytes]:
    """Send a request head (and a `{}` body), read until the server closes; the response's head and body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head + b"Content-Length: 2\r\nConnection: close\r\n\r\n{}")
    got = await reader.read()
    writer.close()
    response_head, _, body = got.partition(b"\r\n\r\n")
    return response_head, body


def _dechunk(body: bytes) -> list[bytes]:
    chunks = []
    while True:
        size, _, body = body.partition(b"\r\n")
        if int(size, 16) == 0:
            assert body == b"\r\n"
            return chunks
        chunks.append(body[: int(size, 16)])
        assert body[int(size, 16) : int(size, 16) + 2] == b"\r\n"
        body = body[int(size, 16) + 2 :]


async def test_a_paced_stream_goes_out_in_chunks_or_unframed_where_http_wants() -> None:
    # Between its first write and its last a paced stream is written from timer callbacks, framed by sse-tape
    # as aiohttp frames a chunk: the framing must be the one aiohttp chose for the response. An empty write
    # (a chunk `eol:crlf` emptied, say) is no chunk at all: framed, it would be the body's end.
    events = [f"data: {i} {'x' * i}\n\n".encode() for i in range(6)]
    async with aserve(_paced([*events[:3], b"", *events[3:]], 0.005)) as server:
        head, body = await _raw_exchange(server.port, b"POST /stream HTTP/1.1\r\nHost: x\r\n")
        assert b"transfer-encoding: chunked" in head.lower()
        chunks = _dechunk(body)  # which fails on a body ended early, or bytes after its end
        # A chunk a write: an event, or the events due by then where the loop came to it late (`_caught_up`).
        assert b"".join(chunks) == b"".join(events)
        assert all(chunk.startswith(b"data: ") and chunk.endswith(b"\n\n") for chunk in chunks)
        head, body = await _raw_exchange(server.port, b"POST /stream HTTP/1.0\r\nHost: x\r\n")
        assert b"transfer-encoding" not in head.lower()
        assert body == b"".join(events)
    length = (("content-length", str(sum(map(len, events)))),)
    async with aserve(_paced(events, 0.005, length)) as server:
        head, body = await _raw_exchange(server.port, b"POST /stream HTTP/1.1\r\nHost: x\r\n")
        assert f"content-length: {len(b''.join(events))}".encode() in head.lower()
        assert body == b"".join(events)


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """What the server writes on its connections' transports, each write as one item (the tests' own requests,
    to `/stream`, left out)."""
    written: list[bytes] = []
    transport_write = asyncio.selector_events._SelectorSocketTransport.write  # type: ignore[attr-defined]

    def counted(self: asyncio.Transport, data: bytes) -> None:
        if not data.startswith(b"POST /stream "):
            written.append(bytes(data))
        transport_write(self, data)

    monkeypatch.setattr(asyncio.selector_events._SelectorSocketTransport, "write", counted)  # type: ignore[attr-defined]
    return written


async def test_a_stream_due_all_at_once_goes_out_with_its_headers_in_one_write(writes: list[bytes]) -> None:
    # An instant replay is one write on the connection's transport, head and body (the network would keep no
    # boundary between them anyway), framed as a stream would be: chunked, with its recorded length, or for
    # HTTP/1.0 without one, unframed, ended by the close. A paced stream's head goes out with its first event.
    events = [f"data: {i} {'x' * i}\n\n".encode() for i in range(6)]
    async with aserve(_paced(events, 0.005), pace="instant") as server:
        writes.clear()
        head, body = await _raw_exchange(server.port, b"POST /stream HTTP/1.1\r\nHost: x\r\n")
        assert b"transfer-encoding: chunked" in head.lower()
        assert _dechunk(body) == [b"".join(events)]
        assert writes == [head + b"\r\n\r\n" + body]
        writes.clear()
        head, body = await _raw_exchange(server.port, b"POST /stream HTTP/1.0\r\nHost: x\r\n")
        assert b"transfer-encoding" not in head.lower()
        assert b"content-length" not in head.lower()
        assert body == b"".join(events)
        assert writes == [head + b"\r\n\r\n" + body]
    async with aserve(_paced(events, 0.005), pace="recorded") as server:
        writes.clear()
        head, body = await _raw_exchange(server.port, b"POST /stream HTTP/1.1\r\nHost: x\r\n")
        assert b"".join(_dechunk(body)) == b"".join(events)
        # With the first event, and with those due by then (a loop slow to come to it sends them together).
        assert writes[0].startswith(head + b"\r\n\r\n")
        assert events[0] in writes[0]
    length = (("content-length", str(sum(map(len, events)))),)
    async with aserve(_paced(events, 0.005, length), pace="instant") as server:
        writes.clear()
        head, body = await _raw_exchange(server.port, b"POST /stream HTTP/1.1\r\nHost: x\r\n")
        assert f"content-length: {len(b''.join(events))}".encode() in head.lower()
        assert body == b"".join(events)
        assert writes == [head + b"\r\n\r\n" + body]


@pytest.mark.parametrize("fault", [None, "fragment:size=5"])
async def test_a_stream_behind_its_schedule_sends_what_is_due_in_one_write(
    writes: list[bytes], fault: str | None
) -> None:
    # A loop busy elsewhere (here blocked for 0.3 s, once the first event is out) leaves a paced stream behind:
    # the writes due by the time it comes back go out in one, where one went out each turn of the loop. A plan
    # whose writes go apart keeps them apart: a fragment fault's pieces are never joined.
    events = [f"data: {i:02}\n\n".encode() for i in range(40)]  # 10 bytes each, 10 ms apart
    async with aserve(_paced(events, 0.01), faults=[fault] if fault else []) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
        got = b""
        while b"\r\n\r\n" not in got or not got.partition(b"\r\n\r\n")[2]:  # the head and the first of the body
            got += await reader.read(65536)
        time.sleep(0.3)  # noqa: ASYNC251 (the loop blocked, the server's too: 30 events fall due meanwhile)
        got += await reader.read()
        writer.close()
    body = [write for write in writes if not write.startswith(b"HTTP/")]
    assert b"".join(_dechunk(got.partition(b"\r\n\r\n")[2])) == b"".join(events)
    if fault is None:
        assert max(write.count(b"data: ") for write in body) > 1
    else:
        assert max(map(len, body)) <= len(b"5\r\n" + b"x" * 5 + b"\r\n0\r\n\r\n")


async def test_streams_first_events_go_out_in_the_order_they_fall_due(
    writes: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A loop busy with a new request's handler (here one that blocks it for 0.6 s before it matches) comes back
    # to a first event that fell due meanwhile, and to the new stream's own, due later: the one due first goes
    # out first. (A handler that waited for its first event in its task, woken behind the busy handler, once
    # went out after the new stream's, sent at once by its late handler: in a burst of new requests, the first
    # to come had their first events last.)
    def stream(path: str, first: float) -> Interaction:
        chunks = (Chunk(first, f"data: {path}\n\n".encode()), Chunk(first + 0.01, b"data: end\n\n"))
        response = Response(200, (("content-type", "text/event-stream"),), chunks)
        return Interaction(Request("POST", path, body=b"{}"), response)

    async def ask(path: str) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}".encode())
        try:
            return await reader.read()
        finally:
            writer.close()

    async with aserve(Cassette([stream("/due", 0.5), stream("/busy", 0.55)]), match_on="method,path") as server:
        add = server.journal.add

        def slowly(entry: Entry) -> None:
            if isinstance(entry, Received) and entry.path == "/busy":
                time.sleep(0.6)  # the loop blocked, the first stream's event falling due meanwhile
            add(entry)

        monkeypatch.setattr(server.journal, "add", slowly)
        due = asyncio.create_task(ask("/due"))
        await auntil(lambda: any(isinstance(e, Matched) for e in server.journal), "the first stream's match")
        answers = await asyncio.gather(due, ask("/busy"))
    assert all(answer.startswith(b"HTTP/1.1 200 OK\r\n") for answer in answers)
    sent = [write for write in writes if b"data: /" in write]
    assert [write.split(b"data: ")[1][:5] for write in sent] == [b"/due\n", b"/busy"]


async def test_a_paced_stream_keeps_its_times_from_the_request_s_arrival_however_long_its_body_takes() -> None:
    # The recorder counts a chunk's time from the request's head, and so does the replay: time spent waiting
    # for the body (or matching, or preparing a first play) is not added in front of the first event.
    # One request's body comes a second after its head, its one event due 1.2 s after the head; another
    # request comes whole with that body, its event due 0.7 s after it. Counted from the head, the first
    # stream ends half a second before the other; counted from its body, half a second after. The server's
    # journal says in which order they ended, by its own clock, however fast the machine is.
    def recorded(body: bytes, at: float, data: bytes) -> Interaction:
        response = Response(200, (("content-type", "text/event-stream"),), (Chunk(at, data),))
        return Interaction(Request("POST", "/stream", body=body), response)

    late, whole = b'{"late": true}', b'{"whole": true}'
    cassette = Cassette([recorded(late, 1.2, b"data: late\n\n"), recorded(whole, 0.7, b"data: whole\n\n")])
    head = b"POST /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
    async with aserve(cassette, match_on="method,path,body") as server:
        loop = asyncio.get_running_loop()

        def read_until(sock: socket.socket, data: bytes) -> bytes:
            answer = b""
            while data not in answer:
                answer += sock.recv(65536)
            return answer

        def scenario() -> tuple[float, bytes, bytes]:
            with (
                socket.create_connection(("127.0.0.1", server.port)) as slow,
                socket.create_connection(("127.0.0.1", server.port)) as other,
            ):
                slow.sendall(head % len(late))
                sent = time.perf_counter()
                time.sleep(1)  # the body comes a second after the head
                other.sendall(head % len(whole) + whole)
                slow.sendall(late)
                answer = read_until(slow, b"data: late")
                first_event = time.perf_counter() - sent
                return first_event, answer, read_until(other, b"data: whole")

        first_event, answer, other = await loop.run_in_executor(None, scenario)
        matched = {e.request: e.recording for e in server.journal if isinstance(e, Matched)}
        ended = [matched[e.request] for e in server.journal if isinstance(e, Ended)]
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert other.startswith(b"HTTP/1.1 200 OK\r\n")
    assert first_event >= 1.2  # a floor: the event comes no sooner than recorded
    assert ended == ["<memory> #1 (POST /stream)", "<memory> #2 (POST /stream)"]  # the late body's stream first


async def test_requests_that_come_together_for_a_first_play_share_its_preparation() -> None:
    # A first play is prepared (its plan asked of the pace, among the rest) in a thread, held here until every
    # request has arrived: each would otherwise prepare its own, and ask for a plan of its own.
    plans = []

    class Counted(Pacing):
        """The recorded pace, counting the plans asked of it."""

        def plan(self, response: Response, *, key: str = "") -> Plan:
            plans.append(key)
            until(lambda: server.control.snapshot().requests == 20, "every request")
            return super().plan(response, key=key)

    events = [f"data: {i} {'x' * 200}\n\n".encode() for i in range(100)]  # long enough to be prepared in a thread
    async with aserve(_paced(events, 0.0), pace=Counted()) as server, httpx.AsyncClient(base_url=server.url) as client:
        answers = await asyncio.gather(*(client.post("/stream", content=b"{}") for _ in range(20)))
        assert server.control.snapshot().requests == 20
    assert [a.content for a in answers] == [b"".join(events)] * 20
    assert len(plans) == 1


async def test_a_client_that_does_not_read_holds_a_paced_stream_back() -> None:
    # 20 MB due within 0.6 s of the first event to a client that reads nothing: the server hands the socket
    # what it takes and waits, rather than queueing the whole stream in memory. (The first event is small: a
    # write of more than 64 KiB through aiohttp waits for the client there, before the stream's pacing begins.)
    events = [b"data: start\n\n"] + [b"data: " + b"x" * 65536 + b"\n\n"] * 300
    async with aserve(_paced(events, 0.002)) as server:
        sock = await unread(server.port, b"POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        # The recording is made ready for its first play in a thread, which a busy machine may take seconds
        # over: the stream's clock starts with its first bytes, seen here without reading them.
        await auntil(lambda: _waiting(sock), "the stream's first bytes")
        # A floor, not a wait for anything: by now every event is due, and a server that queued them all
        # rather than wait for the client would have.
        await asyncio.sleep(1)
        assert server.control.snapshot().streams == 1
        sock.close()
        async with asyncio.timeout(SAFETY_NET):
            await server.control.idle()
        [ended] = [e for e in server.control.journal if isinstance(e, Ended)]
    assert ended.end is End.CLIENT_GONE
    assert 0 < ended.bytes < sum(map(len, events)) / 2


async def test_a_client_that_takes_nothing_of_its_answer_is_cut_off_after_the_send_timeout() -> None:
    # 20 MB due at once to a client that reads nothing: its socket's buffer fills, and once it has taken nothing
    # for the send timeout, the server closes the connection; the stream ends as its client's going would.
    events = [b"data: " + b"x" * 65536 + b"\n\n"] * 300
    limits = Limits(send_timeout=0.5)
    async with MockServer([_paced(events, 0.0)], options=ServeOptions.build(pace="instant"), limits=limits) as server:
        sock = await unread(server.port, b"POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        await auntil(lambda: server.stats()["stalled_connections"] == 1, "the client cut off")
        async with asyncio.timeout(SAFETY_NET):
            await server.control.idle()
            got = 0
            with contextlib.suppress(ConnectionResetError):
                while piece := await asyncio.get_running_loop().sock_recv(
                    sock, 65536
                ):  # what was sent before, then the close
                    got += len(piece)
        sock.close()
        [ended] = [e for e in server.control.journal if isinstance(e, Ended)]
    assert ended.end is End.CLIENT_GONE
    assert got < sum(map(len, events)) / 2


async def test_beyond_the_limit_a_new_connection_takes_the_place_of_an_idle_or_stalled_one() -> None:
    # Five connections at most: two idle after their answer, three whose clients read none of a 20 MB stream.
    # Each new one takes the place of the one that gave way longest ago; past them, a 503.
    small = Interaction(Request("GET", "/small"), Response(200, SSE_HEAD, (Chunk(0.0, b"data: x\n\n"),)))
    big = _paced([b"data: " + b"x" * 65536 + b"\n\n"] * 300, 0.0)
    limits = Limits(max_connections=5)
    options = ServeOptions.build(pace="instant", match_on="method,path")
    async with MockServer([Cassette([small, *big.interactions])], options=options, limits=limits) as server:
        loop = asyncio.get_running_loop()

        def scenario() -> tuple[list[bytes], list[bool]]:
            idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]
            for sock in idle:
                sock.sendall(b"GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
                assert _answered(sock).endswith(b"data: x\n\n\r\n0\r\n\r\n")
            stalled = []
            for _ in range(3):
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect(("127.0.0.1", server.port))
                sock.sendall(b"POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
                stalled.append(sock)
            until(lambda: _stat(server, loop, "idle_or_stalled_connections") == 5, "five that may give way")
            # Five new readers, one after the other, each answered in the place of the one that gave way first
            # (each keeps its connection, idle after its answer, and younger than the others).
            answers, readers = [], []
            for _ in range(5):
                readers.append(sock := socket.create_connection(("127.0.0.1", server.port)))
                sock.sendall(b"GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
                answers.append(_answered(sock))
            closed = [_closed_within(sock, 30) for sock in [*idle, *stalled]]
            for sock in readers:
                sock.close()
            return answers, closed

        answers, closed = await loop.run_in_executor(None, scenario)
        stats = server.stats()
    assert all(answer.endswith(b"data: x\n\n\r\n0\r\n\r\n") for answer in answers)
    assert closed == [True] * 5
    assert (stats["evicted_connections"], stats["refused_connections"]) == (5, 0)


SSE_HEAD = (("content-type", "text/event-stream"),)


def _stat(server: MockServer, loop: asyncio.AbstractEventLoop, name: str) -> int:
    """One of the server's `stats()`, read on its event loop from another thread."""

    async def read() -> int:
        return server.stats()[name]

    return asyncio.run_coroutine_threadsafe(read(), loop).result()


def _waiting(sock: socket.socket) -> bool:
    """Whether bytes wait to be read on a non-blocking socket (left there)."""
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except BlockingIOError:
        return False


async def test_many_concurrent_streams_each_get_the_whole_recording(bundled: dict[str, Cassette]) -> None:
    interaction = bundled["openai-chat"].interactions[0]
    async with aserve(Cassette([interaction]), pace="x4") as server:
        limits = httpx.Limits(max_connections=200)
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=30) as client:

            async def one() -> bytes:
                got = await client.post(interaction.request.path, content=interaction.request.body)
                return got.content

            bodies = await asyncio.gather(*(one() for _ in range(200)))
        assert set(bodies) == {interaction.response.body}
        async with asyncio.timeout(SAFETY_NET):  # every stream ends
            await server.control.idle()


def test_serve_frees_the_port_when_the_block_ends() -> None:
    with serve(Cassette()) as server:
        port = server.port
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_serve_binds_loopback_by_default() -> None:
    with serve(Cassette()) as server:
        assert server.url == f"http://127.0.0.1:{server.port}"


# --- what a hostile or careless client tries ---------------------------------------------------------

CHAT = {"model": "local-model", "messages": [{"role": "user", "content": "Hello!"}], "stream": True}
QUICK = Limits(request_timeout=0.5, keep_alive=0.5, max_connections=30)


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes the connection within `seconds` (what it sends first is read and dropped)."""
    sock.settimeout(seconds)
    with sock:
        try:
            while sock.recv(4096):
                pass
        except TimeoutError:
            return False
        except ConnectionResetError:
            pass
    return True


async def test_slow_heads_idle_connections_and_bodies_that_never_come_are_cut_off() -> None:
    async with MockServer(
        load_cassettes([]), options=ServeOptions.build(match_on="method,path"), limits=QUICK
    ) as server:
        loop = asyncio.get_running_loop()

        def scenario() -> list[bool]:
            trickle = socket.create_connection(("127.0.0.1", server.port))
            trickle.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # and never the rest
            idle = socket.create_connection(("127.0.0.1", server.port))  # says nothing at all
            body = socket.create_connection(("127.0.0.1", server.port))
            body.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            expect = socket.create_connection(("127.0.0.1", server.port))
            expect.sendall(b"POST /v1/x HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\nExpect: 100-continue\r\n\r\n")
            # Meanwhile a normal request is answered.
            answered = httpx.post(server.url + "/v1/chat/completions", json=CHAT).status_code == 200
            return [answered] + [_closed_within(s, 30) for s in (trickle, idle, body, expect)]

        assert await loop.run_in_executor(None, scenario) == [True] * 5
        statuses = [e.status for e in server.journal if isinstance(e, Ended)]
        assert statuses.count(408) == 2  # the body that never came, and the body promised after 100-continue


FEED = Cassette([Interaction(Request("GET", "/feed"), Response(chunks=(Chunk(0.0, b"data: x\n\n"),)))])


def test_the_server_answers_on_uvloop() -> None:
    # aiohttp applications often run on uvloop, whose transports are not of asyncio's classes.
    import uvloop

    async def scenario() -> tuple[int, str]:
        async with MockServer([FEED], options=ServeOptions.build(match_on="method,path")) as server:
            async with httpx.AsyncClient() as client:
                answer = await client.get(server.url + "/feed")
            return answer.status_code, answer.text

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        status, text = runner.run(scenario())
    assert status == 200
    assert text == "data: x\n\n"


def _head(sock: socket.socket) -> bytes:
    """What `sock` reads up to the end of a response's head (a 100 Continue's, say)."""
    sock.settimeout(SAFETY_NET)
    head = b""
    while b"\r\n\r\n" not in head:
        data = sock.recv(1)
        assert data, f"the connection closed before a whole head: {head!r}"
        head += data
    return head


async def test_a_client_expecting_100_continue_is_told_to_send_its_body_unless_it_is_too_large() -> None:
    posted = Cassette([Interaction(Request("POST", "/feed"), Response(chunks=(Chunk(0.0, b"data: x\n\n"),)))])
    options = ServeOptions.build(match_on="method,path", max_body=1000)
    async with MockServer([posted], options=options) as server:

        def scenario() -> tuple[bytes, bytes, bytes, bytes]:
            with socket.create_connection(("127.0.0.1", server.port)) as waiting:
                head = b"POST /feed HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue, x-other\r\n\r\n"
                waiting.sendall(head)
                told = _head(waiting)  # the body is sent only once the server says so, as curl does
                waiting.sendall(b"{}")
                answer = _answered(waiting)
            with socket.create_connection(("127.0.0.1", server.port)) as large:
                large.sendall(
                    b"POST /feed HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\nExpect: 100-continue\r\n\r\n"
                )
                refused = _head(large)  # refused for its length, never asked for
            with socket.create_connection(("127.0.0.1", server.port)) as odd:  # an expectation it cannot meet: ignored
                odd.sendall(b"POST /feed HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: x-teapot\r\n\r\n{}")
                ignored = _answered(odd)
            return told, answer, refused, ignored

        told, answer, refused, ignored = await asyncio.get_running_loop().run_in_executor(None, scenario)
    assert told == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert b"data: x" in answer
    assert refused.startswith(b"HTTP/1.1 413 ")
    assert ignored.startswith(b"HTTP/1.1 200 ")


def _read_until(sock: socket.socket, marker: bytes, got: bytes = b"") -> bytes:
    """What `sock` reads, after `got` read before, until `marker` is in it."""
    sock.settimeout(SAFETY_NET)
    while marker not in got:
        data = sock.recv(4096)
        assert data, f"the connection closed before {marker!r}: {got!r}"
        got += data
    return got


def _post_head(port: int, path: str, content_type: str, length: int) -> bytes:
    """The head of a POST to `path` on the server at `port`, with the `Host` the control endpoints take as its own."""
    fields = f"Host: 127.0.0.1:{port}\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n"
    return f"POST {path} HTTP/1.1\r\n{fields}".encode()


def _answered(sock: socket.socket) -> bytes:
    """A whole chunked answer read from `sock`."""
    sock.settimeout(30)
    answer = b""
    while not answer.endswith(b"\r\n0\r\n\r\n"):
        data = sock.recv(4096)
        assert data, f"the connection closed in the middle of an answer: {answer!r}"
        answer += data
    return answer


@pytest.mark.parametrize(
    ("limits", "then"),
    [
        (Limits(request_timeout=0.5, keep_alive=600), b"GET /feed HTTP/1.1\r\nHost: x\r\n"),
        (Limits(request_timeout=600, keep_alive=0.5), b""),
    ],
    ids=["a head that never finishes", "silence"],
)
async def test_a_connection_that_was_answered_is_held_to_the_deadline_of_what_it_does_next(
    limits: Limits, then: bytes
) -> None:
    # One timer per connection serves all its deadlines, moved on by each request: after several answers a
    # connection is still closed when its next head dawdles, or when it stays idle.
    async with MockServer([FEED], options=ServeOptions.build(match_on="path"), limits=limits) as server:
        loop = asyncio.get_running_loop()

        def scenario() -> bool:
            sock = socket.create_connection(("127.0.0.1", server.port))
            for _ in range(3):
                sock.sendall(b"GET /feed HTTP/1.1\r\nHost: x\r\n\r\n")
                assert _answered(sock).endswith(b"data: x\n\n\r\n0\r\n\r\n")
            sock.sendall(then)
            return _closed_within(sock, 30)

        assert await loop.run_in_executor(None, scenario)


async def test_a_stream_answered_behind_another_is_not_cut_off_by_the_next_request_s_head() -> None:
    # Two requests sent at once (pipelined): the second's stream outlasts the request deadline, and the first
    # bytes of a third come while it plays. Those bytes start no deadline: the connection is busy answering.
    slow = Interaction(
        Request("GET", "/slow"), Response(chunks=(Chunk(0.0, b"data: a\n\n"), Chunk(1.5, b"data: b\n\n")))
    )
    limits = Limits(request_timeout=0.3, keep_alive=600)
    async with MockServer([Cassette([*FEED.interactions, slow])], limits=limits) as server:
        loop = asyncio.get_running_loop()

        def scenario() -> bytes:
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(b"GET /feed HTTP/1.1\r\nHost: x\r\n\r\nGET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
                got = _read_until(sock, b"data: a")  # the first answer, and the second's stream has begun
                sock.sendall(b"GET /feed HTTP/1.1\r\n")  # a third, not whole yet
                return _read_until(sock, b"data: b\n\n\r\n0\r\n\r\n", got)

        assert (await loop.run_in_executor(None, scenario)).endswith(b"data: b\n\n\r\n0\r\n\r\n")


async def test_a_head_begun_while_the_answer_before_it_played_has_the_request_deadline_after_it() -> None:
    # The first bytes of the next request come while a stream plays, and no more: once the stream is over, the
    # connection is held to the request deadline (0.3 s), not left idle for the keep-alive (600 s).
    slow = Interaction(
        Request("GET", "/slow"), Response(chunks=(Chunk(0.0, b"data: a\n\n"), Chunk(0.5, b"data: b\n\n")))
    )
    limits = Limits(request_timeout=0.3, keep_alive=600)
    async with MockServer([Cassette([slow])], limits=limits) as server:
        loop = asyncio.get_running_loop()

        def scenario() -> bool:
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
            got = _read_until(sock, b"data: a")
            sock.sendall(b"GET /slow HTTP/1.1\r\n")  # the next head, begun while the stream plays
            _read_until(sock, b"data: b\n\n\r\n0\r\n\r\n", got)  # the stream whole, not cut
            return _closed_within(sock, 30)

        assert await loop.run_in_executor(None, scenario)


async def test_a_connection_whose_body_came_after_its_head_is_kept_alive_after_the_answer() -> None:
    # A body sent apart from its head reaches the server while its request is answered: it is no next request,
    # and the connection, idle once answered, waits for one under the keep-alive, not the request deadline.
    posted = Interaction(Request("POST", "/feed", body=b"{}"), Response(chunks=(Chunk(0.0, b"data: x\n\n"),)))
    limits = Limits(request_timeout=1.0, keep_alive=600)  # the body, 0.2 s late, well within its deadline
    async with MockServer([Cassette([posted])], limits=limits) as server:
        loop = asyncio.get_running_loop()

        def scenario() -> bytes:
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(b"POST /feed HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n")
                time.sleep(0.2)  # the head is handed over on its own; the body follows
                sock.sendall(b"{}")
                _answered(sock)
                time.sleep(3.0)  # idle, past the request deadline
                sock.sendall(b"POST /feed HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
                return _answered(sock)

        assert (await loop.run_in_executor(None, scenario)).startswith(b"HTTP/1.1 200 OK\r\n")


async def test_a_body_that_came_after_an_answer_given_without_it_is_no_next_request() -> None:
    # A control POST of the wrong type is refused (415) before its body is read; that body, sent after the
    # answer, is still the request's, drained by the server: the connection then waits for a next request under
    # the keep-alive, not under the request deadline of a next request's head begun.
    posted = Interaction(Request("POST", "/feed", body=b"{}"), Response(chunks=(Chunk(0.0, b"data: x\n\n"),)))
    limits = Limits(request_timeout=1.0, keep_alive=600)
    async with MockServer([Cassette([posted])], limits=limits) as server:
        loop = asyncio.get_running_loop()

        def scenario() -> tuple[bytes, bytes]:
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(_post_head(server.port, "/__sse_tape__/reset", "text/plain", 2))
                refused = _read_until(sock, b'"}')  # the whole JSON error
                sock.sendall(b"{}")
                time.sleep(3.0)  # idle, past the request deadline
                sock.sendall(b"POST /feed HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
                return refused, _answered(sock)

        refused, answer = await loop.run_in_executor(None, scenario)
    assert refused.startswith(b"HTTP/1.1 415 Unsupported Media Type\r\n")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")


def _read_to_close(sock: socket.socket) -> bytes:
    """All `sock` reads until the server closes the connection (within `SAFETY_NET`)."""
    sock.settimeout(SAFETY_NET)
    got = b""
    while data := sock.recv(4096):
        got += data
    return got


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/__sse_tape__/reset"])
async def test_a_body_too_slow_gets_a_408_and_then_its_connection_closes(path: str) -> None:
    # The 408 reaches the client (an API's path closed the connection before it and sent nothing), and the
    # connection closes after it, not under the keep-alive (here ten minutes).
    async with MockServer([Cassette()], limits=Limits(request_timeout=0.5, keep_alive=600)) as server:
        loop = asyncio.get_running_loop()

        def scenario() -> bytes:
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(_post_head(server.port, path, "application/json", 100) + b"{")  # and never the rest
                return _read_to_close(sock)

        got = await loop.run_in_executor(None, scenario)
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert b"\r\nconnection: close" in head.lower()  # as RFC 9110 asks of a 408
    assert b"did not arrive in time" in body


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/__sse_tape__/reset"])
async def test_after_a_408_the_rest_of_the_body_is_read_not_met_with_a_reset(path: str) -> None:
    # After its 408 the server ends its output and reads on (RFC 9112, section 9.6). It used to close at once,
    # and the system answered what the client still sent with a reset, which can cost a client that is still
    # sending (a late upload) the 408 it has not read. The rest comes in two sends: the reset the first would
    # get fails the second. The server drains for `request_timeout` (2 s) after the 408: seconds of room.
    async with MockServer([Cassette()], limits=Limits(request_timeout=2, keep_alive=600)) as server:
        loop = asyncio.get_running_loop()

        def scenario() -> tuple[bytes, bytes]:
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(_post_head(server.port, path, "application/json", 100) + b"{")
                answer = _read_to_close(sock)  # the 408, then the end of the server's output
                sock.sendall(b" " * 50)
                time.sleep(0.1)  # what the system answers to those bytes has come back
                sock.sendall(b" " * 49)  # the body's end
                return answer, sock.recv(1)

        answer, after = await loop.run_in_executor(None, scenario)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert after == b""  # the end of the output, as before: no reset


async def test_a_connection_draining_the_body_after_its_408_does_not_give_way_to_a_new_one() -> None:
    # At the connection limit a new connection takes the place of an idle one. One whose 408 is out while its
    # body still comes is not idle: it used to be closed with a reset, and its client, still sending, lost the
    # 408 it had not read. Now the new connection gets the 503, and the first ends as the test above's does.
    limits = Limits(request_timeout=2, keep_alive=600, max_connections=1)
    async with MockServer([Cassette()], limits=limits) as server:
        loop = asyncio.get_running_loop()

        def scenario() -> tuple[bytes, bytes, bytes]:
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(_post_head(server.port, "/v1/chat/completions", "application/json", 100) + b"{")
                answer = _read_to_close(sock)  # the 408, then the end of the server's output
                with socket.create_connection(("127.0.0.1", server.port)) as newcomer:  # sends nothing, and waits
                    refused = _read_to_close(newcomer)
                sock.sendall(b" " * 50)
                time.sleep(0.1)  # what the system answers to those bytes has come back
                sock.sendall(b" " * 49)  # the body's end
                return answer, refused, sock.recv(1)

        answer, refused, after = await loop.run_in_executor(None, scenario)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert refused.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert after == b""


async def test_a_body_its_answer_did_not_read_has_the_request_deadline_to_come_after_it() -> None:
    # A 415 is answered before its body is read; the body, a byte every 0.1 s, is drained for `request_timeout`
    # after the answer (0.3 s: about 3 bytes), then the connection closes; not after aiohttp's own 10 s
    # (about 100 bytes), nor the keep-alive. 50 bytes leave seconds of room either way.
    async with MockServer([Cassette()], limits=Limits(request_timeout=0.3, keep_alive=600)) as server:
        loop = asyncio.get_running_loop()

        def scenario() -> tuple[bytes, int]:
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(_post_head(server.port, "/__sse_tape__/reset", "text/plain", 1000))
                refused = _read_until(sock, b'"}')
                sock.settimeout(0.1)
                for sent in range(1000):
                    try:
                        if not sock.recv(1):
                            return refused, sent  # closed
                        sock.sendall(b" ")
                    except TimeoutError:
                        sock.sendall(b" ")
                    except (ConnectionResetError, BrokenPipeError):  # a byte sent after the close: a reset
                        return refused, sent
                return refused, 1000

        refused, sent = await loop.run_in_executor(None, scenario)
    assert refused.startswith(b"HTTP/1.1 415 Unsupported Media Type\r\n")
    assert sent < 50


async def test_a_body_that_comes_after_its_head_is_waited_for_and_matched() -> None:
    def recorded(body: bytes, data: bytes) -> Interaction:
        return Interaction(Request("POST", "/echo", body=body), Response(chunks=(Chunk(0.0, data),)))

    cassette = Cassette([recorded(b'{"q": 1}', b"data: one\n\n"), recorded(b'{"q": 2}', b"data: two\n\n")])
    async with aserve(cassette, match_on="method,path,body", pace="instant") as server:
        loop = asyncio.get_running_loop()

        def scenario() -> bytes:
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\n")
                time.sleep(0.2)  # the head is read on its own; the body follows
                sock.sendall(b'{"q": 2}')
                return _answered(sock)

        answer = await loop.run_in_executor(None, scenario)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(b"data: two\n\n\r\n0\r\n\r\n")


async def test_connections_beyond_the_limit_get_a_503_and_the_rest_are_served() -> None:
    async with MockServer(
        load_cassettes([]), options=ServeOptions.build(match_on="method,path"), limits=QUICK
    ) as server:
        loop = asyncio.get_running_loop()

        def scenario() -> tuple[list[bytes], int]:
            held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(30)]
            with socket.create_connection(("127.0.0.1", server.port)) as extra:
                extra.settimeout(10)
                refused = extra.recv(100)
            for sock in held:
                _closed_within(sock, 30)  # the idle ones time out
            return [refused], httpx.post(server.url + "/v1/chat/completions", json=CHAT).status_code

        [refused], status = await loop.run_in_executor(None, scenario)
    assert refused.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert status == 200


def _rss(pid: int) -> int:
    """The resident set of a process, in bytes."""
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _stopped(process: subprocess.Popen[str]) -> str:
    """Stop a server started by `processes.start` (SIGINT), and return what it wrote on stderr."""
    process.send_signal(signal.SIGINT)
    return process.communicate(timeout=SAFETY_NET)[1]


async def test_a_flood_of_misses_with_long_paths_leaves_others_answered_and_is_given_back_at_a_reset() -> None:
    # Eight clients send 2,000 misses with 8 KB paths (twice the misses and requests a server keeps), while another's
    # ordinary requests are answered; then a reset gives back what the misses left (the misses kept, the requests
    # received, the journal). A flood half as big comes first, so that the caches of the process (aiohttp's,
    # yarl's) hold before what they hold after.
    process, url = processes.start(["serve", "--port", "0", "-q", "--pace", "instant"])
    long = "/v1/chat/completions/" + "a" * 8000
    try:
        async with httpx.AsyncClient(base_url=url, timeout=SAFETY_NET) as client:

            async def misses(count: int, tag: str) -> None:
                async def one(k: int) -> None:
                    for n in range(count // 8):
                        assert (await client.post(f"{long}/{tag}{k}-{n}", json=CHAT)).status_code == 404

                await asyncio.gather(*(one(k) for k in range(8)))

            await misses(1000, "warm")
            assert (await client.post("/__sse_tape__/reset", json={})).status_code == 200
            before = _rss(process.pid)
            flood = asyncio.ensure_future(misses(2000, "flood"))
            answered = 0
            while not flood.done():
                got = await client.post("/v1/chat/completions", json=CHAT)
                assert (got.status_code, got.text.endswith("data: [DONE]\n\n")) == (200, True)
                answered += 1
            await flood
            flooded = _rss(process.pid)
            assert (await client.post("/__sse_tape__/reset", json={})).status_code == 200
            after = _rss(process.pid)
    finally:
        _stopped(process)
    assert answered > 0
    # What the flood left (the 8 KB paths the journal keeps are 16 MB alone): a reset had something to give back.
    assert flooded - before > 8 * 2**20
    assert after < 1.1 * before


def test_clients_that_never_read_cannot_keep_a_reading_client_out(tmp_path: Path) -> None:
    # A thousand clients (as many as the descriptors allow) ask for a 4 MB stream and read none of it, against a
    # server that takes 100 connections: once one has stopped reading, a new client takes its place. A reading
    # client, on a new connection each time, is answered throughout (before, turned away with 503s for good).
    stream = [Chunk(0.0, b"data: " + b"x" * 65536 + b"\n\n")] * 64 + [Chunk(600.0, b"data: end\n\n")]
    cassette = Cassette(
        [
            Interaction(Request("POST", "/stream", body=b"{}"), Response(200, SSE_HEAD, tuple(stream))),
            Interaction(Request("GET", "/small"), Response(200, SSE_HEAD, (Chunk(0.0, b"data: x\n\n"),))),
        ],
        path=tmp_path / "floods.msgpack",
    )
    cassette.save()
    count = min(1000, processes.descriptors(1400) - 300)
    process, url = processes.start(["serve", str(cassette.path), "--port", "0", "-q", "--max-connections", "100"])
    port = int(url.rsplit(":", 1)[1])
    flood: list[socket.socket] = []
    try:
        flood = never_reading(port, b"POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", count)

        def answered() -> bool:
            with httpx.Client(timeout=SAFETY_NET) as client:  # a connection of its own
                got = client.get(url + "/small")
            return (got.status_code, got.text) == (200, "data: x\n\n")

        until(answered, "a first answer")  # once the flood's streams have stalled
        assert all(answered() for _ in range(20))
        stats = httpx.get(url + "/__sse_tape__/stats").json()
    finally:
        for sock in flood:
            sock.close()
        err = _stopped(process)
    assert stats["evicted_connections"] >= 1  # the place each reader takes is its last one's, once it has one
    assert "Traceback" not in err


def test_a_request_that_is_not_http_is_one_line_on_stderr() -> None:
    process, url = processes.start(["serve", "--port", "0"])
    try:
        port = int(url.rsplit(":", 1)[1])
        for raw in (b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(raw)
                assert sock.recv(100).startswith(b"HTTP/1.0 400 Bad Request")
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    lines = err.splitlines()
    assert "Traceback" not in err
    assert [line.split(":", 2)[1] for line in lines if "Error handling request" in line] == [
        " Error handling request from 127.0.0.1"
    ] * 2
    assert any("Invalid header token" in line for line in lines)


@pytest.mark.parametrize(
    ("body", "status", "said"),
    [
        # Refused before any parser recurses into it.
        (b"[" * 100_000, 413, "sse-tape: the request body's JSON nested more than 64 deep"),
        # A lone surrogate, named in the miss explanation.
        (b'{"model": "\\ud800", "messages": []}', 404, "sse-tape: no recorded interaction matches"),
    ],
    ids=["deep", "surrogate"],
)
def test_bodies_that_break_parsers_get_an_answer_not_a_500(body: bytes, status: int, said: str) -> None:
    with serve("cassettes/", match_on="method,path,body") as server:
        got = httpx.post(
            server.url + "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
    assert got.status_code == status
    assert got.json()["error"]["message"].startswith(said)


def test_listening_beyond_loopback_says_what_becomes_reachable() -> None:
    process, _ = processes.start(["serve", "--host", "0.0.0.0", "--port", "0"])
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert err.splitlines()[0] == (
        "sse-tape: warning: listening on 0.0.0.0: other machines can reach every recording served; "
        "the fault header and the control endpoints still answer this machine only"
    )


async def test_a_head_request_gets_no_body_and_the_connection_stays_usable() -> None:
    recorded = Interaction(Request("GET", "/feed"), Response(chunks=(Chunk(0.0, b"data: x\n\n"),)))
    async with aserve(Cassette([recorded]), match_on="path", pace="instant") as server, httpx.AsyncClient() as client:
        head = await client.head(server.url + "/feed")
        again = await client.get(server.url + "/feed")  # on the same kept-alive connection
    assert (head.status_code, head.content) == (200, b"")
    assert again.content == b"data: x\n\n"


@pytest.mark.fuzz
@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "BREW"]),
    path=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=60).map(lambda p: "/" + p),
    body=st.binary(max_size=200),
    # Header bytes beyond ASCII too (sent as Latin-1: not UTF-8), as aiohttp hands them over.
    fault=st.none()
    | st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=40),
    encoding=st.none() | st.sampled_from(["gzip", "x-gzip", "deflate", "br", "identity", "gzip, deflate"]),
    packed=st.booleans(),
)
def test_any_request_gets_an_answer_never_a_500(
    instant_server: MockServer,
    method: str,
    path: str,
    body: bytes,
    fault: str | None,
    encoding: str | None,
    packed: bool,
) -> None:
    headers = {"X-SSE-Tape-Fault": fault} if fault is not None else {}
    if encoding is not None:
        headers["Content-Encoding"] = encoding
        body = gzip.compress(body) if packed else body  # the right encoding or not, a whole one or not
    with socket.create_connection(("127.0.0.1", instant_server.port), timeout=10) as sock:
        head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\nConnection: close\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        sock.sendall(head.encode("latin-1") + b"\r\n" + body)
        status_line = sock.makefile("rb").readline()
    assert status_line.startswith((b"HTTP/1.1 ", b"HTTP/1.0 ")), status_line
    assert status_line.split()[1] != b"500", status_line


@pytest.mark.slow
def test_a_short_soak_leaves_nothing_behind() -> None:
    # bench/soak.py, briefly: streams of every kind, then descriptors, connections, streams and tasks back where
    # they were and RSS within bounds; the long run is `just soak`.
    soak = Path(__file__).parent.parent / "bench" / "soak.py"
    result = subprocess.run(
        [sys.executable, str(soak), "--seconds", "4", "--clients", "10", "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "grew:" not in result.stdout


def _running_with(marker: str) -> list[str]:
    """Command lines of the processes still running that mention `marker`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # it ended while we looked
        if marker in line:
            found.append(line)
    return found


@pytest.mark.slow
def test_a_short_peers_benchmark_checks_every_answer_and_leaves_no_process(tmp_path: Path) -> None:
    # bench/peers_bench.py, briefly and without aimock: every server answers every stream in full, the
    # replayed bytes are the recorded ones, and every server it started is gone when it ends. Its
    # temporary files, and so the command lines of the servers it spawns, are under tmp_path; the
    # servers it forks carry tmp_path in the --profile argument.
    bench = Path(__file__).parent.parent / "bench" / "peers_bench.py"
    args = ["--rounds", "1", "--streams", "50", "--warm", "30", "--starts", "1", "--profile", str(tmp_path / "p")]
    result = subprocess.run(
        [sys.executable, str(bench), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "  sse-tape: the recorded bytes" in result.stdout
    assert "  sse-tape serve: the recorded bytes" in result.stdout
    for figure in ("instant replay", "60-event instant streams", "cold start"):
        assert figure in result.stdout
    assert _running_with(str(tmp_path)) == []


@pytest.mark.slow
def test_a_short_parts_benchmark_measures_each_tree_and_leaves_no_process(tmp_path: Path) -> None:
    # bench/parts_bench.py, briefly, with this tree and a copy of it: each is measured (the client checks
    # every answer whole), and every server it started is gone when it ends (their command lines name the
    # cassette it writes under TMPDIR, tmp_path).
    root = Path(__file__).parent.parent
    copy = tmp_path / "copy"
    shutil.copytree(root / "sse_tape", copy / "sse_tape")
    imported = tmp_path / "imported"  # the copy's server says it imported the copy
    with (copy / "sse_tape" / "__init__.py").open("a") as init:
        init.write(f"\nopen({str(imported)!r}, 'w').close()\n")
    limits = ("--rounds", "2", "--streams", "100")
    result = subprocess.run(
        [sys.executable, str(root / "bench" / "parts_bench.py"), str(root), str(copy), *limits],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].startswith(f"{root.resolve()}: ")
    assert lines[1].endswith("1.000 of the first")
    assert lines[2].startswith(f"{copy.resolve()}: ")
    assert "µs [quartiles " in lines[2]
    assert imported.exists()
    assert _running_with(str(tmp_path)) == []  # its servers' cassette is under TMPDIR


def test_the_peers_benchmark_says_in_one_line_when_aimock_is_not_there(tmp_path: Path) -> None:
    bench = Path(__file__).parent.parent / "bench" / "peers_bench.py"
    result = subprocess.run(
        [sys.executable, str(bench), "--aimock", str(tmp_path / "llmock")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert result.stderr == f"--aimock {tmp_path / 'llmock'}: not aimock's llmock script nor its package folder\n"


def test_running_out_of_descriptors_is_said_once_and_service_resumes() -> None:
    # The server may open 40 files, and is told to take up to 1,000 connections: accepting fails, again and
    # again, while 60 connections are held open; asyncio retries every second and used to log each failure.
    limit = "import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))"
    args = ["serve", "--port", "0", "--max-connections", "1000", "--keep-alive", "30s"]
    server, url = processes.start(args, setup=limit)
    assert server.stdout is not None
    assert server.stderr is not None
    err, reading = _read_on(server.stderr)
    _, draining = _read_on(server.stdout)  # so that the server never waits to write its log

    def answered() -> bool:  # once the descriptors are free again, requests are answered
        try:
            return httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    try:
        port = int(url.rsplit(":", 1)[1])
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(60)]
        until(lambda: any("cannot accept connections" in line for line in err), "the line that says so")
        time.sleep(2)  # a floor, not a wait for anything: asyncio retries twice meanwhile, and said each once
        for sock in held:
            sock.close()
        until(answered, "an answer")
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
        for reader, stream in ((reading, server.stderr), (draining, server.stdout)):
            reader.join(timeout=30)  # to the end of what it wrote
            stream.close()
    said = [line for line in err if "cannot accept connections" in line]
    assert len(said) == 1, "".join(err)[-2000:]
    assert "Traceback" not in "".join(err)


def _read_on(stream: IO[str]) -> tuple[list[str], threading.Thread]:
    """The lines of `stream`, read as they come by a thread of their own, which ends with the stream: a
    process's output, which a test waits on while the process runs."""
    lines: list[str] = []

    def read() -> None:
        for line in stream:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return lines, reader


def _feed(events: int) -> Cassette:
    """A GET notification feed, as an EventSource reads one: a retry, then events that each carry an id."""
    chunks = [Chunk(0.0, b"retry: 50\n\n")]
    chunks += [Chunk(0.01 * n, f"id: {n}\nevent: note\ndata: note {n}\n\n".encode()) for n in range(1, events + 1)]
    headers = (("content-type", "text/event-stream"), ("cache-control", "no-cache"))
    return Cassette([Interaction(Request("GET", "/events"), Response(200, headers, tuple(chunks)))])


def test_a_reconnection_with_last_event_id_resumes_after_that_event() -> None:
    with serve(_feed(5), pace="instant") as server:
        got = httpx.get(server.url + "/events", headers={"Last-Event-ID": "2"})
        assert got.text == "retry: 50\n\n" + "".join(f"id: {n}\nevent: note\ndata: note {n}\n\n" for n in (3, 4, 5))
        assert [e.resumed for e in server.journal if e.kind == "matched"] == ["after event id '2'"]
        unknown = httpx.get(server.url + "/events", headers={"Last-Event-ID": "77"})
        assert unknown.text == httpx.get(server.url + "/events").text  # an id it never set: the whole stream
        assert [e.resumed for e in server.journal if e.kind == "matched"][-2] == "from the start: no event id '77'"


def test_a_client_that_reconnects_after_a_disconnect_loses_no_event() -> None:
    # What an EventSource does: on a dropped connection, reconnect with the last event id, and go on from there.
    with serve(_feed(8), pace="instant", faults=["disconnect:after=3,times=2"]) as server:
        decoder, seen, connections = SSEDecoder(), [], 0
        while True:
            connections += 1
            headers = {"Last-Event-ID": decoder.last_event_id} if decoder.last_event_id else {}
            try:
                with httpx.stream("GET", server.url + "/events", headers=headers) as response:
                    for piece in response.iter_raw():
                        seen += decoder.feed(piece)
            except httpx.RemoteProtocolError:  # the chunked body never ended: the connection was dropped
                decoder = SSEDecoder(last_event_id=decoder.last_event_id)
                continue
            break
        resumed = [e.resumed for e in server.journal if e.kind == "matched"]
    assert connections == 3  # two drops, then the rest to its end
    assert resumed == [None, "after event id '3'", "after event id '6'"]  # each time from the last event it had
    assert [e.data for e in seen] == [f"note {n}" for n in range(1, 9)]  # each event once, in order
    assert decoder.retry == 50


def _first_at(seconds: float) -> Cassette:
    """One recording of POST /stream whose only event comes `seconds` after the request, then the end."""
    response = Response(200, (("content-type", "text/event-stream"),), (Chunk(seconds, b"data: late\n\n"),))
    return Cassette([Interaction(Request("POST", "/stream", body=b"{}"), response)])


async def test_a_plan_counts_from_when_its_request_arrived() -> None:
    # An application of the user's that came to the request 9.5 s after it arrived: the event recorded 10 s
    # after the request is due half a second later, not 10 s.
    mock = MockServer([_first_at(10.0)], options=ServeOptions.build(pace="recorded", match_on=["path"]))

    async def handler(http: web.Request) -> web.StreamResponse:
        return await mock.answer(http, arrived=asyncio.get_running_loop().time() - 9.5)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None, auto_decompress=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with mock, aiohttp.ClientSession() as session:
            sent = time.perf_counter()
            async with session.post(f"http://127.0.0.1:{port}/stream", data=b"{}") as response:
                assert await response.read() == b"data: late\n\n"
            assert time.perf_counter() - sent < 5.0
    finally:
        await runner.cleanup()


async def test_a_request_on_a_kept_connection_counts_from_its_own_arrival() -> None:
    # Never from bytes that came before: a request sent on a connection left idle counts from its own
    # arrival, and one sent behind another (pipelined) from when the server comes to it, after the first's end.
    request = b"POST /stream HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"
    options = ServeOptions.build(pace="recorded", match_on=["path"])
    async with MockServer([_first_at(0.5)], options=options) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)

        async def answer() -> float:
            """Read one chunked answer to its end; when its event came."""
            await reader.readuntil(b"data: late")
            came = time.perf_counter()
            await reader.readuntil(b"0\r\n\r\n")
            return came

        writer.write(request)
        await answer()
        await asyncio.sleep(1.0)  # idle
        sent = time.perf_counter()
        writer.write(request)
        assert await answer() - sent >= 0.45
        writer.write(request + request)  # the second sent behind the first
        first = await answer()
        assert await answer() - first >= 0.45
        writer.close()
