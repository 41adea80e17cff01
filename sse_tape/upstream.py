"""Upstreams: the servers the recorder forwards to, behind one small protocol.

An `Upstream` opens a request and hands back a `Reply`: the response head,
then the body's bytes as they arrive, untouched (no decompression, no
buffering), and when they stop, how the body ended (`End`). A request that
gets no response head at all raises `UpstreamError`. Leaving the `open`
block before the body ends closes the upstream connection, so an upstream
stops generating for a client that is gone.

`AiohttpUpstream` is the implementation: aiohttp's client reads a stream for
a fraction of the CPU per chunk that httpx's does (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Protocol, Self
from urllib.parse import unquote, urlsplit

import aiohttp
from yarl import URL

from ._exceptions import ConfigError, UpstreamError
from .cassette import End, Headers, Request
from .redaction import Redaction
from .wire import end_to_end

__all__ = ["AiohttpUpstream", "Reply", "Upstream", "leaves_base", "parse_upstream"]


def parse_upstream(url: str) -> str:
    """An upstream base URL, checked: http or https, a host, a valid port, no query; raises `ConfigError`,
    which shows the URL with its secrets redacted (see `Redaction.url`)."""

    def refused(why: str) -> ConfigError:
        return ConfigError(f"{_redaction().url(url)!r}{why}")  # the URL as shown: no user info, no query secret

    try:
        parsed = urlsplit(url)
        hostname = parsed.hostname
    except ValueError as exc:  # an IPv6 address with a bracket missing
        raise refused(f" is not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not hostname:
        raise refused(": give an http:// or https:// URL with a host")
    # After the user info, which may hold a colon (`user:password@`), and an IPv6 address, which holds its own.
    after_host = parsed.netloc.rpartition("@")[2].rpartition("]")[2]
    port = after_host.rpartition(":")[2] if ":" in after_host else ""
    if port and not port.isdigit():
        raise refused(": the port is not a number")  # not shown: it may be a password's end
    if port and not 0 < int(port) < 65536:
        raise refused(f": port {port} is out of range")
    if parsed.query or parsed.fragment:
        raise refused(": an upstream base URL takes no query or fragment")
    try:
        URL(url)
    except ValueError:
        raise refused(" is not a URL") from None  # yarl's reason may quote the URL
    return url.rstrip("/")


def _redaction(redaction: Redaction | None = None) -> Redaction:
    """`redaction`, or the default one: what a message about an upstream keeps out of the URLs it shows."""
    if redaction is not None:
        return redaction

    return Redaction()


def leaves_base(path: str) -> bool:
    """Whether a request path could climb out of the upstream's base path: a `.` or `..` segment,
    however it is percent-encoded, or a backslash a server may take for a slash."""
    for _ in range(3):  # %252e%252e is %2e%2e once decoded, and .. twice
        decoded = unquote(path)
        if decoded == path:
            break
        path = decoded
    return "\\" in path or any(segment in (".", "..") for segment in path.split("/"))


class Reply(Protocol):
    """An upstream's response as it streams: its head, then its body's bytes as they arrive."""

    status: int
    headers: Headers
    end: End
    """How the body ended, once iteration stops: complete, reset or timed out."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...


class Upstream(Protocol):
    """Where forwarded requests go."""

    base_url: str

    def url(self, request: Request) -> str:
        """The upstream URL a request for `request.path` goes to."""
        ...

    def open(self, request: Request) -> contextlib.AbstractAsyncContextManager[Reply]:
        """Send `request`; raises `UpstreamError` when no response head comes."""
        ...

    async def close(self) -> None:
        """Close the connections kept open."""
        ...


class _AiohttpReply:
    """A `Reply` over an aiohttp response; iterating it never raises an upstream's failure, it records it."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers: Headers = tuple((_text(k), _text(v)) for k, v in response.raw_headers)
        self.end = End.COMPLETE
        self.finished = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> bytes:
        if self.finished:
            raise StopAsyncIteration
        try:
            # A piece as it arrived, never past the end of an HTTP chunk: the server's writes stay apart
            # even when several arrive before this reads them.
            while True:
                data, chunk_end = await self._response.content.readchunk()
                if data:
                    return data
                if not chunk_end:
                    break  # the end of the body
        except TimeoutError:
            self.end = End.TIMEOUT
        except (aiohttp.ClientError, OSError):
            self.end = End.UPSTREAM_RESET  # a reset, a close mid-body, or a broken chunked encoding
        self.finished = True
        raise StopAsyncIteration


def _text(raw: bytes) -> str:
    # Header bytes are almost always ASCII; UTF-8 is kept as such, anything else read as Latin-1.
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


class AiohttpUpstream:
    """An upstream reached with aiohttp's client.

    `base_url` is the upstream's base, such as `http://127.0.0.1:8000` or
    `https://api.example.com/v1`: a request for `/chat/completions` goes to
    the base plus that path. A `user:password@` in it is sent as Basic
    credentials (`Authorization`) on each request that has no
    `Authorization` of its own: a client's own wins. `idle_timeout` is how long the body may go
    silent; `connect_timeout` how long to wait for a connection. An
    `UpstreamError` shows the URL as `redaction` (the defaults when None)
    shows it: no user info, and no secret in the query (`?key=`).
    """

    def __init__(
        self,
        base_url: str,
        *,
        idle_timeout: float = 300.0,
        connect_timeout: float = 10.0,
        redaction: Redaction | None = None,
    ) -> None:
        self.base_url = parse_upstream(base_url)
        self.idle_timeout = idle_timeout
        self.connect_timeout = connect_timeout
        self.redaction = redaction
        self._session: aiohttp.ClientSession | None = None

    def url(self, request: Request) -> str:
        return self.base_url + request.path + (f"?{request.query}" if request.query else "")

    @contextlib.asynccontextmanager
    async def open(self, request: Request) -> AsyncIterator[Reply]:
        url = self.url(request)
        target = URL(url, encoded=True)  # the path and query as the client sent them
        headers = _upstream_headers(request)
        if target.user is not None:
            # The URL's `user:password@` goes as Basic credentials, unless the client sent its own: they win.
            credentials = aiohttp.BasicAuth.from_url(target)
            target = target.with_user(None)
            if credentials is not None and not any(name.lower() == "authorization" for name, _ in headers):
                headers.append(("Authorization", credentials.encode()))
        try:
            response = await self._client().request(
                request.method,
                target,
                headers=headers,
                data=request.body or None,
                allow_redirects=False,
            )
        except TimeoutError:
            raise UpstreamError(f"no response from {self._shown(url)} in time") from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            shown = self._shown(url)
            # The reason may quote the URL (aiohttp's InvalidURL is the URL): as shown, then.
            raise UpstreamError(f"cannot reach {shown}: {_reason(exc).replace(url, shown)}") from None
        reply = _AiohttpReply(response)
        try:
            yield reply
        finally:
            if reply.finished and reply.end is End.COMPLETE:
                response.release()  # the connection can serve the next request
            else:
                response.close()  # cut short: the upstream sees the connection close and stops

    def _shown(self, url: str) -> str:
        """`url` as a message shows it: its secrets redacted."""
        return _redaction(self.redaction).url(url)

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            timeout = aiohttp.ClientTimeout(
                total=None, connect=self.connect_timeout, sock_connect=self.connect_timeout, sock_read=self.idle_timeout
            )
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),  # as many streams at once as clients ask for
                timeout=timeout,
                auto_decompress=False,  # the cassette keeps the bytes as sent
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
                cookie_jar=aiohttp.DummyCookieJar(),  # cookies are the client's, passed through, never kept
            )
        return self._session


def _upstream_headers(request: Request) -> list[tuple[str, str]]:
    # The client sets host and content-length itself; ask for the body as it is, so that the
    # cassette holds readable events rather than gzip.
    headers = end_to_end(request.headers, also_drop=("host", "content-length", "accept-encoding"))
    headers.append(("accept-encoding", "identity"))
    return headers


def _reason(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):
        return exc.os_error.strerror or str(exc.os_error) or type(exc).__name__
    return str(exc) or type(exc).__name__
