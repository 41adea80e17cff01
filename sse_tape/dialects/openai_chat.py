"""`openai-chat`: POST /v1/chat/completions with `"stream": true`.

As OpenAI, llama.cpp's and llama-cpp-python's servers and hosted routers
stream it: unnamed events of `chat.completion.chunk` JSON; a role frame
first; content, reasoning (`reasoning_content`), refusal and tool-call
deltas; a chunk with `finish_reason`; a usage chunk when
`stream_options.include_usage` is set; then `data: [DONE]`. A mid-stream
error is an `event: error` carrying `{"error": {...}}`, then `[DONE]`.
Without `"stream": true` the answer is one `chat.completion` object.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..cassette import Headers, Request
from ..sse import ServerSentEvent, encode_comment
from ._openai import (
    ChunkFraming,
    ServerCalls,
    answer_json,
    as_recorded,
    error_event_frames,
    error_from,
    is_openai_terminal,
    only_choice,
    start_from,
    token_entries,
    tokens_from,
    usage_from,
    usage_json,
    wants_usage,
)
from .answer import Answer
from .base import (
    DONE,
    Checker,
    Dialect,
    Encoder,
    Prompt,
    Violation,
    chat_messages,
    data_frame,
    json_objects,
    sampled,
    sampling,
    whole,
)
from .events import (
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

__all__ = ["OpenAIChat"]

FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter")


class _ChatEncoder(Encoder):
    def __init__(self, dialect: Dialect) -> None:
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


class OpenAIChat(Dialect):
    """OpenAI chat completions streaming."""

    name = "openai-chat"
    path = "/v1/chat/completions"
    # The hosted router in the seeds: ": heartbeat" after 15 s without a chunk.
    heartbeat = (15.0, encode_comment("heartbeat"))

    def is_terminal(self, event: ServerSentEvent) -> bool:
        return is_openai_terminal(event)

    def response_headers(self, start: Start) -> Headers:
        headers = super().response_headers(start)
        return (*headers, ("x-request-id", start.id)) if start.id else headers

    def encoder(self, answer: Any = None) -> Encoder:
        return _ChatEncoder(self)  # the events carry all a chunk does

    def decode_indexed(self, events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
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
                        out.append(
                            (i, ToolCallStart(index, str(call.get("id") or ""), str(function.get("name") or "")))
                        )
                    if function.get("arguments"):
                        out.append((i, ToolCallDelta(index, function["arguments"])))
                if choice.get("finish_reason"):
                    out.extend((i, ToolCallEnd(index)) for index in open_calls)
                    open_calls.clear()
                    out.append((i, Finish(choice["finish_reason"])))
            if (usage := usage_from(obj.get("usage"))) is not None:
                out.append((i, usage))
        return out

    def reports_usage(self, body: Any) -> bool:
        return wants_usage(body)

    def response_json(self, events: Sequence[Event]) -> dict[str, Any]:
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

    def stream_json(self, events: Sequence[ServerSentEvent]) -> dict[str, Any]:
        return as_recorded(super().stream_json(events), events, ("content", "refusal"))

    def decode_json(self, body: Any) -> list[Event]:
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

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        c = Checker()
        framing = ChunkFraming(c, "chat.completion.chunk")
        role_seen = early_content_reported = usage_seen = False
        finished_at: int | None = None
        calls: dict[int, str] = {}
        repeated: set[int] = set()
        for i, obj in framing.chunks(events):
            choices = obj.get("choices")
            if not isinstance(choices, list):
                c.add(i, "choices is missing or not a list")
                continue
            if obj.get("usage"):
                usage_seen = True
                if usage_from(obj["usage"]) is None:
                    c.add(i, "usage has no prompt_tokens")
            elif not choices:
                c.add(i, "chunk with no choices and no usage")
            for choice in choices:
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if not isinstance(delta, dict):
                    c.add(i, "choice has no delta")
                    continue
                carries = any(delta.get(k) for k in ("content", "refusal", "reasoning_content", "tool_calls"))
                if delta.get("role") is not None:
                    if role_seen:
                        c.add(i, "role frame repeated")
                    elif delta["role"] != "assistant":
                        c.add(i, f"role is {delta['role']!r}, not 'assistant'")
                    role_seen = True
                elif carries and not role_seen and not early_content_reported:
                    c.add(i, "content delta before the role frame")
                    early_content_reported = True
                if carries and finished_at is not None:
                    c.add(i, "delta after the finish_reason chunk")
                self._check_tool_calls(c, i, delta.get("tool_calls") or [], calls, repeated)
                reason = choice.get("finish_reason")
                if reason is None:
                    continue
                if reason not in FINISH_REASONS:
                    c.add(i, f"finish_reason {reason!r} is not one of {', '.join(FINISH_REASONS)}")
                if finished_at is not None:
                    c.add(i, "finish_reason repeated")
                finished_at = i
                if reason == "tool_calls" and not calls:
                    c.add(i, "finish_reason is 'tool_calls' but no tool call was streamed")
                if reason == "stop" and calls:
                    c.add(i, "tool calls were streamed but finish_reason is 'stop'")
        c.violations += self._check_calls(events, request)
        framing.close(finished_at)
        if request is not None and wants_usage(request.json()) and not usage_seen and framing.error_at is None:
            c.add(None, "stream_options.include_usage was set but no chunk carries usage")
        return c.violations

    @staticmethod
    def _check_tool_calls(c: Checker, i: int, deltas: list[Any], calls: dict[int, str], repeated: set[int]) -> None:
        for call in deltas:
            index = call.get("index") if isinstance(call, dict) else None
            if not isinstance(index, int):
                c.add(i, "tool call delta without an index")
                continue
            function: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else {}
            if index not in calls:
                missing = [
                    name
                    for name, ok in (
                        ("id", call.get("id")),
                        ("type 'function'", call.get("type") == "function"),
                        ("function.name", function.get("name")),
                    )
                    if not ok
                ]
                if missing:
                    c.add(i, f"tool call {index} starts without {', '.join(missing)}")
                calls[index] = ""
            elif (call.get("id") or function.get("name")) and index not in repeated:
                # Clients that concatenate deltas (the openai SDK's stream helper) would get the name twice.
                c.add(i, f"tool call {index} repeats its id or name after its first delta")
                repeated.add(index)
            calls[index] += function.get("arguments") or ""

    def prompt(self, body: Any) -> Prompt:
        body = body if isinstance(body, dict) else {}
        tools = [t["function"] for t in body.get("tools") or [] if isinstance(t, dict) and "function" in t]
        choice = body.get("tool_choice")
        if isinstance(choice, dict):
            function = choice.get("function")
            choice = function.get("name") if isinstance(function, dict) else None
        top = whole(body.get("top_logprobs"))
        return Prompt(
            model=str(body.get("model", "")),
            messages=chat_messages(body.get("messages")),
            tools=tools,
            max_tokens=whole(body.get("max_completion_tokens")) or whole(body.get("max_tokens")),
            include_usage=wants_usage(body),
            logprobs=(top or 0) if body.get("logprobs") is True else None,
            tool_choice=choice if isinstance(choice, str) else None,
            **sampling(body),
        )

    def request_body(self, prompt: Prompt) -> dict[str, Any]:
        body: dict[str, Any] = {"model": prompt.model, "messages": prompt.messages, "stream": True}
        if prompt.tools:
            body["tools"] = [{"type": "function", "function": tool} for tool in prompt.tools]
        if prompt.max_tokens is not None:
            body["max_tokens"] = prompt.max_tokens
        if prompt.include_usage:
            body["stream_options"] = {"include_usage": True}
        if prompt.logprobs is not None:
            body |= {"logprobs": True, **({"top_logprobs": prompt.logprobs} if prompt.logprobs else {})}
        if prompt.tool_choice in ("auto", "none", "required"):
            body["tool_choice"] = prompt.tool_choice
        elif prompt.tool_choice:
            body["tool_choice"] = {"type": "function", "function": {"name": prompt.tool_choice}}
        return body | sampled(prompt)
