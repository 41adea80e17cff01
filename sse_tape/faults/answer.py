"""Faults on what the model answers: the answer rewritten as a model that misbehaves answers it.

Each needs the whole answer (it is rewritten from the first event that changes): a live stream under one
reaches the client once its source has ended.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..dialects import Generation
from ..plan import Plan, Write
from . import misbehaviour
from .misbehaviour import Misbehaviour, Stream
from .model import Act, Fault, FaultKind, Key, Run, Stage, choice, position, text

__all__ = ["ANSWER"]


def _offered(run: Run) -> list[dict[str, Any]]:
    """The tools the request offered, each with `name` and `parameters`."""
    if run.request is None or not isinstance(run.dialect, Generation):
        return []
    try:
        return [t for t in run.dialect.prompt(run.request.json()).tools if isinstance(t, dict) and "name" in t]
    except ValueError:
        return []


class _Misbehave(Act):
    """Holds the stream, then rewrites the answer as the misbehaviour `make` builds it."""

    def __init__(self, fault: Fault, run: Run, make: Callable[[Stream, Fault], Misbehaviour]) -> None:
        super().__init__(fault, run)
        self.make = make
        self.held: list[Write] = []

    def feed(self, writes: list[Write]) -> list[Write]:
        self.held += writes
        return []

    def close(self, end_at: float) -> tuple[list[Write], float]:
        dialect = self.run.dialect
        if not isinstance(dialect, Generation):
            self.note(f"{dialect.name} is no LLM API: left alone")
            return self.held, end_at
        plan = Plan(200, [], self.held, end_at=end_at, framing=self.run.head.framing)
        at = self.fault["at"] if self.fault.kind.key("at") is not None else None
        fault, run = self.fault, self.run
        self.note(
            misbehaviour.rewrite(plan, dialect, lambda s: self.make(s, fault), at=at, tools=_offered(run), rng=run.rng)
        )
        return plan.writes, plan.end_at


def _kind(
    name: str, help: str, keys: tuple[Key, ...], make: Callable[[Stream, Fault], Misbehaviour], main: str | None = None
) -> FaultKind:
    def act(fault: Fault, run: Run) -> Act:
        return _Misbehave(fault, run, make)

    return FaultKind(name, Stage.ANSWER, help, keys, act, main=main, whole=lambda fault: True)


_AT = "position"

#: The misbehaviours, in the order `sse-tape faults` lists them.
ANSWER = (
    _kind("refusal", "the answer turns into a refusal at a position",
          (Key("at", _AT, position, "50%"), Key("message", "text", text, "I'm sorry but I can't help with that.")),
          lambda s, f: misbehaviour.refusal(s, f["message"]), main="at"),
    _kind("content-filter", "the answer stops at a position with the content-filter finish reason",
          (Key("at", _AT, position, "50%"),), lambda s, f: misbehaviour.content_filter(s), main="at"),
    _kind("length", "a stop for length in the middle of the first tool call's arguments (half-way through an answer with no call)",
          (), lambda s, f: misbehaviour.length(s)),
    _kind("bad-args", "a tool call's arguments that are not JSON (json), or JSON that breaks the tool's schema (schema); "
          "an answer with no call calls the first tool offered",
          (Key("kind", "json or schema", choice("json", "schema"), "json"),),
          lambda s, f: misbehaviour.bad_arguments(s, f["kind"]), main="kind"),
    _kind("unknown-tool", "a call to a tool the request did not offer (the first call renamed, or one added)",
          (Key("name", "tool name", text, "sse_tape_unknown_tool"),),
          lambda s, f: misbehaviour.unknown_tool(s, f["name"]), main="name"),
    _kind("duplicate-tool-id", "two tool calls with the same id", (), lambda s, f: misbehaviour.duplicate_tool_id(s)),
    _kind("empty-answer", "the answer starts and finishes with nothing between", (),
          lambda s, f: misbehaviour.empty_answer(s)),
    _kind("reasoning-only", "reasoning, then a finish with no answer (the recorded reasoning, or this text)",
          (Key("text", "text", text, "Let me think about this step by step."),),
          lambda s, f: misbehaviour.reasoning_only(s, f["text"]), main="text"),
)  # fmt: skip
