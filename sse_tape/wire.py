"""The wire: writing a response to the client, a replay's plan or a live stream under its faults, and the
headers that do not travel, dropping a connection, waiting on the loop's clock."""

from __future__ import annotations

import asyncio
import functools
import socket
import struct
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from aiohttp import HttpVersion11, web
from aiohttp.http import StreamWriter

from .cassette import End
from .plan import Heartbeats, Plan, Write

if TYPE_CHECKING:
    from .faults import Fault, FaultedStream

__all__ = [
    "HOP_BY_HOP",
    "Live",
    "Progress",
    "drop_connection",
    "end_to_end",
    "half_close",
    "has_header",
    "send",
    "sleep_until",
]

_Fields = tuple[tuple[str, str], ...]

# Headers that describe one connection, not the message (RFC 9110 section 7.6.1).
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
)


def end_to_end(headers: Iterable[tuple[str, str]], also_drop: Iterable[str] = ()) -> list[tuple[str, str]]:
    """The headers a proxy or a replay passes on: not hop-by-hop ones, nor those the Connection header names."""
    headers = list(headers)
    named = {h.strip().lower() for name, value in headers if name.lower() == "connection" for h in value.split(",")}
    dropped = HOP_BY_HOP | named | {h.lower() for h in also_drop}
    return [(name, value) for name, value in headers if name.lower() not in dropped]


def has_header(headers: Iterable[tuple[str, str]], name: str) -> bool:
    """Whether a header of this (lower-case) name is among `headers`."""
    return any(k.lower() == name for k, _ in headers)


def drop_connection(http: web.BaseRequest, *, reset: bool) -> None:
    """Close the client's connection without ending the response: with a TCP reset, or a plain close."""
    transport = http.transport
    if transport is None:
        return
    if reset:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # Linger on, timeout 0: close() sends RST instead of FIN.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    else:
        transport.close()


def half_close(http: web.BaseRequest) -> None:
    """End the connection's output after what is written (a TCP FIN), and read on until it closes: for an answer
    sent with `close` (see `send`), after which aiohttp drains the body the answer did not read (its
    `lingering_time`) and then closes. A close at once would meet the bytes the client still sends with a reset,
    which can cost a client the answer it has not read yet (RFC 9112, section 9.6)."""
    transport = http.transport
    if transport is None:
        return
    if transport.can_write_eof():
        transport.write_eof()
    else:
        transport.close()


@dataclass(slots=True)
class Progress:
    """How far a response got: its bytes written so far, and how it ended."""

    bytes: int = 0
    end: End = End.COMPLETE
    """How the response ended (once it has): as planned, or cut off by the client, the server or a fault."""


@dataclass(slots=True)
class Live:
    """A body still being made (an upstream's answer, a model's), to send as it comes.

    `pieces` brings each piece as `(t, bytes)`, `t` in seconds from the request's arrival, and None once
    the source is done; `faulted` are the faults that act on it (None: it passes as it comes);
    `source_end` says how the source ended, once it is done; `noted` gets what the faults do as they
    decide it; `finished` is called once the body is out, before its end. After sending, `sent` holds
    every byte sent.
    """

    pieces: asyncio.Queue[Write | None]
    faulted: FaultedStream | None
    source_end: Callable[[], End]
    noted: Callable[[list[tuple[Fault, str]]], None]
    sent: bytearray = field(default_factory=bytearray)
    finished: Callable[[], None] = lambda: None
    """Called once the whole body is out and the faults are through with it, before its end goes out (a
    recorder keeps the recording then: the client has its end only once it is on the disk)."""


def send(
    http: web.BaseRequest,
    plan: Plan,
    progress: Progress,
    headers: Mapping[str, str] | None = None,
    *,
    started: float,
    writes: list[Write] | None = None,
    live: Live | None = None,
    close: bool = False,
) -> Coroutine[None, None, web.StreamResponse]:
    """Send a response, the one way every response goes to the wire: the plan's status and headers (plus
    `headers`), when `plan.headers_at` says; then the body: the plan's writes, each at its offset from the
    request's arrival at `started` (on the loop's clock), or, with `live`, a body still being made, each
    piece when it comes (and its faults say); then the end the plan, the faults or the source ask for.
    `writes` is what `coalesced(plan)` gave, for a plan sent again and again unchanged. With `close`, the
    response says `Connection: close`, and the connection closes after it (once aiohttp has drained a body the
    answer did not read: see `half_close`).

    Returns the response; `progress` counts its bytes as they go and, once it is over, says how it ended
    (`End.CLIENT_GONE` when the client hung up between writes). A client that hangs up during a wait
    cancels the handler, and the cancellation propagates: `progress.end` is left as it was, for the caller
    to set.
    """
    # The coroutine that sends it, as it is: one more waiting a whole stream would hold memory for nothing.
    if live is None:
        return _send_plan(http, plan, progress, headers, started=started, writes=writes, close=close)
    return _send_live(http, plan, progress, headers, started=started, live=live, close=close)


async def _send_live(
    http: web.BaseRequest,
    plan: Plan,
    progress: Progress,
    headers: Mapping[str, str] | None,
    *,
    started: float,
    live: Live,
    close: bool,
) -> web.StreamResponse:
    """Send a body still being made (see `send`)."""
    if plan.hang:
        await asyncio.Event().wait()  # until the client goes or the server stops
    added = tuple(headers.items()) if headers else ()
    fields = (*end_to_end(plan.headers, also_drop=[name for name, _ in added]), *added)
    out = web.StreamResponse(status=plan.status, headers=fields)
    if close:
        out.force_close()
    try:
        if plan.headers_at is not None:
            await sleep_until(started + plan.headers_at)
        await out.prepare(http)
        if live.faulted is None:
            while (piece := await live.pieces.get()) is not None:
                live.sent += piece[1]
                await out.write(piece[1])
                progress.bytes += len(piece[1])
            live.finished()
            end = live.source_end()
            if end is End.COMPLETE:
                await out.write_eof()
            else:  # the source broke off or went silent: so does the answer
                drop_connection(http, reset=end is End.UPSTREAM_RESET)
            progress.end = end
            return out
        await _stream_live(out, live, started=started, progress=progress)
        live.finished()
        progress.end = await _end_live(http, out, live, started=started, progress=progress)
    except (ConnectionResetError, ConnectionAbortedError):
        progress.end = End.CLIENT_GONE
    return out


async def _send_plan(
    http: web.BaseRequest,
    plan: Plan,
    progress: Progress,
    headers: Mapping[str, str] | None = None,
    *,
    started: float,
    writes: list[Write] | None = None,
    close: bool = False,
) -> web.StreamResponse:
    """Send a plan known whole in advance (see `send`)."""
    if plan.hang:
        await asyncio.Event().wait()  # until the client goes or the server stops
    fields, recorded_length = _head(tuple(plan.headers), tuple(headers.items()) if headers else ())
    # A recorded length, or one a fault set, is sent again for the body as it is now.
    length = recorded_length and plan.end is End.COMPLETE
    if length:
        fields = (*fields, ("Content-Length", str(plan.size())))
    # A HEAD answer, a 204 and a 304 have no body whatever was recorded: one sent anyway would be read as
    # the start of the next response on the connection.
    if http.method == "HEAD" or plan.status in (204, 304):
        timeline: Iterator[Write] = iter(())
    else:
        timeline = iter(writes) if writes is not None else _together(plan.timeline(), plan.apart)
    pending = next(timeline, None)
    following = next(timeline, None) if pending is not None else None
    if (
        pending is not None
        and following is None
        and _ends_with(plan, pending)
        and plan.headers_at is None
        and (length or http.version >= HttpVersion11)  # HTTP/1.0 without a length: ended by the close
    ):
        return await _write_whole(http, plan, fields, pending, progress, started=started, length=length, close=close)
    out = _HeadWithBody(status=plan.status, headers=fields)
    if close:
        out.force_close()
    try:
        if plan.headers_at is not None:
            await sleep_until(started + plan.headers_at)
            await out.prepare(http)
            http.writer.send_headers()  # at the time recorded for it, alone
        while pending is not None and following is not None:
            if not out.prepared:
                await out.prepare(http)  # its head goes out when the pacer's first write does
            pacer = _Pacer(http, out, started, pending, following, timeline, progress, join=not plan.apart)
            del pending, following  # the pacer's now: what it has sent is not the stream's to hold while it plays
            try:
                pending, following = await pacer.stopped
            finally:
                pacer.stop()
            await http.writer.drain()  # the pacer stops when the client's buffer is full
        if pending is not None:  # the last write (the head goes out with it, if nothing went before)
            await sleep_until(started + pending[0])
            if not out.prepared:
                await out.prepare(http)
            if _ends_with(plan, pending):
                await out.write_eof(pending[1])  # the last write and the body's end, in one
                progress.bytes += len(pending[1])
                progress.end = plan.end
                return out
            await out.write(pending[1])
            progress.bytes += len(pending[1])
        if plan.unframed is not None:
            at, data = plan.unframed
            await sleep_until(started + at)
            if not out.prepared:
                await out.prepare(http)
            http.writer.send_headers()
            if http.transport is not None:
                http.transport.write(data)  # under the chunked framing aiohttp puts around each write
                progress.bytes += len(data)
            drop_connection(http, reset=False)
            progress.end = plan.end
            return out
        await sleep_until(started + plan.end_at)
        if not out.prepared:
            await out.prepare(http)
        if plan.end is End.COMPLETE:
            await out.write_eof()
        else:
            # The recorded response never ended properly, or a fault says so: neither does this one.
            http.writer.send_headers()
            drop_connection(http, reset=plan.end is End.UPSTREAM_RESET)
    except (ConnectionResetError, ConnectionAbortedError):
        progress.end = End.CLIENT_GONE  # the client hung up between two writes
        return out
    progress.end = plan.end
    return out


def _ends_with(plan: Plan, last: Write) -> bool:
    """Whether the body's end goes out with `last`, the plan's last write: the plan ends complete, no later
    than that write, and nothing unframed follows it."""
    return plan.end is End.COMPLETE and plan.end_at <= last[0] and plan.unframed is None


async def _write_whole(
    http: web.BaseRequest,
    plan: Plan,
    fields: _Fields,
    write: Write,
    progress: Progress,
    *,
    started: float,
    length: bool,
    close: bool,
) -> web.StreamResponse:
    """Send a plan whose body is one write with its end in one send with the headers, framed as its stream
    would be: with its length, or chunked."""
    at, body = write
    out = web.Response(status=plan.status, headers=fields, body=body)
    if not length:
        out.enable_chunked_encoding()
    if close:
        out.force_close()
    try:
        if at > 0:  # at 0 (an instant replay's), its time has come: `started` is past
            await sleep_until(started + at)
        await out.prepare(http)
        await out.write_eof()
    except (ConnectionResetError, ConnectionAbortedError):
        progress.end = End.CLIENT_GONE
        return out
    progress.bytes += len(body)
    progress.end = plan.end
    return out


@functools.lru_cache(maxsize=256)
def _head(recorded: _Fields, added: _Fields) -> tuple[_Fields, bool]:
    """The headers a plan's response goes out with: the recorded ones that pass (not hop-by-hop ones, nor
    a length or a date, nor those `added` replaces), then `added`; and whether a length was recorded. The
    same few come again and again: each is worked out once."""
    passed = end_to_end(recorded, also_drop=("content-length", "date", *(name for name, _ in added)))
    return (*passed, *added), has_header(recorded, "content-length")


def coalesced(plan: Plan) -> list[Write] | None:
    """The writes `write_plan` sends for `plan`, worked out ahead for a plan sent again and again unchanged;
    None for one with heartbeats or noise, which are made as they are sent."""
    if plan.beats or plan.noise is not None:
        return None
    return list(_together(plan.writes, plan.apart))


#: At most this many bytes due at one moment are joined into one write: garbage and heartbeats are made as
#: they are sent, not built up front (a `garbage` fault's 16 MiB are 256 writes, sent as the client takes them).
_JOINED = 65536


def _caught_up(pending: Write, following: Write, writes: Iterator[Write], now: float) -> tuple[Write, Write]:
    """`pending`, with the writes after it that are due by `now` (offsets on the same clock) joined to it until
    they hold `_JOINED` bytes or more; and the write after those. A stream that has fallen behind its schedule
    (a loop busy with many) catches up in one write, where one write per turn of the loop would leave it further
    behind. The last write is never joined: it may go out with the body's end."""
    if following[0] > now:
        return pending, following
    at, parts, size = pending[0], [pending[1]], len(pending[1])
    while following[0] <= now and size < _JOINED:
        after = next(writes, None)
        if after is None:
            break
        at = following[0]
        parts.append(following[1])
        size += len(following[1])
        following = after
    return (at, b"".join(parts)), following


def _together(timeline: Iterable[Write], apart: bool) -> Iterator[Write]:
    """The writes of a timeline, those due at the same moment joined into one (the network keeps no
    boundaries between writes with no time between them anyway) up to `_JOINED` bytes, unless `apart`
    (fragment, split)."""
    if apart:
        yield from timeline
        return
    due, pending, size = 0.0, list[bytes](), 0
    for at, data in timeline:
        if pending and at == due and size < _JOINED:
            pending.append(data)
            size += len(data)
            continue
        if pending:
            yield due, pending[0] if len(pending) == 1 else b"".join(pending)
        due, pending, size = at, [data], len(data)
    if pending:
        yield due, pending[0] if len(pending) == 1 else b"".join(pending)


class _Pacer:
    """Sends a prepared response's writes, each at its moment, from timer callbacks.

    Waking the handler's task for every write costs more than the write: a
    future, a task step, and every coroutine of the handler's chain resumed
    on the way down. Here a write is one timer callback that frames its
    bytes as aiohttp frames a chunk and hands them to the transport (the
    first goes through aiohttp's writer, with the head). Timers fire in the
    order they are due, so in a burst of new requests the streams' first
    writes go out in the order the requests came: a handler's task, woken
    for its first write, would wait behind the handlers of every request
    that came in the same turn of the loop, and a request that came later,
    its handler run when its first write was due already, would write first.

    The pacer stops, and `stopped` gives back the write it did not send and
    the one after it (None: it is the last), before the last write (which
    may go out with the body's end), when the transport's buffer is past its
    high-water mark (the caller drains it), and when the client has gone
    (the caller's next write says so). With `join`, a callback that comes
    late sends every write due by then in one (see `_caught_up`).
    """

    __slots__ = (
        "chunked",
        "first",
        "following",
        "full",
        "join",
        "loop",
        "pending",
        "progress",
        "start",
        "stopped",
        "timer",
        "transport",
        "writer",
        "writes",
    )  # one for every stream being paced

    def __init__(
        self,
        http: web.BaseRequest,
        out: web.StreamResponse,
        start: float,
        pending: Write,
        following: Write,
        writes: Iterator[Write],
        progress: Progress,
        *,
        join: bool,
    ) -> None:
        if http.transport is None:
            raise ConnectionResetError("the client has gone")  # as aiohttp's write would say
        self.loop = asyncio.get_running_loop()
        self.transport = http.transport
        self.writer = cast(StreamWriter, http.writer)  # what aiohttp's server writes every response with
        self.chunked = out.headers.get("Transfer-Encoding") == "chunked"
        self.full = self.transport.get_write_buffer_limits()[1]
        self.start = start
        self.pending: Write = pending
        self.following: Write | None = following
        self.writes = writes
        self.progress = progress
        self.join = join
        self.first = True
        self.stopped: asyncio.Future[tuple[Write, Write | None]] = self.loop.create_future()
        self.timer = self.loop.call_at(start + pending[0], self._send)

    def _send(self) -> None:
        if self.stopped.done():
            return  # the handler was cancelled (and `stopped` with it) before it could stop the timer
        try:
            transport, following = self.transport, self.following
            if following is None or transport.is_closing() or transport.get_write_buffer_size() > self.full:
                self.stopped.set_result((self.pending, following))  # the last write, or the caller's to send
                return
            pending = self.pending
            if self.join:
                pending, following = _caught_up(pending, following, self.writes, self.loop.time() - self.start)
            data = pending[1]
            if self.first:  # through aiohttp's writer, which sends the head it held back with it (`_HeadWithBody`)
                self.first = False
                _at_once(self.writer.write(data, drain=False))
            elif data:  # an empty chunk would be the chunked body's end
                transport.write(b"%x\r\n%b\r\n" % (len(data), data) if self.chunked else data)
                self.writer.output_size += len(data)
            self.progress.bytes += len(data)
            self.pending, self.following = following, next(self.writes, None)
            self.timer = self.loop.call_at(self.start + following[0], self._send)
        except Exception as exc:  # raised in the handler, as it was before there was a pacer
            self.stopped.set_exception(exc)

    def stop(self) -> None:
        """Send nothing more (the handler was cancelled, or the pacer has stopped already)."""
        self.timer.cancel()


def _at_once(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run to its end, here, a coroutine that never waits: aiohttp's `StreamWriter.write` without `drain`,
    for a response neither compressed nor signalled, as a pacer's timer callback makes it (a task to run it
    would cost what the pacer saves)."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    coroutine.close()
    raise RuntimeError("aiohttp's StreamWriter.write waited, which it never did for a plain response")


class _HeadWithBody(web.StreamResponse):
    """A streamed response whose head is held back until its body begins (aiohttp sends a `StreamResponse`'s head
    on its own when it is prepared, where a plan's first write is due later): it goes out with the first write,
    or with the body's end (`write_eof`), in one send. Where the head must go alone (at the plan's own time for
    it, before unframed bytes, before a connection dropped with no body), the writer's `send_headers()` sends
    it."""

    _send_headers_immediately = False  # aiohttp's switch; were it gone, the head would go at `prepare` again


async def _stream_live(out: web.StreamResponse, live: Live, *, started: float, progress: Progress) -> None:
    """Send a body still being made as its faults make it: every write when it is due, heartbeats through
    silences, until the source is done or a fault ends the stream."""
    faulted = live.faulted
    assert faulted is not None
    loop = asyncio.get_running_loop()
    beats = Heartbeats(faulted.run.head)

    async def write(writes: Iterable[Write]) -> None:
        for t, data in writes:
            for due, chunk in [*beats.due_before(t), (t, data)]:
                await sleep_until(started + due)
                live.sent.extend(chunk)
                await out.write(chunk)
                progress.bytes += len(chunk)

    while not faulted.done:
        beat, until = beats.next_due(), faulted.until
        deadline = min((t for t in (beat, until) if t is not None), default=None)
        try:
            wait = None if deadline is None else max(started + deadline - loop.time(), 0.0)
            piece = await asyncio.wait_for(live.pieces.get(), wait)
        except TimeoutError:  # a heartbeat is due, or a disconnect's time came, while the source was quiet
            if beat is not None and beat == deadline:
                await write(beats.due_before(beat + 1e-9))
                continue
            writes = faulted.expire()
        else:
            writes = faulted.close(loop.time() - started, live.source_end()) if piece is None else faulted.feed([piece])
        live.noted(faulted.take_notes())  # now, not once the writes are out: a stall may hold them for an hour
        await write(writes)
    live.noted(faulted.take_notes())


async def _end_live(
    http: web.BaseRequest, out: web.StreamResponse, live: Live, *, started: float, progress: Progress
) -> End:
    """End a body `_stream_live` sent: as its faults ended it, else as its source ended: the body's end when
    its faults are through with it (heartbeats until then), or a dropped connection (after any random or
    unframed bytes a fault sends). Returns how it ended."""
    faulted = live.faulted
    assert faulted is not None
    head = faulted.run.head
    end = faulted.end or live.source_end()
    for due, beat in Heartbeats(head).due_before(faulted.end_at):
        await sleep_until(started + due)
        await out.write(beat)
        progress.bytes += len(beat)
    if end is End.COMPLETE:
        await sleep_until(started + faulted.end_at)
        await out.write_eof()
        return end
    for _, noise in head.noise or ():
        await out.write(noise)
        progress.bytes += len(noise)
    if head.unframed is not None and http.transport is not None:
        at, data = head.unframed
        await sleep_until(started + at)
        http.transport.write(data)  # under the chunked framing aiohttp puts around each write
        progress.bytes += len(data)
        end = End.INTERRUPTED
    drop_connection(http, reset=end is End.UPSTREAM_RESET)
    return end


async def sleep_until(when: float) -> None:
    """Wait until `when`, on the running event loop's clock (now, if that has passed)."""
    delay = when - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)
