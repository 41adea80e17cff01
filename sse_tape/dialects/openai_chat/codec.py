"""How `openai-chat` encodes and decodes neutral events: its encoder, its stream's and its answer's decoding,
and its answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...sse import ServerSentEvent
from ..answer import Answer
from ..encoder import Encoder
from ..events import (
    Error,
    Event,
    Finish,
    ReasoningDelta,
    RefusalDelta,
    Start,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from ..generation import Generation, ServerCalls
from ..openai_common import (
    DONE,
    answer_json,
    error_event_frames,
    error_from,
    only_choice,
    start_from,
    token_entries,
    tokens_from,
    usage_from,
    usage_json,
)
from ..protocol import data_frame, json_objects

__all__ = ["ChatEncoder", "decode_indexed", "decode_json", "response_json"]


class ChatEncoder(Encoder):
    """openai-chat's encoder: every neutral event but progress and a call's end is a chunk."""

    def __init__(self, dialect: Generation) -> None:
        super().__init__(dialect)
        self.start = Start("chatcmpl-sse-tape")
        self.server_calls = ServerCalls()

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        return data_frame({**self._head(), "choices": [choice]})

    def _head(self) -> dict[str, Any]:
        start = self.start
        return {"id": start.id, "object": "chat.completion.chunk", "created": start.created, "model": start.model}

    def _event(self, event: Event) -> None:
        if self.server_calls.skip(event):
            return
        if isinstance(event, Start):
            self.start = event
            self.frames.append(self._chunk({"role": "assistant", "content": ""}))
        elif isinstance(event, TextDelta):
            logprobs = None if event.logprobs is None else {"content": token_entries(event.logprobs), "refusal": None}
            self.frames.append(self._chunk({"content": event.text}, logprobs=logprobs))
        elif isinstance(event, ReasoningDelta):
            self.frames.append(self._chunk({"reasoning_content": event.text}))
        elif isinstance(event, RefusalDelta):
            self.frames.append(self._chunk({"refusal": event.text}))
        elif isinstance(event, ToolCallStart):
            call = {"index": event.index, "id": event.id or f"call_{event.index}", "type": "function"}
            self.frames.append(
                self._chunk({"tool_calls": [{**call, "function": {"name": event.name, "arguments": ""}}]})
            )
        elif isinstance(event, ToolCallDelta):
            self.frames.append(
                self._chunk({"tool_calls": [{"index": event.index, "function": {"arguments": event.arguments}}]})
            )
        elif isinstance(event, Finish):
            self.frames.append(self._chunk({}, finish=event.reason))
        elif isinstance(event, Usage):
            self.frames.append(data_frame({**self._head(), "choices": [], "usage": usage_json(event)}))
        elif isinstance(event, Error):
            self.frames += error_event_frames(event)
        # Progress and ToolCallEnd have no frame of their own here.

    def _end(self) -> None:
        if self.fed:
            self.frames.append(DONE)


def decode_indexed(events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
    """`OpenAIChat.decode_indexed`."""
    out: list[tuple[int, Event]] = []
    open_calls: list[int] = []
    for i, name, obj in json_objects(events):
        if name == "error":
            out.append((i, error_from(obj)))
            continue
        if not out:
            out.append((i, start_from(obj)))
        for choice in obj.get("choices") or []:
            delta: dict[str, Any] | None = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                continue
            if delta.get("reasoning_content"):
                out.append((i, ReasoningDelta(delta["reasoning_content"])))
            if delta.get("content"):
                logprobs = choice.get("logprobs")
                tokens = tokens_from(logprobs.get("content")) if isinstance(logprobs, dict) else None
                out.append((i, TextDelta(delta["content"], tokens)))
            if delta.get("refusal"):
                out.append((i, RefusalDelta(delta["refusal"])))
            for call in delta.get("tool_calls") or []:
                if not isinstance(call, dict) or not isinstance(call.get("index", 0), int):
                    continue
                index = call.get("index", 0)
                function: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else {}
                if index not in open_calls and (call.get("id") or function.get("name")):
                    open_calls.append(index)
                    out.append((i, ToolCallStart(index, str(call.get("id") or ""), str(function.get("name") or ""))))
                if function.get("arguments"):
                    out.append((i, ToolCallDelta(index, function["arguments"])))
            if choice.get("finish_reason"):
                out.extend((i, ToolCallEnd(index)) for index in open_calls)
                open_calls.clear()
                out.append((i, Finish(choice["finish_reason"])))
        if (usage := usage_from(obj.get("usage"))) is not None:
            out.append((i, usage))
    return out


def response_json(events: Sequence[Event]) -> dict[str, Any]:
    """`OpenAIChat.response_json`."""
    answer = Answer.of(events)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": answer.text or None,
        "refusal": answer.refusal or None,
    }
    if answer.reasoning:
        message["reasoning_content"] = answer.reasoning
    if calls := answer.client_calls():
        message["tool_calls"] = [
            {
                "id": call.id or f"call_{call.index}",
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in calls
        ]
    logprobs = None
    if answer.logprobs is not None:
        logprobs = {"content": token_entries(tuple(answer.logprobs)), "refusal": None}
    choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": answer.finish or "stop"}
    return answer_json(answer, "chat.completion", choice, default_id="chatcmpl-sse-tape")


def decode_json(body: Any) -> list[Event]:
    """`OpenAIChat.decode_json`."""
    choice = only_choice(body)
    message = choice.get("message") if choice is not None else None
    if choice is None or not isinstance(message, dict):
        return []
    events: list[Event] = [start_from(body)]
    if isinstance(message.get("reasoning_content"), str) and message["reasoning_content"]:
        events.append(ReasoningDelta(message["reasoning_content"]))
    if isinstance(message.get("content"), str) and message["content"]:
        logprobs = choice.get("logprobs")
        tokens = tokens_from(logprobs.get("content")) if isinstance(logprobs, dict) else None
        events.append(TextDelta(message["content"], tokens or None))
    if isinstance(message.get("refusal"), str) and message["refusal"]:
        events.append(RefusalDelta(message["refusal"]))
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    for index, call in enumerate(calls):
        function: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else {}
        events.append(ToolCallStart(index, str(call.get("id") or ""), str(function.get("name") or "")))
        if isinstance(function.get("arguments"), str) and function["arguments"]:
            events.append(ToolCallDelta(index, function["arguments"]))
        events.append(ToolCallEnd(index))
    events.append(Finish(str(choice.get("finish_reason") or ("tool_calls" if calls else "stop"))))
    if (usage := usage_from(body.get("usage"))) is not None:
        events.append(usage)
    return events
