"""A cache of parsed TOML cassettes: what `tomllib` made of a file's bytes, kept as MessagePack.

Parsing TOML in Python is slow, and unpacking the same document from MessagePack many times quicker (see
docs/benchmarks.md); a big cassette is loaded far more often than it changes. `parsed` reads a file's bytes
through the cache. An entry is named by the SHA-256 of the file's bytes, so any change to the file misses
it, and holds the document as `tomllib` gave it: what a load reads from the cache is what parsing the file
gives, value for value, with one difference in form. The chunks of an interaction
(`interactions[n].response.chunks`), when every one is a table of just `t`, a float, and `text`, a string,
in that order (as sse-tape writes them), are held as `TextTables`: two columns, the times and the texts'
UTF-8 bytes, so that a load builds its chunks without a table each or a text to encode;
`TextTables.tables()` gives the tables back, and `toml.expand` the whole document as `tomllib` gave it. In
the entry, such chunks are a MessagePack binary (the columns packed), which no `tomllib` document holds.
Entries live in sse-tape's cache folder (see `folder`), never beside the cassette.

Writers write a temporary file and rename it, so a reader sees a whole entry or none; each entry carries a
digest of its name and content, so a damaged or misplaced one is ignored. A cache that cannot be read or
written is no cache: the file is parsed, as without one. The least recently used entries go when the
folder holds more than `MAX_BYTES`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack

from . import toml
from .toml import TextTables, interaction_chunks

__all__ = ["MAX_BYTES", "MIN_SIZE", "folder", "get", "key", "parsed", "prune", "put"]

#: Files smaller than this are parsed every time: parsing them is quick, not worth an entry.
MIN_SIZE = 4096
#: What the cache may hold in all before the least recently used entries go.
MAX_BYTES = 256 * 2**20

# What an entry starts with; a new layout of entries gets a new one, and old entries are written anew.
_MAGIC = b"sse-tape parsed toml 3\n"
# A temporary file left by a writer that died is removed after this long.
_STALE_SECONDS = 3600.0


def parsed(raw: bytes) -> Any:
    """The TOML document in a file's bytes, as `toml.parse` gives it: from the cache when it holds the
    document of these bytes, else parsed, and kept when they are `MIN_SIZE` or more."""
    if len(raw) < MIN_SIZE:
        return toml.parse(raw)
    name = key(raw)
    doc = get(name)
    if doc is None:
        doc = toml.parse(raw)
        put(name, doc)
    return doc


def _compact(doc: Any) -> Any:
    """The document with each interaction's chunks packed as the columns of a `TextTables` where they can
    be; a new document where it differs, sharing the rest: the one given is not changed."""
    changed = {}
    for response, chunks in interaction_chunks(doc):
        columns = chunks if type(chunks) is TextTables else TextTables.of(chunks) if type(chunks) is list else None
        if columns is not None:
            packed = msgpack.packb([columns.t, columns.text], use_bin_type=True)
            changed[id(response)] = {**response, "chunks": packed}
    if not changed:
        return doc
    interactions = [
        {**item, "response": changed[id(item["response"])]}
        if type(item) is dict and id(item.get("response")) in changed
        else item
        for item in doc["interactions"]
    ]
    return {**doc, "interactions": interactions}


def _columns(doc: Any) -> Any:
    """The document an entry holds, each interaction's packed chunks (a binary, which `_compact` made)
    turned into their `TextTables` (in place)."""
    for response, chunks in interaction_chunks(doc):
        if type(chunks) is bytes:
            # What `_compact` packed (the entry's digest says so): floats and bytes, checked no further.
            t, text = msgpack.unpackb(chunks, raw=False)
            if not t or len(t) != len(text):
                raise ValueError("not text tables")
            response["chunks"] = TextTables(t, text)
    return doc


def folder() -> Path | None:
    """Where entries live: `$SSE_TAPE_TOML_CACHE`, else `parsed-toml` in sse-tape's cache folder (the one
    models are assembled in: `$SSE_TAPE_CACHE`, else `~/.cache/sse-tape`). None when `SSE_TAPE_TOML_CACHE`
    is set but empty (the cache is off), or there is no home folder."""
    setting = os.environ.get("SSE_TAPE_TOML_CACHE")
    if setting is not None:
        return Path(setting) if setting else None
    root = os.environ.get("SSE_TAPE_CACHE")
    try:
        return (Path(root) if root else Path.home() / ".cache" / "sse-tape") / "parsed-toml"
    except RuntimeError:
        return None


def key(raw: bytes) -> str:
    """The name of the entry for a file of these bytes."""
    return hashlib.sha256(raw).hexdigest()


def get(name: str) -> Any | None:
    """The document the entry `name` holds, if the cache has it whole; else None. Interactions' chunks
    may be `TextTables` (see `toml.expand`)."""
    where = folder()
    if where is None:
        return None
    entry = where / f"{name}.msgpack"
    try:
        with entry.open("rb") as f:
            data = memoryview(f.read())
        head = len(_MAGIC)
        digest, payload = data[head : head + 32], data[head + 32 :]
        if data[:head] != _MAGIC or digest != _digest(name, payload):
            return None
        doc = _columns(msgpack.unpackb(payload, raw=False, strict_map_key=True))
    except (OSError, ValueError, TypeError, msgpack.UnpackException):
        return None
    with contextlib.suppress(OSError):
        os.utime(entry)  # recently used: kept the longest
    return doc


def put(name: str, doc: Any) -> None:
    """Keep a parsed document as the entry `name`. One that MessagePack cannot hold as it is (a date, a
    time, an integer past 64 bits) is not kept: it is parsed each time."""
    where = folder()
    if where is None:
        return
    try:
        payload = msgpack.packb(_compact(doc), use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return
    try:
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + _digest(name, payload) + payload)
            os.replace(tmp, where / f"{name}.msgpack")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        prune(where, MAX_BYTES)
    except OSError:
        pass  # a cache that cannot be written is no cache


def prune(where: Path, max_bytes: int) -> None:
    """Remove the least recently used entries until those left hold at most `max_bytes`, and temporary
    files that writers which died left behind."""
    entries = []
    now = time.time()
    with os.scandir(where) as found:
        for item in found:
            with contextlib.suppress(OSError):  # removed meanwhile by another pruner
                st = item.stat()
                if item.name.endswith(".tmp"):
                    if now - st.st_mtime > _STALE_SECONDS:
                        os.unlink(item.path)
                elif item.name.endswith(".msgpack"):
                    entries.append((st.st_mtime, st.st_size, item.path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= max_bytes:
            break
        with contextlib.suppress(OSError):
            os.unlink(path)
        total -= size


def _digest(name: str, payload: bytes | memoryview) -> bytes:
    digest = hashlib.sha256(name.encode())
    digest.update(payload)
    return digest.digest()
