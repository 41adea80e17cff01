"""The spool: the append-only file a recorder writes each stream to as it arrives.

Adding to a cassette means writing a new file, so a recorder does not do that
per interaction. It writes each request, response head and chunk to a spool
beside the cassette (`session.toml.<pid>-<hex>.spool`) the moment it has
them, before the client gets them, and appends what it recorded to the
cassette when the session ends, then removes the spool. A session that is
killed leaves its spool behind: every chunk that reached a client is in it,
and a stream cut off is there as far as it got. The cassette reads such a
spool with its own file (see `persistence`), until a write of the cassette
takes it in.

This module is the file format alone, over plain values: it knows no
cassette type. The file is a stream of MessagePack values: a header map
(format, version, the cassette's file name, the spool's id, when it began),
then one array per record: `["start", n, recorded_at, method, path, query,
headers, body]`, `["head", n, status, headers]`, `["chunk", n, t, data]`,
`["fault", n, spec, what]` (a fault that acted on the client's copy),
`["replaces", n, fingerprint]` (just before the end of a whole answer that
takes the place of recordings of the same request cut short: one for each,
its `Interaction.fingerprint`; the first recording's comes last, where a
reader that knows of one such record per stream, as older ones do, takes it),
`["end", n, end, duration]`; `n` numbers the session's streams. `["appending", 0, inode, at, before, length,
block, patch_at, patch]` (an `AppendNote`) comes before a write at the end of the cassette's file. A `start` for a number the spool holds
already begins that stream anew: a writer that could not write all of a stream (a full disk) writes it
again later, whole, in one go. A reader skips a kind of record it does not know. A writer
holds an exclusive lock on its spool, so a spool nobody holds was left by a
session that is over. A record cut short by a crash or a full disk ends the
stream of records; everything before it is read.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from .._exceptions import CassetteError, CassetteFormatError

__all__ = [
    "AppendNote",
    "SpoolWriter",
    "Spooled",
    "SpooledStream",
    "cassette_of",
    "note_append",
    "read_spool",
    "spool_id",
    "spools_of",
    "take_back",
    "write_all",
]

_MAGIC = "sse-tape-spool"
_VERSION = 1
# `session.toml.<pid>-<hex>.spool`: the id is strict, so `chat.toml.v2.toml`'s spools are not `chat.toml`'s.
_NAME = re.compile(r"(?P<cassette>.+)\.(?P<id>\d+-[0-9a-f]{6})\.spool")

Pairs = list[tuple[str, str]]


def spools_of(cassette: Path, *, stale: bool = False) -> list[Path]:
    """The spools recorders wrote beside `cassette`, oldest first; with `stale`, only those no running
    recorder holds."""
    found = [p for p in cassette.parent.glob("*.spool") if cassette_of(p) == cassette]
    if stale:
        found = [p for p in found if not _held(p)]
    return sorted(found, key=_began)


def cassette_of(spool: Path) -> Path | None:
    """The cassette a spool belongs to: `session.toml` for `session.toml.<pid>-<hex>.spool`."""
    m = _NAME.fullmatch(spool.name)
    return spool.with_name(m["cassette"]) if m else None


def spool_id(spool: Path) -> str:
    """The id in a spool's name, which the cassette notes beside what it took from it."""
    m = _NAME.fullmatch(spool.name)
    if m is None:
        raise ValueError(f"{spool.name} is not a spool's name")
    return m["id"]


def _held(path: Path) -> bool:
    """Whether a running recorder holds the spool (its exclusive lock)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # and with it the shared lock, if it was taken
    return False


def _began(path: Path) -> float:
    try:
        with path.open("rb") as f:
            header = next(iter(msgpack.Unpacker(f, raw=False, max_buffer_size=1 << 16)), None)
    except (OSError, ValueError, msgpack.UnpackException):
        return 0.0
    began = header.get("began") if isinstance(header, dict) else None
    return float(began) if isinstance(began, int | float) else 0.0


class SpoolWriter:
    """Writes one recording session's streams to a new spool beside `cassette`.

    The spool is created, locked and written to at once, so a folder that
    cannot be written is an error before anything is recorded. Each write
    goes to the operating system before the method returns (a killed process
    loses none of it); `sync` also puts it on the disk. A failed write (a full
    disk) raises `CassetteError` and takes back what it wrote of its record, so
    that the spool still holds whole records only and a later write, when
    there is room again, is read after them.
    """

    def __init__(self, cassette: Path) -> None:
        self.id = f"{os.getpid()}-{secrets.token_hex(3)}"
        self.path = cassette.with_name(f"{cassette.name}.{self.id}.spool")
        self._size = 0  # the bytes of whole records it holds
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise CassetteError(f"{cassette}: cannot write beside it: {exc.strerror or exc}") from None
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            header = {"format": _MAGIC, "version": _VERSION, "cassette": cassette.name, "id": self.id}
            self._write({**header, "began": time.time()})
            os.fsync(self._fd)
        except (CassetteError, OSError) as exc:
            self.close(remove=True)
            raise CassetteError(
                f"{cassette}: cannot write beside it: {getattr(exc, 'strerror', None) or exc}"
            ) from None

    def start(self, n: int, recorded_at: str, method: str, path: str, query: str, headers: Pairs, body: bytes) -> None:
        """A stream begins: its request."""
        self._write(["start", n, recorded_at, method, path, query, [list(h) for h in headers], body])

    def head(self, n: int, status: int, headers: Pairs) -> None:
        """The response head of stream `n`."""
        self._write(["head", n, status, [list(h) for h in headers]])

    def chunk(self, n: int, t: float, data: bytes) -> None:
        """A piece of stream `n`'s body, as it arrived, `t` seconds after its request."""
        self._write(["chunk", n, t, data])

    def fault(self, n: int, spec: str, what: str) -> None:
        """A fault acted on what the client of stream `n` was sent: which, and what it did."""
        self._write(["fault", n, spec, what])

    def replaces(self, n: int, fingerprint: str) -> None:
        """Stream `n`, a whole answer, takes the place of the recording cut short with this fingerprint (one
        call for each it replaces); written before its end, so that a stream that has its end has this too."""
        self._write(["replaces", n, fingerprint])

    def end(self, n: int, end: str, duration: float) -> None:
        """Stream `n` is over: how, and when."""
        self._write(["end", n, end, duration])

    def stream(self, n: int, stream: SpooledStream) -> None:
        """Stream `n`, whole, in one write that lands whole or not at all: it begins anew one the spool holds
        part of (or all of, if its sync failed)."""
        request = [stream.recorded_at, stream.method, stream.path, stream.query, stream.request_headers, stream.body]
        records: list[Any] = [["start", n, *request]]
        if stream.status is not None:
            records.append(["head", n, stream.status, [list(h) for h in stream.headers]])
        records += [["fault", n, spec, what] for spec, what in stream.injected]
        records += [["chunk", n, t, data] for t, data in stream.chunks]
        records += [["replaces", n, fingerprint] for fingerprint in stream.replaces]
        if stream.end is not None:
            records.append(["end", n, stream.end, stream.duration or 0.0])
        self._write(*records)

    def sync(self) -> None:
        """Put everything written so far on the disk; raises `OSError` if it cannot."""
        os.fsync(self._fd)

    def close(self, *, remove: bool) -> None:
        """Close the spool (releasing its lock); remove it first when what it holds is safe elsewhere."""
        if remove:
            self.path.unlink(missing_ok=True)  # while still locked: no reader ever finds it unheld and taken in
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _write(self, *records: Any) -> None:
        data = b"".join(msgpack.packb(record, use_bin_type=True) for record in records)
        try:
            write_all(self._fd, data)
        except OSError as exc:
            self._take_back()
            raise CassetteError(f"{self.path}: cannot write: {exc.strerror or exc}") from None
        self._size += len(data)

    def _take_back(self) -> None:
        """Cut off what a failed write left of its records (a shorter file needs no room)."""
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, self._size)


@dataclass(slots=True)
class SpooledStream:
    """One stream as the spool holds it, in plain values."""

    recorded_at: str
    method: str
    path: str
    query: str
    request_headers: Pairs
    body: bytes
    status: int | None = None
    headers: Pairs = field(default_factory=list)
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    end: str | None = None
    """How it ended, or None when the spool stops before its end."""
    duration: float | None = None
    injected: list[tuple[str, str]] = field(default_factory=list)
    """The faults that acted on the client's copy, each with what it did."""
    replaces: list[str] = field(default_factory=list)
    """The fingerprints of the recordings cut short that this stream, a whole answer, takes the place of."""


@dataclass(frozen=True, slots=True)
class AppendNote:
    """What a writer notes in a spool (and syncs) before it writes at the end of the cassette's file, in place:
    a load after a crash in the middle of that write reads the file as it was before it (up to `at`), and the
    spools, which hold what the write was adding, as they are."""

    inode: int
    """The file's inode: a file written anew since is another one."""
    at: int
    """The file's length before the write."""
    before: str
    """The SHA-256 of the file's last 4 KiB (or fewer) before `at`: that it is still the same file."""
    length: int
    block: str
    """The length and SHA-256 of what the write adds at `at`."""
    patch_at: int
    patch: bytes
    """What the write puts at `patch_at` once that is on the disk (a MessagePack array's new count), or
    nothing."""

    def whole(self, raw: bytes) -> bool | None:
        """Whether the file whose bytes are `raw` holds the write whole; None when it is not the file the
        write was to (written anew since)."""
        if self.at > len(raw) or hashlib.sha256(raw[max(self.at - BEFORE, 0) : self.at]).hexdigest() != self.before:
            return None
        added = raw[self.at : self.at + self.length]
        patched = raw[self.patch_at : self.patch_at + len(self.patch)] == self.patch
        return len(added) == self.length and hashlib.sha256(added).hexdigest() == self.block and patched


#: How much of a file before the place a write adds to identifies it (`AppendNote.before`).
BEFORE = 4096


def note_append(spool: Path, note: AppendNote) -> int:
    """Note in `spool`, on the disk, a write about to be made at the end of its cassette's file; returns the
    spool's size before, for `take_back` when the write fails."""
    record = ["appending", 0, note.inode, note.at, note.before, note.length, note.block, note.patch_at, note.patch]
    data = msgpack.packb(record, use_bin_type=True)
    try:
        fd = os.open(spool, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            try:
                write_all(fd, data)
            except OSError:
                os.ftruncate(fd, size)
                raise
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise CassetteError(f"{spool}: cannot write: {exc.strerror or exc}") from None
    return size


def write_all(fd: int, data: bytes, at: int | None = None) -> None:
    """Write all of `data` to `fd` (at offset `at`, or where the file's position or `O_APPEND` puts it); a
    full disk takes part of a write, then none: that is `ENOSPC`."""
    with memoryview(data) as view:
        done = 0
        while done < len(data):
            piece = view[done:]
            written = os.write(fd, piece) if at is None else os.pwrite(fd, piece, at + done)
            if not written:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            done += written


def take_back(spool: Path, size: int) -> None:
    """Cut a spool back to `size`: the note of a write that failed, and was taken back, goes too (else a later
    write at the same place would look like that one cut short)."""
    with contextlib.suppress(OSError):
        os.truncate(spool, size)


@dataclass(slots=True)
class Spooled:
    """What a spool holds: its streams (see `read_spool`), and the notes of writes at the end of its cassette."""

    streams: list[SpooledStream]
    appends: list[AppendNote]


def read_spool(path: Path) -> Spooled:
    """The streams a spool holds that have a response head: those that ended, in the order they ended,
    then (when no running recorder holds it) those cut off, in the order they began; and its append notes."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CassetteError(f"{path}: no such spool") from None
    except OSError as exc:
        raise CassetteError(f"{path}: cannot read: {exc.strerror or exc}") from None
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=max(len(raw), 1024))
    unpacker.feed(raw)
    records = iter(unpacker)
    header = next(records, None)
    if header is None:
        return Spooled([], [])  # created a moment ago: its writer has not written the header yet
    if not isinstance(header, dict) or header.get("format") != _MAGIC:
        raise CassetteFormatError(f"{path}: not an sse-tape spool")
    if header.get("version") != _VERSION:
        raise CassetteFormatError(f"{path}: spool version {header.get('version')!r}: upgrade sse-tape")
    cassette = cassette_of(path)
    if cassette is not None and header.get("cassette") != cassette.name:
        raise CassetteFormatError(f"{path}: the spool of {header.get('cassette')!r}, not of {cassette.name!r}")
    streams: dict[int, SpooledStream] = {}
    ended: list[int] = []
    appends: list[AppendNote] = []
    while True:
        try:
            record = next(records)
        except StopIteration:
            break
        except (ValueError, msgpack.UnpackException):
            break  # a record cut short or garbled by a crash: what came before it stands
        _apply(record, streams, ended, appends, path)
    live = _held(path)
    order = ended + ([] if live else [n for n in streams if n not in ended])
    return Spooled([streams[n] for n in order if streams[n].status is not None], appends)


def _apply(
    record: Any, streams: dict[int, SpooledStream], ended: list[int], appends: list[AppendNote], path: Path
) -> None:
    try:
        kind, n, *rest = record
        if kind == "appending":
            inode, at, before, length, block, patch_at, patch = rest
            appends.append(
                AppendNote(int(inode), int(at), str(before), int(length), str(block), int(patch_at), bytes(patch))
            )
        elif kind == "start":
            recorded_at, method, url_path, query, headers, body = rest
            pairs = [(str(k), str(v)) for k, v in headers]
            if n in streams and n in ended:  # written again whole: it ends where its new end is
                ended.remove(n)
            streams[n] = SpooledStream(str(recorded_at), str(method), str(url_path), str(query), pairs, bytes(body))
        elif kind == "head":
            status, headers = rest
            streams[n].status, streams[n].headers = int(status), [(str(k), str(v)) for k, v in headers]
        elif kind == "chunk":
            t, data = rest
            streams[n].chunks.append((float(t), bytes(data)))
        elif kind == "fault":
            spec, what = rest
            streams[n].injected.append((str(spec), str(what)))
        elif kind == "replaces":
            (fingerprint,) = rest
            streams[n].replaces.append(str(fingerprint))
        elif kind == "end":
            end, duration = rest
            streams[n].end, streams[n].duration = str(end), float(duration)
            ended.append(n)
    except (ValueError, TypeError, KeyError) as exc:
        raise CassetteFormatError(f"{path}: a record is malformed ({exc})") from None
