"""The UI message stream's contract: how it is recognised, how it ends and fails, and the rules it keeps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...cassette import Interaction, Request
from ...sse import ServerSentEvent, encode_event
from ..events import Error, Event
from ..protocol import Checker, Protocol, Violation, data_frame, json_objects, opening

__all__ = ["AISDKUI", "HEADER", "PART_TYPES"]

HEADER = "x-vercel-ai-ui-message-stream"
"""The response header that says a stream is a UI message stream (its value the version, `v1`)."""

DONE = "[DONE]"

PART_TYPES = frozenset(
    {
        "start",
        "finish",
        "abort",
        "error",
        "message-metadata",
        "start-step",
        "finish-step",
        "reset-step",
        "text-start",
        "text-delta",
        "text-end",
        "reasoning-start",
        "reasoning-delta",
        "reasoning-end",
        "tool-input-start",
        "tool-input-delta",
        "tool-input-available",
        "tool-input-error",
        "tool-approval-request",
        "tool-approval-response",
        "tool-output-available",
        "tool-output-error",
        "tool-output-denied",
        "source-url",
        "source-document",
        "file",
        "reasoning-file",
        "custom",
        "steering-message",
    }
)
"""The part types of the `ai` package's `uiMessageChunkSchema` (v1), besides `data-*` parts: a reader rejects
any other."""

_ENDS = frozenset({"finish", "error", "abort"})
_START_KEYS = frozenset({"type", "messageId", "messageMetadata"})


def _type(event: ServerSentEvent) -> str | None:
    """The part's `type`, read without parsing JSON where it cannot end the stream (most parts are deltas)."""
    if not any(word in event.data for word in ('"finish"', '"error"', '"abort"')):
        return None
    obj = next((obj for _, _, obj in json_objects([event])), None)
    kind = obj.get("type") if obj is not None else None
    return kind if isinstance(kind, str) else None


class AISDKUI(Protocol):
    """The AI SDK UI message stream (v1): `start`, parts, `finish`, then `[DONE]`."""

    name = "ai-sdk-ui"
    path = ""
    """None: an application answers it from any route (`serves_path` is never true)."""

    def serves_path(self, path: str) -> bool:
        """Never: the stream has no path of its own, and a recording is known by its header or its first part."""
        return False

    def recognises(self, interaction: Interaction) -> bool:
        """A stream with the `x-vercel-ai-ui-message-stream` header, or whose first part is `start` (with at
        most its `messageId` and `messageMetadata`)."""
        if interaction.response.header(HEADER) is not None:
            return True
        first = opening(interaction, 1)
        if not first or not isinstance(obj := first[0][1], dict):
            return False
        return obj.get("type") == "start" and obj.keys() <= _START_KEYS

    def is_terminal(self, event: ServerSentEvent) -> bool:
        """`[DONE]`, and the parts that end the message: `finish`, `error`, `abort`."""
        return event.data == DONE or _type(event) in _ENDS

    def error_frames(
        self, error: Error, before: Sequence[Event] = (), sent: Sequence[ServerSentEvent] = ()
    ) -> list[bytes]:
        """`{"type": "error", "errorText": ...}` then `[DONE]`; a stream that had sent nothing starts first."""
        opened = [] if sent else [data_frame({"type": "start"})]
        return [*opened, data_frame({"type": "error", "errorText": error.message}), encode_event(DONE)]

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        """The stream's rules: `start` first; each part a JSON object of a known type; text and reasoning
        deltas between their start and end under the same id; a tool call's input deltas after its
        `tool-input-start` and before its input is available, its output after its input; steps that finish
        only once started; nothing but `[DONE]` after `finish`; `[DONE]` last, after `finish`, `error` or
        `abort`."""
        checker = Checker()
        spans: dict[str, set[str]] = {"text": set(), "reasoning": set()}
        inputs: set[str] = set()  # tool calls whose input is streaming
        calls: set[str] = set()  # tool calls whose input is available
        steps = 0
        ended: str | None = None
        finished = False
        done: int | None = None
        for i, sse in enumerate(events):
            if done is not None:
                checker.add(i, f"an event after [DONE] (event {done + 1}): [DONE] is last")
                continue
            if sse.data == DONE:
                if ended is None:
                    checker.add(i, "[DONE] before any finish, error or abort part")
                done = i
                continue
            typed = checker.typed(i, sse, "a part with no type (each is a JSON object with a string type)")
            if typed is None:
                continue
            obj, kind = typed
            if kind not in PART_TYPES and not kind.startswith("data-"):
                checker.add(i, f"{kind} is no UI message part type")
                continue
            if i == 0 and kind != "start":
                checker.add(i, f"the stream opens with {kind}, not start")
            if finished:
                checker.add(i, f"{kind} after finish: only [DONE] follows it")
                continue
            if kind == "start" and i > 0:
                checker.add(i, "a second start")
            elif kind.split("-")[0] in spans and kind.split("-")[-1] in ("start", "delta", "end"):
                _span(checker, i, kind, obj, spans[kind.split("-")[0]])
            elif kind == "tool-input-start":
                ident = _call_id(checker, i, kind, obj)
                if ident is not None and (ident in inputs or ident in calls):
                    checker.add(i, f"tool-input-start for the tool call {ident}, which was started already")
                if ident is not None:
                    inputs.add(ident)
            elif kind == "tool-input-delta":
                ident = _call_id(checker, i, kind, obj)
                if ident is not None and ident not in inputs:
                    checker.add(i, f"tool-input-delta for the tool call {ident}, whose input is not streaming")
            elif kind in ("tool-input-available", "tool-input-error"):
                ident = _call_id(checker, i, kind, obj)
                if ident is not None:
                    inputs.discard(ident)
                    calls.add(ident)
            elif kind in ("tool-output-available", "tool-output-error", "tool-output-denied"):
                ident = _call_id(checker, i, kind, obj)
                if ident is not None and ident not in calls:
                    checker.add(i, f"{kind} for the tool call {ident}, whose input never came")
            elif kind == "start-step":
                steps += 1
            elif kind == "finish-step":
                if steps == 0:
                    checker.add(i, "finish-step with no step started")
                steps = max(steps - 1, 0)
            elif kind == "error" and not isinstance(obj.get("errorText"), str):
                checker.add(i, "an error part with no errorText")
            if kind in _ENDS:
                ended = kind
            if kind == "finish":
                finished = True
                for what, open_ in spans.items():
                    if open_:
                        checker.add(i, f"finish with the {what} part {', '.join(sorted(open_))} still open")
        if done is None and events:
            checker.add(None, "the stream never ends: no [DONE]")
        return checker.violations


def _call_id(checker: Checker, i: int, kind: str, obj: dict[str, Any]) -> str | None:
    """The part's `toolCallId`, or None after noting that it has none."""
    ident = obj.get("toolCallId")
    if not isinstance(ident, str):
        checker.add(i, f"{kind} with no toolCallId")
        return None
    return ident


def _span(checker: Checker, i: int, kind: str, obj: dict[str, Any], open_: set[str]) -> None:
    """A text or reasoning part's event: its start opens its id, its end closes it, its deltas need it open."""
    what, step = kind.split("-")[0], kind.split("-")[-1]
    ident = obj.get("id")
    if not isinstance(ident, str):
        checker.add(i, f"{kind} with no id")
        return
    if step == "start":
        if ident in open_:
            checker.add(i, f"{kind} for the {what} part {ident}, which is open already")
        open_.add(ident)
        return
    if ident not in open_:
        checker.add(i, f"{kind} for the {what} part {ident}, which is not open (no {what}-start)")
    elif step == "end":
        open_.discard(ident)
