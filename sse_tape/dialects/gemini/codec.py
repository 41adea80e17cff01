"""How `gemini` encodes and decodes neutral events: its encoder, its stream's and its answer's decoding,
and its answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ... import _json
from ...sse import ServerSentEvent
from ..answer import Answer
from ..encoder import Encoder, WholeCall, WholeCalls
from ..events import (
    Error,
    Event,
    Finish,
    ReasoningDelta,
    RefusalDelta,
    Start,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from ..generation import Generation, ServerCalls, as_object, whole
from ..protocol import json_objects, to_json

__all__ = [
    "ERROR_INFO",
    "STATUS_HTTP",
    "TYPE_STATUS",
    "GeminiEncoder",
    "blocked",
    "candidate_of",
    "decode_indexed",
    "decode_json",
    "response_json",
    "status_and_reason",
    "stream_answer",
]

STATUS_HTTP = {
    "CANCELLED": 499, "UNKNOWN": 500, "INVALID_ARGUMENT": 400, "DEADLINE_EXCEEDED": 504, "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409, "PERMISSION_DENIED": 403, "UNAUTHENTICATED": 401, "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400, "ABORTED": 409, "OUT_OF_RANGE": 400, "UNIMPLEMENTED": 501, "INTERNAL": 500,
    "UNAVAILABLE": 503, "DATA_LOSS": 500,
}  # fmt: skip
"""google.rpc.Code names, with the HTTP status each is sent with."""

TYPE_STATUS = {
    "invalid_request_error": "INVALID_ARGUMENT",
    "authentication_error": "UNAUTHENTICATED",
    "permission_error": "PERMISSION_DENIED",
    "not_found_error": "NOT_FOUND",
    "rate_limit_error": "RESOURCE_EXHAUSTED",
    "server_error": "INTERNAL",
    "api_error": "INTERNAL",
    "overloaded_error": "UNAVAILABLE",
    "timeout_error": "DEADLINE_EXCEEDED",
}
"""The other APIs' error types, as Google's status."""

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
"""The `@type` of the detail that carries an error's reason."""


def status_and_reason(type: str, code: str | None = None) -> tuple[str, str | None]:
    """How Google's error object names an error of this neutral `type` and `code`: its `status`, and the ErrorInfo
    `reason` beside it, if any.

    A `code` that is a google.rpc.Code (`UNAVAILABLE`) is the status; another (`API_KEY_INVALID`) is the reason,
    and the status is then the type's (`INTERNAL` for a type Google has no word for). The encoder writes errors
    by this, and `Gemini.error_status` and `Gemini.error_name` say what it wrote.
    """
    if code is not None and code in STATUS_HTTP:
        return code, None
    return TYPE_STATUS.get(type, "INTERNAL"), code or None


def candidate_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The first candidate (another one, with `candidateCount` > 1, is another answer: not this one)."""
    candidates = obj.get("candidates")
    if not isinstance(candidates, list):
        return None
    first = [c for c in candidates if isinstance(c, dict) and c.get("index", 0) == 0]
    return first[0] if first else None


def blocked(obj: dict[str, Any]) -> bool:
    """A prompt the API refused to answer: no candidates, and `promptFeedback.blockReason`."""
    feedback = obj.get("promptFeedback")
    return "candidates" not in obj and isinstance(feedback, dict) and bool(feedback.get("blockReason"))


# Neutral finish reasons in Gemini's words; a function call finishes with STOP.
_FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY"}
# Gemini's finish reasons that stop an answer for what it says.
_FILTERED = frozenset(
    {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT"}
)
# A status reads back as the first of the other APIs' error types that has it.
_STATUS_TYPE = {status: kind for kind, status in reversed(TYPE_STATUS.items())}


def _frame(obj: dict[str, Any]) -> bytes:
    """One chunk as the API sends it: `data: ` and the JSON, then CRLF line ends."""
    return b"data: " + to_json(obj).encode() + b"\r\n\r\n"


def _response(
    start: Start,
    parts: list[dict[str, Any]],
    *,
    finish: str | None = None,
    usage: Usage | None = None,
    logprobs: Sequence[TokenLogprob] | None = None,
) -> dict[str, Any]:
    """A `GenerateContentResponse` of one candidate."""
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"} if parts else {"role": "model"}}
    if finish is not None:
        candidate["finishReason"] = finish
    candidate["index"] = 0
    if logprobs is not None:
        candidate["logprobsResult"] = {
            "topCandidates": [
                {"candidates": [{"token": t, "logProbability": p} for t, p in lp.top]} for lp in logprobs
            ],
            "chosenCandidates": [{"token": lp.token, "logProbability": lp.logprob} for lp in logprobs],
        }
    body: dict[str, Any] = {"candidates": [candidate]}
    if usage is not None:
        body["usageMetadata"] = _usage_json(usage)
    body["modelVersion"] = start.model
    body["responseId"] = start.id
    return body


def _usage_json(usage: Usage) -> dict[str, Any]:
    """Gemini's usage: its candidates do not count the thoughts, which the neutral output tokens include."""
    thoughts = usage.reasoning_tokens or 0
    candidates = max(usage.output_tokens - thoughts, 0)
    out: dict[str, Any] = {
        "promptTokenCount": usage.input_tokens,
        "candidatesTokenCount": candidates,
        "totalTokenCount": usage.input_tokens + candidates + thoughts,
    }
    if usage.cached_tokens is not None:
        out["cachedContentTokenCount"] = usage.cached_tokens
    if usage.reasoning_tokens is not None:
        out["thoughtsTokenCount"] = usage.reasoning_tokens
    return out


def _usage_from(obj: Any) -> Usage | None:
    if not isinstance(obj, dict):
        return None
    prompt, candidates = whole(obj.get("promptTokenCount")), whole(obj.get("candidatesTokenCount"))
    thoughts = whole(obj.get("thoughtsTokenCount"))
    if prompt is None and candidates is None and thoughts is None:
        return None  # no counts: Vertex's `{"trafficType": ...}` on chunks before the last
    return Usage(
        (prompt or 0), (candidates or 0) + (thoughts or 0), thoughts, whole(obj.get("cachedContentTokenCount"))
    )


def _tokens(candidate: dict[str, Any]) -> tuple[TokenLogprob, ...] | None:
    result = candidate.get("logprobsResult")
    if not isinstance(result, dict):
        return None
    chosen = [c for c in result.get("chosenCandidates") or [] if isinstance(c, dict)]
    tops = result.get("topCandidates") or []
    out = []
    for n, entry in enumerate(chosen):
        top = tops[n].get("candidates") if n < len(tops) and isinstance(tops[n], dict) else None
        pairs = tuple(
            (str(t.get("token", "")), float(t.get("logProbability", 0.0))) for t in top or [] if isinstance(t, dict)
        )
        out.append(TokenLogprob(str(entry.get("token", "")), float(entry.get("logProbability", 0.0)), pairs))
    return tuple(out)


def _error_json(error: Error) -> dict[str, Any]:
    """Google's error object: its status and any ErrorInfo `reason` (where the API gives its own,
    `API_KEY_INVALID`) as `status_and_reason` names them."""
    status, reason = status_and_reason(error.type, error.code)
    inner: dict[str, Any] = {"code": STATUS_HTTP[status], "message": error.message, "status": status}
    if reason:
        inner["details"] = [{"@type": ERROR_INFO, "reason": reason, "domain": "generativelanguage.googleapis.com"}]
    return {"error": inner}


def _error_from(inner: dict[str, Any]) -> Error:
    status = str(inner.get("status") or "")
    code = whole(inner.get("code")) or STATUS_HTTP.get(status, 500)
    kind = _STATUS_TYPE.get(status) or ("server_error" if code >= 500 else "invalid_request_error")
    reasons = [
        str(d["reason"])
        for d in inner.get("details") or []
        if isinstance(d, dict) and d.get("@type") == ERROR_INFO and d.get("reason")
    ]
    if reasons:
        return Error(str(inner.get("message", "")), kind, reasons[0])
    return Error(str(inner.get("message", "")), kind, status if status and status != TYPE_STATUS.get(kind) else None)


def _reason(word: str, calls: int) -> str:
    """A Gemini finish reason in neutral words: a STOP after function calls finishes them."""
    if word == "STOP":
        return "tool_calls" if calls else "stop"
    if word == "MAX_TOKENS":
        return "length"
    return "content_filter" if word in _FILTERED else "stop"


def _created(value: Any) -> int:
    """Vertex's `createTime` (RFC 3339) in Unix seconds; 0 when there is none (the Gemini API sends none)."""
    if not isinstance(value, str):
        return 0
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0


class GeminiEncoder(Encoder):
    """gemini's encoder: a whole `GenerateContentResponse` per chunk, function calls whole, the finish with the
    usage last."""

    def __init__(self, dialect: Generation) -> None:
        super().__init__(dialect)
        self.start = Start()
        self.server_calls = ServerCalls()
        self.calls = WholeCalls()
        self.finish: Finish | None = None  # the last chunk waits for the usage that follows the finish

    def _event(self, event: Event) -> None:
        if self.server_calls.skip(event):
            return  # a tool the server ran itself (LM Studio's): Gemini's function calls are the client's
        for call in self.calls.feed(event):
            self.call(call)
        if isinstance(event, Start):
            self.start = event
        elif isinstance(event, TextDelta):
            self.chunk([{"text": event.text}], logprobs=event.logprobs)
        elif isinstance(event, RefusalDelta):
            self.chunk([{"text": event.text}])  # Gemini has no refusal of its own: it is the answer
        elif isinstance(event, ReasoningDelta):
            self.chunk([{"text": event.text, "thought": True}])
        elif isinstance(event, Finish):
            self.finish = event
        elif isinstance(event, Usage):
            self.last(event)
        elif isinstance(event, Error):
            # A failure closes nothing: a call not yet whole is never sent.
            self.frames.append(_frame(_error_json(event)))

    def _end(self) -> None:
        self.last(None)

    def chunk(self, parts: list[dict[str, Any]], **fields: Any) -> None:
        self.frames.append(_frame(_response(self.start, parts, **fields)))

    def call(self, call: WholeCall) -> None:
        """A function call, whole; one whose arguments are no JSON object (cut short) is never sent:
        the API sends a call whole or not at all."""
        args = as_object(call.arguments)
        if args is None:
            return
        function: dict[str, Any] = {"name": call.name, "args": args}
        if call.id:
            function["id"] = call.id
        self.chunk([{"functionCall": function}])

    def last(self, usage: Usage | None) -> None:
        """The chunk with the finish reason, and the usage when there is one, once the finish has come."""
        finish, self.finish = self.finish, None
        if finish is not None:
            self.chunk([{"text": ""}], finish=_FINISH.get(finish.reason, "OTHER"), usage=usage)


def _decode(objects: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, Event]]:
    """The neutral events of a stream's chunks (or of one whole answer), each with the index of its chunk."""
    out: list[tuple[int, Event]] = []
    started = finished = False
    calls = 0
    usage: Any = None  # the latest counts: running on every chunk, final on the last
    for i, obj in objects:
        if isinstance(obj.get("error"), dict):
            out.append((i, _error_from(obj["error"])))
            continue
        if not started:
            created = _created(obj.get("createTime"))
            out.append((i, Start(str(obj.get("responseId", "")), str(obj.get("modelVersion", "")), created)))
            started = True
        if isinstance(obj.get("usageMetadata"), dict):
            usage = obj["usageMetadata"]
        candidate = candidate_of(obj)
        reason = "content_filter" if blocked(obj) else None
        if candidate is not None:
            content = candidate.get("content")
            parts = content.get("parts") if isinstance(content, dict) else None
            tokens = _tokens(candidate)
            for part in parts if isinstance(parts, list) else []:
                if not isinstance(part, dict):
                    continue
                function = part.get("functionCall")
                if isinstance(function, dict):
                    args = function.get("args")
                    out += [
                        (i, ToolCallStart(calls, str(function.get("id") or ""), str(function.get("name") or ""))),
                        (i, ToolCallDelta(calls, _json.dumps({} if args is None else args))),
                        (i, ToolCallEnd(calls)),
                    ]
                    calls += 1
                elif isinstance(part.get("text"), str) and part["text"]:
                    if part.get("thought") is True:
                        out.append((i, ReasoningDelta(part["text"])))
                    else:
                        out.append((i, TextDelta(part["text"], tokens)))
                        tokens = None  # a chunk's logprobs go with its first text
            word = candidate.get("finishReason")
            reason = _reason(word, calls) if isinstance(word, str) and word else None
        if reason is not None and not finished:
            finished = True
            out.append((i, Finish(reason)))
            if (counted := _usage_from(usage)) is not None:
                out.append((i, counted))
    return out


def decode_indexed(events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
    """`Gemini.decode_indexed`."""
    return _decode([(i, obj) for i, _, obj in json_objects(events)])


def response_json(events: Sequence[Event]) -> dict[str, Any]:
    """`Gemini.response_json`."""
    answer = Answer.of(events)
    parts: list[dict[str, Any]] = []
    if answer.reasoning:
        parts.append({"text": answer.reasoning, "thought": True})
    if answer.text or answer.refusal:
        parts.append({"text": answer.text + answer.refusal})
    for call in answer.client_calls():
        args = as_object(call.arguments)
        if args is not None:
            parts.append({"functionCall": {"name": call.name, "args": args, **({"id": call.id} if call.id else {})}})
    finish = _FINISH.get(answer.finish or "stop", "OTHER")
    return _response(answer.start, parts, finish=finish, usage=answer.usage, logprobs=answer.logprobs)


def decode_json(body: Any) -> list[Event]:
    """`Gemini.decode_json`."""
    if not isinstance(body, dict) or not ("candidates" in body or blocked(body)):
        return []
    return [event for _, event in _decode([(0, body)])]


def stream_answer(events: Sequence[ServerSentEvent], usage: Usage | None = None) -> dict[str, Any] | None:
    """`Gemini.stream_json`: the `GenerateContentResponse` a stream's chunks add up to, as the API answers
    `:generateContent`; None for a stream of no chunk.

    Each candidate's parts are the stream's, in order, every field kept (a
    function call's `id` and `thoughtSignature`, which Gemini 3 clients must
    send back); a run of text parts of one kind (thought or answer) is one
    part, with the signature that ends it. The candidate's other fields
    (`finishReason`, `finishMessage`, `safetyRatings`, ...) and the response's
    (`usageMetadata` with its details, `modelVersion`, `responseId`,
    `promptFeedback`) are the last chunk's that has them; `logprobsResult` is
    every chunk's, joined. `usage` is reported when no chunk has `usageMetadata`.
    """
    chunks = [obj for _, _, obj in json_objects(events) if isinstance(obj, dict) and "error" not in obj]
    if not chunks:
        return None
    candidates: dict[Any, dict[str, Any]] = {}
    parts: dict[Any, list[dict[str, Any]]] = {}
    body: dict[str, Any] = {}
    for obj in chunks:
        for key, value in obj.items():
            if key != "candidates":
                body[key] = value
        for candidate in obj.get("candidates") or []:
            if not isinstance(candidate, dict):
                continue
            index = candidate.get("index", 0)
            merged = candidates.setdefault(index, {"content": None})
            for key, value in candidate.items():
                if key == "content" and isinstance(value, dict):
                    merged["content"] = {k: v for k, v in value.items() if k != "parts"}
                    _join_parts(parts.setdefault(index, []), value.get("parts"))
                elif key == "logprobsResult" and isinstance(value, dict):
                    merged[key] = _join_logprobs(merged.get(key), value)
                else:
                    merged[key] = value
    answer: dict[str, Any] = {}
    if candidates:
        answer["candidates"] = [_whole(c, parts.get(i, [])) for i, c in candidates.items()]
    if usage is not None and "usageMetadata" not in body:
        answer["usageMetadata"] = _usage_json(usage)
    return answer | body


def _join_parts(into: list[dict[str, Any]], parts: Any) -> None:
    """Adds a chunk's parts to the parts so far: text that goes on the last text part of its kind joins it."""
    for part in parts if isinstance(parts, list) else []:
        if not isinstance(part, dict):
            continue
        last = into[-1] if into else None
        if (
            last is not None
            and _is_text(part)
            and _is_text(last)
            and bool(part.get("thought")) == bool(last.get("thought"))
            and not ("thoughtSignature" in last and "thoughtSignature" in part)
        ):
            last.update({k: v for k, v in part.items() if k != "text"})
            last["text"] = last["text"] + part["text"]
        else:
            into.append(dict(part))


def _is_text(part: dict[str, Any]) -> bool:
    """A part that carries text alone (with whether it is a thought, and maybe its signature)."""
    return isinstance(part.get("text"), str) and set(part) <= {"text", "thought", "thoughtSignature"}


def _join_logprobs(before: Any, after: dict[str, Any]) -> dict[str, Any]:
    """Two chunks' `logprobsResult`, their lists of tokens one after the other."""
    if not isinstance(before, dict):
        return dict(after)
    joined = {**before, **after}
    for key in ("topCandidates", "chosenCandidates"):
        if isinstance(before.get(key), list) and isinstance(after.get(key), list):
            joined[key] = [*before[key], *after[key]]
    return joined


def _whole(candidate: dict[str, Any], parts: list[dict[str, Any]]) -> dict[str, Any]:
    """A candidate with its joined parts, less the empty text parts a stream ends with."""
    kept = [p for p in parts if p != {"text": ""}]
    content = candidate.get("content") or {"role": "model"}
    whole_content = {"parts": kept, **content} if kept else content
    return {**candidate, "content": whole_content}
