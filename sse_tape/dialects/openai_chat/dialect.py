"""`OpenAIChat`, the `openai-chat` dialect: its protocol and generation contracts, and the rules `check` applies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...cassette import Headers, Interaction, Request
from ...sse import ServerSentEvent, encode_comment
from ..encoder import Encoder
from ..events import Event, Start, Usage
from ..generation import LOCAL_SAMPLING, Prompt, chat_messages, sampled, sampling, whole
from ..openai_common import (
    ChunkFraming,
    OpenAIFamily,
    answer_choices,
    as_recorded,
    has_usage,
    is_openai_terminal,
    usage_from,
    wants_usage,
)
from ..protocol import Checker, Violation, opening
from .codec import ChatEncoder, decode_indexed, decode_json, response_json

__all__ = ["OpenAIChat"]

FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter")


class OpenAIChat(OpenAIFamily):
    """OpenAI chat completions streaming."""

    name = "openai-chat"
    answer = "a chat.completion object with one choice and its message"
    path = "/v1/chat/completions"
    id_prefix = "chatcmpl-"
    # The hosted router in the seeds: ": heartbeat" after 15 s without a chunk.
    heartbeat = (15.0, encode_comment("heartbeat"))

    def serves_path(self, path: str) -> bool:
        """A path that ends with `/chat/completions`, with or without the `/v1` before it."""
        return path.rstrip("/").endswith("/chat/completions")

    def recognises(self, interaction: Interaction) -> bool:
        return any(
            isinstance(obj, dict) and obj.get("object") == "chat.completion.chunk" for _, obj in opening(interaction)
        )

    def is_terminal(self, event: ServerSentEvent) -> bool:
        return is_openai_terminal(event)

    def response_headers(self, start: Start) -> Headers:
        headers = super().response_headers(start)
        return (*headers, ("x-request-id", start.id)) if start.id else headers

    def encoder(self, answer: Any = None) -> Encoder:
        return ChatEncoder(self)  # the events carry all a chunk does

    def decode_indexed(self, events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
        return decode_indexed(events)

    def reports_usage(self, body: Any) -> bool:
        return wants_usage(body)

    def carries_usage(self, event: ServerSentEvent) -> bool:
        return has_usage(event)

    def response_json(self, events: Sequence[Event]) -> dict[str, Any]:
        return response_json(events)

    def stream_json(self, events: Sequence[ServerSentEvent], usage: Usage | None = None) -> dict[str, Any]:
        return as_recorded(super().stream_json(events, usage), events, ("content", "refusal"))

    def decode_json(self, body: Any) -> list[Event]:
        return decode_json(body)

    def check_answer(self, obj: Any, request: Request | None = None) -> list[Violation]:
        found: list[Violation] = []
        for n, choice in enumerate(answer_choices(obj, "chat.completion", FINISH_REASONS, found)):
            message = choice.get("message")
            if not isinstance(message, dict):
                found.append(Violation(None, f"choice {n} has no message"))
                continue
            if message.get("role") != "assistant":
                found.append(Violation(None, f"choice {n} message role is {message.get('role')!r}, not 'assistant'"))
            calls = message.get("tool_calls")
            if choice.get("finish_reason") == "tool_calls" and not calls:
                found.append(Violation(None, f"choice {n} finish_reason is 'tool_calls' but the message has none"))
            found += super().check_answer({**obj, "choices": [choice]}, request)  # its calls, one choice at a time
        return found

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        c = Checker()
        framing = ChunkFraming(c, "chat.completion.chunk")
        role_seen = early_content_reported = False
        finished_at: int | None = None
        calls: dict[int, str] = {}
        repeated: set[int] = set()
        for i, obj in framing.chunks(events):
            choices = obj.get("choices")
            if not isinstance(choices, list):
                c.add(i, "choices is missing or not a list")
                continue
            if obj.get("usage"):
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
        c.violations += self.check_calls(events, request)
        framing.close(finished_at, request)
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
            allowed = choice.get("allowed_tools")  # a subset of the tools, called as its `mode` says
            choice = (
                function.get("name")
                if isinstance(function, dict)
                else allowed.get("mode")
                if isinstance(allowed, dict)
                else None
            )
        top = whole(body.get("top_logprobs"))
        return Prompt(
            model=str(body.get("model", "")),
            messages=chat_messages(body.get("messages")),
            tools=tools,
            max_tokens=whole(body.get("max_completion_tokens")) or whole(body.get("max_tokens")),
            include_usage=wants_usage(body),
            logprobs=(top or 0) if body.get("logprobs") is True else None,
            tool_choice=choice if isinstance(choice, str) else None,
            **sampling(body, LOCAL_SAMPLING),
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
