"""What a cassette file holds, as a document of plain values (tables, arrays, strings, numbers, bytes) that
either serializer writes and reads: the model turned into it, and back with a precise message for anything
out of place.

Bytes are kept as text where they are valid UTF-8 and as base64 otherwise in a TOML document (`binary` false),
and as raw bytes in a MessagePack one (`binary` true).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Mapping
from typing import Any, cast

from .._exceptions import CassetteFormatError
from .model import Chunk, End, Headers, Injection, Interaction, Request, Response
from .toml import TextTables
from .upgrades import FORMAT_VERSION

__all__ = ["head_to_doc", "interaction_to_doc", "interactions_from_doc", "settings_from_doc"]


def head_to_doc(
    description: str | None, match_on: tuple[str, ...] | None, ignore_body_fields: tuple[str, ...] | None
) -> dict[str, Any]:
    """What a cassette document holds before its interactions: its format and the cassette's settings."""
    head: dict[str, Any] = {"format_version": FORMAT_VERSION}
    if description is not None:
        head["description"] = description
    if match_on is not None:
        head["match"] = [str(part) for part in match_on]
    if ignore_body_fields is not None:
        head["ignore_body_fields"] = list(ignore_body_fields)
    return head


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
            raise CassetteFormatError(f"{where}: {raw_key} must be bytes")
        return raw
    if (text := doc.get(text_key)) is not None:
        if not isinstance(text, str):
            raise CassetteFormatError(f"{where}: {text_key} must be a string")
        return text.encode("utf-8")
    if (b64 := doc.get(b64_key)) is not None:
        try:
            return base64.b64decode(b64, validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise CassetteFormatError(f"{where}: {b64_key} is not valid base64") from None
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


def interaction_to_doc(interaction: Interaction, *, binary: bool, spool: str | None = None) -> dict[str, Any]:
    """The document of an interaction: for MessagePack when `binary`, else for TOML (its chunks, nearly
    always, as `TextTables`); `spool` is the id of the spool it was taken from, if it was."""
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


def _text_chunks_to_doc(chunks: tuple[Chunk, ...]) -> TextTables | list[dict[str, Any]]:
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
    return TextTables(times, texts)


def _text_chunk_to_doc(chunk: Chunk) -> dict[str, Any]:
    key, value = _stored_bytes(chunk.data, _CHUNK_KEYS, binary=False)
    return {"t": chunk.t, key: value}


# --- decoding, with a precise message for anything out of place ------------------------


def interactions_from_doc(doc: Mapping[str, Any], *, binary: bool) -> tuple[list[Interaction], set[str]]:
    """The interactions of a cassette document in this version's format (see `upgrades.upgrade`), and the ids
    of the spools it took in (those its interactions note, and those it names); `binary`: a MessagePack
    document, whose chunks hold bytes (TOML's hold text). Raises `CassetteFormatError`, whose message names
    the interaction and the field but not the file (the caller adds it)."""
    items = doc.get("interactions", [])
    if not isinstance(items, list):
        raise CassetteFormatError("interactions must be a list")
    interactions = [_interaction_from_doc(item, f"interaction {n}", binary=binary) for n, item in enumerate(items, 1)]
    spools = {str(item["spool"]) for item in items if isinstance(item, Mapping) and "spool" in item}
    if "spools" in doc:
        spools.update(_strings(doc, "spools"))
    return interactions, spools


def settings_from_doc(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The cassette's settings in its document: description, match and ignore_body_fields, each checked,
    under the names of `Cassette`'s fields."""
    settings: dict[str, Any] = {}
    if "description" in doc:
        settings["description"] = _field(doc, "description", str, "the cassette")
    if "match" in doc:
        words = _strings(doc, "match")
        if not words or not all(words):
            # Which names there are (the protocols bring theirs) is for matching to say, when it is matched.
            raise CassetteFormatError(f"match {words!r}: give a list of matcher names")
        settings["match_on"] = tuple(dict.fromkeys(words))
    if "ignore_body_fields" in doc:
        settings["ignore_body_fields"] = tuple(_strings(doc, "ignore_body_fields"))
    return settings


def _strings(doc: Mapping[str, Any], name: str) -> list[str]:
    value = doc[name]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CassetteFormatError(f"{name} must be a list of strings")
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
        raise CassetteFormatError(f"{where}: response.end {end_word!r} is not one of {', '.join(End)}") from None
    chunks = resp.get("chunks", [])
    if not isinstance(chunks, list | TextTables):
        raise CassetteFormatError(f"{where}: response.chunks must be a list")
    status = _field(resp, "status", int, f"{where}: response")
    if not 200 <= status <= 599:
        raise CassetteFormatError(
            f"{where}: response.status {status} is not an HTTP status a response can end with (200-599)"
        )
    if chunks and (status in (204, 304) or request.method.upper() == "HEAD"):
        what = f"a {status} response" if status in (204, 304) else "the answer to a HEAD request"
        raise CassetteFormatError(f"{where}: {what} has no body, but chunks are recorded")
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
        raise CassetteFormatError(f"{where}: injected must be a list")
    notes = []
    for n, item in enumerate(injected, 1):
        at = f"{where}: injected {n}"
        note = _table(item, at)
        notes.append(Injection(_field(note, "fault", str, at), _field(note, "what", str, at)))
    return Interaction(request, response, None if recorded_at is None else str(recorded_at), tuple(notes))


def _chunks_from_doc(docs: list[Any] | TextTables, where: str, *, binary: bool) -> tuple[Chunk, ...]:
    if isinstance(docs, TextTables):
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


def _chunks_from_columns(columns: TextTables, where: str) -> tuple[Chunk, ...]:
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
# object.__setattr__, a large part of the time a big cassette's tens of thousands of chunks take to load.
# Nothing else happens in it.
_set_t, _set_data = vars(Chunk)["t"].__set__, vars(Chunk)["data"].__set__


def _chunk_from_doc(doc: Any, where: str) -> Chunk:
    doc = _table(doc, where)
    t = _number(doc, "t", where)
    if t is None or t < 0:
        raise CassetteFormatError(f"{where}: t must be a number of seconds >= 0")
    data = _get_bytes(doc, _CHUNK_KEYS, where)
    if data is None:
        raise CassetteFormatError(f"{where}: has no text, base64 or bytes")
    return Chunk(t, data)


def _headers_from_doc(doc: Any, where: str) -> Headers:
    doc = _table(doc, where)
    pairs: list[tuple[str, str]] = []
    for name, value in doc.items():
        if not isinstance(name, str):
            raise CassetteFormatError(f"{where}: header name {name!r} is not text")
        if not _TOKEN.fullmatch(name):
            raise CassetteFormatError(f"{where}: header name {name!r} is not a valid HTTP header name")
        if type(value) is str and not _CONTROL.search(value):  # one value, as nearly every header has
            pairs.append((name, value))
            continue
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str) for v in values):
            raise CassetteFormatError(f"{where}: {name} must be a string or a list of strings")
        for v in values:
            if found := _CONTROL.search(v):
                raise CassetteFormatError(
                    f"{where}: {name} has the control character {found[0]!r} in its value, which HTTP forbids "
                    "in a header (a line break would split it)"
                )
        pairs.extend((name, v) for v in values)
    return tuple(pairs)


def _table(doc: Any, where: str) -> Mapping[str, Any]:
    if type(doc) is not dict and not isinstance(doc, Mapping):
        raise CassetteFormatError(f"{where} is missing or not a table")
    return doc


_MISSING: Any = object()
# An HTTP header name (RFC 9110, token), and what a header value must not hold.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# What aiohttp refuses to send in a header (every control character but tab: RFC 9110 section 5.5), which
# would answer every replay of the recording with a 500.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# Times in a cassette: a year of seconds is more than any stream lasts.
_MAX_SECONDS = 365 * 24 * 3600.0


def _field(doc: Mapping[str, Any], name: str, kind: type, where: str, default: Any = _MISSING) -> Any:
    value = doc.get(name, default)
    if value is _MISSING:
        raise CassetteFormatError(f"{where}.{name} is missing")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CassetteFormatError(f"{where}.{name} must be {'an integer' if kind is int else 'a string'}")
    return value


def _number(doc: Mapping[str, Any], name: str, where: str, default: Any = _MISSING) -> float | None:
    value = doc.get(name, default)
    if value is _MISSING:
        raise CassetteFormatError(f"{where}.{name} is missing")
    if value is None:
        return None
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or (isinstance(value, float) and not math.isfinite(value))
    ):
        raise CassetteFormatError(f"{where}.{name} must be a finite number")
    if not -_MAX_SECONDS < value < _MAX_SECONDS:  # compared as it is: a 400-digit int cannot even become a float
        raise CassetteFormatError(f"{where}.{name} must be a number of seconds under a year")
    return float(value)
