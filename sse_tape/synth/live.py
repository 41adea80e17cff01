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

The server's faults, and those a request asks for, apply to the stream as
the model writes it (see `faults.stream`); a fault that answers in the
stream's place (a status, no answer) keeps the model from running at all,
and one that ends the stream early (an error, a disconnect) stops it. A
request that asks for no stream takes only the faults that act before the
answer. With a recorder (`record --on-miss synth`), each answer is recorded
as it streams, like a forwarded one, and no fault applies: a cassette keeps
what the model said, and faults are for its replays.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

from aiohttp import web

from .. import _json
from .._exceptions import ModelError
from ..cassette import Chunk, End
from ..faults import Fault, FaultedStream, Stage
from ..incidents import FaultInjected
from ..journal import Entry
from ..plan import Plan, event_ends
from ..record import Capture, Recorder
from ..server.responder import Attached, Exchange
from ..wire import end_live, sleep_until, stream_live
from .engine import Engine
from .pipeline import Settings, Synthesis

__all__ = ["Synthesized", "Synthesizer"]


# The journal entry only synthesis makes lives here, not in `journal`: a server that only replays never defines it.
@dataclass(frozen=True, slots=True, kw_only=True)
class Synthesized(Entry):
    """A local model answered the request: its wait in the model's queue, its tokens and their speed."""

    kind: ClassVar[str] = "synthesized"
    method: str
    path: str
    model: str
    status: int
    waited: float
    """Seconds from the request's arrival until the model took it up."""
    prompt_tokens: int
    output_tokens: int
    first_token: float | None
    """Seconds from the request's arrival to the first output token."""
    tokens_per_second: float | None
    end: str
    """`stop`, `length`, `tool_calls`, `cancelled` (the client left) or `error`."""

    def line(self) -> str:
        speed = f", {self.tokens_per_second:g} tokens/s" if self.tokens_per_second else ""
        return (
            f"{self.method} {self.path} -> {self.status} from {self.model}: waited {self.waited:.2f} s, "
            f"{self.prompt_tokens} + {self.output_tokens} tokens{speed}, {self.end}"
        )


class _Ends(Sequence[int]):
    """Where each event of a body still being sent ends, found only when the server asks (once, at its end)."""

    def __init__(self, body: bytearray) -> None:
        self.body = body

    @cached_property
    def _ends(self) -> list[int]:
        return event_ends(bytes(self.body))

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, index: Any) -> Any:
        return self._ends[index]


class Synthesizer(Attached):
    """Answers generation requests with `engine`, `settings` filling in what a request leaves out.

    At most `max_queue` requests wait while the model's `parallel` slots
    are busy; the next one gets a 503 with `Retry-After: retry_after`.
    """

    def __init__(self, engine: Engine, settings: Settings, *, max_queue: int = 16, retry_after: int = 1) -> None:
        super().__init__()
        self.engine = engine
        self.settings = settings
        self.max_queue = max_queue
        self.retry_after = retry_after
        self.in_flight = 0
        """Requests the model is answering or that wait for it."""
        self.recorder: Recorder | None = None

    async def start(self, host: Any) -> None:
        await super().start(host)
        self.recorder = host.recorder
        if self.recorder is not None:
            await self.recorder.start(host)

    async def close(self) -> None:
        if self.recorder is not None:
            await self.recorder.close()

    async def respond(self, exchange: Exchange) -> web.StreamResponse | None:
        request = exchange.request
        dialect = exchange.api
        if dialect is None or request.method != "POST":
            return None
        host = self.host
        try:
            body = _json.parse(request.body)
        except ValueError:
            return host.error(exchange, 400, "the request body is not JSON", "invalid_json")
        if self.in_flight >= self.engine.parallel + self.max_queue:
            response = host.error(
                exchange, 503, f"{self.max_queue} requests already wait for the model; try again", "overloaded"
            )
            response.headers["Retry-After"] = str(self.retry_after)
            return response
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()  # None: the model is done

        def sink(t: float, data: bytes) -> None:
            loop.call_soon_threadsafe(pieces.put_nowait, (t, data))

        def finished() -> None:
            # Noted once the model is done with it (a cancelled answer's tokens are counted by then), and before
            # the stream's end goes out: a client that has read the whole answer finds it in the journal.
            self._note(exchange, synthesis)
            pieces.put_nowait(None)

        def done() -> None:
            loop.call_soon_threadsafe(finished)

        arrived = time.perf_counter() - (loop.time() - exchange.started)
        try:
            synthesis = Synthesis(
                self.engine, dialect, body, self.settings, sink, started=arrived, on_done=done, path=request.path
            )
        except ModelError as exc:
            return host.error(exchange, exc.status, str(exc), "model_error")
        faulted, plan = self._faults(exchange, synthesis)
        if plan.replaced:  # a status, no answer, or no body: the model has nothing to say
            return await host.send(exchange, plan)
        self.in_flight += 1
        capture = Capture(request) if self.recorder is not None else None
        try:
            self.engine.submit(synthesis.job)
            if synthesis.stream:
                return await self._stream(exchange, synthesis, pieces, capture, faulted, plan.headers_at)
            answer = await self._whole(exchange, synthesis, pieces, capture)
            if plan.headers_at is not None:
                await sleep_until(exchange.started + plan.headers_at)
            return answer
        except BaseException:
            synthesis.cancel()  # the client left, or the server stops: the model moves on at once
            if capture is not None:
                capture.end = End.INTERRUPTED if host.closing else End.CLIENT_GONE
            raise
        finally:
            self.in_flight -= 1
            if capture is not None and capture.status is not None and self.recorder is not None:
                capture.duration = round(time.perf_counter() - synthesis.started, 6)
                self.recorder.keep(capture, exchange.number)

    def _faults(self, exchange: Exchange, synthesis: Synthesis) -> tuple[FaultedStream | None, Plan]:
        """The faults for this answer, and the head of what goes before it (all of it, if one replaces it)."""
        head = Plan(synthesis.status, list(synthesis.headers), [])
        if self.recorder is not None:
            return None, head
        faults, rng = self.host.injector.choose(exchange.request, exchange.faults)
        if not faults or rng is None:
            return None, head
        if not synthesis.stream:
            kept = [f for f in faults if f.stage is Stage.BEFORE]
            self._noted(exchange, [(f, "an answer that is not a stream: left alone") for f in faults if f not in kept])
            faults = kept
        faulted = FaultedStream(
            faults, head=head, dialect=synthesis.dialect, rng=rng, request=exchange.request, start=synthesis.start
        )
        self._noted(exchange, faulted.take_notes())
        return faulted, head

    async def _stream(
        self,
        exchange: Exchange,
        synthesis: Synthesis,
        pieces: asyncio.Queue[tuple[float, bytes] | None],
        capture: Capture | None,
        faulted: FaultedStream | None,
        headers_at: float | None,
    ) -> web.StreamResponse:
        out = web.StreamResponse(status=synthesis.status)
        for name, value in synthesis.headers:
            out.headers.add(name, value)
        out.headers.update(self.host.cors(exchange.http))
        exchange.status = synthesis.status
        self._begin(capture, synthesis)
        if headers_at is not None:
            await sleep_until(exchange.started + headers_at)
        await out.prepare(exchange.http)
        sent = bytearray()
        exchange.event_ends = _Ends(sent)
        if faulted is not None:
            return await self._faulted(exchange, synthesis, pieces, faulted, out, sent)
        while True:
            piece = await pieces.get()
            if piece is None:
                break
            t, data = piece
            sent += data
            self._kept(capture, t, data)  # on disk before the client has it
            await out.write(data)
            exchange.progress.bytes += len(data)
        await out.write_eof()
        if capture is not None:
            capture.end = End.COMPLETE
        return out

    async def _faulted(
        self,
        exchange: Exchange,
        synthesis: Synthesis,
        pieces: asyncio.Queue[tuple[float, bytes] | None],
        faulted: FaultedStream,
        out: web.StreamResponse,
        sent: bytearray,
    ) -> web.StreamResponse:
        """Send the stream as its faults make it, each write when it is due, and end it as they say."""

        def noted(notes: list[tuple[Fault, str]]) -> None:
            self._noted(exchange, notes)

        started, progress = exchange.started, exchange.progress
        done = await stream_live(out, faulted, pieces, started=started, progress=progress, sent=sent, noted=noted)
        if not done:
            synthesis.cancel()  # a fault has ended the stream: nobody reads what the model writes now
        exchange.end = await end_live(exchange.http, out, faulted, End.COMPLETE, started=started, progress=progress)
        return out

    async def _whole(
        self,
        exchange: Exchange,
        synthesis: Synthesis,
        pieces: asyncio.Queue[tuple[float, bytes] | None],
        capture: Capture | None,
    ) -> web.Response:
        parts: list[tuple[float, bytes]] = []
        while (piece := await pieces.get()) is not None:
            parts.append(piece)
        body = b"".join(data for _, data in parts)
        exchange.status = synthesis.status
        exchange.progress.bytes = len(body)
        self._begin(capture, synthesis)
        self._kept(capture, parts[-1][0] if parts else 0.0, body)
        if capture is not None:
            capture.end = End.COMPLETE
        headers = {**dict(synthesis.headers), **self.host.cors(exchange.http)}
        return web.Response(status=synthesis.status, body=body, headers=headers)

    def _begin(self, capture: Capture | None, synthesis: Synthesis) -> None:
        if capture is not None and self.recorder is not None:
            capture.status, capture.headers = synthesis.status, synthesis.headers
            self.recorder.begin(capture)

    def _kept(self, capture: Capture | None, t: float, data: bytes) -> None:
        """Record a piece of the answer, when recording."""
        if capture is not None and self.recorder is not None:
            chunk = Chunk(t, data)
            capture.chunks.append(chunk)
            self.recorder.received(capture, chunk)

    def _noted(self, exchange: Exchange, notes: Sequence[tuple[Fault, str]]) -> None:
        """Journal what each fault did to this answer."""
        request = exchange.request
        for fault, what in notes:
            self.host.state.note_injected(fault.spec)
            self.host.journal.add(
                FaultInjected(
                    request=exchange.number, method=request.method, path=request.path, fault=fault.spec, what=what
                )
            )

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
