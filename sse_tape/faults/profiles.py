"""Profiles: named sets of faults for `--profile`, shipped or from a project's configuration."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._exceptions import ConfigError
from .model import Fault
from .registry import parse_faults

__all__ = ["PROFILES", "load_profile"]


#: Profiles shipped with sse-tape: named sets of faults for `--profile`.
PROFILES: dict[str, tuple[str, ...]] = {
    # A poor mobile link: late and uneven writes, split reads, the odd reset.
    "flaky-network": (
        "latency:delay=40ms,jitter=30ms",
        "fragment:size=7,p=0.3",
        "disconnect:after=60%,mode=reset,p=0.1",
    ),
    # Half the requests are turned away with 429 and Retry-After.
    "rate-limited": ("status:code=429,retry_after=2,p=0.5",),
    # A busy server: 503s, slow first bytes, and streams that fail half-way.
    "overloaded": (
        "status:code=503,retry_after=5,p=0.2",
        "ttfb:delay=3s,p=0.3",
        "error:at=50%,type=server_error,message=The server is overloaded,p=0.1",
    ),
    # A big model on a small GPU: a long first token, slow tokens, long pauses kept alive by heartbeats.
    "slow-model": ("ttfb:delay=2s", "latency:delay=60ms", "stall:at=30%,for=8s,heartbeat=3s,p=0.3"),
}


def load_profile(name: str, folder: Path | None = None) -> list[Fault]:
    """A profile's faults: from `sse-tape.toml` (`[profiles.NAME]`), `pyproject.toml`
    (`[tool.sse-tape.profiles.NAME]`) in `folder` (the working folder by default), or the shipped ones.

    A profile is a table with `faults`, a list of fault specifications.
    """
    folder = folder or Path.cwd()
    found: dict[str, Any] = {}
    for file, keys in (
        (folder / "sse-tape.toml", ("profiles",)),
        (folder / "pyproject.toml", ("tool", "sse-tape", "profiles")),
    ):
        if not file.is_file():
            continue
        try:
            table: Any = tomllib.loads(file.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as exc:
            raise ConfigError(f"{file}: cannot read profiles: {exc}") from None
        for key in keys:
            table = table.get(key, {}) if isinstance(table, Mapping) else {}
        if isinstance(table, Mapping):
            found.update((k, (file, v)) for k, v in table.items() if k not in found)
    if name in found:
        file, profile = found[name]
        specs = profile.get("faults") if isinstance(profile, Mapping) else None
        if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
            raise ConfigError(f'{file}: profile {name!r} needs faults = ["spec", ...]')
        try:
            return parse_faults(specs)
        except ConfigError as exc:  # the spec alone does not say where to fix it
            raise ConfigError(f"{file}: profile {name!r}: {exc}") from None
    if name in PROFILES:
        return parse_faults(PROFILES[name])
    names = sorted({*PROFILES, *found})
    raise ConfigError(f"unknown profile {name!r}: profiles are {', '.join(names)}")
