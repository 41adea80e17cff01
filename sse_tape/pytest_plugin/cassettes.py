"""The cassettes a test, a module or the session uses: those its marker names in the cassette folder, else its
own, named after it; and the one that what is recorded goes into."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from .marker import Marked
from .options import SETTINGS

__all__ = ["did_you_mean", "named_cassettes", "record_target", "scope_cassettes"]

_UNSAFE = re.compile(r"[<>?%*:|\"'/\\]")


def _folder(config: pytest.Config, test_file: Path | None) -> Path:
    """The cassette folder: the configured one, else `cassettes/` beside the test file (or the rootdir)."""
    configured = config.stash[SETTINGS].cassette_dir
    if configured is not None:
        return configured
    return (test_file.parent if test_file is not None else config.rootpath) / "cassettes"


def _named(folder: Path, names: Sequence[str], marker: str = "sse_tape") -> list[Path]:
    """The cassette files and folders `names` name in `folder` (`chat` is `chat.toml`); none may leave it."""
    paths = []
    for name in names:
        if not name.strip():
            raise pytest.UsageError(f"@pytest.mark.{marker}: a cassette name is empty")
        path = folder / name
        if path.suffix not in (".toml", ".msgpack") and not path.is_dir() and not name.endswith(("/", "\\")):
            path = path.with_name(path.name + ".toml")
        if Path(name).is_absolute() or not path.resolve().is_relative_to(folder.resolve()):
            raise pytest.UsageError(f"@pytest.mark.{marker}: cassette {name!r} is outside the cassette folder {folder}")
        paths.append(path)
    return paths


def named_cassettes(config: pytest.Config, test_file: Path, names: Sequence[str]) -> list[Path]:
    """The cassettes `names` name in the cassette folder of the test in `test_file`, for the `sse_tape_probe`
    marker."""
    return _named(_folder(config, test_file), names, "sse_tape_probe")


def _test_cassettes(config: pytest.Config, item: Any, marked: Marked, name: str) -> list[Path]:
    """A test's cassettes: those its marker names, else `<folder>/<module>/<name>.toml`."""
    test_file = Path(item.path)
    folder = _folder(config, test_file)
    if marked.cassettes:
        return _named(folder, marked.cassettes)
    if getattr(item, "cls", None) is not None:
        name = f"{item.cls.__name__}.{name}"
    return [folder / test_file.stem / f"{_UNSAFE.sub('-', name)}.toml"]


def scope_cassettes(config: pytest.Config, node: Any, scope: str, marked: Marked, name: str) -> list[Path]:
    """The cassettes of a test (`scope` function), of its module or of the session. `name`: the test's name
    without the parameter this plugin adds (`variants.recorded_name`), which its own cassette is named after."""
    if scope == "function":
        return _test_cassettes(config, node, marked, name)
    test_file = Path(node.path) if scope == "module" else None
    own = f"{test_file.stem}.toml" if test_file is not None else "session.toml"
    return _named(_folder(config, test_file), marked.cassettes or [own])


def record_target(config: pytest.Config, node: Any, scope: str, paths: list[Path], name: str) -> Path:
    """The cassette that what is recorded goes into, of the scope's cassettes `paths`: the first file named (a
    folder cannot be recorded into), else the scope's own; the others are replayed as they are. A file name
    has its suffix (`_named` gives it one); a folder named with a trailing `/` has none, there or not."""
    own = scope_cassettes(config, node, scope, Marked(), name)[0]
    return next((p for p in paths if p.suffix in (".toml", ".msgpack") and not p.is_dir()), own)


def did_you_mean(missing: Path) -> str:
    """` (did you mean 'chat'?)` when a cassette beside `missing` has a name close to its name. Only for a
    name the marker gives: a new test's own cassette is close to its neighbours' (`test_ask_2`, `test_ask_1`)."""
    try:
        there = [
            p.name + "/" if p.is_dir() else p.stem if p.suffix == ".toml" else p.name for p in missing.parent.iterdir()
        ]
    except OSError:
        return ""
    close = difflib.get_close_matches(missing.stem, there, n=1)
    if not close and not missing.suffix:  # a folder
        close = difflib.get_close_matches(missing.name + "/", there, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
