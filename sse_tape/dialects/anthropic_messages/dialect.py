"""`AnthropicMessages`, the `anthropic-messages` dialect: its protocol and generation contracts, and the rules `check` applies."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from ... import _json
from ...cassette import Headers, Interaction, Request
from ...sse import ServerSentEvent
from ..encoder import Encoder
from ..events import Event, Start, Usage
from ..generation import Continuation, Generation, Prompt, made_id, sampled, sampling, whole
from ..protocol import Checker, Violation, json_objects, opening, to_json
from .codec import (
    ERROR_TYPES,
    FINISHES,
    MessagesEncoder,
    decode_indexed,
    decode_json,
    error_json,
    message_of,
    response_json,
)

__all__ = ["AnthropicMessages"]

# The status that goes with each of the API's error types.
_STATUS_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

# The deltas each type of block takes (a block of a type not named here takes any).
_DELTAS = {
    "text": ("text_delta", "citations_delta"),
    "thinking": ("thinking_delta", "signature_delta"),
    "redacted_thinking": (),
    "tool_use": ("input_json_delta",),
    "server_tool_use": ("input_json_delta",),
}


# The date a model's id ends with (`claude-sonnet-4-20250514`).
_DATE = re.compile(r"20\d{6}")

# How many tokens a request must say it allows when the prompt does not say (the API needs the field).
_DEFAULT_MAX_TOKENS = 4096


class AnthropicMessages(Generation):
    """Anthropic's Messages API streaming."""

    name = "anthropic-messages"
    answer = "a message object with content"
    path = "/v1/messages"
    id_prefix = "msg_"
    models_path = "/v1/models"

    def models_claimed(self, request: Request) -> bool:
        """Whether the request comes with `anthropic-version` or `x-api-key`, as Anthropic's clients send it:
        `/v1/models` is OpenAI's list too, and OpenAI's clients send neither."""
        return request.header("anthropic-version") is not None or request.header("x-api-key") is not None

    def recorded_model(self, request: Request) -> str | None:
        """The model a recorded Messages request names; none for another API's request."""
        return super().recorded_model(request) if self.serves_path(request.path) else None

    def models_json(self, names: Sequence[str]) -> dict[str, Any]:
        """The API's list: one page holding every model, with the ids that bound it."""
        return {
            "data": [self.model_json(name) for name in names],
            "has_more": False,
            "first_id": names[0] if names else None,
            "last_id": names[-1] if names else None,
        }

    def model_json(self, name: str) -> dict[str, Any]:
        """A `ModelInfo`: the id, a display name made from it (`claude-sonnet-4-20250514` is `Claude Sonnet 4`),
        and when it was made, which is the date its id ends with (else the Unix epoch)."""
        words, created = name.split("-"), "1970-01-01T00:00:00Z"
        if len(words) > 1 and _DATE.fullmatch(words[-1]):
            day = words.pop()
            created = f"{day[:4]}-{day[4:6]}-{day[6:]}T00:00:00Z"
        shown: list[str] = []
        for word in words:
            if word.isdigit() and shown and shown[-1][-1:].isdigit():
                shown[-1] += f".{word}"
            else:
                shown.append(word[:1].upper() + word[1:])
        return {
            "type": "model",
            "id": name,
            "display_name": " ".join(w for w in shown if w) or name,
            "created_at": created,
        }

    def recognises(self, interaction: Interaction) -> bool:
        return any(isinstance(obj, dict) and obj.get("type") == "message_start" for _, obj in opening(interaction))

    def response_headers(self, start: Start) -> Headers:
        return (("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache"))

    def new_call_id(self, rng: random.Random) -> str:
        """A `tool_use` block's id as the API makes one: `toolu_01` and 22 letters and digits."""
        return made_id(rng, "toolu_01", 22)

    def is_terminal(self, event: ServerSentEvent) -> bool:
        objects = [obj for _, _, obj in json_objects([event])]
        return bool(objects) and objects[0].get("type") in ("message_delta", "message_stop", "error")

    def encoder(self, answer: Any = None) -> Encoder:
        return MessagesEncoder(self, answer)

    def decode_indexed(self, events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
        return decode_indexed(events)

    def response_json(self, events: Sequence[Event]) -> dict[str, Any]:
        return response_json(self, events)

    def stream_json(self, events: Sequence[ServerSentEvent], usage: Usage | None = None) -> dict[str, Any]:
        # The events build the Message as the SDK builds it: the envelope, blocks and usage as they were sent.
        return message_of(events) or super().stream_json(events, usage)

    def decode_json(self, body: Any) -> list[Event]:
        return decode_json(body)

    def error_status(self, type: str, code: str | None = None) -> int:
        """The status the API sends an error of this type with (`overloaded_error`: 529)."""
        return next((status for status, kind in _STATUS_TYPES.items() if kind == type), 500)

    def http_error(
        self, status: int, message: str, *, type: str | None = None, code: str | None = None
    ) -> tuple[int, Headers, bytes]:
        """The API's error body; `type` (when one of the API's) or else the status says its kind.

        `code` goes in `error.details.error_code`, where the SDK looks for it.
        """
        kind = type if type in ERROR_TYPES else _STATUS_TYPES.get(status)
        kind = kind or ("invalid_request_error" if status < 500 else "api_error")
        body = to_json(error_json(message, kind, code)).encode()
        return status, (("content-type", "application/json"),), body

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        c = Checker()
        started = stopped = False
        ended: str | None = None  # message_stop or error, once either has come
        block: tuple[int, str] | None = None  # the open block: its index and type
        blocks = tool_blocks = 0
        for i, sse in enumerate(events):
            typed = c.typed(i, sse, "data has no type")
            if typed is None:
                continue
            obj, kind = typed
            if sse.event != kind:
                c.add(i, f"event name {sse.event!r} but type {kind!r}")
            if ended is not None:
                c.add(i, f"{kind} after {ended}")
                continue
            if kind == "ping":
                continue  # any number, anywhere
            if kind == "error":
                ended = kind
                error = obj.get("error")
                if not isinstance(error, dict) or not isinstance(error.get("message"), str):
                    c.add(i, "error event without error.message")
                continue
            if not started and kind != "message_start":
                c.add(i, f"first event is {kind}, not message_start")
            elif started and kind == "message_start":
                c.add(i, "message_start repeated")
            started = True
            index = obj.get("index")
            if kind.startswith("content_block_") and stopped:
                c.add(i, f"{kind} after message_delta")
            if kind == "message_start" and not isinstance(obj.get("message"), dict):
                c.add(i, "message_start without a message")
            elif kind == "content_block_start":
                content = obj.get("content_block")
                if not isinstance(index, int) or not isinstance(content, dict) or "type" not in content:
                    c.add(i, "content_block_start without an index and a content_block with a type")
                    continue
                if block is not None:
                    c.add(i, f"content_block_start of block {index} while block {block[0]} is open")
                if index != blocks:
                    c.add(i, f"content_block_start index is {index}, not {blocks}")
                block, blocks = (index, str(content["type"])), index + 1
                tool_blocks += block[1] == "tool_use"
            elif kind == "content_block_delta":
                delta = obj.get("delta")
                step = delta.get("type") if isinstance(delta, dict) else None
                if block is None or block[0] != index:
                    c.add(i, f"content_block_delta for block {index}, which is not open")
                elif step not in _DELTAS.get(block[1], (step,)):
                    c.add(i, f"{step} in a {block[1]} block")
            elif kind == "content_block_stop":
                if block is None or block[0] != index:
                    c.add(i, f"content_block_stop for block {index}, which is not open")
                else:
                    block = None
            elif kind == "message_delta":
                stopped = True
                self._check_stop(c, i, obj, block, tool_blocks)
            elif kind == "message_stop":
                ended = kind
                if not stopped:
                    c.add(i, "message_stop before any message_delta")
        if ended is None:
            c.add(None, "no terminal event (message_stop or error)")
        return c.violations + self.check_calls(events, request)

    @staticmethod
    def _check_stop(c: Checker, i: int, obj: dict[str, Any], block: tuple[int, str] | None, tool_blocks: int) -> None:
        if block is not None:
            c.add(i, f"message_delta while block {block[0]} is open")
        delta = obj.get("delta")
        reason = delta.get("stop_reason") if isinstance(delta, dict) else None
        if not isinstance(reason, str) or reason not in FINISHES:
            c.add(i, f"stop_reason {reason!r} is not one of {', '.join(FINISHES)}")
        elif reason == "tool_use" and not tool_blocks:
            c.add(i, "stop_reason is 'tool_use' but no tool_use block was streamed")
        usage = obj.get("usage")
        if not isinstance(usage, dict) or whole(usage.get("output_tokens")) is None:
            c.add(i, "message_delta has no usage.output_tokens")

    def continues(self, body: Any) -> Continuation | None:
        thread = body.get("thread") if isinstance(body, dict) else None
        if not isinstance(thread, dict) or thread.get("type") != "continue":
            return None
        previous = thread.get("previous_message_id")
        if not isinstance(previous, str) or not previous:
            return None
        return Continuation(previous, keeps_tools="tools" not in body)  # a thread holds what was offered

    def prompt(self, body: Any) -> Prompt:
        body = body if isinstance(body, dict) else {}
        system = body.get("system")
        if isinstance(system, list):
            system = "".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
        messages = [{"role": "system", "content": system}] if isinstance(system, str) and system else []
        for message in body.get("messages") or []:
            if isinstance(message, dict):
                messages += _chat_messages(message)
        tools = [
            {
                "name": t["name"],
                **({"description": t["description"]} if "description" in t else {}),
                "parameters": t["input_schema"],
            }
            for t in body.get("tools") or []
            if isinstance(t, dict) and "name" in t and "input_schema" in t  # the server's own tools have no schema
        ]
        choice = body.get("tool_choice")
        kind = choice.get("type") if isinstance(choice, dict) else None
        tool_choice = {"auto": "auto", "any": "required", "none": "none"}.get(str(kind))
        if kind == "tool" and isinstance(choice, dict) and isinstance(choice.get("name"), str):
            tool_choice = choice["name"]
        stops = body.get("stop_sequences")
        return Prompt(
            model=str(body.get("model", "")),
            messages=messages,
            tools=tools,
            max_tokens=whole(body.get("max_tokens")),
            include_usage=True,
            stop=[s for s in stops if isinstance(s, str) and s] if isinstance(stops, list) else [],
            tool_choice=tool_choice,
            **sampling(body, ("temperature", "top_p", "top_k")),
        )

    def request_body(self, prompt: Prompt) -> dict[str, Any]:
        system = [m["content"] for m in prompt.messages if m["role"] == "system" and m["content"]]
        max_tokens = prompt.max_tokens if prompt.max_tokens is not None else _DEFAULT_MAX_TOKENS
        body: dict[str, Any] = {"model": prompt.model, "max_tokens": max_tokens}
        if system:
            body["system"] = "\n\n".join(system)
        body["messages"] = _messages([m for m in prompt.messages if m["role"] != "system"])
        if prompt.tools:
            body["tools"] = [
                {
                    "name": tool.get("name", ""),
                    **({"description": tool["description"]} if "description" in tool else {}),
                    "input_schema": tool.get("parameters") or {"type": "object"},
                }
                for tool in prompt.tools
            ]
        if prompt.tool_choice in ("auto", "none"):
            body["tool_choice"] = {"type": prompt.tool_choice}
        elif prompt.tool_choice == "required":
            body["tool_choice"] = {"type": "any"}
        elif prompt.tool_choice:
            body["tool_choice"] = {"type": "tool", "name": prompt.tool_choice}
        body |= sampled(prompt, ("temperature", "top_p", "top_k"))
        if prompt.stop:
            body["stop_sequences"] = prompt.stop
        body["stream"] = True
        return body


def _chat_messages(message: dict[str, Any]) -> list[dict[str, Any]]:
    """One of the API's messages as chat messages (see `Prompt.messages`): a user's tool results each one of
    their own, an assistant's tool_use blocks its `tool_calls`."""
    role, content = str(message.get("role", "user")), message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    if role == "assistant":
        kept: dict[str, Any] = {"role": role, "content": text}
        calls = [
            {
                "id": str(b.get("id", "")),
                "type": "function",
                "function": {"name": str(b.get("name", "")), "arguments": _json.dumps(b.get("input") or {})},
            }
            for b in blocks
            if b.get("type") == "tool_use"
        ]
        return [kept | {"tool_calls": calls}] if calls else [kept]
    results = [
        {"role": "tool", "content": _result_text(b.get("content")), "tool_call_id": str(b.get("tool_use_id", ""))}
        for b in blocks
        if b.get("type") == "tool_result"
    ]
    return results + ([{"role": role, "content": text}] if text or not results else [])


def _result_text(content: Any) -> str:
    """A tool result's content, as text: a string, or its text blocks joined."""
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return content if isinstance(content, str) else ""


def _messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as the API's: tool results in a user message of their own (one for those in a row), an
    assistant's tool calls as tool_use blocks after its text."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message["role"] == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": message.get("tool_call_id", ""),
                "content": message["content"],
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "user" and isinstance(last["content"], list):
                last["content"].append(result)
            else:
                out.append({"role": "user", "content": [result]})
        elif message.get("tool_calls"):
            content: list[dict[str, Any]] = [{"type": "text", "text": message["content"]}] if message["content"] else []
            for call in message["tool_calls"]:
                function = call.get("function") or {}
                try:
                    arguments = _json.parse(function.get("arguments") or "{}", max_depth=None)
                except ValueError:
                    arguments = {}
                content.append(
                    {
                        "type": "tool_use",
                        "id": call.get("id", ""),
                        "name": function.get("name", ""),
                        "input": arguments if isinstance(arguments, dict) else {},
                    }
                )
            out.append({"role": "assistant", "content": content})
        else:
            out.append(
                {"role": "assistant" if message["role"] == "assistant" else "user", "content": message["content"]}
            )
    return out
