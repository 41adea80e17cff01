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
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, BinaryIO, ClassVar

from aiohttp import web
from yarl import URL

from ._exceptions import CassetteError, UpstreamError
from .cassette import (
    Cassette,
    Chunk,
    End,
    Headers,
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
from .dialects import Protocol
from .faults import Fault, FaultedStream, Stage
from .incidents import FaultInjected
from .journal import Entry
from .matching import CUT_SHORT, is_streamed
from .plan import Plan, event_ends
from .redaction import Redaction
from .server.responder import Exchange, Host
from .sse import SSEDecoder
from .upstream import AiohttpUpstream, Upstream, leaves_base, parse_upstream
from .wire import drop_connection, end_live, end_to_end, sleep_until, stream_live

__all__ = [
    "Capture",
    "Forwarded",
    "Forwarder",
    "Recorded",
    "Recorder",
    "SaveFailed",
    "UpstreamFailed",
    "describe",
    "record_once",
]

# The journal entries only forwarding and recording make live here, not in `journal`: a server that only
# replays never defines them (each frozen dataclass is about a millisecond of CPU time to define).


@dataclass(frozen=True, slots=True, kw_only=True)
class Forwarded(Entry):
    """The request went to the upstream, and its response head came back."""

    kind: ClassVar[str] = "forwarded"
    method: str
    path: str
    url: str
    status: int

    def line(self) -> str:
        return f"{self.method} {self.path} -> {self.status} from {self.url}"


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamFailed(Entry):
    """The upstream sent no response: the client got a 502."""

    kind: ClassVar[str] = "upstream-failed"
    method: str
    path: str
    reason: str

    def line(self) -> str:
        return f"{self.method} {self.path} -> 502 {self.reason}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Recorded(Entry):
    """The interaction is on the disk, in the recorder's spool: the cassette's interaction number `index`
    once the recorder stops and writes it there (or a load reads the spool a killed recorder left)."""

    kind: ClassVar[str] = "recorded"
    method: str
    path: str
    cassette: str
    index: int
    end: End
    replaced: tuple[End, ...] = ()
    """How each recording it took the place of ended (streams of the same request cut short, recorded again
    whole); none: it is new."""

    def line(self) -> str:
        how = str(self.end)
        if self.replaced:
            ones = "one" if len(self.replaced) == 1 else str(len(self.replaced))
            how += f", in place of {ones} that ended {', '.join(dict.fromkeys(self.replaced))}"
        return f"{self.method} {self.path} recorded in the spool of {self.cassette} as #{self.index} ({how})"


@dataclass(frozen=True, slots=True, kw_only=True)
class SaveFailed(Entry):
    """The interaction could not be saved."""

    kind: ClassVar[str] = "save-failed"
    cassette: str
    reason: str

    def line(self) -> str:
        return f"could not save an interaction to {self.cassette}: {self.reason}"


@dataclass(slots=True)
class Capture:
    """A response being recorded while it streams; what it holds so far survives any interruption.

    A responder that makes answers (a model) fills one as it streams and hands it to `Recorder.begin`,
    `received` and `keep`, as the forwarder does.
    """

    request: Request
    recorded_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    status: int | None = None
    headers: Headers = ()
    chunks: list[Chunk] = field(default_factory=list)
    end: End = End.INTERRUPTED
    duration: float = 0.0
    spool: int | None = None
    """The stream's number in the recorder's spool, once it is spooled."""
    injected: list[Injection] = field(default_factory=list)
    """The faults that acted on the client's copy of the stream."""

    def interaction(self) -> Interaction | None:
        """The interaction so far; None if no response head ever came."""
        if self.status is None:
            return None
        ended_late = self.end is not End.COMPLETE
        response = Response(
            self.status, self.headers, tuple(self.chunks), self.end, self.duration if ended_late else None
        )
        return Interaction(self.request, response, self.recorded_at, tuple(self.injected))


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
                chunk = Chunk(round(loop.time() - start, 6), data)
                capture.chunks.append(chunk)
                await on_chunk(chunk)
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


@dataclass(slots=True)
class _Client:
    gone: bool = False


class Forwarder:
    """A responder that forwards each request to an upstream and streams its answer back untouched.

    With a `Recorder`, what passes is recorded. A client that hangs up stops
    the upstream request at once, unless it left after the answer's terminal
    frame (the openai SDK closes its socket at `[DONE]`, before the upstream's
    own end): then the upstream is read to its end, `drain_timeout` seconds
    at most, so that the recording says it ended complete.

    The server's faults, and those a request asks for, act on the stream the
    client gets as it passes, event by event (a piece of an event waits for
    the rest of it). Its recording is what the upstream sent, read to its
    end whatever the faults do to the client's copy, or the client does,
    with a note of each fault that acted. One that answers in
    the stream's place (a status, no answer, no body) answers at once: the
    request goes nowhere and nothing is recorded. An answer that is not an
    event stream takes only `ttfb`; under a fault that needs the whole stream
    (`50%`, `split`) the client gets it once the upstream's answer has ended. The journal
    says what each did. The upstream is read on after the client's copy is
    over for `read_on` seconds at most: an endless feed is recorded as far
    as that, `interrupted`.
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
            return server.error(
                exchange,
                400,
                f"{exchange.request.path}: a path may not climb out of the upstream's base path",
                "bad_path",
            )
        faults, rng = server.injector.choose(exchange.request, exchange.faults)
        if faults and rng is not None:
            return await self._respond_faulted(exchange, faults, rng)
        capture = Capture(exchange.request)
        client = _Client()
        # Shielded from the handler: when the client goes, this decides whether the upstream is cut or drained.
        stream = asyncio.ensure_future(self._forward(exchange, capture, client))
        self._streams.add(stream)
        stream.add_done_callback(self._streams.discard)
        stream.add_done_callback(self._draining.discard)
        try:
            return await asyncio.shield(stream)
        except asyncio.CancelledError:
            # The client went, or the server is stopping. A client that had its answer gets the
            # upstream read on for the recording; otherwise the upstream request stops now.
            if not client.gone:
                client.gone = True
                if self._drains(capture, exchange):
                    self._drain(stream, exchange)
                elif stream.cancel():
                    # The stream notes its own end once over: only then does it know the events it sent.
                    exchange.ends_later = True
            raise

    def _drains(self, capture: Capture, exchange: Exchange) -> bool:
        """Whether to read on after the client left: to record a stream it read to its terminal frame."""
        return self.recorder is not None and _answered(capture, exchange.dialect)

    def _drain(self, stream: asyncio.Future[web.StreamResponse], exchange: Exchange) -> None:
        """Read on for the recording, `drain_timeout` seconds at most; the stream then notes its own end."""
        exchange.ends_later = True
        self._draining.add(stream)
        deadline = asyncio.get_running_loop().call_later(self.drain_timeout, stream.cancel)
        stream.add_done_callback(lambda _: deadline.cancel())

    async def _forward(self, exchange: Exchange, capture: Capture, client: _Client) -> web.StreamResponse:
        server = self._server
        assert server is not None
        recorder = self.recorder
        out = web.StreamResponse()

        async def on_head(capture: Capture) -> None:
            self._head_came(exchange, capture)
            exchange.status = capture.status or 502
            out.set_status(exchange.status)
            for name, value in end_to_end(capture.headers):
                out.headers.add(name, value)
            await out.prepare(exchange.http)

        async def on_chunk(chunk: Chunk) -> None:
            if recorder is not None:
                recorder.received(capture, chunk)  # on disk before the client has it
            if client.gone:
                return  # reading the upstream to its end for the recording
            try:
                await out.write(chunk.data)
            except (ConnectionResetError, ConnectionAbortedError):
                client.gone = True
                if not self._drains(capture, exchange):
                    raise
                current = asyncio.current_task()
                assert current is not None
                self._drain(current, exchange)
                return
            exchange.progress.bytes += len(chunk.data)

        try:
            await _relay(self.upstream, capture, on_head=on_head, on_chunk=on_chunk)
        except UpstreamError as exc:
            return server.error(exchange, 502, self._upstream_failed(exchange, exc), "bad_gateway")
        except (ConnectionResetError, ConnectionAbortedError):
            capture.end = End.CLIENT_GONE
        except asyncio.CancelledError:
            capture.end = End.INTERRUPTED if server.closing else End.CLIENT_GONE
            raise
        finally:
            if capture.status is not None:
                exchange.end = capture.end
                body = b"".join(chunk.data for chunk in capture.chunks)
                exchange.event_ends = event_ends(body)
                if recorder is not None:
                    recorder.keep(capture, exchange.number)
            if exchange.ends_later:
                server.ended(exchange)
        if client.gone:
            return out
        if capture.end is End.COMPLETE:
            await out.write_eof()
        elif capture.end is not End.CLIENT_GONE:
            # The upstream broke off or went silent: so does the response the client gets.
            drop_connection(exchange.http, reset=capture.end is End.UPSTREAM_RESET)
        return out

    def _head_came(self, exchange: Exchange, capture: Capture) -> None:
        """The upstream's response head came: journal it, and start recording."""
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
        if self.recorder is not None:
            self.recorder.begin(capture)

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

    # --- faults on forwarded streams ---------------------------------------------------------------

    async def _respond_faulted(self, exchange: Exchange, faults: list[Fault], rng: random.Random) -> web.StreamResponse:
        """Forward the request, and send its client the answer as `faults` make it; record the answer as it came."""
        server = self._server
        assert server is not None
        head = Plan(200, [], [])
        faulted = FaultedStream(faults, head=head, dialect=exchange.dialect, rng=rng, request=exchange.request)
        if head.replaced:  # a status, no answer or no body, in the upstream's place
            unsent = "not forwarded" if self.recorder is None else "not forwarded, nothing recorded"
            self._noted(exchange, None, [(f, f"{what}; {unsent}") for f, what in faulted.take_notes()])
            return await server.send(exchange, head)
        capture = Capture(exchange.request)
        self._noted(exchange, capture, faulted.take_notes())
        head_came: asyncio.Future[UpstreamError | None] = asyncio.get_running_loop().create_future()
        pieces: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        ends = 2  # the upstream's answer and the client's copy: the recording is kept when both are over

        def over() -> None:
            nonlocal ends
            ends -= 1
            if not ends and self.recorder is not None and capture.status is not None:
                self.recorder.keep(capture, exchange.number)

        # Read apart from the client's copy, so that what the faults hold back is recorded when it came.
        relay = asyncio.ensure_future(self._read_for(exchange, capture, head_came, pieces, over))
        self._streams.add(relay)
        relay.add_done_callback(self._streams.discard)
        relay.add_done_callback(self._draining.discard)
        stream_faults = [f for f in faults if f.stage is not Stage.BEFORE]
        try:
            return await self._send_faulted(exchange, capture, faulted, stream_faults, head_came, pieces)
        finally:
            over()
            if self.recorder is None:
                relay.cancel()  # nothing to record: the upstream stops with the client's copy
            elif not relay.done():  # read to its end for the recording, `read_on` seconds at most
                self._draining.add(relay)
                deadline = asyncio.get_running_loop().call_later(self.read_on, relay.cancel)
                relay.add_done_callback(lambda _: deadline.cancel())

    async def _read_for(
        self,
        exchange: Exchange,
        capture: Capture,
        head: asyncio.Future[UpstreamError | None],
        pieces: asyncio.Queue[tuple[float, bytes] | None],
        over: Callable[[], None],
    ) -> None:
        """Read the upstream's answer into `capture` as it comes, handing its head and each piece on."""
        server = self._server
        assert server is not None
        loop = asyncio.get_running_loop()

        async def on_head(capture: Capture) -> None:
            self._head_came(exchange, capture)
            head.set_result(None)

        async def on_chunk(chunk: Chunk) -> None:
            if self.recorder is not None:
                self.recorder.received(capture, chunk)
            pieces.put_nowait((loop.time() - exchange.started, chunk.data))

        try:
            await _relay(self.upstream, capture, on_head=on_head, on_chunk=on_chunk)
        except UpstreamError as exc:
            head.set_result(UpstreamError(self._upstream_failed(exchange, exc)))
        except asyncio.CancelledError:  # the server stops, or the recorder has read on long enough
            capture.end = End.INTERRUPTED
            raise
        finally:
            if not head.done():
                head.set_result(UpstreamError("the upstream request was stopped before its answer came"))
            pieces.put_nowait(None)
            over()

    async def _send_faulted(
        self,
        exchange: Exchange,
        capture: Capture,
        faulted: FaultedStream,
        stream_faults: list[Fault],
        head_came: asyncio.Future[UpstreamError | None],
        pieces: asyncio.Queue[tuple[float, bytes] | None],
    ) -> web.StreamResponse:
        """Send the client the upstream's answer as the faults make it."""
        server = self._server
        assert server is not None
        failed = await head_came
        if failed is not None:
            return server.error(exchange, 502, str(failed), "bad_gateway")
        assert capture.status is not None
        exchange.status = capture.status
        streamed = is_streamed(Interaction(capture.request, Response(capture.status, capture.headers)))
        out = web.StreamResponse(status=capture.status)
        # The faults change the body's length: a stream goes chunked.
        for name, value in end_to_end(capture.headers, also_drop=("content-length",) if streamed else ()):
            out.headers.add(name, value)
        if not streamed:
            self._noted(exchange, capture, [(f, "not an event stream: forwarded as it is") for f in stream_faults])
        headers_at = faulted.run.head.headers_at
        if headers_at is not None:
            await sleep_until(exchange.started + headers_at)
        sent = bytearray()
        started, progress = exchange.started, exchange.progress
        try:
            await out.prepare(exchange.http)
            if streamed:

                def noted(notes: list[tuple[Fault, str]]) -> None:
                    self._noted(exchange, capture, notes)

                await stream_live(
                    out,
                    faulted,
                    pieces,
                    started=started,
                    progress=progress,
                    sent=sent,
                    noted=noted,
                    source_end=lambda: capture.end,
                )
                exchange.end = await end_live(
                    exchange.http, out, faulted, capture.end, started=started, progress=progress
                )
            else:
                while (piece := await pieces.get()) is not None:
                    await out.write(piece[1])
                    progress.bytes += len(piece[1])
                if capture.end is End.COMPLETE:
                    await out.write_eof()
                else:
                    drop_connection(exchange.http, reset=capture.end is End.UPSTREAM_RESET)
                exchange.end = capture.end
        except (ConnectionResetError, ConnectionAbortedError):
            exchange.end = End.CLIENT_GONE
        finally:  # a stream cut off by the server's stop too says how many events it sent
            exchange.event_ends = event_ends(bytes(sent))
        return out

    def _noted(self, exchange: Exchange, capture: Capture | None, notes: list[tuple[Fault, str]]) -> None:
        """Journal what each fault did to the client's copy and, when it is recorded, note it there."""
        assert self._server is not None
        request = exchange.request
        for fault, what in notes:
            self._server.state.note_injected(fault.spec)
            self._server.journal.add(
                FaultInjected(
                    request=exchange.number, method=request.method, path=request.path, fault=fault.spec, what=what
                )
            )
            if capture is not None and self.recorder is not None:
                self.recorder.injected(capture, Injection(fault.spec, what))


def _answered(capture: Capture, dialect: Protocol) -> bool:
    """Whether the client had the answer's terminal frame: the last whole event it got ends the answer."""
    decoder = SSEDecoder()
    events = [event for chunk in capture.chunks for event in decoder.feed(chunk.data)]
    return bool(events) and dialect.is_terminal(events[-1])


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
