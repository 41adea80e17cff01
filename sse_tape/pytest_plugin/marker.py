"""The `sse_tape` marker: what it says (`Marked`, its keywords those of the table of options), read from a test,
its class and its module."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import pytest

from ..options import OPTIONS
from .options import SETTINGS

__all__ = ["MARKER", "PER_TEST", "Marked", "own_words", "read_marker"]

_KEYWORDS = [option for option in OPTIONS.values() if option.marker]

#: The marker's line in `pytest --markers`.
MARKER = (
    "sse_tape(*cassettes, "
    + ", ".join(f"{option.name}={option.in_marker!r}" for option in _KEYWORDS)
    + "): what the sse_tape fixtures serve and how; see sse_tape.pytest_plugin.Marked."
)

#: What a test's own marker may say to a server its module or session shares: the rest is the scope's.
PER_TEST = frozenset(option.name for option in _KEYWORDS if option.per_test)


def _default(name: str) -> Any:
    return OPTIONS[name].in_marker


@dataclass(frozen=True, slots=True, kw_only=True)
class Marked:
    """What `@pytest.mark.sse_tape(...)` says: cassette names, then the options of `sse_tape.options.OPTIONS`
    that are marker keywords, each meaning what its `help` there says (and read as `ServeOptions.build` reads
    it, where it is one of its keywords).

    `cassettes` are cassette names (`chat`: `chat.toml`), files or folders, in the cassette folder; none: the
    test's own. Tests replay at `pace="instant"` unless they say otherwise; `allow_unused=None` is the ini's
    `sse_tape_allow_unused`. Markers on the class and module add what the test's own leaves out.
    """

    cassettes: tuple[str, ...] = ()
    model: str | None = _default("model")
    match_on: str | Sequence[str] | None = _default("match_on")
    ignore_body_fields: Sequence[str] | None = _default("ignore_body_fields")
    pace: str = _default("pace")
    jitter: str | None = _default("jitter")
    miss_status: int = _default("miss_status")
    max_body: str | int = _default("max_body")
    faults: Sequence[str] = _default("faults")
    profiles: Sequence[str] = _default("profiles")
    recorded_faults: bool = _default("recorded_faults")
    env: bool = _default("env")
    allow_unused: bool | None = _default("allow_unused")
    split: str | int | None = _default("split")
    survives: Sequence[str] = _default("survives")


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
