"""`Phase`: where a conversation with an LLM API stands, as replay chooses a recording by it.

An agent loop sends one conversation again and again: first with tools
offered, then with the tool's result appended, then perhaps again. Its
requests differ in what they ask of the model, not only in their text, and a
recording of another step answers them wrongly (a tool call where the
result was given, a greeting where a tool was forced). A request's phase is
what decides which step it is, read from its neutral `Prompt`, so the same
in every dialect:

- the tools the client offers to run (its function tools, by name: an empty
  list is none; tools the server runs itself are part of the body only);
- `tool_choice`: none, auto, required, or one named tool (with no tools
  offered, none);
- whether the conversation ends with a tool's result, and for which call;
- how many turns it has (system instructions not counted), and the
  conversation itself, in no API's words, so that `input: "Hi"` and
  `input: [{"role": "user", "content": "Hi"}]` are the same conversation.

`Phase.fits` says whether a recording can answer a request at all (the rule
that comes before any likeness), and `Phase.closeness` how close one that
can is (what comes first when several can). The README states the rule for
users (Serving cassettes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .. import _json
from ..cassette import Request, Response
from ..framing import Framing
from .answer import Answer
from .generation import Generation, Prompt

__all__ = ["Phase", "answer_of", "calls_of", "phase_of"]

_CHOICES = ("auto", "none", "required")

#: The roles of instructions, not turns of the conversation.
_INSTRUCTIONS = ("system", "developer")


@dataclass(frozen=True, slots=True)
class Phase:
    """Where a conversation stands: what it offers, what it demands, and what it ends with."""

    tools: frozenset[str]
    """The names of the tools the client offers to run; empty when it offers none."""
    choice: str
    """`auto`, `none`, `required`, or `named` (`named` says which); `none` whenever no tools are offered."""
    named: str | None
    """The one tool `tool_choice` forces, when it names one."""
    answering: str | None
    """The call id of the tool result the conversation ends with (`""` when the result names none); None
    when it ends with anything else."""
    turns: int
    """How many turns the conversation has, system instructions not counted."""
    conversation: tuple[Any, ...] = field(compare=False)
    """The conversation in no API's words: each turn's role, text, calls and the call it answers. Not part
    of the phase proper: two requests are of the same phase whatever they say."""

    @classmethod
    def of(cls, prompt: Prompt) -> Phase:
        """The phase of a request, read from its neutral prompt."""
        tools = frozenset(str(tool.get("name")) for tool in prompt.tools if tool.get("name"))
        given = prompt.tool_choice
        if not tools or given == "none":
            choice, named = "none", None
        elif given in _CHOICES:
            choice, named = str(given), None
        elif given:
            choice, named = "named", given
        else:
            choice, named = "auto", None
        turns = [m for m in prompt.messages if m.get("role") not in _INSTRUCTIONS]
        conversation = tuple(_turn(m) for m in prompt.messages)
        if prompt.text is not None:
            conversation = (("prompt", prompt.text),)
        return cls(tools, choice, named, _answering(turns), len(turns), conversation)

    def fits(self, recorded: Phase, calls: frozenset[str] | None) -> str | None:
        """Why a recording whose request had the phase `recorded` cannot answer a request of this phase, in
        words; None when it can.

        `calls` are the tools the recorded answer calls (empty: it calls none); None when it is no answer
        (an error), which fits a request that demands what its request demanded. A recording fits when both
        conversations end with a tool's result or neither does, both offer tools or neither does, and its
        answer is one this request allows: every tool it calls is offered, and it calls one when
        `tool_choice` requires one (the named one, when named), none when `tool_choice` is none.
        """
        if (self.answering is None) != (recorded.answering is None):
            ends = "ends with a tool's result" if self.answering is not None else "does not end with a tool's result"
            return f"the conversation {ends}, the recorded one {'does not' if recorded.answering is None else 'does'}"
        if bool(self.tools) != bool(recorded.tools):
            return f"the request offers {self.shown_tools()}, the recorded one {recorded.shown_tools()}"
        if calls is None:
            if (self.choice, self.named) != (recorded.choice, recorded.named):
                return f"tool_choice is {self.shown_choice()}, recorded {recorded.shown_choice()}"
            return None
        unoffered = sorted(calls - self.tools)
        if unoffered:
            return f"the recorded answer calls {', '.join(unoffered)}, which the request does not offer"
        if self.choice == "none" and calls:
            return f"tool_choice is none, the recorded answer calls {', '.join(sorted(calls))}"
        if self.choice == "required" and not calls:
            return "tool_choice requires a tool call, the recorded answer calls none"
        if self.choice == "named" and self.named not in calls:
            called = f"calls {', '.join(sorted(calls))}" if calls else "calls none"
            return f"tool_choice names {self.named}, the recorded answer {called}"
        return None

    def closeness(self, recorded: Phase) -> tuple[bool, bool, bool, bool, int]:
        """How close a recording of the phase `recorded` that fits (see `fits`) is to this one, as a key to
        sort by, greatest first: the same tool result answered, the same tools offered, the same
        `tool_choice`, the same conversation, and the fewest turns apart."""
        return (
            self.answering == recorded.answering,
            self.tools == recorded.tools,
            (self.choice, self.named) == (recorded.choice, recorded.named),
            self.conversation == recorded.conversation,
            -abs(self.turns - recorded.turns),
        )

    def after(self, previous: Phase, answer: Answer, *, keeps_tools: bool) -> Phase:
        """The phase of a request that continues a conversation the server holds (`Generation.continues`:
        the Responses API's `previous_response_id`, an Anthropic thread), where `previous` is the phase of the
        request it continues and `answer` that request's answer: the conversation goes on from theirs, and
        with `keeps_tools` (the server keeps them, and this request names none) so do the tools and
        `tool_choice`."""
        said = (
            "assistant",
            answer.text,
            tuple((call.id, call.name, _arguments(call.arguments)) for call in answer.client_calls()),
            None,
        )
        kept = previous if keeps_tools else self
        conversation = (*previous.conversation, said, *self.conversation)
        turns = previous.turns + 1 + self.turns
        return Phase(kept.tools, kept.choice, kept.named, self.answering, turns, conversation)

    def shown_tools(self) -> str:
        """What a request offers, as a miss shows it: `no tools`, `tools (get_weather)`, or those `with
        tool_choice none`."""
        if not self.tools:
            return "no tools"
        return f"tools ({', '.join(sorted(self.tools))})" + (" with tool_choice none" if self.choice == "none" else "")

    def shown_choice(self) -> str:
        """`tool_choice` as a miss shows it: `auto`, `none`, `required` or `get_weather`."""
        return self.named if self.named is not None else self.choice


def phase_of(dialect: Generation, request: Request) -> Phase | None:
    """The phase of a request of `dialect`'s API; None when its body is not a JSON object of it."""
    body = request.json()
    if not isinstance(body, dict):
        return None
    try:
        return Phase.of(dialect.request_prompt(body, request.path))
    except (TypeError, ValueError, AttributeError, KeyError):
        return None


def answer_of(dialect: Generation, response: Response, framing: Framing | None) -> Answer | None:
    """A recorded answer of `dialect`'s API, put together: its stream's messages in `framing` (see
    `matching.framing_of`: SSE, Gemini's JSON array), else its one JSON answer; None when it is no answer (an
    error status) or not one `dialect` reads."""
    if response.status >= 400:
        return None
    try:
        events = framing.events(response.chunks) if framing is not None else response.events()
        if events:
            return Answer.of(dialect.decode(sse for _, sse in events))
        if response.body:
            return Answer.of(dialect.decode_json(_json.parse(response.body, max_depth=None)))
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError):
        return None
    return Answer()


def calls_of(answer: Answer | None) -> frozenset[str] | None:
    """The tools an answer calls for the client to run (empty: none), as `Phase.fits` takes them; None for no
    answer."""
    return None if answer is None else frozenset(call.name for call in answer.client_calls())


def _answering(turns: list[dict[str, Any]]) -> str | None:
    """The call id of the tool result a conversation ends with (`""` when it names none), where user text may
    follow the results (Anthropic's and Gemini's turns hold both, which the neutral prompt splits); None when
    it ends otherwise."""
    for message in reversed(turns):
        role = message.get("role")
        if role == "tool":
            return str(message.get("tool_call_id") or "")
        if role != "user":
            return None
    return None


def _turn(message: dict[str, Any]) -> tuple[Any, ...]:
    """A turn in no API's words: its role, text, the calls it makes (id, name, arguments as data) and the call
    it answers."""
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            calls.append(
                (str(call.get("id") or ""), str(function.get("name") or ""), _arguments(function.get("arguments")))
            )
    return (message.get("role"), message.get("content") or "", tuple(calls), message.get("tool_call_id"))


def _arguments(arguments: Any) -> str:
    """A call's arguments as data, so that spacing and key order do not make two calls differ."""
    try:
        value = _json.parse(arguments) if isinstance(arguments, str) else arguments
        return json.dumps(value, sort_keys=True, default=str)
    except (ValueError, RecursionError):
        return arguments if isinstance(arguments, str) else repr(arguments)
