"""How `bedrock-converse` encodes and decodes neutral events: its encoder, its stream's and its answer's
decoding, its answer, and its exceptions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from ... import _json
from ...cassette import Headers
from ...sse import ServerSentEvent, encode_event
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
from ..generation import Generation, ServerCalls, as_object, whole
from ..protocol import json_objects, to_json

__all__ = [
    "EVENTS",
    "EXCEPTION_STATUS",
    "STOP_REASONS",
    "BedrockErrors",
    "ConverseEncoder",
    "decode_indexed",
    "decode_json",
    "exception_error",
    "exception_of",
    "http_error",
    "named_exception",
    "response_json",
]

STOP_REASONS = (
    "end_turn", "tool_use", "max_tokens", "stop_sequence", "guardrail_intervened", "content_filtered",
    "malformed_model_output", "malformed_tool_use", "model_context_window_exceeded",
)  # fmt: skip
"""The `stopReason`s of botocore's model of the API (`StopReason`)."""

EVENTS = ("messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata")
"""The events of a `ConverseStream` answer, in botocore's model (`ConverseStreamOutput`)."""

EXCEPTION_STATUS = {
    "validationException": 400,
    "throttlingException": 429,
    "modelStreamErrorException": 424,
    "internalServerException": 500,
    "serviceUnavailableException": 503,
}
"""The exceptions a `ConverseStream` answer may end with (`:exception-type`), and the HTTP status each has
before a stream (botocore's model)."""

# The neutral error types, as the exception that reports each mid-stream (and back).
_TYPE_EXCEPTION = {
    "invalid_request_error": "validationException",
    "rate_limit_error": "throttlingException",
    "server_error": "modelStreamErrorException",
    "api_error": "internalServerException",
    "overloaded_error": "serviceUnavailableException",
}
_EXCEPTION_TYPE = {exception: kind for kind, exception in _TYPE_EXCEPTION.items()}

# Neutral finish reasons in the API's words, and its stop reasons in neutral words.
_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens", "content_filter": "content_filtered"}
_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}


# The exception an error before the stream is, by its status (botocore's model of the API's errors).
_STATUS_ERROR = {
    400: "ValidationException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}
# Where the API's error type header says its errors come from.
_ERROR_NAMESPACE = "http://internal.amazon.com/coral/com.amazon.bedrock/"


def http_error(
    status: int, message: str, *, type: str | None = None, code: str | None = None
) -> tuple[int, Headers, bytes]:
    """Bedrock's error before a stream, for every call of its runtime API: `{"message": ...}`, its exception
    named in the `x-amzn-ErrorType` header (where botocore reads the code from): the one `code` or `type`
    names, else the status's."""
    named = named_exception(type or "", code)
    if named is not None:
        name = named[:1].upper() + named[1:]
    else:
        name = _STATUS_ERROR.get(status) or ("ValidationException" if status < 500 else "InternalServerException")
    headers = (("content-type", "application/json"), ("x-amzn-errortype", f"{name}:{_ERROR_NAMESPACE}"))
    return status, headers, to_json({"message": message}).encode()


def named_exception(type: str, code: str | None = None) -> str | None:
    """The exception an error of this neutral `type` and `code` is: the one `code` names (`throttlingException`,
    or as the API names it before a stream, `ThrottlingException`), else its type's (`modelStreamErrorException`
    for a server error); None when neither names one."""
    named = (code or "")[:1].lower() + (code or "")[1:]
    return named if named in EXCEPTION_STATUS else _TYPE_EXCEPTION.get(type)


def exception_of(error: Error) -> str:
    """The exception that reports `error` mid-stream (`named_exception`; `internalServerException` for an
    error the API has no word for)."""
    return named_exception(error.type, error.code) or "internalServerException"


def _frame(name: str, obj: dict[str, Any]) -> bytes:
    """An event as SSE: named by its type, its payload as data (`framing.EVENT_STREAM` frames it as AWS does)."""
    return encode_event(to_json(obj), event=name)


def _usage_json(usage: Usage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "totalTokens": usage.input_tokens + usage.output_tokens,
    }
    if usage.cached_tokens is not None:
        out["cacheReadInputTokens"] = usage.cached_tokens
    return out


def _usage_from(obj: Any) -> Usage | None:
    if not isinstance(obj, dict):
        return None
    read, written = whole(obj.get("inputTokens")), whole(obj.get("outputTokens"))
    if read is None and written is None:
        return None
    return Usage(read or 0, written or 0, None, whole(obj.get("cacheReadInputTokens")))


def _metrics(usage: Usage) -> dict[str, Any]:
    """The stream's metrics: its latency, which neutral events carry only as the time to the first token."""
    return {"latencyMs": round((usage.first_token_seconds or 0.0) * 1000)}


class ConverseEncoder(Encoder):
    """bedrock-converse's encoder: blocks one at a time (a text or reasoning block opens with its first delta,
    a tool use with `contentBlockStart`), `messageStop` at the finish, `metadata` with the usage after it."""

    def __init__(self, dialect: Generation) -> None:
        super().__init__(dialect)
        self.block: tuple[int, str] | None = None
        """The block open on the wire: its index and kind (`text`, `reasoning`, `toolUse`)."""
        self.blocks = 0
        """How many blocks have opened: the next one's index."""
        self.calls: dict[int, int] = {}
        """Each tool call's index, and the index of its block."""
        self.server_calls = ServerCalls()
        self.stopped = False
        """Whether `messageStop` has gone out."""

    def _sync(self, sent: Sequence[ServerSentEvent]) -> None:
        self.block, self.blocks, self.calls = None, 0, {}
        for _, name, obj in json_objects(sent):
            index = whole(obj.get("contentBlockIndex"))
            if name in ("contentBlockStart", "contentBlockDelta") and index is not None and index >= self.blocks:
                start = obj.get("start")
                kind = "toolUse" if isinstance(start, dict) and "toolUse" in start else _kind(obj.get("delta"))
                self.block, self.blocks = (index, kind), index + 1
                if kind == "toolUse":
                    self.calls[len(self.calls)] = index
            elif name == "contentBlockStop" and self.block is not None and self.block[0] == index:
                self.block = None
            elif name == "messageStop":
                self.stopped = True

    def _event(self, event: Event) -> None:
        if self.server_calls.skip(event):
            return  # a tool the server ran itself (LM Studio's): every tool use here is the client's
        if isinstance(event, Start):
            self.emit("messageStart", {"role": "assistant"})
        elif isinstance(event, ReasoningDelta):
            self.delta("reasoning", {"reasoningContent": {"text": event.text}})
        elif isinstance(event, ReasoningSignature):
            self.delta("reasoning", {"reasoningContent": {"signature": event.signature}})
            self.leave()  # the signature ends its block
        elif isinstance(event, TextDelta | RefusalDelta):  # no refusal of its own: it is the answer
            self.delta("text", {"text": event.text})
        elif isinstance(event, ToolCallStart):
            self.leave()
            index, self.blocks = self.blocks, self.blocks + 1
            self.block, self.calls[event.index] = (index, "toolUse"), index
            start = {"toolUse": {"toolUseId": event.id or f"tooluse_{event.index}", "name": event.name}}
            self.emit("contentBlockStart", {"start": start, "contentBlockIndex": index})
        elif isinstance(event, ToolCallDelta):
            # Blocks come one at a time: a call's input after another block opened has no place.
            if event.arguments and self.open_call(event.index):
                self.delta("toolUse", {"toolUse": {"input": event.arguments}})
        elif isinstance(event, ToolCallEnd):
            if self.open_call(event.index):
                self.leave()
        elif isinstance(event, Finish):
            self.leave()
            self.stop(event)
        elif isinstance(event, Usage):
            if not self.stopped:
                self.stop(Finish())
            self.emit("metadata", {"usage": _usage_json(event), "metrics": _metrics(event)})
        elif isinstance(event, Error):
            # Nothing closes: the exception ends the stream where it stands.
            self.emit(exception_of(event), {"message": event.message})
        # Progress has no words here.

    def _end(self) -> None:
        if not self.fed:
            return
        self.leave()
        if not self.stopped:
            self.stop(Finish())

    def emit(self, name: str, obj: dict[str, Any]) -> None:
        """An event of this name with `obj` as its payload."""
        self.frames.append(_frame(name, obj))

    def stop(self, finish: Finish) -> None:
        """`messageStop`, after the open block's stop."""
        self.leave()
        self.stopped = True
        self.emit("messageStop", {"stopReason": _STOP.get(finish.reason, "end_turn")})

    def delta(self, kind: str, delta: dict[str, Any]) -> None:
        """A delta of a block of this kind: the one open, or a new one (a text or a reasoning block)."""
        if self.block is None or self.block[1] != kind:
            self.leave()
            self.block, self.blocks = (self.blocks, kind), self.blocks + 1
        self.emit("contentBlockDelta", {"delta": delta, "contentBlockIndex": self.block[0]})

    def leave(self) -> None:
        """Stop the open block, if one is."""
        if self.block is not None:
            self.emit("contentBlockStop", {"contentBlockIndex": self.block[0]})
            self.block = None

    def open_call(self, index: int) -> bool:
        """Whether the block of the tool call `index` is the one open."""
        return index in self.calls and self.block is not None and self.block[0] == self.calls[index]


def _kind(delta: Any) -> str:
    """What block a delta belongs in: `text`, `reasoning` or `toolUse` (its one field's, as the wire names it)."""
    if isinstance(delta, dict):
        if "reasoningContent" in delta:
            return "reasoning"
        if "toolUse" in delta:
            return "toolUse"
    return "text"


def exception_error(name: str, obj: dict[str, Any]) -> Error:
    """The neutral error an exception message (its name, its payload) reports."""
    kind = _EXCEPTION_TYPE.get(name, "server_error")
    return Error(str(obj.get("message", "")), kind, None if name in _EXCEPTION_TYPE else name)


def decode_indexed(events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
    """`BedrockConverse.decode_indexed`."""
    out: list[tuple[int, Event]] = []
    calls: dict[int, int] = {}  # a tool use block's index, and its call's
    for i, name, obj in json_objects(events):
        index = whole(obj.get("contentBlockIndex"))
        if name.endswith("Exception"):
            out.append((i, exception_error(name, obj)))
        elif name == "messageStart":
            out.append((i, Start()))
        elif name == "contentBlockStart":
            start = obj.get("start")
            tool = start.get("toolUse") if isinstance(start, dict) else None
            if isinstance(tool, dict) and index is not None:
                calls[index] = len(calls)
                out.append((i, ToolCallStart(calls[index], str(tool.get("toolUseId", "")), str(tool.get("name", "")))))
        elif name == "contentBlockDelta":
            out += [(i, event) for event in _delta(obj.get("delta"), calls.get(index) if index is not None else None)]
        elif name == "contentBlockStop" and index in calls:
            out.append((i, ToolCallEnd(calls[index])))
        elif name == "messageStop":
            out.append((i, Finish(_FINISH.get(str(obj.get("stopReason")), "stop"))))
        elif name == "metadata" and (usage := _usage_from(obj.get("usage"))) is not None:
            out.append((i, usage))
    return out


def _delta(delta: Any, call: int | None) -> list[Event]:
    if not isinstance(delta, dict):
        return []
    if isinstance(delta.get("text"), str) and delta["text"]:
        return [TextDelta(delta["text"])]
    reasoning = delta.get("reasoningContent")
    if isinstance(reasoning, dict):
        found: list[Event] = []
        if isinstance(reasoning.get("text"), str) and reasoning["text"]:
            found.append(ReasoningDelta(reasoning["text"]))
        if isinstance(reasoning.get("signature"), str) and reasoning["signature"]:
            found.append(ReasoningSignature(reasoning["signature"]))
        return found
    tool = delta.get("toolUse")
    if isinstance(tool, dict) and call is not None and isinstance(tool.get("input"), str) and tool["input"]:
        return [ToolCallDelta(call, tool["input"])]
    return []


def response_json(events: Sequence[Event]) -> dict[str, Any]:
    """`BedrockConverse.response_json`: a `ConverseResponse`, its content blocks in the order they came."""
    content: list[dict[str, Any]] = []
    calls: dict[int, dict[str, Any]] = {}
    arguments: dict[int, str] = {}
    finish, usage = "stop", Usage(0, 0)
    last: str | None = None  # the kind of the block a delta of that kind goes on, if one is open
    for event in events:
        if isinstance(event, TextDelta | RefusalDelta):
            if last != "text":
                content.append({"text": ""})
            content[-1]["text"] += event.text
            last = "text"
        elif isinstance(event, ReasoningDelta | ReasoningSignature):
            if last != "reasoning":
                content.append({"reasoningContent": {"reasoningText": {"text": ""}}})
            block = content[-1]["reasoningContent"]["reasoningText"]
            if isinstance(event, ReasoningDelta):
                block["text"] += event.text
                last = "reasoning"
            else:
                block["signature"], last = event.signature, None  # the signature ends its block
        elif isinstance(event, ToolCallStart) and not event.server:
            calls[event.index] = {"toolUseId": event.id or f"tooluse_{event.index}", "name": event.name, "input": {}}
            content.append({"toolUse": calls[event.index]})
            last = None
        elif isinstance(event, ToolCallDelta) and event.index in calls:
            arguments[event.index] = arguments.get(event.index, "") + event.arguments
        elif isinstance(event, Finish):
            finish = event.reason
        elif isinstance(event, Usage):
            usage = event
    for index, text in arguments.items():
        calls[index]["input"] = as_object(text) or {}
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": _STOP.get(finish, "end_turn"),
        "usage": _usage_json(usage),
        "metrics": _metrics(usage),
    }


def decode_json(body: Any) -> list[Event]:
    """`BedrockConverse.decode_json`: a `ConverseResponse`'s events, each block whole."""
    output = body.get("output") if isinstance(body, dict) else None
    message = output.get("message") if isinstance(output, dict) else None
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return []
    events: list[Event] = [Start()]
    calls = 0
    for block in message["content"]:
        if not isinstance(block, dict):
            continue
        reasoning = block.get("reasoningContent")
        text = reasoning.get("reasoningText") if isinstance(reasoning, dict) else None
        tool = block.get("toolUse")
        if isinstance(block.get("text"), str) and block["text"]:
            events.append(TextDelta(block["text"]))
        elif isinstance(text, dict):
            if isinstance(text.get("text"), str) and text["text"]:
                events.append(ReasoningDelta(text["text"]))
            if isinstance(text.get("signature"), str) and text["signature"]:
                events.append(ReasoningSignature(text["signature"]))
        elif isinstance(tool, dict):
            given = tool.get("input")
            events += [
                ToolCallStart(calls, str(tool.get("toolUseId", "")), str(tool.get("name", ""))),
                ToolCallDelta(calls, _json.dumps({} if given is None else given)),
                ToolCallEnd(calls),
            ]
            calls += 1
    events.append(Finish(_FINISH.get(str(body.get("stopReason")), "stop")))
    if (usage := _usage_from(body.get("usage"))) is not None:
        events.append(usage)
    return events


class BedrockErrors(Generation):
    """How Bedrock's APIs report a failure (`BedrockConverse`'s and `BedrockInvoke`'s): as the exception each
    neutral error is (`exception_of`), with its status before a stream (`exceptions`), in Bedrock's error
    (`http_error`)."""

    exceptions: ClassVar[Mapping[str, int]] = EXCEPTION_STATUS
    """The exceptions its stream may end with, and the HTTP status each has before a stream."""

    def error_status(self, type: str, code: str | None = None) -> int:
        """The status of the exception that reports such an error (`throttlingException`: 429)."""
        return self.exceptions[exception_of(Error("", type, code))]

    def error_name(self, error: Error) -> str:
        """The exception the stream reports it as (`modelStreamErrorException`)."""
        return exception_of(error)

    def http_error(
        self, status: int, message: str, *, type: str | None = None, code: str | None = None
    ) -> tuple[int, Headers, bytes]:
        """Bedrock's error before a stream (`http_error`)."""
        return http_error(status, message, type=type, code=code)
