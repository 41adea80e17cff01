"""Reading the cassettes a command names (serve, show, check): each one, or why it cannot be read; and the
one line that says they hold nothing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .._exceptions import CassetteError, SSETapeError
from ..cassette import Cassette, find_cassettes

__all__ = ["load_each", "refuse_nothing"]


def load_each(paths: tuple[Path, ...], what: str) -> list[tuple[str, Cassette | str]]:
    """Each cassette `paths` name, in order, or why it cannot be read: for `check` and `show` (`what`), one bad
    file among many is said, and the others are checked or shown all the same. Refused when every one can be
    read and none holds an interaction (see `refuse_nothing`)."""
    loaded: list[tuple[str, Cassette | str]] = []
    for given in paths:
        try:
            files = find_cassettes([given])
        except CassetteError as exc:
            loaded.append((str(given), str(exc).removeprefix(f"{given}: ")))  # the path is said beside it
            continue
        for path in files:
            try:
                loaded.append((str(path), Cassette.load(path)))
            except CassetteError as exc:
                loaded.append((str(path), str(exc).removeprefix(f"{path}: ")))
    cassettes = [c for _, c in loaded if isinstance(c, Cassette)]
    if len(cassettes) == len(loaded):  # else the files that cannot be read are what there is to say
        refuse_nothing(cassettes, paths, what)
    return loaded


def refuse_nothing(cassettes: Sequence[Cassette], paths: tuple[Path, ...], what: str) -> None:
    """Exit 2 with one line naming the paths when they hold no interaction at all."""
    if not any(len(cassette) for cassette in cassettes):
        found = "no cassettes" if not cassettes else "no interactions"
        raise SSETapeError(f"nothing to {what}: {found} in {', '.join(str(p) for p in paths)}")
