"""API dialects: each one API's streaming contract, spoken, checked and translated.

`DIALECTS` maps each name to its dialect: `openai-chat`, `openai-completions`,
`openai-responses`, `lmstudio-chat`, `anthropic-messages`, `gemini`. `detect` tells which one an interaction
speaks; `translate` re-encodes an interaction in another, keeping the timing
of the original events; `Answer` puts a stream's events together.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .. import _json
from .._exceptions import ConfigError
from ..cassette import Chunk, End, Interaction, Response
from ..sse import SSEDecoder
from .base import Dialect, Prompt, Violation

if TYPE_CHECKING:  # imported when first used: `Answer` is made of the neutral events, which replay never needs
    from .answer import Answer, Call

__all__ = [
    "DIALECTS",
    "Answer",
    "Call",
    "Dialect",
    "Prompt",
    "Violation",
    "check_error_response",
    "check_framing",
    "detect",
    "dialect_for",
    "for_path",
    "get",
    "lost_in_translation",
    "translate",
]

# Each dialect's module and class. A module is imported when its dialect is first asked for: a server whose
# cassettes and requests speak one API starts without the other APIs' codecs.
_CLASSES = {
    "openai-chat": ("openai_chat", "OpenAIChat"),
    "openai-completions": ("openai_completions", "OpenAICompletions"),
    "openai-responses": ("openai_responses", "OpenAIResponses"),
    "lmstudio-chat": ("lmstudio_chat", "LMStudioChat"),
    "anthropic-messages": ("anthropic_messages", "AnthropicMessages"),
    "gemini": ("gemini", "Gemini"),
}


def __getattr__(name: str) -> Any:
    if name not in ("Answer", "Call"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from . import answer

    value = getattr(answer, name)
    globals()[name] = value
    return value


class _Dialects(Mapping[str, Dialect]):
    """Each dialect by name, one instance of each, made when first asked for."""

    def __init__(self) -> None:
        self._made: dict[str, Dialect] = {}

    def __getitem__(self, name: str) -> Dialect:
        try:
            return self._made[name]
        except KeyError:
            module, cls = _CLASSES[name]  # an unknown name is a KeyError, as from a dict
        dialect = getattr(importlib.import_module(f"{__name__}.{module}"), cls)()
        return self._made.setdefault(name, dialect)  # two threads asking at once get the same one

    def __iter__(self) -> Iterator[str]:
        return iter(_CLASSES)

    def __len__(self) -> int:
        return len(_CLASSES)


DIALECTS: Mapping[str, Dialect] = _Dialects()

#: A path Gemini answers: the model after `/models/` (or `/tunedModels/`), then the method.
GEMINI_PATH = re.compile(r"/(?:models|tunedModels)/(?P<model>.+):(?P<method>streamGenerateContent|generateContent)$")

# Path endings, most specific first: /v1/chat/completions also ends with /completions.
_ENDINGS = (
    ("/chat/completions", "openai-chat"),
    ("/completions", "openai-completions"),
    ("/responses", "openai-responses"),
    ("/api/v1/chat", "lmstudio-chat"),
    ("/v1/messages", "anthropic-messages"),
)


def get(name: str) -> Dialect:
    """The dialect of this name; raises `ConfigError` naming the choices."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise ConfigError(f"unknown dialect {name!r}: choose from {', '.join(DIALECTS)}") from None


@functools.lru_cache(maxsize=1024)  # asked for every request, of the same few paths
def for_path(path: str) -> Dialect | None:
    """The dialect whose API streams from `path` (with any prefix before it), if any."""
    if GEMINI_PATH.search(path.rstrip("/")):  # …/models/{model}:streamGenerateContent: the model is in the path
        return DIALECTS["gemini"]
    return next((DIALECTS[name] for ending, name in _ENDINGS if path.rstrip("/").endswith(ending)), None)


def detect(interaction: Interaction) -> Dialect | None:
    """The dialect an interaction speaks: by its path, or else by what its first event looks like."""
    found = for_path(interaction.request.path)
    if found is not None:
        return found
    for _, sse in interaction.response.events()[:3]:
        try:
            obj = _json.parse(sse.data, max_depth=None)
        except ValueError:
            continue
        kind = obj.get("type") if isinstance(obj, dict) else None
        kind = kind if isinstance(kind, str) else ""
        if isinstance(obj, dict) and ("candidates" in obj or "promptFeedback" in obj):
            return DIALECTS["gemini"]
        if kind == "chat.start":
            return DIALECTS["lmstudio-chat"]
        if kind.startswith("response."):
            return DIALECTS["openai-responses"]
        if kind == "message_start":
            return DIALECTS["anthropic-messages"]
        marker = obj.get("object") if isinstance(obj, dict) else None
        if marker == "chat.completion.chunk":
            return DIALECTS["openai-chat"]
        if marker == "text_completion":
            return DIALECTS["openai-completions"]
    return None


def dialect_for(path: str, interaction: Interaction | None = None) -> Dialect:
    """The dialect to answer a request for `path` in: the path's, else the recording's, else openai-chat.

    Errors, faults and misses are all framed by what this returns, so a
    client meets the error shape of the API it called.
    """
    found = for_path(path) or (detect(interaction) if interaction is not None else None)
    return found or DIALECTS["openai-chat"]


def translate(interaction: Interaction, target: Dialect, source: Dialect | None = None) -> Interaction:
    """The interaction as `target`'s API would have served it.

    The response's events are decoded into neutral events and encoded again,
    each new frame at the time of the original event it came from; the
    request's path, query and body are rewritten for the target API. An
    error response before the stream becomes the target's error body.
    """
    from .events import Start

    source = source or detect(interaction)
    request, response = interaction.request, interaction.response
    if source is None:
        raise ConfigError(f"{request.method} {request.path}: cannot tell its dialect: name it with --dialect")
    prompt = source.request_prompt(request.json(), request.path)
    prefix = request.path[: -len(source.path)] if request.path.endswith(source.path) else ""
    path = prefix + target.request_path(prompt)  # a router's /proj/x/v1/chat/completions keeps its /proj/x
    body = _json.dumps(target.request_body(prompt), compact=False).encode()
    headers = tuple((k, v) for k, v in request.headers if k.lower() != "content-length")
    query = _query(request.query, source, target)
    new_request = replace(request, path=path, query=query, body=body, headers=headers)
    kept = tuple((k, v) for k, v in response.headers if k.lower() not in ("content-length", "content-type"))
    if response.status >= 400:
        _, error_headers, error_body = target.http_error(response.status, _error_message(response.body))
        t = response.chunks[0].t if response.chunks else 0.0
        chunks: tuple[Chunk, ...] = (Chunk(t, error_body),)
        return replace(
            interaction, request=new_request, response=replace(response, headers=(*kept, *error_headers), chunks=chunks)
        )
    timed = _stream_of(interaction, source).events()
    try:
        pairs = source.decode_indexed([sse for _, sse in timed])
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        raise ConfigError(
            f"{request.method} {request.path}: cannot read its stream as {source.name} ({exc!r})"
        ) from None
    times = [timed[i][0] for i, _ in pairs]
    events = [event for _, event in pairs]
    chunks = _with_heartbeats([Chunk(times[k], frame) for k, frame in target.encode_indexed(events)], target)
    start = next((e for e in events if isinstance(e, Start)), Start())
    headers = target.response_headers(start)
    names = {name.lower() for name, _ in headers}
    headers = (*headers, *((k, v) for k, v in kept if k.lower() not in names))
    return replace(interaction, request=new_request, response=replace(response, headers=headers, chunks=chunks))


def lost_in_translation(
    interaction: Interaction, translated: Interaction, target: Dialect, source: Dialect | None = None
) -> list[str]:
    """What a client of `interaction` got that a client of its translation into `target` does not, in words
    (`tool calls (get_weather)`, `reasoning`, `refusal`, `log probabilities`); [] when nothing is lost.

    `translate` leaves out what the target's API has no words for (the completions API has no tool calls,
    no other API runs LM Studio's server-side tools): this says what that was, so that a conversion need
    not lose it silently.
    """
    from .answer import Answer

    source = source or detect(interaction)
    if source is None or interaction.response.status >= 400:
        return []  # an error response becomes the target's error response: its message is kept
    before = Answer.of(source.decode(sse for _, sse in _stream_of(interaction, source).events()))
    after = Answer.of(target.decode(sse for _, sse in translated.response.events()))
    lost = []
    for server, what in ((False, "tool calls"), (True, "tool calls the server ran")):
        had = [call.name for call in before.calls if call.server is server]
        kept = [call.name for call in after.calls if call.server is server]
        if len(kept) < len(had):
            lost.append(f"{what} ({', '.join(had)})")
    if before.reasoning and not after.reasoning:
        lost.append("reasoning")
    if before.refusal and before.refusal not in after.refusal + after.text:  # an API with no refusal shows it as text
        lost.append("refusal")
    if before.logprobs and not after.logprobs:
        lost.append("log probabilities")
    return lost


def _stream_of(interaction: Interaction, source: Dialect) -> Response:
    """The interaction's response as `source` streams it: a JSON answer to a request for no stream becomes
    the stream that answers a request for one (replay gives a request for no stream the JSON back)."""
    from ..matching import is_streamed  # matching and shape import this package: here, not above
    from ..shape import as_stream

    response = interaction.response
    if is_streamed(interaction) or response.status >= 400 or response.events():  # events: a stream all the same
        return response
    try:
        streamed = as_stream(interaction, source)
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError):
        streamed = None
    if streamed is None:
        request = interaction.request
        raise ConfigError(f"{request.method} {request.path}: cannot read its JSON answer as {source.name}")
    return streamed


def _query(query: str, source: Dialect, target: Dialect) -> str:
    """The query string, without the source API's streaming parameters and with the target's (`alt=sse`)."""
    own = set(source.query.split("&")) - {""}
    kept = [p for p in query.split("&") if p and p not in own]
    return "&".join([*kept, *(p for p in target.query.split("&") if p and p not in kept)])


def _with_heartbeats(chunks: list[Chunk], dialect: Dialect) -> tuple[Chunk, ...]:
    """The chunks, with the dialect's heartbeat comment wherever the stream is silent long enough."""
    if dialect.heartbeat is None:
        return tuple(chunks)
    interval, comment = dialect.heartbeat
    out: list[Chunk] = []
    last = 0.0
    for chunk in chunks:
        while chunk.t - last > interval:
            last = round(last + interval, 6)
            out.append(Chunk(last, comment))
        out.append(chunk)
        last = chunk.t
    return tuple(out)


def check_error_response(response: Response) -> list[Violation]:
    """What is wrong with an error response before the stream: all these APIs send `{"error": {"message": ...}}`."""
    try:
        obj = _json.parse(response.body, max_depth=None)
    except ValueError:
        return [Violation(None, f"error response {response.status} body is not JSON")]
    error = obj.get("error") if isinstance(obj, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return [Violation(None, f"error response {response.status} has no error.message")]
    return []


def check_framing(response: Response) -> list[Violation]:
    """What is wrong with an event stream of no API sse-tape knows (a notification feed): its framing alone.

    Its bytes must be UTF-8, and a stream that ended complete must not end in the middle of a block.
    """
    body = response.body
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [Violation(None, f"the stream is not UTF-8 at byte {exc.start}")]
    decoder = SSEDecoder()
    sent = decoder.feed(body)
    if decoder.end() and response.end is End.COMPLETE:
        return [Violation(len(sent) + 1, "the stream ends in the middle of a block")]
    return []


def _error_message(body: bytes) -> str:
    try:
        obj = _json.parse(body, max_depth=None)
    except ValueError:
        return body.decode("utf-8", "replace")
    error = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(error, dict) and "message" in error:
        return str(error["message"])
    return str(error or obj)
