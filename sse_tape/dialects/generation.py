"""`Generation`: what an LLM API promises beyond its `Protocol`, and the helpers its dialects share.

An LLM API's streams carry generation: text, reasoning, refusals, tool
calls, usage. Its dialect reads them as neutral events (`events`) and
writes neutral events as its server would (`encoder`), answers a request
for no stream with its JSON answer, reads a request as a neutral `Prompt`
and writes one, and says what only it knows: how it names a response's id
and a tool call's, where its requests carry their turns, how it lists its
models, and how a request reads to a person (`sse-tape show`). Synthesis,
translation, the misbehaviour faults and `show` need this contract, and
ask for it with `registry.generation`, which names a protocol that lacks it.
"""

from __future__ import annotations

import random
import string
from abc import abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .. import _json
from ..cassette import Headers, Request
from ..sse import ServerSentEvent
from .encoder import Encoder
from .events import Error, Event, Finish, Start, ToolCallDelta, ToolCallEnd, ToolCallStart, Usage
from .protocol import Protocol, Violation, to_json

__all__ = [
    "ALL_SAMPLING",
    "LOCAL_SAMPLING",
    "Continuation",
    "Generation",
    "Prompt",
    "ServerCalls",
    "as_object",
    "chat_messages",
    "made_id",
    "messages_text",
    "sampled",
    "sampling",
    "turn_of",
    "whole",
]

_ID_CHARACTERS = string.ascii_letters + string.digits


def made_id(rng: random.Random, prefix: str, length: int) -> str:
    """`prefix` and `length` letters and digits drawn from `rng`: the shape of the APIs' own ids."""
    return prefix + "".join(rng.choice(_ID_CHARACTERS) for _ in range(length))


@dataclass(slots=True)
class Prompt:
    """What a request asks for, in no API's words: enough to rewrite it for another API, or to run it on a model."""

    model: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)
    """Each with `role` and text `content`, in the chat API's words: an assistant's calls in `tool_calls`
    (`{"id", "type": "function", "function": {"name", "arguments"}}`), a tool's answer with its `tool_call_id`."""
    tools: list[dict[str, Any]] = field(default_factory=list)
    """Each with `name`, `description` and `parameters` (a JSON schema)."""
    max_tokens: int | None = None
    include_usage: bool = False
    """Whether the response reports token usage (OpenAI's stream_options.include_usage)."""
    text: str | None = None
    """A prompt given as plain text, to be continued as it is (the completions API), not a chat."""
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    """How many of the likeliest tokens to sample from (0: all), where the API takes it (Anthropic's, Gemini's,
    LM Studio's; local OpenAI-compatible servers, as llama.cpp's, take it in chat and completions requests)."""
    min_p: float | None = None
    """The least probability a token may have, relative to the likeliest one's, where the API takes it."""
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    logprobs: int | None = None
    """How many likeliest alternatives to report with each token's log probability; None: no logprobs."""
    tool_choice: str | None = None
    """`auto`, `none`, `required`, or the name of the function that must be called; None: the API's default."""


@dataclass(frozen=True, slots=True)
class Continuation:
    """A request that goes on with a conversation the server holds (see `Generation.continues`)."""

    previous: str
    """The id of the response it goes on from."""
    keeps_tools: bool
    """Whether the server keeps the tools offered before for it (an Anthropic thread, to a request that names
    none); the Responses API keeps none."""


# The neutral error types, as the OpenAI-style APIs' statuses.
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "rate_limit_error": 429,
    "overloaded_error": 503,
    "timeout_error": 504,
}


class Generation(Protocol):
    """An LLM API's contract: its `Protocol`, and how it frames generation, answers without a stream, reads
    and writes requests, and names what it makes."""

    answer: ClassVar[str]
    """What this API answers a request for no stream with, in `check`'s words (`a chat.completion object`)."""
    id_prefix: ClassVar[str] = ""
    """How the ids of this API's responses begin (`chatcmpl-`), for the ones sse-tape makes up (synthesis)."""
    turns: ClassVar[str] = "messages"
    """The field of a request body that carries the conversation (`input`, `contents`), for the error a request
    without one gets."""
    models_path: ClassVar[str | None] = None
    """The path this API lists its models at (`/v1/models`, then `/{id}` for one), if it lists them."""

    def models_list(self, request: Request) -> str | None:
        """The list path (`models_path`) that `request` asks for this API's model list, or one model in it,
        at; None when it does not. By default `models_path` when the path holds it (under any prefix)."""
        path = self.models_path
        return path if path is not None and path in request.path else None

    def models_claimed(self, request: Request) -> bool:
        """Whether `request` says, beyond its path, that it is this API's (Gemini's API key header), which
        settles a list path two APIs share (`/v1/models`); False by default."""
        return False

    def recorded_model(self, request: Request) -> str | None:
        """The model a recorded request of this API names, for the model list: its body's `model` by default."""
        body = request.json()
        model = body.get("model") if isinstance(body, dict) else None
        return model if isinstance(model, str) and model else None

    def models_json(self, names: Sequence[str]) -> dict[str, Any]:
        """The body of this API's model list, for these models (`models_path` says where it is asked for)."""
        return {"models": [self.model_json(name) for name in names]}

    def model_json(self, name: str) -> dict[str, Any]:
        """The entry of this API's model list for the model `name`, about which nothing more is known."""
        return {"id": name}

    def continues(self, body: Any) -> Continuation | None:
        """What a request body goes on with, where the server holds the conversation (the Responses API's
        `previous_response_id`, an Anthropic thread's `previous_message_id`); None by default, and for a
        request that sends its whole conversation."""
        return None

    def last_turn(self, body: Any) -> tuple[str, str] | None:
        """The last turn of a request body of this API, as its role and its text, for `sse-tape show`; None when
        the body has none. By default the last of `turns`, read by `turn_of`."""
        value = body.get(self.turns) if isinstance(body, dict) else None
        if isinstance(value, str) and value:
            return "user", value
        if isinstance(value, list) and value:
            last = value[-1]
            if isinstance(last, str):
                return "user", last
            if isinstance(last, dict):
                return turn_of(last)
        return None

    def response_headers(self, start: Start) -> Headers:
        """The headers this server sends with a stream that begins with `start`."""
        return (("content-type", "text/event-stream"), ("cache-control", "no-cache"))

    @abstractmethod
    def encoder(self, answer: Any = None) -> Encoder:
        """A streaming encoder for one new stream.

        `answer`, a recorded non-streaming answer of this API that the stream
        retells, lends it what neutral events do not carry (the Responses
        API's item ids and items whole, LM Studio's result), so that a client
        finds in the stream what the plain call would have given it.
        """

    def encode(self, events: Sequence[Event]) -> list[bytes]:
        """The SSE frames this API's server sends for `events`, terminal frames included."""
        return [frame for _, frame in self.encode_indexed(events)]

    def encode_indexed(self, events: Sequence[Event]) -> list[tuple[int, bytes]]:
        """Like `encode`, each frame with the index of the event that produced it (for timing)."""
        encoder = self.encoder()
        frames = [(i, frame) for i, event in enumerate(events) for frame in encoder.feed(event)]
        return frames + [(len(events) - 1, frame) for frame in encoder.close()]

    def decode(self, events: Iterable[ServerSentEvent]) -> list[Event]:
        """The neutral events a recorded stream of this API carries."""
        return [event for _, event in self.decode_indexed(list(events))]

    @abstractmethod
    def decode_indexed(self, events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
        """Like `decode`, each event with the index of the SSE event it came from (for timing)."""

    def error_frames(
        self, error: Error, before: Sequence[Event] = (), sent: Sequence[ServerSentEvent] = ()
    ) -> list[bytes]:
        """How this server reports `error` mid-stream, with the terminal frames that follow.

        The stream so far is `sent`, the SSE events the client already has
        (from a recording, say), or else `before`, neutral events whose
        frames were sent.
        """
        encoder = self.encoder()
        if sent:
            encoder.resume(sent)
        else:
            for event in before:
                encoder.feed(event)
        return encoder.feed(error)

    def error_status(self, type: str, code: str | None = None) -> int:
        """The HTTP status this API answers a request for no stream with, when generation fails with an error
        of this neutral `type` (an overloaded model is a 503 here, not a 500)."""
        return ERROR_STATUS.get(type, 500)

    def error_name(self, error: Error) -> str:
        """What this API's error object calls `error`, as `sse-tape show` prints it: its `type`, and its `code`
        when it has one (`rate_limit_error`; `invalid_request_error, context_length_exceeded`)."""
        return f"{error.type}, {error.code}" if error.code else error.type

    def http_error(
        self, status: int, message: str, *, type: str | None = None, code: str | None = None
    ) -> tuple[int, Headers, bytes]:
        """Status, headers and JSON body of this API's error response before any stream.

        `type` defaults to the API's word for a bad request (4xx) or a server error (5xx); a 429 is
        OpenAI's rate limit, `"type": "requests", "code": "rate_limit_exceeded"`, which clients look for.
        """
        if status == 429 and type is None:
            type, code = "requests", code or "rate_limit_exceeded"
        kind = type or ("invalid_request_error" if status < 500 else "server_error")
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        return status, (("content-type", "application/json"),), to_json(body).encode()

    def new_call_id(self, rng: random.Random) -> str:
        """A new id for a tool call that sse-tape makes up (synthesis), as this API's server makes one:
        OpenAI's `call_` and 24 letters and digits; `""` where the API's calls carry no id."""
        return made_id(rng, "call_", 24)

    def wants_stream(self, body: Any, path: str = "") -> bool:
        """Whether a request to `path` with this body asks for a stream rather than one JSON answer.

        Most APIs say so in the body (`"stream": true`); Gemini in the path (`:streamGenerateContent`).
        """
        return isinstance(body, dict) and body.get("stream") is True

    def reports_usage(self, body: Any) -> bool:
        """Whether a stream answering this request body reports token usage (always, unless the API asks)."""
        return True

    def carries_usage(self, event: ServerSentEvent) -> bool:
        """Whether `event` may report token usage: False only for one that surely does not, told without
        decoding it (a stream none of whose events may is sent without usage as it is). True by default."""
        return True

    @abstractmethod
    def response_json(self, events: Sequence[Event]) -> dict[str, Any]:
        """The body this API answers a request that asks for no stream with, for a generation of `events`.

        `events` hold no `Error`: a failed generation is an error response (`http_error`).
        """

    def stream_json(self, events: Sequence[ServerSentEvent], usage: Usage | None = None) -> dict[str, Any]:
        """The answer to a request for no stream, from this API's stream `events` (which hold no error).

        Built from the neutral events, with what the frames carry and they do
        not (item ids, raw usage, the server's own fields) kept as it was.
        `usage` is reported when the stream reports none (an OpenAI stream
        whose request did not ask for it): the API's plain answer always has it.
        """
        decoded = self.decode(events)
        if usage is not None and not any(isinstance(event, Usage) for event in decoded):
            decoded.append(usage)
        return self.response_json(decoded)

    @abstractmethod
    def decode_json(self, body: Any) -> list[Event]:
        """The neutral events a non-streaming answer of this API carries, each text whole; [] if it is none."""

    @abstractmethod
    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        """Every way `events` break this API's streaming contract; `request` enables rules that depend on it."""

    def check_json(self, body: bytes, request: Request | None = None) -> list[Violation]:
        """Every way `body`, a successful answer to a request for no stream, breaks this API's contract.

        It must be JSON and this API's answer (`check_answer`); no stream rule applies to it.
        """
        try:
            obj = _json.parse(body, max_depth=None)
        except ValueError:
            return [Violation(None, f"the answer is not JSON: {body[:40]!r}")]
        return self.check_answer(obj, request)

    def check_answer(self, obj: Any, request: Request | None = None) -> list[Violation]:
        """Every way `obj`, a parsed answer to a request for no stream, breaks this API's contract: by
        default, that it is not an answer `decode_json` reads, and what `check_calls` finds in its calls."""
        events = self.decode_json(obj)
        if not events:
            return [Violation(None, f"the answer is not {self.answer}")]
        return self.check_decoded_calls(events, request)

    def check_calls(self, events: Sequence[ServerSentEvent], request: Request | None) -> list[Violation]:
        """What no server sends in the tool calls it streams for the client to run: two calls with one id,
        a call to a tool the request did not offer, or arguments that are not JSON in an answer that was
        not cut short (by an error, a stop for length or the content filter)."""
        return self.check_decoded_calls(self.decode(events), request)

    def check_decoded_calls(self, decoded: Sequence[Event], request: Request | None) -> list[Violation]:
        """`check_calls`, on the neutral events of a stream or of an answer."""
        calls = [e for e in decoded if isinstance(e, ToolCallStart) and not e.server]
        found: list[Violation] = []
        first: dict[str, int] = {}
        for call in calls:
            if call.id and call.id in first:
                found.append(
                    Violation(None, f"tool calls {first[call.id]} and {call.index} have the same id {call.id!r}")
                )
            first.setdefault(call.id, call.index)
        offered = self.offered(request)
        found += [
            Violation(None, f"tool call {call.index} calls {call.name!r}, which the request did not offer")
            for call in calls
            if offered is not None and call.name not in offered
        ]
        cut = any(
            isinstance(e, Error) or (isinstance(e, Finish) and e.reason in ("length", "content_filter"))
            for e in decoded
        )
        for call in () if cut else calls:
            arguments = "".join(e.arguments for e in decoded if isinstance(e, ToolCallDelta) and e.index == call.index)
            try:
                _json.parse(arguments, max_depth=None)
            except ValueError:
                found.append(
                    Violation(None, f"tool call {call.index} arguments are not valid JSON: {arguments[:40]!r}")
                )
        return found

    def offered(self, request: Request | None) -> set[str] | None:
        """The names of the tools a request offered; None when no request is known."""
        body = request.json() if request is not None else None
        if not isinstance(body, dict):
            return None
        return {str(tool.get("name")) for tool in self.prompt(body).tools}

    @abstractmethod
    def prompt(self, body: Any) -> Prompt:
        """The neutral prompt of a request body of this API."""

    def request_prompt(self, body: Any, path: str) -> Prompt:
        """The neutral prompt of a request to `path` with this body: `prompt`, and what the path says
        (Gemini's names the model)."""
        return self.prompt(body)

    @abstractmethod
    def request_body(self, prompt: Prompt) -> dict[str, Any]:
        """A streaming request body of this API asking for `prompt`."""

    def request_path(self, prompt: Prompt) -> str:
        """The path a streaming request for `prompt` goes to: `path`, or for Gemini, one naming the model."""
        return self.path


def messages_text(prompt: Prompt) -> str:
    """The prompt's messages as one text, for APIs that take a single prompt string."""
    return "\n\n".join(m["content"] for m in prompt.messages if m.get("content"))


def chat_messages(messages: Any) -> list[dict[str, Any]]:
    """Role and text content of OpenAI-style chat messages (text parts of multi-part content joined),
    with an assistant's `tool_calls` and a tool message's `tool_call_id` as they were."""
    out = []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        kept: dict[str, Any] = {
            "role": str(message.get("role", "user")),
            "content": content if isinstance(content, str) else "",
        }
        if isinstance(message.get("tool_calls"), list) and message["tool_calls"]:
            kept["tool_calls"] = message["tool_calls"]
        if isinstance(message.get("tool_call_id"), str):
            kept["tool_call_id"] = message["tool_call_id"]
        out.append(kept)
    return out


ALL_SAMPLING = ("temperature", "top_p", "seed", "stop")
"""The sampling fields the OpenAI-style APIs share; LM Studio and the Responses API take the first two."""
LOCAL_SAMPLING = (*ALL_SAMPLING, "top_k", "min_p")
"""What local OpenAI-compatible servers (llama.cpp's, llama-cpp-python's, LM Studio's, vLLM) take besides."""


def sampling(body: dict[str, Any], names: tuple[str, ...] = ALL_SAMPLING) -> dict[str, Any]:
    """The sampling fields of `body` among `names` (`temperature`, `top_p`, `top_k`, `min_p`, `seed`, `stop`),
    checked.

    A field of the wrong type is left out: the model's server decides what to refuse.
    """
    out: dict[str, Any] = {}
    for name in ("temperature", "top_p", "min_p"):
        value = body.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = float(value)
    for name in ("top_k", "seed"):
        if (value := whole(body.get(name))) is not None:
            out[name] = value
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    out["stop"] = [s for s in stops if isinstance(s, str) and s]
    return {name: value for name, value in out.items() if name in names}


def sampled(prompt: Prompt, names: tuple[str, ...] = ALL_SAMPLING) -> dict[str, Any]:
    """The sampling fields among `names` of a request body for `prompt`: those it sets."""
    fields = {
        "temperature": prompt.temperature,
        "top_p": prompt.top_p,
        "top_k": prompt.top_k,
        "min_p": prompt.min_p,
        "seed": prompt.seed,
        "stop": prompt.stop,
    }
    return {name: value for name, value in fields.items() if name in names and value not in (None, [])}


def whole(value: Any) -> int | None:
    """`value` if it is a whole number (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_object(text: str) -> dict[str, Any] | None:
    """A call's arguments, JSON text, as the object the APIs that carry them so hold them (Gemini's `args`,
    Ollama's `arguments`, Bedrock's `input`): {} for none; None if they are no object (cut short)."""
    if not text.strip():
        return {}
    try:
        value = _json.parse(text, max_depth=None)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def turn_of(message: dict[str, Any]) -> tuple[str, str]:
    """A turn of a request, in any of the chat-like APIs' shapes, as its role and its text.

    Its `content` (or a tool's `output`): text, or parts whose text (or a tool's result as text, Anthropic's
    `tool_result` blocks) is joined; else the tools an assistant calls (`calls get_weather`), or the call a
    Responses API `function_call` item makes (`get_weather({...})`).
    """
    role = str(message.get("role") or message.get("type") or "?")
    content = message.get("content", message.get("output"))
    if isinstance(content, list):
        parts = [p for p in content if isinstance(p, dict)]
        content = "".join(
            str(p.get("text") or (p["content"] if isinstance(p.get("content"), str) else "")) for p in parts
        )
    if not content and message.get("tool_calls"):
        names = [str((c.get("function") or {}).get("name")) for c in message["tool_calls"] if isinstance(c, dict)]
        content = f"calls {', '.join(names)}"
    if not content and message.get("type") == "function_call":
        content = f"{message.get('name')}({message.get('arguments', '')})"
    return role, str(content or "")


class ServerCalls:
    """Tool calls the server runs itself (LM Studio's MCP tools), which the APIs whose calls are all the client's
    have no place for."""

    def __init__(self) -> None:
        self.indexes: set[int] = set()

    def skip(self, event: Event) -> bool:
        """Whether `event` belongs to such a call, and is left out."""
        if isinstance(event, ToolCallStart) and event.server:
            self.indexes.add(event.index)
        return isinstance(event, ToolCallStart | ToolCallDelta | ToolCallEnd) and event.index in self.indexes
