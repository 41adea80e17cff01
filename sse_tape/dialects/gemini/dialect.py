"""`Gemini`, the `gemini` dialect: its protocol and generation contracts, and the rules `check` applies."""

from __future__ import annotations

import base64
import json
import random
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qsl, unquote

from ... import _json
from ...cassette import Headers, Interaction, Request
from ...framing import JSON_ARRAY, SSE, Framing
from ...sse import ServerSentEvent
from ..encoder import Encoder
from ..events import Error, Event, Start, Usage
from ..generation import Generation, Prompt, as_object, whole
from ..protocol import Checker, Violation, json_objects, opening
from .codec import (
    ERROR_INFO,
    STATUS_HTTP,
    GeminiEncoder,
    blocked,
    candidate_of,
    decode_indexed,
    decode_json,
    response_json,
    status_and_reason,
    stream_answer,
)

__all__ = ["PATH", "Gemini"]

_STREAM = ":streamGenerateContent"

PATH = re.compile(r"/(?:models|tunedModels)/(?P<model>.+):(?P<method>streamGenerateContent|generateContent)$")
"""A path Gemini answers: the model after `/models/` (or `/tunedModels/`), then the method."""

# The API versions that name the same calls: the Gemini API's `v1`, `v1beta` and `v1alpha` (and Vertex AI's
# `v1beta1`), as the last segment before `/models/` (or before Vertex AI's `/projects/`).
_VERSION = re.compile(r"/v1(?:alpha|beta1?)?(?=$|/projects/)")
# The model list and one model in it, under a version (any prefix before it): `…/v1beta/models[/{model}]`.
_MODELS = re.compile(r"/(?P<version>v1(?:alpha|beta)?)/models(?:/[^/:]+)?$")

# The `finishReason`s of the API reference (google-genai 3.4's `FinishReason`).
_FINISH_REASONS = frozenset(
    {
        "FINISH_REASON_UNSPECIFIED", "STOP", "MAX_TOKENS", "SAFETY", "RECITATION", "LANGUAGE", "OTHER", "BLOCKLIST",
        "PROHIBITED_CONTENT", "SPII", "MALFORMED_FUNCTION_CALL", "IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_OTHER", "NO_IMAGE", "IMAGE_RECITATION", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS",
        "MISSING_THOUGHT_SIGNATURE", "MALFORMED_RESPONSE",
    }
)  # fmt: skip

_HTTP_STATUS = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 409: "ABORTED",
    429: "RESOURCE_EXHAUSTED", 499: "CANCELLED", 500: "INTERNAL", 501: "UNIMPLEMENTED", 503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}  # fmt: skip
# What a part carries; a part with none of these carries nothing.
_PART_DATA = (
    "text", "functionCall", "functionResponse", "inlineData", "fileData", "executableCode", "codeExecutionResult",
)  # fmt: skip


def _get(obj: Any, name: str) -> Any:
    """A field of a request object by its camelCase name, or its snake_case one (the SDK sends both kinds)."""
    if not isinstance(obj, dict):
        return None
    if name in obj:
        return obj[name]
    return obj.get(re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower())


class Gemini(Generation):
    """Google's Gemini API, streaming with `alt=sse`, or as one JSON array without it."""

    name = "gemini"
    answer = "a GenerateContentResponse with candidates"
    path = "/v1beta/models/{model}:streamGenerateContent"
    models_path = "/v1beta/models"  # and under v1 and v1alpha: see models_list
    query = "alt=sse"
    turns = "contents"

    def serves_path(self, path: str) -> bool:
        """A path that names the model and the method: `…/models/{model}:streamGenerateContent` (`PATH`), under
        any version. (The model list is answered by the catalog: see `models_list`.)"""
        return PATH.search(path.rstrip("/")) is not None

    def same_call_path(self, path: str) -> str:
        """`path` under version `v1` whichever of `v1`, `v1beta` and `v1alpha` it names: the SDKs call the same
        methods under each (google-genai's Python SDK under `v1` by default), so a recording made under one
        answers a request under another."""
        found = PATH.search(path)
        if found is None:
            return path
        head = path[: found.start()]
        return _VERSION.sub("/v1", head, count=1) + path[found.start() :] if "/v1" in head else path

    def models_list(self, request: Request) -> str | None:
        """`/{version}/models` when the request asks for Gemini's model list, or one model in it, under `v1`,
        `v1beta` or `v1alpha` (any prefix before it). `/v1/models` is OpenAI's too: it is Gemini's when the
        request comes with a Google API key (`models_claimed`)."""
        found = _MODELS.search(request.path.rstrip("/"))
        return f"/{found['version']}/models" if found is not None else None

    def models_claimed(self, request: Request) -> bool:
        """Whether the request comes with a Google API key (`x-goog-api-key`, or `key=` in the query), as
        Gemini's clients send it and no other API's do."""
        return request.header("x-goog-api-key") is not None or any(
            name == "key" for name, _ in parse_qsl(request.query, keep_blank_values=True)
        )

    def recorded_model(self, request: Request) -> str | None:
        """The model a Gemini call names in its path (`…/models/{model}:generateContent`)."""
        found = PATH.search(request.path.rstrip("/"))
        return unquote(found["model"]) if found is not None else None

    def model_json(self, name: str) -> dict[str, Any]:
        """A `Model` of the API's list: its resource name (`models/gemini-2.5-flash`), its display name, and
        the methods its recordings answer."""
        return {
            "name": name if name.startswith(("models/", "tunedModels/")) else f"models/{name}",
            "version": "001",
            "displayName": name,
            "description": f"{name}, as sse-tape's recordings answer it",
            "supportedGenerationMethods": ["generateContent", "streamGenerateContent"],
        }

    def recognises(self, interaction: Interaction) -> bool:
        return any(
            isinstance(obj, dict) and ("candidates" in obj or "promptFeedback" in obj)
            for _, obj in opening(interaction)
        )

    def last_turn(self, body: Any) -> tuple[str, str] | None:
        """The last of the request's `contents`: its text parts, else a function's response, else the calls it
        made."""
        contents = _get(body, "contents")
        if not isinstance(contents, list) or not contents or not isinstance(contents[-1], dict):
            return None
        content = contents[-1]
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        text = "".join(str(p["text"]) for p in parts if isinstance(p.get("text"), str) and not p.get("thought"))
        if not text:
            answers = [p["functionResponse"] for p in parts if isinstance(p.get("functionResponse"), dict)]
            text = " ".join(_json.dumps(a.get("response"), compact=False) for a in answers)
        if not text:
            calls = [p["functionCall"] for p in parts if isinstance(p.get("functionCall"), dict)]
            text = f"calls {', '.join(str(c.get('name')) for c in calls)}" if calls else ""
        return str(content.get("role") or "user"), text

    def is_terminal(self, event: ServerSentEvent) -> bool:
        objects = [obj for _, _, obj in json_objects([event])]
        if not objects:
            return False
        candidate = candidate_of(objects[0])
        return "error" in objects[0] or blocked(objects[0]) or bool(candidate and candidate.get("finishReason"))

    def response_headers(self, start: Start) -> Headers:
        return (
            ("content-type", "text/event-stream"),
            ("content-disposition", "attachment"),
            ("vary", "Origin, X-Origin, Referer"),
        )

    def new_call_id(self, rng: random.Random) -> str:
        # `functionCall.id` is optional and the API leaves it out: its client answers a call by name.
        return ""

    def encoder(self, answer: Any = None) -> Encoder:
        return GeminiEncoder(self)  # the events carry all a chunk does, but thought signatures

    def decode_indexed(self, events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
        return decode_indexed(events)

    def wants_stream(self, body: Any, path: str = "") -> bool:
        return path.rstrip("/").endswith(_STREAM)

    def stream_framing(self, request: Request) -> Framing:
        """Server-Sent Events when the query asks for them (`alt=sse`, as every SDK does); else the API's
        default, one JSON array of the same chunks, written chunk by chunk."""
        alt = [value for name, value in parse_qsl(request.query, keep_blank_values=True) if name == "alt"]
        return SSE if alt[-1:] == ["sse"] else JSON_ARRAY

    def shapeless_path(self, path: str) -> str:
        return path.removesuffix(_STREAM) + ":generateContent" if path.endswith(_STREAM) else path

    def error_status(self, type: str, code: str | None = None) -> int:
        """The status of the google.rpc.Code `code` names, else of the type's (`overloaded_error`: 503)."""
        return STATUS_HTTP[status_and_reason(type, code)[0]]

    def error_name(self, error: Error) -> str:
        """Google's `status` (`UNAVAILABLE`), and the ErrorInfo `reason` when there is one (`API_KEY_INVALID`),
        as the stream sends them."""
        status, reason = status_and_reason(error.type, error.code)
        return f"{status}, {reason}" if reason else status

    def http_error(
        self, status: int, message: str, *, type: str | None = None, code: str | None = None
    ) -> tuple[int, Headers, bytes]:
        """Google's error, pretty-printed as the API sends it; `code` is an ErrorInfo reason (`no_match`)."""
        inner: dict[str, Any] = {"code": status, "message": message, "status": _HTTP_STATUS.get(status, "UNKNOWN")}
        if code:
            inner["details"] = [{"@type": ERROR_INFO, "reason": code, "domain": "sse-tape"}]
        try:
            body = (json.dumps({"error": inner}, indent=2, ensure_ascii=False) + "\n").encode()
        except UnicodeEncodeError:  # a lone surrogate: escaped, as valid JSON can carry it
            body = (json.dumps({"error": inner}, indent=2) + "\n").encode()
        return status, (("content-type", "application/json; charset=UTF-8"),), body

    def response_json(self, events: Sequence[Event]) -> dict[str, Any]:
        return response_json(events)

    def stream_json(self, events: Sequence[ServerSentEvent], usage: Usage | None = None) -> dict[str, Any]:
        return stream_answer(events, usage) or super().stream_json(events, usage)

    def decode_json(self, body: Any) -> list[Event]:
        return decode_json(body)

    def check_answer(self, obj: Any, request: Request | None = None) -> list[Violation]:
        if isinstance(obj, list):  # :streamGenerateContent without alt=sse: the stream's chunks, as one JSON array
            return self.check([ServerSentEvent(data=_json.dumps(chunk)) for chunk in obj], request)
        return super().check_answer(obj, request)

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        c = Checker()
        same: dict[str, Any] = {}  # responseId and modelVersion, as first sent
        counts: dict[str, int] = {}  # the running usage counts
        finished_at: int | None = None
        error_at: int | None = None
        for i, sse in enumerate(events):
            if sse.event != "message":
                c.add(i, f"unexpected event type {sse.event!r}")  # the SDK reads its data all the same
            obj = c.json(i, sse)
            if obj is None:
                continue
            if not isinstance(obj, dict):
                c.add(i, "chunk is not a JSON object")
                continue
            if error_at is not None:
                c.add(i, "chunk after the error")
                continue
            if "error" in obj:
                error_at = i
                _check_error(c, i, obj["error"])
                continue
            if finished_at is not None:
                c.add(i, "chunk after the finishReason chunk")
            for key in ("responseId", "modelVersion"):
                if key in obj and same.setdefault(key, obj[key]) != obj[key]:
                    c.add(i, f"{key} changes from {same[key]!r} to {obj[key]!r}")
            _check_usage(c, i, obj.get("usageMetadata"), counts)
            if blocked(obj):
                finished_at = i
                continue
            candidates = obj.get("candidates")
            if not isinstance(candidates, list) or not candidates:
                c.add(i, "chunk has no candidates")
                continue
            for candidate in candidates:
                reason = _checkcandidate_of(c, i, candidate)
                if reason is None:
                    continue
                if finished_at is not None and finished_at != i:
                    c.add(i, "finishReason repeated")
                finished_at = i
        if finished_at is None and error_at is None:
            c.add(None, "no chunk with a finishReason")
        return c.violations + self.check_calls(events, request)

    def prompt(self, body: Any) -> Prompt:
        body = body if isinstance(body, dict) else {}
        messages: list[dict[str, Any]] = []
        system = _text(_get(body, "systemInstruction"))
        if system:
            messages.append({"role": "system", "content": system})
        messages += _messages(_get(body, "contents"))
        config = _get(body, "generationConfig")
        config = config if isinstance(config, dict) else {}
        logprobs = None
        if _get(config, "responseLogprobs") is True:
            logprobs = whole(_get(config, "logprobs")) or 0
        stop = _get(config, "stopSequences")
        return Prompt(
            model="",  # in the path: see request_prompt
            messages=messages,
            tools=_tools(_get(body, "tools")),
            max_tokens=whole(_get(config, "maxOutputTokens")),
            include_usage=True,
            temperature=_number(_get(config, "temperature")),
            top_p=_number(_get(config, "topP")),
            top_k=whole(_get(config, "topK")),
            seed=whole(_get(config, "seed")),
            stop=[s for s in stop if isinstance(s, str) and s] if isinstance(stop, list) else [],
            logprobs=logprobs,
            tool_choice=_tool_choice(_get(_get(body, "toolConfig"), "functionCallingConfig")),
        )

    def request_prompt(self, body: Any, path: str) -> Prompt:
        found = PATH.search(path.rstrip("/"))
        return replace(self.prompt(body), model=found["model"] if found else "")

    def request_body(self, prompt: Prompt) -> dict[str, Any]:
        system = [m["content"] for m in prompt.messages if m["role"] == "system" and m["content"]]
        body: dict[str, Any] = {"contents": _contents([m for m in prompt.messages if m["role"] != "system"])}
        if system:
            body["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
        if prompt.tools:
            declarations = [
                {
                    "name": tool.get("name", ""),
                    **({"description": tool["description"]} if tool.get("description") else {}),
                    **({"parametersJsonSchema": tool["parameters"]} if "parameters" in tool else {}),
                }
                for tool in prompt.tools
            ]
            body["tools"] = [{"functionDeclarations": declarations}]
        choice = prompt.tool_choice
        if choice is not None:
            mode = {"auto": "AUTO", "none": "NONE", "required": "ANY"}.get(choice, "ANY")
            calling: dict[str, Any] = {"mode": mode}
            if choice not in ("auto", "none", "required"):
                calling["allowedFunctionNames"] = [choice]
            body["toolConfig"] = {"functionCallingConfig": calling}
        config: dict[str, Any] = {}
        for name, value in (
            ("temperature", prompt.temperature),
            ("topP", prompt.top_p),
            ("topK", prompt.top_k),
            ("seed", prompt.seed),
            ("maxOutputTokens", prompt.max_tokens),
            ("stopSequences", prompt.stop or None),
        ):
            if value is not None:
                config[name] = value
        if prompt.logprobs is not None:
            config["responseLogprobs"] = True
            if prompt.logprobs:
                config["logprobs"] = prompt.logprobs
        if config:
            body["generationConfig"] = config
        return body

    def request_path(self, prompt: Prompt) -> str:
        return f"/v1beta/models/{prompt.model or 'gemini'}{_STREAM}"


def _check_error(c: Checker, i: int, error: Any) -> None:
    error = error if isinstance(error, dict) else {}
    missing = [
        f"error.{name}"
        for name, ok in (
            ("code", whole(error.get("code")) is not None),
            ("message", isinstance(error.get("message"), str)),
            ("status", isinstance(error.get("status"), str)),
        )
        if not ok
    ]
    if missing:
        c.add(i, f"error chunk without {', '.join(missing)}")
    elif error["status"] not in STATUS_HTTP:
        c.add(i, f"error.status {error['status']!r} is not a google.rpc.Code")


def _check_usage(c: Checker, i: int, usage: Any, counts: dict[str, int]) -> None:
    if usage is None:
        return
    if not isinstance(usage, dict):
        c.add(i, "usageMetadata is not an object")
        return
    names = ("promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount", "toolUsePromptTokenCount")
    total = whole(usage.get("totalTokenCount"))
    added = sum(whole(usage.get(name)) or 0 for name in names)
    if total is not None and total != added:
        c.add(i, f"usageMetadata.totalTokenCount is {total}, not the sum of its counts ({added})")
    for name in names[1:3]:
        count = whole(usage.get(name))
        if count is None:
            continue
        if count < counts.get(name, 0):
            c.add(i, f"usageMetadata.{name} goes down from {counts[name]} to {count}")
        counts[name] = count


def _checkcandidate_of(c: Checker, i: int, candidate: Any) -> str | None:
    """Notes what is wrong with one candidate; returns its finish reason, if it has one."""
    if not isinstance(candidate, dict):
        c.add(i, "candidate is not an object")
        return None
    content = candidate.get("content")
    if content is not None:
        parts = content.get("parts", []) if isinstance(content, dict) else None
        if not isinstance(content, dict) or content.get("role") != "model":
            role = content.get("role") if isinstance(content, dict) else None
            c.add(i, f"content role is {role!r}, not 'model'")
        if not isinstance(parts, list):
            c.add(i, "content.parts is not a list")
            parts = []
        for n, part in enumerate(parts):
            _check_part(c, i, n, part)
    reason = candidate.get("finishReason")
    if reason is None:
        return None
    if reason not in _FINISH_REASONS:
        c.add(i, f"unknown finishReason {reason!r}")
    return str(reason)


def _check_part(c: Checker, i: int, n: int, part: Any) -> None:
    if isinstance(part, dict) and part.get("thought") is True and not isinstance(part.get("text"), str):
        c.add(i, f"part {n} is a thought without text")
        return
    if not isinstance(part, dict) or not any(key in part for key in _PART_DATA):
        c.add(i, f"part {n} carries nothing ({', '.join(_PART_DATA[:2])}, ...)")
        return
    signature = part.get("thoughtSignature")
    if signature is not None and not _base64(signature):
        c.add(i, f"part {n} thoughtSignature is not base64")  # the SDK refuses the chunk
    function = part.get("functionCall")
    if function is None:
        return
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        c.add(i, f"part {n}: functionCall without a name")
    elif function.get("args") is not None and not isinstance(function["args"], dict):
        c.add(i, f"part {n}: functionCall {name} args is not an object")


def _base64(value: Any) -> bool:
    try:
        base64.b64decode(value, validate=True)
    except (TypeError, ValueError):
        return False
    return isinstance(value, str)


# --- requests ---------------------------------------------------------------------------------------


def _text(content: Any) -> str:
    """The text of a Content (`{"parts": [{"text": ...}]}`), thoughts left out; a string as it is."""
    if isinstance(content, str):
        return content
    parts = _get(content, "parts")
    parts = parts if isinstance(parts, list) else []
    return "".join(
        p["text"]
        for p in parts
        if isinstance(p, dict) and isinstance(p.get("text"), str) and p.get("thought") is not True
    )


def _messages(contents: Any) -> list[dict[str, Any]]:
    """Gemini's contents as chat messages: a model's function calls as its `tool_calls`, each function
    response as a tool message answering the call of that id (or, with none, the last call of that name)."""
    contents = [contents] if isinstance(contents, dict) else contents if isinstance(contents, list) else []
    messages: list[dict[str, Any]] = []
    called: dict[str, str] = {}  # function name -> the id of its last call
    count = 0
    for content in contents:
        if isinstance(content, str):
            messages.append({"role": "user", "content": content})
            continue
        parts = _get(content, "parts")
        parts = [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []
        text = _text(content)
        if _get(content, "role") == "model":
            message: dict[str, Any] = {"role": "assistant", "content": text}
            calls = []
            for part in parts:
                function = _get(part, "functionCall")
                if not isinstance(function, dict):
                    continue
                name = str(function.get("name", ""))
                call_id = called[name] = str(function.get("id") or f"call_{count}")
                count += 1
                arguments = _json.dumps(function.get("args") or {})
                calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
            continue
        answers = [_get(p, "functionResponse") for p in parts if isinstance(_get(p, "functionResponse"), dict)]
        for answer in answers:
            name = str(answer.get("name", ""))
            result = answer.get("response")
            messages.append(
                {
                    "role": "tool",
                    "content": _json.dumps({} if result is None else result),
                    "tool_call_id": str(answer.get("id") or called.get(name, "")),
                }
            )
        if text or not answers:
            messages.append({"role": "user", "content": text})
    return messages


def _contents(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages as Gemini's contents (see `_messages`); a run of tool messages is one user turn."""
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # call id -> function name
    for message in messages:
        content = message.get("content") or ""
        if message["role"] == "tool":
            call_id = str(message.get("tool_call_id") or "")
            result = as_object(content)
            answer: dict[str, Any] = {
                "name": names.get(call_id, ""),
                "response": {"result": content} if result is None else result,
            }
            if call_id:
                answer["id"] = call_id
            last = contents[-1] if contents else None
            if last is not None and last["role"] == "user" and all("functionResponse" in p for p in last["parts"]):
                last["parts"].append({"functionResponse": answer})
            else:
                contents.append({"role": "user", "parts": [{"functionResponse": answer}]})
        elif message["role"] == "assistant":
            parts: list[dict[str, Any]] = [{"text": content}] if content else []
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                call_id, name = str(call.get("id") or ""), str(function.get("name") or "")
                names[call_id] = name
                fields = {"name": name, "args": as_object(str(function.get("arguments") or "")) or {}}
                parts.append({"functionCall": {**fields, **({"id": call_id} if call_id else {})}})
            contents.append({"role": "model", "parts": parts or [{"text": ""}]})
        else:
            contents.append({"role": "user", "parts": [{"text": content}]})
    return contents


def _tools(tools: Any) -> list[dict[str, Any]]:
    """The function declarations of Gemini's tools: name, description and a JSON schema of the parameters."""
    out = []
    for tool in tools if isinstance(tools, list) else []:
        declarations = _get(tool, "functionDeclarations")
        for declaration in declarations if isinstance(declarations, list) else []:
            if not isinstance(declaration, dict):
                continue
            kept: dict[str, Any] = {"name": str(declaration.get("name", ""))}
            if isinstance(declaration.get("description"), str):
                kept["description"] = declaration["description"]
            schema = _get(declaration, "parametersJsonSchema")
            if schema is None and _get(declaration, "parameters") is not None:
                schema = _lower_types(_get(declaration, "parameters"))  # the OpenAPI subset writes OBJECT, STRING
            if schema is not None:
                kept["parameters"] = schema
            out.append(kept)
    return out


def _lower_types(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: v.lower() if k == "type" and isinstance(v, str) else _lower_types(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_lower_types(v) for v in schema]
    return schema


def _tool_choice(calling: Any) -> str | None:
    mode = str(_get(calling, "mode") or "").upper()
    allowed = _get(calling, "allowedFunctionNames")
    if mode == "ANY" and isinstance(allowed, list) and len(allowed) == 1 and isinstance(allowed[0], str):
        return allowed[0]
    return {"AUTO": "auto", "NONE": "none", "ANY": "required"}.get(mode)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
