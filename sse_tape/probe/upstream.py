"""The upstream a probe puts behind the gateway: an sse-tape server that answers every request with the
interaction under probe.

A gateway rewrites what it forwards (a model's name, fields of its own, the
path's prefix), so the probe's upstream does not match: it replays the one
interaction being probed to whatever comes, at its recorded pace, with the
faults the probe sets, and keeps every request that came meanwhile, as the
upstream saw it: how many of them were the one probed (a gateway that
retried sent two; one that answered from a cache, none; a health check is
another request), and what the gateway made of the client's. The
protocols' state (MCP's sessions) is left out: a recorded session's
requests are replayed as they were, whatever session they name.
"""

from __future__ import annotations

from collections.abc import Iterable

from .._exceptions import NoMatchError
from ..cassette import Cassette, Recording, Request
from ..faults import Fault
from ..options import ServeOptions
from ..responder import Exchange
from ..server import MockServer, Replay

__all__ = ["Pinned", "Upstream"]


class Pinned(Replay):
    """Replays the recording under probe to every request, whatever it asks; keeps the requests that came."""

    def __init__(self) -> None:
        super().__init__()
        self.recording: Recording | None = None
        """The recording every request gets; None between probes (a request then gets the miss's 404)."""
        self.received: list[Request] = []
        """The requests that came since the last `pin`, in order."""

    def pin(self, recording: Recording | None) -> None:
        """Answer every request with `recording` from now on, and keep the requests anew."""
        self.recording = recording
        self.received = []

    def find(self, exchange: Exchange) -> Recording:
        if self.recording is None:
            raise NoMatchError("no interaction is under probe now")
        self.received.append(exchange.request)
        return self.recording

    def probed(self) -> list[Request]:
        """The requests that came since the last `pin` that are the one probed, as a gateway forwards it: of its
        method, at its path or one that ends with it or it ends with (a gateway's prefix added or taken)."""
        if self.recording is None:
            return []
        asked = self.recording.interaction.request
        return [
            r
            for r in self.received
            if r.method == asked.method and (r.path.endswith(asked.path) or asked.path.endswith(r.path))
        ]


class Upstream:
    """An sse-tape server replaying the interactions under probe one at a time, at their recorded pace."""

    def __init__(self, cassettes: Iterable[Cassette], *, host: str = "127.0.0.1", port: int = 0) -> None:
        self.replay = Pinned()
        self.server = MockServer(
            list(cassettes),
            options=ServeOptions.build(pace="recorded"),
            host=host,
            port=port,
            replay=self.replay,
            protocols=False,
        )

    @property
    def recordings(self) -> list[Recording]:
        """Every recording it can replay, in the cassettes' order."""
        return list(self.server.matcher.recordings)

    @property
    def url(self) -> str:
        """Its base URL: where the gateway sends what it forwards."""
        return self.server.url

    async def start(self) -> None:
        """Listen."""
        await self.server.start()

    async def close(self) -> None:
        """Stop listening, ending what it sends."""
        await self.server.close()

    def pin(self, recording: Recording | None, faults: Iterable[Fault | str] = ()) -> None:
        """Answer every request with `recording` from now on, with `faults`; keep the requests anew."""
        self.server.control.set_faults(faults)
        self.replay.pin(recording)

    @property
    def received(self) -> list[Request]:
        """The requests that came since the last `pin`."""
        return list(self.replay.received)

    def probed(self) -> list[Request]:
        """Those of them that are the one probed (see `Pinned.probed`)."""
        return self.replay.probed()
