"""`lmstudio-chat`: LM Studio's POST /api/v1/chat with `"stream": true`.

Named events whose data repeats the name in `type`: `chat.start`; optional
`model_load.start` / `.progress` / `.end`; `prompt_processing.start` /
`.progress` / `.end`; blocks of `reasoning.start` / `.delta` / `.end` and
`message.start` / `.delta` / `.end`; tool calls, which LM Studio runs itself
(tools of plugins and MCP servers), as `tool_call.start`,
`tool_call.arguments` (the whole arguments object at once) and
`tool_call.success` (with the tool's output) or `tool_call.failure`; an
`error`; and always last `chat.end`, whose `result` aggregates the output and
the stats, also after an error. Without `"stream": true` the answer is that
result alone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .. import _json
from ..cassette import Headers, Request
from ..sse import ServerSentEvent
from .base import (
    Checker,
    Dialect,
    Prompt,
    Violation,
    chat_messages,
    json_objects,
    named_frame,
    sampled,
    sampling,
    to_json,
    whole,
)
from .encoder import Encoder
from .events import (
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

__all__ = ["EVENT_TYPES", "LMStudioChat"]

EVENT_TYPES = (
    "chat.start",
    "model_load.start",
    "model_load.progress",
    "model_load.end",
    "prompt_processing.start",
    "prompt_processing.progress",
    "prompt_processing.end",
    "reasoning.start",
    "reasoning.delta",
    "reasoning.end",
    "tool_call.start",
    "tool_call.arguments",
    "tool_call.success",
    "tool_call.failure",
    "message.start",
    "message.delta",
    "message.end",
    "error",
    "chat.end",
)

# What may follow what: the phases of a response, in order.
_BLOCK = {"reasoning": ("reasoning.start", "reasoning.end"), "message": ("message.start", "message.end")}


def arguments_text(arguments: Any) -> str:
    """A tool call's arguments object as the JSON text the neutral events carry."""
    return json.dumps(arguments, ensure_ascii=False)


class _LMStudioEncoder(Encoder):
    def __init__(self, dialect: Dialect, answer: Any = None) -> None:
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
            if phase in _BLOCK and step in ("start", "end"):
                self.block = phase if step == "start" else None

    def emit(self, obj: dict[str, Any]) -> None:
        self.frames.append(named_frame(obj))

    def enter(self, kind: str | None) -> None:
        if self.block == kind:
            return
        if self.block is not None:
            self.emit({"type": _BLOCK[self.block][1]})
        if kind is not None:
            self.emit({"type": _BLOCK[kind][0]})
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


class LMStudioChat(Dialect):
    """LM Studio's native REST chat streaming."""

    name = "lmstudio-chat"
    path = "/api/v1/chat"

    def encoder(self, answer: Any = None) -> Encoder:
        return _LMStudioEncoder(self, answer)

    def decode_indexed(self, events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
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
                out.append(
                    (i, Error(str(error.get("message", "")), str(error.get("type", "unknown")), error.get("code")))
                )
                failed = True
            elif kind == "chat.end" and not failed:
                out.append((i, Finish("tool_calls" if calls and not _has_message(obj) else "stop")))
                stats = (obj.get("result") or {}).get("stats") or {}
                if isinstance(stats.get("input_tokens"), int):
                    out.append((i, _usage(stats)))
        return out

    def is_terminal(self, event: ServerSentEvent) -> bool:
        objects = [obj for _, _, obj in json_objects([event])]
        return bool(objects) and objects[0].get("type") in ("chat.end", "error")

    def response_json(self, events: Sequence[Event]) -> dict[str, Any]:
        encoder = _LMStudioEncoder(self)
        for event in events:
            encoder.feed(event)
        encoder.close()
        return encoder.result()

    def stream_json(self, events: Sequence[ServerSentEvent]) -> dict[str, Any]:
        # chat.end carries the whole answer, as the non-streaming call returns it.
        objects = [obj for _, _, obj in json_objects(events)]
        result = objects[-1].get("result") if objects and objects[-1].get("type") == "chat.end" else None
        return result if isinstance(result, dict) else super().stream_json(events)

    def decode_json(self, body: Any) -> list[Event]:
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

    def http_error(
        self, status: int, message: str, *, type: str | None = None, code: str | None = None
    ) -> tuple[int, Headers, bytes]:
        error: dict[str, Any] = {"type": type or ("invalid_request" if status < 500 else "internal_error")}
        error["message"] = message
        if code is not None:
            error["code"] = code
        return status, (("content-type", "application/json"),), to_json({"error": error}).encode()

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        c = Checker()
        previous: str | None = None
        blocks: list[str] = []  # open reasoning/message blocks; more than one is itself a violation
        in_tool = False
        ended_at: int | None = None
        error_seen = False
        streamed = {"reasoning": "", "message": ""}
        progress = {"model_load": -1.0, "prompt_processing": -1.0}
        for i, sse in enumerate(events):
            obj = c.json(i, sse)
            if obj is None:
                continue
            kind = obj.get("type") if isinstance(obj, dict) else None
            if not isinstance(kind, str):
                c.add(i, "data has no type")
                continue
            if kind not in EVENT_TYPES:
                c.add(i, f"unknown event type {kind!r}")
                continue
            if sse.event != kind:
                c.add(i, f"event name {sse.event!r} but type {kind!r}")
            if ended_at is not None:
                c.add(i, f"{kind} after chat.end")
            elif i == 0 and kind != "chat.start":
                c.add(i, f"first event is {kind}, not chat.start")
            phase, _, step = kind.partition(".")
            if phase in _BLOCK:
                if step == "start":
                    if blocks or in_tool:
                        c.add(i, f"{kind} after {previous}")
                    blocks.append(phase)
                elif not blocks or blocks[-1] != phase:
                    c.add(i, f"{kind} after {previous}")
                elif step == "end":
                    blocks.pop()
                if step == "delta":
                    streamed[phase] += str(obj.get("content", ""))
            elif phase == "tool_call":
                if step == "start":
                    if blocks or in_tool:
                        c.add(i, f"{kind} after {previous}")
                    in_tool = True
                elif step == "failure":
                    in_tool = False
                elif not in_tool:
                    c.add(i, f"{kind} after {previous}")
                elif step == "success":
                    in_tool = False
            elif phase in progress and step == "progress":
                value = obj.get("progress")
                if not isinstance(value, int | float) or not 0 <= value <= 1:
                    c.add(i, f"{kind} progress {value!r} is not between 0 and 1")
                elif value < progress[phase]:
                    c.add(i, f"{kind} goes back from {progress[phase]} to {value}")
                else:
                    progress[phase] = value
            elif kind == "error":
                error_seen = True
                if not isinstance(obj.get("error"), dict) or "message" not in obj["error"]:
                    c.add(i, "error event without error.message")
            elif kind == "chat.end":
                ended_at = i
                if blocks:
                    c.add(i, f"chat.end before {_BLOCK[blocks[-1]][1]}")
                self._check_result(c, i, obj.get("result"), streamed)
            previous = kind
        if ended_at is None:
            c.add(None, "no terminal frame (chat.end)" + (" after the error" if error_seen else ""))
        return c.violations

    @staticmethod
    def _check_result(c: Checker, i: int, result: Any, streamed: dict[str, str]) -> None:
        if not isinstance(result, dict) or not isinstance(result.get("output"), list):
            c.add(i, "chat.end has no result.output")
            return
        for kind, text in streamed.items():
            parts = [o for o in result["output"] if isinstance(o, dict) and o.get("type") == kind]
            aggregated = "".join(str(o.get("content", "")) for o in parts)
            if aggregated != text:
                c.add(i, f"chat.end {kind} differs from the streamed {kind}.delta content")

    def prompt(self, body: Any) -> Prompt:
        body = body if isinstance(body, dict) else {}
        given = body.get("input", "")
        messages = [{"role": "user", "content": given}] if isinstance(given, str) else chat_messages(given)
        if isinstance(body.get("system_prompt"), str):
            messages.insert(0, {"role": "system", "content": body["system_prompt"]})
        return Prompt(
            model=str(body.get("model", "")),
            messages=messages,
            max_tokens=whole(body.get("max_output_tokens")),
            include_usage=True,
            **sampling(body, ("temperature", "top_p")),
        )

    def request_body(self, prompt: Prompt) -> dict[str, Any]:
        system = [m["content"] for m in prompt.messages if m["role"] == "system"]
        turns = [m for m in prompt.messages if m["role"] != "system"]
        body: dict[str, Any] = {"model": prompt.model, "input": turns[-1]["content"] if turns else ""}
        if system:
            body["system_prompt"] = "\n\n".join(system)
        if prompt.max_tokens is not None:
            body["max_output_tokens"] = prompt.max_tokens
        body |= sampled(prompt, ("temperature", "top_p"))
        body["stream"] = True
        return body


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
