"""`OllamaChat` and `OllamaGenerate`, the `ollama-chat` and `ollama-generate` dialects: their protocol and
generation contracts, and the rules `check` applies."""

from __future__ import annotations

import hashlib
import random
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from ... import _json
from ...cassette import Headers, Request
from ...framing import NDJSON, Framing
from ...sse import ServerSentEvent
from ..encoder import Encoder
from ..events import Error, Event, Start
from ..generation import Generation, Prompt, as_object, chat_messages, messages_text, sampled, sampling, whole
from ..protocol import Checker, Violation, json_objects, to_json
from .codec import CHAT, GENERATE, STATS, OllamaEncoder, Shape, decode_indexed, decode_json, response_json

__all__ = ["OllamaChat", "OllamaGenerate"]

_DONE_REASONS = ("stop", "length", "load", "unload")
"""The `done_reason`s Ollama's server writes (`load` and `unload`: a request that only loads or unloads a model)."""

# The sampling fields of Ollama's `options` that a neutral prompt carries, beside `num_predict` (max_tokens).
_OPTIONS = ("temperature", "top_p", "top_k", "min_p", "seed", "stop")


class _Ollama(Generation):
    """What Ollama's two native APIs share: NDJSON lines, `stream` true unless it is false, `{"error": ...}`."""

    shape: ClassVar[Shape]
    answer = "an Ollama answer with done: true"

    def response_headers(self, start: Start) -> Headers:
        return (("content-type", NDJSON.content_type),)

    def stream_framing(self, request: Request) -> Framing:
        """Newline-delimited JSON, whatever the request: Ollama streams nothing else."""
        return NDJSON

    def speaks(self, request: Request) -> bool:
        """A request to its path that is Ollama's: a body naming its `model`, whose messages (if any) have no
        `parts`. An AI SDK app's chat route is `/api/chat` too, by convention: `useChat` posts `messages` with
        `parts`, an `id` and a `trigger`, and no model, and its stream is the UI message stream, not Ollama's."""
        if not self.serves_path(request.path):
            return False
        body = request.json()
        if not isinstance(body, dict) or "trigger" in body:
            return False
        messages = body.get("messages")
        ui = isinstance(messages, list) and any(isinstance(m, dict) and "parts" in m for m in messages)
        return isinstance(body.get("model"), str) and not ui

    def wants_stream(self, body: Any, path: str = "") -> bool:
        """A stream unless the body says `"stream": false`: Ollama streams by default."""
        return isinstance(body, dict) and body.get("stream") is not False

    def new_call_id(self, rng: random.Random) -> str:
        return ""  # Ollama's calls carry no id: its client answers one by the tool's name

    def is_terminal(self, event: ServerSentEvent) -> bool:
        objects = [obj for _, _, obj in json_objects([event])]
        return bool(objects) and ("error" in objects[0] or objects[0].get("done") is True)

    def http_error(
        self, status: int, message: str, *, type: str | None = None, code: str | None = None
    ) -> tuple[int, Headers, bytes]:
        """Ollama's error: `{"error": "..."}`, whatever the status (its server has no types or codes)."""
        return status, (("content-type", "application/json; charset=utf-8"),), to_json({"error": message}).encode()

    def error_name(self, error: Error) -> str:
        return "error"  # Ollama's error line is a message and nothing more

    def encoder(self, answer: Any = None) -> Encoder:
        return OllamaEncoder(self, self.shape)

    def decode_indexed(self, events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
        return decode_indexed(events, self.shape)

    def response_json(self, events: Sequence[Event]) -> dict[str, Any]:
        return response_json(events, self.shape)

    def decode_json(self, body: Any) -> list[Event]:
        return decode_json(body, self.shape)

    def check_answer(self, obj: Any, request: Request | None = None) -> list[Violation]:
        """An answer for no stream is one line, the last: the stream's rules hold for it."""
        if not isinstance(obj, dict):
            return [Violation(None, f"the answer is not {self.answer}")]
        return self.check([ServerSentEvent(data=_json.dumps(obj))], request)

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        c = Checker()
        done_at: int | None = None
        error_at: int | None = None
        model: str | None = None
        for i, sse in enumerate(events):
            obj = c.json(i, sse)
            if obj is None:
                continue
            if not isinstance(obj, dict):
                c.add(i, "line is not a JSON object")
                continue
            if error_at is not None or done_at is not None:
                c.add(i, f"line after the {'error' if error_at is not None else 'done'} line")
                continue
            if "error" in obj:
                error_at = i
                if not isinstance(obj["error"], str) or not obj["error"]:
                    c.add(i, "error is not a message (a string)")
                continue
            for key in ("model", "created_at"):
                if not isinstance(obj.get(key), str):
                    c.add(i, f"line without {key}")
            if model is None and isinstance(obj.get("model"), str):
                model = obj["model"]
            elif isinstance(obj.get("model"), str) and obj["model"] != model:
                c.add(i, f"model changes from {model!r} to {obj['model']!r}")
            if not isinstance(obj.get("done"), bool):
                c.add(i, "line without done (true or false)")
            self._check_said(c, i, obj)
            if obj.get("done") is True:
                done_at = i
                _check_done(c, i, obj)
        if done_at is None and error_at is None:
            c.add(None, "no line with done: true")
        return c.violations + self.check_calls(events, request)

    @abstractmethod
    def _check_said(self, c: Checker, i: int, obj: dict[str, Any]) -> None:
        """Notes what is wrong with what a line says: its text, thinking and calls."""

    def models_json(self, names: Sequence[str]) -> dict[str, Any]:
        """`GET /api/tags`: `{"models": [...]}`."""
        return {"models": [self.model_json(name) for name in names]}

    def model_json(self, name: str) -> dict[str, Any]:
        """A model of `/api/tags`, as Ollama lists one it has pulled (sse-tape knows no size or digest of it: the
        digest is its name's, so that it is the same every time)."""
        return {
            "name": name,
            "model": name,
            "modified_at": "2025-01-01T00:00:00Z",
            "size": 0,
            "digest": hashlib.sha256(name.encode()).hexdigest(),
            "details": {"parent_model": "", "format": "gguf", "family": "", "families": None},
        }


def _check_done(c: Checker, i: int, obj: dict[str, Any]) -> None:
    reason = obj.get("done_reason")
    if reason not in _DONE_REASONS:
        c.add(i, f"done_reason {reason!r} is not one of {', '.join(_DONE_REASONS)}")
    for name in STATS:
        if name in obj and (whole(obj[name]) is None or obj[name] < 0):
            c.add(i, f"{name} is {obj[name]!r}, not a count (a whole number, at least 0)")
    missing = [name for name in ("total_duration", "eval_count", "eval_duration") if name not in obj]
    if missing and reason in ("stop", "length"):
        c.add(i, f"done line without {', '.join(missing)}")


def _options(body: dict[str, Any]) -> dict[str, Any]:
    options = body.get("options")
    return options if isinstance(options, dict) else {}


def _request_options(prompt: Prompt) -> dict[str, Any]:
    options = sampled(prompt, _OPTIONS)
    if prompt.max_tokens is not None:
        options["num_predict"] = prompt.max_tokens
    return options


def _logprobs(body: dict[str, Any]) -> int | None:
    return (whole(body.get("top_logprobs")) or 0) if body.get("logprobs") is True else None


def _with_logprobs(body: dict[str, Any], prompt: Prompt) -> dict[str, Any]:
    if prompt.logprobs is not None:
        body["logprobs"] = True
        if prompt.logprobs:
            body["top_logprobs"] = prompt.logprobs
    return body


class OllamaChat(_Ollama):
    """Ollama's native chat API, `POST /api/chat`."""

    name = "ollama-chat"
    path = "/api/chat"
    models_path = "/api/tags"
    shape = CHAT

    def _check_said(self, c: Checker, i: int, obj: dict[str, Any]) -> None:
        message = obj.get("message")
        if not isinstance(message, dict):
            c.add(i, "line without a message")
            return
        if message.get("role") != "assistant":
            c.add(i, f"message role is {message.get('role')!r}, not 'assistant'")
        for key in ("content", "thinking"):
            if key in message and not isinstance(message[key], str):
                c.add(i, f"message.{key} is not a string")
        calls = message.get("tool_calls")
        if calls is None:
            return
        if not isinstance(calls, list):
            c.add(i, "message.tool_calls is not a list")
            return
        for n, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if not isinstance(name, str) or not name:
                c.add(i, f"tool call {n} has no function.name")
            elif not isinstance(function.get("arguments"), dict):  # type: ignore[union-attr]
                c.add(i, f"tool call {n} ({name}) arguments are not an object")

    def prompt(self, body: Any) -> Prompt:
        body = body if isinstance(body, dict) else {}
        tools = [t["function"] for t in body.get("tools") or [] if isinstance(t, dict) and "function" in t]
        options = _options(body)
        return Prompt(
            model=str(body.get("model", "")),
            messages=_messages(body.get("messages")),
            tools=[t for t in tools if isinstance(t, dict)],
            max_tokens=_max_tokens(options),
            include_usage=True,
            logprobs=_logprobs(body),
            **sampling(options, _OPTIONS),
        )

    def request_body(self, prompt: Prompt) -> dict[str, Any]:
        body: dict[str, Any] = {"model": prompt.model, "messages": _ollama_messages(prompt.messages), "stream": True}
        if prompt.tools:
            body["tools"] = [{"type": "function", "function": tool} for tool in prompt.tools]
        if options := _request_options(prompt):
            body["options"] = options
        return _with_logprobs(body, prompt)


class OllamaGenerate(_Ollama):
    """Ollama's native completion API, `POST /api/generate`: a prompt (and a system prompt), no tools."""

    name = "ollama-generate"
    path = "/api/generate"
    turns = "prompt"
    shape = GENERATE

    def _check_said(self, c: Checker, i: int, obj: dict[str, Any]) -> None:
        if not isinstance(obj.get("response"), str):
            c.add(i, "line without a response (a string)")
        if "thinking" in obj and not isinstance(obj["thinking"], str):
            c.add(i, "thinking is not a string")
        if obj.get("done") is True and "context" in obj:
            context = obj["context"]
            if not isinstance(context, list) or any(whole(t) is None for t in context):
                c.add(i, "context is not a list of token ids")

    def prompt(self, body: Any) -> Prompt:
        body = body if isinstance(body, dict) else {}
        options = _options(body)
        text = body.get("prompt")
        text = text if isinstance(text, str) else ""
        system = body.get("system")
        raw = body.get("raw") is True
        messages = [] if raw else [{"role": "system", "content": system}] if isinstance(system, str) and system else []
        return Prompt(
            model=str(body.get("model", "")),
            messages=[*messages, {"role": "user", "content": text}] if not raw else [],
            text=text if raw else None,
            max_tokens=_max_tokens(options),
            include_usage=True,
            logprobs=_logprobs(body),
            **sampling(options, _OPTIONS),
        )

    def request_body(self, prompt: Prompt) -> dict[str, Any]:
        body: dict[str, Any] = {"model": prompt.model}
        if prompt.text is not None:
            body |= {"prompt": prompt.text, "raw": True}
        else:
            system = [m for m in prompt.messages if m["role"] == "system"]
            if system:
                body["system"] = "\n\n".join(m["content"] for m in system if m["content"])
            turns = [m for m in prompt.messages if m["role"] != "system"]
            body["prompt"] = messages_text(Prompt(messages=turns))
        body["stream"] = True
        if options := _request_options(prompt):
            body["options"] = options
        return _with_logprobs(body, prompt)


def _max_tokens(options: dict[str, Any]) -> int | None:
    limit = whole(options.get("num_predict"))
    return limit if limit is not None and limit >= 0 else None  # -1: no limit


def _messages(messages: Any) -> list[dict[str, Any]]:
    """Ollama's chat messages as the chat API's: an assistant's calls (arguments an object) as `tool_calls` with
    made ids (`call_0`, ...), each tool message answering the last call of its `tool_name` (else the last call)."""
    given = [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
    out = chat_messages(given)
    called: dict[str, str] = {}
    last = ""
    count = 0
    for kept, message in zip(out, given, strict=True):
        calls = kept.get("tool_calls")
        if kept["role"] == "assistant" and isinstance(calls, list):
            made = []
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict):
                    continue
                name = str(function.get("name") or "")
                arguments = function.get("arguments")
                text = arguments if isinstance(arguments, str) else _json.dumps({} if arguments is None else arguments)
                call_id = called[name] = last = str(call.get("id") or f"call_{count}")
                count += 1
                made.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": text}})
            kept["tool_calls"] = made
        elif kept["role"] == "tool" and "tool_call_id" not in kept:
            tool = message.get("tool_name") or message.get("name")
            kept["tool_call_id"] = called.get(tool, last) if isinstance(tool, str) else last
    return out


def _ollama_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat API's messages as Ollama's: a call's arguments as an object, a tool's answer naming its tool."""
    names: dict[str, str] = {}
    out = []
    for message in messages:
        kept: dict[str, Any] = {"role": message["role"], "content": message.get("content") or ""}
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                function = call.get("function") or {}
                name = str(function.get("name") or "")
                names[str(call.get("id") or "")] = name
                arguments = as_object(str(function.get("arguments") or "")) or {}
                calls.append({"function": {"name": name, "arguments": arguments}})
            kept["tool_calls"] = calls
        if message["role"] == "tool" and (tool := names.get(str(message.get("tool_call_id") or ""))):
            kept["tool_name"] = tool
        out.append(kept)
    return out
