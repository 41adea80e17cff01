"""The runs of a test the plugin adds: the `split` sweep (once per byte offset its streams are cut at) and the
gauntlet (once under each of its faults), each a `Variant` that parametrizes the test."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .._exceptions import SSETapeError
from ..cassette import Cassette, find_cassettes
from ..matching import is_streamed
from .cassettes import scope_cassettes
from .marker import read_marker
from .options import SETTINGS
from .scopes import FIXTURES, SHARED, used_fixtures

__all__ = [
    "AS_RECORDED",
    "VARIANT",
    "Variant",
    "pytest_generate_tests",
    "recorded_name",
    "variant_fixture",
    "variant_of",
]

#: The gauntlet's name for a run under no fault of its own.
AS_RECORDED = "as-recorded"


@dataclass(frozen=True, slots=True)
class Variant:
    """One run of a test: its streams split at a byte, or under a gauntlet fault, or as recorded."""

    split: int | None = None
    gauntlet: str | None = None

    @property
    def id(self) -> str:
        """The parameter's id in the test's name, such as `sse-tape@split=3`."""
        return "sse-tape@" + (f"split={self.split}" if self.split is not None else self.gauntlet or AS_RECORDED)

    def plain(self, name: str) -> str:
        """A test's name or node id without this variant's parameter."""
        ours = self.id
        for form, keep in ((f"[{ours}]", ""), (f"[{ours}-", "["), (f"-{ours}-", "-"), (f"-{ours}]", "]")):
            if form in name:
                return name.replace(form, keep)
        return name


#: Where a test keeps the variant it runs as (`node.stash`).
VARIANT = pytest.StashKey[Variant]()


def variant_of(node: Any) -> Variant:
    """The variant a test runs as; a plain run, or a node that is not a test's: as recorded."""
    stash: pytest.Stash = node.stash
    return stash.get(VARIANT, Variant())


def recorded_name(node: Any) -> str:
    """A test's name without the parameter this plugin adds: what its own cassette is named after."""
    return variant_of(node).plain(node.name)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize a test that uses an sse-tape fixture with its variants: its `split` sweep, then the gauntlet."""
    if not any(name in metafunc.fixturenames for name in FIXTURES):
        return
    config = metafunc.config
    settings = config.stash[SETTINGS]
    test = metafunc.definition
    try:
        marked = read_marker(test)
        splits: list[int | None] = [None]
        # A sweep replays a recorded stream: none while recording (the cassette may not be there yet).
        if marked.split is not None and settings.record == "none":
            paths: list[Path] = []
            for fixture in used_fixtures(metafunc.fixturenames):  # the sweep splits the streams of each
                scope = fixture.removeprefix("sse_tape_") if fixture in SHARED else "function"
                node = {"function": test, "module": test.getparent(pytest.Module), "session": test.session}[scope]
                found = scope_cassettes(config, node, scope, read_marker(node), recorded_name(test))
                if scope == "function" and not marked.cassettes:  # a parametrized test has a cassette for each case
                    found += sorted(found[0].parent.glob(found[0].stem + "[[]*.toml"))
                paths += found
            splits = [*_offsets(_stream_sizes(paths), marked.split)] or [None]
    except pytest.UsageError:
        return  # the test runs once, and its fixture fails it saying why
    # The gauntlet runs the test as recorded, not at each offset: a sweep crossed with it would be mostly the
    # same runs (fragment and the line ends undo a split), and thousands of them.
    gauntlet = [Variant(None, name) for name in settings.gauntlet] if settings.run_gauntlet else []
    variants = [Variant(s) for s in splits] + gauntlet
    if variants != [Variant()]:
        metafunc.parametrize("_sse_tape_variant", variants, ids=[v.id for v in variants], indirect=True)


def _stream_sizes(paths: list[Path]) -> list[int]:
    """The size of each streamed answer the cassettes hold."""
    try:
        files = find_cassettes(p for p in paths if p.exists())
        return [len(i.response.body) for f in files for i in Cassette.load(f).interactions if is_streamed(i)]
    except SSETapeError as exc:
        raise pytest.UsageError(f"sse-tape split: {exc}") from None


def _offsets(sizes: list[int], split: str | int) -> list[int]:
    """The byte offsets to split at: every one inside the longest stream, or `split` of them spread evenly."""
    longest = max(sizes, default=0)
    if longest < 2:
        return []
    if split == "every":
        return list(range(1, longest))
    count = min(int(split), longest - 1)
    if count == 1:
        return [longest // 2]
    return sorted({1 + round(n * (longest - 2) / (count - 1)) for n in range(count)})


@pytest.fixture(name="_sse_tape_variant")
def variant_fixture(request: pytest.FixtureRequest) -> Variant:
    """The variant this run of the test is (the plugin parametrizes it); a plain run: as recorded."""
    chosen: Variant = getattr(request, "param", Variant())
    request.node.stash[VARIANT] = chosen
    return chosen
