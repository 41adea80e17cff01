"""Replay: the responder that answers from the recordings the server's matcher holds, at the server's pace,
with its faults."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, replace

from .._exceptions import ConfigError, NoMatchError
from ..cassette import (
    Interaction,
    Recording,
    Request,
    Response,
)
from ..dialects import Protocol, detect, dialect_for, generation
from ..dialects.protocol import Kept
from ..faults import Fault, parse_fault
from ..framing import SSE, Framing
from ..journal import Matched
from ..matching import last_event_id
from ..pacing import Pacing
from ..plan import Plan, Write
from ..responder import IN_PLACE, Attached, Exchange, Host, Reply, inject
from ..shape import AS_RECORDED, Recorded, Shape, collapse, reshape
from ..wire import coalesced

__all__ = ["Replay"]


@dataclass(frozen=True, slots=True)
class _Known:
    """What replay reads of a recording on every request, found at its first."""

    name: str
    """How the journal names it."""
    recorded: Recorded
    """The shapes its answer can take."""
    dialect: Protocol
    """What frames its faults when the request's path names no API: the recording's own, else OpenAI's."""
    last_id: str | None
    """The `Last-Event-ID` it was recorded with."""

    @classmethod
    def of(cls, recording: Recording) -> _Known:
        interaction = recording.interaction
        dialect = detect(interaction) or dialect_for(interaction.request.path)
        return cls(str(recording), Recorded.of(interaction), dialect, last_event_id(interaction.request))


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A recording's response as it is sent: in the shape the request asked for, and where its events end."""

    response: Response
    event_ends: list[int]
    converted: str | None
    framing: Framing
    """How the stream that goes out frames its messages (the one the JSON answer stands for, for such)."""
    stands_for: Response | None = None
    """For a stream answered as one JSON document: that stream, whose pace and faults the answer follows."""
    plan: Plan | None = None
    """Its plan at the server's pace when every replay gets the same one (no jitter): sent as it is where
    nothing changes it, else a copy."""
    writes: list[Write] | None = None
    """What goes on the wire for `plan` unchanged (see `coalesced`)."""


#: A recording of at most this many bytes is prepared for its first play on the event loop, not in a thread.
_PREPARED_IN_PLACE = 8192


def _prepared(
    interaction: Interaction, shape: Shape, recorded: Framing | None, pace: Pacing, *, faulted: bool
) -> _Prepared:
    response, converted = reshape(interaction, shape)
    stands_for = interaction.response if shape.stream is False and converted is not None else None
    framing = shape.framing or (SSE if shape.stream else recorded) or SSE
    plan = writes = None
    if pace.repeats:
        plan = pace.plan(stands_for if stands_for is not None else response)
        plan.framing = framing
        if faulted:  # its events decoded now, off the event loop, for the faults that work between them
            plan.blocks  # noqa: B018
        writes = coalesced(plan)
    ends = framing.event_ends(response.body) if stands_for is None else []
    return _Prepared(response, ends, converted, framing, stands_for, plan, writes)


class Replay(Attached):
    """Answers from the recordings the server's matcher holds, at the server's pace, with its faults.

    A request that asks for no stream, answered by a streamed recording, gets
    the API's JSON answer built from it, and the other way round (see
    `shape`). The JSON answer goes out when the stream would have ended at
    the server's pace, and the stream's faults make it what that faulted
    stream adds up to (an error in it, a 500; a disconnect, no answer).
    A protocol's responder in front of it may ask for what it plays
    (`Incoming.keep`: the Responses API's background mode keeps the stream), and
    answer in its place.

    With the `recorded_faults` option, a recording that notes the faults its
    client got (`Interaction.injected`) gets them again, besides the
    server's and the request's own (one of the same text acts once), unless
    a reconnection resumes it: the replay is what that client got.

    A reconnection (`Last-Event-ID`) answered by a recording of the same
    reconnection gets it as recorded; answered by one made without the
    header, it gets that stream from after the event it names.
    """

    def __init__(self) -> None:
        super().__init__()
        # Per recording, and per recording and shape asked for: worked out at its first replay (a shape off the
        # event loop).
        self._known: dict[Recording, _Known] = {}
        self._prepared: dict[tuple[Recording, Shape], _Prepared] = {}
        self._preparing: dict[tuple[Recording, Shape], asyncio.Task[_Prepared]] = {}
        """First plays being prepared: requests that come meanwhile wait for the same preparation."""
        self._recorded_faults: dict[Recording, list[Fault]] = {}

    async def start(self, host: Host) -> None:
        await super().start(host)
        if host.options.recorded_faults:  # a bad fault in a cassette stops the server now, with one line
            for recording in host.matcher.recordings:
                self._faults_of(recording)

    async def close(self) -> None:
        preparing = list(self._preparing.values())
        for task in preparing:
            task.cancel()  # its thread finishes on its own; no request waits for it any more
        await asyncio.gather(*preparing, return_exceptions=True)

    async def respond(self, exchange: Exchange) -> Reply:
        server = self.host
        request = exchange.request
        try:
            recording = self.find(exchange)
        except NoMatchError as exc:
            if str(exc):
                exchange.miss = f"{exchange.miss}; {exc}" if exchange.miss else str(exc)
            return None
        known = self._known.get(recording)
        if known is None:
            known = self._known[recording] = _Known.of(recording)
        prepared = await self._prepare(recording, known, request)
        last_id = last_event_id(request)
        if prepared.plan is not None:
            # Sent as it is, unless a fault or a resumption may change it.
            faultless = not (server.injector.faults or exchange.faults or server.options.recorded_faults)
            stream = prepared.plan if faultless and last_id is None else prepared.plan.copy()
        else:  # a schedule of this replay's own: jitter, seeded by the recording and how often it played
            key = f"{known.name}:{server.matcher.plays(recording) - 1}"
            paced = prepared.stands_for if prepared.stands_for is not None else prepared.response
            stream = server.options.pace.plan(paced, key=key)
            stream.framing = prepared.framing
        kept = exchange.keep(stream) if exchange.keep is not None else None
        resumed, cut = None, False
        if prepared.stands_for is None and last_id is not None:
            if known.last_id == last_id:  # a recording of this very reconnection
                resumed = f"as recorded after event id {last_id!r}"
            else:  # the stream goes on after the event it names (an id it never set: all of it)
                cut = stream.resume_after(last_id)
                resumed = f"after event id {last_id!r}" if cut else f"from the start: no event id {last_id!r}"
        # A recording's own faults act again (not on a resumption: they were the first connection's).
        again = self._faults_of(recording) if server.options.recorded_faults and not cut else []
        # Noted after the faults, with the status they leave: a `status` fault's 429 is said, not the recording's 200.
        converted = prepared.converted if kept is None or kept.answer is None else None
        dialect = exchange.api or known.dialect
        if kept is not None and kept.answer is not None and not kept.stream:  # in replay's place: one JSON document
            inject(server, exchange, kept.answer, dialect=dialect, recording=known.name, stream=False)
            self._matched(exchange, known, kept.answer.status, converted, resumed, kept)
            return server.send(exchange, kept.answer)
        replacement = kept.answer if kept is not None else None
        if replacement is not None:  # in replay's place: a stream, resumed as replay's is
            stream = replacement
            if cut and last_id is not None:
                stream.resume_after(last_id)
        injected = inject(server, exchange, stream, dialect=dialect, recording=known.name, also=again)
        self._matched(
            exchange, known, stream.status if injected else prepared.response.status, converted, resumed, kept
        )
        if prepared.stands_for is not None:
            if injected:
                api = generation(dialect, "an answer converted to JSON")  # only an LLM API's is converted
                plan = await asyncio.to_thread(collapse, stream, recording.interaction, api)
            else:
                plan = Plan.of(prepared.response, [stream.end_at] * len(prepared.response.chunks), stream.end_at)
            exchange.event_ends = []
        else:
            plan = stream
            exchange.event_ends = (
                [b.end for b in plan.events] if injected or resumed or replacement is not None else prepared.event_ends
            )
        sending = server.send(exchange, plan, prepared.writes if plan is prepared.plan else None)
        ended = kept.ended if kept is not None else None
        if ended is None:
            return sending  # the server awaits it: nothing here waits as long as the stream (see `Reply`)
        try:
            return await sending
        finally:
            sent = exchange.events_sent()
            events = plan.events if sent else []
            last = events[sent - 1].event if 0 < sent <= len(events) else None
            ended(sent, last is not None and dialect.is_terminal(last))

    def _matched(
        self,
        exchange: Exchange,
        known: _Known,
        status: int,
        converted: str | None,
        resumed: str | None,
        kept: Kept | None,
    ) -> None:
        """Note in the journal (and tell the protocol that kept it) that the request is answered by a recording."""
        if kept is not None and kept.answered is not None:
            kept.answered(status)
        request = exchange.request
        self.host.journal.add(
            Matched(
                request=exchange.number,
                method=request.method,
                path=request.path,
                recording=known.name,
                status=status,
                converted=converted,
                resumed=resumed,
                kept=kept.note if kept is not None else None,
            )
        )

    def find(self, exchange: Exchange) -> Recording:
        """The recording that answers the request: the matcher's choice, or `NoMatchError` saying why none does.
        Another replay may choose otherwise (the probe's upstream answers with the interaction under probe)."""
        request = exchange.request
        # A large body's miss is explained later, off the event loop (see `MockServer`).
        return self.host.matcher.find(request, explain=len(request.body) <= IN_PLACE, protocol=exchange.protocol)

    def _faults_of(self, recording: Recording) -> list[Fault]:
        """The faults a recording notes its client got, to act on every replay of it (not by chance, nor a
        number of times); raises `ConfigError` naming the recording for one that is not a fault."""
        faults = self._recorded_faults.get(recording)
        if faults is None:
            faults = []
            for note in recording.interaction.injected:
                try:
                    fault = parse_fault(note.fault)
                except ConfigError as exc:
                    raise ConfigError(f"{recording}: injected {exc}") from None
                if fault.spec not in (f.spec for f in faults):
                    faults.append(replace(fault, p=1.0, times=None, path=None, rpc=None))
            self._recorded_faults[recording] = faults
        return faults

    async def _prepare(self, recording: Recording, known: _Known, request: Request) -> _Prepared:
        """The recording's response in the shape the request asks for (see `shape`)."""
        shape = known.recorded.asked(request) if self.host.matcher.reshape else AS_RECORDED
        key = (recording, shape)
        prepared = self._prepared.get(key)
        if prepared is not None:
            return prepared
        task = self._preparing.get(key)
        if task is None:
            # A long recording takes a while to convert: the streams in flight go on meanwhile. Its events are
            # decoded for the server's own faults; a request's own faults decode its copy's (decoding costs
            # time for every event, which the first play of a long recording would otherwise wait for, fault
            # or none). A short one is prepared here: quicker than a thread's hand-off, the first of which
            # starts the loop's default executor (figures in docs/benchmarks-history.md).
            options = self.host.options
            faulted = bool(self.host.injector.faults) or options.recorded_faults
            prepare = functools.partial(
                _prepared, recording.interaction, shape, known.recorded.framing, options.pace, faulted=faulted
            )
            if sum(len(chunk.data) for chunk in recording.interaction.response.chunks) <= _PREPARED_IN_PLACE:
                prepared = self._prepared[key] = prepare()
                return prepared
            task = self._preparing[key] = asyncio.create_task(asyncio.to_thread(prepare))
            task.add_done_callback(functools.partial(self._ready, key))
        # Shielded: a client that goes away leaves the preparation to those still waiting, and to later plays.
        return await asyncio.shield(task)

    def _ready(self, key: tuple[Recording, Shape], task: asyncio.Task[_Prepared]) -> None:
        del self._preparing[key]
        if not task.cancelled() and task.exception() is None:  # one that failed is tried again by the next play
            self._prepared[key] = task.result()
