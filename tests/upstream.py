"""A small SSE server of our own, for the upstream behaviour llama_cpp.server will not show on demand.

Routes:
- `POST /v1/chat/completions?events=N&gap=S&linger=L&pad=P`: N chat chunks S seconds apart (each with P
  bytes more of content, `chat_chunk(n, pad=P)`), then (when the body asks with
  `stream_options.include_usage`) a usage chunk with no choices, as OpenAI sends it, then `[DONE]`, then L
  seconds before the body ends, with OpenAI's organization header; it counts client disconnects and notes
  when it wrote its last event.
- `GET /reset`: two events, then a TCP reset.
- `GET /stall`: one event, then silence until the client goes.
- `POST /limited`: a 429 JSON error with `Retry-After: 7`.
- `POST /guarded`: one event for a request whose `Authorization` is `Bearer sk-guarded-key`, else a 401 JSON error
  as OpenAI words it.
- `GET /binary`: a chunk that is not UTF-8.
- `GET /cookie`: one event, with a secret in `Set-Cookie`.
- `ANY /leaky/...`: one event, with the response headers the test put in `leaky_headers` (credentials, to see
  them kept out of the cassette), whatever the method, path, query and body.
- `GET /feed?events=N&gap=S`: a notification feed as an EventSource reads it: events with ids 1 to N
  (5 by default), S seconds apart; a reconnection with `Last-Event-ID: K` gets those after K.
- `POST /{version}/models/{model}:streamGenerateContent?gap=S&cut=1` without `alt=sse`: Gemini's one JSON
  array, its chunks (`GEMINI_CHUNKS`) S seconds apart as Google writes them (`gemini_array`); with `cut`,
  the connection drops before the closing `]`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

SSE = {"content-type": "text/event-stream", "cache-control": "no-cache"}


HEAD = {"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1763790000, "model": "up"}


@contextlib.asynccontextmanager
async def on_loopback(path: str, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> AsyncIterator[str]:
    """An aiohttp app answering POST `path` with `handler`, on a free loopback port, while the block runs; gives
    its base URL (a protocol's own server, for a test to record from)."""
    app = web.Application()
    app.router.add_post(path, handler)
    async with serving(app) as url:
        yield url


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """`app` on a free loopback port while the block runs; gives its base URL."""
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def chat_chunk(n: int, *, pad: int = 0) -> bytes:
    payload = {**HEAD, "choices": [{"index": 0, "delta": {"content": f" w{n}" + "x" * pad}, "finish_reason": None}]}
    return f"data: {json.dumps(payload)}\n\n".encode()


def usage_chunk(events: int) -> bytes:
    usage = {"prompt_tokens": 9, "completion_tokens": events, "total_tokens": 9 + events}
    return f"data: {json.dumps({**HEAD, 'choices': [], 'usage': usage})}\n\n".encode()


GEMINI_CHUNKS = [
    {
        "candidates": [{"content": {"parts": [{"text": "Hello"}], "role": "model"}, "index": 0}],
        "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 1, "totalTokenCount": 3},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "up-1",
    },
    {
        "candidates": [{"content": {"parts": [{"text": "! How can I help"}], "role": "model"}, "index": 0}],
        "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 5, "totalTokenCount": 7},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "up-1",
    },
    {
        "candidates": [
            {"content": {"parts": [{"text": " you today?"}], "role": "model"}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 9, "totalTokenCount": 11},
        "modelVersion": "gemini-2.5-flash",
        "responseId": "up-1",
    },
]
"""What `/{version}/models/{model}:streamGenerateContent` answers, chunk by chunk."""


def gemini_array(chunks: list[dict[str, Any]]) -> list[bytes]:
    """The writes of Gemini's array as Google's server makes them: each chunk pretty-printed, `[` before the
    first and `,\r\n` before each other, a newline after each, then `]`."""
    writes = [(b"," if n else b"[") + json.dumps(c, indent=2).encode() + b"\n" for n, c in enumerate(chunks)]
    writes[1:] = [b",\r\n" + w[1:] for w in writes[1:]]
    return [*writes, b"]"]


OLLAMA_TEXT = ["Hello", "! How can I help", " you today?"]


def ollama_lines() -> list[bytes]:
    """The writes of an Ollama `/api/chat` stream, as its server makes them: a JSON object a line, the last
    with `done: true` and its stats."""
    head = {"model": "llama3.2", "created_at": "2025-11-22T09:20:00.123456789Z"}
    lines = [{**head, "message": {"role": "assistant", "content": text}, "done": False} for text in OLLAMA_TEXT]
    stats = {"total_duration": 412345678, "load_duration": 21345678, "prompt_eval_count": 27}
    stats |= {"prompt_eval_duration": 98765432, "eval_count": 4, "eval_duration": 210987654}
    last = {**head, "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop", **stats}
    return [json.dumps(line, separators=(",", ":")).encode() + b"\n" for line in [*lines, last]]


class Upstream:
    """Run with `async with Upstream() as up:` (or in a thread); `up.url` is its base URL."""

    def __init__(self) -> None:
        self.disconnects = 0
        self.last_write: float | None = None
        self.seen_headers: list[dict[str, str]] = []
        self.seen_paths: list[str] = []
        self.seen_bodies: list[bytes] = []
        self.leaky_headers: dict[str, str] = {}
        """What `/leaky/...` answers with, besides its content type."""
        self.hits = 0
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> Upstream:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/reset", self.reset)
        app.router.add_get("/stall", self.stall)
        app.router.add_post("/limited", self.limited)
        app.router.add_post("/guarded", self.guarded)
        app.router.add_get("/binary", self.binary)
        app.router.add_get("/cookie", self.cookie)
        app.router.add_get("/feed", self.feed)
        app.router.add_route("*", "/leaky/{tail:[\\s\\S]*}", self.leaky)
        app.router.add_post("/{version}/models/{call}", self.gemini)
        app.router.add_post("/api/chat", self.ollama)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await asyncio.sleep(0)
        await self._runner.cleanup()

    async def _stream(
        self, request: web.Request, chunks: list[bytes], gap: float, **headers: str
    ) -> web.StreamResponse:
        self.hits += 1
        self.seen_headers.append(dict(request.headers))
        self.seen_paths.append(request.raw_path)
        response = web.StreamResponse(headers={**SSE, **headers})
        await response.prepare(request)
        try:
            for n, chunk in enumerate(chunks):
                if n:
                    await asyncio.sleep(gap)
                await response.write(chunk)
                self.last_write = asyncio.get_running_loop().time()
        except (asyncio.CancelledError, ConnectionResetError):
            self.disconnects += 1
            raise
        return response

    async def chat(self, request: web.Request) -> web.StreamResponse:
        events, gap = int(request.query.get("events", "5")), float(request.query.get("gap", "0.05"))
        body = await request.read()
        self.seen_bodies.append(body)
        pad = int(request.query.get("pad", "0"))
        try:
            options = json.loads(body).get("stream_options") or {}
        except (ValueError, AttributeError):
            options = {}
        usage = [usage_chunk(events)] if options.get("include_usage") else []
        chunks = [chat_chunk(n, pad=pad) for n in range(events)] + usage + [b"data: [DONE]\n\n"]
        response = await self._stream(request, chunks, gap, **{"openai-organization": "org-ORG-SECRET-8"})
        await asyncio.sleep(float(request.query.get("linger", "0")))
        await response.write_eof()
        return response

    async def gemini(self, request: web.Request) -> web.StreamResponse:
        self.seen_bodies.append(await request.read())
        writes = gemini_array(GEMINI_CHUNKS)
        cut = request.query.get("cut") == "1"
        gap = float(request.query.get("gap", "0.05"))
        headers = {"content-type": "application/json; charset=UTF-8"}
        response = await self._stream(request, writes[:-1] if cut else writes, gap, **headers)
        if cut and request.transport is not None:
            request.transport.close()
            return response
        await response.write_eof()
        return response

    async def ollama(self, request: web.Request) -> web.StreamResponse:
        self.seen_bodies.append(await request.read())
        gap = float(request.query.get("gap", "0.05"))
        response = await self._stream(request, ollama_lines(), gap, **{"content-type": "application/x-ndjson"})
        await response.write_eof()
        return response

    async def reset(self, request: web.Request) -> web.StreamResponse:
        response = await self._stream(request, [chat_chunk(0), chat_chunk(1)], 0.02)
        sock: Any = request.transport.get_extra_info("socket") if request.transport else None
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        if request.transport is not None:
            request.transport.abort()
        return response

    async def stall(self, request: web.Request) -> web.StreamResponse:
        response = await self._stream(request, [chat_chunk(0)], 0)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.disconnects += 1
            raise
        return response

    async def limited(self, request: web.Request) -> web.Response:
        self.hits += 1
        await request.read()
        error = {"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": "rate_limit_exceeded"}}
        return web.json_response(error, status=429, headers={"retry-after": "7"})

    async def guarded(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        if request.headers.get("Authorization") != "Bearer sk-guarded-key":
            self.hits += 1
            error = {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error"}}
            return web.json_response(error, status=401)
        response = await self._stream(request, [b"data: ok\n\n"], 0)
        await response.write_eof()
        return response

    async def binary(self, request: web.Request) -> web.StreamResponse:
        response = await self._stream(request, [b"data: \xff\xfe\x00\n\n", b"data: ok\n\n"], 0.01)
        await response.write_eof()
        return response

    async def cookie(self, request: web.Request) -> web.StreamResponse:
        response = await self._stream(request, [chat_chunk(0)], 0, **{"set-cookie": "session=COOKIE-SECRET-42"})
        await response.write_eof()
        return response

    async def feed(self, request: web.Request) -> web.StreamResponse:
        events, gap = int(request.query.get("events", "5")), float(request.query.get("gap", "0.02"))
        after = int(request.headers.get("Last-Event-ID", "0"))
        chunks = [f"id: {n}\nevent: notice\ndata: notice {n}\n\n".encode() for n in range(after + 1, events + 1)]
        response = await self._stream(request, chunks, gap)
        await response.write_eof()
        return response

    async def leaky(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        response = await self._stream(request, [b"data: ok\n\n"], 0, **self.leaky_headers)
        await response.write_eof()
        return response
