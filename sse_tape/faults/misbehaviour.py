"""Model misbehaviour: a recorded answer rewritten into one a model gets wrong, in the stream's own API.

Byte faults break the wire; agents fail on meaning. A misbehaviour works on
the neutral events a stream carries: the dialect decodes the recording, the
answer is changed (a tool call's arguments broken, the answer turned into a
refusal, a stop for length inside a call's arguments...), and the dialect's
streaming encoder, resumed after the events that stay as recorded, frames
the rest as that API's server frames it, its sequence numbers and open
blocks continued. The new frames go out when the events they replace were
due.

A dialect that has no words for a misbehaviour (the completions API has no
tool calls; LM Studio's stream has no finish reason) cannot show it: the
rewritten stream is decoded again, and if the misbehaviour is not in it the
recording is left alone, and the note says why.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .. import _json
from ..dialects import Generation
from ..dialects.events import (
    Error,
    Event,
    Finish,
    ReasoningDelta,
    ReasoningSignature,
    RefusalDelta,
    Start,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from ..framing import SSE
from ..plan import Plan
from ..position import Position
from ..sse import ServerSentEvent, SSEDecoder

__all__ = [
    "LeftAlone",
    "Misbehaviour",
    "Stream",
    "bad_arguments",
    "content_filter",
    "duplicate_tool_id",
    "empty_answer",
    "length",
    "reasoning_only",
    "refusal",
    "rewrite",
    "unknown_tool",
]

_ANSWER = (ReasoningDelta, ReasoningSignature, TextDelta, RefusalDelta, ToolCallStart, ToolCallDelta, ToolCallEnd)
_CALL = (ToolCallStart, ToolCallDelta, ToolCallEnd)
_PIECE = re.compile(r"\s*\S+|\s+")


class LeftAlone(Exception):
    """The stream cannot show this misbehaviour; the message says why."""


@dataclass(frozen=True, slots=True)
class Stream:
    """A recorded answer as neutral events, with what a misbehaviour needs to rewrite it."""

    events: list[Event]
    cut: int
    """Where a misbehaviour placed at a position begins: an index into `events`, inside the answer."""
    tools: list[dict[str, Any]]
    """The tools the request offered: each with `name` and `parameters` (a JSON schema)."""
    rng: random.Random
    dialect: Generation
    """The stream's, which makes a new call's id."""

    @property
    def head(self) -> list[Event]:
        """The events before the answer: the start, model loading, prompt processing."""
        first = next((i for i, e in enumerate(self.events) if isinstance(e, (*_ANSWER, Finish))), len(self.events))
        return self.events[:first]

    @property
    def middle(self) -> int:
        """The index of the event half-way through the answer."""
        first, finish = _answer_span(self.events)
        return (first + finish + 1) // 2

    @property
    def usage(self) -> list[Event]:
        """The usage report, if the stream had one."""
        return [e for e in self.events if isinstance(e, Usage)]

    def calls(self) -> list[ToolCallStart]:
        """The tool calls the client is to run, in order."""
        return [e for e in self.events if isinstance(e, ToolCallStart) and not e.server]

    def arguments(self, index: int) -> str:
        return "".join(e.arguments for e in self.events if isinstance(e, ToolCallDelta) and e.index == index)

    def new_call_id(self) -> str:
        # An id as the dialect's server makes one; where its calls carry none (Gemini's), an id all the same,
        # which the API may send, for a misbehaviour (a duplicate id) to show in.
        return self.dialect.new_call_id(self.rng) or f"call_{self.rng.getrandbits(64):016x}"

    def tool(self, name: str | None = None) -> dict[str, Any] | None:
        """The offered tool of that name, or the first one offered."""
        return next((t for t in self.tools if name is None or t.get("name") == name), None)


@dataclass(frozen=True, slots=True)
class Misbehaviour:
    """A rewrite of the answer, and how to tell that a stream shows it once framed and decoded again."""

    kind: str
    """What it is, for a note that says a dialect cannot show it: `a refusal`."""
    what: str
    """What the stream then does, for the note: `refusal after event 4`."""
    events: list[Event]
    shows: Callable[[list[Event]], bool]


def pieces(text: str) -> list[str]:
    """Text in the pieces a model streams it in: a word and the space before it."""
    return _PIECE.findall(text) or [text]


def _finish(s: Stream, reason: str) -> list[Event]:
    return [Finish(reason), *s.usage]


def _call(index: int, call_id: str, name: str, arguments: str) -> list[Event]:
    return [
        ToolCallStart(index, call_id, name),
        *(ToolCallDelta(index, piece) for piece in _argument_pieces(arguments)),
        ToolCallEnd(index),
    ]


def _argument_pieces(arguments: str) -> list[str]:
    return [arguments[i : i + 8] for i in range(0, len(arguments), 8)] or [""]


def _with_arguments(s: Stream, index: int, arguments: str) -> list[Event]:
    """The stream with one call's arguments replaced, streamed in pieces after its start."""
    out: list[Event] = []
    for event in s.events:
        if isinstance(event, ToolCallDelta) and event.index == index:
            continue
        out.append(event)
        if isinstance(event, ToolCallStart) and event.index == index:
            out += [ToolCallDelta(index, piece) for piece in _argument_pieces(arguments)]
    return out


def _only_call(s: Stream, calls: list[Event]) -> list[Event]:
    """The answer replaced by tool calls, as a model that decides to call a tool answers."""
    return [*s.head, *calls, *_finish(s, "tool_calls")]


def _parses(text: str) -> Any:
    try:
        return _json.parse(text, max_depth=None)
    except ValueError:
        return _NOT_JSON


_NOT_JSON = object()


def _decoded_arguments(events: list[Event]) -> list[str]:
    calls: dict[int, str] = {}
    for event in events:
        if isinstance(event, ToolCallStart) and not event.server:
            calls[event.index] = ""
        elif isinstance(event, ToolCallDelta) and event.index in calls:
            calls[event.index] += event.arguments
    return list(calls.values())


def _broken(arguments: str) -> str:
    """JSON arguments as a model breaks them: a trailing comma before the last brace."""
    text = arguments.rstrip() or "{}"
    return (text[:-1] if text.endswith("}") else text) + ",}"


def _wrong(value_type: Any) -> Any:
    """A value that is not of the JSON schema type named."""
    return {
        "string": 12345,
        "integer": "not a number",
        "number": "not a number",
        "boolean": "yes",
        "array": {},
        "object": [],
    }.get(value_type if isinstance(value_type, str) else "")


def _breaks_schema(schema: Any) -> dict[str, Any] | None:
    """Arguments that are valid JSON but break the tool's schema: each property of the wrong type,
    or, where no property has a type, none of the required ones; None if the schema takes anything."""
    schema = schema if isinstance(schema, dict) else {}
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    wrong = {name: _wrong(prop.get("type")) for name, prop in properties.items() if isinstance(prop, dict)}
    wrong = {name: value for name, value in wrong.items() if value is not None}
    if wrong:
        return wrong
    if schema.get("required"):
        return {}
    return None


# --- the misbehaviours --------------------------------------------------------------------------------


def refusal(s: Stream, message: str) -> Misbehaviour:
    """The answer turns into a refusal at the cut."""
    kept = [e for e in s.events[: s.cut] if not isinstance(e, _CALL)]
    events = [*kept, *(RefusalDelta(p) for p in pieces(message)), *_finish(s, "stop")]
    return Misbehaviour(
        "a refusal", f"a refusal after event {s.cut}", events, lambda got: any(isinstance(e, RefusalDelta) for e in got)
    )


def content_filter(s: Stream) -> Misbehaviour:
    """The answer stops at the cut with the content-filter finish reason."""
    events = [*s.events[: s.cut], *_finish(s, "content_filter")]
    return Misbehaviour(
        "a content-filter stop",
        f"stopped by the content filter after event {s.cut}",
        events,
        _finished("content_filter"),
    )


def length(s: Stream) -> Misbehaviour:
    """A stop for length in the middle of the first tool call's arguments (of the answer, with no call)."""
    calls = s.calls()
    if not calls:
        events = [*s.events[: s.middle], *_finish(s, "length")]
        return Misbehaviour(
            "a stop for length", f"stopped for length after event {s.middle}", events, _finished("length")
        )
    call = calls[0]
    arguments = s.arguments(call.index)
    half = arguments[: max(len(arguments) // 2, 1)]
    start = s.events.index(call)
    events = [
        *s.events[: start + 1],
        *(ToolCallDelta(call.index, p) for p in _argument_pieces(half)),
        *_finish(s, "length"),
    ]

    def shows(got: list[Event]) -> bool:
        return _finished("length")(got) and any(_parses(a) is _NOT_JSON for a in _decoded_arguments(got))

    return Misbehaviour(
        "a stop for length",
        f"stopped for length after {len(half)} characters of {call.name}'s arguments",
        events,
        shows,
    )


def bad_arguments(s: Stream, kind: str) -> Misbehaviour:
    """A tool call's arguments that are not JSON (`json`), or JSON that breaks the tool's schema (`schema`).

    The first call's, or, in an answer with no call, a call to the first tool the request offered.
    """
    calls = s.calls()
    name = calls[0].name if calls else (s.tool() or {}).get("name")
    if name is None:
        raise LeftAlone("the answer calls no tool and the request offered none")
    if kind == "json":
        arguments = _broken(s.arguments(calls[0].index) if calls else "{}")

        def shows(got: list[Event]) -> bool:
            return any(_parses(a) is _NOT_JSON for a in _decoded_arguments(got))

    else:
        tool = s.tool(name)
        wrong = _breaks_schema((tool or {}).get("parameters"))
        if wrong is None:
            raise LeftAlone(f"the request offered no schema for {name} that arguments could break")
        arguments = _json.dumps(wrong)

        def shows(got: list[Event]) -> bool:
            return any(_parses(a) == wrong for a in _decoded_arguments(got))

    if calls:
        events = _with_arguments(s, calls[0].index, arguments)
    else:
        events = _only_call(s, _call(0, s.new_call_id(), name, arguments))
    what = "not JSON" if kind == "json" else "JSON that breaks its schema"
    return Misbehaviour(f"arguments that are {what}", f"{name}'s arguments are {what}: {arguments[:60]}", events, shows)


def unknown_tool(s: Stream, name: str) -> Misbehaviour:
    """A call to a tool the request did not offer: the first call renamed, or a call added."""
    if s.tool(name) is not None:
        raise LeftAlone(f"the request offered {name}")
    calls = s.calls()
    if calls:
        events = [replace(e, name=name) if e is calls[0] else e for e in s.events]
    else:
        events = _only_call(s, _call(0, s.new_call_id(), name, "{}"))

    def shows(got: list[Event]) -> bool:
        return any(isinstance(e, ToolCallStart) and e.name == name and not e.server for e in got)

    return Misbehaviour("a call to a tool", f"a call to {name}, which the request did not offer", events, shows)


def duplicate_tool_id(s: Stream) -> Misbehaviour:
    """Two tool calls with the same id: the second call takes the first's, or the first call comes twice."""
    calls = s.calls()
    if len(calls) >= 2:
        events = [replace(e, id=calls[0].id) if e is calls[1] else e for e in s.events]
    elif calls:
        call = calls[0]
        again = max(e.index for e in s.events if isinstance(e, _CALL)) + 1
        copy = _call(again, call.id, call.name, s.arguments(call.index))
        finish = next(i for i, e in enumerate(s.events) if isinstance(e, Finish | Usage))
        events = [*s.events[:finish], *copy, *s.events[finish:]]
    else:
        tool = s.tool()
        if tool is None:
            raise LeftAlone("the answer calls no tool and the request offered none")
        call_id = s.new_call_id()
        events = _only_call(s, [*_call(0, call_id, tool["name"], "{}"), *_call(1, call_id, tool["name"], "{}")])

    def shows(got: list[Event]) -> bool:
        ids = [e.id for e in got if isinstance(e, ToolCallStart) and e.id and not e.server]
        return len(ids) != len(set(ids))

    return Misbehaviour("tool-call ids", "two tool calls with the same id", events, shows)


def empty_answer(s: Stream) -> Misbehaviour:
    """The stream starts and finishes with nothing between."""
    usage = [replace(u, output_tokens=0, reasoning_tokens=None) for u in s.usage if isinstance(u, Usage)]
    events = [*s.head, Finish("stop"), *usage]

    def shows(got: list[Event]) -> bool:
        return any(isinstance(e, Finish) for e in got) and not any(isinstance(e, _ANSWER) for e in got)

    return Misbehaviour("an empty answer", "an empty answer", events, shows)


def reasoning_only(s: Stream, text: str) -> Misbehaviour:
    """Reasoning, and then a finish with no answer: the recorded reasoning (signed, where it was), or `text`
    where there was none."""
    recorded = [e for e in s.events if isinstance(e, ReasoningDelta | ReasoningSignature)]
    reasoning = (
        recorded if any(isinstance(e, ReasoningDelta) for e in recorded) else [ReasoningDelta(p) for p in pieces(text)]
    )
    events = [*s.head, *reasoning, *_finish(s, "stop")]

    def shows(got: list[Event]) -> bool:
        answered = any(isinstance(e, TextDelta | RefusalDelta | ToolCallStart) for e in got)
        return any(isinstance(e, ReasoningDelta) for e in got) and not answered

    return Misbehaviour("reasoning", "reasoning with no answer", events, shows)


def _finished(reason: str) -> Callable[[list[Event]], bool]:
    return lambda got: any(isinstance(e, Finish) and e.reason == reason for e in got)


# --- rewriting a plan -----------------------------------------------------------------------------------


def rewrite(
    plan: Plan,
    dialect: Generation,
    make: Callable[[Stream], Misbehaviour],
    *,
    at: Position | None = None,
    tools: Sequence[dict[str, Any]] = (),
    rng: random.Random,
) -> str:
    """Rewrite the plan's stream into the misbehaviour `make` builds; returns what was done, or why not.

    The events before the first one that changes stay as recorded, byte for
    byte; the rest is framed by the dialect's encoder, resumed after them (and
    then in the plan's framing, a JSON array's elements).
    """
    blocks = plan.events
    sent = [b.event for b in blocks if b.event is not None]
    indexed = dialect.decode_indexed(sent) if sent else []
    events = [e for _, e in indexed]
    sources = [i for i, _ in indexed]
    if not any(isinstance(e, Start) for e in events) or not any(isinstance(e, Finish) for e in events):
        return f"not a finished {dialect.name} answer: left alone"
    if any(isinstance(e, Error) for e in events):
        return "the stream has ended in an error already: left alone"
    stream = Stream(events, _cut(plan, at, events, sources), list(tools), rng, dialect)
    try:
        change = make(stream)
    except LeftAlone as exc:
        return f"{exc}: left alone"
    if change.events == events:
        return "the answer is that already: left alone"
    pairs = zip(events, change.events, strict=False)
    same = next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(events), len(change.events)))
    kept = _kept(dialect, sent, events, sources, same)
    first = next((i for i, source in enumerate(sources) if source >= kept), len(events))
    encoder = dialect.encoder()
    if kept:
        encoder.resume(sent[:kept])
    tail = change.events[first:]
    framed = [(first + n, frame) for n, event in enumerate(tail) for frame in encoder.feed(event)]
    framed += [(len(events), frame) for frame in encoder.close()]
    got = dialect.decode([*sent[:kept], *SSEDecoder().feed(b"".join(f for _, f in framed))])
    if not change.shows(got):
        return f"{dialect.name} cannot show {change.kind}: left alone"
    if plan.framing is not SSE:  # the dialect frames events as SSE: framed again as the plan's stream is
        again = plan.framing.encoder(kept)
        framed = [(n, again.frame(e)) for n, frame in framed for e in SSEDecoder().feed(frame)]
        framed.append((len(events), again.close()))
    # Each new frame goes out when the recorded event it stands in place of was due; the rest at the end.
    due = [plan.time_at(blocks[i].start) for i in sources]
    end = plan.time_at(blocks[-1].start)
    offset = blocks[kept].start if kept < len(blocks) else blocks[-1].end
    plan.cut(offset)
    last = plan.writes[-1][0] if plan.writes else 0.0
    for n, frame in framed:
        last = max(last, due[n] if n < len(due) else end)
        plan.append(last, frame)
    plan.end_at = max(plan.end_at, last)
    return change.what


def _kept(dialect: Generation, sent: list[ServerSentEvent], events: list[Event], sources: list[int], same: int) -> int:
    """How many of the recorded SSE events stay as they were, when the first `same` neutral events do.

    Where the dialect frames the recording's events into as many SSE events of the same names as the
    recording has, the frames of those first events stay and the rest are framed again, what opens
    the first changed event's block included (the Responses API's `output_item.added` before a first
    delta). Otherwise, the SSE events before the one that holds the first change stay.
    """
    framed = dialect.encode_indexed(events)
    names = [e.event for e in SSEDecoder().feed(b"".join(frame for _, frame in framed))]
    if names == [e.event for e in sent]:
        return sum(1 for index, _ in framed if index < same)
    return sources[same] if same < len(sources) else len(sent)


def _cut(plan: Plan, at: Position | None, events: list[Event], sources: list[int]) -> int:
    """The index of the first event at or after a position, kept inside the answer (after the start,
    at or before the finish)."""
    answer, finish = _answer_span(events)
    if at is None:
        return answer
    offset = plan.offset(at)
    before = sum(1 for b in plan.events if b.end <= offset)  # SSE events wholly before the position
    cut = next((i for i, source in enumerate(sources) if source >= before), finish)
    return min(max(cut, answer), finish)


def _answer_span(events: list[Event]) -> tuple[int, int]:
    """Where the answer begins (its first event, or the finish when it has none) and the finish's index."""
    finish = next(i for i, e in enumerate(events) if isinstance(e, Finish))
    return next((i for i, e in enumerate(events) if isinstance(e, _ANSWER)), finish), finish
