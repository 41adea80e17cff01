"""How the OpenAI-family dialects encode and decode what they share: usage, errors, logprob entries, server-run
tool calls and the non-streaming answer. Imported where they encode or decode: replay needs none of it.
"""

from __future__ import annotations

from typing import Any

from ..sse import encode_event
from ._openai import seconds
from .answer import Answer
from .base import DONE, to_json
from .events import Error, Event, Start, TokenLogprob, ToolCallDelta, ToolCallEnd, ToolCallStart, Usage

__all__ = [
    "ServerCalls",
    "answer_json",
    "error_event_frames",
    "error_from",
    "start_from",
    "token_entries",
    "tokens_from",
    "usage_from",
    "usage_json",
]


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


class ServerCalls:
    """Tool calls the server runs itself (LM Studio's MCP tools): OpenAI's APIs have no place for them."""

    def __init__(self) -> None:
        self.indexes: set[int] = set()

    def skip(self, event: Event) -> bool:
        """Whether `event` belongs to such a call, and is left out."""
        if isinstance(event, ToolCallStart) and event.server:
            self.indexes.add(event.index)
        return isinstance(event, ToolCallStart | ToolCallDelta | ToolCallEnd) and event.index in self.indexes
