"""How `openai-responses` encodes and decodes neutral events: its encoder, its stream's and its answer's
decoding, and its answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...sse import ServerSentEvent
from ..encoder import Encoder
from ..events import (
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
from ..generation import Generation, ServerCalls
from ..openai_common import DONE, seconds, token_entries, tokens_from
from ..protocol import json_objects, named_frame

__all__ = ["ResponsesEncoder", "decode_indexed", "decode_json", "response_json"]

_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
_DELTAS = (
    "response.output_text.delta",
    "response.refusal.delta",
    "response.reasoning_text.delta",
    "response.function_call_arguments.delta",
)


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


class ResponsesEncoder(Encoder):
    """openai-responses' encoder: output items opened and closed as they come, numbered events, and the whole
    response in the last."""

    def __init__(self, dialect: Generation, answer: Any = None) -> None:
        super().__init__(dialect)
        # A recorded Response this stream retells: its item ids, its items whole, and itself at the end.
        self.answer: dict[str, Any] | None = answer if isinstance(answer, dict) else None
        self.sequence = 0
        self.start = Start("resp_sse_tape")
        self.output: list[dict[str, Any]] = []
        self.item: _Item | None = None
        self.calls: dict[int, _Item] = {}
        self.server_calls = ServerCalls()
        self.finish: Finish | None = None  # the final event waits for the usage that follows the finish
        self.usage: Usage | None = None
        self.result: dict[str, Any] | None = None
        """The whole response, once the final event carried it."""

    def _end(self) -> None:
        self._final()
        if self.fed:
            self.frames.append(DONE)

    def _sync(self, sent: Sequence[ServerSentEvent]) -> None:
        # What the client has is the truth: its sequence numbers, its items and their ids, what is still open.
        objects = [obj for _, _, obj in json_objects(sent)]
        numbers = [obj["sequence_number"] for obj in objects if isinstance(obj.get("sequence_number"), int)]
        if numbers:
            self.sequence = numbers[-1] + 1
        items: dict[str, dict[str, Any]] = {}
        texts: dict[str, str] = {}
        refusals: set[str] = set()
        for obj in objects:
            kind, item = obj.get("type"), obj.get("item")
            if kind in ("response.output_item.added", "response.output_item.done") and isinstance(item, dict):
                items[str(item.get("id"))] = item
            elif kind in _DELTAS and "item_id" in obj:
                texts[str(obj["item_id"])] = texts.get(str(obj["item_id"]), "") + str(obj.get("delta", ""))
                if kind == "response.refusal.delta":
                    refusals.add(str(obj["item_id"]))
        self.output, self.item, self.calls = [], None, {}
        calls = 0
        for item_id, item in items.items():
            open_ = item.get("status") == "in_progress"
            if item.get("type") == "function_call":
                if open_:
                    self.calls[calls] = _Item(
                        "function_call", item_id, len(self.output), texts.get(item_id, ""),
                        str(item.get("call_id", "")), str(item.get("name", "")),
                    )  # fmt: skip
                calls += 1
            elif open_:
                kind = (
                    "reasoning" if item.get("type") == "reasoning" else "refusal" if item_id in refusals else "message"
                )
                self.item = _Item(kind, item_id, len(self.output), texts.get(item_id, ""))
                continue  # an open text item joins the output when it closes
            self.output.append(item)

    def _event(self, event: Event) -> None:
        if self.server_calls.skip(event):
            return
        if isinstance(event, Start):
            self.start = event
            self.emit("response.created", response=self.response("in_progress", usage=None))
            self.emit("response.in_progress", response=self.response("in_progress", usage=None))
        elif isinstance(event, TextDelta):
            item = self.open("message")
            item.text += event.text
            logprobs = token_entries(event.logprobs or ())
            item.logprobs += logprobs
            self.emit("response.output_text.delta", **_where(item), delta=event.text, logprobs=logprobs)
        elif isinstance(event, RefusalDelta):
            item = self.open("refusal")
            item.text += event.text
            self.emit("response.refusal.delta", **_where(item), delta=event.text)
        elif isinstance(event, ReasoningDelta):
            item = self.open("reasoning")
            item.text += event.text
            self.emit("response.reasoning_text.delta", **_where(item), delta=event.text)
        elif isinstance(event, ToolCallStart):
            self.close_item()
            index = len(self.output)
            item_id = self.recorded_id(index, "function_call", f"fc_{index}")
            call = self.calls[event.index] = _Item(
                "function_call", item_id, index, call_id=event.id or f"call_{event.index}", name=event.name
            )
            self.output.append(_function_call(call, "in_progress"))  # holds its place in the output
            self.emit("response.output_item.added", output_index=call.index, item=_function_call(call, "in_progress"))
        elif isinstance(event, ToolCallDelta) and event.index in self.calls:
            call = self.calls[event.index]
            call.text += event.arguments
            where = {"item_id": call.id, "output_index": call.index}
            self.emit("response.function_call_arguments.delta", **where, delta=event.arguments)
        elif isinstance(event, ToolCallEnd) and event.index in self.calls:
            self.close_call(event.index, "completed")
        elif isinstance(event, Finish):
            # What is still open ends with generation; cut short (max_output_tokens, the content filter), the
            # API says so of the items too, `"status": "incomplete"`, as of the response.
            status = "incomplete" if event.reason in _INCOMPLETE else "completed"
            self.close_item(status)
            for index in list(self.calls):
                self.close_call(index, status)
            self.finish = event
            if self.usage is not None:
                self._final()
        elif isinstance(event, Usage):
            self.usage = event
            self._final()
        elif isinstance(event, Error):
            # A failure closes nothing: the response fails with its items as they are.
            error = {"code": event.code or event.type, "message": event.message}
            self.emit("response.failed", response=self.response("failed", error=error, usage=None))
            self.frames.append(DONE)

    def _final(self) -> None:
        """`response.completed` or `.incomplete`, once the finish has come; it carries the usage."""
        finish, self.finish = self.finish, None
        if finish is None:
            return
        usage = _usage_json(self.usage)
        if self.answer is not None:
            self.result = self.answer
            self.emit(f"response.{self.answer.get('status') or 'completed'}", response=self.result)
        elif finish.reason in _INCOMPLETE:
            details = {"reason": _INCOMPLETE[finish.reason]}
            self.result = self.response("incomplete", incomplete_details=details, usage=usage)
            self.emit("response.incomplete", response=self.result)
        else:
            self.result = self.response("completed", usage=usage)
            self.emit("response.completed", response=self.result)

    def emit(self, type: str, **fields: Any) -> None:
        self.frames.append(named_frame({"type": type, "sequence_number": self.sequence, **fields}))
        self.sequence += 1

    def recorded_id(self, index: int, kind: str, made: str) -> str:
        """The id the recorded answer gives the output item at `index`, if it is of this kind; else `made`."""
        item = self.recorded_item(index, kind)
        return str(item["id"]) if item is not None and "id" in item else made

    def recorded_item(self, index: int, kind: str) -> dict[str, Any] | None:
        """The recorded answer's output item at `index`, whole, if there is one of this kind."""
        output = self.answer.get("output") if self.answer is not None else None
        item = output[index] if isinstance(output, list) and index < len(output) else None
        return item if isinstance(item, dict) and item.get("type") == kind else None

    def response(self, status: str, **extra: Any) -> dict[str, Any]:
        if self.answer is not None:  # the recorded envelope, as it was while in progress
            return {**self.answer, "status": status, "output": list(self.output), **extra}
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
        self.close_item()
        prefix = {"message": "msg", "refusal": "msg", "reasoning": "rs"}[kind]
        index = len(self.output)
        kind_of = "reasoning" if kind == "reasoning" else "message"
        item = self.item = _Item(kind, self.recorded_id(index, kind_of, f"{prefix}_{index}"), index)
        if kind == "reasoning":
            self.emit("response.output_item.added", output_index=item.index, item=_reasoning(item, "in_progress"))
            return item
        added = {"id": item.id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
        self.emit("response.output_item.added", output_index=item.index, item=added)
        self.emit("response.content_part.added", **_where(item), part=_part(item, ""))
        return item

    def close_call(self, index: int, status: str) -> None:
        call = self.calls.pop(index)
        where = {"item_id": call.id, "output_index": call.index}
        self.emit("response.function_call_arguments.done", **where, name=call.name, arguments=call.text)
        self.output[call.index] = self.recorded_item(call.index, "function_call") or _function_call(call, status)
        self.emit("response.output_item.done", output_index=call.index, item=self.output[call.index])

    def close_item(self, status: str = "completed") -> None:
        item, self.item = self.item, None
        if item is None:
            return
        if item.kind == "reasoning":
            self.emit("response.reasoning_text.done", **_where(item), text=item.text)
            done = _reasoning(item, status)
        else:
            if item.kind == "refusal":
                self.emit("response.refusal.done", **_where(item), refusal=item.text)
            else:
                self.emit("response.output_text.done", **_where(item), text=item.text, logprobs=item.logprobs)
            self.emit("response.content_part.done", **_where(item), part=_part(item, item.text))
            content = [_part(item, item.text)]
            done = {"id": item.id, "type": "message", "status": status, "role": "assistant", "content": content}
        done = self.recorded_item(item.index, done["type"]) or done
        self.emit("response.output_item.done", output_index=item.index, item=done)
        self.output.append(done)


def _where(item: _Item) -> dict[str, Any]:
    return {"item_id": item.id, "output_index": item.index, "content_index": 0}


def _part(item: _Item, text: str) -> dict[str, Any]:
    if item.kind == "refusal":
        return {"type": "refusal", "refusal": text}
    return {"type": "output_text", "text": text, "annotations": []}


def _reasoning(item: _Item, status: str) -> dict[str, Any]:
    content = [{"type": "reasoning_text", "text": item.text}] if status != "in_progress" else []
    return {"id": item.id, "type": "reasoning", "status": status, "summary": [], "content": content}


def _function_call(item: _Item, status: str) -> dict[str, Any]:
    arguments = item.text if status != "in_progress" else ""
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


def decode_indexed(events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
    """`OpenAIResponses.decode_indexed`."""
    out: list[tuple[int, Event]] = []
    calls: dict[str, int] = {}  # function call item id -> tool call index
    for i, name, obj in json_objects(events):
        kind = obj.get("type", name)
        response: dict[str, Any] = obj["response"] if isinstance(obj.get("response"), dict) else {}
        item: dict[str, Any] = obj["item"] if isinstance(obj.get("item"), dict) else {}
        if kind == "response.created":
            created = seconds(response.get("created_at"))
            out.append((i, Start(str(response.get("id", "")), str(response.get("model", "")), created)))
        elif kind == "response.output_text.delta" and obj.get("delta"):
            out.append((i, TextDelta(obj["delta"], tokens_from(obj.get("logprobs")) or None)))
        elif kind == "response.refusal.delta" and obj.get("delta"):
            out.append((i, RefusalDelta(obj["delta"])))
        elif kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta") and obj.get("delta"):
            out.append((i, ReasoningDelta(obj["delta"])))
        elif kind == "response.output_item.added" and item.get("type") == "function_call":
            calls[str(item.get("id"))] = index = len(calls)
            out.append((i, ToolCallStart(index, str(item.get("call_id", "")), str(item.get("name", "")))))
            if item.get("arguments"):
                out.append((i, ToolCallDelta(index, item["arguments"])))
        elif kind == "response.function_call_arguments.delta" and obj.get("item_id") in calls:
            if obj.get("delta"):
                out.append((i, ToolCallDelta(calls[obj["item_id"]], obj["delta"])))
        elif kind == "response.output_item.done" and item.get("type") == "function_call" and item.get("id") in calls:
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


def response_json(dialect: Generation, events: Sequence[Event]) -> dict[str, Any]:
    """`OpenAIResponses.response_json`."""
    encoder = ResponsesEncoder(dialect)
    for event in events:
        encoder.feed(event)
    encoder.close()
    return encoder.result or encoder.response("completed", usage=None)


def decode_json(body: Any) -> list[Event]:
    """`OpenAIResponses.decode_json`."""
    if not isinstance(body, dict) or not isinstance(body.get("output"), list):
        return []
    events: list[Event] = [Start(str(body.get("id", "")), str(body.get("model", "")), seconds(body.get("created_at")))]
    calls = 0
    for item in body["output"]:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "reasoning":
            parts = [*(item.get("content") or []), *(item.get("summary") or [])]
            text = "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
            events += [ReasoningDelta(text)] if text else []
        elif kind == "message":
            for part in item.get("content") or []:
                part_kind = part.get("type") if isinstance(part, dict) else None
                if part_kind == "output_text" and part.get("text"):
                    events.append(TextDelta(str(part["text"]), tokens_from(part.get("logprobs")) or None))
                elif part_kind == "refusal" and part.get("refusal"):
                    events.append(RefusalDelta(str(part["refusal"])))
        elif kind == "function_call":
            events.append(ToolCallStart(calls, str(item.get("call_id", "")), str(item.get("name", ""))))
            if isinstance(item.get("arguments"), str) and item["arguments"]:
                events.append(ToolCallDelta(calls, item["arguments"]))
            events.append(ToolCallEnd(calls))
            calls += 1
    if body.get("status") == "failed":
        error: dict[str, Any] = body["error"] if isinstance(body.get("error"), dict) else {}
        return [*events, Error(str(error.get("message", "")), "server_error", error.get("code"))]
    reason = "tool_calls" if calls else "stop"
    if body.get("status") == "incomplete":
        wanted = (body.get("incomplete_details") or {}).get("reason")
        reason = next((k for k, v in _INCOMPLETE.items() if v == wanted), "length")
    events.append(Finish(reason))
    if (usage := _usage_from(body.get("usage"))) is not None:
        events.append(usage)
    return events
