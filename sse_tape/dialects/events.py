"""Neutral generation events: what any streaming LLM API says, in no API's words.

A dialect decodes its stream into these and encodes these into its stream,
so a cassette recorded from one API can be replayed in another, an injected
error can be framed as each server frames it, and synthesis can speak any of
them. They are values: frozen, comparable, hashable.

The order they come in is a contract: every decoder produces it and every
streaming encoder relies on it, because an encoder frames each event as it
arrives and cannot look ahead.

1. `Start`, first and once.
2. Any of `ModelLoadStart`, `ModelLoadProgress`..., `ModelLoadEnd`, then any of
   `PromptStart`, `PromptProgress`..., `PromptEnd` (progress never goes back).
3. The answer, interleaved as generated: `ReasoningDelta`, `TextDelta`,
   `RefusalDelta`, and tool calls. A call is `ToolCallStart`, then its
   `ToolCallDelta`s, then `ToolCallEnd`; calls with different indexes may
   interleave, and a call left open when the stream finishes is ended by
   `Finish`. Whether the server runs a tool itself is said at its start
   (`ToolCallStart.server`), so an API with no such calls can leave all of
   its events out. A `ReasoningSignature` ends the run of `ReasoningDelta`s
   just before it, which it signs (or, alone, stands for reasoning that was
   not shown); reasoning after it is another run.
4. `Finish`, once.
5. `Usage`, at most once, after `Finish`: servers count tokens when
   generation is over. (An encoder that needs usage in its final frame, as
   the Responses API does, holds only that frame until `Usage` or the end.)

`Error` may come at any point after `Start` and ends the stream in place of
steps 4 and 5: nothing follows it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Error",
    "Event",
    "Finish",
    "ModelLoadEnd",
    "ModelLoadProgress",
    "ModelLoadStart",
    "PromptEnd",
    "PromptProgress",
    "PromptStart",
    "ReasoningDelta",
    "ReasoningSignature",
    "RefusalDelta",
    "Start",
    "TextDelta",
    "TokenLogprob",
    "ToolCallDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "Usage",
]


@dataclass(frozen=True, slots=True)
class Start:
    """A response begins: its id, the model answering, and when it was created (Unix seconds)."""

    id: str = ""
    model: str = ""
    created: int = 0


@dataclass(frozen=True, slots=True)
class ModelLoadStart:
    """The server starts loading the model."""

    model: str = ""


@dataclass(frozen=True, slots=True)
class ModelLoadProgress:
    """Model loading progress, from 0 to 1."""

    progress: float


@dataclass(frozen=True, slots=True)
class ModelLoadEnd:
    """The model is loaded, after `seconds`."""

    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class PromptStart:
    """Prompt processing (prefill) begins."""


@dataclass(frozen=True, slots=True)
class PromptProgress:
    """Prompt processing progress, from 0 to 1."""

    progress: float


@dataclass(frozen=True, slots=True)
class PromptEnd:
    """Prompt processing is done; generation follows."""


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A piece of the model's reasoning."""

    text: str


@dataclass(frozen=True, slots=True)
class ReasoningSignature:
    """An opaque signature the server gives the reasoning just before it (Anthropic's `signature_delta`).

    A client sends it back with that reasoning, and only the server that made
    it can check it; it may sign reasoning that was not shown at all.
    """

    signature: str


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One token's log probability, with the most likely alternatives as (token, logprob) pairs."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the answer, with its tokens' log probabilities when they were asked for."""

    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclass(frozen=True, slots=True)
class RefusalDelta:
    """A piece of a refusal, streamed apart from the answer."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    """The model starts calling a tool. `index` tells parallel calls apart.

    `server`: the server runs the tool itself and reports its result in the
    `ToolCallEnd` (LM Studio's MCP tools). OpenAI's function calls are for
    the client to run, so OpenAI-style encoders leave such calls out.
    """

    index: int
    id: str
    name: str
    server: bool = False


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of a tool call's JSON arguments."""

    index: int
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    """A tool call is complete; servers that run the tool report its `output` or its `error`."""

    index: int
    output: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts for the whole response, and how fast it came when the server measures it."""

    input_tokens: int
    output_tokens: int
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    tokens_per_second: float | None = None
    """Output tokens per second of generation, from the first token on."""
    first_token_seconds: float | None = None
    """Seconds from the request to the first output token."""


@dataclass(frozen=True, slots=True)
class Finish:
    """Generation ended: `stop`, `length`, `tool_calls` or `content_filter`."""

    reason: str = "stop"


@dataclass(frozen=True, slots=True)
class Error:
    """Generation failed mid-stream."""

    message: str
    type: str = "server_error"
    code: str | None = None


Event = (
    Start
    | ModelLoadStart
    | ModelLoadProgress
    | ModelLoadEnd
    | PromptStart
    | PromptProgress
    | PromptEnd
    | ReasoningDelta
    | ReasoningSignature
    | TextDelta
    | RefusalDelta
    | ToolCallStart
    | ToolCallDelta
    | ToolCallEnd
    | Usage
    | Finish
    | Error
)
