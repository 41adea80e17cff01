"""Recording: stream an upstream's responses through to the client and into a cassette.

`RecordingProxy` is the mock server with an upstream behind it. Each request
it cannot (or, by the record mode, should not) replay is forwarded with httpx;
the response goes back to the client chunk by chunk as it arrives, with no
buffering and no re-encoding, and every chunk is kept with its offset from
the moment the request was sent. Each interaction is appended to the cassette
as soon as it ends, so a crash loses at most the streams in flight, and those
are saved as far as they got when the proxy is stopped.

`record_once` does the same for one request, printing the stream as it arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, BinaryIO

import httpx
from aiohttp import web

from ._exceptions import ConfigError, NoMatchError, UpstreamError
from .cassette import (
    Cassette,
    Chunk,
    End,
    Headers,
    Interaction,
    Request,
    Response,
    append_interactions,
    check_cassette_path,
)
from .redaction import Redaction
from .server import MockServer, drop_connection, end_to_end, run_in_thread

__all__ = ["RecordMode", "RecordingProxy", "arecording", "describe", "record_once", "recording"]


class RecordMode(StrEnum):
    """When to replay and when to record, with VCR.py's words and meanings."""

    ONCE = "once"
    """Record everything if the cassette does not exist yet; if it does, replay only (a miss is an error)."""
    NEW_EPISODES = "new_episodes"
    """Replay each matching recording once; forward and record every other request."""
    NONE = "none"
    """Replay only; never contact the upstream."""
    ALL = "all"
    """Forward and record every request; never replay. Existing interactions are kept."""


@dataclass(slots=True)
class _Capture:
    """A response being recorded while it streams; what it holds so far survives any interruption."""

    request: Request
    recorded_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    status: int | None = None
    headers: Headers = ()
    chunks: list[Chunk] = field(default_factory=list)
    end: End = End.INTERRUPTED
    duration: float = 0.0

    def interaction(self) -> Interaction | None:
        """The interaction so far; None if no response head ever came."""
        if self.status is None:
            return None
        ended_late = self.end is not End.COMPLETE
        response = Response(
            self.status, self.headers, tuple(self.chunks), self.end, self.duration if ended_late else None
        )
        return Interaction(self.request, response, self.recorded_at)


async def _fetch(
    client: httpx.AsyncClient,
    capture: _Capture,
    url: str,
    headers: list[tuple[str, str]],
    *,
    on_head: Callable[[_Capture], Awaitable[None]],
    on_chunk: Callable[[bytes], Awaitable[None]],
) -> None:
    """Send the captured request upstream and stream the response into `capture` and the callbacks.

    Sets `capture.end` for the ways an upstream ends a response; raises
    `UpstreamError` when there was no response at all. An exception from a
    callback (the client hung up) or a cancellation propagates, and the
    upstream request is closed on the way out, so the upstream stops.
    """
    loop = asyncio.get_running_loop()
    request = capture.request
    start = loop.time()
    try:
        async with client.stream(request.method, url, headers=headers, content=request.body) as upstream:
            capture.status = upstream.status_code
            capture.headers = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in upstream.headers.raw)
            await on_head(capture)
            async for data in upstream.aiter_raw():
                capture.chunks.append(Chunk(round(loop.time() - start, 6), data))
                await on_chunk(data)
        capture.end = End.COMPLETE
    except httpx.TimeoutException as exc:
        if capture.status is None:
            raise UpstreamError(f"no response from {url} in time ({type(exc).__name__})") from None
        capture.end = End.TIMEOUT
    except httpx.TransportError as exc:
        if capture.status is None:
            raise UpstreamError(f"cannot reach {url}: {exc or type(exc).__name__}") from None
        capture.end = End.UPSTREAM_RESET
    finally:
        capture.duration = round(loop.time() - start, 6)


def _upstream_headers(request: Request) -> list[tuple[str, str]]:
    # httpx sets host and content-length itself; ask for the body as it is, so that the
    # cassette holds readable events rather than gzip.
    headers = end_to_end(request.headers, also_drop=("host", "content-length", "accept-encoding"))
    headers.append(("accept-encoding", "identity"))
    return headers


def parse_upstream(url: str) -> str:
    """An upstream base URL, checked: http or https, a host, a valid port, no query; raises `ConfigError`."""
    try:
        parsed = httpx.URL(url)
        port = parsed.port
    except (httpx.InvalidURL, ValueError) as exc:
        raise ConfigError(f"{url!r} is not a URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"{url!r}: give an http:// or https:// URL with a host")
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"{url!r}: port {port} is out of range")
    if parsed.query or parsed.fragment:
        raise ConfigError(f"{url!r}: an upstream base URL takes no query or fragment")
    return url.rstrip("/")


def _upstream_url(upstream: str, request: Request) -> str:
    return upstream + request.path + (f"?{request.query}" if request.query else "")


def describe(interaction: Interaction) -> str:
    """One line about a recorded interaction: request, status, events, duration, how it ended."""
    req, resp = interaction.request, interaction.response
    events = len(resp.events())
    return f"{req.method} {req.path} -> {resp.status}, {events} event{'s'[: events != 1]}, {resp.end_time:.2f} s, {resp.end}"


class RecordingProxy(MockServer):
    """A proxy to `upstream` that records into `cassette` and replays from it, by `mode`.

    `upstream` is a base URL such as `http://127.0.0.1:8000` or
    `https://api.example.com/v1`; a request for `/chat/completions` goes to
    the upstream's base URL plus that path. The other keywords are
    `MockServer`'s, for the replayed interactions.
    """

    def __init__(
        self,
        cassette: str | os.PathLike[str],
        upstream: str,
        *,
        mode: RecordMode | str = RecordMode.NEW_EPISODES,
        redaction: Redaction | None = None,
        idle_timeout: float = 300.0,
        **options: Any,
    ) -> None:
        self.cassette_path = check_cassette_path(cassette)
        self.upstream = parse_upstream(upstream)
        # Read it now: a cassette that cannot be read must stop us before we record over it.
        existing = Cassette.load(self.cassette_path) if self.cassette_path.exists() else None
        self.mode = RecordMode(mode)
        self.replay_only = self.mode is RecordMode.NONE or (self.mode is RecordMode.ONCE and existing is not None)
        replayable = [existing] if existing is not None and self.mode is not RecordMode.ALL else []
        options.setdefault("allow_repeats", self.mode is not RecordMode.NEW_EPISODES)
        super().__init__(replayable, **options)
        self.redaction = redaction or Redaction()
        self.idle_timeout = idle_timeout
        self.counts: Counter[str] = Counter()
        """How many interactions were recorded, replayed, missed, failed upstream, or not saved."""
        self._client: httpx.AsyncClient | None = None
        self._saving: set[asyncio.Future[int]] = set()
        self._save_order = asyncio.Lock()
        self._closing = False

    async def start(self) -> None:
        timeout = httpx.Timeout(10.0, read=self.idle_timeout, pool=None)
        self._client = httpx.AsyncClient(timeout=timeout, follow_redirects=False)
        try:
            await super().start()
        except BaseException:
            await self._client.aclose()
            raise

    async def close(self) -> None:
        """Stop; streams in flight are cut and saved as interrupted before this returns."""
        self._closing = True
        await super().close()
        if self._saving:
            await asyncio.gather(*self._saving, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _answer(self, http: web.Request, request: Request) -> web.StreamResponse:
        if self.mode is not RecordMode.ALL:
            try:
                recording = self.matcher.find(request)
            except NoMatchError as exc:
                if self.replay_only:
                    self.counts["missed"] += 1
                    return self._miss(http, request, exc)
            else:
                self.counts["replayed"] += 1
                return await self._play(http, request, recording)
        return await self._forward(http, request)

    async def _forward(self, http: web.Request, request: Request) -> web.StreamResponse:
        assert self._client is not None, "start() the proxy first"
        capture = _Capture(request)
        out = web.StreamResponse()

        async def on_head(capture: _Capture) -> None:
            out.set_status(capture.status or 502)
            for name, value in end_to_end(capture.headers):
                out.headers.add(name, value)
            await out.prepare(http)

        self.active_streams += 1
        try:
            await _fetch(
                self._client,
                capture,
                _upstream_url(self.upstream, request),
                _upstream_headers(request),
                on_head=on_head,
                on_chunk=out.write,
            )
        except UpstreamError as exc:
            self.counts["upstream errors"] += 1
            self._say(f"{request.method} {request.path} -> 502 {exc}")
            return self._error(http, 502, str(exc), "bad_gateway")
        except (ConnectionResetError, ConnectionAbortedError):
            capture.end = End.CLIENT_GONE
        except asyncio.CancelledError:
            capture.end = End.INTERRUPTED if self._closing else End.CLIENT_GONE
            raise
        finally:
            self.active_streams -= 1
            self._keep(capture)
        if capture.end is End.COMPLETE:
            await out.write_eof()
        elif capture.end is not End.CLIENT_GONE:
            # The upstream broke off or went silent: so does the response the client gets.
            drop_connection(http, reset=capture.end is End.UPSTREAM_RESET)
        return out

    def _keep(self, capture: _Capture) -> None:
        interaction = capture.interaction()
        if interaction is None:
            return
        try:
            interaction = self.redaction.interaction(interaction)
        except Exception as exc:  # a bug here must not pass silently: count it as not saved
            self.counts["not saved"] += 1
            self._say(f"could not redact an interaction, so it was not saved: {exc!r}")
            return
        self.counts["recorded"] += 1
        if interaction.response.end is not End.COMPLETE:
            self.counts[str(interaction.response.end)] += 1
        self._say(describe(interaction))
        # Saved off the event loop, so other streams keep flowing, and in the order the interactions
        # ended (the lock is first come, first served), which replays of identical requests follow.
        saving = asyncio.ensure_future(self._save(interaction))
        self._saving.add(saving)
        saving.add_done_callback(self._saved)

    async def _save(self, interaction: Interaction) -> int:
        async with self._save_order:
            return await asyncio.to_thread(append_interactions, self.cassette_path, [interaction])

    def _saved(self, saving: asyncio.Future[int]) -> None:
        self._saving.discard(saving)
        if not saving.cancelled() and (exc := saving.exception()) is not None:
            self.counts["not saved"] += 1
            self._say(f"could not save an interaction to {self.cassette_path}: {exc}")

    def summary(self) -> str:
        """One line: what was recorded and replayed, and where."""
        parts = [f"{n} {what}" for what, n in self.counts.items() if n and what != "recorded"]
        recorded = self.counts["recorded"]
        line = f"recorded {recorded} interaction{'s'[: recorded != 1]} to {self.cassette_path}"
        return line + (f" ({', '.join(parts)})" if parts else "")


@contextlib.asynccontextmanager
async def arecording(cassette: str | os.PathLike[str], upstream: str, **options: Any) -> AsyncIterator[RecordingProxy]:
    """Run a `RecordingProxy` while the block runs; its keywords are the proxy's."""
    async with RecordingProxy(cassette, upstream, **options) as proxy:
        yield proxy


@contextlib.contextmanager
def recording(cassette: str | os.PathLike[str], upstream: str, **options: Any) -> Iterator[RecordingProxy]:
    """Like `arecording`, for synchronous code: the proxy runs in a background thread."""
    with run_in_thread(RecordingProxy(cassette, upstream, **options)) as proxy:
        yield proxy


async def record_once(
    url: str,
    cassette: str | os.PathLike[str] | None,
    *,
    method: str = "GET",
    headers: Iterable[tuple[str, str]] = (),
    body: bytes = b"",
    redaction: Redaction | None = None,
    idle_timeout: float = 300.0,
    out: BinaryIO | None = None,
) -> Interaction:
    """Send one request, write the response body to `out` as it arrives, and append it to `cassette`.

    The interaction is saved however the response ends, even when this is
    cancelled (Ctrl-C): then as far as it got, marked interrupted. With no
    cassette it is only returned.
    """
    if cassette is not None:
        check_cassette_path(cassette)
    parse_upstream(url.split("?", 1)[0])
    target = httpx.URL(url)
    query = target.query.decode("ascii")
    request = Request(method.upper(), target.raw_path.decode("ascii").split("?", 1)[0], query, tuple(headers), body)
    capture = _Capture(request)

    async def on_head(capture: _Capture) -> None:
        pass

    async def on_chunk(data: bytes) -> None:
        if out is not None:
            out.write(data)
            out.flush()

    origin = str(target.copy_with(raw_path=b"/", query=None)).rstrip("/")
    timeout = httpx.Timeout(10.0, read=idle_timeout, pool=None)
    async with httpx.AsyncClient(timeout=timeout, follow_redirects=False) as client:
        try:
            await _fetch(
                client,
                capture,
                _upstream_url(origin, request),
                _upstream_headers(request),
                on_head=on_head,
                on_chunk=on_chunk,
            )
        finally:
            # Runs on cancellation too: what arrived is saved, marked interrupted.
            interaction = capture.interaction()
            if interaction is not None and cassette is not None:
                interaction = (redaction or Redaction()).interaction(interaction)
                append_interactions(cassette, [interaction])
    assert interaction is not None
    return interaction
