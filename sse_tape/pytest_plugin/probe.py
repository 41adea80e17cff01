"""The `sse_tape_probe` fixture: a gateway's probe for a gateway's own tests, with its marker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .._exceptions import ConfigError
from .cassettes import named_cassettes

if TYPE_CHECKING:
    from ..probe import ThreadedProbe

__all__ = ["PROBE_MARKER", "sse_tape_probe"]

#: The marker's line in `pytest --markers`.
PROBE_MARKER = (
    "sse_tape_probe(*cassettes, faults=..., tolerance=..., timeout=..., headers=...): the cassettes (names in the "
    "cassette folder; none: the bundled ones) and the settings of the sse_tape_probe fixture's probe"
)


@pytest.fixture
def sse_tape_probe(request: pytest.FixtureRequest) -> Iterator[ThreadedProbe]:
    """A gateway's probe: its upstream listens on a free loopback port until the test ends; point the gateway
    at `sse_tape_probe.url`, then `sse_tape_probe.through(gateway_url)` probes it, and
    `.assert_clean()` on its report fails the test unless the streams passed unbuffered and unchanged."""
    from ..probe import Probe, probe_in_thread
    from ..server import load_cassettes

    marker = request.node.get_closest_marker("sse_tape_probe")
    names, words = (marker.args, dict(marker.kwargs)) if marker is not None else ((), {})
    cassettes = load_cassettes(named_cassettes(request.config, Path(request.node.path), names) if names else [])
    try:
        probe = Probe(cassettes, **words)
    except (TypeError, ConfigError) as exc:
        raise pytest.UsageError(f"@pytest.mark.sse_tape_probe: {exc}") from None
    with probe_in_thread(probe) as running:
        yield running
