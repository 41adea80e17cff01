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

    gap_errors: list[float]
    """Each gap between consecutive events as read, less the gap recorded, over every stream read whole."""
    first_late: list[float]
    """Each stream's first event: when it came after the request was sent, less when it was recorded to."""
    completed: int
    """Streams read whole, with every event the recording has."""
    streams: int


async def fidelity(url: str, interaction: Interaction, *, streams: int = 1, silence: float = 60.0) -> Fidelity:
    """Read `streams` copies of `interaction`'s answer from the server at `url` at once, and time their events
    against the recording's."""
    framing = framing_of(interaction)
    recorded = [t for t, _ in (framing.events(interaction.response.chunks) if framing else [])]
    readings = await asyncio.gather(*(read(url, interaction.request, silence=silence) for _ in range(streams)))
    errors, first, completed = [], [], 0
    for reading in readings:
        came = [b.t for b in blocks(reading, framing) if b.event is not None]
        if reading.ending is not Ending.COMPLETE or len(came) != len(recorded) or not came:
            continue
        completed += 1
        first.append(came[0] - recorded[0])
        for (a, b), (r1, r2) in zip(itertools.pairwise(came), itertools.pairwise(recorded), strict=True):
            errors.append((b - a) - (r2 - r1))
    return Fidelity(errors, first, completed, streams)
