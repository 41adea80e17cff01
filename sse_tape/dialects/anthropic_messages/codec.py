"""How `anthropic-messages` encodes and decodes neutral events: its encoder, its stream's and its answer's
decoding, and its answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ... import _json
from ...sse import ServerSentEvent, SSEDecoder
from ..encoder import Encoder
from ..events import (
    Error,
    Event,
    Finish,
    ReasoningDelta,
    ReasoningSignature,
    RefusalDelta,
    Start,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from ..generation import Generation, whole
from ..protocol import json_objects, named_frame

__all__ = [
    "ERROR_TYPES",
    "FINISHES",
    "MessagesEncoder",
    "decode_indexed",
    "decode_json",
    "error_json",
    "message_of",
    "response_json",
]

FINISHES = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
"""The API's stop reasons, each as a neutral finish reason."""

ERROR_TYPES = (
    "invalid_request_error",
    "authentication_error",
    "billing_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "rate_limit_error",
    "api_error",
    "timeout_error",
    "overloaded_error",
)
"""The error types the API sends, in an error body or an `error` event."""


def error_json(message: str, kind: str, code: str | None) -> dict[str, Any]:
    """The API's error object, in an error body or an `error` event."""
    # `details` is there only to hold a code: the SDK reads `details.error_code`, and the API's errors
    # without one are `{"type", "message"}` alone.
    details = {"details": {"error_code": code}} if code is not None else {}
    return {"type": "error", "error": {**details, "type": kind, "message": message}}


def message_of(events: Sequence[ServerSentEvent]) -> dict[str, Any] | None:
    """The Message a stream builds, as the SDK accumulates it; None if it never starts one."""
    message: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    inputs: dict[int, str] = {}
    for _, _, obj in json_objects(events):
        kind, index = obj.get("type"), whole(obj.get("index"))
        delta: dict[str, Any] = obj["delta"] if isinstance(obj.get("delta"), dict) else {}
        if kind == "message_start" and isinstance(obj.get("message"), dict):
            message = dict(obj["message"])
        elif message is None:
            continue
        elif kind == "content_block_start" and isinstance(index, int) and isinstance(obj.get("content_block"), dict):
            blocks[index] = dict(obj["content_block"])
        elif kind == "content_block_delta" and index in blocks:
            block, step = blocks[index], delta.get("type")
            if step == "text_delta":
                block["text"] = str(block.get("text", "")) + str(delta.get("text", ""))
            elif step == "thinking_delta":
                block["thinking"] = str(block.get("thinking", "")) + str(delta.get("thinking", ""))
            elif step == "signature_delta":
                block["signature"] = delta.get("signature", "")
            elif step == "input_json_delta":
                inputs[index] = inputs.get(index, "") + str(delta.get("partial_json", ""))
        elif kind == "message_delta":
            message |= {k: v for k, v in delta.items() if k in ("stop_reason", "stop_sequence", "stop_details")}
            usage = obj.get("usage")
            if isinstance(usage, dict):
                recorded = message.get("usage")
                message["usage"] = {**(recorded if isinstance(recorded, dict) else {}), **usage}
    if message is None:
        return None
    for index, text in inputs.items():
        try:
            blocks[index]["input"] = _json.parse(text, max_depth=None) if text else {}
        except ValueError:
            blocks[index]["input"] = {}  # arguments cut short: the SDK raises, an answer holds none
    return {**message, "content": [blocks[k] for k in sorted(blocks)]}


# The neutral finish reasons in the API's words.
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "content_filter": "refusal"}

# The API's keep-alive, byte for byte: the one event it sends with spaces in its JSON.
_PING = b'event: ping\ndata: {"type": "ping"}\n\n'


def _wire_type(kind: str) -> str:
    """A neutral error type in the API's words: OpenAI's `server_error` (and any it does not know) is `api_error`."""
    return kind if kind in ERROR_TYPES else "api_error"


def _neutral_type(kind: str) -> str:
    return "server_error" if kind == "api_error" else kind


class MessagesEncoder(Encoder):
    """anthropic-messages' encoder: blocks opened and closed one at a time, a ping after the first, and the stop
    with the usage in `message_delta`."""

    def __init__(self, dialect: Generation, answer: Any = None) -> None:
        super().__init__(dialect)
        # A recorded Message this stream retells: its envelope, usage and stop as they were.
        self.answer: dict[str, Any] | None = answer if isinstance(answer, dict) else None
        self.block: tuple[int, str] | None = None
        """The block open on the wire: its index and type."""
        self.blocks = 0
        """How many blocks have opened: the next one's index."""
        self.pinged = False
        self.calls: dict[int, int] = {}
        """Each client tool call's index, and the index of its `tool_use` block."""
        self.server_calls: set[int] = set()
        self.refusal = ""
        self.finish: Finish | None = None  # message_delta waits for the usage that follows the finish
        self.stopped = False
        """Whether message_delta has gone out."""

    def _sync(self, sent: Sequence[ServerSentEvent]) -> None:
        # Block indexes and ends are the wire's: blocks the neutral events leave out (redacted thinking, the
        # server's own tools) count too, and a text or thinking block's end is no neutral event.
        self.block, self.blocks, self.calls = None, 0, {}
        for _, _, obj in json_objects(sent):
            kind, index = obj.get("type"), whole(obj.get("index"))
            block: dict[str, Any] = obj["content_block"] if isinstance(obj.get("content_block"), dict) else {}
            if kind == "ping":
                self.pinged = True
            elif kind == "content_block_start" and isinstance(index, int):
                self.block, self.blocks = (index, str(block.get("type"))), max(self.blocks, index + 1)
                if block.get("type") == "tool_use":
                    self.calls[len(self.calls)] = index
            elif kind == "content_block_stop" and self.block is not None and self.block[0] == index:
                self.block = None
            elif kind == "message_delta":
                self.stopped = True

    def _event(self, event: Event) -> None:
        if isinstance(event, ToolCallStart | ToolCallDelta | ToolCallEnd) and (
            event.index in self.server_calls or (isinstance(event, ToolCallStart) and event.server)
        ):
            self.server_calls.add(event.index)  # the server's own tools have results of their own shapes here
            return
        if isinstance(event, Start):
            self.emit({"type": "message_start", "message": self.envelope(event)})
        elif isinstance(event, ReasoningDelta):
            self.enter("thinking")
            self.delta({"type": "thinking_delta", "thinking": event.text})
        elif isinstance(event, ReasoningSignature):
            self.enter("thinking")
            self.delta({"type": "signature_delta", "signature": event.signature})
            self.leave()  # the signature comes last in its block
        elif isinstance(event, TextDelta):
            self.enter("text")
            self.delta({"type": "text_delta", "text": event.text})
        elif isinstance(event, RefusalDelta):
            self.refusal += event.text  # the explanation goes out with the stop
        elif isinstance(event, ToolCallStart):
            self.leave()
            block = {"type": "tool_use", "id": event.id or f"toolu_{event.index}", "name": event.name, "input": {}}
            self.calls[event.index] = self.open(block)
            self.delta({"type": "input_json_delta", "partial_json": ""})
        elif isinstance(event, ToolCallDelta):
            # Blocks come one at a time: a call's arguments after another block opened have no place.
            if event.arguments and self.open_call(event.index):
                self.delta({"type": "input_json_delta", "partial_json": event.arguments})
        elif isinstance(event, ToolCallEnd):
            if self.open_call(event.index):
                self.leave()
        elif isinstance(event, Finish):
            self.leave()
            self.finish = event
        elif isinstance(event, Usage):
            self.stop(self.finish or Finish(), event)
        elif isinstance(event, Error):
            # Nothing closes: the error ends the stream where it stands.
            self.emit(error_json(event.message, _wire_type(event.type), event.code))
        # Progress has no words here.

    def _end(self) -> None:
        if not self.fed:
            return
        self.leave()
        if not self.stopped:
            self.stop(self.finish or Finish(), None)
        self.emit({"type": "message_stop"})

    def emit(self, obj: dict[str, Any]) -> None:
        self.frames.append(named_frame(obj))

    def delta(self, delta: dict[str, Any]) -> None:
        assert self.block is not None
        self.emit({"type": "content_block_delta", "index": self.block[0], "delta": delta})

    def open(self, block: dict[str, Any]) -> int:
        index, self.blocks = self.blocks, self.blocks + 1
        self.block = (index, block["type"])
        self.emit({"type": "content_block_start", "index": index, "content_block": block})
        if not self.pinged:
            self.frames.append(_PING)
            self.pinged = True
        return index

    def enter(self, kind: str) -> None:
        """Make sure a block of this kind is open: the one open, or a new one."""
        if self.block is not None and self.block[1] == kind:
            return
        self.leave()
        self.open(
            {"type": "text", "text": ""} if kind == "text" else {"type": "thinking", "thinking": "", "signature": ""}
        )

    def leave(self) -> None:
        if self.block is not None:
            self.emit({"type": "content_block_stop", "index": self.block[0]})
            self.block = None

    def open_call(self, index: int) -> bool:
        return index in self.calls and self.block is not None and self.block[0] == self.calls[index]

    def envelope(self, start: Start) -> dict[str, Any]:
        """The message of `message_start`: no content and no stop yet. The API counts the input tokens before it
        starts; the neutral events count every token at the end, and `message_delta` tells them all."""
        usage: dict[str, Any] = {
            "input_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 1,
        }
        head: dict[str, Any] = {"id": start.id or "msg_sse_tape", "type": "message", "role": "assistant"}
        head["model"] = start.model
        if self.answer is not None:
            head = {**self.answer, **head}
            recorded = self.answer.get("usage")
            usage = {**recorded, "output_tokens": 1} if isinstance(recorded, dict) else usage
        fields: dict[str, Any] = {
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "stop_details": None,
            "usage": usage,
        }
        return {**head, **fields}

    def stop(self, finish: Finish, usage: Usage | None) -> None:
        """`message_delta`: the stop, and the usage."""
        self.stopped = True
        reason = "refusal" if self.refusal else _STOP_REASONS.get(finish.reason, "end_turn")
        details = {"type": "refusal", "category": None, "explanation": self.refusal or None}
        delta: dict[str, Any] = {
            "stop_reason": reason,
            "stop_sequence": None,
            "stop_details": details if reason == "refusal" else None,
        }
        counts = _usage_json(usage)
        if self.answer is not None and self.answer.get("stop_reason") == reason:
            delta |= {k: self.answer[k] for k in ("stop_sequence", "stop_details") if k in self.answer}
            if usage is not None and isinstance(self.answer.get("usage"), dict):
                counts = self.answer["usage"]
        self.emit({"type": "message_delta", "delta": delta, "usage": counts})


def _usage_json(usage: Usage | None) -> dict[str, Any]:
    """`message_delta`'s usage: the totals, the input's included (the SDK takes them from here)."""
    if usage is None:
        return {"output_tokens": 0}
    out: dict[str, Any] = {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.cached_tokens or 0,
        "output_tokens": usage.output_tokens,
    }
    if usage.reasoning_tokens:
        out["output_tokens_details"] = {"thinking_tokens": usage.reasoning_tokens}
    return out


def _usage_from(usage: dict[str, Any], started: dict[str, Any]) -> Usage:
    """A Usage from `message_delta`'s usage (its `output_tokens` a number), what it leaves out from `message_start`'s."""

    def count(name: str) -> int | None:
        value = usage.get(name, started.get(name))
        return whole(value)

    details = usage.get("output_tokens_details")
    thinking = whole(details.get("thinking_tokens")) if isinstance(details, dict) else None
    return Usage(
        count("input_tokens") or 0, usage["output_tokens"], thinking or None, count("cache_read_input_tokens") or None
    )


def _held(block: dict[str, Any], call: int | None) -> list[Event]:
    """The events a `content_block_start` carries: a tool call's start, or what a block holds from the first."""
    kind = block.get("type")
    if kind == "tool_use" and call is not None:
        events: list[Event] = [ToolCallStart(call, str(block.get("id", "")), str(block.get("name", "")))]
        if isinstance(block.get("input"), dict) and block["input"]:
            events.append(ToolCallDelta(call, _json.dumps(block["input"])))
        return events
    if kind == "text" and block.get("text"):
        return [TextDelta(str(block["text"]))]
    if kind == "thinking" and block.get("thinking"):
        return [ReasoningDelta(str(block["thinking"]))]
    return []


def _error_from(obj: dict[str, Any]) -> Error:
    error: dict[str, Any] = obj["error"] if isinstance(obj.get("error"), dict) else {}
    details = error.get("details")
    code = details.get("error_code") if isinstance(details, dict) else None
    kind = _neutral_type(str(error.get("type") or "api_error"))
    return Error(str(error.get("message", "")), kind, code if isinstance(code, str) else None)


def decode_indexed(events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
    """`AnthropicMessages.decode_indexed`."""
    out: list[tuple[int, Event]] = []
    calls: dict[int, int] = {}  # an open tool_use block's index -> its tool call's index
    count = 0  # tool calls so far
    started: dict[str, Any] = {}
    stopped = False
    for i, name, obj in json_objects(events):
        kind, index = obj.get("type", name), whole(obj.get("index"))
        delta: dict[str, Any] = obj["delta"] if isinstance(obj.get("delta"), dict) else {}
        if kind == "message_start":
            message: dict[str, Any] = obj["message"] if isinstance(obj.get("message"), dict) else {}
            started = message["usage"] if isinstance(message.get("usage"), dict) else {}
            out.append((i, Start(str(message.get("id", "")), str(message.get("model", "")))))
        elif kind == "content_block_start" and isinstance(index, int):
            block: dict[str, Any] = obj["content_block"] if isinstance(obj.get("content_block"), dict) else {}
            if block.get("type") == "tool_use":
                calls[index], count = count, count + 1
            out += [(i, event) for event in _held(block, calls.get(index))]
        elif kind == "content_block_delta":
            step = delta.get("type")
            if step == "text_delta" and delta.get("text"):
                out.append((i, TextDelta(str(delta["text"]))))
            elif step == "thinking_delta" and delta.get("thinking"):
                out.append((i, ReasoningDelta(str(delta["thinking"]))))
            elif step == "signature_delta" and delta.get("signature"):
                out.append((i, ReasoningSignature(str(delta["signature"]))))
            elif step == "input_json_delta" and index in calls and delta.get("partial_json"):
                out.append((i, ToolCallDelta(calls[index], str(delta["partial_json"]))))
        elif kind == "content_block_stop" and index in calls:
            out.append((i, ToolCallEnd(calls.pop(index))))
        elif kind == "message_delta" and not stopped:
            stopped = True
            details = delta.get("stop_details")
            if isinstance(details, dict) and details.get("explanation"):
                out.append((i, RefusalDelta(str(details["explanation"]))))
            out.append((i, Finish(FINISHES.get(str(delta.get("stop_reason")), "stop"))))
            usage = obj.get("usage")
            if isinstance(usage, dict) and whole(usage.get("output_tokens")) is not None:
                out.append((i, _usage_from(usage, started)))
        elif kind == "error":
            out.append((i, _error_from(obj)))
    return out


def response_json(dialect: Generation, events: Sequence[Event]) -> dict[str, Any]:
    """`AnthropicMessages.response_json`."""
    answered = [e for e in events if not isinstance(e, Error)]  # an error has no answer (see Generation)
    started = answered if any(isinstance(e, Start) for e in answered) else [Start(), *answered]
    built = message_of(SSEDecoder().feed(b"".join(dialect.encode(started))))
    assert built is not None  # the encoder starts the message with the Start
    return built


def decode_json(body: Any) -> list[Event]:
    """`AnthropicMessages.decode_json`."""
    if not isinstance(body, dict) or body.get("type") != "message" or not isinstance(body.get("content"), list):
        return []
    events: list[Event] = [Start(str(body.get("id", "")), str(body.get("model", "")))]
    calls = 0
    for block in body["content"]:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and block.get("text"):
            events.append(TextDelta(str(block["text"])))
        elif kind == "thinking":
            events += [ReasoningDelta(str(block["thinking"]))] if block.get("thinking") else []
            events += [ReasoningSignature(str(block["signature"]))] if block.get("signature") else []
        elif kind == "tool_use":
            arguments = _json.dumps(block["input"]) if isinstance(block.get("input"), dict) else "{}"
            events += [ToolCallStart(calls, str(block.get("id", "")), str(block.get("name", "")))]
            events += [ToolCallDelta(calls, arguments), ToolCallEnd(calls)]
            calls += 1
    details = body.get("stop_details")
    if isinstance(details, dict) and details.get("explanation"):
        events.append(RefusalDelta(str(details["explanation"])))
    events.append(Finish(FINISHES.get(str(body.get("stop_reason")), "tool_calls" if calls else "stop")))
    usage = body.get("usage")
    if isinstance(usage, dict) and whole(usage.get("output_tokens")) is not None:
        events.append(_usage_from(usage, {}))
    return events
