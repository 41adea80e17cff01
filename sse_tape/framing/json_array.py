"""One JSON array written element by element, as a framing: Gemini's `streamGenerateContent` without `alt=sse`."""

from __future__ import annotations

import json
import re

from ..sse import ServerSentEvent
from .base import Block, FrameEncoder, Framing

__all__ = ["JSON_ARRAY"]

# What may come between an array's values; what ends a number, `true`, `false` or `null`.
_SPACE = b" \t\r\n"
_SCALAR_END = re.compile(rb"[\s,\]]")
# What changes the depth in a value, or opens a string; what ends a string.
_STRUCTURE = re.compile(rb'["{}\[\]]')
_IN_STRING = re.compile(rb'["\\]')
_BOM = b"\xef\xbb\xbf"
# Google's separator between two elements, and its end of the array (after each element's last brace).
_SEPARATOR = b"\n,\r\n"
_CLOSE = b"\n]"


def _value_end(body: bytes, i: int, final: bool) -> int | None:
    """Where the JSON value that starts at `body[i]` ends (the index after it), or None if it goes on past
    the body's end. A number or a word at the end of a body ends there only when the body is `final` (no
    more of it to come: `12` may be the start of `123`)."""
    first = body[i : i + 1]
    if first not in (b"{", b"[", b'"'):
        m = _SCALAR_END.search(body, i)
        return m.start() if m is not None else (len(body) if final else None)
    depth = 0
    while True:
        if first == b'"':
            while True:  # inside a string: to its closing quote, past every escape
                m = _IN_STRING.search(body, i + 1)
                if m is None:
                    return None
                if m.group() == b"\\":
                    i = m.start() + 1
                    continue
                i = m.start()
                break
            if depth == 0:
                return i + 1
        elif first in (b"{", b"["):
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return i + 1
        m = _STRUCTURE.search(body, i + 1)
        if m is None:
            return None
        i, first = m.start(), m.group()


def _elements(body: bytes, opened: bool, final: bool = True) -> tuple[list[tuple[int, int]], bool, bool]:
    """The spans of the whole elements in `body`, an array's bytes from its start (`opened` False) or from
    just after an element, and all there is of them unless more may come (`final` False); whether the array
    was opened, and whether it was closed (a `]` after them)."""
    spans: list[tuple[int, int]] = []
    i, n = 0, len(body)
    if not opened and body.startswith(_BOM):
        i = len(_BOM)
    while i < n:
        byte = body[i : i + 1]
        if byte in (b" ", b"\t", b"\r", b"\n"):
            i += 1
        elif not opened:
            if byte != b"[":
                return spans, False, False  # not an array: no element in it
            opened = True
            i += 1
        elif byte == b",":
            i += 1
        elif byte == b"]":
            return spans, True, True
        else:
            end = _value_end(body, i, final)
            if end is None:
                break
            spans.append((i, end))
            i = end
    return spans, opened, False


def _pretty(data: str) -> bytes:
    """An element as Google writes it: JSON indented by two spaces (the text as it is, if it is no JSON)."""
    try:
        return json.dumps(json.loads(data), indent=2, ensure_ascii=False).encode()
    except (ValueError, UnicodeEncodeError):
        return data.encode("utf-8", "surrogatepass")


class _ArrayEncoder(FrameEncoder):
    def __init__(self, sent: int) -> None:
        self.count = sent

    def frame(self, event: ServerSentEvent) -> bytes:
        lead = _SEPARATOR if self.count else b"["
        self.count += 1
        return lead + _pretty(event.data)

    def close(self) -> bytes:
        return _CLOSE if self.count else b"[]"


class _JSONArray(Framing):
    """One JSON array whose elements are the messages, written element by element: Gemini's
    `streamGenerateContent` without `alt=sse` (`[{…}` then `\\n,\\r\\n{…}` for each chunk, then `\\n]`).

    A block runs from the end of the element before it (or the body's start, the `[` with it) to the end of
    its own element, so that a cut after a block leaves the array open, as a dropped connection does; what
    follows the last element (`\\n]`) is a block with no message.
    """

    name = "json-array"
    content_type = "application/json; charset=UTF-8"

    def blocks(self, body: bytes, at: int = 0) -> list[Block]:
        spans, _, _ = _elements(body, opened=at > 0)
        blocks, start = [], 0
        for first, end in spans:
            event = ServerSentEvent(data=body[first:end].decode("utf-8", "replace"))
            blocks.append(Block(at + start, at + end, event))
            start = end
        if start < len(body):
            blocks.append(Block(at + start, at + len(body), None))
        return blocks

    def whole(self, data: bytes, at: int = 0) -> int:
        spans, _, _ = _elements(data, opened=at > 0, final=False)
        return spans[-1][1] if spans else 0

    def encoder(self, sent: int = 0) -> FrameEncoder:
        return _ArrayEncoder(sent)

    def closes(self, block: bytes) -> bool:
        return block.strip(_SPACE).startswith(b"]")

    def opens(self, block: bytes) -> bool:
        return block.lstrip(_BOM + _SPACE).startswith(b"[")

    def again(self, block: bytes) -> bytes:
        spans, _, _ = _elements(block, opened=not self.opens(block))
        return _SEPARATOR + block[spans[0][0] :] if spans else block

    def first(self, block: bytes) -> bytes:
        spans, _, _ = _elements(block, opened=True)
        return b"[" + block[spans[0][0] :] if spans else block

    def heartbeat(self, comment: bytes) -> bytes:
        return b"\n"  # whitespace between two elements: JSON has no comments

    def problems(self, body: bytes) -> list[str]:
        spans, opened, closed = _elements(body, opened=False)
        if not opened:
            return ["the answer is not a JSON array"]
        if not closed:
            return [f"the array is cut short after {len(spans)} elements: no closing ]"]
        after = body[body.rindex(b"]") + 1 :].strip(_SPACE)
        return [f"bytes after the array's end: {after[:40]!r}"] if after else []


JSON_ARRAY: Framing = _JSONArray()
"""One JSON array, written element by element."""
