"""Gateways to put between a client and sse-tape on loopback, for the probe's tests: Debian's nginx, with
proxy buffering on or off and either HTTP version to its upstream (`nginx`), and proxies of ours that each misbehave one known way (`scripted`, with
one of `drop_third_event`, `crlf_line_ends`, `error_as_clean_end`, `retry_after_first_bytes`).

Each scripted proxy forwards every request to its upstream and streams the answer back as it arrives, with the
upstream's status and end-to-end headers (not `Content-Length`, since a script may change the body's length),
and does exactly one thing wrong to the body.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import aiohttp
import processes
import pytest
from aiohttp import web
from multidict import CIMultiDict
from upstream import serving
from waits import until

from sse_tape import Chunk, Interaction, Request, Response
from sse_tape.sse import SSEDecoder
from sse_tape.wire import drop_connection, end_to_end

NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
"""Debian's nginx, when installed (`apt-get install nginx`)."""

# A single process (no master, no workers to switch to another user), so that it runs alike as root or not;
# every path it writes in its own folder.
_NGINX_CONF = """\
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log notice;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
{site}
}}
"""

_NGINX_SITE = """\
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://127.0.0.1:{upstream_port};
            proxy_http_version {http_version};
            proxy_set_header Connection "";
            proxy_buffering {buffering};
        }}
    }}
"""


@contextlib.contextmanager
def nginx(upstream_port: int, *, buffering: bool, http_version: str = "1.1") -> Iterator[str]:
    """Debian's nginx proxying to 127.0.0.1:`upstream_port`, with `proxy_buffering` on or off and
    `proxy_http_version` `http_version`, on a free loopback port while the block runs: its base URL. Skips the
    test where nginx is not installed; a start that fails raises with nginx's error log.

    Buffering holds a stream back only when nginx cannot tell where the upstream's pieces end: over HTTP/1.0
    (nginx's default, a body that ends when the connection does) it keeps everything until a buffer fills or
    the body ends; over HTTP/1.1 it hands on each chunk of a chunked body as it completes, buffering or not. An
    upstream's `X-Accel-Buffering: no` turns buffering off for that response."""
    settings = {"buffering": "on" if buffering else "off", "http_version": http_version}
    with nginx_site(lambda port: _NGINX_SITE.format(port=port, upstream_port=upstream_port, **settings)) as url:
        yield url


@contextlib.contextmanager
def nginx_site(site: Callable[[int], str]) -> Iterator[str]:
    """Debian's nginx with what `site(port)` says inside its `http { }` block (servers, upstreams), listening
    on `port`, a free loopback one, while the block runs: its base URL. Skips the test where nginx is not
    installed; a start that fails raises with nginx's error log."""
    if NGINX is None:
        pytest.skip("nginx is not installed (apt-get install nginx)")
    with tempfile.TemporaryDirectory(prefix="sse-tape-nginx-") as folder:
        port = _free_port()
        conf = Path(folder, "nginx.conf")
        conf.write_text(_NGINX_CONF.format(dir=folder, site=site(port)))
        # -e: the error log from the start, before the configuration names it (else /var/log/nginx).
        command = [NGINX, "-p", folder, "-c", str(conf), "-e", f"{folder}/error.log", "-g", "daemon off;"]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            until(lambda: process.poll() is not None or _listens(port), f"nginx to listen on port {port}")
            if process.poll() is not None:
                log = Path(folder, "error.log")
                raise RuntimeError(f"nginx did not start: {log.read_text() if log.exists() else 'no error log'}")
            yield f"http://127.0.0.1:{port}"
        finally:
            if process.poll() is None:
                processes.stop(process, timeout=30)  # SIGTERM: nginx's fast shutdown, not waiting for streams


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _listens(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def chat_stream(events: int, gap: float) -> Interaction:
    """A chat completion streamed in `events` chunks `gap` seconds apart, then `[DONE]`: what the probe sends
    through a gateway."""
    chunks = []
    for i in range(events):
        payload = {
            "id": "c",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": f"t{i}"}}],
        }
        chunks.append(Chunk(round(0.02 + i * gap, 6), f"data: {json.dumps(payload)}\n\n".encode()))
    chunks.append(Chunk(round(0.02 + events * gap, 6), b"data: [DONE]\n\n"))
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = Request("POST", "/v1/chat/completions", headers=(("content-type", "application/json"),), body=body)
    response = Response(200, (("content-type", "text/event-stream"), ("cache-control", "no-cache")), tuple(chunks))
    return Interaction(request, response)


class Upstream:
    """One request's way to the upstream, as a script sees it: the first attempt's body, and another attempt."""

    def __init__(self, first: aiohttp.ClientResponse, again: Callable[[], AsyncIterator[bytes]]) -> None:
        self._first = first
        self.again = again
        """The body of the same request sent to the upstream again, as it arrives (its status and headers unseen:
        the client has had the first attempt's)."""

    async def chunks(self) -> AsyncIterator[bytes]:
        """The first attempt's body, as it arrives; a broken stream raises `aiohttp.ClientError`."""
        async for chunk in self._first.content.iter_any():
            yield chunk


Script = Callable[[Upstream], AsyncIterator[bytes]]
"""What a scripted proxy sends its client, given the upstream."""


@contextlib.asynccontextmanager
async def scripted(upstream: str, script: Script) -> AsyncIterator[str]:
    """A proxy in front of the `upstream` base URL on a free loopback port while the block runs: its base URL.
    Each request goes upstream with its method, path, query, end-to-end headers and body; the client gets the
    upstream's status and end-to-end headers, then what `script` makes of the body, ended cleanly, or cut where
    the upstream's stream broke and the script let that through."""
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    # The request as the client sent it: none of the headers aiohttp would add of its own.
    own = ("Accept", "Accept-Encoding", "Content-Type", "User-Agent")
    async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False, skip_auto_headers=own) as session:

        async def forward(request: web.Request) -> web.StreamResponse:
            body = await request.read()
            headers = CIMultiDict(end_to_end(request.headers.items(), also_drop=("host", "content-length")))

            async def send() -> aiohttp.ClientResponse:
                url = upstream.rstrip("/") + request.path_qs
                return await session.request(request.method, url, headers=headers, data=body, allow_redirects=False)

            async def again() -> AsyncIterator[bytes]:
                async with await send() as response:
                    async for chunk in response.content.iter_any():
                        yield chunk

            async with await send() as first:
                answer = web.StreamResponse(status=first.status, reason=first.reason)
                for name, value in end_to_end(first.headers.items(), also_drop=("content-length",)):
                    answer.headers.add(name, value)
                await answer.prepare(request)
                try:
                    async for piece in script(Upstream(first, again)):
                        if piece:
                            await answer.write(piece)
                except aiohttp.ClientError:
                    drop_connection(request, reset=False)
                    return answer
            await answer.write_eof()
            return answer

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", forward)
        async with serving(app) as url:
            yield url


class _Events:
    """An event stream cut into its events, each with the blank line that ends it (line ends `\\n` or
    `\\r\\n`), as the bytes arrive."""

    def __init__(self) -> None:
        self.rest = b""
        """What has come of the event not yet ended."""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The events that `chunk` ends, byte for byte."""
        self.rest += chunk
        events = []
        while end := re.search(rb"\r?\n\r?\n", self.rest):
            events.append(self.rest[: end.end()])
            self.rest = self.rest[end.end() :]
        return events


async def drop_third_event(upstream: Upstream) -> AsyncIterator[bytes]:
    """Loses the third event (counting events by the blank lines that end them); all else passes byte for
    byte, each event when it has ended."""
    events = _Events()
    seen = 0
    async for chunk in upstream.chunks():
        for event in events.feed(chunk):
            seen += 1
            if seen != 3:
                yield event
    yield events.rest


async def crlf_line_ends(upstream: Upstream) -> AsyncIterator[bytes]:
    """Rewrites each `\\n` line end to `\\r\\n` (one already `\\r\\n` is left alone, even split between two
    reads)."""
    after_cr = False
    async for chunk in upstream.chunks():
        out = re.sub(rb"(?<!\r)\n", b"\r\n", chunk)
        if after_cr and chunk.startswith(b"\n"):
            out = out[1:]  # its \r ended the read before
        after_cr = chunk.endswith(b"\r")
        yield out


async def error_as_clean_end(upstream: Upstream) -> AsyncIterator[bytes]:
    """Ends the answer cleanly in place of the first error event (one whose `event:` is `error`, or whose data
    is a JSON object with an `error`) and of all after it; the events before pass byte for byte."""
    events = _Events()
    decoder = SSEDecoder()
    async for chunk in upstream.chunks():
        for event in events.feed(chunk):
            if any(_is_error(e.event, e.data) for e in decoder.feed(event)):
                return
            yield event
    yield events.rest


def _is_error(name: str, data: str) -> bool:
    if name == "error":
        return True
    try:
        payload = json.loads(data)
    except ValueError:
        return False
    return isinstance(payload, dict) and "error" in payload


async def retry_after_first_bytes(upstream: Upstream) -> AsyncIterator[bytes]:
    """Passes the body through; when the upstream's stream breaks (a cut, a body left unfinished), sends the
    request again and goes on with the new attempt's body from its start, after what the client already has."""
    try:
        async for chunk in upstream.chunks():
            yield chunk
    except aiohttp.ClientError:
        async for chunk in upstream.again():
            yield chunk
