"""`openai-chat`: POST /v1/chat/completions with `"stream": true`.

As OpenAI, llama.cpp's and llama-cpp-python's servers and hosted routers
stream it: unnamed events of `chat.completion.chunk` JSON; a role frame
first; content, reasoning (`reasoning_content`), refusal and tool-call
deltas; a chunk with `finish_reason`; a usage chunk when
`stream_options.include_usage` is set; then `data: [DONE]`. A mid-stream
error is an `event: error` carrying `{"error": {...}}`, then `[DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from ..cassette import Headers, Request
from ..sse import ServerSentEvent, encode_comment, encode_event
from .base import (
    DONE,
    Checker,
    Dialect,
    Prompt,
    Violation,
    chat_messages,
    data_frame,
    executed_calls,
    json_objects,
    to_json,
)
from .events import (
    Error,
    Event,
    Finish,
    ReasoningDelta,
    RefusalDelta,
    Start,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)

__all__ = ["ChunkFraming", "OpenAIChat"]

FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter")


def usage_json(usage: Usage) -> dict[str, Any]:
    """OpenAI's usage object (chat and completions)."""
    out: dict[str, Any] = {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }
    if usage.cached_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": usage.cached_tokens}
    if usage.reasoning_tokens is not None:
        out["completion_tokens_details"] = {"reasoning_tokens": usage.reasoning_tokens}
    return out


def usage_from(obj: Any) -> Usage | None:
    """A Usage from OpenAI's usage object, if it is one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("prompt_tokens"), int):
        return None
    prompt_details = obj.get("prompt_tokens_details") or {}
    completion_details = obj.get("completion_tokens_details") or {}
    completion = obj.get("completion_tokens")
    return Usage(
        input_tokens=obj["prompt_tokens"],
        output_tokens=completion if isinstance(completion, int) else 0,
        reasoning_tokens=completion_details.get("reasoning_tokens"),
        cached_tokens=prompt_details.get("cached_tokens"),
    )


def start_from(chunk: dict[str, Any]) -> Start:
    """The Start that the first chunk of an OpenAI-style stream implies: its id, model and creation time."""
    return Start(str(chunk.get("id", "")), str(chunk.get("model", "")), int(chunk.get("created") or 0))


def is_openai_terminal(event: ServerSentEvent) -> bool:
    """The chunk with a finish_reason, a usage-only chunk, an error event, or [DONE]."""
    if event.data == "[DONE]" or event.event == "error":
        return True
    try:
        obj = json.loads(event.data)
    except ValueError:
        return False
    choices = obj.get("choices") if isinstance(obj, dict) else None
    if not isinstance(choices, list):
        return False
    return any(isinstance(c, dict) and c.get("finish_reason") for c in choices) or (
        not choices and bool(obj.get("usage"))
    )


def wants_usage(body: Any) -> bool:
    """Whether a chat or completions request body sets stream_options.include_usage."""
    options = body.get("stream_options") if isinstance(body, dict) else None
    return isinstance(options, dict) and options.get("include_usage") is True


def error_json(error: Error) -> dict[str, Any]:
    return {"error": {"message": error.message, "type": error.type, "code": error.code}}


def error_from(obj: dict[str, Any]) -> Error:
    inner = obj.get("error")
    if not isinstance(inner, dict):
        return Error(str(obj))
    return Error(str(inner.get("message", "")), str(inner.get("type") or "server_error"), inner.get("code"))


def token_entries(logprobs: tuple[TokenLogprob, ...]) -> list[dict[str, Any]]:
    """OpenAI's per-token logprob entries (chat and the Responses API): token, logprob, bytes, top_logprobs."""
    return [
        {
            "token": lp.token,
            "logprob": lp.logprob,
            "bytes": list(lp.token.encode()),
            "top_logprobs": [{"token": t, "logprob": p, "bytes": list(t.encode())} for t, p in lp.top],
        }
        for lp in logprobs
    ]


def tokens_from(entries: Any) -> tuple[TokenLogprob, ...]:
    """TokenLogprobs from OpenAI's per-token logprob entries."""
    return tuple(
        TokenLogprob(
            str(e.get("token", "")),
            float(e.get("logprob", 0.0)),
            tuple((str(t.get("token", "")), float(t.get("logprob", 0.0))) for t in e.get("top_logprobs") or []),
        )
        for e in entries or []
    )


def error_event_frames(error: Error) -> list[bytes]:
    """How OpenAI-style chunk streams end on an error: `event: error` with the error, then `[DONE]`."""
    return [encode_event(to_json(error_json(error)), event="error"), DONE]


class ChunkFraming:
    """The framing every OpenAI-style chunk stream shares, checked while the chunks are handed on.

    `chunks` notes events after `[DONE]`, error events without a message,
    unexpected event names, data that is not a JSON object, a wrong `object`
    and an `id` that changes; `close` notes a stream with no finish or no `[DONE]`.
    """

    def __init__(self, checker: Checker, object_name: str) -> None:
        self.c = checker
        self.object_name = object_name
        self.done_at: int | None = None
        self.error_at: int | None = None

    def chunks(self, events: Sequence[ServerSentEvent]) -> Iterator[tuple[int, dict[str, Any]]]:
        c, stream_id = self.c, None
        for i, sse in enumerate(events):
            if self.done_at is not None:
                c.add(i, "event after [DONE]")
                continue
            if sse.data == "[DONE]":
                self.done_at = i
                continue
            if sse.event == "error":
                obj = c.json(i, sse)
                inner = obj.get("error") if isinstance(obj, dict) else None
                if obj is not None and not (isinstance(inner, dict) and isinstance(inner.get("message"), str)):
                    c.add(i, "error event without error.message")
                self.error_at = i
                continue
            if sse.event != "message":
                c.add(i, f"unexpected event type {sse.event!r}")
                continue
            obj = c.json(i, sse)
            if obj is None:
                continue
            if not isinstance(obj, dict):
                c.add(i, "chunk is not a JSON object")
                continue
            if obj.get("object") != self.object_name:
                c.add(i, f"object is {obj.get('object')!r}, not {self.object_name!r}")
            if stream_id is None:
                stream_id = obj.get("id")
            elif obj.get("id") != stream_id:
                c.add(i, f"id changes from {stream_id!r} to {obj.get('id')!r}")
            yield i, obj

    def close(self, finished_at: int | None) -> None:
        if finished_at is None and self.error_at is None:
            self.c.add(None, "no chunk with a finish_reason")
        if self.done_at is None:
            self.c.add(None, "no terminal frame (data: [DONE])")


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

    def encode_indexed(self, events: Sequence[Event]) -> list[tuple[int, bytes]]:
        frames: list[tuple[int, bytes]] = []
        start = Start("chatcmpl-sse-tape")

        def chunk(delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
            return data_frame(
                {
                    "id": start.id,
                    "object": "chat.completion.chunk",
                    "created": start.created,
                    "model": start.model,
                    "choices": [choice],
                }
            )

        skipped = executed_calls(events)
        for i, event in enumerate(events):
            if isinstance(event, ToolCallStart | ToolCallDelta | ToolCallEnd) and event.index in skipped:
                continue
            if isinstance(event, Start):
                start = event
                frames.append((i, chunk({"role": "assistant", "content": ""})))
            elif isinstance(event, TextDelta):
                logprobs = (
                    None if event.logprobs is None else {"content": token_entries(event.logprobs), "refusal": None}
                )
                frames.append((i, chunk({"content": event.text}, logprobs=logprobs)))
            elif isinstance(event, ReasoningDelta):
                frames.append((i, chunk({"reasoning_content": event.text})))
            elif isinstance(event, RefusalDelta):
                frames.append((i, chunk({"refusal": event.text})))
            elif isinstance(event, ToolCallStart):
                call = {"index": event.index, "id": event.id or f"call_{event.index}", "type": "function"}
                frames.append((i, chunk({"tool_calls": [{**call, "function": {"name": event.name, "arguments": ""}}]})))
            elif isinstance(event, ToolCallDelta):
                piece = {"index": event.index, "function": {"arguments": event.arguments}}
                frames.append((i, chunk({"tool_calls": [piece]})))
            elif isinstance(event, Finish):
                frames.append((i, chunk({}, finish=event.reason)))
            elif isinstance(event, Usage):
                usage = {"id": start.id, "object": "chat.completion.chunk", "created": start.created}
                frames.append(
                    (i, data_frame({**usage, "model": start.model, "choices": [], "usage": usage_json(event)}))
                )
            elif isinstance(event, Error):
                frames.extend((i, f) for f in error_event_frames(event))
                return frames
        if events:
            frames.append((len(events) - 1, DONE))
        return frames

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
        for index, arguments in calls.items():
            try:
                json.loads(arguments)
            except ValueError:
                c.add(None, f"tool call {index} arguments are not valid JSON: {arguments[:40]!r}")
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
        return Prompt(
            model=str(body.get("model", "")),
            messages=chat_messages(body.get("messages")),
            tools=tools,
            max_tokens=body.get("max_tokens") or body.get("max_completion_tokens"),
            include_usage=wants_usage(body),
        )

    def request_body(self, prompt: Prompt) -> dict[str, Any]:
        body: dict[str, Any] = {"model": prompt.model, "messages": prompt.messages, "stream": True}
        if prompt.tools:
            body["tools"] = [{"type": "function", "function": tool} for tool in prompt.tools]
        if prompt.max_tokens is not None:
            body["max_tokens"] = prompt.max_tokens
        if prompt.include_usage:
            body["stream_options"] = {"include_usage": True}
        return body
