"""`LMStudioChat`, the `lmstudio-chat` dialect: its protocol and generation contracts, and the rules `check` applies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...cassette import Headers, Interaction, Request
from ...sse import ServerSentEvent
from ..encoder import Encoder
from ..events import Event, Usage
from ..generation import Generation, Prompt, chat_messages, sampled, sampling, whole
from ..protocol import Checker, Violation, json_objects, opening, to_json
from .codec import BLOCKS, LMStudioEncoder, decode_indexed, decode_json, response_json

__all__ = ["EVENT_TYPES", "LMStudioChat"]

EVENT_TYPES = (
    "chat.start",
    "model_load.start",
    "model_load.progress",
    "model_load.end",
    "prompt_processing.start",
    "prompt_processing.progress",
    "prompt_processing.end",
    "reasoning.start",
    "reasoning.delta",
    "reasoning.end",
    "tool_call.start",
    "tool_call.arguments",
    "tool_call.success",
    "tool_call.failure",
    "message.start",
    "message.delta",
    "message.end",
    "error",
    "chat.end",
)


# What a model list entry says of a model it knows nothing more of.
_CONTEXT_LENGTH = 4096
# The sampling fields its chat request takes.
_SAMPLING = ("temperature", "top_p", "top_k", "min_p")


class LMStudioChat(Generation):
    """LM Studio's native REST chat streaming."""

    name = "lmstudio-chat"
    answer = "a chat result with output"
    path = "/api/v1/chat"
    turns = "input"
    models_path = "/api/v1/models"

    def recognises(self, interaction: Interaction) -> bool:
        return any(isinstance(obj, dict) and obj.get("type") == "chat.start" for _, obj in opening(interaction))

    def model_json(self, name: str) -> dict[str, Any]:
        return {
            "type": "llm",
            "publisher": name.partition("/")[0] if "/" in name else "sse-tape",
            "key": name,
            "display_name": name,
            "architecture": None,
            "quantization": None,
            "size_bytes": 0,
            "params_string": None,
            "loaded_instances": [{"id": name, "config": {"context_length": _CONTEXT_LENGTH}}],
            "max_context_length": _CONTEXT_LENGTH,
            "format": None,
        }

    def encoder(self, answer: Any = None) -> Encoder:
        return LMStudioEncoder(self, answer)

    def decode_indexed(self, events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
        return decode_indexed(events)

    def is_terminal(self, event: ServerSentEvent) -> bool:
        objects = [obj for _, _, obj in json_objects([event])]
        return bool(objects) and objects[0].get("type") in ("chat.end", "error")

    def response_json(self, events: Sequence[Event]) -> dict[str, Any]:
        return response_json(self, events)

    def stream_json(self, events: Sequence[ServerSentEvent], usage: Usage | None = None) -> dict[str, Any]:
        # chat.end carries the whole answer, as the non-streaming call returns it.
        objects = [obj for _, _, obj in json_objects(events)]
        result = objects[-1].get("result") if objects and objects[-1].get("type") == "chat.end" else None
        return result if isinstance(result, dict) else super().stream_json(events, usage)

    def decode_json(self, body: Any) -> list[Event]:
        return decode_json(body)

    def http_error(
        self, status: int, message: str, *, type: str | None = None, code: str | None = None
    ) -> tuple[int, Headers, bytes]:
        error: dict[str, Any] = {"type": type or ("invalid_request" if status < 500 else "internal_error")}
        error["message"] = message
        if code is not None:
            error["code"] = code
        return status, (("content-type", "application/json"),), to_json({"error": error}).encode()

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        c = Checker()
        previous: str | None = None
        blocks: list[str] = []  # open reasoning/message blocks; more than one is itself a violation
        in_tool = False
        ended_at: int | None = None
        error_seen = False
        streamed = {"reasoning": "", "message": ""}
        progress = {"model_load": -1.0, "prompt_processing": -1.0}
        for i, sse in enumerate(events):
            typed = c.typed(i, sse, "data has no type")
            if typed is None:
                continue
            obj, kind = typed
            if kind not in EVENT_TYPES:
                c.add(i, f"unknown event type {kind!r}")
                continue
            if sse.event != kind:
                c.add(i, f"event name {sse.event!r} but type {kind!r}")
            if ended_at is not None:
                c.add(i, f"{kind} after chat.end")
            elif i == 0 and kind != "chat.start":
                c.add(i, f"first event is {kind}, not chat.start")
            phase, _, step = kind.partition(".")
            if phase in BLOCKS:
                if step == "start":
                    if blocks or in_tool:
                        c.add(i, f"{kind} after {previous}")
                    blocks.append(phase)
                elif not blocks or blocks[-1] != phase:
                    c.add(i, f"{kind} after {previous}")
                elif step == "end":
                    blocks.pop()
                if step == "delta":
                    streamed[phase] += str(obj.get("content", ""))
            elif phase == "tool_call":
                if step == "start":
                    if blocks or in_tool:
                        c.add(i, f"{kind} after {previous}")
                    in_tool = True
                elif step == "failure":
                    in_tool = False
                elif not in_tool:
                    c.add(i, f"{kind} after {previous}")
                elif step == "success":
                    in_tool = False
            elif phase in progress and step == "progress":
                value = obj.get("progress")
                if not isinstance(value, int | float) or not 0 <= value <= 1:
                    c.add(i, f"{kind} progress {value!r} is not between 0 and 1")
                elif value < progress[phase]:
                    c.add(i, f"{kind} goes back from {progress[phase]} to {value}")
                else:
                    progress[phase] = value
            elif kind == "error":
                error_seen = True
                if not isinstance(obj.get("error"), dict) or "message" not in obj["error"]:
                    c.add(i, "error event without error.message")
            elif kind == "chat.end":
                ended_at = i
                if blocks:
                    c.add(i, f"chat.end before {BLOCKS[blocks[-1]][1]}")
                self._check_result(c, i, obj.get("result"), streamed)
            previous = kind
        if ended_at is None:
            c.add(None, "no terminal frame (chat.end)" + (" after the error" if error_seen else ""))
        return c.violations

    @staticmethod
    def _check_result(c: Checker, i: int, result: Any, streamed: dict[str, str]) -> None:
        if not isinstance(result, dict) or not isinstance(result.get("output"), list):
            c.add(i, "chat.end has no result.output")
            return
        for kind, text in streamed.items():
            parts = [o for o in result["output"] if isinstance(o, dict) and o.get("type") == kind]
            aggregated = "".join(str(o.get("content", "")) for o in parts)
            if aggregated != text:
                c.add(i, f"chat.end {kind} differs from the streamed {kind}.delta content")

    def prompt(self, body: Any) -> Prompt:
        body = body if isinstance(body, dict) else {}
        given = body.get("input", "")
        messages = [{"role": "user", "content": given}] if isinstance(given, str) else chat_messages(given)
        if isinstance(body.get("system_prompt"), str):
            messages.insert(0, {"role": "system", "content": body["system_prompt"]})
        return Prompt(
            model=str(body.get("model", "")),
            messages=messages,
            max_tokens=whole(body.get("max_output_tokens")),
            include_usage=True,
            **sampling(body, _SAMPLING),
        )

    def request_body(self, prompt: Prompt) -> dict[str, Any]:
        system = [m["content"] for m in prompt.messages if m["role"] == "system"]
        turns = [m for m in prompt.messages if m["role"] != "system"]
        body: dict[str, Any] = {"model": prompt.model, "input": turns[-1]["content"] if turns else ""}
        if system:
            body["system_prompt"] = "\n\n".join(system)
        if prompt.max_tokens is not None:
            body["max_output_tokens"] = prompt.max_tokens
        body |= sampled(prompt, _SAMPLING)
        body["stream"] = True
        return body
