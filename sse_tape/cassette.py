"""Cassettes: what crossed the wire, kept as raw byte chunks with their timing.

One model, two encodings chosen by the file's suffix:

- `.toml` (the default): readable and diffable, because people commit cassettes
  and review them. A chunk that is valid UTF-8 is stored as text, anything
  else as base64.
- `.msgpack`: compact and fast to load, with chunks as raw bytes.

A recorder writes each stream to a spool beside the cassette
(`session.toml.<id>.spool`, see `_spool`) and appends it to the cassette when
its session ends. A spool left by a killed session is part of its cassette:
loading the cassette reads it too, and the next write of the cassette takes
its interactions in and removes it; a whole answer the spool notes as taking
the place of a recording cut short goes in that recording's place (found by
`Interaction.fingerprint`). An interaction taken from a spool notes
the spool's id (`spool = "..."`), and a file written anew names every spool
its write removes (`spools = [...]`, the only record of a spool whose one
recording cut short another spool's whole answer took the place of), so that
a spool whose removal a crash cut short is never read twice. Loads share a
lock on the folder; writes hold it alone.

A cassette may carry settings for whoever replays it: a free-text
`description`, `match` (the parts of a request that must agree with a
recording, as in `match = ["method", "path"]`) and `ignore_body_fields`.
Options given to a server override them.

A TOML file of 4 KiB or more is parsed once per content: what `tomllib` made of its bytes is kept in a
cache outside the project, named by their SHA-256 (see `_toml_cache`), and read from there while the file
stays the same. A parse reads what sse-tape writes apart from `tomllib`, with its semantics (see `_toml.loads`).

`format_version` is an integer, separate from the package version. A file
written by a newer sse-tape is refused with a request to upgrade. Writes are
atomic: a temporary file in the same folder, then a rename.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import gc
import math
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any, cast

from . import _json, _toml, _toml_cache
from ._exceptions import CassetteError, CassetteFormatError, CassetteNotFoundError
from ._spool import SpooledStream, cassette_of, read_spool, spool_id, spools_of
from .sse import ServerSentEvent, SSEDecoder

# msgpack is imported where it is used: serving small TOML cassettes needs none of it (2 ms of CPU time).
__all__ = [
    "FORMAT_VERSION",
    "REDACTED",
    "Cassette",
    "Chunk",
    "End",
    "Injection",
    "Interaction",
    "MatchOn",
    "Recording",
    "Request",
    "Response",
    "append_interactions",
    "bundled_cassettes",
    "check_cassette_path",
    "find_cassettes",
    "storable_headers",
]

#: The cassette format this version writes, and the newest it reads.
FORMAT_VERSION = 1

SUFFIXES = (".toml", ".msgpack")

#: What a recording holds in place of a secret (see `redaction`); on replay it matches any value.
REDACTED = "<redacted>"

Headers = tuple[tuple[str, str], ...]


class End(StrEnum):
    """How a recorded response ended."""

    COMPLETE = "complete"
    """The server finished the response cleanly."""
    UPSTREAM_RESET = "upstream-reset"
    """The server reset or dropped the connection mid-response."""
    TIMEOUT = "timeout"
    """The server went silent for longer than the recorder's idle timeout."""
    CLIENT_GONE = "client-gone"
    """The client hung up before the response ended."""
    INTERRUPTED = "interrupted"
    """The recorder itself was stopped while the response was in flight."""


class MatchOn(StrEnum):
    """A part of the request that must agree with the recording."""

    METHOD = "method"
    PATH = "path"
    QUERY = "query"
    BODY = "body"


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of the response body as it was read, `t` seconds after the request was sent."""

    t: float
    data: bytes


# What a request's parsed body is before anyone asked for it.
_UNPARSED: Any = object()


@dataclass(frozen=True, slots=True)
class Request:
    """The request of an interaction. `query` is the raw query string, without the `?`."""

    method: str
    path: str
    query: str = ""
    headers: Headers = ()
    body: bytes = b""
    _json: Any = field(default=_UNPARSED, init=False, repr=False, compare=False)

    def json(self) -> Any:
        """The body parsed as JSON, or None when it is empty or not JSON.

        It is parsed once, when first asked for, and the same value is
        returned from then on (matching, shaping and faults all read it for
        each request): read it, and copy it before changing it.
        """
        if self._json is _UNPARSED:
            object.__setattr__(self, "_json", _parse_json(self.body))  # a cache: the request stays as it was
        return self._json

    def header(self, name: str) -> str | None:
        """The first value of a header, looked up case-insensitively."""
        return _first(self.headers, name)


@dataclass(frozen=True, slots=True)
class Response:
    """The response of an interaction.

    `duration` is when the response ended, in seconds since the request was
    sent: after the last chunk, or later when the stream went silent before
    it ended (a timeout, say). None means at the last chunk.
    """

    status: int = 200
    headers: Headers = ()
    chunks: tuple[Chunk, ...] = ()
    end: End = End.COMPLETE
    duration: float | None = None

    @property
    def end_time(self) -> float:
        """When the response ended, in seconds since the request was sent."""
        if self.duration is not None:
            return self.duration
        return self.chunks[-1].t if self.chunks else 0.0

    @property
    def body(self) -> bytes:
        """All the chunks joined."""
        return b"".join(chunk.data for chunk in self.chunks)

    def events(self) -> list[tuple[float, ServerSentEvent]]:
        """The SSE events in the body, each with the offset of the chunk that completed it."""
        decoder = SSEDecoder()
        return [(chunk.t, event) for chunk in self.chunks for event in decoder.feed(chunk.data)]

    def header(self, name: str) -> str | None:
        """The first value of a header, looked up case-insensitively."""
        return _first(self.headers, name)


def _first(headers: Headers, name: str) -> str | None:
    name = name.lower()
    return next((v for k, v in headers if k.lower() == name), None)


@dataclass(frozen=True, slots=True)
class Injection:
    """A fault that changed what the client was sent while the interaction was recorded: the fault as it was
    written (`error:at=2`) and what it did (`openai-chat error after event 2`)."""

    fault: str
    what: str


@dataclass(frozen=True, slots=True)
class Interaction:
    """One request and the response that answered it.

    `injected` notes the faults a recorder put on the client's copy of the
    stream (`sse-tape record --fault`); the response is what the upstream
    sent, whole.
    """

    request: Request
    response: Response
    recorded_at: str | None = None
    """When it was recorded, as an ISO 8601 timestamp."""
    injected: tuple[Injection, ...] = ()
    """The faults that acted on the stream its client got, in the order they were journaled."""

    def fingerprint(self) -> str:
        """A digest that tells this recording from any other, and that a write and a load of its cassette
        keep: of its request's method, path, query and body, when it was recorded, and its response's
        status, end, duration and timed chunks (not the headers, whose order a write may change). A recorder
        names by it, in its spool, the recording cut short that a whole answer takes the place of."""
        import hashlib  # here: only a recorder that replaces a recording, or the load after it, needs it

        req, resp = self.request, self.response
        digest = hashlib.sha256()
        fields = (req.method, req.path, req.query, self.recorded_at, resp.status, resp.end, resp.duration)
        parts = [repr(fields).encode(), req.body]
        for chunk in resp.chunks:
            parts += (repr(chunk.t).encode(), chunk.data)
        for part in parts:  # each with its length: no two lists of parts give the same bytes
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
        return digest.hexdigest()


# What identifies a file's content without reading it: inode, size, modification time.
_Stamp = tuple[int, int, int]


@dataclass(frozen=True, slots=True, eq=False)
class Recording:
    """A recorded interaction and where it came from; compared and hashed by identity."""

    interaction: Interaction = field(repr=False)
    cassette: str
    index: int
    """Its position in the cassette, from 1."""

    def __str__(self) -> str:
        req = self.interaction.request
        return f"{self.cassette} #{self.index} ({req.method} {req.path})"


@dataclass(slots=True)
class Cassette:
    """An ordered list of interactions, usually backed by a file."""

    interactions: list[Interaction] = field(default_factory=list)
    path: Path | None = None
    description: str | None = None
    """What the cassette holds, for people."""
    match_on: tuple[MatchOn, ...] | None = None
    """What a request must share with a recording here (`match` in the file); None: the server's default."""
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
        _suffix(path)
        if not path.parent.is_dir():
            raise CassetteNotFoundError(f"{path}: no such cassette")
        with _folder_lock(path, shared=True):
            return cls._load(path)

    @classmethod
    def _load(cls, path: Path) -> Cassette:
        spools = spools_of(path, stale=True)
        absorbed: set[str] = set()
        if spools and not path.exists():
            cassette = cls(path=path)
        else:
            raw, stamp = _read(path)
            try:
                with _collector_paused():
                    doc = _decode(raw, _suffix(path))
                    interactions, absorbed = _interactions_from_doc(doc, binary=path.suffix == ".msgpack")
                    settings = _settings_from_doc(doc)
            except _Invalid as exc:
                raise CassetteFormatError(f"{path}: {exc}") from None
            cassette = cls(interactions, path, **settings)
            cassette._stamp, cassette._filed = stamp, list(interactions)
        cassette._spools = spools
        for spool in spools:
            sid = spool_id(spool)
            if sid not in absorbed:  # a spool the file holds already was only not removed yet
                for stream in read_spool(spool):
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
        suffix = _suffix(target)
        with _folder_lock(target):
            own = self.path is not None and _same_file(target, self.path)
            # Saved in place, what came from spools notes them, and they go; saved elsewhere, they stay.
            spooled = {id(i): sid for i, sid in self._pending} if own else {}
            doc = {
                **self._head(),
                **_removing([spool_id(p) for p in self._spools] if own else []),
                "interactions": [
                    _interaction_to_doc(i, binary=suffix == ".msgpack", spool=spooled.get(id(i)))
                    for i in self.interactions
                ],
            }
            self._stamp = _write(target, _encode(doc, suffix))
            self._filed = list(self.interactions)
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
        processes or threads lose nothing; atomic, so a crash leaves the old
        or the new file. When the file is as this cassette last read or wrote
        it, its bytes are kept and only the new interactions are encoded: an
        append costs the same whatever the cassette's size. When another
        writer changed it, it is read again first; a file that cannot be read
        is left alone and the error raised. Interactions read from spools go
        into the file first, and those spools are removed; so is `spool`, the
        spool `interactions` come from (a recorder's own), whose id they note.

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
        suffix = _suffix(path)
        with _folder_lock(path):
            if path.exists() and _stamp_of(path) != self._stamp:
                again = Cassette._load(path)  # written by someone else since: read it whole, and check it
                self.interactions, self._stamp = again.interactions, again._stamp
                self.description, self.match_on = again.description, again.match_on
                self.ignore_body_fields = again.ignore_body_fields
                self._spools, self._pending, self._anew = again._spools, again._pending, again._anew
                self._filed = again._filed
            elif not path.exists():
                self._filed = []  # removed since: no document of it is left to keep
            sid = spool_id(spool) if spool is not None else None
            new = [*self._pending, *((i, sid) for i in added)]
            if swaps or self._anew:
                added += self._rewrite(path, suffix, swaps, added, sid)
            elif new:
                raw = _read(path)[0] if path.exists() else _encode(self._head(), suffix)
                docs = [_interaction_to_doc(i, binary=suffix == ".msgpack", spool=s) for i, s in new]
                self._stamp = _write(path, _appended(raw, docs, suffix))
                self._filed += [i for i, _ in new]
            self._absorbed()
            if spool is not None:
                spool.unlink(missing_ok=True)  # inside the lock: no reader sees the file and the spool both
        self.interactions.extend(added)

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
        if path.exists():
            doc = _decode(_read(path)[0], suffix)
            doc = doc if binary else _toml_cache.expand(doc)
        else:
            doc = self._head()
        # What the file holds of each interaction, kept as it is (none when the file is gone since).
        filed = {id(i): d for i, d in zip(self._filed, doc.get("interactions", []), strict=False)}
        # Each interaction the file does not hold yet, with the id of the spool it comes from.
        spooled: dict[int, str | None] = {id(i): s for i, s in self._pending}
        homeless: list[Interaction] = []
        for olds, new in swaps:
            places = sorted({at for old in olds if (at := _position(self.interactions, old)) is not None})
            if not places:
                homeless.append(new)  # another writer took them out meanwhile
                continue
            self.interactions[places[0]] = new
            for at in reversed(places[1:]):
                del self.interactions[at]
            spooled[id(new)] = sid
        spooled.update((id(i), sid) for i in [*added, *homeless])
        written = [*self.interactions, *added, *homeless]
        doc.pop("spools", None)  # what the write before removed is gone, or in `self._spools` again
        doc.update(_removing([*map(spool_id, self._spools), *([] if sid is None else [sid])]))
        doc["interactions"] = [
            filed[id(i)]
            if id(i) in filed and id(i) not in spooled
            else _interaction_to_doc(i, binary=binary, spool=spooled.get(id(i)))
            for i in written
        ]
        self._stamp = _write(path, _encode(doc, suffix))
        self._filed = written
        return homeless

    def _head(self) -> dict[str, Any]:
        """What a cassette file holds before its interactions: its format and its settings."""
        head: dict[str, Any] = {"format_version": FORMAT_VERSION}
        if self.description is not None:
            head["description"] = self.description
        if self.match_on is not None:
            head["match"] = [str(part) for part in self.match_on]
        if self.ignore_body_fields is not None:
            head["ignore_body_fields"] = list(self.ignore_body_fields)
        return head

    def _absorbed(self) -> None:
        """The file now holds what the spools read with it held: remove them."""
        for spool in self._spools:
            spool.unlink(missing_ok=True)
        self._spools, self._pending, self._anew = [], [], False


def storable_headers(headers: Headers) -> Headers:
    """Headers as a cassette holds them: as text. Bytes that were not UTF-8 on the wire (which aiohttp
    hands over as surrogate escapes) are read as Latin-1, as HTTP's older rules read them."""
    return tuple((_storable(name), _storable(value)) for name, value in headers)


def _storable(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("latin-1")
    return text


def append_interactions(path: str | os.PathLike[str], interactions: Iterable[Interaction]) -> int:
    """Add interactions to the end of a cassette file, creating it if need be; returns how many it holds.

    See `Cassette.append`: locked, atomic, and a file that cannot be read is left alone.
    """
    path = check_cassette_path(path)
    cassette = Cassette.load(path) if path.exists() else Cassette(path=path)
    cassette.append(interactions)
    return len(cassette)


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
    folder = packaged if packaged.is_dir() else Path(__file__).resolve().parent.parent / "cassettes"
    return find_cassettes([folder])


# --- encoding -------------------------------------------------------------------------


class _Invalid(Exception):
    """Raised inside this module; `Cassette.load` adds the file name."""


def check_cassette_path(path: str | os.PathLike[str]) -> Path:
    """The path, if its suffix names a cassette encoding; raises `CassetteError` otherwise.

    Recorders call it before they send anything, so that nothing is recorded into a file that cannot be written.
    """
    path = Path(path)
    _suffix(path)
    if path.exists() and not path.is_file():
        raise CassetteError(f"{path}: is not a file")
    return path


def _suffix(path: Path) -> str:
    if path.suffix not in SUFFIXES:
        raise CassetteError(f"{path}: unknown cassette type {path.suffix!r}: use .toml or .msgpack")
    return path.suffix


def _encode(doc: dict[str, Any], suffix: str) -> bytes:
    try:
        if suffix == ".msgpack":
            import msgpack

            packed: bytes = msgpack.packb(doc, use_bin_type=True)
            return packed
        return _toml.encode(doc)
    except UnicodeEncodeError as exc:  # text no file can hold, such as a lone surrogate
        raise CassetteError(f"cannot write {exc.object[max(exc.start - 20, 0) : exc.end + 20]!r}: not text") from None


def _decode(raw: bytes, suffix: str) -> Any:
    if suffix == ".msgpack":
        import msgpack

        try:
            return msgpack.unpackb(raw, raw=False, strict_map_key=True)
        except msgpack.ExtraData:
            raise _Invalid("not a MessagePack cassette (extra data after the document)") from None
        except (ValueError, RecursionError, msgpack.UnpackException) as exc:
            raise _Invalid(f"truncated or corrupt MessagePack ({exc})") from None
    if len(raw) < _toml_cache.MIN_SIZE:
        return _parse_toml(raw)
    name = _toml_cache.key(raw)
    doc = _toml_cache.get(name)
    if doc is None:
        doc = _parse_toml(raw)
        _toml_cache.put(name, doc)
    return doc


def _parse_toml(raw: bytes) -> Any:
    """What `tomllib` reads in the file (a stream's chunks may be `TextTables`: see `_toml.loads`)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Invalid(f"not a TOML file: invalid UTF-8 at byte {exc.start}") from None
    doc = _toml.loads(raw, _parse_toml_text)
    return doc if doc is not None else _parse_toml_text(text)


def _parse_toml_text(text: str) -> Any:
    import tomllib  # 4 ms to import: serving cassettes the parsed-TOML cache holds needs no parser

    _check_toml_depth(text)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _Invalid(f"truncated or corrupt TOML: {exc}") from None
    except (ValueError, RecursionError) as exc:  # a 5,000-digit number, say
        raise _Invalid(f"not a cassette TOML can hold: {str(exc).splitlines()[0][:120]}") from None


# What a cassette nests is shallow; a file nesting far deeper is refused before the parser walks into it
# (an array 500 deep recurses past Python's limit, 16,000 dotted key levels take a gigabyte).
_MAX_TOML_DEPTH = 32
# Strings and comments, each found as `"""[\s\S]*?"""` would find it but without a step back at every character
# (a multi-line basic string's escaped quote, `\"`, taken for no end of it).
_TOML_STRINGS = re.compile(
    r'"""[^"\\]*(?:(?:\\[\s\S]|"(?!""))[^"\\]*)*"""'
    r"|'''[^']*(?:'(?!'')[^']*)*'''"
    r'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
    r"|'[^'\n]*'"
    r"|#[^\n]*"
)
_TOML_KEYS = re.compile(r"^[ \t]*(?:\[\[?([^\]\n]*)|([^=\n\[]+)=)", re.MULTILINE)
_TOML_NESTING = re.compile(r"[\[\]{}]")
# A line with enough dots to hold a key nested too deep, found from its first dot: few lines need a closer look.
_MANY_DOTS = re.compile(rf"\.(?:[^.\n]*\.){{{_MAX_TOML_DEPTH - 1}}}")
# Table headers, when lines end at "\n" (or "\r\n") only; str.splitlines also ends them at these.
_HEADER_LINES = re.compile(r"\n[^\S\n]*\[[^\n]*")
_ODD_LINE_BREAKS = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def _check_toml_depth(text: str) -> None:
    bare = _TOML_STRINGS.sub('""', text)
    for dots in _MANY_DOTS.finditer(bare):
        key = _TOML_KEYS.match(bare, bare.rfind("\n", 0, dots.start()) + 1)
        if key and (key[1] or key[2] or "").count(".") >= _MAX_TOML_DEPTH:
            raise _Invalid(f"keys nest deeper than {_MAX_TOML_DEPTH} levels: not a cassette")
    if any(c in bare for c in _ODD_LINE_BREAKS) or bare.count("\r") != bare.count("\r\n"):
        values = "\n".join(line for line in bare.splitlines() if not line.lstrip().startswith("["))
    else:
        values = _HEADER_LINES.sub("\n", "\n" + bare)  # the same, in one pass
    depth = 0
    for mark in _TOML_NESTING.findall(values):
        depth += 1 if mark in "[{" else -1
        if depth > _MAX_TOML_DEPTH:
            raise _Invalid(f"values nest deeper than {_MAX_TOML_DEPTH} levels: not a cassette")


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
    of chunks set off passes that walk the whole heap: a fifth of the time of loading 31,000 chunks.
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


_INLINE_INTERACTIONS = re.compile(rb'^[ \t]*"?interactions"?[ \t]*=', re.MULTILINE)


def _appended(raw: bytes, docs: list[dict[str, Any]], suffix: str) -> bytes:
    """The bytes of a cassette file with these interaction documents added at its end."""
    if not docs:
        return raw
    if suffix == ".msgpack":
        doc = _decode(raw, suffix)
        doc["interactions"] = [*doc.get("interactions", []), *docs]
        return _encode(doc, suffix)
    if _INLINE_INTERACTIONS.search(raw):
        # A hand-written `interactions = [...]`: array-of-tables headers cannot follow it. Write it anew.
        doc = _toml_cache.expand(_decode(raw, suffix))
        doc["interactions"] = [*doc.get("interactions", []), *docs]
        return _encode(doc, suffix)
    # `[[interactions]]` tables may come at the end of any TOML document: the old bytes stay as they are.
    return raw + (b"" if raw.endswith(b"\n") else b"\n") + _toml.encode({"interactions": docs})


def _position(interactions: list[Interaction], wanted: Interaction) -> int | None:
    """Where `wanted` is in `interactions`: the same object, else (read again since) an equal one."""
    found = next((n for n, i in enumerate(interactions) if i is wanted), None)
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


# Where bytes go in a document: TOML keeps valid UTF-8 as text and the rest as base64;
# MessagePack keeps raw bytes. Chunks use the keys text/base64/bytes, the request body
# body/body_base64/body_bytes.
_CHUNK_KEYS = ("text", "base64", "bytes")
_BODY_KEYS = ("body", "body_base64", "body_bytes")


def _stored_bytes(data: bytes, keys: tuple[str, str, str], *, binary: bool) -> tuple[str, Any]:
    """The key and the value that hold `data` in a document."""
    text_key, b64_key, raw_key = keys
    if binary:
        return raw_key, data
    try:
        return text_key, data.decode("utf-8")
    except UnicodeDecodeError:
        return b64_key, base64.b64encode(data).decode("ascii")


def _get_bytes(doc: Mapping[str, Any], keys: tuple[str, str, str], where: str) -> bytes | None:
    text_key, b64_key, raw_key = keys
    if (raw := doc.get(raw_key)) is not None:
        if not isinstance(raw, bytes):
            raise _Invalid(f"{where}: {raw_key} must be bytes")
        return raw
    if (text := doc.get(text_key)) is not None:
        if not isinstance(text, str):
            raise _Invalid(f"{where}: {text_key} must be a string")
        return text.encode("utf-8")
    if (b64 := doc.get(b64_key)) is not None:
        try:
            return base64.b64decode(b64, validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise _Invalid(f"{where}: {b64_key} is not valid base64") from None
    return None


def _headers_to_doc(headers: Headers) -> dict[str, str | list[str]]:
    # A table reads better than a list of pairs; a repeated header keeps all its values in order.
    table: dict[str, str | list[str]] = {}
    for name, value in headers:
        if name not in table:
            table[name] = value
        else:
            prev = table[name]
            table[name] = [*prev, value] if isinstance(prev, list) else [prev, value]
    return table


def _interaction_to_doc(interaction: Interaction, *, binary: bool, spool: str | None = None) -> dict[str, Any]:
    req, resp = interaction.request, interaction.response
    request: dict[str, Any] = {"method": req.method, "path": req.path}
    if req.query:
        request["query"] = req.query
    request["headers"] = _headers_to_doc(req.headers)
    if req.body:
        key, value = _stored_bytes(req.body, _BODY_KEYS, binary=binary)
        request[key] = value
    response: dict[str, Any] = {"status": resp.status, "end": str(resp.end)}
    if resp.duration is not None:
        response["duration"] = resp.duration
    response["headers"] = _headers_to_doc(resp.headers)
    if binary:  # the bytes as they are, in one step for tens of thousands of chunks
        response["chunks"] = [{"t": c.t, "bytes": c.data} for c in resp.chunks]
    else:
        response["chunks"] = _text_chunks_to_doc(resp.chunks)
    doc: dict[str, Any] = {}
    if interaction.recorded_at:
        doc["recorded_at"] = interaction.recorded_at
    if spool:
        doc["spool"] = spool
    doc["request"] = request
    doc["response"] = response
    if interaction.injected:
        doc["injected"] = [{"fault": i.fault, "what": i.what} for i in interaction.injected]
    return doc


def _text_chunks_to_doc(chunks: tuple[Chunk, ...]) -> _toml.TextTables | list[dict[str, Any]]:
    """The chunks as the TOML writer takes them: as columns when each is text and has a float time (nearly
    always, and tens of thousands of them), else as tables."""
    times, texts = [c.t for c in chunks], [c.data for c in chunks]
    try:
        for data in texts:
            data.decode()
    except UnicodeDecodeError:
        return [_text_chunk_to_doc(c) for c in chunks]
    if not chunks or set(map(type, times)) != {float}:
        return [{"t": c.t, "text": c.data.decode()} for c in chunks]
    return _toml.TextTables(times, texts)


def _text_chunk_to_doc(chunk: Chunk) -> dict[str, Any]:
    key, value = _stored_bytes(chunk.data, _CHUNK_KEYS, binary=False)
    return {"t": chunk.t, key: value}


# --- decoding, with a precise message for anything out of place ------------------------


def _interactions_from_doc(doc: Any, *, binary: bool) -> tuple[list[Interaction], set[str]]:
    """The interactions of a cassette document, and the ids of the spools it took in (those its interactions
    note, and those it names); `binary`: a MessagePack document, whose chunks hold bytes (TOML's hold text)."""
    if not isinstance(doc, Mapping) or "format_version" not in doc:
        raise _Invalid("not an sse-tape cassette (no format_version)")
    version = doc["format_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise _Invalid(f"not an sse-tape cassette (format_version {version!r})")
    if version > FORMAT_VERSION:
        raise _Invalid(
            f"written by a newer sse-tape (cassette format {version}, this one reads up to "
            f"{FORMAT_VERSION}): upgrade sse-tape"
        )
    items = doc.get("interactions", [])
    if not isinstance(items, list):
        raise _Invalid("interactions must be a list")
    interactions = [_interaction_from_doc(item, f"interaction {n}", binary=binary) for n, item in enumerate(items, 1)]
    spools = {str(item["spool"]) for item in items if isinstance(item, Mapping) and "spool" in item}
    if "spools" in doc:
        spools.update(_strings(doc, "spools"))
    return interactions, spools


def _settings_from_doc(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The cassette's settings: description, match and ignore_body_fields, each checked."""
    settings: dict[str, Any] = {}
    if "description" in doc:
        settings["description"] = _field(doc, "description", str, "the cassette")
    if "match" in doc:
        words = _strings(doc, "match")
        bad = [w for w in words if w not in MatchOn.__members__.values()]
        if bad or not words:
            raise _Invalid(f"match {words!r}: give a list of parts from {', '.join(MatchOn)}")
        settings["match_on"] = tuple(dict.fromkeys(MatchOn(w) for w in words))
    if "ignore_body_fields" in doc:
        settings["ignore_body_fields"] = tuple(_strings(doc, "ignore_body_fields"))
    return settings


def _strings(doc: Mapping[str, Any], name: str) -> list[str]:
    value = doc[name]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Invalid(f"{name} must be a list of strings")
    return value


def _interaction_from_doc(doc: Any, where: str, *, binary: bool) -> Interaction:
    doc = _table(doc, where)
    req = _table(doc.get("request"), f"{where}: request")
    resp = _table(doc.get("response"), f"{where}: response")
    request = Request(
        method=_field(req, "method", str, f"{where}: request"),
        path=_field(req, "path", str, f"{where}: request"),
        query=_field(req, "query", str, f"{where}: request", ""),
        headers=_headers_from_doc(req.get("headers", {}), f"{where}: request.headers"),
        body=_get_bytes(req, _BODY_KEYS, f"{where}: request") or b"",
    )
    end_word = _field(resp, "end", str, f"{where}: response", "complete")
    try:
        end = End(end_word)
    except ValueError:
        raise _Invalid(f"{where}: response.end {end_word!r} is not one of {', '.join(End)}") from None
    chunks = resp.get("chunks", [])
    if not isinstance(chunks, list | _toml.TextTables):
        raise _Invalid(f"{where}: response.chunks must be a list")
    status = _field(resp, "status", int, f"{where}: response")
    if not 200 <= status <= 599:
        raise _Invalid(f"{where}: response.status {status} is not an HTTP status a response can end with (200-599)")
    if chunks and (status in (204, 304) or request.method.upper() == "HEAD"):
        what = f"a {status} response" if status in (204, 304) else "the answer to a HEAD request"
        raise _Invalid(f"{where}: {what} has no body, but chunks are recorded")
    response = Response(
        status=status,
        headers=_headers_from_doc(resp.get("headers", {}), f"{where}: response.headers"),
        chunks=_chunks_from_doc(chunks, where, binary=binary),
        end=end,
        duration=_number(resp, "duration", f"{where}: response", None),
    )
    recorded_at = doc.get("recorded_at")
    injected = doc.get("injected", [])
    if not isinstance(injected, list):
        raise _Invalid(f"{where}: injected must be a list")
    notes = []
    for n, item in enumerate(injected, 1):
        at = f"{where}: injected {n}"
        note = _table(item, at)
        notes.append(Injection(_field(note, "fault", str, at), _field(note, "what", str, at)))
    return Interaction(request, response, None if recorded_at is None else str(recorded_at), tuple(notes))


def _chunks_from_doc(docs: list[Any] | _toml.TextTables, where: str, *, binary: bool) -> tuple[Chunk, ...]:
    if isinstance(docs, _toml.TextTables):
        return _chunks_from_columns(docs, where)
    # What sse-tape writes, checked in line: a cassette holds tens of thousands of chunks.
    new, set_t, set_data, most = object.__new__, _set_t, _set_data, _MAX_SECONDS
    chunks: list[Chunk] = []
    add = chunks.append
    key = "bytes" if binary else "text"
    kind: type = bytes if binary else str
    for doc in docs:
        if type(doc) is dict and len(doc) == 2:
            t = doc.get("t")
            data = doc.get(key)
            if type(t) is float and 0.0 <= t < most and type(data) is kind:  # t neither NaN nor infinite
                chunk = new(Chunk)
                set_t(chunk, t)
                set_data(chunk, data if binary else cast(str, data).encode())
                add(chunk)
                continue
        add(_chunk_from_doc(doc, f"{where}: chunk {len(chunks) + 1}"))
    return tuple(chunks)


def _chunks_from_columns(columns: _toml.TextTables, where: str) -> tuple[Chunk, ...]:
    """The chunks of tables kept as columns by the parsed-TOML cache: each text there is UTF-8 already."""
    new, set_t, set_data, most = object.__new__, _set_t, _set_data, _MAX_SECONDS
    chunks: list[Chunk] = []
    add = chunks.append
    for t, data in zip(columns.t, columns.text, strict=True):
        if not 0.0 <= t < most:  # what the tables would be refused for, and with which message, is theirs to say
            return _chunks_from_doc(columns.tables(), where, binary=False)
        chunk = new(Chunk)
        set_t(chunk, t)
        set_data(chunk, data)
        add(chunk)
    return tuple(chunks)


# A Chunk made by setting its two slots: the frozen dataclass's __init__ sets each field by name through
# object.__setattr__, which was a third of the time a big cassette took to load. Nothing else happens in it.
_set_t, _set_data = vars(Chunk)["t"].__set__, vars(Chunk)["data"].__set__


def _chunk_from_doc(doc: Any, where: str) -> Chunk:
    doc = _table(doc, where)
    t = _number(doc, "t", where)
    if t is None or t < 0:
        raise _Invalid(f"{where}: t must be a number of seconds >= 0")
    data = _get_bytes(doc, _CHUNK_KEYS, where)
    if data is None:
        raise _Invalid(f"{where}: has no text, base64 or bytes")
    return Chunk(t, data)


def _headers_from_doc(doc: Any, where: str) -> Headers:
    doc = _table(doc, where)
    pairs: list[tuple[str, str]] = []
    for name, value in doc.items():
        if not isinstance(name, str):
            raise _Invalid(f"{where}: header name {name!r} is not text")
        if not _TOKEN.fullmatch(name):
            raise _Invalid(f"{where}: header name {name!r} is not a valid HTTP header name")
        if type(value) is str and not _BREAKS.search(value):  # one value, as nearly every header has
            pairs.append((name, value))
            continue
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str) for v in values):
            raise _Invalid(f"{where}: {name} must be a string or a list of strings")
        if any(_BREAKS.search(v) for v in values):
            raise _Invalid(f"{where}: {name} has a line break or NUL in its value, which would split the header")
        pairs.extend((name, v) for v in values)
    return tuple(pairs)


def _table(doc: Any, where: str) -> Mapping[str, Any]:
    if type(doc) is not dict and not isinstance(doc, Mapping):
        raise _Invalid(f"{where} is missing or not a table")
    return doc


_MISSING: Any = object()
# An HTTP header name (RFC 9110, token), and what a header value must not hold.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BREAKS = re.compile(r"[\r\n\x00]")
# Times in a cassette: a year of seconds is more than any stream lasts.
_MAX_SECONDS = 365 * 24 * 3600.0


def _field(doc: Mapping[str, Any], name: str, kind: type, where: str, default: Any = _MISSING) -> Any:
    value = doc.get(name, default)
    if value is _MISSING:
        raise _Invalid(f"{where}.{name} is missing")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _Invalid(f"{where}.{name} must be {'an integer' if kind is int else 'a string'}")
    return value


def _number(doc: Mapping[str, Any], name: str, where: str, default: Any = _MISSING) -> float | None:
    value = doc.get(name, default)
    if value is _MISSING:
        raise _Invalid(f"{where}.{name} is missing")
    if value is None:
        return None
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or (isinstance(value, float) and not math.isfinite(value))
    ):
        raise _Invalid(f"{where}.{name} must be a finite number")
    if not -_MAX_SECONDS < value < _MAX_SECONDS:  # compared as it is: a 400-digit int cannot even become a float
        raise _Invalid(f"{where}.{name} must be a number of seconds under a year")
    return float(value)


def _parse_json(body: bytes) -> Any:
    if not body:
        return None
    try:
        return _json.parse(body)
    except ValueError:  # not JSON, or nested too deep to compare as data
        return None
