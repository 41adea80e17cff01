"""The words for amounts that options and faults share: durations such as `250ms`, `1.5s`, `2m` or `1h`, and sizes
such as `32MiB`, `500KB` or `1048576`."""

from __future__ import annotations

import re

from ._exceptions import ConfigError

__all__ = ["parse_duration", "parse_size"]

_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h)")
_SECONDS = {"s": 1, "m": 60, "h": 3600}
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([kmg]i?b|b)?", re.IGNORECASE)
_BYTES = {"b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "kib": 1024, "mib": 1024**2, "gib": 1024**3}


def parse_duration(text: str) -> float:
    """Seconds from `250ms`, `1.5s`, `2m` (minutes) or `1h`; raises `ConfigError` otherwise."""
    m = _DURATION.fullmatch(text.strip())
    if not m:
        raise ConfigError(f"{text!r} is not a duration: write it like 20ms, 1.5s, 2m or 1h")
    value = float(m[1])
    return value / 1000 if m[2] == "ms" else value * _SECONDS[m[2]]


def parse_size(text: str | int) -> int:
    """Bytes from `1048576`, `500KB`, `32MiB` or `1GB` (KB, MB, GB in thousands; KiB, MiB, GiB in 1024s);
    raises `ConfigError` otherwise."""
    if isinstance(text, int):
        return text
    m = _SIZE.fullmatch(text.strip())
    if not m:
        raise ConfigError(f"{text!r} is not a size: write it like 1048576, 500KB or 32MiB")
    return int(float(m[1]) * _BYTES[(m[2] or "b").lower()])
