"""How faithfully a server keeps a recording's pace: many copies of one stream read at once, each gap between
two events against the recorded gap.

It needs nothing of the server but its answers, so the same measure holds
for sse-tape's replay, a hand-written server, and any peer (`bench/`
publishes it side by side).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

from ..cassette import Interaction
from ..matching import framing_of
from .comparison import blocks
from .reading import Ending, read

__all__ = ["Fidelity", "fidelity"]


@dataclass(frozen=True, slots=True)
class Fidelity:
    """What the streams read showed of the pace, in seconds."""

    late: list[list[float]]
    """For each stream read whole (with every event the recording has), each event's arrival after the request
    was sent, less the time it was recorded at."""
    streams: int

    @property
    def completed(self) -> int:
        """Streams read whole."""
        return len(self.late)

    @property
    def gap_errors(self) -> list[float]:
        """Each gap between consecutive events as read, less the gap recorded, stream after stream."""
        return [b - a for stream in self.late for a, b in itertools.pairwise(stream)]

    @property
    def first_late(self) -> list[float]:
        """Each stream's first event, late by."""
        return [stream[0] for stream in self.late]

    @property
    def last_late(self) -> list[float]:
        """Each stream's last event, late by: its first's lateness and every gap's error, added up."""
        return [stream[-1] for stream in self.late]


async def fidelity(url: str, interaction: Interaction, *, streams: int = 1, silence: float = 60.0) -> Fidelity:
    """Read `streams` copies of `interaction`'s answer from the server at `url` at once, and time their events
    against the recording's."""
    framing = framing_of(interaction)
    recorded = [t for t, _ in (framing.events(interaction.response.chunks) if framing else [])]
    readings = await asyncio.gather(*(read(url, interaction.request, silence=silence) for _ in range(streams)))
    late = []
    for reading in readings:
        came = [b.t for b in blocks(reading, framing) if b.event is not None]
        if reading.ending is Ending.COMPLETE and len(came) == len(recorded) and came:
            late.append([t - r for t, r in zip(came, recorded, strict=True)])
    return Fidelity(late, streams)
