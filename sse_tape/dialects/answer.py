"""An answer assembled from neutral events: what a non-streaming response holds, and what a person reads first."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from .events import (
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

__all__ = ["Answer", "Call"]


@dataclass(slots=True)
class Call:
    """A tool call, whole."""

    index: int
    id: str
    name: str
    arguments: str = ""
    server: bool = False
    """The server ran the tool itself (LM Studio's MCP tools); its result is `output` or `error`."""
    output: str | None = None
    error: str | None = None


@dataclass(slots=True)
class Answer:
    """Everything a stream said, put together: its text, reasoning, refusal, calls, finish and usage."""

    start: Start = field(default_factory=Start)
    text: str = ""
    reasoning: str = ""
    refusal: str = ""
    calls: list[Call] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    """The text's tokens with their log probabilities, when the stream carried them."""
    finish: str | None = None
    usage: Usage | None = None
    error: Error | None = None

    @classmethod
    def of(cls, events: Iterable[Event]) -> Answer:
        answer = cls()
        calls: dict[int, Call] = {}
        for event in events:
            if isinstance(event, Start):
                answer.start = event
            elif isinstance(event, TextDelta):
                answer.text += event.text
                if event.logprobs is not None:
                    answer.logprobs = [*(answer.logprobs or []), *event.logprobs]
            elif isinstance(event, ReasoningDelta):
                answer.reasoning += event.text
            elif isinstance(event, RefusalDelta):
                answer.refusal += event.text
            elif isinstance(event, ToolCallStart):
                calls[event.index] = Call(event.index, event.id, event.name, server=event.server)
                answer.calls.append(calls[event.index])
            elif isinstance(event, ToolCallDelta) and event.index in calls:
                calls[event.index].arguments += event.arguments
            elif isinstance(event, ToolCallEnd) and event.index in calls:
                calls[event.index].output, calls[event.index].error = event.output, event.error
            elif isinstance(event, Finish):
                answer.finish = event.reason
            elif isinstance(event, Usage):
                answer.usage = event
            elif isinstance(event, Error):
                answer.error = event
        return answer

    def client_calls(self) -> list[Call]:
        """The calls for the client to run (OpenAI's function calls); not those the server ran."""
        return [call for call in self.calls if not call.server]
