"""`openai-responses`: POST /v1/responses with `"stream": true`.

Named events, each carrying its `type` and a `sequence_number` counting from
0: `response.created`, `response.in_progress`, then for each output item
`response.output_item.added`, its content (`response.content_part.added`,
`response.output_text.delta`..., `response.output_text.done`,
`response.content_part.done`; or `response.function_call_arguments.delta`...
and `.done`; or reasoning and refusal text), `response.output_item.done`, and
last `response.completed` (or `response.incomplete`) with the whole response
and its usage. A failure is `response.failed` with the error. The gateway in
the seeds then sends `data: [DONE]`; OpenAI's own API does not, so a stream
without it is not faulted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..cassette import Headers, Request
from ..sse import ServerSentEvent, SSEDecoder
from .base import (
    DONE,
    Checker,
    Dialect,
    Prompt,
    Violation,
    chat_messages,
    executed_calls,
    json_objects,
    named_frame,
)
from .events import (
    Error,
    Event,
    Finish,
    ReasoningDelta,
    RefusalDelta,
    Start,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from .openai_chat import token_entries, tokens_from

__all__ = ["OpenAIResponses"]

TERMINAL = ("response.completed", "response.incomplete", "response.failed")
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


@dataclass(slots=True)
class _Item:
    """An output item being streamed."""

    kind: str  # message, reasoning, refusal, function_call
    id: str
    index: int
    text: str = ""
    call_id: str = ""
    name: str = ""
    logprobs: list[dict[str, Any]] = field(default_factory=list)


class _Encoder:
    def __init__(self) -> None:
        self.frames: list[tuple[int, bytes]] = []
        self.sequence = 0
        self.start = Start("resp_sse_tape")
        self.output: list[dict[str, Any]] = []
        self.item: _Item | None = None
        self.calls: dict[int, _Item] = {}
        self.at = 0

    def emit(self, type: str, **fields: Any) -> None:
        self.frames.append((self.at, named_frame({"type": type, "sequence_number": self.sequence, **fields})))
        self.sequence += 1

    def response(self, status: str, **extra: Any) -> dict[str, Any]:
        return {
            "id": self.start.id,
            "object": "response",
            "created_at": self.start.created,
            "status": status,
            "model": self.start.model,
            "output": list(self.output),
            **extra,
        }

    def open(self, kind: str) -> _Item:
        if self.item is not None and self.item.kind == kind:
            return self.item
        self.close()
        prefix = {"message": "msg", "refusal": "msg", "reasoning": "rs"}[kind]
        item = self.item = _Item(kind, f"{prefix}_{len(self.output)}", len(self.output))
        if kind == "reasoning":
            self.emit("response.output_item.added", output_index=item.index, item=self._reasoning(item, "in_progress"))
            return item
        added = {"id": item.id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
        self.emit("response.output_item.added", output_index=item.index, item=added)
        self.emit("response.content_part.added", **self._where(item), part=self._part(item, ""))
        return item

    def close(self) -> None:
        item, self.item = self.item, None
        if item is None:
            return
        if item.kind == "reasoning":
            self.emit("response.reasoning_text.done", **self._where(item), text=item.text)
            done = self._reasoning(item, "completed")
        else:
            if item.kind == "refusal":
                self.emit("response.refusal.done", **self._where(item), refusal=item.text)
            else:
                self.emit("response.output_text.done", **self._where(item), text=item.text, logprobs=item.logprobs)
            self.emit("response.content_part.done", **self._where(item), part=self._part(item, item.text))
            content = [self._part(item, item.text)]
            done = {"id": item.id, "type": "message", "status": "completed", "role": "assistant", "content": content}
        self.emit("response.output_item.done", output_index=item.index, item=done)
        self.output.append(done)

    @staticmethod
    def _where(item: _Item) -> dict[str, Any]:
        return {"item_id": item.id, "output_index": item.index, "content_index": 0}

    @staticmethod
    def _part(item: _Item, text: str) -> dict[str, Any]:
        if item.kind == "refusal":
            return {"type": "refusal", "refusal": text}
        return {"type": "output_text", "text": text, "annotations": []}

    @staticmethod
    def _reasoning(item: _Item, status: str) -> dict[str, Any]:
        content = [{"type": "reasoning_text", "text": item.text}] if status == "completed" else []
        return {"id": item.id, "type": "reasoning", "status": status, "summary": [], "content": content}

    @staticmethod
    def _function_call(item: _Item, status: str) -> dict[str, Any]:
        arguments = item.text if status == "completed" else ""
        fields = {"call_id": item.call_id, "name": item.name, "arguments": arguments}
        return {"id": item.id, "type": "function_call", "status": status, **fields}


def _usage_json(usage: Usage | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens or 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens or 0},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


def _usage_from(obj: Any) -> Usage | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("input_tokens"), int):
        return None
    reasoning = (obj.get("output_tokens_details") or {}).get("reasoning_tokens")
    cached = (obj.get("input_tokens_details") or {}).get("cached_tokens")
    return Usage(obj["input_tokens"], int(obj.get("output_tokens") or 0), reasoning or None, cached or None)


class OpenAIResponses(Dialect):
    """The OpenAI Responses API streaming."""

    name = "openai-responses"
    path = "/v1/responses"

    def is_terminal(self, event: ServerSentEvent) -> bool:
        if event.data == "[DONE]":
            return True
        objects = [obj for _, _, obj in json_objects([event])]
        return bool(objects) and objects[0].get("type") in (*TERMINAL, "error")

    def response_headers(self, start: Start) -> Headers:
        return (("content-type", "text/event-stream; charset=utf-8"), ("cache-control", "no-cache"))

    def error_frames(
        self, error: Error, before: Sequence[Event] = (), sent: Sequence[ServerSentEvent] = ()
    ) -> list[bytes]:
        frames = super().error_frames(error, before)
        numbers = [
            obj["sequence_number"] for _, _, obj in json_objects(sent) if isinstance(obj.get("sequence_number"), int)
        ]
        if not numbers or not frames:
            return frames
        # Continue the numbering of the stream the client has, not of a re-encoding of it.
        [failed] = [obj for _, _, obj in json_objects(SSEDecoder().feed(frames[0]))]
        return [named_frame({**failed, "sequence_number": numbers[-1] + 1}), *frames[1:]]

    def encode_indexed(self, events: Sequence[Event]) -> list[tuple[int, bytes]]:
        e = _Encoder()
        usage = next((event for event in events if isinstance(event, Usage)), None)
        skipped = executed_calls(events)
        for i, event in enumerate(events):
            e.at = i
            if isinstance(event, ToolCallStart | ToolCallDelta | ToolCallEnd) and event.index in skipped:
                continue
            if isinstance(event, Start):
                e.start = event
                e.emit("response.created", response=e.response("in_progress", usage=None))
                e.emit("response.in_progress", response=e.response("in_progress", usage=None))
            elif isinstance(event, TextDelta):
                item = e.open("message")
                item.text += event.text
                logprobs = token_entries(event.logprobs or ())
                item.logprobs += logprobs
                e.emit("response.output_text.delta", **e._where(item), delta=event.text, logprobs=logprobs)
            elif isinstance(event, RefusalDelta):
                item = e.open("refusal")
                item.text += event.text
                e.emit("response.refusal.delta", **e._where(item), delta=event.text)
            elif isinstance(event, ReasoningDelta):
                item = e.open("reasoning")
                item.text += event.text
                e.emit("response.reasoning_text.delta", **e._where(item), delta=event.text)
            elif isinstance(event, ToolCallStart):
                e.close()
                call = e.calls[event.index] = _Item(
                    "function_call",
                    f"fc_{len(e.output)}",
                    len(e.output),
                    call_id=event.id or f"call_{event.index}",
                    name=event.name,
                )
                e.output.append(e._function_call(call, "in_progress"))  # holds its place in the output
                e.emit(
                    "response.output_item.added", output_index=call.index, item=e._function_call(call, "in_progress")
                )
            elif isinstance(event, ToolCallDelta) and event.index in e.calls:
                call = e.calls[event.index]
                call.text += event.arguments
                where = {"item_id": call.id, "output_index": call.index}
                e.emit("response.function_call_arguments.delta", **where, delta=event.arguments)
            elif isinstance(event, ToolCallEnd) and event.index in e.calls:
                call = e.calls.pop(event.index)
                where = {"item_id": call.id, "output_index": call.index}
                e.emit("response.function_call_arguments.done", **where, name=call.name, arguments=call.text)
                e.output[call.index] = e._function_call(call, "completed")
                e.emit("response.output_item.done", output_index=call.index, item=e.output[call.index])
            elif isinstance(event, Finish):
                e.close()
                if event.reason in _INCOMPLETE:
                    details = {"reason": _INCOMPLETE[event.reason]}
                    response = e.response("incomplete", incomplete_details=details, usage=_usage_json(usage))
                    e.emit("response.incomplete", response=response)
                else:
                    e.emit("response.completed", response=e.response("completed", usage=_usage_json(usage)))
            elif isinstance(event, Error):
                # A failure closes nothing: the response fails with its items as they are.
                error = {"code": event.code or event.type, "message": event.message}
                e.emit("response.failed", response=e.response("failed", error=error, usage=None))
                e.frames.append((i, DONE))
                return e.frames
        if events:
            e.frames.append((len(events) - 1, DONE))
        return e.frames

    def decode_indexed(self, events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
        out: list[tuple[int, Event]] = []
        calls: dict[str, int] = {}  # function call item id -> tool call index
        for i, name, obj in json_objects(events):
            kind = obj.get("type", name)
            response: dict[str, Any] = obj["response"] if isinstance(obj.get("response"), dict) else {}
            item: dict[str, Any] = obj["item"] if isinstance(obj.get("item"), dict) else {}
            if kind == "response.created":
                created = int(response.get("created_at") or 0)
                out.append((i, Start(str(response.get("id", "")), str(response.get("model", "")), created)))
            elif kind == "response.output_text.delta" and obj.get("delta"):
                out.append((i, TextDelta(obj["delta"], tokens_from(obj.get("logprobs")) or None)))
            elif kind == "response.refusal.delta" and obj.get("delta"):
                out.append((i, RefusalDelta(obj["delta"])))
            elif kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta") and obj.get(
                "delta"
            ):
                out.append((i, ReasoningDelta(obj["delta"])))
            elif kind == "response.output_item.added" and item.get("type") == "function_call":
                calls[str(item.get("id"))] = index = len(calls)
                out.append((i, ToolCallStart(index, str(item.get("call_id", "")), str(item.get("name", "")))))
                if item.get("arguments"):
                    out.append((i, ToolCallDelta(index, item["arguments"])))
            elif kind == "response.function_call_arguments.delta" and obj.get("item_id") in calls:
                if obj.get("delta"):
                    out.append((i, ToolCallDelta(calls[obj["item_id"]], obj["delta"])))
            elif (
                kind == "response.output_item.done" and item.get("type") == "function_call" and item.get("id") in calls
            ):
                out.append((i, ToolCallEnd(calls[item["id"]])))
            elif kind in ("response.completed", "response.incomplete"):
                reason = "tool_calls" if calls else "stop"
                if kind == "response.incomplete":
                    wanted = (response.get("incomplete_details") or {}).get("reason")
                    reason = next((k for k, v in _INCOMPLETE.items() if v == wanted), "length")
                out.append((i, Finish(reason)))
                if (usage := _usage_from(response.get("usage"))) is not None:
                    out.append((i, usage))
            elif kind == "response.failed":
                error = response.get("error") or {}
                code = error.get("code")
                out.append(
                    (i, Error(str(error.get("message", "")), "server_error", None if code == "server_error" else code))
                )
            elif kind == "error":
                out.append((i, Error(str(obj.get("message", "")), "server_error", obj.get("code"))))
        return out

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
        return c.violations

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

    def prompt(self, body: Any) -> Prompt:
        body = body if isinstance(body, dict) else {}
        given = body.get("input", "")
        messages = [{"role": "user", "content": given}] if isinstance(given, str) else chat_messages(given)
        if isinstance(body.get("instructions"), str):
            messages.insert(0, {"role": "system", "content": body["instructions"]})
        tools = [
            {k: t[k] for k in ("name", "description", "parameters") if k in t}
            for t in body.get("tools") or []
            if isinstance(t, dict) and t.get("type") == "function"
        ]
        return Prompt(str(body.get("model", "")), messages, tools, body.get("max_output_tokens"), include_usage=True)

    def request_body(self, prompt: Prompt) -> dict[str, Any]:
        messages = prompt.messages
        single = len(messages) == 1 and messages[0]["role"] == "user"
        body: dict[str, Any] = {"model": prompt.model, "input": messages[0]["content"] if single else messages}
        if prompt.tools:
            body["tools"] = [{"type": "function", **tool} for tool in prompt.tools]
        if prompt.max_tokens is not None:
            body["max_output_tokens"] = prompt.max_tokens
        body["stream"] = True
        return body
