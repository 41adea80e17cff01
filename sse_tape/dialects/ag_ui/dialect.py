"""The AG-UI event stream's contract: how it is recognised, how it ends and fails, and the rules it keeps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...cassette import Interaction, Request
from ...sse import ServerSentEvent
from ..events import Error, Event
from ..protocol import Checker, Protocol, Violation, data_frame, json_objects, opening

__all__ = ["AGUI"]

_TERMINAL = frozenset({"RUN_FINISHED", "RUN_ERROR"})
_OPENERS = frozenset({"RUN_STARTED", "RUN_ERROR"})  # a run that fails before it starts says only RUN_ERROR


def _type(event: ServerSentEvent) -> str | None:
    """The event's `type`, read without parsing JSON that cannot end a run (most events are deltas)."""
    if '"RUN_' not in event.data:
        return None
    obj = next((obj for _, _, obj in json_objects([event])), None)
    kind = obj.get("type") if obj is not None else None
    return kind if isinstance(kind, str) else None


class AGUI(Protocol):
    """The AG-UI protocol: a run's typed events from `RUN_STARTED` to `RUN_FINISHED` or `RUN_ERROR`."""

    name = "ag-ui"
    path = ""
    """None: an application mounts its agent at any path (`serves_path` is never true)."""

    def serves_path(self, path: str) -> bool:
        """Never: AG-UI has no path of its own, and a recording of it is known by its stream (`recognises`)."""
        return False

    def recognises(self, interaction: Interaction) -> bool:
        """A stream whose first event is `RUN_STARTED` with its thread and run ids."""
        first = opening(interaction, 1)
        if not first or not isinstance(obj := first[0][1], dict):
            return False
        return obj.get("type") == "RUN_STARTED" and "threadId" in obj and "runId" in obj

    def is_terminal(self, event: ServerSentEvent) -> bool:
        """`RUN_FINISHED` or `RUN_ERROR`: the run is over."""
        return _type(event) in _TERMINAL

    def error_frames(
        self, error: Error, before: Sequence[Event] = (), sent: Sequence[ServerSentEvent] = ()
    ) -> list[bytes]:
        """`RUN_ERROR` with the message and code: it ends the run, whatever is still open (the spec lets it)."""
        run_error: dict[str, Any] = {"type": "RUN_ERROR", "message": error.message}
        if error.code is not None:
            run_error["code"] = error.code
        return [data_frame(run_error)]

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        """The run's rules: `RUN_STARTED` first; each text message's and tool call's events between its start
        and its end, under the id it started with; none left open at `RUN_FINISHED`, whose ids are the run's;
        one `RUN_FINISHED` or `RUN_ERROR`, last; `STATE_DELTA` a JSON Patch (a list of operations)."""
        checker = Checker()
        messages: set[str] = set()
        calls: set[str] = set()
        started: dict[str, Any] | None = None
        ended: int | None = None
        for i, sse in enumerate(events):
            typed = checker.typed(i, sse, "an event with no type (each is a JSON object with a string type)")
            if typed is None:
                continue
            obj, kind = typed
            if ended is not None:
                checker.add(i, f"{kind} after the run ended (event {ended + 1}): nothing follows it")
                continue
            if i == 0 and kind not in _OPENERS:
                checker.add(i, f"the run opens with {kind}, not RUN_STARTED")
            if kind == "RUN_STARTED":
                if started is not None:
                    checker.add(i, "a second RUN_STARTED in the run")
                started = obj
            elif kind in ("TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"):
                _span(checker, i, kind, obj, "messageId", messages, "text message")
                if kind == "TEXT_MESSAGE_CONTENT" and not (isinstance(obj.get("delta"), str) and obj["delta"]):
                    checker.add(i, "TEXT_MESSAGE_CONTENT with no delta (it must be a non-empty string)")
            elif kind in ("TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"):
                _span(checker, i, kind, obj, "toolCallId", calls, "tool call")
            elif kind == "STATE_DELTA" and not isinstance(obj.get("delta"), list):
                checker.add(i, "STATE_DELTA whose delta is not a JSON Patch (a list of operations)")
            elif kind == "STATE_SNAPSHOT" and "snapshot" not in obj:
                checker.add(i, "STATE_SNAPSHOT with no snapshot")
            elif kind == "RUN_FINISHED":
                for what, open_ in (("text message", messages), ("tool call", calls)):
                    if open_:
                        checker.add(i, f"RUN_FINISHED with the {what} {', '.join(sorted(open_))} still open")
                if started is not None:
                    for key in ("threadId", "runId"):
                        if obj.get(key) != started.get(key):
                            checker.add(i, f"RUN_FINISHED {key} is {obj.get(key)!r}, the run's {started.get(key)!r}")
            if kind in _TERMINAL:
                ended = i
        if ended is None and events:
            checker.add(None, "the run never ends: no RUN_FINISHED or RUN_ERROR")
        return checker.violations


def _span(checker: Checker, i: int, kind: str, obj: dict[str, Any], key: str, open_: set[str], what: str) -> None:
    """A text message's or tool call's event: its start opens its id, its end closes it, and the events
    between need it open."""
    ident = obj.get(key)
    if not isinstance(ident, str):
        checker.add(i, f"{kind} with no {key}")
        return
    if kind.endswith("_START"):
        if ident in open_:
            checker.add(i, f"{kind} for the {what} {ident}, which is open already")
        open_.add(ident)
        return
    if ident not in open_:
        checker.add(i, f"{kind} for the {what} {ident}, which is not open (no {kind.rsplit('_', 1)[0]}_START)")
    elif kind.endswith("_END"):
        open_.discard(ident)
