"""A model's generated text as neutral events: reasoning, text with its logprobs, tool calls; stop sequences.

The engine hands on tokens; a `Splitter` cuts their text into what each part
of the answer is, as a server does: text between the reasoning markers
(`<think>` and `</think>` by default) is reasoning; a call between the
tool-call markers (`<tool_call>` and `</tool_call>`, the format many chat
templates teach) is a tool call whose JSON `{"name": ..., "arguments": ...}`
becomes a call's start and argument deltas; the rest is text. Generation
constrained to a tool's arguments (`tool_choice` naming a function or
`required`) is a call from its first token. A stop sequence ends the text
before it. Only what could still turn out to be the start of a marker or a
stop sequence is held back; everything else goes out as soon as its token
came.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..dialects.events import (
    Event,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
)

__all__ = ["DEFAULT_CALL", "DEFAULT_THINK", "CallScanner", "Splitter", "Token"]

DEFAULT_THINK = ("<think>", "</think>")
DEFAULT_CALL = ("<tool_call>", "</tool_call>")


@dataclass(frozen=True, slots=True)
class Token:
    """One generated token: its text, and its log probability with the likeliest alternatives when asked."""

    text: str
    logprob: float | None = None
    top: tuple[tuple[str, float], ...] = ()


@dataclass(slots=True)
class _Held:
    """Text not yet given out, with the tokens that ended in it."""

    text: str = ""
    tokens: list[tuple[int, TokenLogprob]] = field(default_factory=list)
    """Each token's logprob, with where its text ends in `text`."""

    def take(self, n: int) -> tuple[str, tuple[TokenLogprob, ...]]:
        """The first `n` characters, with the tokens that ended within them."""
        text, self.text = self.text[:n], self.text[n:]
        taken = tuple(lp for end, lp in self.tokens if end <= n)
        self.tokens = [(end - n, lp) for end, lp in self.tokens if end > n]
        return text, taken


class CallScanner:
    """Reads one tool call's JSON as it arrives, `{"name": "...", "arguments": {...}}`, or, when the name is known
    (a call constrained to one tool), just the arguments; gives out the call's start and its argument deltas."""

    _NAME = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
    _ARGUMENTS = re.compile(r'"(?:arguments|parameters)"\s*:\s*')

    def __init__(self, index: int, call_id: str, name: str | None = None) -> None:
        self.index = index
        self.call_id = call_id
        self.name = name
        self.seen = ""
        self.started = False
        self.arguments_at: int | None = 0 if name is not None else None
        self.sent = 0  # characters of the arguments given out
        self.done = False

    def feed(self, text: str) -> list[Event]:
        self.seen += text
        if self.name is None and (m := self._NAME.search(self.seen)):
            self.name = json.loads(f'"{m[1]}"')
        if self.arguments_at is None and (m := self._ARGUMENTS.search(self.seen)):
            self.arguments_at = m.end()
        out: list[Event] = []
        if self.name is not None and not self.started:
            self.started = True
            out.append(ToolCallStart(self.index, self.call_id, self.name))
        if self.started and self.arguments_at is not None and not self.done:
            arguments = self.seen[self.arguments_at :]
            end = _json_value_end(arguments)
            upto = len(arguments) if end is None else end
            if upto > self.sent:
                out.append(ToolCallDelta(self.index, arguments[self.sent : upto]))
                self.sent = upto
            self.done = end is not None
        return out

    def close(self) -> list[Event]:
        """The end of the call; a call whose name never came is left out."""
        if not self.started:
            return []
        return [ToolCallEnd(self.index)]


def _json_value_end(text: str) -> int | None:
    """Where the JSON value at the start of `text` (after spaces) ends, once it has; None while it goes on."""
    depth, in_string, escaped, began = 0, False, False, False
    for i, c in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
                if depth == 0:
                    return i + 1
        elif c in " \t\r\n" and not began:
            continue
        elif c == '"':
            in_string, began = True, True
        elif c in "{[":
            depth, began = depth + 1, True
        elif c in "}]":
            depth -= 1
            if depth <= 0:
                return i + 1
        elif depth == 0 and began and c in ",}":
            return i
        else:
            began = True
    return None


class Splitter:
    """Cuts generated text into reasoning, text and tool calls, and notices stop sequences.

    `feed` takes each token and returns the events its text completes; `close`
    gives out what was held. `stopped` turns true when a stop sequence came:
    generation should end (finish `stop`). `call` names the tool when the
    whole generation is one call's arguments (or an empty string when it is a
    call to any of the tools, `{"name": ..., "arguments": ...}`). `call_id`
    gives each call its id, as the dialect that frames the answer makes one.
    """

    def __init__(
        self,
        *,
        think: tuple[str, str] | None = DEFAULT_THINK,
        call_markers: tuple[str, str] | None = DEFAULT_CALL,
        stop: Sequence[str] = (),
        logprobs: bool = False,
        call: str | None = None,
        call_id: Callable[[], str],
    ) -> None:
        self.think = think
        self.call_markers = call_markers
        self.stop = tuple(s for s in stop if s)
        self.logprobs = logprobs
        self.call_id = call_id
        self.held = _Held()
        self.mode = "text"
        self.calls: list[CallScanner] = []
        self.stopped = False
        self.reasoning_tokens = 0
        if call is not None:
            self.mode = "call"
            self.calls.append(CallScanner(0, call_id(), call or None))

    def feed(self, token: Token) -> list[Event]:
        if self.stopped:
            return []
        self.held.text += token.text
        if self.mode == "reasoning":
            self.reasoning_tokens += 1
        entry = TokenLogprob(token.text, token.logprob if token.logprob is not None else 0.0, token.top)
        self.held.tokens.append((len(self.held.text), entry))
        return self._drain(final=False)

    def close(self) -> list[Event]:
        out = [] if self.stopped else self._drain(final=True)
        if self.mode == "call" and self.calls:
            out += self.calls[-1].close()
        return out

    @property
    def called(self) -> bool:
        """Whether a tool call was made."""
        return any(c.started for c in self.calls)

    def _drain(self, *, final: bool) -> list[Event]:
        out: list[Event] = []
        while self.held.text:
            ends = self._ends()  # what ends the current part: (marker or stop, what follows)
            found = min(((self.held.text.find(m), m, then) for m, then in ends if m in self.held.text), default=None)
            if found is not None:
                at, marker, then = found
                out += self._give(at)
                self.held.take(len(marker))
                if then == "stop":
                    self.stopped = True
                    return out
                out += self._switch(then)
                continue
            keep = 0 if final else max((_overlap(self.held.text, m) for m, _ in ends), default=0)
            out += self._give(len(self.held.text) - keep)
            break
        return out

    def _ends(self) -> list[tuple[str, str]]:
        if self.mode == "call":
            return [(self.call_markers[1], "text")] if self.call_markers else []
        ends = [(s, "stop") for s in self.stop]
        if self.mode == "reasoning" and self.think:
            ends.append((self.think[1], "text"))
        elif self.mode == "text":
            if self.think:
                ends.append((self.think[0], "reasoning"))
            if self.call_markers:
                ends.append((self.call_markers[0], "call"))
        return ends

    def _switch(self, mode: str) -> list[Event]:
        out: list[Event] = []
        if self.mode == "call" and self.calls:
            out += self.calls[-1].close()
        self.mode = mode
        if mode == "call":
            self.calls.append(CallScanner(len(self.calls), self.call_id()))
        return out

    def _give(self, n: int) -> list[Event]:
        if n <= 0:
            return []
        text, logprobs = self.held.take(n)
        if self.mode == "call":
            return self.calls[-1].feed(text)
        if self.mode == "reasoning":
            return [ReasoningDelta(text)]
        return [TextDelta(text, logprobs if self.logprobs else None)]


def _overlap(text: str, marker: str) -> int:
    """How long the end of `text` is that could be the start of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0
