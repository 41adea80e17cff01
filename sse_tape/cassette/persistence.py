"""Cassettes kept in files: loaded, saved and appended to, under a lock on their folder, with the spools
killed recording sessions left beside them.

A recorder writes each stream to a spool beside the cassette (`session.toml.<id>.spool`, see `spools`) and
appends it to the cassette when its session ends. A spool left by a killed session is part of its cassette:
loading the cassette reads it too, and the next write of the cassette takes its interactions in and
removes it; a whole answer the spool notes as taking the place of a recording cut short goes in that
recording's place (found by `Interaction.fingerprint`). An interaction taken from a spool notes the spool's
id (`spool = "..."`), and a file written anew names every spool its write removes (`spools = [...]`, the
only record of a spool whose one recording cut short another spool's whole answer took the place of), so
that a spool whose removal a crash cut short is never read twice. Loads share a lock on the folder; writes
hold it alone.

A save, and a write anew, is atomic: a temporary file in the same folder, then a rename. An append writes
at the end of the file in place, with no copy of it (a cassette bigger than the free space can be appended
to), after a spool notes it (`spools.AppendNote`): a load after a crash in its middle reads the file as it
was, and the spools, which hold what was being added.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from .._exceptions import CassetteError, CassetteFormatError, CassetteNotFoundError
from . import msgpack
from .discovery import check_cassette_path
from .document import head_to_doc, interaction_to_doc, interactions_from_doc, settings_from_doc
from .model import Chunk, End, Injection, Interaction, Request, Response
from .serializers import decode, encode, encoding_of
from .spools import (
    BEFORE,
    AppendNote,
    Spooled,
    SpooledStream,
    SpoolWriter,
    note_append,
    read_spool,
    spool_id,
    spools_of,
    take_back,
    write_all,
)
from .upgrades import upgrade

__all__ = ["Cassette", "append_interactions"]

# What identifies a file's content without reading it: inode, size, modification time.
_Stamp = tuple[int, int, int]


@dataclass(slots=True)
class Cassette:
    """An ordered list of interactions, usually backed by a file."""

    interactions: list[Interaction] = field(default_factory=list)
    path: Path | None = None
    description: str | None = None
    """What the cassette holds, for people."""
    match_on: tuple[str, ...] | None = None
    """The matchers a request must satisfy to get a recording here, by name (`match` in the file); None: the
    server's default. Which names there are is for `matching` to say, when the cassette is matched."""
    ignore_body_fields: tuple[str, ...] | None = None
    """Dotted paths into JSON bodies left out when comparing them; None: the server's default."""
    _stamp: _Stamp | None = field(default=None, init=False, repr=False, compare=False)
    # Spools of killed sessions found with the file (to remove at its next write), and the interactions
    # of those the file does not hold yet, each with its spool's id.
    _spools: list[Path] = field(default_factory=list, repr=False, compare=False)
    _pending: list[tuple[Interaction, str]] = field(default_factory=list, repr=False, compare=False)
    # Whether the next write must write the file anew, not only add at its end: one of those sits in the
    # place of a recording cut short that the file holds, or that another spool holds (whose id then no
    # interaction notes: the file written anew names it), or one such was removed.
    _anew: bool = field(default=False, repr=False, compare=False)
    # The interactions the file holds, in its order, as this cassette last read or wrote it: a file written
    # anew keeps the document of each that is still here as it was (with its spool note).
    _filed: list[Interaction] = field(default_factory=list, repr=False, compare=False)
    # How much of the file is the cassette, when a write at its end was cut short (see `spools.AppendNote`):
    # the next write cuts the rest off.
    _valid: int | None = field(default=None, repr=False, compare=False)
    # Whether the TOML file holds its interactions as an inline array, which tables cannot be added after.
    _inline: bool = field(default=False, repr=False, compare=False)

    def __iter__(self) -> Iterator[Interaction]:
        return iter(self.interactions)

    def __len__(self) -> int:
        return len(self.interactions)

    @property
    def name(self) -> str:
        """A short name for messages: the file name, or `<memory>`."""
        return self.path.name if self.path else "<memory>"

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Cassette:
        """Read a cassette file, and the spools killed recording sessions left beside it.

        The suffix says which encoding. Raises `CassetteNotFoundError` when
        there is neither file nor spool, and `CassetteFormatError`, naming the
        file and the problem, when it is truncated, corrupt, not a cassette,
        or written by a newer sse-tape.
        """
        path = Path(path)
        encoding_of(path)
        if not path.parent.is_dir():
            raise CassetteNotFoundError(f"{path}: no such cassette")
        with _folder_lock(path, shared=True):
            return cls._load(path)

    @classmethod
    def _load(cls, path: Path) -> Cassette:
        spools = spools_of(path, stale=True)
        held: dict[Path, Spooled | CassetteError] = {}
        for spool in spools:
            try:
                held[spool] = read_spool(spool)
            except CassetteError as exc:  # an error only if the file does not hold it already
                held[spool] = exc
        absorbed: set[str] = set()
        valid: int | None = None
        if spools and not path.exists():
            cassette = cls(path=path)
        else:
            raw, stamp = _read(path)
            # A write at the file's end that a crash cut short: the file is what it was before it.
            for spooled in held.values():
                for note in spooled.appends if isinstance(spooled, Spooled) else ():
                    if note.inode == stamp[0] and note.whole(raw) is False:
                        valid = min(valid if valid is not None else note.at, note.at)
            raw = raw if valid is None else raw[:valid]
            try:
                with _collector_paused():
                    doc = upgrade(decode(raw, encoding_of(path)))
                    interactions, absorbed = interactions_from_doc(doc, binary=path.suffix == ".msgpack")
                    settings = settings_from_doc(doc)
            except CassetteFormatError as exc:
                raise CassetteFormatError(f"{path}: {exc}") from None
            cassette = cls(interactions, path, **settings)
            cassette._stamp, cassette._filed, cassette._valid = stamp, list(interactions), valid
            cassette._inline = path.suffix == ".toml" and _INLINE_INTERACTIONS.search(raw) is not None
        cassette._spools = spools
        for spool in spools:
            sid = spool_id(spool)
            if sid not in absorbed:  # a spool the file holds already was only not removed yet
                spooled = held[spool]
                if isinstance(spooled, CassetteError):
                    raise spooled
                for stream in spooled.streams:
                    cassette._recover(_from_spool(stream), sid, stream.replaces)
        return cassette

    def _recover(self, interaction: Interaction, sid: str, replaces: list[str]) -> None:
        """Add an interaction from a killed session's spool: at the end, or, when it is a whole answer
        recorded to take the place of recordings cut short (`replaces`, their fingerprints), in the place of
        the first of them, wherever it is now, and the others removed. When none has one of those
        fingerprints any more (the file was edited since), it goes at the end: nothing recorded is lost."""
        found: dict[str, int] = {}
        if replaces and interaction.response.end is End.COMPLETE:
            for n, old in enumerate(self.interactions):
                if old.response.end is not End.COMPLETE and (fingerprint := old.fingerprint()) in replaces:
                    found.setdefault(fingerprint, n)
        if not found:
            self.interactions.append(interaction)
            self._pending.append((interaction, sid))
            return
        places = sorted(found.values())
        olds = [self.interactions[n] for n in places]
        self.interactions[places[0]] = interaction
        for n in reversed(places[1:]):
            del self.interactions[n]
        # Those from spools too are no longer what the spools add: the first's entry becomes this one's.
        pending = [next((k for k, (i, _) in enumerate(self._pending) if i is old), None) for old in olds]
        for k in pending:
            # One the file holds goes only by writing the file anew, and so does one from another spool,
            # which the file must then name (no interaction notes it any more).
            self._anew |= k is None or self._pending[k][1] != sid
        if pending[0] is None:
            self._pending.append((interaction, sid))
        else:
            self._pending[pending[0]] = (interaction, sid)
        for k in sorted((k for k in pending[1:] if k is not None), reverse=True):
            del self._pending[k]

    def save(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write the cassette atomically, to `path` or to where it was loaded from."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise CassetteError("this cassette has no path: give one to save()")
        suffix = encoding_of(target)
        with _folder_lock(target):
            own = self.path is not None and _same_file(target, self.path)
            # Saved in place, what came from spools notes them, and they go; saved elsewhere, they stay.
            spooled = {id(i): sid for i, sid in self._pending} if own else {}
            doc = {
                **self._head(),
                **_removing([spool_id(p) for p in self._spools] if own else []),
                "interactions": [
                    interaction_to_doc(i, binary=suffix == ".msgpack", spool=spooled.get(id(i)))
                    for i in self.interactions
                ],
            }
            self._stamp = _write(target, encode(doc, suffix))
            self._filed, self._valid, self._inline = list(self.interactions), None, False
            if own:
                self._absorbed()
        self._spools, self._pending = [], []
        self.path = target
        return target

    def append(
        self,
        interactions: Iterable[Interaction],
        *,
        spool: Path | None = None,
        replacing: Iterable[tuple[Sequence[Interaction], Interaction]] = (),
    ) -> None:
        """Add interactions to the end of this cassette's file, creating it if need be.

        Under an exclusive lock on the folder, so that appenders in several
        processes or threads lose nothing. The new interactions are written at
        the file's end, in place: an append costs the same whatever the
        cassette's size, and needs room for them alone, never for a copy of the
        file. A spool notes the write first (`spool`, or one made for it; see
        `spools.AppendNote`), so that a crash in its middle leaves a file that
        loads as it was, with the spools, which hold what was being added; a
        write that fails (a full disk) is taken back. When another writer
        changed the file, it is read again first; a file that cannot be read
        is left alone and the error raised. Interactions read from spools go
        into the file first, and those spools are removed; so is `spool`, the
        spool `interactions` come from (a recorder's own), whose id they note.
        A TOML file whose interactions are an inline array, and a MessagePack
        file whose header cannot count them (see `msgpack`), are written anew.

        Each pair in `replacing` puts an interaction (from `spool` too) in the
        place of the first of some the cassette holds (streams of one request
        cut short, recorded again whole), and removes the others; when the
        file holds none of them any more, it is added at the end. The file
        is then written anew, in the same atomic write: the old interactions
        are in the file until the new one is. So it is when a killed session's
        spool held such a whole answer: loading put it in its old ones' place.
        """
        added = list(interactions)
        swaps = list(replacing)
        path = self.path
        if path is None:
            raise CassetteError("this cassette has no path: give it one before appending")
        suffix = encoding_of(path)
        with _folder_lock(path):
            if path.exists() and _stamp_of(path) != self._stamp:
                again = Cassette._load(path)  # written by someone else since: read it whole, and check it
                self.interactions, self._stamp = again.interactions, again._stamp
                self.description, self.match_on = again.description, again.match_on
                self.ignore_body_fields = again.ignore_body_fields
                self._spools, self._pending, self._anew = again._spools, again._pending, again._anew
                self._filed, self._valid, self._inline = again._filed, again._valid, again._inline
            elif not path.exists():
                self._filed = []  # removed since: no document of it is left to keep
            sid = spool_id(spool) if spool is not None else None
            new = [*self._pending, *((i, sid) for i in added)]
            if swaps or self._anew:
                added += self._rewrite(path, suffix, swaps, added, sid)
            elif new:
                docs = [interaction_to_doc(i, binary=suffix == ".msgpack", spool=s) for i, s in new]
                if not path.exists():
                    self._stamp = _write(path, encode({**self._head(), "interactions": docs}, suffix))
                elif not self._add_at_end(path, suffix, docs, spool):
                    raw = _read(path)[0][: self._valid]  # a file that cannot grow in place: written anew
                    doc = decode(raw, suffix)
                    doc["interactions"] = [*doc.pop("interactions", []), *docs]
                    self._stamp, self._inline = _write(path, encode(doc, suffix)), False
                self._filed += [i for i, _ in new]
                self._valid = None
            self._absorbed()
            if spool is not None:
                spool.unlink(missing_ok=True)  # inside the lock: no reader sees the file and the spool both
        self.interactions.extend(added)

    def _add_at_end(self, path: Path, suffix: str, docs: list[dict[str, Any]], spool: Path | None) -> bool:
        """Write interaction documents at the end of the file, in place, noted first in `spool` (or a spool made
        for the note); False, having written nothing, when the file cannot grow so."""
        if suffix == ".toml" and self._inline:
            return False
        try:
            with path.open("r+b") as f:
                end = self._valid if self._valid is not None else os.fstat(f.fileno()).st_size
                patch_at, patch, unpatch = 0, b"", b""
                if suffix == ".msgpack":
                    tail = msgpack.tail(f)
                    header = tail.header(tail.count + len(docs)) if tail is not None else None
                    if tail is None or header is None:
                        return False
                    patch_at, patch, unpatch = tail.at, header, tail.header(tail.count) or b""
                    block = b"".join(map(msgpack.encode, docs))
                else:
                    f.seek(max(end - 1, 0))
                    ends_a_line = end == 0 or f.read(1) == b"\n"
                    block = (b"" if ends_a_line else b"\n") + encode({"interactions": docs}, suffix)
                f.seek(max(end - BEFORE, 0))
                before = f.read(end - max(end - BEFORE, 0))
                inode = os.fstat(f.fileno()).st_ino
                note = AppendNote(inode, end, _sha(before), len(block), _sha(block), patch_at, patch)
                self._stamp = self._noted_write(f, note, block, unpatch, spool)
        except OSError as exc:
            raise CassetteError(f"{path}: cannot write: {exc.strerror or exc}") from None
        return True

    def _noted_write(self, f: BinaryIO, note: AppendNote, block: bytes, unpatch: bytes, spool: Path | None) -> _Stamp:
        """Note the write in a spool, then make it: taken back if it fails (`unpatch`: what `note.patch` goes
        in the place of). Returns the file's stamp after."""
        assert self.path is not None
        own = None
        if spool is None:
            own = SpoolWriter(self.path)
            spool = own.path
        try:
            noted = note_append(spool, note)
            fd = f.fileno()
            os.ftruncate(fd, note.at)  # what a write cut short left, if any
            try:
                write_all(fd, block, note.at)
                os.fsync(fd)
                if note.patch:
                    write_all(fd, note.patch, note.patch_at)
                    os.fsync(fd)
            except OSError:
                if note.patch:
                    with contextlib.suppress(OSError):
                        write_all(fd, unpatch, note.patch_at)
                os.ftruncate(fd, note.at)  # a shorter file needs no room
                take_back(spool, noted)
                raise
            return _stamp_of_fd(fd)
        finally:
            if own is not None:
                own.close(remove=True)

    def _rewrite(
        self,
        path: Path,
        suffix: str,
        swaps: list[tuple[Sequence[Interaction], Interaction]],
        added: list[Interaction],
        sid: str | None,
    ) -> list[Interaction]:
        """Write the file anew: each swap's new interaction in the place of the first of its old ones that is
        here (the others removed), what spools add where this cassette holds it (in the place of recordings
        cut short, or after the file's), then `added`; returns the new interactions that found no place,
        written after `added`."""
        binary = suffix == ".msgpack"
        # A TOML document's chunks may stay `TextTables`: they are written by column, as fast as a save.
        doc = decode(_read(path)[0][: self._valid], suffix) if path.exists() else self._head()
        # What the file holds of each interaction, kept as it is (none when the file is gone since).
        filed = {id(i): d for i, d in zip(self._filed, doc.get("interactions", []), strict=False)}
        # Each interaction the file does not hold yet, with the id of the spool it comes from.
        spooled: dict[int, str | None] = {id(i): s for i, s in self._pending}
        homeless: list[Interaction] = []
        # Where each is, found once: a stop that puts many whole answers in place costs one pass, not one each.
        where = {id(i): n for n, i in enumerate(self.interactions)}
        put: dict[int, Interaction] = {}
        gone: set[int] = set()
        for olds, new in swaps:
            places = sorted({at for old in olds if (at := _position(self.interactions, where, old)) is not None})
            places = [at for at in places if at not in gone and at not in put]
            if not places:
                homeless.append(new)  # another writer took them out meanwhile
                continue
            put[places[0]] = new
            gone.update(places[1:])
            spooled[id(new)] = sid
        self.interactions[:] = [put.get(n, i) for n, i in enumerate(self.interactions) if n not in gone]
        spooled.update((id(i), sid) for i in [*added, *homeless])
        written = [*self.interactions, *added, *homeless]
        doc.pop("spools", None)  # what the write before removed is gone, or in `self._spools` again
        doc.pop("interactions", None)  # last, where a write at the end adds to them
        doc.update(_removing([*map(spool_id, self._spools), *([] if sid is None else [sid])]))
        doc["interactions"] = [
            filed[id(i)]
            if id(i) in filed and id(i) not in spooled
            else interaction_to_doc(i, binary=binary, spool=spooled.get(id(i)))
            for i in written
        ]
        self._stamp = _write(path, encode(doc, suffix))
        self._filed, self._valid, self._inline = written, None, False
        return homeless

    def _head(self) -> dict[str, Any]:
        """What a cassette file holds before its interactions: its format and its settings."""
        return head_to_doc(self.description, self.match_on, self.ignore_body_fields)

    def _absorbed(self) -> None:
        """The file now holds what the spools read with it held: remove them."""
        for spool in self._spools:
            spool.unlink(missing_ok=True)
        self._spools, self._pending, self._anew = [], [], False


def append_interactions(path: str | os.PathLike[str], interactions: Iterable[Interaction]) -> int:
    """Add interactions to the end of a cassette file, creating it if need be; returns how many it holds.

    See `Cassette.append`: locked, atomic, and a file that cannot be read is left alone.
    """
    path = check_cassette_path(path)
    cassette = Cassette.load(path) if path.exists() else Cassette(path=path)
    cassette.append(interactions)
    return len(cassette)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# A hand-written `interactions = [...]`: array-of-tables headers cannot follow it.
_INLINE_INTERACTIONS = re.compile(rb'^[ \t]*"?interactions"?[ \t]*=', re.MULTILINE)


def _read(path: Path) -> tuple[bytes, _Stamp]:
    try:
        with path.open("rb") as f:
            return f.read(), _stamp_of_fd(f.fileno())
    except FileNotFoundError:
        raise CassetteNotFoundError(f"{path}: no such cassette") from None
    except IsADirectoryError:
        raise CassetteError(f"{path}: is a folder, not a cassette file") from None
    except OSError as exc:
        raise CassetteError(f"{path}: cannot read: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while a load builds its objects, and left as it was found.

    They make no cycles, so a pass finds nothing to free among them, yet a big cassette's tens of thousands
    of chunks set off passes that walk the whole heap, which the load would pay for.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _stamp_of(path: Path) -> _Stamp:
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


def _stamp_of_fd(fd: int) -> _Stamp:
    st = os.fstat(fd)
    return st.st_ino, st.st_size, st.st_mtime_ns


@contextlib.contextmanager
def _folder_lock(path: Path, *, shared: bool = False) -> Iterator[None]:
    """A lock on the cassette's folder (the file is replaced by renames, the folder stays): shared by
    readers, held alone by a writer."""
    try:
        if not shared:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError as exc:
        raise CassetteError(f"{path}: cannot {'read' if shared else 'write'}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _position(interactions: list[Interaction], where: dict[int, int], wanted: Interaction) -> int | None:
    """Where `wanted` is in `interactions` (`where`: the position of each, by id): the same object, else (read
    again since) an equal one."""
    found = where.get(id(wanted))
    if found is None:
        found = next((n for n, i in enumerate(interactions) if i == wanted), None)
    return found


def _removing(spools: list[str]) -> dict[str, Any]:
    """What a file written anew notes of the spools its write removes once it is in place: their ids. A crash
    before their removal leaves them; a load then knows them for taken in, though no interaction may note one
    (its one recording cut short had a whole answer from another spool put in its place)."""
    return {"spools": spools} if spools else {}


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == b.resolve()


def _from_spool(stream: SpooledStream) -> Interaction:
    """An interaction from a spooled stream; one its spool stops short of is marked interrupted."""
    request = Request(stream.method, stream.path, stream.query, tuple(stream.request_headers), stream.body)
    chunks = tuple(Chunk(t, data) for t, data in stream.chunks)
    try:
        end = End(stream.end) if stream.end is not None else End.INTERRUPTED
    except ValueError:
        end = End.INTERRUPTED
    last = chunks[-1].t if chunks else 0.0
    duration = None if end is End.COMPLETE else (stream.duration if stream.duration is not None else last)
    response = Response(stream.status or 0, tuple(stream.headers), chunks, end, duration)
    injected = tuple(Injection(fault, what) for fault, what in stream.injected)
    return Interaction(request, response, stream.recorded_at or None, injected)


def _write(target: Path, data: bytes) -> _Stamp:
    try:
        return _atomic_write(target, data)
    except OSError as exc:
        raise CassetteError(f"{target}: cannot write: {exc.strerror or exc}") from None


def _atomic_write(target: Path, data: bytes) -> _Stamp:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            # mkstemp makes the file private; give it the mode it had, or the usual one.
            try:
                mode = stat.S_IMODE(target.stat().st_mode)
            except FileNotFoundError:
                umask = os.umask(0o022)
                os.umask(umask)
                mode = 0o666 & ~umask
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            stamp = _stamp_of_fd(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return stamp
