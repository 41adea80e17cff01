"""The tests' clients: the official SDKs (openai, anthropic, and google-genai for the Gemini API), and clients
that never read what they are sent."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import anthropic
import httpx
import httpx2
import openai
from google import genai
from google.genai import types


def openai_client(base_url: str, *, api_key: str = "sk-test", max_retries: int = 0) -> openai.OpenAI:
    """An SDK client that keeps no idle connection.

    Tests make many clients; one whose pooled connection outlived it would be
    collected later and warn, as an unclosed socket, inside some other test.
    """
    http = openai.DefaultHttpxClient(limits=httpx.Limits(max_keepalive_connections=0))
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=max_retries, http_client=http)


def anthropic_client(base_url: str, *, api_key: str = "sk-ant-test", max_retries: int = 0) -> anthropic.Anthropic:
    """Anthropic's SDK client, keeping no idle connection either (see `openai_client`); it is built on httpx2."""
    http = anthropic.DefaultHttpxClient(limits=httpx2.Limits(max_keepalive_connections=0))
    return anthropic.Anthropic(base_url=base_url, api_key=api_key, max_retries=max_retries, http_client=http)


def gemini_client(
    base_url: str, *, retry: types.HttpRetryOptions | None = None, api_version: str | None = "v1beta"
) -> genai.Client:
    """A google-genai client of the Gemini API at `base_url`, keeping no idle connection (see `openai_client`).

    It asks for API version `api_version`: v1beta, as the bundled cassette's paths have it, unless told
    (None: the SDK's own default, v1); without `retry` it never retries, as the SDK does by default.
    """
    http = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))
    options = types.HttpOptions(base_url=base_url, api_version=api_version, retry_options=retry, httpx_client=http)
    return genai.Client(api_key="test-key", http_options=options)


def never_reading(port: int, request: bytes, count: int) -> list[socket.socket]:
    """`count` clients that each send `request` and read nothing of the answer (their sockets, to close)."""
    clients = []
    for _ in range(count):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        with contextlib.suppress(OSError):  # turned away (a 503 and a close) before it said all of it
            sock.sendall(request)
        clients.append(sock)
    return clients


async def unread(port: int, request: bytes) -> socket.socket:
    """A client that sends `request` and reads nothing of the answer, with a small receive window so that its
    socket fills soon, from the event loop (its socket, to watch and close)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, request)
    return sock
