"""Finding cassette files: in the paths a user gives, among the examples shipped with sse-tape, and checking
that a path can be one before anything is recorded into it."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from .._exceptions import CassetteError, CassetteNotFoundError
from .serializers import SUFFIXES, encoding_of
from .spools import cassette_of, spools_of

__all__ = ["bundled_cassettes", "check_cassette_path", "find_cassettes"]


def find_cassettes(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The cassette files named by `paths`: files as given, folders searched recursively.

    A cassette that only a killed session's spool holds so far counts as found.
    """
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files = {f for f in p.rglob("*") if f.suffix in SUFFIXES and f.is_file()}
            files |= {c for f in p.rglob("*.spool") if (c := cassette_of(f)) and spools_of(c, stale=True)}
            found.extend(sorted(files))
        elif p.exists() or spools_of(p, stale=True):
            found.append(p)
        else:
            raise CassetteNotFoundError(f"{p}: no such cassette or folder")
    return found


def bundled_cassettes() -> list[Path]:
    """The example cassettes shipped with sse-tape, one or more for each supported API."""
    packaged = Path(str(resources.files("sse_tape"))) / "_bundled"
    # An editable install or a source checkout has them in the repository's cassettes/.
    folder = packaged if packaged.is_dir() else Path(__file__).resolve().parents[2] / "cassettes"
    return find_cassettes([folder])


def check_cassette_path(path: str | os.PathLike[str]) -> Path:
    """The path, if its suffix names a cassette encoding and its folder takes a file (a spool, a new cassette);
    raises `CassetteError` otherwise.

    Recorders call it before they send anything, so that nothing is recorded into a file that cannot be written.
    """
    path = Path(path)
    encoding_of(path)
    if path.exists() and not path.is_file():
        raise CassetteError(f"{path}: is not a file")
    try:  # a file made and removed at once: what the folder's mount, permissions and room allow, asked of the system
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=path.parent)
    except OSError as exc:
        raise CassetteError(f"{path}: cannot write beside it: {exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(probe)
    if path.exists() and not os.access(path, os.W_OK):
        raise CassetteError(f"{path}: cannot write it: {os.strerror(errno.EACCES)}")
    return path
