"""How `lmstudio-chat` encodes and decodes neutral events: its encoder, its stream's and its answer's
decoding, and its answer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ... import _json
from ...sse import ServerSentEvent
from ..encoder import Encoder
from ..events import (
    Error,
    Event,
    Finish,
    ModelLoadEnd,
    ModelLoadProgress,
    ModelLoadStart,
    PromptEnd,
    PromptProgress,
    PromptStart,
    ReasoningDelta,
    RefusalDelta,
    Start,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from ..generation import Generation
from ..protocol import json_objects, named_frame

__all__ = ["BLOCKS", "LMStudioEncoder", "arguments_text", "decode_indexed", "decode_json", "response_json"]

BLOCKS = {"reasoning": ("reasoning.start", "reasoning.end"), "message": ("message.start", "message.end")}
"""The blocks of a response (reasoning, the message), each with the events that open and close it."""


def arguments_text(arguments: Any) -> str:
    """A tool call's arguments object as the JSON text the neutral events carry."""
    return json.dumps(arguments, ensure_ascii=False)


class LMStudioEncoder(Encoder):
    """lmstudio-chat's encoder: named events in blocks, tool calls the server ran, and `chat.end` with the result."""

    def __init__(self, dialect: Generation, answer: Any = None) -> None:
        super().__init__(dialect)
        self.answer: dict[str, Any] | None = answer if isinstance(answer, dict) else None
        """A recorded result this stream retells: `chat.end` carries it as it was."""
        self.model = ""
        self.block: str | None = None  # the reasoning or message block open on the wire
        self.output: list[dict[str, Any]] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Usage | None = None

    def _end(self) -> None:
        self.enter(None)
        if self.fed:
            self.frames.append(self.end_frame())

    def _sync(self, sent: Sequence[ServerSentEvent]) -> None:
        # Block ends are not neutral events: the wire tells whether the last block is still open.
        self.block = None
        for _, _, obj in json_objects(sent):
            phase, _, step = str(obj.get("type")).partition(".")
            if phase in BLOCKS and step in ("start", "end"):
                self.block = phase if step == "start" else None

    def emit(self, obj: dict[str, Any]) -> None:
        self.frames.append(named_frame(obj))

    def enter(self, kind: str | None) -> None:
        if self.block == kind:
            return
        if self.block is not None:
            self.emit({"type": BLOCKS[self.block][1]})
        if kind is not None:
            self.emit({"type": BLOCKS[kind][0]})
            self.output.append({"type": kind, "content": ""})
        self.block = kind

    def end_frame(self) -> bytes:
        return named_frame({"type": "chat.end", "result": self.result()})

    def result(self) -> dict[str, Any]:
        """What `chat.end` carries: the output so far and the stats (or the recorded result it retells)."""
        if self.answer is not None:
            return self.answer
        result: dict[str, Any] = {"model_instance_id": self.model, "output": self.output}
        if self.usage is not None:
            stats: dict[str, Any] = {
                "input_tokens": self.usage.input_tokens,
                "total_output_tokens": self.usage.output_tokens,
            }
            if self.usage.reasoning_tokens is not None:
                stats["reasoning_output_tokens"] = self.usage.reasoning_tokens
            if self.usage.tokens_per_second is not None:
                stats["tokens_per_second"] = self.usage.tokens_per_second
            if self.usage.first_token_seconds is not None:
                stats["time_to_first_token_seconds"] = self.usage.first_token_seconds
            result["stats"] = stats
        return result

    def _event(self, event: Event) -> None:
        model = self.model
        if isinstance(event, Start):
            self.model = event.model
            self.emit({"type": "chat.start", "model_instance_id": event.model})
        elif isinstance(event, ModelLoadStart):
            self.emit({"type": "model_load.start", "model_instance_id": event.model or model})
        elif isinstance(event, ModelLoadProgress):
            self.emit({"type": "model_load.progress", "model_instance_id": model, "progress": event.progress})
        elif isinstance(event, ModelLoadEnd):
            self.emit({"type": "model_load.end", "model_instance_id": model, "load_time_seconds": event.seconds})
        elif isinstance(event, PromptStart):
            self.emit({"type": "prompt_processing.start"})
        elif isinstance(event, PromptProgress):
            self.emit({"type": "prompt_processing.progress", "progress": event.progress})
        elif isinstance(event, PromptEnd):
            self.emit({"type": "prompt_processing.end"})
        elif isinstance(event, ReasoningDelta):
            self.enter("reasoning")
            self.output[-1]["content"] += event.text
            self.emit({"type": "reasoning.delta", "content": event.text})
        elif isinstance(event, TextDelta | RefusalDelta):
            self.enter("message")
            self.output[-1]["content"] += event.text
            self.emit({"type": "message.delta", "content": event.text})
        elif isinstance(event, ToolCallStart):
            self.enter(None)
            self.calls[event.index] = {"tool": event.name, "arguments": ""}
            self.emit({"type": "tool_call.start", "tool": event.name})
        elif isinstance(event, ToolCallDelta) and event.index in self.calls:
            self.calls[event.index]["arguments"] += event.arguments  # sent whole, at the end of the call
        elif isinstance(event, ToolCallEnd) and event.index in self.calls:
            self._tool_call_end(event, self.calls.pop(event.index))
        elif isinstance(event, Usage):
            self.usage = event
        elif isinstance(event, Finish):
            self.enter(None)
        elif isinstance(event, Error):
            self.enter(None)
            error = {"type": event.type, "message": event.message}
            if event.code is not None:
                error["code"] = event.code
            self.emit({"type": "error", "error": error})
            self.frames.append(self.end_frame())

    def _tool_call_end(self, event: ToolCallEnd, call: dict[str, Any]) -> None:
        try:
            arguments = _json.parse(call["arguments"], max_depth=None) if call["arguments"] else {}
        except ValueError:
            arguments = call["arguments"]
        if event.error is not None:
            metadata = {"type": "invalid_arguments", "tool_name": call["tool"], "arguments": arguments}
            self.emit({"type": "tool_call.failure", "reason": event.error, "metadata": metadata})
            self.output.append({"type": "invalid_tool_call", "reason": event.error, "metadata": metadata})
            return
        output = event.output or ""
        self.emit({"type": "tool_call.arguments", "tool": call["tool"], "arguments": arguments})
        self.emit({"type": "tool_call.success", "tool": call["tool"], "arguments": arguments, "output": output})
        self.output.append({"type": "tool_call", "tool": call["tool"], "arguments": arguments, "output": output})


def _usage(stats: dict[str, Any]) -> Usage:
    """The usage `stats` hold (their `input_tokens` is a number): counts, and speed where measured."""

    def number(name: str) -> float | None:
        value = stats.get(name)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    return Usage(
        stats["input_tokens"],
        int(stats.get("total_output_tokens") or 0),
        reasoning_tokens=stats.get("reasoning_output_tokens"),
        tokens_per_second=number("tokens_per_second"),
        first_token_seconds=number("time_to_first_token_seconds"),
    )


def _has_message(end: dict[str, Any]) -> bool:
    output = (end.get("result") or {}).get("output") or []
    return any(isinstance(o, dict) and o.get("type") == "message" for o in output)


def decode_indexed(events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
    """`LMStudioChat.decode_indexed`."""
    out: list[tuple[int, Event]] = []
    calls = 0
    open_call: int | None = None
    failed = False
    for i, name, obj in json_objects(events):
        kind = obj.get("type", name)
        if kind == "chat.start":
            out.append((i, Start(model=str(obj.get("model_instance_id", "")))))
        elif kind == "model_load.start":
            out.append((i, ModelLoadStart(str(obj.get("model_instance_id", "")))))
        elif kind == "model_load.progress":
            out.append((i, ModelLoadProgress(float(obj.get("progress", 0.0)))))
        elif kind == "model_load.end":
            out.append((i, ModelLoadEnd(float(obj.get("load_time_seconds", 0.0)))))
        elif kind == "prompt_processing.start":
            out.append((i, PromptStart()))
        elif kind == "prompt_processing.progress":
            out.append((i, PromptProgress(float(obj.get("progress", 0.0)))))
        elif kind == "prompt_processing.end":
            out.append((i, PromptEnd()))
        elif kind == "reasoning.delta" and obj.get("content"):
            out.append((i, ReasoningDelta(obj["content"])))
        elif kind == "message.delta" and obj.get("content"):
            out.append((i, TextDelta(obj["content"])))
        elif kind == "tool_call.start":
            open_call, calls = calls, calls + 1
            out.append((i, ToolCallStart(open_call, "", str(obj.get("tool", "")), server=True)))
        elif kind == "tool_call.arguments" and open_call is not None:
            out.append((i, ToolCallDelta(open_call, arguments_text(obj.get("arguments", {})))))
        elif kind == "tool_call.success" and open_call is not None:
            out.append((i, ToolCallEnd(open_call, output=str(obj.get("output", "")))))
            open_call = None
        elif kind == "tool_call.failure":
            if open_call is None:  # an invalid tool name fails without a start
                open_call, calls = calls, calls + 1
                name = str((obj.get("metadata") or {}).get("tool_name", ""))
                out.append((i, ToolCallStart(open_call, "", name, server=True)))
            out.append((i, ToolCallEnd(open_call, error=str(obj.get("reason", "")))))
            open_call = None
        elif kind == "error":
            error: dict[str, Any] = obj["error"] if isinstance(obj.get("error"), dict) else {}
            out.append((i, Error(str(error.get("message", "")), str(error.get("type", "unknown")), error.get("code"))))
            failed = True
        elif kind == "chat.end" and not failed:
            out.append((i, Finish("tool_calls" if calls and not _has_message(obj) else "stop")))
            stats = (obj.get("result") or {}).get("stats") or {}
            if isinstance(stats.get("input_tokens"), int):
                out.append((i, _usage(stats)))
    return out


def response_json(dialect: Generation, events: Sequence[Event]) -> dict[str, Any]:
    """`LMStudioChat.response_json`."""
    encoder = LMStudioEncoder(dialect)
    for event in events:
        encoder.feed(event)
    encoder.close()
    return encoder.result()


def decode_json(body: Any) -> list[Event]:
    """`LMStudioChat.decode_json`."""
    if not isinstance(body, dict) or not isinstance(body.get("output"), list):
        return []
    events: list[Event] = [Start(str(body.get("response_id") or ""), str(body.get("model_instance_id", "")))]
    calls, message = 0, False
    for item in body["output"]:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind in ("reasoning", "message") and item.get("content"):
            text = str(item["content"])
            events.append(ReasoningDelta(text) if kind == "reasoning" else TextDelta(text))
            message = message or kind == "message"
        elif kind == "tool_call":
            events.append(ToolCallStart(calls, "", str(item.get("tool", "")), server=True))
            events.append(ToolCallDelta(calls, arguments_text(item.get("arguments", {}))))
            events.append(ToolCallEnd(calls, output=str(item.get("output", ""))))
            calls += 1
        elif kind == "invalid_tool_call":
            name = str((item.get("metadata") or {}).get("tool_name", ""))
            events.append(ToolCallStart(calls, "", name, server=True))
            events.append(ToolCallEnd(calls, error=str(item.get("reason", ""))))
            calls += 1
    events.append(Finish("tool_calls" if calls and not message else "stop"))
    stats: dict[str, Any] = body["stats"] if isinstance(body.get("stats"), dict) else {}
    if isinstance(stats.get("input_tokens"), int):
        events.append(_usage(stats))
    return events
