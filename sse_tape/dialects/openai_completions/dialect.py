"""`OpenAICompletions`, the `openai-completions` dialect: its protocol and generation contracts, and the rules `check` applies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...cassette import Interaction, Request
from ...sse import ServerSentEvent
from ..encoder import Encoder
from ..events import Event, Usage
from ..generation import LOCAL_SAMPLING, Prompt, messages_text, sampled, sampling, whole
from ..openai_common import (
    ChunkFraming,
    OpenAIFamily,
    answer_choices,
    as_recorded,
    has_usage,
    is_openai_terminal,
    wants_usage,
)
from ..protocol import Checker, Violation, opening
from .codec import FINISH_REASONS, CompletionsEncoder, decode_indexed, decode_json, response_json

__all__ = ["OpenAICompletions"]


class OpenAICompletions(OpenAIFamily):
    """OpenAI (legacy) completions streaming."""

    name = "openai-completions"
    answer = "a text_completion object with one choice and its text"
    path = "/v1/completions"
    id_prefix = "cmpl-"
    turns = "prompt"

    def serves_path(self, path: str) -> bool:
        """A path that ends with `/completions`, but for the chat API's `/chat/completions`."""
        path = path.rstrip("/")
        return path.endswith("/completions") and not path.endswith("/chat/completions")

    def recognises(self, interaction: Interaction) -> bool:
        return any(isinstance(obj, dict) and obj.get("object") == "text_completion" for _, obj in opening(interaction))

    def is_terminal(self, event: ServerSentEvent) -> bool:
        return is_openai_terminal(event)

    def encoder(self, answer: Any = None) -> Encoder:
        return CompletionsEncoder(self)  # the events carry all a chunk does

    def decode_indexed(self, events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
        return decode_indexed(events)

    def reports_usage(self, body: Any) -> bool:
        return wants_usage(body)

    def carries_usage(self, event: ServerSentEvent) -> bool:
        return has_usage(event)

    def response_json(self, events: Sequence[Event]) -> dict[str, Any]:
        return response_json(events)

    def stream_json(self, events: Sequence[ServerSentEvent], usage: Usage | None = None) -> dict[str, Any]:
        return as_recorded(
            super().stream_json(events, usage), events, ("tokens", "token_logprobs", "top_logprobs", "text_offset")
        )

    def decode_json(self, body: Any) -> list[Event]:
        return decode_json(body)

    def check_answer(self, obj: Any, request: Request | None = None) -> list[Violation]:
        found: list[Violation] = []
        for n, choice in enumerate(answer_choices(obj, "text_completion", FINISH_REASONS, found)):
            if not isinstance(choice.get("text"), str):
                found.append(Violation(None, f"choice {n} has no text"))
        return found

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        c = Checker()
        framing = ChunkFraming(c, "text_completion")
        finished_at: int | None = None
        for i, obj in framing.chunks(events):
            choices = obj.get("choices")
            if not isinstance(choices, list) or (not choices and not obj.get("usage")):
                c.add(i, "choices is missing or empty")
                continue
            for choice in choices:
                if not isinstance(choice, dict):
                    c.add(i, "choice is not a JSON object")
                    continue
                if not isinstance(choice.get("text"), str):
                    c.add(i, "choice has no text")
                elif choice["text"] and finished_at is not None:
                    c.add(i, "text after the finish_reason chunk")
                logprobs = choice.get("logprobs")
                if isinstance(logprobs, dict):
                    lengths = {k: len(logprobs.get(k) or []) for k in ("tokens", "token_logprobs", "text_offset")}
                    if len(set(lengths.values())) != 1:
                        counts = ", ".join(f"{k} {n}" for k, n in lengths.items())
                        c.add(i, f"logprobs lists differ in length: {counts}")
                reason = choice.get("finish_reason")
                if reason is not None:
                    if reason not in FINISH_REASONS:
                        c.add(i, f"finish_reason {reason!r} is not one of {', '.join(FINISH_REASONS)}")
                    if finished_at is not None:
                        c.add(i, "finish_reason repeated")
                    finished_at = i
        framing.close(finished_at, request)
        return c.violations

    def prompt(self, body: Any) -> Prompt:
        body = body if isinstance(body, dict) else {}
        text = body.get("prompt", "")
        text = "".join(t for t in text if isinstance(t, str)) if isinstance(text, list) else str(text)
        return Prompt(
            model=str(body.get("model", "")),
            messages=[{"role": "user", "content": text}],
            max_tokens=whole(body.get("max_tokens")),
            include_usage=wants_usage(body),
            text=text,
            logprobs=whole(body.get("logprobs")),
            **sampling(body, LOCAL_SAMPLING),
        )

    def request_body(self, prompt: Prompt) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": prompt.model,
            "prompt": prompt.text if prompt.text is not None else messages_text(prompt),
            "stream": True,
        }
        if prompt.max_tokens is not None:
            body["max_tokens"] = prompt.max_tokens
        if prompt.include_usage:
            body["stream_options"] = {"include_usage": True}
        if prompt.logprobs is not None:
            body["logprobs"] = prompt.logprobs
        return body | sampled(prompt)
