"""Recording: stream an upstream's responses through to the client and into a cassette.

The recorder is the server with a forwarding responder behind replay:
`Forwarder` sends each request replay does not answer (or, by the record
mode, should not) to the upstream; the response goes back to the client
chunk by chunk as it arrives, with no buffering and no re-encoding, and every
chunk is kept with its offset from the moment the request was sent. Its
`recorder.Recorder` keeps each stream in the session's spool, then in the
cassette, losing none of it.

Faults act on what the client of a forwarded stream gets, as it passes (see
`faults.stream`), never on what is recorded: the cassette keeps the upstream's
answer whole, as it came, with a note of each fault that acted
(`Interaction.injected`), so that a replay can give either.

`record_once` does the same for one request, printing the stream as it arrives; `fetch_each` sends
requests to an upstream one after another and hands back each answer whole (`check --drift`).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable
from dataclasses import replace
from typing import Any, BinaryIO

from aiohttp import web
from yarl import URL

from ._exceptions import UpstreamError
from .cassette import (
    Chunk,
    Interaction,
    Request,
    append_interactions,
    check_cassette_path,
    storable_headers,
)
from .journal import Ended, Forwarded, UpstreamFailed
from .live import Feed, answer_live
from .matching import last_event_id
from .plan import event_ends
from .recorder import Capture, Recorder
from .redaction import Redaction
from .responder import Exchange, Host, thorough
from .upstream import AiohttpUpstream, Upstream, leaves_base, parse_upstream

__all__ = ["Forwarder", "fetch_each", "record_once"]


async def _relay(
    upstream: Upstream,
    capture: Capture,
    *,
    on_head: Callable[[Capture], Awaitable[None]],
    on_chunk: Callable[[Chunk], Awaitable[None]],
) -> None:
    """Send the captured request upstream and stream the response into `capture` and the callbacks.

    Sets `capture.end` for the ways an upstream ends a response; raises
    `UpstreamError` when there was no response at all. An exception from a
    callback (the client hung up) or a cancellation propagates, and the
    upstream request is closed on the way out, so the upstream stops.
    """
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        async with upstream.open(capture.request) as reply:
            capture.status, capture.headers = reply.status, reply.headers
            await on_head(capture)
            async for data in reply:
                await on_chunk(Chunk(round(loop.time() - start, 6), data))
            capture.end = reply.end
    finally:
        capture.duration = round(loop.time() - start, 6)


class Forwarder:
    """A responder that forwards each request to an upstream and streams its answer back untouched.

    With a `Recorder`, what passes is recorded. The upstream is one more source of the live pipeline
    (`live`), which says what a client that hangs up, and the faults, do to the upstream request
    and to what is recorded: the upstream is read on after its client's copy is over `drain_timeout`
    seconds at most when the client left after the answer's terminal frame (the openai SDK closes its
    socket at `[DONE]`, before the upstream's own end), `read_on` seconds at most when faults acted on
    that copy, so that the recording has the whole answer.
    """

    def __init__(
        self,
        upstream: Upstream,
        recorder: Recorder | None = None,
        *,
        drain_timeout: float = 5.0,
        read_on: float = 300.0,
    ) -> None:
        self.upstream = upstream
        self.recorder = recorder
        self.drain_timeout = drain_timeout
        self.read_on = read_on
        self._server: Host | None = None
        # The streams being read, and those read on for the recording after their client's answer is over.
        self._streams: set[asyncio.Future[Any]] = set()
        self._draining: set[asyncio.Future[Any]] = set()

    async def start(self, server: Host) -> None:
        self._server = server
        if self.recorder is not None:
            await self.recorder.start(server)

    async def close(self) -> None:
        # The server is stopping. A stream read on for a client that had its answer gets a moment to
        # end (the upstream's end is usually right behind its terminal frame); the rest are interrupted.
        if self._draining:
            await asyncio.wait(self._draining, timeout=min(self.drain_timeout, 1.0))
        for stream in self._streams:
            stream.cancel()
        if self._streams:
            await asyncio.gather(*self._streams, return_exceptions=True)
        try:
            if self.recorder is not None:
                await self.recorder.close()
        finally:
            await self.upstream.close()

    async def respond(self, exchange: Exchange) -> web.StreamResponse:
        server = self._server
        assert server is not None, "start() the responder first"
        if leaves_base(exchange.request.path):
            return await server.error(
                exchange,
                400,
                f"{exchange.request.path}: a path may not climb out of the upstream's base path",
                "bad_path",
            )
        if (why := server.refused(exchange.http)) is not None:
            # A page the user has open (another site's, or one rebound to this machine) gets neither the
            # upstream, with the credentials of its URL, nor a place in the cassette.
            return await server.error(exchange, 403, f"not forwarded: {why}", "forbidden")
        capture = Capture(exchange.request, held=exchange.held)
        if self.recorder is not None:  # a large body's secrets are found off the event loop
            capture.stored = await thorough(self.recorder.storable, exchange.request)
        return await answer_live(
            server,
            exchange,
            self,
            capture,
            recorder=self.recorder,
            failed=lambda exchange, why: server.error(exchange, 502, why, "bad_gateway"),
            cors=False,  # only for the pages the user named
            read_on=self.read_on,
            drain_timeout=self.drain_timeout,
            streams=self._streams,
            draining=self._draining,
            closing=lambda: server.closing,
        )

    def unsent(self, recording: bool) -> str:
        """A fault answered in the upstream's place."""
        return "not forwarded, nothing recorded" if recording else "not forwarded"

    async def make(self, exchange: Exchange, feed: Feed) -> None:
        """Send the request upstream and hand its answer to `feed` as it comes."""
        capture = feed.capture
        assert isinstance(capture, Capture)

        async def on_head(capture: Capture) -> None:
            self._head_came(exchange, capture)
            # As the cassette will hold them: a control character no server may send is passed on as `%XX`.
            feed.begin(capture.status or 502, storable_headers(capture.headers))

        async def on_chunk(chunk: Chunk) -> None:
            feed.chunk(chunk)

        try:
            await _relay(self.upstream, capture, on_head=on_head, on_chunk=on_chunk)
        except UpstreamError as exc:
            feed.fail(self._upstream_failed(exchange, exc))

    def _head_came(self, exchange: Exchange, capture: Capture) -> None:
        """The upstream's response head came: journal it."""
        assert self._server is not None
        request = exchange.request
        self._server.journal.add(
            Forwarded(
                request=exchange.number,
                method=request.method,
                path=request.path,
                url=self._shown_url(request),
                status=capture.status or 502,
                last_event_id=last_event_id(request),
            )
        )

    def _upstream_failed(self, exchange: Exchange, exc: UpstreamError) -> str:
        """Journal that the upstream sent no response; returns why, as the journal and the client are told."""
        assert self._server is not None
        request = exchange.request
        # `AiohttpUpstream` shows no secret in its errors; another `Upstream` may.
        reason = str(exc).replace(self.upstream.url(request), self._shown_url(request))
        self._server.journal.add(
            UpstreamFailed(request=exchange.number, method=request.method, path=request.path, reason=reason)
        )
        return reason

    def _shown_url(self, request: Request) -> str:
        """The upstream URL of `request` as the journal shows it: any user info, and the secrets of its path and query,
        redacted."""
        assert self._server is not None
        return self._server.redaction.url(self.upstream.url(request))


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
    log: Callable[[str], None] | None = None,
) -> Interaction:
    """Send one request, write the response body to `out` as it arrives, and append it to `cassette`.

    The interaction is saved however the response ends, even when this is
    cancelled (Ctrl-C): then as far as it got, marked interrupted. With no
    cassette it is only returned. An `UpstreamError` (no response) shows
    `url` with its secrets redacted, as `redaction` would store them. `log`
    gets the lines a recording proxy's log has of a request: when its answer
    starts, when it ends (however it ends) and where it was saved.
    """
    if cassette is not None:
        check_cassette_path(cassette)
    parse_upstream(url.split("?", 1)[0])  # the same checks, and messages, as for a proxy's upstream
    target = URL(url, encoded=True)
    base = target.with_path("/").with_query(None).with_fragment(None)  # the origin, and any user info kept
    upstream = AiohttpUpstream(str(base), idle_timeout=idle_timeout, redaction=redaction)
    request = Request(method.upper(), target.raw_path, target.raw_query_string, tuple(headers), body)
    capture = Capture(request)
    shown = redaction or Redaction()
    path = shown.path(request.path)

    async def on_head(capture: Capture) -> None:
        if log is not None:
            status = capture.status or 502
            resumes = last_event_id(request)
            forwarded = Forwarded(
                request=1, method=request.method, path=path, url=shown.url(url), status=status, last_event_id=resumes
            )
            log(forwarded.line())

    async def on_chunk(chunk: Chunk) -> None:
        capture.chunks.append(chunk)
        if out is not None:
            out.write(chunk.data)
            out.flush()

    try:
        await _relay(upstream, capture, on_head=on_head, on_chunk=on_chunk)
    finally:
        await upstream.close()
        # Runs on cancellation too: what arrived is saved, marked interrupted.
        interaction = capture.interaction()
        if interaction is not None and log is not None:
            log(_ended(interaction, path, capture.duration).line())
        if interaction is not None and cassette is not None:
            headers = storable_headers(interaction.response.headers)
            interaction = replace(interaction, response=replace(interaction.response, headers=headers))
            interaction = shown.interaction(interaction)
            count = append_interactions(cassette, [interaction])
            if log is not None:
                end = interaction.response.end
                log(f"{request.method} {path} appended to {cassette} as #{count} ({end})")
    assert interaction is not None
    return interaction


def _ended(interaction: Interaction, path: str, seconds: float) -> Ended:
    """The journal's `Ended` of a request sent alone (`record_once`), which no server journals."""
    response = interaction.response
    body = response.body
    return Ended(
        request=1,
        method=interaction.request.method,
        path=path,
        status=response.status,
        end=response.end,
        bytes=len(body),
        events=len(event_ends(body)),
        seconds=seconds,
    )


async def fetch_each(
    upstream: str, requests: Iterable[Request], *, idle_timeout: float = 300.0
) -> AsyncGenerator[Interaction, None]:
    """Send each of `requests` to `upstream`, a base URL as a recording proxy's (a request for
    `/chat/completions` goes to the base plus that path; a `user:password@` in it goes as Basic credentials on
    a request with no `Authorization` of its own), one after another on the connections kept open, and yield
    each with the answer it got, whole, as it ends.

    Raises `ConfigError` for a base URL that is none, before anything is sent, and `UpstreamError` (the URL
    shown with its secrets redacted) when a request gets no answer.
    """
    target = AiohttpUpstream(upstream, idle_timeout=idle_timeout)

    async def on_head(_: Capture) -> None:
        pass

    try:
        for request in requests:
            capture = Capture(request)

            async def on_chunk(chunk: Chunk, capture: Capture = capture) -> None:
                capture.chunks.append(chunk)

            await _relay(target, capture, on_head=on_head, on_chunk=on_chunk)
            interaction = capture.interaction()
            assert interaction is not None  # a head came, or `_relay` raised
            yield interaction
    finally:
        await target.close()
