"""What the OpenAI-family dialects (`openai-chat`, `openai-completions`, `openai-responses`) share.

Their terminal frames, whether a request wants usage, the chunk-stream
framing and its checks; how they encode and decode usage, errors, logprob
entries and server-run tool calls; their non-streaming answer; and their
model list (`GET /v1/models`), in `OpenAIFamily`, the base of the three.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from .. import _json
from ..cassette import Request
from ..sse import ServerSentEvent, encode_event
from .answer import Answer
from .events import Error, Start, TokenLogprob, Usage
from .generation import Generation, whole
from .protocol import Checker, Violation, json_objects, to_json

__all__ = [
    "DONE",
    "ChunkFraming",
    "OpenAIFamily",
    "answer_choices",
    "answer_json",
    "as_recorded",
    "error_event_frames",
    "error_from",
    "has_usage",
    "is_openai_terminal",
    "only_choice",
    "seconds",
    "start_from",
    "token_entries",
    "tokens_from",
    "usage_from",
    "usage_json",
    "usage_total_error",
    "wants_usage",
]

DONE = b"data: [DONE]\n\n"
"""The terminal frame of the OpenAI-style streams."""


class OpenAIFamily(Generation):
    """What the OpenAI APIs share beyond the generation contract: their model list, `GET /v1/models`."""

    models_path: ClassVar[str | None] = "/v1/models"

    def models_json(self, names: Sequence[str]) -> dict[str, Any]:
        return {"object": "list", "data": [self.model_json(name) for name in names]}

    def model_json(self, name: str) -> dict[str, Any]:
        return {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": name.partition("/")[0] if "/" in name else "sse-tape",
        }


def seconds(value: Any) -> int:
    """A Unix time as the APIs send it (`created`, `created_at`): a whole number, else 0."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return int(value) if isinstance(value, float) and math.isfinite(value) else 0


def is_openai_terminal(event: ServerSentEvent) -> bool:
    """The chunk with a finish_reason, a usage-only chunk, an error event, or [DONE]."""
    if event.data == "[DONE]" or event.event == "error":
        return True
    try:
        obj = _json.parse(event.data, max_depth=None)
    except ValueError:
        return False
    choices = obj.get("choices") if isinstance(obj, dict) else None
    if not isinstance(choices, list):
        return False
    return any(isinstance(c, dict) and c.get("finish_reason") for c in choices) or (
        not choices and bool(obj.get("usage"))
    )


def has_usage(event: ServerSentEvent) -> bool:
    """Whether an event is a JSON object with a usage object, the only chunks OpenAI's APIs report usage in."""
    try:
        obj = _json.parse(event.data, max_depth=None)
    except ValueError:
        return False
    return isinstance(obj, dict) and isinstance(obj.get("usage"), dict)


def wants_usage(body: Any) -> bool:
    """Whether a chat or completions request body sets stream_options.include_usage."""
    options = body.get("stream_options") if isinstance(body, dict) else None
    return isinstance(options, dict) and options.get("include_usage") is True


def answer_choices(obj: Any, kind: str, reasons: Sequence[str], violations: list[Violation]) -> list[dict[str, Any]]:
    """The choices of a non-streaming answer whose `object` should be `kind` (`chat.completion`), each one
    a JSON object with a finish_reason among `reasons`; what is not so is added to `violations`."""
    if not isinstance(obj, dict):
        violations.append(Violation(None, f"the answer is not a JSON object with object {kind!r}"))
        return []
    if obj.get("object") != kind:
        violations.append(Violation(None, f"object is {obj.get('object')!r}, not {kind!r}"))
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices:
        violations.append(Violation(None, "choices is missing or empty"))
        return []
    kept = []
    for n, choice in enumerate(choices):
        if not isinstance(choice, dict):
            violations.append(Violation(None, f"choice {n} is not a JSON object"))
            continue
        reason = choice.get("finish_reason")
        if reason not in reasons:
            violations.append(
                Violation(None, f"choice {n} finish_reason {reason!r} is not one of {', '.join(reasons)}")
            )
        kept.append(choice)
    return kept


def only_choice(body: Any) -> dict[str, Any] | None:
    """The choice of a non-streaming OpenAI-style answer, if it has just one (one of several choices, `n` > 1,
    is no stream of one choice)."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return None
    return choices[0]


def as_recorded(body: dict[str, Any], events: Sequence[ServerSentEvent], logprobs: tuple[str, ...]) -> dict[str, Any]:
    """A non-streaming answer built from a chunk stream, with what the chunks carry kept as it was.

    The first chunk's own fields (`system_fingerprint`, `service_tier`, ...),
    the usage object as sent, and the lists of each chunk's `logprobs` named
    in `logprobs` (chat's `content` and `refusal`; completions' `tokens`,
    `token_logprobs`, `top_logprobs` and `text_offset`), joined in order.
    Raises ValueError for a stream of several choices (`n` > 1), which one
    answer of one choice would misstate.
    """
    chunks = [obj for _, name, obj in json_objects(events) if name != "error"]
    indexes = {c.get("index", 0) for obj in chunks for c in obj.get("choices") or [] if isinstance(c, dict)}
    if indexes - {0}:
        raise ValueError("a stream of several choices is replayed as it is")
    if not chunks:
        return body
    extra = {k: v for k, v in chunks[0].items() if k not in ("object", "choices", "usage") and k not in body}
    out = {**body, **extra}
    usage = [obj["usage"] for obj in chunks if isinstance(obj.get("usage"), dict)]
    if usage:
        out["usage"] = usage[-1]
    parts: dict[str, list[Any] | None] = dict.fromkeys(logprobs)
    for obj in chunks:
        for choice in obj.get("choices") or []:
            entries = choice.get("logprobs") if isinstance(choice, dict) else None
            if not isinstance(entries, dict):
                continue
            for name in parts:
                if isinstance(entries.get(name), list):
                    parts[name] = [*(parts[name] or []), *entries[name]]
    if out.get("choices") and any(v is not None for v in parts.values()):
        out["choices"] = [{**out["choices"][0], "logprobs": parts}, *out["choices"][1:]]
    return out


class ChunkFraming:
    """The framing every OpenAI-style chunk stream shares, checked while the chunks are handed on.

    `chunks` notes events after `[DONE]`, error events without a message,
    unexpected event names, data that is not a JSON object, a wrong `object`,
    an `id` that changes and usage whose total is not its prompt and completion
    tokens; `close` notes a stream with no finish or no `[DONE]`, and one with
    no usage when the request set `stream_options.include_usage`.
    """

    def __init__(self, checker: Checker, object_name: str) -> None:
        self.c = checker
        self.object_name = object_name
        self.done_at: int | None = None
        self.error_at: int | None = None
        self.usage_seen = False

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
            if obj.get("usage"):
                self.usage_seen = True
                if (wrong := usage_total_error(obj["usage"])) is not None:
                    c.add(i, wrong)
            yield i, obj

    def close(self, finished_at: int | None, request: Request | None = None) -> None:
        if finished_at is None and self.error_at is None:
            self.c.add(None, "no chunk with a finish_reason")
        if self.done_at is None:
            self.c.add(None, "no terminal frame (data: [DONE])")
        if request is not None and wants_usage(request.json()) and not self.usage_seen and self.error_at is None:
            self.c.add(None, "stream_options.include_usage was set but no chunk carries usage")


def usage_total_error(usage: Any) -> str | None:
    """What is wrong with OpenAI's usage object's total (chat and completions): it is prompt plus completion
    tokens where all three are numbers; None when nothing is."""
    if not isinstance(usage, dict):
        return None
    prompt, completion, total = (whole(usage.get(k)) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
    if prompt is None or completion is None or total is None or total == prompt + completion:
        return None
    return f"usage total_tokens is {total}, not prompt_tokens + completion_tokens ({prompt + completion})"


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
    return Start(str(chunk.get("id", "")), str(chunk.get("model", "")), seconds(chunk.get("created")))


def error_from(obj: dict[str, Any]) -> Error:
    """An Error from an `{"error": {...}}` event."""
    inner = obj.get("error")
    if not isinstance(inner, dict):
        return Error(str(obj))
    return Error(str(inner.get("message", "")), str(inner.get("type") or "server_error"), inner.get("code"))


def error_event_frames(error: Error) -> list[bytes]:
    """How OpenAI-style chunk streams end on an error: `event: error` with the error, then `[DONE]`."""
    body = {"error": {"message": error.message, "type": error.type, "code": error.code}}
    return [encode_event(to_json(body), event="error"), DONE]


def answer_json(answer: Answer, kind: str, choice: dict[str, Any], *, default_id: str) -> dict[str, Any]:
    """A non-streaming OpenAI-style answer (`chat.completion`, `text_completion`): one choice, and the usage."""
    start = answer.start
    body = {"id": start.id or default_id, "object": kind, "created": start.created, "model": start.model}
    body["choices"] = [choice]
    if answer.usage is not None:
        body["usage"] = usage_json(answer.usage)
    return body


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
