"""The live pipeline: an answer made while it is sent, an upstream's (forwarded) or a model's, one way.

    source of timed chunks ─▶ capture (the recorder) ─▶ fault stages ─▶ the writer ─▶ the journal

A `Source` makes the answer into a `Feed`: its head (status and headers), then each chunk as it comes,
then how it ended. The feed hands each chunk to the recorder first (on disk before the client has it)
and then to the client's copy, which the faults chosen for the request shape as it passes
(`faults.FaultedStream`) and `wire.send` writes. The source runs in a task of its own, apart from the
client's copy: what the faults hold back is recorded when it came, and the source can be read on after
the client's copy is over.

What the faults do to what is recorded, the one policy for every source:

- The recording is what the source sent, as it came; the faults act on the client's copy alone, and the
  recording notes each one that acted (`Interaction.injected`), so that a replay can give either.
- A fault that answers in the source's place (a status, no answer, no body) answers at once: the source
  never runs (the request is not forwarded; the model does not run) and nothing is recorded.
- An answer that is not an event stream takes only the faults before it (a delay of its headers).
- When a fault ends the client's copy early (an error, a disconnect, garbage), or the server cuts its
  client off for taking nothing of it (`--send-timeout`, see `server.connections`), the source is read on
  to its end for the recording, `read_on` seconds at most; with no recorder, it stops at once.
- A client of an answer no fault touched that leaves after the answer's terminal frame (an SDK closes
  its socket at `[DONE]`) has the source read on for `drain_timeout` seconds at most, so that the
  recording says it ended complete; one that leaves in the middle stops the source, and the recording
  ends `client_gone`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web

from .cassette import Chunk, End, Headers, Injection, Interaction, Response
from .faults import Fault, FaultedStream, Stage
from .framing import Framing
from .matching import framing_of
from .plan import Plan
from .recorder import Capture, Recorder
from .responder import Exchange, Host, note_faults
from .wire import Live, end_to_end

__all__ = ["Feed", "Source", "answer_live"]


class Feed:
    """What a source hands on as it makes an answer: to the recorder as it comes, and to the client's copy.

    A source calls `begin` once with the head, `chunk` for each piece, and returns (the pipeline then
    ends the feed, with `capture.end` as the source set it); or `fail` when there will be no answer.
    """

    def __init__(self, capture: Capture, recorder: Recorder | None, started: float) -> None:
        self.capture = capture
        self.recorder = recorder
        self.started = started
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.head: asyncio.Future[str | None] = loop.create_future()
        """None once the head came; why there will be none, if so."""
        self.pieces: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

    def begin(self, status: int, headers: Headers) -> None:
        """The answer's head came."""
        self.capture.status, self.capture.headers = status, headers
        if self.recorder is not None:
            self.recorder.begin(self.capture)
        if not self.head.done():
            self.head.set_result(None)

    def chunk(self, chunk: Chunk) -> None:
        """A piece of the answer came (its time counted from the source's start)."""
        self.capture.chunks.append(chunk)
        if self.recorder is not None:
            self.recorder.received(self.capture, chunk)  # on disk before the client has it
        self.pieces.put_nowait((self.loop.time() - self.started, chunk.data))

    def fail(self, why: str) -> None:
        """There will be no answer, for this reason."""
        if not self.head.done():
            self.head.set_result(why)

    def close(self) -> None:
        """The source is done (or stopped)."""
        self.fail("the source was stopped before its answer came")
        self.pieces.put_nowait(None)


class Source(Protocol):
    """Where a live answer comes from: an upstream (`record.Forwarder`), a model (`synth.Synthesizer`)."""

    def unsent(self, recording: bool) -> str:
        """What a fault that answers in the source's place means for it (`not forwarded`), for the journal."""
        ...

    async def make(self, exchange: Exchange, feed: Feed) -> None:
        """Make the answer into `feed`, setting `feed.capture.end` as it ends; a cancellation stops it."""
        ...


@dataclass(slots=True)
class _Reading:
    """A source being read, and what stopped it."""

    task: asyncio.Task[None] | None = None
    over: int = 2  # the source and the client's copy: the recording is kept when both are over
    stopped: End = End.INTERRUPTED
    """How the recording ends if the source is stopped: its client left in the middle, or it was read on
    long enough (or the server stops)."""


async def answer_live(
    host: Host,
    exchange: Exchange,
    source: Source,
    capture: Capture,
    *,
    recorder: Recorder | None,
    failed: Callable[[Exchange, str], Awaitable[web.StreamResponse]],
    cors: bool,
    read_on: float,
    drain_timeout: float,
    streams: set[asyncio.Future[Any]],
    draining: set[asyncio.Future[Any]],
    closing: Callable[[], bool],
) -> web.StreamResponse:
    """Answer `exchange` with what `source` makes, recorded into `capture` by `recorder` if there is one,
    under the faults chosen for it, as the module's policy says.

    `failed` answers when the source makes no answer (a 502 for an upstream); `cors` adds the headers a
    web page's fetch needs; the source's task is kept in `streams` while it runs and in `draining` while
    it is read on after its client's copy; `closing` says whether the server is stopping.
    """
    chosen, chance = host.injector.choose(exchange.request, exchange.dialect, exchange.faults)
    faults, rng = (chosen, chance) if chosen and chance is not None else ([], random.Random())
    head = Plan(200, [], [])
    stages = FaultedStream(faults, head=head, dialect=exchange.dialect, rng=rng, request=exchange.request)
    if head.replaced:  # a status, no answer or no body, in the source's place
        unsent = source.unsent(recorder is not None)
        note_faults(host, exchange, [(f, f"{what}; {unsent}" if unsent else what) for f, what in stages.take_notes()])
        return await host.send(exchange, head)

    def noted(notes: list[tuple[Fault, str]], acted: bool = True) -> None:
        note_faults(host, exchange, notes, acted=acted)
        if recorder is not None and capture.status is not None:
            for fault, what in notes:
                recorder.injected(capture, Injection(fault.spec, what))

    feed = Feed(capture, recorder, exchange.started)
    reading = _Reading()

    def over() -> None:
        reading.over -= 1
        if not reading.over and recorder is not None and capture.status is not None:
            recorder.keep(capture, exchange.number)

    copied = False

    def copy_over() -> None:  # the client's copy is out, and its faults are through: once
        nonlocal copied
        if not copied:
            copied = True
            over()

    async def make() -> None:
        try:
            await source.make(exchange, feed)
        except asyncio.CancelledError:  # stopped: the server stops, the client left, or read on long enough
            capture.end = End.INTERRUPTED if closing() else reading.stopped
            raise
        finally:
            feed.close()
            over()

    transport = exchange.http.transport  # asked after the answer whether the server cut its client off
    task = reading.task = asyncio.ensure_future(make())
    streams.add(task)
    task.add_done_callback(streams.discard)
    task.add_done_callback(draining.discard)
    acted = False
    live: Live | None = None
    framing: Framing | None = None
    try:
        why = await asyncio.shield(feed.head)
        if why is not None:
            return await failed(exchange, why)
        assert capture.status is not None
        exchange.status = capture.status
        framing = framing_of(Interaction(capture.request, Response(capture.status, capture.headers)))
        streamed = framing is not None
        if framing is not None:
            head.framing = framing  # what the faults between events find the blocks by
        stream_faults = [f for f in faults if f.stage is not Stage.BEFORE]
        # The notes of the faults before the stream (a delay of its headers) go in the recording too.
        noted(stages.take_notes())
        if faults and not streamed:
            noted([(f, "an answer that is not a stream: left alone") for f in stream_faults], acted=False)
        acted = bool(faults)
        answer = Plan(capture.status, list(capture.headers), [], headers_at=head.headers_at, framing=head.framing)
        if streamed and stream_faults:
            # The faults change the body's length: a stream goes chunked.
            answer.headers = end_to_end(answer.headers, also_drop=("content-length",))
        live = Live(
            feed.pieces,
            stages if streamed and stream_faults else None,
            lambda: capture.end,
            noted,
            finished=copy_over,
        )
        return await host.send(exchange, answer, live=live, cors=cors)
    finally:
        copy_over()
        if not task.done():
            # The client's copy ended short of the source's, not by its client's choice: faults acted on it, or
            # the server cut off a client that took nothing of it.
            short = acted or host.cut_off(transport)
            answered = framing is not None and live is not None and _answered(live.sent, exchange, framing)
            if recorder is not None and (short or answered):
                # Read on for the recording: the copy was cut short, or its client had the answer.
                draining.add(task)
                deadline = asyncio.get_running_loop().call_later(read_on if short else drain_timeout, task.cancel)
                task.add_done_callback(lambda _: deadline.cancel())
                if not short:  # the answer the client had is over when the source's is: noted then, as it ended
                    exchange.ends_later = True

                    def ended(_: object) -> None:
                        exchange.progress.end = capture.end
                        host.ended(exchange)

                    task.add_done_callback(ended)
            else:  # its client left in the middle (or the server stops): the source stops now
                reading.stopped = End.CLIENT_GONE
                task.cancel()


def _answered(sent: bytes | bytearray, exchange: Exchange, framing: Framing) -> bool:
    """Whether the client had the answer's terminal frame: the last whole event it got ends the answer."""
    events = [block.event for block in framing.blocks(bytes(sent)) if block.event is not None]
    return bool(events) and exchange.dialect.is_terminal(events[-1])
