"""Recording: stream an upstream's responses through to the client and into a cassette.

The recorder is the server with a forwarding responder behind replay:
`Forwarder` sends each request replay does not answer (or, by the record
mode, should not) to the upstream; the response goes back to the client
chunk by chunk as it arrives, with no buffering and no re-encoding, and every
chunk is kept with its offset from the moment the request was sent. Its
`Recorder` writes each chunk to the session's spool before the client gets
it, adds each interaction to the running matcher as soon as it ends (so an
identical request later in the session replays it), and writes the
session's interactions into the cassette file only when the server stops:
appended, or, when a whole answer took the place of a stream cut short,
with the file written anew. Until then the spool alone holds them, and no
other reader of the cassette sees them. A crash loses nothing the spool
holds: the next load of the cassette reads it; a stop saves the streams in
flight as far as they got.

Faults act on what the client of a forwarded stream gets, as it passes (see
`faults.stream`), never on what is recorded: the cassette keeps the upstream's
answer whole, as it came, with a note of each fault that acted
(`Interaction.injected`), so that a replay can give either.

`record_once` does the same for one request, printing the stream as it arrives.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from typing import Any, BinaryIO

from aiohttp import web
from yarl import URL

from ._exceptions import CassetteError, UpstreamError
from .cassette import (
    Cassette,
    Chunk,
    End,
    Injection,
    Interaction,
    Recording,
    Request,
    Response,
    append_interactions,
    check_cassette_path,
    storable_headers,
)
from .cassette.spools import SpoolWriter
from .journal import Forwarded, Recorded, SaveFailed, UpstreamFailed
from .matching import CUT_SHORT
from .redaction import Redaction
from .server.live import Capture, Feed, answer_live
from .server.responder import Exchange, Host
from .upstream import AiohttpUpstream, Upstream, leaves_base, parse_upstream

__all__ = [
    "Capture",
    "Forwarder",
    "Recorder",
    "describe",
    "record_once",
]


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


def describe(interaction: Interaction) -> str:
    """One line about a recorded interaction: request, status, events, duration, how it ended."""
    req, resp = interaction.request, interaction.response
    events = len(resp.events())
    return f"{req.method} {req.path} -> {resp.status}, {events} event{'s'[: events != 1]}, {resp.end_time:.2f} s, {resp.end}"


class Recorder:
    """Records what a responder streams into a cassette, secrets redacted, and loses none of it.

    Each stream goes to a spool beside the cassette as it arrives, before the
    client gets it (see `cassette.spools`): a killed recorder leaves every byte a client
    saw on disk. An interaction is on the disk before it is reported
    recorded. When the session ends, what was recorded is appended to the
    cassette, at a cost that does not grow with the cassette (unless it
    takes the place of a recording cut short: then the file is written
    anew), and the spool is removed. With `playable`, what is recorded joins the server's matcher
    at once, so an identical request later in the session replays it; and a
    whole answer takes the place of every recording of the same request that
    was cut short on the recording side (see `matching.CUT_SHORT`), in this
    session or before: the first one's place, the others removed, so that no
    replay gets a copy cut short of a request the upstream answered whole
    (a retry cut short again, a request made twice, leaves several). The
    cut-off recordings stay in the cassette until the whole one is written
    there; the spool notes which ones the whole answer replaces (their
    fingerprints), so that the load after a kill puts it there too.
    """

    def __init__(
        self, cassette: Cassette | str | os.PathLike[str], redaction: Redaction | None = None, *, playable: bool = True
    ) -> None:
        if not isinstance(cassette, Cassette):
            cassette = Cassette(path=check_cassette_path(cassette))
        if cassette.path is None:
            raise CassetteError("the recorder needs a cassette with a path")
        self.cassette = cassette
        """The cassette appended to when the session ends."""
        self.path = cassette.path
        self.redaction = redaction or Redaction()
        self.playable = playable
        self.ends: Counter[End] = Counter()
        """The interactions recorded, by how each ended."""
        self.recorded: list[Interaction] = []
        """What this session recorded, in the order the streams ended (but for those in `replacing`)."""
        self.replacing: list[tuple[tuple[Interaction, ...], Interaction]] = []
        """Recordings of one request the cassette held that were cut short, each group with the whole answer
        that takes the first one's place."""
        self.replaced = 0
        """Whole answers that took the place of recordings cut short, in the cassette or this session."""
        self.displaced = 0
        """The recordings cut short whose place they took, or that went with those (of the same request)."""
        self.failures = 0
        """Writes that failed (a reset of the server does not clear them)."""
        self.in_flight = 0
        """Streams being recorded now: their response head came, and they are not over."""
        self._server: Host | None = None
        self._spool: SpoolWriter | None = None
        self._streams = 0
        self._syncing: set[asyncio.Future[None]] = set()
        # The numbers of the cassette's recordings cut short that go with no answer in their place.
        self._removed: list[int] = []

    async def start(self, server: Host) -> None:
        """Open the spool: a folder that cannot be written is an error now, before anything is recorded."""
        self._server = server
        self._spool = SpoolWriter(self.path)

    async def close(self) -> None:
        """Append what was recorded to the cassette, then remove the spool (kept if the append fails)."""
        if self._syncing:
            await asyncio.gather(*self._syncing, return_exceptions=True)
        spool, self._spool = self._spool, None
        if spool is None:
            return
        try:
            # The spool is removed inside the cassette's lock, while this still holds the spool's own:
            # no reader ever sees the interactions in both.
            await asyncio.to_thread(self.cassette.append, self.recorded, spool=spool.path, replacing=self.replacing)
        except CassetteError as exc:
            kept = "holds what was written before that" if spool.failed else "keeps the recordings"
            self._failed(None, f"{exc}; {spool.path} {kept}")
        finally:
            spool.close(remove=False)

    def begin(self, capture: Capture) -> None:
        """A stream's response head came: spool its request and head."""
        self._streams += 1
        self.in_flight += 1
        capture.spool = self._streams
        request = self._storable(capture.request)
        headers = self.redaction.response(Response(capture.status or 0, capture.headers)).headers

        def write(spool: SpoolWriter, n: int) -> None:
            r = request
            spool.start(n, capture.recorded_at, r.method, r.path, r.query, list(r.headers), r.body)
            spool.head(n, capture.status or 0, list(headers))
            for note in capture.injected:
                spool.fault(n, note.fault, note.what)

        self._spooled(write, capture)

    def received(self, capture: Capture, chunk: Chunk) -> None:
        """A piece of a stream's body came: spool it."""
        self._spooled(lambda spool, n: spool.chunk(n, chunk.t, chunk.data), capture)

    def injected(self, capture: Capture, note: Injection) -> None:
        """A fault acted on what the stream's client got: note it (the recording keeps what the upstream sent)."""
        capture.injected.append(note)
        self._spooled(lambda spool, n: spool.fault(n, note.fault, note.what), capture)

    def keep(self, capture: Capture, number: int) -> None:
        """The stream of request `number` is over: record it as far as it got."""
        server = self._server
        assert server is not None, "start() the recorder first"
        interaction = capture.interaction()
        if interaction is None:
            return  # no response head, nothing to record
        self.in_flight -= 1
        end = interaction.response.end
        cuts = self._cut_short(capture.request) if self.playable and end is End.COMPLETE else []
        if cuts:
            # In the spool before the stream's end: a killed session's whole answer takes their place too. The
            # first comes last, where a reader that knows of one such record per stream (an older one) takes it.
            fingerprints = [cut.interaction.fingerprint() for cut in reversed(cuts)]

            def replaces(spool: SpoolWriter, n: int) -> None:
                for fingerprint in fingerprints:
                    spool.replaces(n, fingerprint)

            self._spooled(replaces, capture)
        self._spooled(lambda spool, n: spool.end(n, str(end), capture.duration), capture)
        request, response = self._storable(interaction.request), self.redaction.response(interaction.response)
        interaction = replace(interaction, request=request, response=response)
        self.ends[interaction.response.end] += 1
        if cuts:
            index = self._replace(cuts, interaction)
        else:
            self.recorded.append(interaction)
            index = len(self.cassette) - len(self._removed) + len(self.recorded)
        if self.playable and (end is End.COMPLETE or end in CUT_SHORT):
            # Only a whole answer replays: the matcher leaves one cut short unanswered, for the upstream to
            # answer a retry whole (and that answer to take its place).
            server.matcher.add(interaction, self.cassette, index)
        replaced = tuple(cut.interaction.response.end for cut in cuts)
        syncing = asyncio.ensure_future(self._report(interaction, number, index, replaced))
        self._syncing.add(syncing)
        syncing.add_done_callback(self._syncing.discard)

    def _cut_short(self, request: Request) -> list[Recording]:
        """The recordings of `request` cut short, in this cassette then this session, that no whole answer
        has taken the place of yet."""
        assert self._server is not None
        found = self._server.matcher.cut_short(request)
        if not found:
            return []
        taken = {id(old) for olds, _ in self.replacing for old in olds}
        ours = {id(i) for i in (*self.cassette.interactions, *self.recorded) if id(i) not in taken}
        return [r for r in found if id(r.interaction) in ours]

    def _replace(self, cuts: list[Recording], interaction: Interaction) -> int:
        """Put `interaction` in the place of the first of `cuts` (recordings of its request cut short, the
        cassette's first), and take the others out; returns its number in the cassette."""
        self.replaced += 1
        self.displaced += len(cuts)
        olds = {id(cut.interaction) for cut in cuts}
        ours = [n for n, recorded in enumerate(self.recorded) if id(recorded) in olds]
        for n in ours:  # recorded in this session: no longer what was recorded
            self.ends[self.recorded[n].response.end] -= 1
        held = [cut for cut in cuts if not any(cut.interaction is self.recorded[n] for n in ours)]
        if held:  # the cassette's: the whole answer goes there when the cassette is written
            for n in reversed(ours):
                del self.recorded[n]
            self.replacing.append((tuple(cut.interaction for cut in held), interaction))
            self._removed += [cut.index for cut in held[1:]]
            return held[0].index - sum(removed < held[0].index for removed in self._removed)
        first, *rest = ours
        self.recorded[first] = interaction
        for n in reversed(rest):
            del self.recorded[n]
        return len(self.cassette) - len(self._removed) + first + 1

    async def _report(self, interaction: Interaction, number: int, index: int, replaced: tuple[End, ...]) -> None:
        """Note the interaction recorded once it is on the disk."""
        assert self._server is not None
        if self._spool is not None and self._spool.failed is None:
            try:
                await asyncio.to_thread(self._spool.sync)
            except OSError as exc:
                self._failed(number, f"{self._spool.path}: cannot write: {exc.strerror or exc}")
        request = interaction.request
        self._server.journal.add(
            Recorded(
                request=number,
                method=request.method,
                path=request.path,
                cassette=str(self.path),
                index=index,
                end=interaction.response.end,
                replaced=replaced,
            )
        )

    def _storable(self, request: Request) -> Request:
        """The request as it is recorded: secrets redacted, headers as text."""
        return self.redaction.request(replace(request, headers=storable_headers(request.headers)))

    def _spooled(self, write: Callable[[SpoolWriter, int], object], capture: Capture) -> None:
        spool = self._spool
        if spool is None or spool.failed is not None or capture.spool is None:
            return
        try:
            write(spool, capture.spool)
        except CassetteError as exc:  # a full disk, say: said once; the session goes on in memory
            self._failed(None, f"{exc}; what it holds stays readable, and what comes next is kept in memory")

    def _failed(self, number: int | None, reason: str) -> None:
        assert self._server is not None
        self.failures += 1
        self._server.journal.add(SaveFailed(request=number or 0, cassette=str(self.path), reason=reason))

    def summary(self) -> str:
        """One line: what was recorded, replayed and missed, and where."""
        assert self._server is not None
        counts = self._server.journal.counts
        recorded = sum(self.ends.values())
        parts = [f"{n} {end}" for end, n in self.ends.items() if end is not End.COMPLETE and n]
        if self.replaced:
            ones = "one" if self.displaced == 1 else "ones" if self.displaced == self.replaced else str(self.displaced)
            parts.append(f"{self.replaced} in place of {ones} cut short before")
        parts += [
            f"{counts[kind]} {what}"
            for kind, what in (
                ("matched", "replayed"),
                ("missed", "missed"),
                ("upstream-failed", "upstream errors"),
                ("save-failed", "save failures"),
            )
            if counts[kind]
        ]
        line = f"recorded {recorded} interaction{'s'[: recorded != 1]} to {self.path}"
        return line + (f" ({', '.join(parts)})" if parts else "")


class Forwarder:
    """A responder that forwards each request to an upstream and streams its answer back untouched.

    With a `Recorder`, what passes is recorded. The upstream is one more source of the live pipeline
    (`server.live`), which says what a client that hangs up, and the faults, do to the upstream request
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
        return await answer_live(
            server,
            exchange,
            self,
            Capture(exchange.request),
            recorder=self.recorder,
            failed=lambda exchange, why: server.error(exchange, 502, why, "bad_gateway"),
            cors=False,
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
            feed.begin(capture.status or 502, capture.headers)

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
        """The upstream URL of `request` as the journal shows it: the query's secrets and any user info redacted."""
        assert self._server is not None
        query = request.query
        url = self.upstream.url(replace(request, query=self._server.shown_query(query)) if query else request)
        return self._server.redaction.url(url) if "@" in url else url  # `user:password@` in the base URL


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
    cassette it is only returned. An `UpstreamError` (no response) shows
    `url` with its secrets redacted, as `redaction` would store them.
    """
    if cassette is not None:
        check_cassette_path(cassette)
    parse_upstream(url.split("?", 1)[0])  # the same checks, and messages, as for a proxy's upstream
    target = URL(url, encoded=True)
    base = target.with_path("/").with_query(None).with_fragment(None)  # the origin, and any user info kept
    upstream = AiohttpUpstream(str(base), idle_timeout=idle_timeout, redaction=redaction)
    request = Request(method.upper(), target.raw_path, target.raw_query_string, tuple(headers), body)
    capture = Capture(request)

    async def on_head(capture: Capture) -> None:
        pass

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
        if interaction is not None and cassette is not None:
            interaction = (redaction or Redaction()).interaction(interaction)
            append_interactions(cassette, [interaction])
    assert interaction is not None
    return interaction
