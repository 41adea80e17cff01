"""Faults on the stream's events: the API's own error in the middle, an event left out, sent twice, or
broken."""

from __future__ import annotations

from collections.abc import Sequence

from ..cassette import End, Request
from ..dialects import Generation, Protocol
from ..dialects.events import Error, Start
from ..framing import SSE, Framing
from ..plan import Write
from ..sse import ServerSentEvent
from .model import Act, Fault, FaultKind, Key, Run, Stage, choice, event_or_mark, position, text, whole_number
from .stream import Blocks, before_position

__all__ = ["EVENTS", "corrupted", "error_frames"]

_AT = "position"


def error_frames(
    fault: Fault,
    dialect: Protocol,
    sent: Sequence[ServerSentEvent],
    start: object | None,
    framing: Framing = SSE,
    request: Request | None = None,
) -> bytes:
    """An `error` fault's frames in the answer to `request`: the API's mid-stream error and terminal frames
    after the events `sent`, or, when none were, the stream's opening (`start`, a neutral `Start`) and then
    the error; in `framing` (in a JSON array, the error is its next element, and the array closes)."""
    error = Error(fault["message"], fault["type"], fault["code"])
    if sent or not isinstance(dialect, Generation):
        frames = b"".join(dialect.answer_error_frames(error, request, sent))
    else:
        frames = b"".join(dialect.encode([start if isinstance(start, Start) else Start(), error]))
    return framing.ending(frames, len(sent))


def corrupted(block: bytes, kind: str, framing: Framing = SSE) -> bytes:
    """A block broken as `corrupt` breaks it: its JSON cut short (`json`), or invalid UTF-8 in it (`utf8`); in a
    framing that has its own way (`Framing.corrupted`: an event stream's message, changed under its CRC), so."""
    own = framing.corrupted(block, kind)
    if own is not None:
        return own
    line_start = block.find(b"data:")
    line_end = len(block.rstrip(b"\r\n"))
    if kind == "utf8":
        return block[:line_end] + b"\xff\xfe\xc3" + block[line_end:]
    # cut the JSON short, keeping the line ends that dispatch the event
    keep = line_start + max((line_end - line_start) // 2, 6) if line_start >= 0 else line_end // 2
    return block[:keep] + block[line_end:]


class _AtAnEvent(Act):
    """A fault that acts once, on the block at its position, counted in the stream it is fed: whole blocks
    until it has acted, then everything as it comes."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        self.at = fault.where
        self.blocks = Blocks(run.head)
        self.events = 0
        self.bytes = 0
        self.sent: list[ServerSentEvent] = []
        self.acted = False
        self.more = False
        """Whether it acts on the next block too (a JSON array whose first element was left out opens with
        the next)."""
        self.ended = False
        """Whether it ended the stream (an error does)."""

    def feed(self, writes: list[Write]) -> list[Write]:
        if self.acted:
            return writes
        return self._blocks(self.blocks.feed(writes))

    def _blocks(self, blocks: list[tuple[float, bytes, ServerSentEvent | None]]) -> list[Write]:
        out: list[Write] = []
        for t, data, event in blocks:
            made = None if self.acted else self.block(t, data, event)
            if made is None:
                out.append((t, data))
                self.events += event is not None
                self.bytes += len(data)
                if event is not None:
                    self.sent.append(event)
                continue
            self.acted, self.more = not self.more, False
            out += made
            if self.ended:  # it ended the stream: nothing after it goes
                return out
        if self.acted:  # from here on everything goes as it comes
            out += self.blocks.flush()
        return out

    def block(self, t: float, data: bytes, event: ServerSentEvent | None) -> list[Write] | None:
        """What this fault makes of the next block, if it acts on it; None if it does not."""
        raise NotImplementedError

    def close(self, end_at: float) -> tuple[list[Write], float]:
        writes = [] if self.acted else self._blocks(self.blocks.rest())
        if not self.acted:
            if self.at == "done" and self.sent:  # Anthropic's, Gemini's, Ollama's, Bedrock's streams end otherwise
                self.note(f"no [DONE] in {self.run.dialect.name}'s stream: left alone")
            else:
                self.note(
                    f"the stream ended before {self.at}: left alone" if self.sent else f"no event to {self.fault.name}"
                )
        return writes, end_at


class _Error(_AtAnEvent):
    """The API's own mid-stream error at a position, then its terminal frames: the stream ends there.

    At or past the terminal frame, the error goes before it; a stream with no terminal frame (Gemini's)
    gets it at its end."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        self.ended_at = 0.0

    def block(self, t: float, data: bytes, event: ServerSentEvent | None) -> list[Write] | None:
        if event is None:  # an error goes between events: after a comment, before the next event
            return self._error(t, None) if self.sent and self.run.head.framing.closes(data) else None
        dialect = self.run.dialect
        if not (dialect.is_terminal(event) or before_position(self.at, self.events, self.bytes, len(data), t)):
            return None
        start = self.run.start
        if start is None and not self.sent and isinstance(dialect, Generation):  # it opens as it would have
            start = next((e for e in dialect.decode([event]) if isinstance(e, Start)), None)
        return self._error(t, start)

    def _error(self, t: float, start: object | None) -> list[Write] | None:
        dialect = self.run.dialect
        if (
            self.sent
            and isinstance(dialect, Generation)
            and any(isinstance(e, Error) for e in dialect.decode(self.sent))
        ):
            self.note("the stream has ended in an error already: left alone")
            self.acted = True
            return None
        self.note(f"{dialect.name} error after event {len(self.sent)}")
        self.run.end = End.COMPLETE
        self.ended, self.ended_at = True, t
        return [(t, error_frames(self.fault, dialect, self.sent, start, self.run.head.framing, self.run.request))]

    def close(self, end_at: float) -> tuple[list[Write], float]:
        writes = [] if self.acted else self._blocks(self.blocks.rest())
        if self.ended:
            return writes, self.ended_at
        if self.acted:
            return writes, end_at
        # Past the end of a stream with no terminal frame: the error goes in at its end.
        if not self.sent:
            self.note("not an event stream: left alone")
            return writes, end_at
        made = self._error(writes[-1][0] if writes else self.blocks.t, None)
        return (writes + made, self.ended_at) if made is not None else (writes, end_at)


class _Drop(_AtAnEvent):
    """Leave out the event at a position, the role frame or the [DONE]."""

    def __init__(self, fault: Fault, run: Run) -> None:
        super().__init__(fault, run)
        self.opening = False

    def block(self, t: float, data: bytes, event: ServerSentEvent | None) -> list[Write] | None:
        if event is None:
            return None
        if self.opening:  # the element after a JSON array's first, left out: the array opens with it now
            self.opening = False
            return [(t, self.run.head.framing.first(data))]
        at = self.at
        if at == "role":
            hit = self.events == 0
        elif at == "done":
            hit = event.data == "[DONE]"
        else:
            hit = before_position(at, self.events, self.bytes, len(data), t)
        if not hit:
            return None
        return self.made(t, data)

    def made(self, t: float, data: bytes) -> list[Write]:
        """What the event becomes."""
        self.note(f"dropped the event at byte {self.bytes}")
        if self.run.head.framing.opens(data):  # it opened a JSON array: the next one does now
            self.opening = self.more = True
        return []


class _Duplicate(_Drop):
    """Send the event at a position twice."""

    def made(self, t: float, data: bytes) -> list[Write]:
        self.note(f"sent the event at byte {self.bytes} twice")
        return [(t, data + self.run.head.framing.again(data))]


class _Corrupt(_Drop):
    """Break the JSON of the event at a position, or put invalid UTF-8 in it."""

    def made(self, t: float, data: bytes) -> list[Write]:
        self.note(f"corrupted ({self.fault['kind']}) the event at byte {self.bytes}")
        return [(t, corrupted(data, self.fault["kind"], self.run.head.framing))]


class _AtTheResponse(_AtAnEvent):
    """A fault that acts on the message that ends the stream, the response to the request (`Protocol.is_terminal`),
    in the protocol's words: the events before it go as they come."""

    def block(self, t: float, data: bytes, event: ServerSentEvent | None) -> list[Write] | None:
        if event is None or not self.run.dialect.is_terminal(event):
            return None
        return self.response(t, data, event)

    def response(self, t: float, data: bytes, event: ServerSentEvent) -> list[Write]:
        """What the block `data` that carries the response `event` becomes."""
        raise NotImplementedError

    def close(self, end_at: float) -> tuple[list[Write], float]:
        writes = [] if self.acted else self._blocks(self.blocks.rest())
        if not self.acted:
            self.note("no response in the stream: left alone")
        return writes, end_at


class _ToolError(_AtTheResponse):
    """The response to a tool call turned into the tool's own error result (MCP's `isError: true`)."""

    def response(self, t: float, data: bytes, event: ServerSentEvent) -> list[Write]:
        dialect = self.run.dialect
        changed = dialect.tool_error(self.run.request, self.fault["message"], event.data)
        old = event.data.encode()
        if changed is None or data.count(old) != 1:
            self.note(f"no answer to a tool call ({dialect.name}): left alone")
            return [(t, data)]
        self.note(f"the tool's error result in place of its answer, after event {len(self.sent)}")
        return [(t, data.replace(old, changed.encode()))]


class _ProgressFlood(_AtTheResponse):
    """Many progress notifications just before the response (MCP's `notifications/progress`)."""

    def response(self, t: float, data: bytes, event: ServerSentEvent) -> list[Write]:
        count: int = self.fault["count"]
        frames = self.run.dialect.progress(self.run.request, self.sent, count)
        if frames is None:
            self.note(f"no progress asked for ({self.run.dialect.name}): left alone")
            return [(t, data)]
        self.note(f"{count} progress notifications before the response, after event {len(self.sent)}")
        return [(t, b"".join(frames) + data)]


def _answered(run: Run, body: bytes) -> None:
    """The JSON answer in `run.head` replaced by `body`, when the recorded one was due."""
    head = run.head
    head.rewrite([(head.writes[-1][0] if head.writes else 0.0, body)])


def _error_answer(fault: Fault, run: Run) -> str | None:
    """An `error` on one JSON answer: the protocol's error answer in its place (MCP's JSON-RPC error)."""
    body = run.dialect.error_answer(Error(fault["message"], fault["type"], fault["code"]), run.request)
    if body is None:
        return None
    _answered(run, body)
    return f"{run.dialect.name} error in place of the answer"


def _tool_error_answer(fault: Fault, run: Run) -> str | None:
    """A `tool-error` on one JSON answer: the tool's error result in its place."""
    changed = run.dialect.tool_error(run.request, fault["message"], run.head.body.decode("utf-8", "replace"))
    if changed is None:
        return None
    _answered(run, changed.encode())
    return "the tool's error result in place of its answer"


#: Any response, to ask a protocol whether it would turn the answer to a request into a tool's error.
_A_RESPONSE = '{"jsonrpc":"2.0","id":0,"result":{}}'


def _calls_a_tool(request: Request, dialect: Protocol) -> bool:
    return dialect.tool_error(request, "", _A_RESPONSE) is not None


def _asks_for_progress(request: Request, dialect: Protocol) -> bool:
    return dialect.progress(request, (), 1) is not None


#: The faults on events, in the order `sse-tape faults` lists them.
EVENTS = (
    FaultKind("error", Stage.EVENTS,
              "end the stream at a position with the API's own mid-stream error and terminal frames",
              (Key("at", _AT, position, "50%"),
               Key("type", "text", text, "server_error"),
               Key("message", "text", text, "injected by sse-tape"),
               Key("code", "text", text)),
              _Error, main="at", document=_error_answer),
    FaultKind("drop", Stage.EVENTS, "leave out an event, the role frame or the [DONE]",
              (Key("at", "position, role or done", event_or_mark, "0"),), _Drop, main="at"),
    FaultKind("duplicate", Stage.EVENTS, "send an event twice",
              (Key("at", _AT, position, "0"),), _Duplicate, main="at"),
    FaultKind("corrupt", Stage.EVENTS, "break an event's JSON, or put invalid UTF-8 in it",
              (Key("at", _AT, position, "0"), Key("kind", "json or utf8", choice("json", "utf8"), "json")),
              _Corrupt, main="at"),
    FaultKind("tool-error", Stage.EVENTS,
              "the answer to a tool call is the tool's own error result with this message (MCP's isError)",
              (Key("message", "text", text, "injected by sse-tape"),), _ToolError, main="message",
              document=_tool_error_answer, fits=_calls_a_tool),
    FaultKind("progress-flood", Stage.EVENTS,
              "many progress notifications just before the response (MCP's notifications/progress)",
              (Key("count", "number", whole_number(1, 100_000), "1000"),), _ProgressFlood, main="count",
              fits=_asks_for_progress),
)  # fmt: skip
