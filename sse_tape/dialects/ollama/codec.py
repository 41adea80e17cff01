"""How `ollama-chat` and `ollama-generate` encode and decode neutral events: one encoder and one decoder for
both, told apart by a `Shape` (where a line carries its text, its thinking and its calls), and their answers.

A line of either is a JSON object with `model`, `created_at` and `done`; the text is in `message.content`
(chat) or `response` (generate), the thinking in `message.thinking` or `thinking`, a chat's tool calls whole in
`message.tool_calls` (`{"function": {"name", "arguments": {...}}}`, the arguments an object). The last line
has `"done": true`, the `done_reason` and the stats in nanoseconds. An error mid-stream is the line
`{"error": "..."}`, and nothing follows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ... import _json
from ...sse import ServerSentEvent
from ..answer import Answer
from ..encoder import Encoder, WholeCall, WholeCalls
from ..events import (
    Error,
    Event,
    Finish,
    ModelLoadEnd,
    ReasoningDelta,
    RefusalDelta,
    Start,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from ..generation import Generation, ServerCalls, as_object, whole
from ..openai_common import token_entries, tokens_from
from ..protocol import data_frame, json_objects

__all__ = [
    "CHAT",
    "GENERATE",
    "NOMINAL_RATE",
    "STATS",
    "OllamaEncoder",
    "Shape",
    "created_at",
    "decode_indexed",
    "decode_json",
    "response_json",
]

STATS = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration")
"""The stats of the last line: durations in nanoseconds, counts in tokens."""

NOMINAL_RATE = 50.0
"""Tokens a second, where an answer carries no measured rate: the durations a client divides by are never 0."""

_NS = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Shape:
    """Where one of Ollama's two APIs puts an answer in a line."""

    chat: bool
    """The chat API's `message` (`content`, `thinking`, `tool_calls`), else generate's `response` and `thinking`."""


CHAT = Shape(chat=True)
"""`/api/chat`."""
GENERATE = Shape(chat=False)
"""`/api/generate`."""


def created_at(created: int) -> str:
    """Unix seconds as Ollama writes a line's time: RFC 3339 in UTC, with a fraction (`…T09:14:02.000000Z`)."""
    return datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _created(value: Any) -> int:
    if not isinstance(value, str) or not value:
        return 0
    text = value.rstrip("Z")
    head, _, fraction = text.partition(".")
    offset = ""
    for sign in ("+", "-"):  # an offset after the fraction (`.123456789-07:00`), as Ollama writes local time
        if sign in fraction:
            fraction, _, rest = fraction.partition(sign)
            offset = sign + rest
    try:
        moment = datetime.fromisoformat(head + offset) if offset else datetime.fromisoformat(head + "+00:00")
    except ValueError:
        return 0
    return int(moment.timestamp())


def _stats(usage: Usage | None, load: float | None, output: int) -> dict[str, int]:
    """The last line's stats, from the neutral usage (and the model's load, when the stream told it); without
    usage, the output counted in the lines that carried it, at `NOMINAL_RATE`."""
    load_ns = round((load or 0.0) * _NS)
    prompt = usage.input_tokens if usage is not None else 0
    generated = usage.output_tokens if usage is not None else output
    rate = usage.tokens_per_second if usage is not None and usage.tokens_per_second else NOMINAL_RATE
    eval_ns = max(1, round(generated / rate * _NS)) if generated else 0
    if usage is not None and usage.first_token_seconds is not None:
        prompt_ns = max(0, round(usage.first_token_seconds * _NS) - load_ns)
    else:
        prompt_ns = round(prompt / NOMINAL_RATE * _NS)
    return {
        "total_duration": load_ns + prompt_ns + eval_ns,
        "load_duration": load_ns,
        "prompt_eval_count": prompt,
        "prompt_eval_duration": prompt_ns,
        "eval_count": generated,
        "eval_duration": eval_ns,
    }


def _usage(obj: dict[str, Any]) -> Usage | None:
    """The neutral usage of a last line's stats; None when it has no `eval_count`."""
    generated = whole(obj.get("eval_count"))
    if generated is None:
        return None
    eval_ns = whole(obj.get("eval_duration"))
    prompt_ns = whole(obj.get("prompt_eval_duration"))
    load_ns = whole(obj.get("load_duration")) or 0
    return Usage(
        whole(obj.get("prompt_eval_count")) or 0,
        generated,
        tokens_per_second=round(generated / (eval_ns / _NS), 2) if eval_ns and generated else None,
        first_token_seconds=round((load_ns + prompt_ns) / _NS, 3) if prompt_ns is not None else None,
    )


_DONE_REASONS = {"stop": "stop", "length": "length", "tool_calls": "stop", "content_filter": "stop"}


class OllamaEncoder(Encoder):
    """Ollama's encoder: a line for each piece of text or thinking, a call whole when it ends, and the last
    line, with its stats, when the usage that follows the finish comes (or the stream ends)."""

    def __init__(self, dialect: Generation, shape: Shape) -> None:
        super().__init__(dialect)
        self.shape = shape
        self.start = Start()
        self.server_calls = ServerCalls()
        self.calls = WholeCalls()
        self.finish: Finish | None = None
        self.load: float | None = None
        self.output = 0  # the lines that carried output, counted for stats a stream with no usage lacks

    def _event(self, event: Event) -> None:
        if self.server_calls.skip(event):
            return  # a tool the server ran itself (LM Studio's): Ollama's calls are the client's
        for call in self.calls.feed(event) if self.shape.chat else ():  # generate has no tools
            self.call(call)
        if isinstance(event, Start):
            self.start = event
        elif isinstance(event, ModelLoadEnd):
            self.load = event.seconds
        elif isinstance(event, TextDelta | RefusalDelta):  # Ollama has no refusal of its own: it is the answer
            logprobs = event.logprobs if isinstance(event, TextDelta) else None
            self.line(self.said(event.text), logprobs=token_entries(logprobs) if logprobs is not None else None)
        elif isinstance(event, ReasoningDelta):
            self.line(self.said("", thinking=event.text))
        elif isinstance(event, Finish):
            self.finish = event
        elif isinstance(event, Usage):
            self.last(event)
        elif isinstance(event, Error):
            self.frames.append(data_frame({"error": event.message}))  # a call not yet whole is never sent

    def _end(self) -> None:
        self.last(None)

    def said(self, text: str, thinking: str | None = None, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The fields of a line that carry `text`, `thinking` and `calls`, in this API's shape."""
        if not self.shape.chat:
            return {"response": text, **({"thinking": thinking} if thinking is not None else {})}
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if thinking is not None:
            message["thinking"] = thinking
        if calls:
            message["tool_calls"] = calls
        return {"message": message}

    def line(self, fields: dict[str, Any], done: bool = False, **more: Any) -> None:
        """A line of the stream, with the model and time every line has."""
        extra = {name: value for name, value in more.items() if value is not None}
        obj = {"model": self.start.model, "created_at": created_at(self.start.created), **fields, "done": done}
        self.frames.append(data_frame(obj | extra))
        if not done:
            self.output += 1

    def call(self, call: WholeCall) -> None:
        """A tool call, whole; one whose arguments are no JSON object (cut short) is never sent."""
        arguments = as_object(call.arguments)
        if arguments is not None:
            self.line(self.said("", calls=[{"function": {"name": call.name, "arguments": arguments}}]))

    def last(self, usage: Usage | None) -> None:
        """The line with `done: true`, once the finish has come."""
        finish, self.finish = self.finish, None
        if finish is None:
            return
        # Generate's token ids: sse-tape has none to give.
        context: dict[str, Any] = {} if self.shape.chat else {"context": []}
        reason = {"done_reason": _DONE_REASONS.get(finish.reason, "stop")}
        self.line(self.said(""), done=True, **reason, **context, **_stats(usage, self.load, self.output))


def _decode(objects: list[tuple[int, dict[str, Any]]], shape: Shape) -> list[tuple[int, Event]]:
    """The neutral events of a stream's lines (or of one whole answer), each with the index of its line."""
    out: list[tuple[int, Event]] = []
    started = finished = False
    calls = 0
    for i, obj in objects:
        if "error" in obj:
            out.append((i, Error(str(obj["error"]))))
            break
        if not started:
            out.append((i, Start("", str(obj.get("model") or ""), _created(obj.get("created_at")))))
            started = True
        if finished:
            continue
        holder = obj.get("message") if shape.chat else obj
        holder = holder if isinstance(holder, dict) else {}
        thinking, text = holder.get("thinking"), holder.get("content" if shape.chat else "response")
        if isinstance(thinking, str) and thinking:
            out.append((i, ReasoningDelta(thinking)))
        if isinstance(text, str) and text:
            logprobs = obj.get("logprobs")
            out.append((i, TextDelta(text, tokens_from(logprobs) if isinstance(logprobs, list) else None)))
        for call in holder.get("tool_calls") or [] if shape.chat else []:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                continue
            arguments = function.get("arguments")
            arguments = arguments if isinstance(arguments, dict | list) else {} if arguments is None else arguments
            text_arguments = arguments if isinstance(arguments, str) else _json.dumps(arguments)
            out += [
                (i, ToolCallStart(calls, str(call.get("id") or ""), str(function.get("name") or ""))),
                (i, ToolCallDelta(calls, text_arguments)),
                (i, ToolCallEnd(calls)),
            ]
            calls += 1
        if obj.get("done") is True:
            finished = True
            reason = obj.get("done_reason")
            reason = "length" if reason == "length" else "tool_calls" if calls else "stop"
            out.append((i, Finish(reason)))
            if (usage := _usage(obj)) is not None:
                out.append((i, usage))
    return out


def decode_indexed(events: Sequence[ServerSentEvent], shape: Shape) -> list[tuple[int, Event]]:
    """The neutral events of a stream of `shape`'s API, each with the index of its line."""
    return _decode([(i, obj) for i, _, obj in json_objects(events)], shape)


def decode_json(body: Any, shape: Shape) -> list[Event]:
    """The neutral events of an answer of `shape`'s API to a request for no stream; [] if it is none."""
    if (
        not isinstance(body, dict)
        or body.get("done") is not True
        or ("message" if shape.chat else "response") not in body
    ):
        return []
    return [event for _, event in _decode([(0, body)], shape)]


def response_json(events: Sequence[Event], shape: Shape) -> dict[str, Any]:
    """The answer of `shape`'s API to a request for no stream: one line, `done: true`, all of it whole."""
    answer = Answer.of(events)
    start = answer.start
    calls = []
    for call in answer.client_calls() if shape.chat else []:
        arguments = as_object(call.arguments)
        if arguments is not None:
            calls.append({"function": {"name": call.name, "arguments": arguments}})
    text = answer.text + answer.refusal
    thinking = answer.reasoning or None
    if shape.chat:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if thinking is not None:
            message["thinking"] = thinking
        if calls:
            message["tool_calls"] = calls
        fields: dict[str, Any] = {"message": message}
    else:
        fields = {"response": text, **({"thinking": thinking} if thinking is not None else {})}
    load = next((e.seconds for e in events if isinstance(e, ModelLoadEnd)), None)
    output = sum(isinstance(e, TextDelta | RefusalDelta | ReasoningDelta) for e in events) + len(calls)
    obj: dict[str, Any] = {"model": start.model, "created_at": created_at(start.created), **fields, "done": True}
    obj["done_reason"] = _DONE_REASONS.get(answer.finish or "stop", "stop")
    if not shape.chat:
        obj["context"] = []
    if answer.logprobs is not None:
        obj["logprobs"] = token_entries(tuple(answer.logprobs))
    return obj | _stats(answer.usage, load, output)
