"""The words for amounts that options and faults share: durations such as `250ms`, `1.5s`, `2m` or `1h`."""

from __future__ import annotations

import re

from ._exceptions import ConfigError

__all__ = ["parse_duration"]

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)")
_SECONDS = {"s": 1, "m": 60, "h": 3600}


def parse_duration(text: str) -> float:
    """Seconds from `250ms`, `1.5s`, `2m` (minutes) or `1h`; raises `ConfigError` otherwise."""
    m = _DURATION.fullmatch(text.strip())
    if not m:
        raise ConfigError(f"{text!r} is not a duration: write it like 20ms, 1.5s, 2m or 1h")
    value = float(m[1])
    return value / 1000 if m[2] == "ms" else value * _SECONDS[m[2]]
