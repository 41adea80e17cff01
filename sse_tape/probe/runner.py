"""Running a probe: the upstream, each interaction read straight and through the gateway, the faults.

`Probe` is the async API: it starts the upstream (`async with`), which the
gateway is pointed at (`probe.url`), then `await probe.through(gateway)`
reads every interaction straight from the upstream and through the gateway,
one at a time, and then the first streamed one again with each fault put in
it upstream. `probe_in_thread` is the same for synchronous code (the pytest
fixture): the upstream runs in a thread of its own, and each probe's client
in the caller's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType

from .._exceptions import ConfigError, SSETapeError
from .._units import parse_duration
from ..cassette import Cassette, Recording, Request
from ..dialects import detect, dialect_for
from ..faults import parse_fault
from ..matching import framing_of
from ..server import run_in_thread
from .comparison import blocks, compare
from .faults import DEFAULT_FAULTS, judge
from .reading import Ending, Reading, read
from .report import FaultReport, InteractionReport, ProbeReport, request_changes
from .upstream import Upstream

__all__ = ["Probe", "ThreadedProbe", "probe_in_thread"]


class Probe:
    """A gateway's probe: an upstream replaying `cassettes`, and a client that reads them through the gateway.

    `faults` are put in the first streamed interaction upstream, one at a time
    (`DEFAULT_FAULTS`: an error frame, a cut, a stall with heartbeats, a 429);
    an event that comes through the gateway more than `tolerance` seconds
    later than straight is held back; a read waits `timeout` seconds for
    something to come (both in seconds, or as `250ms`, `2s`). `headers` go
    with every request (a gateway's key).
    """

    def __init__(
        self,
        cassettes: Iterable[Cassette],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        faults: Sequence[str] = DEFAULT_FAULTS,
        tolerance: float | str = 0.1,
        timeout: float | str = 30.0,
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        if isinstance(faults, str):
            raise ConfigError(f"faults: a list of faults' texts, not one text: [{faults!r}]")
        for fault in faults:
            parse_fault(fault)  # a bad one is a ConfigError now, before anything listens
        self.upstream = Upstream(cassettes, host=host, port=port)
        self.faults = tuple(faults)
        self.tolerance = _seconds(tolerance, "tolerance")
        self.timeout = _seconds(timeout, "timeout")
        self.headers = tuple(headers)

    @property
    def url(self) -> str:
        """The upstream's base URL: what the gateway forwards to."""
        return self.upstream.url

    async def __aenter__(self) -> Probe:
        await self.upstream.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.upstream.close()

    async def through(self, gateway: str) -> ProbeReport:
        """Probe the gateway at `gateway` (its base URL): every interaction, then every fault; raises
        `SSETapeError` when nothing listens there."""
        interactions, streamed = [], None
        for recording in self.upstream.recordings:
            straight, probed_straight, _ = await self._read(recording, self.url)
            through, probed, others = await self._read(recording, gateway)
            if through.ending is Ending.REFUSED:
                raise SSETapeError(f"cannot reach the gateway: {through.detail}")
            framing = framing_of(recording.interaction)
            if framing is not None and streamed is None:
                streamed = recording
            changes = request_changes(_first(probed_straight), _first(probed))
            changes += [f"also asked the upstream {r.method} {r.path}" for r in others]
            interactions.append(
                InteractionReport(
                    _name(recording),
                    recording.interaction.request,
                    straight,
                    through,
                    compare(blocks(straight, framing), blocks(through, framing)),
                    len(probed),
                    self.tolerance,
                    changes,
                    recorded_status=recording.interaction.response.status,
                )
            )
        faults = [await self._fault(fault, streamed, gateway) for fault in self.faults] if streamed else []
        unfaulted = "no interaction is a stream: no fault was put in" if self.faults and streamed is None else ""
        return ProbeReport(gateway, self.url, interactions, faults, self.tolerance, note=unfaulted)

    async def direct(self) -> ProbeReport:
        """Probe the upstream against itself: what the probe sees with no gateway (its own noise)."""
        report = await self.through(self.url)
        report.through = None
        return report

    async def _fault(self, fault: str, recording: Recording, gateway: str) -> FaultReport:
        straight, _, _ = await self._read(recording, self.url, fault)
        through, probed, _ = await self._read(recording, gateway, fault)
        framing = framing_of(recording.interaction)
        comparison = compare(blocks(straight, framing), blocks(through, framing))
        api = detect(recording.interaction) or dialect_for(recording.interaction.request.path)
        return judge(
            fault, _name(recording), straight, through, comparison, len(probed), self.tolerance, api.is_terminal
        )

    async def _read(
        self, recording: Recording, base: str, fault: str | None = None
    ) -> tuple[Reading, list[Request], list[Request]]:
        """Read `recording`'s answer from `base` with `fault` upstream; the requests the upstream got meanwhile
        that were the one probed, and the others."""
        self.upstream.pin(recording, [fault] if fault else [])
        try:
            reading = await read(base, recording.interaction.request, silence=self.timeout, headers=self.headers)
            # What the gateway still sends upstream (the rest of a stream it stopped passing on, a retry) is
            # part of this read.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.upstream.server.control.idle(), self.timeout)
            probed = self.upstream.probed()
            return reading, probed, [r for r in self.upstream.received if r not in probed]
        finally:
            self.upstream.pin(None)


def _name(recording: Recording) -> str:
    return f"{recording.cassette} #{recording.index}"


def _seconds(value: float | str, name: str) -> float:
    """A duration in seconds, given as a number of them or as text (`250ms`)."""
    try:
        return parse_duration(value) if isinstance(value, str) else float(value)
    except ConfigError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _first(requests: list[Request]) -> Request | None:
    return requests[0] if requests else None


class ThreadedProbe:
    """A `Probe` whose upstream runs in a thread of its own, for synchronous code: `url`, `through`."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    @property
    def url(self) -> str:
        """The upstream's base URL: what the gateway forwards to."""
        return self.probe.url

    def through(self, gateway: str) -> ProbeReport:
        """Probe the gateway at `gateway` (see `Probe.through`); the client runs here, in an event loop of its
        own, while the upstream answers in its thread."""
        return asyncio.run(self.probe.through(gateway))

    def direct(self) -> ProbeReport:
        """Probe the upstream against itself (see `Probe.direct`)."""
        return asyncio.run(self.probe.direct())


@contextlib.contextmanager
def probe_in_thread(probe: Probe) -> Iterator[ThreadedProbe]:
    """`probe` for synchronous code: its upstream listens in a thread of its own until the block ends."""
    with run_in_thread(probe.upstream.server):
        yield ThreadedProbe(probe)
