"""The spool: the append-only file a recorder writes each stream to as it arrives.

Adding to a cassette means writing a new file, so a recorder does not do that
per interaction. It writes each request, response head and chunk to a spool
beside the cassette (`session.toml.<id>.spool`) the moment it has them, before
the client gets them, and appends what it recorded to the cassette when the
session ends, then removes the spool. A session that is killed leaves its
spool behind: every chunk that reached a client is in it, and a stream cut off
is there as far as it got. Loading the cassette reads such a spool too (its
unfinished streams marked interrupted), and the next write of the cassette
takes them in and removes the spool.

The file is a stream of MessagePack values: a header map, then one array per
record: `["start", n, recorded_at, method, path, query, headers, body]`,
`["head", n, status, headers]`, `["chunk", n, t, data]`,
`["end", n, end, duration]`; `n` numbers the streams of the session. A writer
holds an exclusive lock on its spool, so a spool nobody holds was left by a
session that is over. A record cut short by a crash or a full disk ends the
stream of records; everything before it is read.
"""

from __future__ import annotations

import fcntl
import glob
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from ._exceptions import CassetteError, CassetteFormatError
from .cassette import SUFFIXES, Chunk, End, Headers, Interaction, Request, Response

__all__ = ["SpoolWriter", "cassette_of", "read_spool", "spools_of"]

_MAGIC = "sse-tape-spool"
_VERSION = 1


def spools_of(cassette: Path, *, stale: bool = False) -> list[Path]:
    """The spools recorders wrote beside `cassette`; with `stale`, only those no running recorder holds."""
    found = sorted(cassette.parent.glob(glob.escape(cassette.name) + ".*.spool"))
    return [p for p in found if not _held(p)] if stale else found


def cassette_of(spool: Path) -> Path | None:
    """The cassette a spool belongs to: `session.toml` for `session.toml.<id>.spool`."""
    name, _, rest = spool.name.rpartition(".spool")[0].rpartition(".")
    return spool.with_name(name) if name and rest and Path(name).suffix in SUFFIXES else None


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


class SpoolWriter:
    """Writes one recording session's streams to a new spool beside `cassette`.

    The spool is created, locked and written to at once, so a folder that
    cannot be written is an error before anything is recorded. Each write
    goes to the operating system before the method returns (a killed process
    loses none of it); `sync` also puts it on the disk. A failed write raises
    `CassetteError`, and every later write raises it again: the spool keeps
    what it had.
    """

    def __init__(self, cassette: Path) -> None:
        self.path = cassette.with_name(f"{cassette.name}.{os.getpid()}-{secrets.token_hex(3)}.spool")
        self.failed: str | None = None
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise CassetteError(f"{cassette}: cannot write beside it: {exc.strerror or exc}") from None
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            self._write({"format": _MAGIC, "version": _VERSION, "cassette": cassette.name})
            os.fsync(self._fd)
        except (CassetteError, OSError) as exc:
            self.close(remove=True)
            raise CassetteError(
                f"{cassette}: cannot write beside it: {getattr(exc, 'strerror', None) or exc}"
            ) from None

    def start(self, n: int, request: Request, recorded_at: str) -> None:
        """A stream begins: its request."""
        headers = [list(h) for h in request.headers]
        self._write(["start", n, recorded_at, request.method, request.path, request.query, headers, request.body])

    def head(self, n: int, status: int, headers: Headers) -> None:
        """The response head of stream `n`."""
        self._write(["head", n, status, [list(h) for h in headers]])

    def chunk(self, n: int, chunk: Chunk) -> None:
        """A piece of stream `n`'s body, as it arrived."""
        self._write(["chunk", n, chunk.t, chunk.data])

    def end(self, n: int, end: End, duration: float) -> None:
        """Stream `n` is over: how, and when."""
        self._write(["end", n, str(end), duration])

    def sync(self) -> None:
        """Put everything written so far on the disk."""
        if self.failed is None:
            os.fsync(self._fd)

    def close(self, *, remove: bool) -> None:
        """Close the spool (releasing its lock); remove it when what it holds is safe elsewhere."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if remove:
            self.path.unlink(missing_ok=True)

    def _write(self, record: Any) -> None:
        if self.failed is not None:
            raise CassetteError(self.failed)
        data = msgpack.packb(record, use_bin_type=True)
        try:
            written = os.write(self._fd, data)
            if written != len(data):  # a full disk takes part of a write
                raise OSError(28, os.strerror(28))
        except OSError as exc:
            self.failed = f"{self.path}: cannot write: {exc.strerror or exc}"
            raise CassetteError(self.failed) from None


@dataclass(slots=True)
class _Stream:
    request: Request
    recorded_at: str
    status: int | None = None
    headers: Headers = ()
    chunks: list[Chunk] = field(default_factory=list)
    end: End | None = None
    duration: float | None = None

    def interaction(self) -> Interaction | None:
        if self.status is None:
            return None  # no response head ever came
        end = self.end or End.INTERRUPTED
        last = self.chunks[-1].t if self.chunks else 0.0
        duration = None if end is End.COMPLETE else (self.duration if self.duration is not None else last)
        return Interaction(
            self.request, Response(self.status, self.headers, tuple(self.chunks), end, duration), self.recorded_at
        )


def read_spool(path: Path) -> list[Interaction]:
    """The interactions a spool holds: those that ended, in the order they ended, then (when no running
    recorder holds it) those cut off, marked interrupted, in the order they began."""
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
        return []  # created a moment ago: its writer has not written the header yet
    if not isinstance(header, dict) or header.get("format") != _MAGIC:
        raise CassetteFormatError(f"{path}: not an sse-tape spool")
    if header.get("version") != _VERSION:
        raise CassetteFormatError(f"{path}: spool version {header.get('version')!r}: upgrade sse-tape")
    streams: dict[int, _Stream] = {}
    ended: list[int] = []
    while True:
        try:
            record = next(records)
        except StopIteration:
            break
        except (ValueError, msgpack.UnpackException):
            break  # a record cut short or garbled by a crash: what came before it stands
        _apply(record, streams, ended, path)
    live = _held(path)
    order = ended + ([] if live else [n for n in streams if n not in ended])
    return [i for n in order if (i := streams[n].interaction()) is not None]


def _apply(record: Any, streams: dict[int, _Stream], ended: list[int], path: Path) -> None:
    try:
        kind, n, *rest = record
        if kind == "start":
            recorded_at, method, url_path, query, headers, body = rest
            request = Request(method, url_path, query, tuple((str(k), str(v)) for k, v in headers), bytes(body))
            streams[n] = _Stream(request, str(recorded_at))
        elif kind == "head":
            status, headers = rest
            streams[n].status, streams[n].headers = int(status), tuple((str(k), str(v)) for k, v in headers)
        elif kind == "chunk":
            t, data = rest
            streams[n].chunks.append(Chunk(float(t), bytes(data)))
        elif kind == "end":
            end, duration = rest
            streams[n].end, streams[n].duration = End(end), float(duration)
            ended.append(n)
    except (ValueError, TypeError, KeyError) as exc:
        raise CassetteFormatError(f"{path}: a record is malformed ({exc})") from None
