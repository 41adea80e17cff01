"""The MessagePack serializer: compact and quick to load, with chunks and bodies kept as raw bytes.

A file is one map whose last key is `interactions`, an array whose header this module writes in its widest
form (`array 32`, a count in four bytes): appending to the file writes the new interactions at its end and
then the new count in the header's place (`tail`), with no copy of what the file holds. A file another
writer made with a narrower header is appended to in place while the count fits it (15 for a `fixarray`,
65,535 for an `array 16`), and written anew, with the wide header, when it does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, Any

import msgpack

from .._exceptions import CassetteFormatError

__all__ = ["Tail", "decode", "encode", "tail"]


def encode(doc: Any) -> bytes:
    """The MessagePack bytes of a cassette document (its `interactions` last, with a header of four bytes'
    count, when they are the document's last key)."""
    if (
        type(doc) is not dict
        or not doc
        or next(reversed(doc)) != "interactions"
        or type(doc["interactions"]) is not list
    ):
        packed: bytes = msgpack.packb(doc, use_bin_type=True)
        return packed
    packer = msgpack.Packer(use_bin_type=True)
    items: list[Any] = doc["interactions"]
    pieces = [packer.pack_map_header(len(doc))]
    for key, value in doc.items():
        pieces += (packer.pack(key), packer.pack(value)) if key != "interactions" else (packer.pack(key),)
    pieces.append(_ARRAY32 + len(items).to_bytes(4, "big"))
    pieces += map(packer.pack, items)
    return b"".join(pieces)


def decode(raw: bytes) -> Any:
    """The document in a MessagePack file's bytes.

    Raises `CassetteFormatError` (whose message names no file: the caller adds it) for bytes that are not
    one whole MessagePack document.
    """
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=True)
    except msgpack.ExtraData:
        raise CassetteFormatError("not a MessagePack cassette (extra data after the document)") from None
    except (ValueError, RecursionError, msgpack.UnpackException) as exc:
        raise CassetteFormatError(f"truncated or corrupt MessagePack ({exc})") from None


@dataclass(frozen=True, slots=True)
class Tail:
    """Where a file's `interactions` array counts its items, so that items added at the file's end join it."""

    at: int
    """The offset of the array's header."""
    form: int
    """The header's first byte: `0x90` (a `fixarray`, the count in it), `0xdc` or `0xdd`."""
    count: int

    def header(self, count: int) -> bytes | None:
        """The header of the array with `count` items, in this header's place and size; None if it cannot say
        so many."""
        if self.form == 0x90:
            return bytes([0x90 | count]) if count <= 15 else None
        size = 2 if self.form == 0xDC else 4
        return bytes([self.form]) + count.to_bytes(size, "big") if count < 1 << (8 * size) else None


def tail(file: IO[bytes]) -> Tail | None:
    """Where the `interactions` array of the cassette in `file` counts its items, when the array is the last
    value of the file's map (so that the file ends with its items); None otherwise, or for a file that is not
    such a map. Reads only what comes before the array, unless the array is not last."""
    unpacker = msgpack.Unpacker(file, raw=False, strict_map_key=True, max_buffer_size=1 << 30)
    try:
        keys = unpacker.read_map_header()
        for n in range(keys):
            key = unpacker.unpack()
            if key == "interactions" and n == keys - 1:
                at = unpacker.tell()
                count = unpacker.read_array_header()
                break
            unpacker.skip()
        else:
            return None
    except (ValueError, RecursionError, msgpack.UnpackException, StopIteration):
        return None
    file.seek(at)
    first = file.read(1)[0]
    form = 0x90 if 0x90 <= first <= 0x9F else first
    return Tail(at, form, count) if form in (0x90, 0xDC, 0xDD) else None


_ARRAY32 = b"\xdd"
