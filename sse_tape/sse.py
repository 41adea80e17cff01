"""The Server-Sent Events wire format: a pure incremental decoder and an encoder.

No sockets and no asyncio here: bytes in, events out. The decoder follows the
WHATWG HTML standard's event stream interpretation rules, step by step:
https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._exceptions import StreamError

__all__ = ["MAX_SIZE", "SSEDecoder", "ServerSentEvent", "encode_comment", "encode_event"]

#: The longest line, and the most data one event may gather, a decoder accepts by default (16 MiB).
MAX_SIZE = 16 * 2**20

_BOM = b"\xef\xbb\xbf"
# Lines end with CRLF, a lone LF or a lone CR (spec: "end-of-line").
_LINE_END = re.compile(rb"\r\n|\r|\n")
_NEWLINES = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    """One dispatched event.

    `id` is the stream's last event ID at the time of dispatch (it persists
    across events, as the spec says); `retry` is the reconnection time set in
    this event's block, if any.
    """

    event: str = "message"
    data: str = ""
    id: str = ""
    retry: int | None = None

    def json(self) -> Any:
        """The data parsed as JSON."""
        return json.loads(self.data)


class SSEDecoder:
    """Turns the bytes of an event stream, fed in pieces of any size, into events.

    Line ends split across `feed` calls (a CR at the end of one piece, its LF
    at the start of the next), a UTF-8 character split across pieces and a BOM
    split across pieces are all handled. An event not yet terminated by a blank
    line stays pending; at the end of the stream it is discarded, as the spec
    requires: `end()` says whether anything was.

    Reconnecting, as an `EventSource` does: `last_event_id` is what the next
    connection sends as `Last-Event-ID` (the id as of the last dispatched
    event; an `id:` in a block that never ended does not count), and a decoder
    for that connection starts from it (`SSEDecoder(last_event_id=...)`), so
    that its events carry it until the stream sets another. `retry` is the
    reconnection time the stream asked for. `on_comment` gets the text of each
    comment line (a server's `: heartbeat`).

    A line in progress is held in memory proportional to its length, however
    small the pieces it comes in. A line longer than `max_size` bytes, or an
    event whose data grows past it, raises `StreamError`: a stream that never
    ends a line cannot take all the memory there is.
    """

    __slots__ = (
        "_bom_checked",
        "_data",
        "_data_size",
        "_event",
        "_id_buffer",
        "_id_set",
        "_last_id",
        "_pending",
        "_retry",
        "_skip_lf",
        "max_size",
        "on_comment",
        "retry",
    )

    def __init__(
        self,
        *,
        max_size: int = MAX_SIZE,
        last_event_id: str = "",
        on_comment: Callable[[str], None] | None = None,
    ) -> None:
        self.max_size = max_size
        self.on_comment = on_comment
        self._pending = bytearray()  # the line in progress
        self._data_size = 0
        self._bom_checked = False
        self._skip_lf = False
        self._data: list[str] = []
        self._event = ""
        self._id_buffer = last_event_id  # spec: the last event ID buffer
        self._id_set = False  # whether the block in progress has an id field
        self._last_id = last_event_id  # spec: the event source's last event ID string
        self._retry: int | None = None
        #: The reconnection time in milliseconds last set by the stream, if any.
        self.retry: int | None = None

    @property
    def last_event_id(self) -> str:
        """The id a reconnection sends as `Last-Event-ID`: the stream's last event ID as of its last dispatched
        block (spec: the event source's last event ID string), or the one the decoder started from."""
        return self._last_id

    def end(self) -> bool:
        """The stream is over: drop what it did not finish (a line without its end, a block without the blank
        line that dispatches it); whether there was any."""
        dropped = bool(self._pending or self._data or self._event or self._id_set)
        self._pending.clear()
        self._data, self._event, self._retry, self._data_size = [], "", None, 0
        self._id_buffer, self._id_set, self._skip_lf = self._last_id, False, False
        return dropped

    def feed(self, data: bytes) -> list[ServerSentEvent]:
        """Consume the next piece of the stream and return the events it completed."""
        if self._skip_lf and data:
            self._skip_lf = False
            if data[:1] == b"\n":
                data = data[1:]
        if not data:
            return []
        if not self._bom_checked:
            head = bytes(self._pending) + data
            self._pending.clear()
            if len(head) < len(_BOM) and _BOM.startswith(head):
                self._pending += head  # could still become a BOM
                return []
            self._bom_checked = True
            data = head[len(_BOM) :] if head.startswith(_BOM) else head
        if b"\n" not in data and b"\r" not in data:
            # No line ends here: keep the piece and look at no byte twice, however long the line.
            self._pending += data
            self._check(len(self._pending), "a line")
            return []
        buf = bytes(self._pending) + data if self._pending else data
        lines = _LINE_END.split(buf)
        rest = lines.pop()
        self._check(len(rest), "a line")
        self._pending = bytearray(rest)
        # A CR that ends this piece may be the first half of a CRLF.
        self._skip_lf = not rest and buf.endswith(b"\r")
        events: list[ServerSentEvent] = []
        for raw in lines:
            event = self._process_line(raw.decode("utf-8", "replace"))
            if event is not None:
                events.append(event)
        return events

    def _process_line(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line[0] == ":":
            if self.on_comment is not None:
                self.on_comment(line[2:] if line[1:2] == " " else line[1:])
            return None
        field, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if field == "data":
            self._check(len(line), "a line")
            self._data.append(value)
            self._data_size += len(value) + 1
            self._check(self._data_size, "an event's data")
        elif field == "event":
            self._event = value
        elif field == "id" and "\0" not in value:
            self._id_buffer, self._id_set = value, True
        elif field == "retry" and value.isascii() and value.isdigit():
            self._retry = self.retry = int(value)
        # Any other field is ignored.
        return None

    def _check(self, size: int, what: str) -> None:
        if size > self.max_size:
            raise StreamError(f"{what} longer than {self.max_size:,} bytes: the stream has no end of it in sight")

    def _dispatch(self) -> ServerSentEvent | None:
        # Spec: the last event ID string is set from the buffer first, even when no event is dispatched.
        self._last_id, self._id_set = self._id_buffer, False
        data, event, retry = self._data, self._event, self._retry
        self._data, self._event, self._retry = [], "", None
        self._data_size = 0
        if not data:
            return None  # the data buffer is empty: nothing is dispatched
        return ServerSentEvent(event=event or "message", data="\n".join(data), id=self._last_id, retry=retry)


def encode_event(
    data: str,
    *,
    event: str | None = None,
    id: str | None = None,
    retry: int | None = None,
) -> bytes:
    """The wire bytes of one event, ending with the blank line that dispatches it.

    Each line of `data` (split at CRLF, CR or LF) becomes its own `data:` line,
    so a decoder gives back `data` with its line ends normalized to LF.
    """
    parts = []
    if event is not None:
        _check_single_line("event", event)
        parts.append(f"event: {event}\n")
    if id is not None:
        _check_single_line("id", id)
        if "\0" in id:
            raise ValueError("an event id cannot contain NUL: decoders ignore it")
        parts.append(f"id: {id}\n")
    if retry is not None:
        if retry < 0:
            raise ValueError("retry must be a non-negative number of milliseconds")
        parts.append(f"retry: {retry}\n")
    parts.extend(f"data: {line}\n" for line in _NEWLINES.split(data))
    parts.append("\n")
    return "".join(parts).encode()


def encode_comment(text: str = "") -> bytes:
    """The wire bytes of a comment (such as a `: heartbeat`), followed by a blank line.

    Decoders ignore comments; servers send them to keep idle connections open.
    """
    return ("".join(f": {line}\n" if line else ":\n" for line in _NEWLINES.split(text)) + "\n").encode()


def _check_single_line(name: str, value: str) -> None:
    if _NEWLINES.search(value):
        raise ValueError(f"an event {name} cannot contain a line break")
