"""How `openai-completions` encodes and decodes neutral events: its encoder, its stream's and its answer's
decoding, and its answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...sse import ServerSentEvent
from ..answer import Answer
from ..encoder import Encoder
from ..events import Error, Event, Finish, Start, TextDelta, TokenLogprob, Usage
from ..generation import Generation
from ..openai_common import (
    DONE,
    answer_json,
    error_event_frames,
    error_from,
    only_choice,
    start_from,
    usage_from,
    usage_json,
)
from ..protocol import data_frame, json_objects

__all__ = ["FINISH_REASONS", "CompletionsEncoder", "decode_indexed", "decode_json", "response_json"]

FINISH_REASONS = ("stop", "length", "content_filter")
"""The finish reasons of this API: no `tool_calls`, as it has no tool calls."""


class CompletionsEncoder(Encoder):
    """openai-completions' encoder: text, a finish and usage are chunks; the rest has no place here."""

    def __init__(self, dialect: Generation) -> None:
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


def decode_indexed(events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
    """`OpenAICompletions.decode_indexed`."""
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


def response_json(events: Sequence[Event]) -> dict[str, Any]:
    """`OpenAICompletions.response_json`."""
    answer = Answer.of(events)
    logprobs = None if answer.logprobs is None else _logprobs_json(answer.logprobs, 0)
    reason = answer.finish if answer.finish in FINISH_REASONS else "stop"
    choice = {"text": answer.text, "index": 0, "logprobs": logprobs, "finish_reason": reason}
    return answer_json(answer, "text_completion", choice, default_id="cmpl-sse-tape")


def decode_json(body: Any) -> list[Event]:
    """`OpenAICompletions.decode_json`."""
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
