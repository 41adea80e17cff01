"""`openai-completions`: POST /v1/completions with `"stream": true`.

Unnamed `text_completion` chunks whose `choices[0].text` carries the new
text, with per-token `logprobs` (`tokens`, `text_offset`, `token_logprobs`,
`top_logprobs`) when asked for; a final chunk with `finish_reason`; a usage
chunk when `stream_options.include_usage` is set; `data: [DONE]`. Errors are
framed as in openai-chat. Reasoning, refusals and tool calls have no place
here and are dropped. Without `"stream": true` the answer is one
`text_completion` object.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..cassette import Request
from ..sse import ServerSentEvent
from ._openai import ChunkFraming, as_recorded, has_usage, is_openai_terminal, only_choice, wants_usage
from ._openai_codec import answer_json, error_event_frames, error_from, start_from, usage_from, usage_json
from .answer import Answer
from .base import (
    DONE,
    Checker,
    Dialect,
    Prompt,
    Violation,
    data_frame,
    json_objects,
    messages_text,
    sampled,
    sampling,
    whole,
)
from .encoder import Encoder
from .events import Error, Event, Finish, Start, TextDelta, TokenLogprob, Usage

__all__ = ["OpenAICompletions"]

FINISH_REASONS = ("stop", "length", "content_filter")


class _CompletionsEncoder(Encoder):
    def __init__(self, dialect: Dialect) -> None:
        super().__init__(dialect)
        self.start = Start("cmpl-sse-tape")
        self.offset = 0  # characters of text so far, for the logprobs' text_offset
        self.framed = False

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        start = self.start
        head = {"id": start.id, "object": "text_completion", "created": start.created, "model": start.model}
        self.framed = True
        return data_frame({**head, "choices": choices, **extra})

    def _event(self, event: Event) -> None:
        if isinstance(event, Start):
            self.start = event  # no role frame here: the first text chunk carries the id
        elif isinstance(event, TextDelta):
            logprobs = None
            if event.logprobs is not None:
                logprobs = _logprobs_json(event.logprobs, self.offset)
                self.offset += sum(len(lp.token) for lp in event.logprobs)
            else:
                self.offset += len(event.text)
            self.frames.append(
                self._chunk([{"text": event.text, "index": 0, "logprobs": logprobs, "finish_reason": None}])
            )
        elif isinstance(event, Finish):
            reason = event.reason if event.reason in FINISH_REASONS else "stop"  # no tool calls here
            self.frames.append(self._chunk([{"text": "", "index": 0, "logprobs": None, "finish_reason": reason}]))
        elif isinstance(event, Usage):
            self.frames.append(self._chunk([], usage=usage_json(event)))
        elif isinstance(event, Error):
            self.framed = True
            self.frames += error_event_frames(event)

    def _end(self) -> None:
        if self.framed:
            self.frames.append(DONE)


class OpenAICompletions(Dialect):
    """OpenAI (legacy) completions streaming."""

    name = "openai-completions"
    path = "/v1/completions"

    def is_terminal(self, event: ServerSentEvent) -> bool:
        return is_openai_terminal(event)

    def encoder(self, answer: Any = None) -> Encoder:
        return _CompletionsEncoder(self)  # the events carry all a chunk does

    def decode_indexed(self, events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
        out: list[tuple[int, Event]] = []
        for i, name, obj in json_objects(events):
            if name == "error":
                out.append((i, error_from(obj)))
                continue
            if not out:
                out.append((i, start_from(obj)))
            for choice in obj.get("choices") or []:
                if not isinstance(choice, dict):
                    continue
                if choice.get("text"):
                    out.append((i, TextDelta(choice["text"], _logprobs_from(choice.get("logprobs")))))
                if choice.get("finish_reason"):
                    out.append((i, Finish(choice["finish_reason"])))
            if (usage := usage_from(obj.get("usage"))) is not None:
                out.append((i, usage))
        return out

    def reports_usage(self, body: Any) -> bool:
        return wants_usage(body)

    def carries_usage(self, event: ServerSentEvent) -> bool:
        return has_usage(event)

    def response_json(self, events: Sequence[Event]) -> dict[str, Any]:
        answer = Answer.of(events)
        logprobs = None if answer.logprobs is None else _logprobs_json(answer.logprobs, 0)
        reason = answer.finish if answer.finish in FINISH_REASONS else "stop"
        choice = {"text": answer.text, "index": 0, "logprobs": logprobs, "finish_reason": reason}
        return answer_json(answer, "text_completion", choice, default_id="cmpl-sse-tape")

    def stream_json(self, events: Sequence[ServerSentEvent]) -> dict[str, Any]:
        return as_recorded(
            super().stream_json(events), events, ("tokens", "token_logprobs", "top_logprobs", "text_offset")
        )

    def decode_json(self, body: Any) -> list[Event]:
        choice = only_choice(body)
        if choice is None or not isinstance(choice.get("text"), str):
            return []
        events: list[Event] = [start_from(body)]
        if choice["text"]:
            events.append(TextDelta(choice["text"], _logprobs_from(choice.get("logprobs"))))
        events.append(Finish(str(choice.get("finish_reason") or "stop")))
        if (usage := usage_from(body.get("usage"))) is not None:
            events.append(usage)
        return events

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
        framing.close(finished_at)
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
            **sampling(body),
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


def _logprobs_json(logprobs: Sequence[TokenLogprob], offset: int) -> dict[str, Any]:
    """The completions API's logprobs object for these tokens, the first at character `offset` of the text."""
    offsets = []
    for lp in logprobs:
        offsets.append(offset)
        offset += len(lp.token)
    return {
        "tokens": [lp.token for lp in logprobs],
        "text_offset": offsets,
        "token_logprobs": [lp.logprob for lp in logprobs],
        "top_logprobs": [dict(lp.top) for lp in logprobs],
    }


def _logprobs_from(obj: Any) -> tuple[TokenLogprob, ...] | None:
    if not isinstance(obj, dict):
        return None
    tops = obj.get("top_logprobs") or []
    return tuple(
        TokenLogprob(
            str(token),
            float(logprob or 0.0),
            tuple((str(t), float(p)) for t, p in (tops[n] or {}).items()) if n < len(tops) else (),
        )
        for n, (token, logprob) in enumerate(
            zip(obj.get("tokens") or [], obj.get("token_logprobs") or [], strict=False)
        )
    )
