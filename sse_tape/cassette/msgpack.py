"""The MessagePack serializer: compact and quick to load, with chunks and bodies kept as raw bytes."""

from __future__ import annotations

from typing import Any

import msgpack

from .._exceptions import CassetteFormatError

__all__ = ["decode", "encode"]


def encode(doc: Any) -> bytes:
    """The MessagePack bytes of a cassette document."""
    packed: bytes = msgpack.packb(doc, use_bin_type=True)
    return packed


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
