"""Where in a stream a fault acts: after so many events, at a fraction of them, at a byte, or at a time."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from ._exceptions import ConfigError
from ._units import parse_duration

__all__ = ["Position", "PositionUnit"]

# The bounds positions are checked against: past them a number is not a place in any stream.
_MAX_EVENTS = 10**9
_MAX_BYTES = 2**40


class PositionUnit(StrEnum):
    """What a position counts."""

    EVENTS = "events"
    FRACTION = "fraction"
    BYTES = "bytes"
    SECONDS = "seconds"


@dataclass(frozen=True, slots=True)
class Position:
    """Where in a stream: after `value` events, at a fraction of them, at a byte, or at a time."""

    unit: PositionUnit
    value: float

    @classmethod
    def parse(cls, text: str, *, also: tuple[str, ...] = ()) -> Position:
        """A position from `5` (events), `50%`, `200b` or a time (`1.5s`, `300ms`, `2m`); raises `ConfigError`.

        `also` are the other words the caller takes in a position's place (`role`, `done`), named in the
        message that refuses `text`, so that it lists all that would do.
        """
        text = text.strip()
        words = ["5 (events)", "50%", "200b", "1.5s", *also]
        hint = f"write {', '.join(words[:-1])} or {words[-1]}"
        if len(text) > 32:
            raise ConfigError(f"{text[:32]!r}... is not a position: {hint}")
        try:
            if text.endswith("%"):
                position = cls(PositionUnit.FRACTION, float(text[:-1]) / 100)
            elif text.endswith("b"):
                position = cls(PositionUnit.BYTES, float(int(text[:-1])))
            elif text.endswith(("s", "m", "h")):
                position = cls(PositionUnit.SECONDS, parse_duration(text))
            else:
                position = cls(PositionUnit.EVENTS, float(int(text)))
        except (ValueError, ConfigError):
            raise ConfigError(f"{text!r} is not a position: {hint}") from None
        if not 0 <= position.value < math.inf or (position.unit is PositionUnit.FRACTION and position.value > 1):
            raise ConfigError(f"{text!r} is not a position: it must be 0 or more (a fraction, at most 100%)")
        limit = {PositionUnit.EVENTS: _MAX_EVENTS, PositionUnit.BYTES: _MAX_BYTES, PositionUnit.SECONDS: 3600}
        if position.value > limit.get(position.unit, 1):
            raise ConfigError(f"{text!r} is past any stream: at most {limit[position.unit]:,} {position.unit}")
        return position

    def __str__(self) -> str:
        if self.unit is PositionUnit.FRACTION:
            return f"{self.value * 100:g}%"
        if self.unit is PositionUnit.BYTES:
            return f"{self.value:g}b"
        if self.unit is PositionUnit.SECONDS:
            return f"{self.value:g}s"
        return f"{self.value:g}"
