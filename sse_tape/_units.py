"""The words for amounts that options and faults share: durations such as `250ms` or `1.5s`."""

from __future__ import annotations

import re

from ._exceptions import ConfigError

__all__ = ["parse_duration"]

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s)")


def parse_duration(text: str) -> float:
    """Seconds from `250ms` or `1.5s`; raises `ConfigError` otherwise."""
    m = _DURATION.fullmatch(text.strip())
    if not m:
        raise ConfigError(f"{text!r} is not a duration: write it like 20ms or 1.5s")
    value = float(m[1])
    return value / 1000 if m[2] == "ms" else value
