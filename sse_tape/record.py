"""Recording: stream an upstream's responses through to the client and into a cassette.

The recorder is the server with a forwarding responder behind replay:
`Forwarder` sends each request replay does not answer (or, by the record
mode, should not) to the upstream; the response goes back to the client
chunk by chunk as it arrives, with no buffering and no re-encoding, and every
chunk is kept with its offset from the moment the request was sent. Its
`Recorder` appends each interaction to the cassette as soon as it ends and
adds it to the running matcher, so an identical request later in the session
replays it. A crash loses at most the streams in flight, and those are saved
as far as they got when the server is stopped.

`record_once` does the same for one request, printing the stream as it arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, BinaryIO

from aiohttp import web
from yarl import URL

from ._exceptions import ConfigError, UpstreamError
from ._http import drop_connection, end_to_end, run_in_thread
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
from .journal import Forwarded, Recorded, SaveFailed, UpstreamFailed
from .options import MissPolicy, ServeOptions
from .plan import blocks_of
from .redaction import Redaction
from .upstream import AiohttpUpstream, Upstream, parse_upstream

if TYPE_CHECKING:
    from .server import Exchange, MockServer

__all__ = [
    "Forwarder",
    "RecordMode",
    "Recorder",
    "arecording",
    "describe",
    "record_once",
    "recording",
    "recording_server",
]


class RecordMode(StrEnum):
    """When to replay and when to record, with VCR.py's words and meanings."""

    ONCE = "once"
    """Record everything if the cassette does not exist yet; if it does, replay only (a miss is an error).

    A new cassette records every request of the session, repeats too, so a replay
    plays them back in order, as VCR.py does.
    """
    NEW_EPISODES = "new_episodes"
    """Replay each matching recording once; forward and record every other request.

    What is recorded replays at once: an identical request later in the session gets it.
    """
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


async def _relay(
    upstream: Upstream,
    capture: _Capture,
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
    start = loop.time()
    try:
        async with upstream.open(capture.request) as reply:
            capture.status, capture.headers = reply.status, reply.headers
            await on_head(capture)
            async for data in reply:
                capture.chunks.append(Chunk(round(loop.time() - start, 6), data))
                await on_chunk(data)
            capture.end = reply.end
    finally:
        capture.duration = round(loop.time() - start, 6)


def describe(interaction: Interaction) -> str:
    """One line about a recorded interaction: request, status, events, duration, how it ended."""
    req, resp = interaction.request, interaction.response
    events = len(resp.events())
    return f"{req.method} {req.path} -> {resp.status}, {events} event{'s'[: events != 1]}, {resp.end_time:.2f} s, {resp.end}"


class Recorder:
    """Saves each interaction it is given into a cassette, secrets redacted.

    Interactions are appended off the event loop, in the order they ended,
    so other streams keep flowing; each save is noted in the server's journal.
    With `playable`, each also joins the server's matcher at once, so an
    identical request later in the session replays it.
    """

    def __init__(
        self, cassette: str | os.PathLike[str], redaction: Redaction | None = None, *, playable: bool = True
    ) -> None:
        self.cassette = check_cassette_path(cassette)
        self.redaction = redaction or Redaction()
        self.playable = playable
        self.ends: Counter[End] = Counter()
        """The interactions recorded, by how each ended."""
        self._server: MockServer | None = None
        self._count = 0
        self._saving: set[asyncio.Future[int]] = set()
        self._save_order = asyncio.Lock()

    async def start(self, server: MockServer) -> None:
        self._server = server
        self._count = sum(1 for r in server.matcher.recordings if r.cassette == self.cassette.name)

    async def close(self) -> None:
        """Wait until every interaction given is saved (or failed to be)."""
        if self._saving:
            await asyncio.gather(*self._saving, return_exceptions=True)

    def keep(self, capture: _Capture, number: int) -> None:
        """Record what a capture holds, as request `number`: redacted, playable at once, saved soon."""
        server = self._server
        assert server is not None, "start() the recorder first"
        interaction = capture.interaction()
        if interaction is None:
            return
        try:
            interaction = self.redaction.interaction(interaction)
        except Exception as exc:  # a bug here must not pass silently: note it as not saved
            server.journal.add(
                SaveFailed(request=number, cassette=str(self.cassette), reason=f"cannot redact: {exc!r}")
            )
            return
        self._count += 1
        if self.playable:
            server.matcher.add(interaction, self.cassette.name, self._count)
        self.ends[interaction.response.end] += 1
        saving = asyncio.ensure_future(self._save(interaction, number, self._count))
        self._saving.add(saving)
        saving.add_done_callback(self._saving.discard)

    async def _save(self, interaction: Interaction, number: int, index: int) -> int:
        assert self._server is not None
        journal = self._server.journal
        request = interaction.request
        # The lock is first come, first served: interactions are saved in the order they ended,
        # which replays of identical requests follow.
        async with self._save_order:
            try:
                count = await asyncio.to_thread(append_interactions, self.cassette, [interaction])
            except Exception as exc:
                journal.add(SaveFailed(request=number, cassette=str(self.cassette), reason=str(exc)))
                return 0
        journal.add(
            Recorded(
                request=number,
                method=request.method,
                path=request.path,
                cassette=str(self.cassette),
                index=index,
                end=interaction.response.end,
            )
        )
        return count

    def summary(self) -> str:
        """One line: what was recorded, replayed and missed, and where."""
        assert self._server is not None
        counts = self._server.journal.counts
        recorded = sum(self.ends.values())
        parts = [f"{n} {end}" for end, n in self.ends.items() if end is not End.COMPLETE]
        parts += [
            f"{counts[kind]} {what}"
            for kind, what in (
                ("matched", "replayed"),
                ("missed", "missed"),
                ("upstream-failed", "upstream errors"),
                ("save-failed", "not saved"),
            )
            if counts[kind]
        ]
        line = f"recorded {recorded} interaction{'s'[: recorded != 1]} to {self.cassette}"
        return line + (f" ({', '.join(parts)})" if parts else "")


class Forwarder:
    """A responder that forwards each request to an upstream and streams its answer back untouched.

    With a `Recorder`, what passes is recorded.
    """

    def __init__(self, upstream: Upstream, recorder: Recorder | None = None) -> None:
        self.upstream = upstream
        self.recorder = recorder
        self._server: MockServer | None = None

    async def start(self, server: MockServer) -> None:
        self._server = server
        if self.recorder is not None:
            await self.recorder.start(server)

    async def close(self) -> None:
        if self.recorder is not None:
            await self.recorder.close()
        await self.upstream.close()

    async def respond(self, exchange: Exchange) -> web.StreamResponse:
        server = self._server
        assert server is not None, "start() the responder first"
        request = exchange.request
        capture = _Capture(request)
        out = web.StreamResponse()

        async def on_head(capture: _Capture) -> None:
            exchange.status = capture.status or 502
            server.journal.add(
                Forwarded(
                    request=exchange.number,
                    method=request.method,
                    path=request.path,
                    url=self.upstream.url(request),
                    status=exchange.status,
                )
            )
            out.set_status(exchange.status)
            for name, value in end_to_end(capture.headers):
                out.headers.add(name, value)
            await out.prepare(exchange.http)

        async def on_chunk(data: bytes) -> None:
            await out.write(data)
            exchange.progress.bytes += len(data)

        try:
            await _relay(self.upstream, capture, on_head=on_head, on_chunk=on_chunk)
        except UpstreamError as exc:
            server.journal.add(
                UpstreamFailed(request=exchange.number, method=request.method, path=request.path, reason=str(exc))
            )
            return server.error(exchange, 502, str(exc), "bad_gateway")
        except (ConnectionResetError, ConnectionAbortedError):
            capture.end = End.CLIENT_GONE
        except asyncio.CancelledError:
            capture.end = End.INTERRUPTED if server.closing else End.CLIENT_GONE
            raise
        finally:
            if capture.status is not None:
                exchange.end = capture.end
                body = b"".join(chunk.data for chunk in capture.chunks)
                exchange.event_ends = [b.end for b in blocks_of(body) if b.event is not None]
                if self.recorder is not None:
                    self.recorder.keep(capture, exchange.number)
        if capture.end is End.COMPLETE:
            await out.write_eof()
        elif capture.end is not End.CLIENT_GONE:
            # The upstream broke off or went silent: so does the response the client gets.
            drop_connection(exchange.http, reset=capture.end is End.UPSTREAM_RESET)
        return out


def recording_server(
    cassette: str | os.PathLike[str],
    upstream: str,
    *,
    mode: RecordMode | str = RecordMode.NEW_EPISODES,
    redaction: Redaction | None = None,
    idle_timeout: float = 300.0,
    options: ServeOptions | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    log: Callable[[str], None] | None = None,
) -> MockServer:
    """A server that records into `cassette` what it forwards to `upstream`, and replays by `mode`.

    `upstream` is a base URL such as `http://127.0.0.1:8000` or
    `https://api.example.com/v1`; a request for `/chat/completions` goes to
    the upstream's base URL plus that path. `options` say how replays are
    matched and paced; the mode says whether recordings repeat: each replays
    once under `new_episodes` (as VCR.py does), and they repeat under the others.
    """
    from .server import MockServer

    path = check_cassette_path(cassette)
    forwarded = AiohttpUpstream(upstream, idle_timeout=idle_timeout)
    try:
        mode = RecordMode(mode)
    except ValueError:
        raise ConfigError(f"record mode {mode!r}: choose from {', '.join(RecordMode)}") from None
    # Read it now: a cassette that cannot be read must stop us before we record over it.
    existing = Cassette.load(path) if path.exists() else None
    replay_only = mode is RecordMode.NONE or (mode is RecordMode.ONCE and existing is not None)
    chosen = dataclasses.replace(
        options or ServeOptions(),
        on_miss=MissPolicy.ERROR if replay_only else MissPolicy.RECORD,
        allow_repeats=mode is not RecordMode.NEW_EPISODES,
    )
    return MockServer(
        [existing] if existing is not None and mode is not RecordMode.ALL else [],
        options=chosen,
        host=host,
        port=port,
        log=log,
        upstream=forwarded,
        # What new_episodes records replays from the next request on; once and all record every request.
        recorder=Recorder(path, redaction, playable=mode is RecordMode.NEW_EPISODES),
        replay=mode is not RecordMode.ALL,
    )


@contextlib.asynccontextmanager
async def arecording(cassette: str | os.PathLike[str], upstream: str, **keywords: Any) -> AsyncIterator[MockServer]:
    """Run a recording server while the block runs; its keywords are `recording_server`'s."""
    async with recording_server(cassette, upstream, **keywords) as server:
        yield server


@contextlib.contextmanager
def recording(cassette: str | os.PathLike[str], upstream: str, **keywords: Any) -> Iterator[MockServer]:
    """Like `arecording`, for synchronous code: the server runs in a background thread."""
    with run_in_thread(recording_server(cassette, upstream, **keywords)) as server:
        yield server


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
    parse_upstream(url.split("?", 1)[0])  # the same checks, and messages, as for a proxy's upstream
    target = URL(url, encoded=True)
    upstream = AiohttpUpstream(str(target.origin()), idle_timeout=idle_timeout)
    request = Request(method.upper(), target.raw_path, target.raw_query_string, tuple(headers), body)
    capture = _Capture(request)

    async def on_head(capture: _Capture) -> None:
        pass

    async def on_chunk(data: bytes) -> None:
        if out is not None:
            out.write(data)
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
