"""When each recorded chunk goes out on replay.

A pace is one of:

- `recorded`: the recorded offsets, as they were (the default);
- `xK`: the recorded offsets divided by K (`x2` twice as fast, `x0.5` half speed);
- `instant`: everything at once;
- a fixed gap such as `20ms` or `0.5s`: the first chunk at once, then one chunk per gap;
- `tps:N`: N events per second, each SSE event counted as one token; the first
  chunk at once, each later chunk after the events before it.

A response that ended in silence (a stall before a timeout, say) keeps its
silence, scaled at `xK`; only `instant` drops it.

Jitter (`5ms`, or `10%` of each gap) moves every gap by a uniform random amount
in [-jitter, +jitter], never below zero, from a seeded generator: the same seed
gives the same schedule.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from ._exceptions import ConfigError
from ._units import parse_duration
from .cassette import Chunk, Response
from .framing import SSE, Framing, by_content_type
from .plan import Plan

__all__ = ["PaceMode", "Pacing"]


class PaceMode(StrEnum):
    """How recorded time maps to replay time."""

    RECORDED = "recorded"
    SCALED = "scaled"
    INSTANT = "instant"
    GAP = "gap"
    TPS = "tps"


@dataclass(frozen=True, slots=True)
class Pacing:
    """A replay pace with optional seeded jitter. Build one with `Pacing.parse`."""

    mode: PaceMode = PaceMode.RECORDED
    value: float = 1.0
    """The speed factor (scaled), the gap in seconds (gap), or events per second (tps)."""
    jitter: float = 0.0
    """Seconds, or a fraction of each gap when `jitter_relative`."""
    jitter_relative: bool = False
    seed: int = 0

    @classmethod
    def parse(cls, pace: str = "recorded", *, jitter: str | None = None, seed: int = 0) -> Pacing:
        """Read the command-line words for a pace and its jitter; raises `ConfigError`."""
        pace = pace.strip()
        mode, value = PaceMode.RECORDED, 1.0
        try:
            if pace in ("recorded", "instant"):
                mode = PaceMode(pace)
            elif pace.startswith("x"):
                mode, value = PaceMode.SCALED, float(pace[1:])
            elif pace.startswith("tps:"):
                mode, value = PaceMode.TPS, float(pace[4:])
            else:
                mode, value = PaceMode.GAP, parse_duration(pace)
        except (ValueError, ConfigError):
            raise ConfigError(
                f"unknown pace {pace!r}: use recorded, instant, xK (x2, x0.5), a gap (20ms) or tps:N (tps:40)"
            ) from None
        if mode in (PaceMode.SCALED, PaceMode.TPS) and not 0 < value < math.inf:
            raise ConfigError(f"pace {pace!r}: the number must be greater than 0")
        amount, relative = 0.0, False
        if jitter:
            try:
                if jitter.strip().endswith("%"):
                    amount, relative = float(jitter.strip()[:-1]) / 100, True
                else:
                    amount = parse_duration(jitter)
            except (ValueError, ConfigError):  # the line names the jitter, which a duration's own error does not
                raise ConfigError(f"jitter {jitter!r}: write a duration (5ms) or a percentage (10%)") from None
            if not 0 <= amount < math.inf:
                raise ConfigError(f"jitter {jitter!r}: give a duration or a percentage of 0 or more")
        return cls(mode, value, amount, relative, seed)

    @property
    def repeats(self) -> bool:
        """Whether every replay of a response gets the same schedule (there is no jitter): then one plan,
        worked out once, serves them all."""
        return not self.jitter

    def schedule(self, response: Response, *, key: str = "") -> tuple[list[float], float]:
        """When to write each chunk of `response`, and when the response ends.

        Offsets are seconds from the moment the request arrived. `key` names
        this replay (the recording and how many times it has played), so that
        jitter is reproducible per replay and differs between replays. A rate
        of events counts the messages of the framing its content type names
        (SSE events, a JSON array's elements: see `framing.by_content_type`).
        """
        chunks = response.chunks
        # The silence between the last chunk and the end (a stall before a timeout) is kept:
        # scaled with the rest, dropped only at instant pace.
        tail = max(response.end_time - (chunks[-1].t if chunks else 0.0), 0.0)
        if self.mode is PaceMode.RECORDED:
            offsets = [c.t for c in chunks]
        elif self.mode is PaceMode.SCALED:
            offsets, tail = [c.t / self.value for c in chunks], tail / self.value
        elif self.mode is PaceMode.INSTANT:
            offsets, tail = [0.0] * len(chunks), 0.0
        elif self.mode is PaceMode.GAP:
            offsets = [i * self.value for i in range(len(chunks))]
        else:
            framing = by_content_type(response.header("content-type")) or SSE
            offsets = [n / self.value for n in _events_before(chunks, framing)]
        if self.jitter and offsets:
            offsets = self._jittered(offsets, random.Random(f"{self.seed}:{key}"))
        return offsets, (offsets[-1] if offsets else 0.0) + tail

    def plan(self, response: Response, *, key: str = "") -> Plan:
        """The plan that replays `response` at this pace; `key` as for `schedule`."""
        offsets, end = self.schedule(response, key=key)
        return Plan.of(response, offsets, end)

    def _jittered(self, offsets: Sequence[float], rng: random.Random) -> list[float]:
        out: list[float] = []
        prev_in = prev_out = 0.0
        for t in offsets:
            gap = t - prev_in
            spread = self.jitter * gap if self.jitter_relative else self.jitter
            prev_in = t
            prev_out += max(gap + rng.uniform(-spread, spread), 0.0)
            out.append(prev_out)
        return out


def _events_before(chunks: Sequence[Chunk], framing: Framing) -> list[int]:
    """How many messages the chunks before each one completed."""
    ends = framing.event_ends(b"".join(chunk.data for chunk in chunks))
    counts, size = [], 0
    for chunk in chunks:
        counts.append(bisect.bisect_right(ends, size))
        size += len(chunk.data)
    return counts
