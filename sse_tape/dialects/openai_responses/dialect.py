"""`OpenAIResponses`, the `openai-responses` dialect: its protocol and generation contracts, and the rules `check` applies."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ... import _json
from ...cassette import Headers, Interaction, Request
from ...sse import ServerSentEvent
from ..encoder import Encoder
from ..events import Error, Event, Start, Usage
from ..generation import Continuation, Prompt, chat_messages, sampled, sampling, whole
from ..openai_common import OpenAIFamily
from ..protocol import Checker, ProtocolResponder, Violation, json_objects, opening
from .background import Background
from .codec import ResponsesEncoder, decode_indexed, decode_json, response_json

__all__ = ["OpenAIResponses"]

TERMINAL = ("response.completed", "response.incomplete", "response.failed")


class OpenAIResponses(OpenAIFamily):
    """The OpenAI Responses API streaming."""

    name = "openai-responses"
    answer = "a response object with output"
    path = "/v1/responses"
    id_prefix = "resp_"
    turns = "input"

    def serves_path(self, path: str) -> bool:
        """A path that ends with `/responses`, with or without the `/v1` before it."""
        return path.rstrip("/").endswith("/responses")

    def recognises(self, interaction: Interaction) -> bool:
        return any(_type(obj).startswith("response.") for _, obj in opening(interaction))

    def responders(self) -> Sequence[ProtocolResponder]:
        """Background mode's (see `background`)."""
        return (Background(self),)

    def is_terminal(self, event: ServerSentEvent) -> bool:
        if event.data == "[DONE]":
            return True
        objects = [obj for _, _, obj in json_objects([event])]
        return bool(objects) and objects[0].get("type") in (*TERMINAL, "error")

    def response_headers(self, start: Start) -> Headers:
        return (("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache"))

    def encoder(self, answer: Any = None) -> Encoder:
        return ResponsesEncoder(self, answer)

    def decode_indexed(self, events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
        return decode_indexed(events)

    def response_json(self, events: Sequence[Event]) -> dict[str, Any]:
        return response_json(self, events)

    def stream_json(self, events: Sequence[ServerSentEvent], usage: Usage | None = None) -> dict[str, Any]:
        # The final event carries the whole response.
        final = [
            obj
            for _, _, obj in json_objects(events)
            if obj.get("type") in ("response.completed", "response.incomplete")
        ]
        response = final[-1].get("response") if final else None
        return response if isinstance(response, dict) else super().stream_json(events, usage)

    def decode_json(self, body: Any) -> list[Event]:
        return decode_json(body)

    def error_name(self, error: Error) -> str:
        """The `code` of the failed response's error, as the stream sends it: the API's error has no type."""
        return error.code or error.type

    def check_answer(self, obj: Any, request: Request | None = None) -> list[Violation]:
        if isinstance(obj, dict) and obj.get("object") != "response":
            return [Violation(None, f"object is {obj.get('object')!r}, not 'response'")]
        return super().check_answer(obj, request)

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        c = Checker()
        expected_sequence: int | None = None
        terminal_at: int | None = None
        items: dict[str, dict[str, Any]] = {}  # id -> {"type", "text", "done"}
        for i, sse in enumerate(events):
            if sse.data == "[DONE]":
                if terminal_at is None:
                    c.add(i, "[DONE] before the terminal event")
                continue
            obj = c.json(i, sse)
            if obj is None:
                continue
            sequence = obj.get("sequence_number") if isinstance(obj, dict) else None
            if isinstance(sequence, int):
                if expected_sequence is not None and sequence > expected_sequence:
                    c.add(i, f"sequence_number jumps from {expected_sequence - 1} to {sequence}")
                elif expected_sequence is not None and sequence < expected_sequence:
                    c.add(i, f"sequence_number goes back from {expected_sequence - 1} to {sequence}")
                expected_sequence = sequence + 1
            if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
                c.add(i, "data has no type")
                continue
            kind = obj["type"]
            if sse.event != "message" and sse.event != kind:
                c.add(i, f"event name {sse.event!r} but type {kind!r}")
            if terminal_at is not None:
                c.add(i, f"{kind} after {json.loads(events[terminal_at].data)['type']}")
            if i == 0 and kind != "response.created":
                c.add(i, f"first event is {kind}, not response.created")
            self._check_item_event(c, i, kind, obj, items)
            if kind in TERMINAL:
                terminal_at = i
                for item_id, state in items.items():
                    if not state["done"] and kind != "response.failed":
                        c.add(i, f"{kind} before response.output_item.done for {item_id}")
        if terminal_at is None:
            c.add(None, "no terminal event (response.completed, response.incomplete or response.failed)")
        return c.violations + self.check_calls(events, request)

    @staticmethod
    def _check_item_event(c: Checker, i: int, kind: str, obj: dict[str, Any], items: dict[str, dict[str, Any]]) -> None:
        item = obj.get("item") if isinstance(obj.get("item"), dict) else None
        if kind == "response.output_item.added" and item is not None:
            items[str(item.get("id"))] = {"type": item.get("type"), "text": "", "done": False}
            return
        if kind == "response.output_item.done" and item is not None:
            state = items.get(str(item.get("id")))
            if state is None:
                c.add(i, f"response.output_item.done for unknown item {item.get('id')}")
            else:
                state["done"] = True
            return
        if not kind.endswith((".delta", ".done")) or "item_id" not in obj:
            return
        state = items.get(str(obj["item_id"]))
        if state is None:
            c.add(i, f"{kind} for unknown item {obj['item_id']}")
            return
        if state["done"]:
            c.add(i, f"{kind} after response.output_item.done for {obj['item_id']}")
        if kind.endswith(".delta"):
            state["text"] += str(obj.get("delta", ""))
            return
        final = obj.get("text", obj.get("arguments", obj.get("refusal")))
        if isinstance(final, str) and kind != "response.content_part.done" and final != state["text"]:
            c.add(i, f"{kind} text differs from its deltas")
        if kind != "response.content_part.done":
            state["text"] = ""

    def continues(self, body: Any) -> Continuation | None:
        previous = body.get("previous_response_id") if isinstance(body, dict) else None
        return Continuation(previous, keeps_tools=False) if isinstance(previous, str) and previous else None

    def prompt(self, body: Any) -> Prompt:
        body = body if isinstance(body, dict) else {}
        given = body.get("input", "")
        messages = [{"role": "user", "content": given}] if isinstance(given, str) else _input_messages(given)
        if isinstance(body.get("instructions"), str):
            messages.insert(0, {"role": "system", "content": body["instructions"]})
        tools = [
            {k: t[k] for k in ("name", "description", "parameters") if k in t}
            for t in body.get("tools") or []
            if isinstance(t, dict) and t.get("type") == "function"
        ]
        choice = body.get("tool_choice")
        if isinstance(choice, dict):  # a function by name, or a subset of the tools called as its `mode` says
            choice = choice.get("mode") if choice.get("type") == "allowed_tools" else choice.get("name")
        include = body.get("include") if isinstance(body.get("include"), list) else []
        top = whole(body.get("top_logprobs"))
        return Prompt(
            model=str(body.get("model", "")),
            messages=messages,
            tools=tools,
            max_tokens=whole(body.get("max_output_tokens")),
            include_usage=True,
            logprobs=(top or 0) if "message.output_text.logprobs" in include or top else None,
            tool_choice=choice if isinstance(choice, str) else None,
            **sampling(body, ("temperature", "top_p")),
        )

    def request_body(self, prompt: Prompt) -> dict[str, Any]:
        messages = prompt.messages
        single = len(messages) == 1 and messages[0]["role"] == "user"
        given = messages[0]["content"] if single else _input_items(messages)
        body: dict[str, Any] = {"model": prompt.model, "input": given}
        if prompt.tools:
            body["tools"] = [{"type": "function", **tool} for tool in prompt.tools]
        if prompt.max_tokens is not None:
            body["max_output_tokens"] = prompt.max_tokens
        if prompt.tool_choice in ("auto", "none", "required"):
            body["tool_choice"] = prompt.tool_choice
        elif prompt.tool_choice:
            body["tool_choice"] = {"type": "function", "name": prompt.tool_choice}
        if prompt.logprobs is not None:
            body |= {"include": ["message.output_text.logprobs"], "top_logprobs": prompt.logprobs}
        body |= sampled(prompt, ("temperature", "top_p"))
        body["stream"] = True
        return body


def _input_messages(items: Any) -> list[dict[str, Any]]:
    """The Responses API's input items as chat messages: its function calls and their outputs included."""
    messages: list[dict[str, Any]] = []
    for item in items if isinstance(items, list) else []:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "function_call":
            call = {
                "id": str(item.get("call_id", "")),
                "type": "function",
                "function": {"name": str(item.get("name", "")), "arguments": str(item.get("arguments", ""))},
            }
            if messages and messages[-1]["role"] == "assistant" and "tool_calls" in messages[-1]:
                messages[-1]["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output", "")
            content = output if isinstance(output, str) else _json.dumps(output)
            messages.append({"role": "tool", "content": content, "tool_call_id": str(item.get("call_id", ""))})
        else:
            messages += chat_messages([item])
    return messages


def _input_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as the Responses API's input items (see `_input_messages`)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.get("tool_call_id", ""),
                    "output": message["content"],
                }
            )
            continue
        if message["content"] or not message.get("tool_calls"):
            items.append({"role": message["role"], "content": message["content"]})
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.get("id", ""),
                    "name": function.get("name", ""),
                    "arguments": function.get("arguments", ""),
                }
            )
    return items


def _type(obj: Any) -> str:
    """The `type` of an event's data, `""` when it has none."""
    kind = obj.get("type") if isinstance(obj, dict) else None
    return kind if isinstance(kind, str) else ""
