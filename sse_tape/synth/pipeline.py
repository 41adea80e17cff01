"""One request answered by the model: its tokens become neutral events, framed by its dialect as they come.

A `Synthesis` reads a request body of a dialect (`Dialect.prompt`), builds
the prompt (the model's chat template, or a completions prompt as given),
chooses how to sample (the request's fields first, then `Settings`),
constrains a forced tool call to the tool's JSON schema, and submits the
job to the engine. On the engine's thread each token goes through the
`Splitter` into events, each event through the dialect's streaming encoder
into frames, and each frame to `sink` with its time since `started`: a
stream is on its way to the client, or into a cassette, as the model
writes it. A request that asks for no stream gets the dialect's JSON
answer, built from the same events, when generation ends.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from .. import _json
from .._exceptions import ModelError
from ..cassette import Headers
from ..dialects import Generation as Dialect
from ..dialects import Prompt
from ..dialects.events import (
    Error,
    Event,
    Finish,
    ModelLoadEnd,
    ModelLoadProgress,
    ModelLoadStart,
    PromptEnd,
    PromptProgress,
    PromptStart,
    Start,
    Usage,
)
from ..framing import SSE, Framing
from ..sse import SSEDecoder
from .engine import Engine, Job, Sampling
from .generation import DEFAULT_CALL, DEFAULT_THINK, Splitter, Token

__all__ = ["Load", "Settings", "Stats", "Synthesis"]

Sink = Callable[[float, bytes], None]
"""Gets each piece of the answer's body with its time, in seconds since the request came."""


@dataclass(frozen=True, slots=True)
class Settings:
    """How requests are sampled when they do not say (llama.cpp's usual chain, as `Sampling` says), and how the
    model's output is read."""

    temperature: float = 1.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    """Stop sequences besides those a request gives."""
    think: tuple[str, str] | None = DEFAULT_THINK
    """The markers around reasoning; None: the output has no reasoning."""
    calls: tuple[str, str] | None = DEFAULT_CALL
    """The markers around a tool call the model writes of its own accord."""


@dataclass(frozen=True, slots=True)
class Load:
    """How the model loaded: its progress (seconds after the load began, fraction), and how long it took.

    The first synthesized answer tells it (LM Studio's `model_load.*`
    events), as a server that loads the model for a request does.
    """

    progress: tuple[tuple[float, float], ...]
    seconds: float


@dataclass(slots=True)
class Stats:
    """What one answer took: its wait for the model, its tokens and their speed."""

    waited: float = 0.0
    prompt_tokens: int = 0
    output_tokens: int = 0
    first_token: float | None = None
    """Seconds from the request to the first output token."""
    tokens_per_second: float | None = None
    end: str = ""
    """`stop`, `length`, `cancelled` or `error`."""
    finish: str = ""
    """The finish reason sent."""
    error: str = ""


class Synthesis:
    """One request run on the model, its answer framed as `dialect`'s server frames it.

    Raises `ModelError` (status 400) for a request the model cannot take: a
    prompt longer than the context, a tool choice naming no tool. `path` is
    the request's, where an API says what the body does not (Gemini's model,
    and whether it streams); a stream goes out in `framing`, the one the
    request asks for (`Dialect.stream_framing`: Bedrock's event stream). `sink`
    gets the body's pieces as they come; `done` is set, and `on_done`
    called, when the answer is whole (or cut by `cancel`). A stream's
    `status` and `headers` are known at once; a JSON answer's when it is done.
    """

    def __init__(
        self,
        engine: Engine,
        dialect: Dialect,
        body: Any,
        settings: Settings,
        sink: Sink,
        *,
        started: float | None = None,
        load: Load | None = None,
        on_done: Callable[[], None] | None = None,
        path: str = "",
        framing: Framing = SSE,
    ) -> None:
        self.engine = engine
        self.dialect = dialect
        self.sink = sink
        self.started = time.perf_counter() if started is None else started
        self.stream = dialect.wants_stream(body, path)
        self.stats = Stats()
        self.done = threading.Event()
        self.on_done = on_done
        self.events: list[Event] = []
        """Every event of the answer, in order."""
        prompt = dialect.request_prompt(body, path)
        self.usage = not self.stream or dialect.reports_usage(body)
        tokens, stops = self._tokens(prompt)
        context = engine.ctx
        if len(tokens) >= context:
            raise ModelError(
                f"the prompt is {len(tokens):,} tokens and the model's context holds {context:,} (see --ctx)",
                status=400,
            )
        self.stats.prompt_tokens = len(tokens)
        grammar, call = self._call(prompt)
        max_tokens = prompt.max_tokens if prompt.max_tokens is not None else settings.max_tokens
        sampling = Sampling(
            temperature=prompt.temperature if prompt.temperature is not None else settings.temperature,
            top_k=prompt.top_k if prompt.top_k is not None else settings.top_k,
            top_p=prompt.top_p if prompt.top_p is not None else settings.top_p,
            min_p=prompt.min_p if prompt.min_p is not None else settings.min_p,
            seed=prompt.seed if prompt.seed is not None else settings.seed,
            max_tokens=max_tokens,
            logprobs=prompt.logprobs,
            grammar=grammar,
        )
        offered = prompt.tools and prompt.tool_choice != "none"
        self.splitter = Splitter(
            think=settings.think,
            call_markers=settings.calls if offered else None,
            stop=[*prompt.stop, *settings.stop, *stops],
            logprobs=prompt.logprobs is not None,
            call=call,
            call_id=partial(dialect.new_call_id, secrets.SystemRandom()),
        )
        self.start = Start(
            id=dialect.id_prefix + secrets.token_hex(12),
            model=prompt.model or engine.name,
            created=int(time.time()),
        )
        self.status = 200
        self.headers: Headers = (
            dialect.response_headers(self.start) if self.stream else (("content-type", "application/json"),)
        )
        self._encoder = dialect.encoder() if self.stream else None
        # The dialect frames events as SSE: a stream in another framing has each event framed again in it.
        self._framer = framing.encoder() if self.stream and framing is not SSE else None
        if self._framer is not None:
            kept = tuple((k, v) for k, v in self.headers if k.lower() != "content-type")
            self.headers = (("content-type", framing.content_type), *kept)
        self._load = load
        self._t = 0.0  # the time of the last piece: none goes out before the one before it
        self.job = Job(tokens, sampling, self._on_prompt, self._on_token, self._on_end)

    def cancel(self) -> None:
        """Stop generating: the client is gone."""
        self.job.cancel()

    # --- the prompt -----------------------------------------------------------------------------------

    def _tokens(self, prompt: Prompt) -> tuple[list[int], list[str]]:
        if prompt.text is not None:
            return self.engine.tokenize(prompt.text, special=True), []
        if not prompt.messages:
            raise ModelError(f"the request has no {self.dialect.turns}", status=400)
        tools = prompt.tools if prompt.tool_choice != "none" else []
        return self.engine.chat_prompt(prompt.messages, tools)

    def _call(self, prompt: Prompt) -> tuple[str | None, str | None]:
        """The grammar and the tool of a call the request forces (`tool_choice` required or a name)."""
        choice = prompt.tool_choice
        if not prompt.tools or choice in (None, "auto", "none"):
            if choice not in (None, "auto", "none"):
                raise ModelError(f"tool_choice {choice!r} names no tool: the request offers none", status=400)
            return None, None
        tools = {str(t.get("name", "")): t for t in prompt.tools}
        if choice == "required":
            options = [
                {
                    "type": "object",
                    "properties": {"name": {"const": name}, "arguments": _schema(tool)},
                    "required": ["name", "arguments"],
                }
                for name, tool in tools.items()
            ]
            schema = options[0] if len(options) == 1 else {"oneOf": options}
            return self.engine.grammar(schema), ""
        if choice not in tools:
            raise ModelError(f"tool_choice names {choice!r}, which is not one of the tools offered", status=400)
        return self.engine.grammar(_schema(tools[choice])), choice

    # --- on the engine's thread -----------------------------------------------------------------------

    def _on_prompt(self, done: int, total: int) -> None:
        if done == 0:
            self.stats.waited = time.perf_counter() - self.started
            self._emit(self.start, at=0.0 if self._load is not None else None)
            if self._load is not None:
                self._emit(ModelLoadStart(self.start.model), at=0.0)
                for t, fraction in self._load.progress:
                    self._emit(ModelLoadProgress(round(fraction, 4)), at=t)
                self._emit(ModelLoadEnd(round(self._load.seconds, 3)), at=self._load.seconds)
            self._emit(PromptStart())
            return
        self._emit(PromptProgress(round(done / total, 4)))
        if done == total:
            self._emit(PromptEnd())

    def _on_token(self, token: Token) -> bool:
        now = time.perf_counter() - self.started
        if self.stats.first_token is None:
            self.stats.first_token = now
        for event in self.splitter.feed(token):
            self._emit(event, at=now)
        return not self.splitter.stopped

    def _on_end(self, reason: str, message: str) -> None:
        stats = self.stats
        stats.end, stats.error = reason, message
        stats.output_tokens = self.job.generated
        now = time.perf_counter() - self.started
        if stats.first_token is not None and self.job.generated > 1 and now > stats.first_token:
            stats.tokens_per_second = round((self.job.generated - 1) / (now - stats.first_token), 2)
        if reason == "cancelled":
            self._done()
            return
        if not self.events:  # ended before its prompt was read: an error, say
            self._emit(self.start)
        for event in self.splitter.close():
            self._emit(event, at=now)
        if reason == "error":
            self._emit(Error(message))
        else:
            if reason == "length":
                stats.finish = "length"
            else:
                stats.finish = "tool_calls" if self.splitter.called else "stop"
            self._emit(Finish(stats.finish))
            if self.usage:
                self._emit(
                    Usage(
                        stats.prompt_tokens,
                        stats.output_tokens,
                        reasoning_tokens=self.splitter.reasoning_tokens or None,
                        tokens_per_second=stats.tokens_per_second,
                        first_token_seconds=None if stats.first_token is None else round(stats.first_token, 3),
                    )
                )
        self._close()
        self._done()

    def _done(self) -> None:
        self.done.set()
        if self.on_done is not None:
            self.on_done()

    def _emit(self, event: Event, at: float | None = None) -> None:
        t = self._t = max(round(time.perf_counter() - self.started if at is None else at, 6), self._t)
        self.events.append(event)
        if self._encoder is not None:
            for frame in self._encoder.feed(event):
                self._send(t, frame)

    def _send(self, t: float, frame: bytes) -> None:
        """A frame of the dialect's to `sink`, in the stream's framing."""
        if self._framer is None:
            self.sink(t, frame)
            return
        for event in SSEDecoder().feed(frame):
            self.sink(t, self._framer.frame(event))

    def _close(self) -> None:
        t = max(round(time.perf_counter() - self.started, 6), self._t)
        if self._encoder is not None:
            for frame in self._encoder.close():
                self._send(t, frame)
            if self._framer is not None and (end := self._framer.close()):
                self.sink(t, end)
            return
        error = next((e for e in self.events if isinstance(e, Error)), None)
        if error is not None:
            self.status, self.headers, body = self.dialect.http_error(500, error.message)
        else:
            body = _json.dumps(self.dialect.response_json(self.events)).encode()
        self.sink(t, body)


def _schema(tool: dict[str, Any]) -> dict[str, Any]:
    parameters = tool.get("parameters")
    return parameters if isinstance(parameters, dict) and parameters else {"type": "object"}
