"""The `sse_tape` marker: what it says (`Marked`), read from a test, its class and its module."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import pytest

from .options import SETTINGS

__all__ = ["MARKER", "PER_TEST", "Marked", "own_words", "read_marker"]

#: The marker's line in `pytest --markers`.
MARKER = (
    "sse_tape(*cassettes, pace='instant', jitter=None, match_on=None, ignore_body_fields=None, faults=(), "
    "profiles=(), recorded_faults=False, miss_status=404, model=None, env=False, allow_unused=None, split=None, "
    "survives=()): "
    "what the sse_tape fixtures serve and how; see sse_tape.pytest_plugin.Marked."
)

#: What a test's own marker may say to a server its module or session shares: the rest is the scope's.
PER_TEST = frozenset({"faults", "profiles", "env", "allow_unused", "split", "survives"})


@dataclass(frozen=True, slots=True, kw_only=True)
class Marked:
    """What `@pytest.mark.sse_tape(...)` says; each word as `ServeOptions.build` reads it, unless said here.

    Markers on the class and module add what the test's own leaves out.
    """

    cassettes: tuple[str, ...] = ()
    """Cassette names (`chat`: `chat.toml`), files or folders, in the cassette folder; none: the test's own."""
    pace: str = "instant"
    """`instant` by default in tests; `recorded`, `x2`, `20ms`, `tps:40` as for `serve`."""
    jitter: str | None = None
    match_on: str | Sequence[str] | None = None
    ignore_body_fields: Sequence[str] | None = None
    faults: Sequence[str] = ()
    profiles: Sequence[str] = ()
    recorded_faults: bool = False
    """Put back the faults each recording notes its client got when it was recorded (with faults)."""
    miss_status: int = 404
    model: str | None = None
    """A local model (a .gguf file or a model package) answers what no recording does."""
    env: bool = False
    """Set `OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL` and their API keys (dummies) for the test, so code that makes
    its own client reaches the mock."""
    allow_unused: bool | None = None
    """Let recordings go unplayed, and faults asked for go uninjected; None: the ini's `sse_tape_allow_unused`."""
    split: str | int | None = None
    """`"every"`: run the test once per byte offset of the longest stream, each stream sent as two writes
    cut there; N: at N offsets spread evenly."""
    survives: Sequence[str] = ()
    """The gauntlet's faults (by name, or `"all"`) the test promises to survive: only those fail the run."""


def _bind(*cassettes: str, **words: Any) -> Marked:
    return Marked(cassettes=tuple(str(c) for c in cassettes), **words)


def read_marker(node: pytest.Item | pytest.Collector | Any) -> Marked:
    """What the sse_tape markers on a test (then its class, then its module) say; raises `pytest.UsageError`
    naming what is wrong."""
    args: tuple[Any, ...] | None = None
    words: dict[str, Any] = {}
    for marker in node.iter_markers("sse_tape"):
        if args is None and marker.args:
            args = marker.args
        words = {**marker.kwargs, **words}
    try:
        marked = _bind(*(args or ()), **words)
    except TypeError as exc:
        known = ", ".join(f.name for f in fields(Marked) if f.name != "cassettes")
        message = str(exc).replace("Marked.__init__()", "@pytest.mark.sse_tape")
        raise pytest.UsageError(f"{message}; it takes cassette names, then {known}") from None
    if isinstance(marked.faults, str) or isinstance(marked.profiles, str):
        raise pytest.UsageError("@pytest.mark.sse_tape: give faults and profiles as lists, such as faults=['error:5']")
    split = marked.split
    if split is not None and split != "every" and (isinstance(split, bool) or not isinstance(split, int) or split < 1):
        raise pytest.UsageError(f"@pytest.mark.sse_tape: split={split!r}: give 'every' or a number of offsets")
    gauntlet = node.config.stash[SETTINGS].gauntlet
    if marked.survives != "all":
        if isinstance(marked.survives, str):
            raise pytest.UsageError("@pytest.mark.sse_tape: give survives as a list of the gauntlet's faults, or 'all'")
        if unknown := sorted(set(marked.survives) - set(gauntlet)):
            raise pytest.UsageError(
                f"@pytest.mark.sse_tape: survives {unknown}: the gauntlet's faults are {', '.join(gauntlet)}"
            )
    return marked


def own_words(item: Any) -> dict[str, Any]:
    """What the sse_tape markers on a test and its class say, not its module's; cassettes as `cassettes`."""
    module = item.getparent(pytest.Module)
    theirs = list(module.iter_markers("sse_tape")) if module is not None else []
    words: dict[str, Any] = {}
    for marker in item.iter_markers("sse_tape"):
        if marker in theirs:
            continue
        words = {**marker.kwargs, **words}
        if marker.args:
            words.setdefault("cassettes", marker.args)
    return words
