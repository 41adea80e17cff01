"""The model as a responder: `serve --model` and the `synth` miss policy.

`Synthesizer` answers each generation request (chat, completions,
responses, LM Studio chat, at any path prefix) in the dialect of its path,
streaming frames as the model writes tokens, or with the JSON answer when
the request asks for no stream. Anything else (`GET /v1/models`) goes on to
the next responder.

Requests wait for the model in arrival order; past `max_queue` waiting, a
request gets a 503 in its dialect's error shape with `Retry-After`. A
client that hangs up cancels its generation at once, so the next request
does not wait for tokens nobody reads.

Each answer is a source of the live pipeline (`live`), as a forwarded
one is: the server's faults, and those a request asks for, apply to the
client's copy as the model writes it; a fault that answers in the stream's
place (a status, no answer) keeps the model from running at all, and one
that ends the stream early (an error, a disconnect) stops it, unless a
recorder (`record --model`, the `synth` miss policy) reads it on for the
cassette, which keeps what the model said.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from .. import _json
from .._exceptions import ModelError
from ..cassette import Chunk, End
from ..journal import Synthesized
from ..live import Feed, answer_live
from ..recorder import Capture, Recorder
from ..responder import Attached, Exchange
from .engine import Engine
from .pipeline import Settings, Synthesis

__all__ = ["Synthesizer"]


class Synthesizer(Attached):
    """Answers generation requests with `engine`, `settings` filling in what a request leaves out.

    At most `max_queue` requests wait while the model's `parallel` slots
    are busy; the next one gets a 503 with `Retry-After: retry_after`.
    """

    def __init__(
        self, engine: Engine, settings: Settings, *, max_queue: int = 16, retry_after: int = 1, read_on: float = 300.0
    ) -> None:
        super().__init__()
        self.engine = engine
        self.settings = settings
        self.max_queue = max_queue
        self.retry_after = retry_after
        self.in_flight = 0
        """Requests the model is answering or that wait for it."""
        self.recorder: Recorder | None = None
        self.read_on = read_on
        self._answers: set[asyncio.Future[Any]] = set()

    async def start(self, host: Any) -> None:
        await super().start(host)
        self.recorder = host.recorder
        if self.recorder is not None:
            await self.recorder.start(host)

    async def close(self) -> None:
        for answer in self._answers:
            answer.cancel()
        if self._answers:
            await asyncio.gather(*self._answers, return_exceptions=True)
        if self.recorder is not None:
            await self.recorder.close()

    async def respond(self, exchange: Exchange) -> web.StreamResponse | None:
        request = exchange.request
        dialect = exchange.api
        if dialect is None or request.method != "POST":
            return None
        host = self.host
        if self.recorder is not None and (why := host.refused(exchange.http)) is not None:
            # As forwarding does: a page the user has open (another site's, or one rebound to this machine)
            # gets no place in the user's cassette.
            return await host.error(exchange, 403, f"not recorded: {why}", "forbidden")
        try:
            body = _json.parse(request.body)
        except ValueError:
            return await host.error(exchange, 400, "the request body is not JSON", "invalid_json")
        if self.in_flight >= self.engine.parallel + self.max_queue:
            waiting = f"{self.max_queue} requests already wait for the model; try again"
            return await host.error(exchange, 503, waiting, "overloaded", retry_after=self.retry_after)
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()  # None: the model is done

        def sink(t: float, data: bytes) -> None:
            loop.call_soon_threadsafe(pieces.put_nowait, (t, data))

        noted = asyncio.Event()

        def finished() -> None:
            # Noted once the model is done with it (a cancelled answer's tokens are counted by then), and before
            # the stream's end goes out: a client that has read the whole answer finds it in the journal.
            self._note(exchange, synthesis)
            noted.set()
            pieces.put_nowait(None)

        def done() -> None:
            loop.call_soon_threadsafe(finished)

        arrived = time.perf_counter() - (loop.time() - exchange.started)
        try:
            synthesis = Synthesis(
                self.engine,
                dialect,
                body,
                self.settings,
                sink,
                started=arrived,
                on_done=done,
                path=request.path,
                framing=dialect.stream_framing(request),
            )
        except ModelError as exc:
            return await host.error(exchange, exc.status, str(exc), "model_error")
        answer = _Answer(self, synthesis, pieces)
        self.in_flight += 1  # from now: the answer's source takes it over once it runs
        try:
            return await answer_live(
                host,
                exchange,
                answer,
                Capture(request),
                recorder=self.recorder,
                failed=lambda exchange, why: host.error(exchange, 500, why, "model_error"),
                cors=True,
                read_on=self.read_on,
                drain_timeout=self.read_on,
                streams=self._answers,
                draining=self._answers,
                closing=lambda: host.closing,
            )
        finally:
            if not answer.ran or self.recorder is None:
                # In flight while its client's copy lasts; then the model is free for the next request (its
                # answer stops at once: nothing reads it on).
                answer.release()
            if answer.ran and self.recorder is None:
                # A client that left at the answer's terminal frame (the SDKs stop reading at `[DONE]`) may
                # leave before the model has said it is done: the request is answered once its note is in
                # the journal, so that whoever waits for the server to be idle finds it there.
                await noted.wait()

    def _note(self, exchange: Exchange, synthesis: Synthesis) -> None:
        stats = synthesis.stats
        request = exchange.request
        self.host.journal.add(
            Synthesized(
                request=exchange.number,
                method=request.method,
                path=request.path,
                model=self.engine.name,
                status=exchange.status or synthesis.status,
                waited=round(stats.waited, 6),
                prompt_tokens=stats.prompt_tokens,
                output_tokens=stats.output_tokens,
                first_token=None if stats.first_token is None else round(stats.first_token, 6),
                tokens_per_second=stats.tokens_per_second,
                end=stats.finish or stats.end or "cancelled",
            )
        )


class _Answer:
    """One answer of the model, as a source of the live pipeline."""

    def __init__(
        self, synthesizer: Synthesizer, synthesis: Synthesis, pieces: asyncio.Queue[tuple[float, bytes] | None]
    ) -> None:
        self.synthesizer = synthesizer
        self.synthesis = synthesis
        self.pieces = pieces
        self.ran = False
        self._released = False

    def release(self) -> None:
        """Count the answer out of the model's queue (once)."""
        if not self._released:
            self._released = True
            self.synthesizer.in_flight -= 1

    def unsent(self, recording: bool) -> str:
        """A fault answered in the model's place: it never ran."""
        return ""

    async def make(self, exchange: Exchange, feed: Feed) -> None:
        """Run the model and hand its answer to `feed` as it writes it: a stream frame by frame, a JSON answer
        whole once it is done."""
        self.ran = True
        synthesis, capture = self.synthesis, feed.capture
        try:
            self.synthesizer.engine.submit(synthesis.job)
            if synthesis.stream:
                feed.begin(synthesis.status, synthesis.headers)
                while (piece := await self.pieces.get()) is not None:
                    feed.chunk(Chunk(*piece))
            else:
                parts = []
                while (piece := await self.pieces.get()) is not None:
                    parts.append(piece)
                body = b"".join(data for _, data in parts)
                feed.begin(synthesis.status, (*synthesis.headers, ("content-length", str(len(body)))))
                feed.chunk(Chunk(parts[-1][0] if parts else 0.0, body))
            capture.end = End.COMPLETE
        finally:
            if self.synthesizer.recorder is not None:  # read on for the cassette: in flight until the model is done
                self.release()
            capture.duration = round(time.perf_counter() - synthesis.started, 6)
            if not synthesis.done.is_set():
                synthesis.cancel()  # nobody reads what the model writes now: it moves on at once
