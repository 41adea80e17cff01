"""Dialects: every check rule of every dialect with its exact message, error framing and error bodies, detection,
translation; each scenario written once, over the dialects it concerns."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import httpx
import openai
import pytest
from clients import openai_client

from sse_tape import (
    Cassette,
    Chunk,
    Interaction,
    MockServer,
    Request,
    Response,
    ServerSentEvent,
    SSEDecoder,
    bundled_cassettes,
    serve,
)
from sse_tape.dialects import DIALECTS, Generation, check_error_response, detect, for_path
from sse_tape.dialects.events import Error, Finish, Start, TextDelta, ToolCallDelta, ToolCallEnd, ToolCallStart, Usage
from sse_tape.framing import SSE
from sse_tape.matching import framing_of
from sse_tape.translation import translate

DONE = "data: [DONE]\n\n"

Case = tuple[list[str], list[str]]
"""A stream's frames, and the violations `check` finds in it, each with its exact message."""


def events_of(*frames: str | bytes) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    return [e for f in frames for e in decoder.feed(f.encode() if isinstance(f, str) else f)]


def frame(obj: Any, event: str | None = None) -> str:
    return (f"event: {event}\n" if event else "") + f"data: {json.dumps(obj)}\n\n"


def violations(dialect: str, *frames: str, request: Request | None = None) -> list[str]:
    return [str(v) for v in DIALECTS[dialect].check(events_of(*frames), request)]


# --- openai-chat -----------------------------------------------------------------------------


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **top: Any) -> str:
    choice = {"index": 0, "delta": {} if delta is None else delta, "finish_reason": finish}
    return frame(
        {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice], **top}
    )


ROLE = chunk({"role": "assistant"})
HI = chunk({"content": "Hi"})
STOP = chunk(finish="stop")


def call(index: int, args: str, **first: Any) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, **first, "function": {**first.pop("function", {}), "arguments": args}}]}


CALL_START = call(0, "", id="call_1", type="function", function={"name": "f"})


CHAT_RULES: list[Case] = [
    ([ROLE, HI, STOP, DONE], []),
    ([ROLE, "data: {oops\n\n", STOP, DONE], ["event 2: data is not JSON: '{oops'"]),
    (
        [
            ROLE,
            frame({"id": "c1", "object": "chat.completion", "choices": [{"delta": {"content": "x"}}]}),
            STOP,
            DONE,
        ],
        ["event 2: object is 'chat.completion', not 'chat.completion.chunk'"],
    ),
    ([ROLE, chunk({"content": "x"}, id="c2"), STOP, DONE], ["event 2: id changes from 'c1' to 'c2'"]),
    (
        [ROLE, frame({"id": "c1", "object": "chat.completion.chunk"}), STOP, DONE],
        ["event 2: choices is missing or not a list"],
    ),
    (
        [ROLE, frame({"id": "c1", "object": "chat.completion.chunk", "choices": []}), STOP, DONE],
        ["event 2: chunk with no choices and no usage"],
    ),
    ([HI, STOP, DONE], ["event 1: content delta before the role frame"]),
    ([ROLE, ROLE, HI, STOP, DONE], ["event 2: role frame repeated"]),
    ([chunk({"role": "user"}), HI, STOP, DONE], ["event 1: role is 'user', not 'assistant'"]),
    ([ROLE, STOP, HI, DONE], ["event 3: delta after the finish_reason chunk"]),
    (
        [ROLE, chunk(call(0, "{}", function={"name": "f"})), chunk(finish="tool_calls"), DONE],
        ["event 2: tool call 0 starts without id, type 'function'"],
    ),
    (
        [
            ROLE,
            chunk(CALL_START),
            chunk(call(0, "{}", id="call_1", function={"name": "f"})),
            chunk(finish="tool_calls"),
            DONE,
        ],
        ["event 3: tool call 0 repeats its id or name after its first delta"],
    ),
    (
        [ROLE, chunk({"tool_calls": [{"function": {"arguments": "{}"}}]}), STOP, DONE],
        ["event 2: tool call delta without an index"],
    ),
    (
        [ROLE, HI, chunk(finish="done"), DONE],
        ["event 3: finish_reason 'done' is not one of stop, length, tool_calls, content_filter"],
    ),
    ([ROLE, HI, STOP, STOP, DONE], ["event 4: finish_reason repeated"]),
    (
        [ROLE, HI, chunk(finish="tool_calls"), DONE],
        ["event 3: finish_reason is 'tool_calls' but no tool call was streamed"],
    ),
    (
        [ROLE, chunk(CALL_START), chunk(call(0, "{}")), STOP, DONE],
        ["event 4: tool calls were streamed but finish_reason is 'stop'"],
    ),
    (
        [ROLE, chunk(CALL_START), chunk(call(0, '{"city":')), chunk(finish="tool_calls"), DONE],
        ["tool call 0 arguments are not valid JSON: '{\"city\":'"],
    ),
    ([ROLE, HI, DONE], ["no chunk with a finish_reason"]),
    ([ROLE, HI, STOP], ["no terminal frame (data: [DONE])"]),
    ([ROLE, HI, STOP, DONE, HI], ["event 5: event after [DONE]"]),
    ([ROLE, HI, frame({"error": "boom"}, "error"), DONE], ["event 3: error event without error.message"]),
    ([ROLE, HI, frame({"error": {"message": "boom"}}, "error"), DONE], []),
    ([ROLE, frame({"x": 1}, "ping"), HI, STOP, DONE], ["event 2: unexpected event type 'ping'"]),
    (
        [
            ROLE,
            HI,
            STOP,
            frame({"id": "c1", "object": "chat.completion.chunk", "choices": [], "usage": {"total": 3}}),
            DONE,
        ],
        ["event 4: usage has no prompt_tokens"],
    ),
]


def test_openai_chat_include_usage_needs_a_usage_chunk() -> None:
    request = Request(
        "POST", "/v1/chat/completions", body=b'{"stream": true, "stream_options": {"include_usage": true}}'
    )
    assert violations("openai-chat", ROLE, HI, STOP, DONE, request=request) == [
        "stream_options.include_usage was set but no chunk carries usage"
    ]
    usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    with_usage = chunk(finish="stop", usage=usage)
    assert violations("openai-chat", ROLE, HI, with_usage, DONE, request=request) == []


# --- openai-completions ----------------------------------------------------------------------


def text_chunk(text: str, finish: str | None = None, logprobs: Any = None, **top: Any) -> str:
    choice = {"text": text, "index": 0, "logprobs": logprobs, "finish_reason": finish}
    return frame({"id": "k1", "object": "text_completion", "created": 1, "model": "m", "choices": [choice], **top})


ONCE, END = text_chunk(" once"), text_chunk("", "stop")


COMPLETIONS_RULES: list[Case] = [
    ([ONCE, END, DONE], []),
    ([ONCE, "data: nope\n\n", END, DONE], ["event 2: data is not JSON: 'nope'"]),
    (
        [ONCE, text_chunk(" x", object="chat.completion.chunk"), END, DONE],
        ["event 2: object is 'chat.completion.chunk', not 'text_completion'"],
    ),
    ([ONCE, text_chunk(" x", id="k2"), END, DONE], ["event 2: id changes from 'k1' to 'k2'"]),
    (
        [ONCE, frame({"id": "k1", "object": "text_completion", "choices": []}), END, DONE],
        ["event 2: choices is missing or empty"],
    ),
    (
        [ONCE, frame({"id": "k1", "object": "text_completion", "choices": [{"index": 0}]}), END, DONE],
        ["event 2: choice has no text"],
    ),
    ([ONCE, END, ONCE, DONE], ["event 3: text after the finish_reason chunk"]),
    (
        [
            text_chunk(" a", logprobs={"tokens": [" a", " b"], "token_logprobs": [-1.0], "text_offset": [0, 2]}),
            END,
            DONE,
        ],
        ["event 1: logprobs lists differ in length: tokens 2, token_logprobs 1, text_offset 2"],
    ),
    (
        [ONCE, text_chunk("", "tool_calls"), DONE],
        ["event 2: finish_reason 'tool_calls' is not one of stop, length, content_filter"],
    ),
    ([ONCE, END, END, DONE], ["event 3: finish_reason repeated"]),
    ([ONCE, DONE], ["no chunk with a finish_reason"]),
    ([ONCE, END], ["no terminal frame (data: [DONE])"]),
    ([ONCE, END, DONE, ONCE], ["event 4: event after [DONE]"]),
]


# --- openai-responses --------------------------------------------------------------------------


def responses_stream(*, text: str = "Hi", **broken: Any) -> list[str]:
    """A valid Responses stream, then changed as `broken` says."""
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "r1", "status": "in_progress"}},
        {"type": "response.in_progress", "response": {"id": "r1", "status": "in_progress"}},
        {"type": "response.output_item.added", "output_index": 0, "item": {"id": "m1", "type": "message"}},
        {"type": "response.content_part.added", "item_id": "m1", "output_index": 0, "content_index": 0},
        {"type": "response.output_text.delta", "item_id": "m1", "output_index": 0, "content_index": 0, "delta": "H"},
        {"type": "response.output_text.delta", "item_id": "m1", "output_index": 0, "content_index": 0, "delta": "i"},
        {"type": "response.output_text.done", "item_id": "m1", "output_index": 0, "content_index": 0, "text": text},
        {"type": "response.content_part.done", "item_id": "m1", "output_index": 0, "content_index": 0},
        {"type": "response.output_item.done", "output_index": 0, "item": {"id": "m1", "type": "message"}},
        {"type": "response.completed", "response": {"id": "r1", "status": "completed"}},
    ]
    for index, change in broken.get("replace", {}).items():
        events[index] = change
    for index in sorted(broken.get("drop", ()), reverse=True):
        del events[index]
    for n, e in enumerate(events):
        e["sequence_number"] = n + (n >= broken.get("bump", len(events)))
    frames = [frame(e, broken.get("names", {}).get(n, e.get("type"))) for n, e in enumerate(events)]
    return frames + broken.get("tail", [DONE])


RESPONSES_RULES: list[Case] = [
    (responses_stream(), []),
    (responses_stream(tail=[]), []),  # OpenAI's own API sends no [DONE]
    (
        responses_stream(names={4: "response.output_text.deltas"}),
        ["event 5: event name 'response.output_text.deltas' but type 'response.output_text.delta'"],
    ),
    (responses_stream(bump=5), ["event 6: sequence_number jumps from 4 to 6"]),
    (
        responses_stream(replace={6: {"type": "response.output_text.done", "item_id": "m1", "text": "Hi"}}, bump=99),
        [],
    ),
    (responses_stream(drop=[0, 1]), ["event 1: first event is response.output_item.added, not response.created"]),
    (responses_stream(text="Hello"), ["event 7: response.output_text.done text differs from its deltas"]),
    (responses_stream(drop=[8]), ["event 9: response.completed before response.output_item.done for m1"]),
    (
        responses_stream(tail=[frame({"type": "response.in_progress", "sequence_number": 10}), DONE]),
        ["event 11: response.in_progress after response.completed"],
    ),
    (
        responses_stream(drop=[9], tail=[DONE]),
        [
            "event 10: [DONE] before the terminal event",
            "no terminal event (response.completed, response.incomplete or response.failed)",
        ],
    ),
    (
        responses_stream(
            replace={4: {"type": "response.output_text.delta", "item_id": "m9", "sequence_number": 4, "delta": "H"}}
        ),
        [
            "event 5: response.output_text.delta for unknown item m9",
            "event 7: response.output_text.done text differs from its deltas",
        ],
    ),
    (responses_stream(replace={3: {"item_id": "m1"}}), ["event 4: data has no type"]),
]


def test_openai_responses_delta_after_its_item_is_done() -> None:
    late = {"type": "response.output_text.delta", "item_id": "m1", "output_index": 0, "content_index": 0, "delta": "!"}
    frames = responses_stream()
    frames.insert(9, frame({**late, "sequence_number": 9}))
    assert (
        violations("openai-responses", *frames)[0]
        == "event 10: response.output_text.delta after response.output_item.done for m1"
    )


# --- lmstudio-chat -------------------------------------------------------------------------------


def lms(*types: str | dict[str, Any], names: dict[int, str] | None = None) -> list[str]:
    out = []
    for n, t in enumerate(types):
        obj = {"type": t} if isinstance(t, str) else t
        if obj["type"].endswith(".delta") and "content" not in obj:
            obj = {**obj, "content": "x"}
        out.append(frame(obj, (names or {}).get(n, obj["type"])))
    return out


def chat_end(reasoning: str = "", message: str = "x") -> dict[str, Any]:
    output = [{"type": "reasoning", "content": reasoning}] if reasoning else []
    output += [{"type": "message", "content": message}] if message else []
    return {"type": "chat.end", "result": {"model_instance_id": "m", "output": output}}


START = {"type": "chat.start", "model_instance_id": "m"}
MESSAGE = ("message.start", "message.delta", "message.end")


LMSTUDIO_RULES: list[Case] = [
    (lms(START, *MESSAGE, chat_end()), []),
    (lms(START, "reasoning.start", "reasoning.delta", "reasoning.end", *MESSAGE, chat_end("x")), []),
    (lms(START, {"type": "chat.middle"}, *MESSAGE, chat_end()), ["event 2: unknown event type 'chat.middle'"]),
    (
        lms(START, *MESSAGE, chat_end(), names={1: "message.begin"}),
        ["event 2: event name 'message.begin' but type 'message.start'"],
    ),
    (lms(*MESSAGE, chat_end()), ["event 1: first event is message.start, not chat.start"]),
    (
        lms(START, *MESSAGE, {"type": "tool_call.arguments", "tool": "f", "arguments": {}}, chat_end()),
        ["event 5: tool_call.arguments after message.end"],
    ),
    (
        lms(
            START,
            "message.start",
            "reasoning.start",
            "reasoning.delta",
            "reasoning.end",
            "message.delta",
            "message.end",
            chat_end("x"),
        ),
        ["event 3: reasoning.start after message.start"],
    ),
    (
        lms(
            START,
            "message.start",
            {"type": "tool_call.start", "tool": "f"},
            "message.delta",
            "message.end",
            chat_end(),
        ),
        ["event 3: tool_call.start after message.start"],
    ),
    (lms(START, "reasoning.delta", *MESSAGE, chat_end("x")), ["event 2: reasoning.delta after chat.start"]),
    (
        lms(START, {"type": "prompt_processing.progress", "progress": 1.5}, *MESSAGE, chat_end()),
        ["event 2: prompt_processing.progress progress 1.5 is not between 0 and 1"],
    ),
    (
        lms(
            START,
            {"type": "model_load.progress", "progress": 0.7},
            {"type": "model_load.progress", "progress": 0.2},
            *MESSAGE,
            chat_end(),
        ),
        ["event 3: model_load.progress goes back from 0.7 to 0.2"],
    ),
    (lms(START, "message.start", "message.delta", chat_end()), ["event 4: chat.end before message.end"]),
    (
        lms(START, *MESSAGE, chat_end(message="y")),
        ["event 5: chat.end message differs from the streamed message.delta content"],
    ),
    (lms(START, *MESSAGE, {"type": "chat.end", "result": {}}), ["event 5: chat.end has no result.output"]),
    (lms(START, *MESSAGE), ["no terminal frame (chat.end)"]),
    (
        lms(START, *MESSAGE, {"type": "error", "error": {"type": "unknown", "message": "boom"}}),
        ["no terminal frame (chat.end) after the error"],
    ),
    (
        lms(START, *MESSAGE, {"type": "error", "error": "boom"}, chat_end()),
        ["event 5: error event without error.message"],
    ),
    (
        lms(START, *MESSAGE, chat_end(), *MESSAGE),
        [
            "event 6: message.start after chat.end",
            "event 7: message.delta after chat.end",
            "event 8: message.end after chat.end",
        ],
    ),
]


# --- gemini ---------------------------------------------------------------------------------------


GEMINI_PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
GEMINI_MODEL = "gemini-2.5-flash"


def gemini_data(obj: Any) -> str:
    return f"data: {json.dumps(obj)}\r\n\r\n"


def gemini_chunk(*parts: Any, finish: str | None = None, usage: Any = None, **top: Any) -> str:
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    extra = {"usageMetadata": usage} if usage is not None else {}
    return gemini_data({"candidates": [candidate], **extra, "modelVersion": GEMINI_MODEL, "responseId": "r1", **top})


GEMINI_HI = gemini_chunk({"text": "Hi"})
GEMINI_STOP = gemini_chunk({"text": "!"}, finish="STOP")
GEMINI_CALL = {"functionCall": {"name": "get_weather", "args": {"city": "Tokyo"}}}
GEMINI_SAME_ID = {"functionCall": {"id": "c1", "name": "get_weather", "args": {}}}


def gemini_usage(prompt: int, candidates: int, total: int, **more: int) -> dict[str, int]:
    return {"promptTokenCount": prompt, "candidatesTokenCount": candidates, "totalTokenCount": total, **more}


GEMINI_RULES: list[Case] = [
    ([GEMINI_HI, GEMINI_STOP], []),
    ([GEMINI_HI, gemini_chunk(GEMINI_CALL, finish="STOP")], []),
    ([GEMINI_HI, gemini_data({"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}})], []),
    (
        [gemini_data({"promptFeedback": {"blockReason": "SAFETY"}, "modelVersion": GEMINI_MODEL, "responseId": "r1"})],
        [],
    ),
    (["event: message\n" + GEMINI_HI, "event: x\n" + GEMINI_STOP], ["event 2: unexpected event type 'x'"]),
    ([GEMINI_HI, "data: nope\r\n\r\n", GEMINI_STOP], ["event 2: data is not JSON: 'nope'"]),
    ([GEMINI_HI, "data: [1]\r\n\r\n", GEMINI_STOP], ["event 2: chunk is not a JSON object"]),
    (
        [GEMINI_HI, gemini_data({"error": {"message": "boom"}})],
        ["event 2: error chunk without error.code, error.status"],
    ),
    (
        [GEMINI_HI, gemini_data({"error": {"code": 500, "message": "boom", "status": "BROKEN"}})],
        ["event 2: error.status 'BROKEN' is not a google.rpc.Code"],
    ),
    (
        [GEMINI_HI, gemini_data({"error": {"code": 500, "message": "boom", "status": "INTERNAL"}}), GEMINI_STOP],
        ["event 3: chunk after the error"],
    ),
    ([GEMINI_HI, GEMINI_STOP, GEMINI_HI], ["event 3: chunk after the finishReason chunk"]),
    (
        [GEMINI_HI, gemini_chunk({"text": "!"}, finish="STOP", responseId="r2")],
        ["event 2: responseId changes from 'r1' to 'r2'"],
    ),
    (
        [GEMINI_HI, gemini_chunk({"text": "!"}, finish="STOP", modelVersion="other")],
        ["event 2: modelVersion changes from 'gemini-2.5-flash' to 'other'"],
    ),
    ([GEMINI_HI, gemini_chunk({"text": "!"}, finish="STOP", usage=[3])], ["event 2: usageMetadata is not an object"]),
    (
        [GEMINI_HI, gemini_chunk({"text": "!"}, finish="STOP", usage=gemini_usage(2, 9, 35, thoughtsTokenCount=20))],
        ["event 2: usageMetadata.totalTokenCount is 35, not the sum of its counts (31)"],
    ),
    (
        [
            gemini_chunk({"text": "Hi"}, usage=gemini_usage(2, 9, 11)),
            gemini_chunk({"text": "!"}, finish="STOP", usage=gemini_usage(2, 4, 6)),
        ],
        ["event 2: usageMetadata.candidatesTokenCount goes down from 9 to 4"],
    ),
    (
        [GEMINI_HI, gemini_data({"modelVersion": GEMINI_MODEL, "responseId": "r1"}), GEMINI_STOP],
        ["event 2: chunk has no candidates"],
    ),
    ([GEMINI_HI, gemini_data({"candidates": ["x"]}), GEMINI_STOP], ["event 2: candidate is not an object"]),
    (
        [
            gemini_data(
                {"candidates": [{"content": {"parts": [{"text": "Hi"}], "role": "user"}, "finishReason": "STOP"}]}
            )
        ],
        ["event 1: content role is 'user', not 'model'"],
    ),
    (
        [
            gemini_data(
                {"candidates": [{"content": {"parts": {"text": "Hi"}, "role": "model"}, "finishReason": "STOP"}]}
            )
        ],
        ["event 1: content.parts is not a list"],
    ),
    (
        [GEMINI_HI, gemini_chunk({"thoughtSignature": "c2ln"}), GEMINI_STOP],
        ["event 2: part 0 carries nothing (text, functionCall, ...)"],
    ),
    ([gemini_chunk({"thought": True}), GEMINI_STOP], ["event 1: part 0 is a thought without text"]),
    (
        [GEMINI_HI, gemini_chunk({"text": "!", "thoughtSignature": "not base64!"}, finish="STOP")],
        ["event 2: part 0 thoughtSignature is not base64"],
    ),
    (
        [GEMINI_HI, gemini_chunk({"functionCall": {"args": {}}}, finish="STOP")],
        ["event 2: part 0: functionCall without a name"],
    ),
    (
        [GEMINI_HI, gemini_chunk({"functionCall": {"name": "f", "args": "{}"}}, finish="STOP")],
        ["event 2: part 0: functionCall f args is not an object"],
    ),
    ([GEMINI_HI, gemini_chunk({"text": "!"}, finish="DONE")], ["event 2: unknown finishReason 'DONE'"]),
    (
        [gemini_data({"candidates": [{"finishReason": "STOP", "index": 0}, {"finishReason": "STOP", "index": 1}]})],
        [],  # two candidates may each finish in one chunk (candidateCount 2)
    ),
    ([GEMINI_HI], ["no chunk with a finishReason"]),
    (
        [GEMINI_HI, GEMINI_STOP, GEMINI_STOP],
        ["event 3: chunk after the finishReason chunk", "event 3: finishReason repeated"],
    ),
    (
        [gemini_chunk(GEMINI_SAME_ID), gemini_chunk(GEMINI_SAME_ID, finish="STOP")],
        ["tool calls 0 and 1 have the same id 'c1'"],
    ),
]


# --- anthropic-messages ---------------------------------------------------------------------------


def ev(obj: dict[str, Any], event: str | None = None) -> str:
    return f"event: {event or obj['type']}\ndata: {json.dumps(obj)}\n\n"


def block(index: int, kind: str = "text", **fields: Any) -> str:
    empty = {"text": {"text": ""}, "thinking": {"thinking": "", "signature": ""}}.get(kind, {})
    return ev({"type": "content_block_start", "index": index, "content_block": {"type": kind, **empty, **fields}})


def delta(index: int, kind: str = "text_delta", **fields: Any) -> str:
    return ev({"type": "content_block_delta", "index": index, "delta": {"type": kind, **fields}})


def stop(index: int) -> str:
    return ev({"type": "content_block_stop", "index": index})


def message_delta(reason: str = "end_turn", usage: Any = None) -> str:
    usage = {"output_tokens": 2} if usage is None else usage
    return ev({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None}, "usage": usage})


def anthropic_call(index: int, call_id: str, arguments: str) -> list[str]:
    return [
        block(index, "tool_use", id=call_id, name="get_weather", input={}),
        delta(index, "input_json_delta", partial_json=arguments),
        stop(index),
    ]


ENVELOPE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": None}
ANTHROPIC_START = ev(
    {"type": "message_start", "message": {**ENVELOPE, "usage": {"input_tokens": 3, "output_tokens": 1}}}
)
PING = 'event: ping\ndata: {"type": "ping"}\n\n'
ANTHROPIC_HI = delta(0, text="Hi")
ANTHROPIC_END = message_delta()
MESSAGE_STOP = ev({"type": "message_stop"})
OVERLOADED = ev({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
CLEAN = [ANTHROPIC_START, block(0), PING, ANTHROPIC_HI, stop(0), ANTHROPIC_END, MESSAGE_STOP]
TOOL_USE = [
    ANTHROPIC_START,
    *anthropic_call(0, "toolu_1", '{"city": "Tokyo"}'),
    message_delta("tool_use"),
    MESSAGE_STOP,
]


ANTHROPIC_RULES: list[Case] = [
    (CLEAN, []),
    (TOOL_USE, []),
    ([PING, *CLEAN], []),  # pings come anywhere
    (
        [
            ANTHROPIC_START,
            block(0),
            ANTHROPIC_HI,
            stop(0),
            ev({"type": "content_block_citation"}),
            ANTHROPIC_END,
            MESSAGE_STOP,
        ],
        [],
    ),  # new types
    ([ANTHROPIC_START, block(0), ANTHROPIC_HI, OVERLOADED], []),  # an error ends the stream as it stands
    (
        [ANTHROPIC_START, "event: message\ndata: {oops\n\n", ANTHROPIC_END, MESSAGE_STOP],
        ["event 2: data is not JSON: '{oops'"],
    ),
    (
        [ANTHROPIC_START, ev({"index": 0}, "content_block_stop"), ANTHROPIC_END, MESSAGE_STOP],
        ["event 2: data has no type"],
    ),
    (
        [
            ANTHROPIC_START,
            block(0),
            f"data: {json.dumps({'type': 'content_block_delta', 'index': 0, 'delta': {'type': 'text_delta', 'text': 'Hi'}})}\n\n",
            stop(0),
            ANTHROPIC_END,
            MESSAGE_STOP,
        ],
        ["event 3: event name 'message' but type 'content_block_delta'"],
    ),
    (CLEAN[1:], ["event 1: first event is content_block_start, not message_start"]),
    ([ANTHROPIC_START, *CLEAN], ["event 2: message_start repeated"]),
    ([ev({"type": "message_start"}), ANTHROPIC_END, MESSAGE_STOP], ["event 1: message_start without a message"]),
    (
        [ANTHROPIC_START, ev({"type": "content_block_start", "index": 0}), ANTHROPIC_END, MESSAGE_STOP],
        ["event 2: content_block_start without an index and a content_block with a type"],
    ),
    (
        [ANTHROPIC_START, block(0), block(1), stop(1), ANTHROPIC_END, MESSAGE_STOP],
        ["event 3: content_block_start of block 1 while block 0 is open"],
    ),
    (
        [ANTHROPIC_START, block(1), stop(1), ANTHROPIC_END, MESSAGE_STOP],
        ["event 2: content_block_start index is 1, not 0"],
    ),
    (
        [ANTHROPIC_START, block(0), stop(0), ANTHROPIC_HI, ANTHROPIC_END, MESSAGE_STOP],
        ["event 4: content_block_delta for block 0, which is not open"],
    ),
    (
        [ANTHROPIC_START, block(0), delta(0, "thinking_delta", thinking="Hmm"), stop(0), ANTHROPIC_END, MESSAGE_STOP],
        ["event 3: thinking_delta in a text block"],
    ),
    (
        [
            ANTHROPIC_START,
            block(0, "thinking"),
            delta(0, "input_json_delta", partial_json="{}"),
            stop(0),
            ANTHROPIC_END,
            MESSAGE_STOP,
        ],
        ["event 3: input_json_delta in a thinking block"],
    ),
    (
        [ANTHROPIC_START, block(0), ANTHROPIC_HI, stop(0), stop(0), ANTHROPIC_END, MESSAGE_STOP],
        ["event 5: content_block_stop for block 0, which is not open"],
    ),
    (
        [ANTHROPIC_START, block(0), ANTHROPIC_HI, stop(0), ANTHROPIC_END, block(1), stop(1), MESSAGE_STOP],
        ["event 6: content_block_start after message_delta", "event 7: content_block_stop after message_delta"],
    ),
    (
        [ANTHROPIC_START, block(0), ANTHROPIC_HI, ANTHROPIC_END, MESSAGE_STOP],
        ["event 4: message_delta while block 0 is open"],
    ),
    (
        [ANTHROPIC_START, block(0), ANTHROPIC_HI, stop(0), message_delta("done"), MESSAGE_STOP],
        [
            "event 5: stop_reason 'done' is not one of end_turn, stop_sequence, pause_turn, max_tokens, "
            "model_context_window_exceeded, tool_use, refusal"
        ],
    ),
    (
        [ANTHROPIC_START, block(0), ANTHROPIC_HI, stop(0), message_delta("tool_use"), MESSAGE_STOP],
        ["event 5: stop_reason is 'tool_use' but no tool_use block was streamed"],
    ),
    (
        [ANTHROPIC_START, block(0), ANTHROPIC_HI, stop(0), message_delta(usage={"input_tokens": 3}), MESSAGE_STOP],
        ["event 5: message_delta has no usage.output_tokens"],
    ),
    (
        [ANTHROPIC_START, block(0), ANTHROPIC_HI, stop(0), MESSAGE_STOP],
        ["event 5: message_stop before any message_delta"],
    ),
    ([*CLEAN, PING], ["event 8: ping after message_stop"]),
    (CLEAN[:-1], ["no terminal event (message_stop or error)"]),
    ([ANTHROPIC_START, block(0), ANTHROPIC_HI, OVERLOADED, MESSAGE_STOP], ["event 5: message_stop after error"]),
    ([ANTHROPIC_START, ev({"type": "error", "error": "Overloaded"})], ["event 2: error event without error.message"]),
    (
        [ANTHROPIC_START, *anthropic_call(0, "toolu_1", '{"city":'), message_delta("tool_use"), MESSAGE_STOP],
        ["tool call 0 arguments are not valid JSON: '{\"city\":'"],
    ),
    (
        [
            ANTHROPIC_START,
            *anthropic_call(0, "toolu_1", "{}"),
            *anthropic_call(1, "toolu_1", "{}"),
            message_delta("tool_use"),
            MESSAGE_STOP,
        ],
        ["tool calls 0 and 1 have the same id 'toolu_1'"],
    ),
]


# --- every dialect's rules --------------------------------------------------------------------------------


def rules(dialect: str, cases: list[Case]) -> list[Any]:
    """A dialect's cases, each named after the dialect and the first violation it finds (`ok`: none)."""
    return [
        pytest.param(dialect, frames, expected, None, id=f"{dialect}-{named(expected)}") for frames, expected in cases
    ]


def named(expected: list[str]) -> str:
    """What a case finds, for its id: the first violation without its event number, or `ok`."""
    if not expected:
        return "ok"
    return expected[0].split(": ", 1)[1] if expected[0].startswith("event ") else expected[0]


def offering(path: str, body: dict[str, Any], query: str = "") -> Request:
    return Request("POST", path, query, body=json.dumps(body).encode())


NOT_OFFERED = ["tool call 0 calls 'get_weather', which the request did not offer"]


@pytest.mark.parametrize(
    ("dialect", "frames", "expected", "asked"),
    [
        *rules("openai-chat", CHAT_RULES),
        *rules("openai-completions", COMPLETIONS_RULES),
        *rules("openai-responses", RESPONSES_RULES),
        *rules("lmstudio-chat", LMSTUDIO_RULES),
        *rules("gemini", GEMINI_RULES),
        *rules("anthropic-messages", ANTHROPIC_RULES),
        pytest.param(
            "gemini",
            [gemini_chunk(GEMINI_CALL, finish="STOP")],
            NOT_OFFERED,
            offering(
                GEMINI_PATH, {"contents": [], "tools": [{"functionDeclarations": [{"name": "get_time"}]}]}, "alt=sse"
            ),
            id="gemini-a tool the request did not offer",
        ),
        pytest.param(
            "anthropic-messages",
            TOOL_USE,
            NOT_OFFERED,
            offering(
                "/v1/messages",
                {"model": "m", "max_tokens": 9, "messages": [], "tools": [{"name": "search", "input_schema": {}}]},
            ),
            id="anthropic-messages-a tool the request did not offer",
        ),
    ],
)
def test_rules(dialect: str, frames: list[str], expected: list[str], asked: Request | None) -> None:
    assert violations(dialect, *frames, request=asked) == expected


# --- errors, in each API's own words ---------------------------------------------------------------


BEFORE = [Start("id1", "m", 1), TextDelta("Hi")]


def test_openai_chat_error_frames() -> None:
    frames = DIALECTS["openai-chat"].error_frames(Error("overloaded", "server_error", "busy"), BEFORE)
    assert b"".join(frames) == (
        b'event: error\ndata: {"error":{"message":"overloaded","type":"server_error","code":"busy"}}\n\n'
        b"data: [DONE]\n\n"
    )


def test_openai_responses_error_frames_fail_the_response() -> None:
    frames = DIALECTS["openai-responses"].error_frames(Error("Request timed out", code="request_timeout"), BEFORE)
    # A failure closes nothing: response.failed, then [DONE].
    failed, done = events_of(*frames)
    assert failed.event == "response.failed"
    body = failed.json()
    assert body["response"]["status"] == "failed"
    assert body["response"]["error"] == {"code": "request_timeout", "message": "Request timed out"}
    assert done.data == "[DONE]"


def test_openai_responses_error_frames_continue_the_sequence_numbers_already_sent() -> None:
    sent = events_of(
        frame({"type": "response.created", "sequence_number": 0}),
        frame({"type": "response.in_progress", "sequence_number": 41}),
    )
    frames = DIALECTS["openai-responses"].error_frames(Error("boom"), BEFORE, sent=sent)
    assert events_of(*frames)[0].json()["sequence_number"] == 42


def test_lmstudio_error_frames_end_the_chat_with_what_was_generated() -> None:
    frames = DIALECTS["lmstudio-chat"].error_frames(Error("model crashed", "internal_error"), BEFORE)
    error, end = events_of(*frames)[-2:]
    assert (error.event, error.json()) == (
        "error",
        {"type": "error", "error": {"type": "internal_error", "message": "model crashed"}},
    )
    assert end.event == "chat.end"
    assert end.json()["result"]["output"] == [{"type": "message", "content": "Hi"}]


def http_error(
    dialect: str,
    status: int,
    expected: dict[str, Any] | str,
    *,
    type: str | None = None,
    json_type: str = "application/json",
) -> Any:
    """A case of `test_http_errors`: `expected` is the JSON body, or (a str) the body's exact text."""
    about = f"-{type}" if type else ""
    return pytest.param(dialect, status, type, json_type, expected, id=f"{dialect}-{status}{about}")


def google(status: int, word: str) -> str:
    """Google's error body for `slow down`, pretty-printed as the API sends it."""
    return f'{{\n  "error": {{\n    "code": {status},\n    "message": "slow down",\n    "status": "{word}"\n  }}\n}}\n'


def anthropic(kind: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": "slow down"}}


@pytest.mark.parametrize(
    ("dialect", "status", "type", "content_type", "expected"),
    [
        http_error(  # OpenAI's own rate-limit body, which clients look for
            "openai-chat",
            429,
            {"error": {"message": "slow down", "type": "requests", "param": None, "code": "rate_limit_exceeded"}},
        ),
        http_error(
            "openai-chat",
            400,
            {"error": {"message": "slow down", "type": "invalid_request_error", "param": None, "code": None}},
        ),
        http_error(
            "openai-responses",
            503,
            {"error": {"message": "slow down", "type": "server_error", "param": None, "code": None}},
        ),
        http_error("lmstudio-chat", 404, {"error": {"type": "invalid_request", "message": "slow down"}}),
        http_error("lmstudio-chat", 500, {"error": {"type": "internal_error", "message": "slow down"}}),
        *(
            http_error("gemini", status, google(status, word), json_type="application/json; charset=UTF-8")
            for status, word in [
                (429, "RESOURCE_EXHAUSTED"),
                (503, "UNAVAILABLE"),
                (404, "NOT_FOUND"),
                (400, "INVALID_ARGUMENT"),
                (418, "UNKNOWN"),
            ]
        ),
        *(
            http_error("anthropic-messages", status, anthropic(kind))
            for status, kind in [
                (400, "invalid_request_error"),
                (401, "authentication_error"),
                (403, "permission_error"),
                (404, "not_found_error"),
                (413, "request_too_large"),
                (418, "invalid_request_error"),
                (429, "rate_limit_error"),
                (500, "api_error"),
                (503, "api_error"),
                (504, "timeout_error"),
                (529, "overloaded_error"),
            ]
        ),
        # A stream that failed overloaded, answered as JSON, keeps its type; another API's type is the API's own.
        http_error("anthropic-messages", 500, anthropic("overloaded_error"), type="overloaded_error"),
        http_error("anthropic-messages", 500, anthropic("api_error"), type="server_error"),
    ],
)
def test_http_errors(
    dialect: str, status: int, type: str | None, content_type: str, expected: dict[str, Any] | str
) -> None:
    got_status, headers, body = DIALECTS[dialect].http_error(status, "slow down", type=type)
    assert (got_status, dict(headers)) == (status, {"content-type": content_type})
    assert (body.decode() if isinstance(expected, str) else json.loads(body)) == expected


@pytest.mark.parametrize(
    ("path", "body", "content_type", "expected"),
    [
        pytest.param(
            "/v1/chat/completions",
            {"model": "m", "messages": []},
            "application/json",
            {"error": {"type": "invalid_request_error", "param": None, "code": "no_match"}},
            id="openai-chat",
        ),
        pytest.param(
            "/api/v1/chat",
            {"model": "m", "input": "hi"},
            "application/json",
            {"error": {"type": "invalid_request", "code": "no_match"}},
            id="lmstudio-chat",
        ),
        pytest.param(
            f"/v1beta/models/{GEMINI_MODEL}:generateContent",
            {"contents": [{"parts": [{"text": "hi"}], "role": "user"}]},
            "application/json; charset=UTF-8",
            {
                "error": {
                    "code": 404,
                    "status": "NOT_FOUND",
                    "details": [
                        {
                            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                            "reason": "no_match",
                            "domain": "sse-tape",
                        }
                    ],
                }
            },
            id="gemini",
        ),
        pytest.param(
            "/v1/messages",
            {"model": "m", "max_tokens": 9, "messages": []},
            "application/json",
            {"type": "error", "error": {"type": "not_found_error", "details": {"error_code": "no_match"}}},
            id="anthropic-messages",
        ),
    ],
)
def test_a_miss_answers_in_the_apis_error_shape(
    path: str, body: dict[str, Any], content_type: str, expected: dict[str, Any]
) -> None:
    with serve(Cassette()) as server:
        got = httpx.post(server.url + path, json=body)
    assert (got.status_code, got.headers["content-type"]) == (404, content_type)
    answer = got.json()
    assert answer["error"].pop("message").startswith(f"sse-tape: no recorded interaction matches POST {path}")
    assert (
        answer == expected
    )  # and the rest of the body is the API's own error, with the miss's code where it keeps one


@pytest.mark.parametrize(
    ("path", "body", "status", "content_type", "expected"),
    [
        # The bundled haiku fails mid-stream with 503 UNAVAILABLE; asked for no stream, the API answers 503 too.
        pytest.param(
            f"/v1beta/models/{GEMINI_MODEL}:generateContent",
            {
                "contents": [{"parts": [{"text": "A haiku"}], "role": "user"}],
                "generationConfig": {"temperature": 1.2},
                "safetySettings": [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "threshold": "BLOCK_ONLY_HIGH"}],
            },
            503,
            "application/json; charset=UTF-8",
            {
                "error": {
                    "code": 503,
                    "message": "The model is overloaded. Please try again later.",
                    "status": "UNAVAILABLE",
                }
            },
            id="gemini",
        ),
        # The bundled claude-opus-4-7 stream fails with overloaded_error; asked for no stream, the API answers 529.
        # Any request for that model gets it, even one whose max_tokens is the greeting's (1024), not its own.
        pytest.param(
            "/v1/messages",
            {"model": "claude-opus-4-7", "max_tokens": 1024, "messages": [{"role": "user", "content": "Hi"}]},
            529,
            "application/json",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            id="anthropic-messages",
        ),
    ],
)
def test_a_plain_call_answered_by_a_stream_that_failed_gets_the_error_the_stream_failed_with(
    instant_server: MockServer,
    path: str,
    body: dict[str, Any],
    status: int,
    content_type: str,
    expected: dict[str, Any],
) -> None:
    got = httpx.post(instant_server.url + path, json=body)
    assert (got.status_code, got.headers["content-type"], got.json()) == (status, content_type, expected)


# --- detection and translation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/v1/chat/completions", "openai-chat"),
        ("/proj_ABC123/my-endpoint/v1/chat/completions", "openai-chat"),
        ("/chat/completions", "openai-chat"),
        ("/v1/completions", "openai-completions"),
        ("/v1/responses", "openai-responses"),
        ("/api/v1/chat", "lmstudio-chat"),
        ("/v1/messages", "anthropic-messages"),
        ("/anthropic/v1/messages", "anthropic-messages"),
        ("/v1/messages/", "anthropic-messages"),
    ],
)
def test_dialect_by_path(path: str, name: str) -> None:
    assert for_path(path) is DIALECTS[name]


@pytest.mark.parametrize(
    "name", ["lmstudio-chat", "openai-responses", "openai-completions", "gemini", "anthropic-messages"]
)
def test_dialect_by_content_when_the_path_does_not_tell(bundled: dict[str, Cassette], name: str) -> None:
    moved = Interaction(Request("POST", "/somewhere"), bundled[name].interactions[0].response)
    assert detect(moved) is DIALECTS[name]


@pytest.mark.parametrize("target", sorted(name for name, d in DIALECTS.items() if isinstance(d, Generation)))
def test_every_bundled_interaction_translates_into_a_clean_stream(bundled: dict[str, Cassette], target: str) -> None:
    for cassette in bundled.values():
        for interaction in cassette:
            translated = translate(interaction, DIALECTS[target])
            assert for_path(translated.request.path) is DIALECTS[target]
            framing = framing_of(translated) or SSE  # Bedrock's translation is its event stream
            events = [e for _, e in framing.events(translated.response.chunks)]
            assert DIALECTS[target].check(events, translated.request) == []


def test_translation_keeps_the_timing_of_the_original_events(bundled: dict[str, Cassette]) -> None:
    original = bundled["openai-chat"].interactions[0]
    translated = translate(original, DIALECTS["openai-responses"])
    deltas = [t for t, e in translated.response.events() if e.event == "response.output_text.delta"]
    content = [
        t
        for t, e in original.response.events()
        if e.data != "[DONE]" and any(c["delta"].get("content") for c in e.json()["choices"])
    ]
    assert deltas == content


def test_translation_rewrites_the_request_for_the_target_api(bundled: dict[str, Cassette]) -> None:
    tools = bundled["openai-chat"].interactions[1]
    as_responses = translate(tools, DIALECTS["openai-responses"]).request
    assert as_responses.path == "/v1/responses"
    assert json.loads(as_responses.body) == {
        "model": "local-model",
        "input": "Weather in Tokyo?",
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Get weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }
        ],
        "tool_choice": "auto",
        "stream": True,
    }
    router = bundled["router-chat"].interactions[0]
    assert translate(router, DIALECTS["openai-completions"]).request.path == "/proj_ABC123/my-endpoint/v1/completions"


def test_translating_an_error_response_uses_the_targets_error_shape() -> None:
    error = b'{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}'
    interaction = Interaction(
        Request("POST", "/v1/chat/completions", body=b'{"model":"m","messages":[]}'),
        Response(429, (("content-type", "application/json"), ("retry-after", "3")), (Chunk(0.1, error),)),
    )
    translated = translate(interaction, DIALECTS["lmstudio-chat"]).response
    assert translated.status == 429
    assert translated.header("retry-after") == "3"
    assert json.loads(translated.body) == {"error": {"type": "invalid_request", "message": "Rate limit reached"}}


# --- the official SDK reads translated streams ------------------------------------------------------------


def _translated(bundled: dict[str, Cassette], source: str, index: int, target: str) -> Cassette:
    return Cassette([translate(bundled[source].interactions[index], DIALECTS[target])])


def test_sdk_reads_lmstudio_translated_to_chat(bundled: dict[str, Cassette]) -> None:
    cassette = _translated(bundled, "lmstudio-chat", 0, "openai-chat")
    with serve(cassette, match_on=["method", "path"], pace="instant") as server:
        client = openai_client(server.url + "/v1", api_key="x", max_retries=0)
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "?"}], stream=True, stream_options={"include_usage": True}
        )
        *chunks, last = list(stream)
    # LM Studio reports usage, so the translated request asks for it: it comes last, with no choices.
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.choices) == (329, [])
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "The current top‑trending model on Hugging Face is **moonshotai/Kimi-K2-Thinking**."  # noqa: RUF001
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks)
    assert reasoning == "Need to call function."
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_sdk_reads_chat_tool_calls_translated_to_responses(bundled: dict[str, Cassette]) -> None:
    cassette = _translated(bundled, "openai-chat", 1, "openai-responses")
    with serve(cassette, match_on=["method", "path"], pace="instant") as server:
        client = openai_client(server.url + "/v1", api_key="x", max_retries=0)
        tools = cassette.interactions[0].request.json()["tools"]  # the call answers only a request offering its tool
        events = list(client.responses.create(model="m", input="Weather in Tokyo?", tools=tools, stream=True))
        with client.responses.stream(model="m", input="Weather in Tokyo?", tools=tools) as stream:
            final = stream.get_final_response()
    assert "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta") == '{"city":"Tokyo"}'
    [call] = final.output
    assert (call.type, call.name, call.call_id, call.arguments) == (
        "function_call",
        "get_weather",
        "call_weather",
        '{"city":"Tokyo"}',
    )  # type: ignore[union-attr]


def test_sdk_reads_responses_translated_to_chat_and_completions(bundled: dict[str, Cassette]) -> None:
    chat = _translated(bundled, "openai-responses", 0, "openai-chat")
    completions = _translated(bundled, "openai-responses", 0, "openai-completions")
    with serve(chat, completions, match_on=["method", "path"], pace="instant") as server:
        client = openai_client(server.url + "/v1", api_key="x", max_retries=0)
        usage = {"include_usage": True}
        chat_chunks = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "?"}], stream=True, stream_options=usage
        )
        chat_text = "".join(c.choices[0].delta.content or "" for c in chat_chunks if c.choices)
        completion_chunks = client.completions.create(model="m", prompt="?", stream=True, stream_options=usage)
        completion_text = "".join(c.choices[0].text for c in completion_chunks if c.choices)
    assert chat_text == completion_text == "Hello! How can I help you today?"


def test_sdk_reads_router_refusal_translated_to_responses(bundled: dict[str, Cassette]) -> None:
    cassette = _translated(bundled, "router-chat", 1, "openai-responses")
    with serve(cassette, match_on=["method", "path"], pace="instant") as server:
        client = openai_client(server.url + "/proj_ABC123/my-endpoint/v1", api_key="x", max_retries=0)
        with client.responses.stream(model="m", input="?") as stream:
            refusal = "".join(e.delta for e in stream if e.type == "response.refusal.delta")
    assert refusal == "I'm sorry, but I cannot help with that request."


def test_sdk_raises_the_injected_chat_error_mid_stream() -> None:
    events = [Start("c1", "m", 1), TextDelta("Hi"), Error("The model crashed", "server_error", "model_error")]
    body = b"".join(DIALECTS["openai-chat"].encode(events))
    cassette = Cassette([Interaction(Request("POST", "/v1/chat/completions"), Response(chunks=(Chunk(0.0, body),)))])
    with serve(cassette, match_on=["path"]) as server:
        client = openai_client(server.url + "/v1", api_key="x", max_retries=0)
        stream = client.chat.completions.create(model="m", messages=[], stream=True)
        with pytest.raises(openai.APIError, match="The model crashed"):
            for _ in stream:
                pass


def test_tool_call_ids_and_server_run_calls_in_translation() -> None:
    # LM Studio's calls have no id and are run by the server: OpenAI's function calls are neither.
    events = [
        Start("", "m"),
        ToolCallStart(0, "", "search", server=True),
        ToolCallDelta(0, "{}"),
        ToolCallEnd(0, output="[]"),
        TextDelta("Done."),
        Finish(),
    ]
    assert DIALECTS["openai-chat"].decode(events_of(*DIALECTS["openai-chat"].encode(events))) == [
        Start("", "m"),
        TextDelta("Done."),
        Finish(),
    ]
    client_call = [
        Start("c", "m"),
        ToolCallStart(0, "", "f"),
        ToolCallDelta(0, "{}"),
        ToolCallEnd(0),
        Finish("tool_calls"),
    ]
    decoded = DIALECTS["openai-chat"].decode(events_of(*DIALECTS["openai-chat"].encode(client_call)))
    assert decoded[1] == ToolCallStart(0, "call_0", "f")


def test_check_live_against_llama_cpp_server(llama_server: str) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}
    clean = _check_live(llama_server, body)
    assert (clean.returncode, clean.stdout.splitlines()[-1]) == (0, "checked 1 interaction: 0 violations")
    # What it does not do: llama-cpp-python ignores stream_options.include_usage.
    usage = _check_live(llama_server, {**body, "stream_options": {"include_usage": True}})
    assert usage.returncode == 1
    assert "  stream_options.include_usage was set but no chunk carries usage" in usage.stdout.splitlines()
    # And it repeats a tool call's id and name in every delta.
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    forced = {"type": "function", "function": {"name": "get_weather"}}
    calls = _check_live(llama_server, {**body, "max_tokens": 64, "tools": [tool], "tool_choice": forced})
    assert calls.returncode == 1
    assert "  event 3: tool call 0 repeats its id or name after its first delta" in calls.stdout.splitlines()


def _check_live(base_url: str, body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "sse_tape",
        "check",
        "--live",
        base_url + "/v1/chat/completions",
        "-d",
        json.dumps(body),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", ["openai-responses", "lmstudio-chat"])
def test_named_event_dialects_fault_data_that_is_not_json(name: str) -> None:
    assert "event 1: data is not JSON: 'nope'" in violations(name, "event: x\ndata: nope\n\n")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"error": {"message": "slow down", "type": "rate_limit_error"}}', []),
        (b"<html>502 Bad Gateway</html>", ["error response 429 body is not JSON"]),
        (b'{"detail": "slow down"}', ["error response 429 has no error.message"]),
    ],
)
def test_error_responses_before_the_stream(body: bytes, expected: list[str]) -> None:
    response = Response(429, (("content-type", "application/json"),), (Chunk(0.0, body),))
    assert [str(v) for v in check_error_response(response)] == expected


def test_translation_to_chat_sends_heartbeats_when_idle_and_the_request_id(bundled: dict[str, Cassette]) -> None:
    thinking = bundled["router-chat"].interactions[2]  # 17.6 s of silence after the role frame
    as_lmstudio = translate(thinking, DIALECTS["lmstudio-chat"])
    assert b": heartbeat" not in as_lmstudio.response.body
    back = translate(as_lmstudio, DIALECTS["openai-chat"]).response
    beats = [c.t for c in back.chunks if c.data == b": heartbeat\n\n"]
    role_frame_at = thinking.response.chunks[0].t
    assert beats == [round(role_frame_at + 15.0, 6)]  # 15 s after the last frame, chat.start at the role frame's time
    assert back.header("x-request-id") == "chatcmpl-ghi789"  # carried over from the recording, through LM Studio
    as_chat = translate(thinking, DIALECTS["openai-chat"]).response
    assert [c.t for c in as_chat.chunks if c.data == b": heartbeat\n\n"] == [round(role_frame_at + 15.0, 6)]
    assert as_chat.header("x-request-id") == "chatcmpl-ghi789"
    assert as_chat.header("x-xerotier-worker-id") == "worker-7f3a"  # the router's own headers carry over


def test_redacting_a_body_with_a_lone_surrogate_escape_keeps_the_interaction() -> None:
    from sse_tape.redaction import REDACTED, Redaction

    body = b'{"user": "alice", "s": "\\ud800"}'
    redacted = Redaction.build(json_fields=["user"]).request(Request("POST", "/v1/chat/completions", body=body))
    assert json.loads(redacted.body) == {"user": REDACTED, "s": "\ud800"}


def test_a_tool_call_still_open_at_the_finish_ends_with_it_in_every_dialect() -> None:
    # events.py: "a call left open when the stream finishes is ended by Finish".
    events = [Start("r1", "m", 1), ToolCallStart(0, "call_1", "f"), ToolCallDelta(0, '{"a": 1}'), Finish("tool_calls")]
    for name in ("openai-chat", "openai-responses"):
        sse = events_of(*DIALECTS[name].encode(events))
        assert DIALECTS[name].check(sse) == [], name
        assert ToolCallEnd(0) in DIALECTS[name].decode(sse)


def test_an_event_that_reports_usage_is_one_that_may_carry_it() -> None:
    # A replay for a request that asks for no usage decodes the recording to cut its usage only when one of its
    # events may carry usage (`Dialect.carries_usage`, told without the neutral events): none may be missed.
    told = 0
    for cassette in map(Cassette.load, bundled_cassettes()):
        for interaction in cassette.interactions:
            dialect = detect(interaction)
            if dialect is None:  # a stream of no API (events.toml)
                continue
            sent = [sse for _, sse in interaction.response.events()]
            usage = {i for i, event in dialect.decode_indexed(sent) if isinstance(event, Usage)}
            may = {i for i, sse in enumerate(sent) if dialect.carries_usage(sse)}
            assert usage <= may, (cassette.path, interaction.request.path)
            told += len(may) < len(sent)
    assert told >= 5  # the OpenAI chat and completions streams tell which events carry none
