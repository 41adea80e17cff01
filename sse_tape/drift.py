"""Drift: how the answer a server gives now to a recorded request differs in shape from the recorded answer.

A client's parser depends on an answer's shape, not its text: the same
request answered today with a field more (`choices[].delta.reasoning_content`),
a field fewer, another event type or another order is drift a cassette no
longer shows. `sse-tape check --drift` re-sends each recorded request to a
real server (`drift_checks`) and compares the two answers' `AnswerShape`:

- its status, and for an error its message;
- a stream or one JSON answer, the content type, and how it ended (complete,
  or cut by the server);
- the kinds of its events: the SSE `event:` name, or, for an API that names
  its event in the data (the Responses API's and Anthropic's `type`), that
  name; `[DONE]` for the terminal frame of the OpenAI-style APIs; their
  order as a sequence with repeats collapsed (`message > [DONE]`);
- the fields of the JSON it carries, by path, with array indexes generalised
  (`choices[].delta.content`), for each kind of event (or the JSON answer's
  body).

Values never count: ids, timestamps, the text and the token counts change
with every answer. A recorded answer cut short on the recording side (its
client hung up, the recorder was stopped) is not the server's whole answer,
and is not compared.

    from sse_tape import Cassette
    from sse_tape.drift import AnswerShape, shape_drift

    before, after = Cassette.load("before.toml")[0], Cassette.load("after.toml")[0]
    print(shape_drift(AnswerShape.of(before), AnswerShape.of(after)))
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

from . import _json
from .cassette import REDACTED, End, Interaction, Request
from .matching import CUT_SHORT, is_streamed
from .redaction import Redaction
from .sse import ServerSentEvent

__all__ = [
    "AnswerShape",
    "DriftCheck",
    "drift_checks",
    "resent_request",
    "shape_drift",
]

_NAMELESS = "message"
"""The kind of an event that names none (the SSE default event type): an OpenAI chat chunk, a Gemini one."""

_TERMINAL = "[DONE]"
"""The kind of the OpenAI-style APIs' terminal frame, `data: [DONE]`."""

# What a recording that ended so was cut short by: not the server's whole answer, so no shape to compare.


@dataclass(frozen=True, slots=True)
class AnswerShape:
    """What a client's parser depends on in an answer, and nothing of its text (see the module)."""

    status: int
    content_type: str
    """The media type, lowercased, without its parameters (`text/event-stream`); empty when none was sent."""
    streamed: bool
    kinds: tuple[str, ...]
    """Its events' kinds in order, repeats collapsed; empty for one JSON answer."""
    fields: frozenset[tuple[str, str]]
    """Each field of its JSON, as (kind of the event that holds it, path); the kind is empty for one JSON
    answer's body."""
    end: End = End.COMPLETE
    """How the answer ended: complete, or cut by the server (`upstream-reset`, `timeout`)."""
    error: str | None = None
    """An error answer's message (status 400 or more), credentials in it redacted."""

    @classmethod
    def of(cls, interaction: Interaction) -> AnswerShape:
        """The shape of `interaction`'s answer."""
        response = interaction.response
        content_type = (response.header("content-type") or "").split(";")[0].strip().lower()
        streamed = is_streamed(interaction)
        error = _error_message(response.body) if response.status >= 400 else None
        fields: set[tuple[str, str]] = set()
        kinds: list[str] = []
        events = [event for _, event in response.events()] if streamed else []
        if streamed and events:
            for event in events:
                value = _parsed(event.data)
                kind = _kind(event, value)
                if not kinds or kinds[-1] != kind:
                    kinds.append(kind)
                if isinstance(value, (dict, list)):
                    fields.update((kind, path) for path in _paths(value, ""))
        else:
            value = _parsed(response.body)
            if isinstance(value, (dict, list)):
                fields.update(("", path) for path in _paths(value, ""))
        return cls(response.status, content_type, streamed, tuple(kinds), frozenset(fields), response.end, error)


def shape_drift(recorded: AnswerShape, now: AnswerShape) -> list[str]:
    """How `now` differs in shape from `recorded`, in words, one item per difference; [] when it does not.

    Another status says only that (and the new error's message): an error's body is no drift of an
    answer's fields. So does a stream answered now with one JSON answer, or the other way round.
    """
    if recorded.status != now.status:
        said = f"status {recorded.status}, now {now.status}"
        return [f"{said}: {now.error}" if now.error else said]
    if recorded.streamed != now.streamed:
        return ["a stream, now one JSON answer" if recorded.streamed else "one JSON answer, now a stream"]
    found: list[str] = []
    if recorded.end != now.end:
        found.append(f"ended {recorded.end}, now {now.end}")
    if recorded.content_type != now.content_type:
        found.append(f"content type {recorded.content_type or 'none'}, now {now.content_type or 'none'}")
    new_kinds = [kind for kind in dict.fromkeys(now.kinds) if kind not in recorded.kinds]
    gone_kinds = [kind for kind in dict.fromkeys(recorded.kinds) if kind not in now.kinds]
    if new_kinds:
        found.append(f"new event type{'s'[: len(new_kinds) != 1]} {', '.join(new_kinds)}")
    if gone_kinds:
        found.append(f"missing event type{'s'[: len(gone_kinds) != 1]} {', '.join(gone_kinds)}")
    # The order of the kinds both have: a kind that came or went is said above, not again as an order.
    both = set(recorded.kinds) & set(now.kinds)
    if _collapsed(k for k in recorded.kinds if k in both) != _collapsed(k for k in now.kinds if k in both):
        found.append(f"event order {' > '.join(recorded.kinds)}, now {' > '.join(now.kinds)}")
    # The fields of the kinds both have: those of a kind that came or went are its own.
    kept = both | {""}
    found += _fields("new", now.fields - recorded.fields, kept)
    found += _fields("missing", recorded.fields - now.fields, kept)
    return found


@dataclass(frozen=True, slots=True)
class DriftCheck:
    """What re-sending one recorded request found: how its answer's shape drifted, if it did; or, with
    `number` None, why its source (a cassette file) could not be read."""

    source: str
    number: int | None
    """The interaction's place in its source, from 1; None when the source cannot be read."""
    method: str | None = None
    path: str | None = None
    drift: tuple[str, ...] = ()
    """Each difference in shape, in words (see `shape_drift`); empty when there is none."""
    skipped: str | None = None
    """Why it was not compared (a recording cut short), if it was not."""
    error: str | None = None
    """Why the source could not be read."""

    @classmethod
    def unreadable(cls, source: str, why: str) -> DriftCheck:
        """The result for a source that cannot be read, and `why`."""
        return cls(source, None, error=why)

    @property
    def drifted(self) -> bool:
        """Whether its answer's shape drifted."""
        return bool(self.drift)

    def line(self) -> str:
        """One line about it, as `check --drift` prints it."""
        if self.error is not None:
            return f"{self.source}: {self.error}"
        where = f"{self.source} #{self.number} {self.method} {self.path}"
        if self.skipped is not None:
            return f"{where}: not compared: {self.skipped}"
        return f"{where}: drifted: {'; '.join(self.drift)}" if self.drift else f"{where}: same shape"

    def as_json(self) -> dict[str, Any]:
        """The row `sse-tape check --drift --json` prints for it."""
        return {
            "source": self.source,
            "interaction": self.number,
            "method": self.method,
            "path": self.path,
            "drift": list(self.drift),
            "skipped": self.skipped,
            "error": self.error,
        }


def resent_request(request: Request, headers: Sequence[tuple[str, str]] = ()) -> Request:
    """`request` as `check --drift` sends it again: the headers and query parameters its recording redacted
    (`<redacted>`) left out, and `headers` (the credentials the user gives, as to `record`) in place of any of
    the same name. The body goes as recorded."""
    given = {name.lower() for name, _ in headers}
    kept = tuple((name, value) for name, value in request.headers if value != REDACTED and name.lower() not in given)
    query = "&".join(
        part for part in request.query.split("&") if part and unquote_plus(part.partition("=")[2]) != REDACTED
    )
    return Request(request.method, request.path, query, (*kept, *headers), request.body)


async def drift_checks(
    interactions: Iterable[Interaction],
    upstream: str,
    *,
    headers: Sequence[tuple[str, str]] = (),
    source: str = "",
    idle_timeout: float = 300.0,
) -> AsyncIterator[DriftCheck]:
    """Re-send each of `interactions` (a `Cassette`, say) to `upstream`, a base URL as `record --upstream`
    takes it (a `user:password@` in it goes as Basic credentials), one at a time, with `headers` given (see
    `resent_request`), and yield how each answer's shape drifted from the recorded one, as it comes.

    Raises `ConfigError` for an upstream URL that is none, before anything is sent, and `UpstreamError` when
    the upstream sends no answer (it is down, say); its message shows the URL with its secrets redacted.
    """
    from .record import fetch_each  # the upstream, and reading its answers: the recorder's subsystem

    chosen = list(interactions)
    compared = [interaction for interaction in chosen if interaction.response.end not in CUT_SHORT]
    requests = (resent_request(interaction.request, headers) for interaction in compared)
    async with contextlib.aclosing(fetch_each(upstream, requests, idle_timeout=idle_timeout)) as answers:
        for number, interaction in enumerate(chosen, 1):
            request, end = interaction.request, interaction.response.end
            if end in CUT_SHORT:
                why = f"recorded cut short ({end}), not the server's whole answer"
                yield DriftCheck(source, number, request.method, request.path, skipped=why)
                continue
            answer = await anext(answers)
            drift = shape_drift(AnswerShape.of(interaction), AnswerShape.of(answer))
            left_out = _left_out(request, headers)
            if answer.response.status in (401, 403) and left_out and interaction.response.status not in (401, 403):
                drift[0] += f" (the recorded {', '.join(left_out)} was redacted, so not sent: give it with -H)"
            yield DriftCheck(source, number, request.method, request.path, tuple(drift))


def _left_out(request: Request, headers: Sequence[tuple[str, str]]) -> list[str]:
    """The headers of `request` that were redacted and that `headers` give no value for: not sent again."""
    given = {name.lower() for name, _ in headers}
    return [name for name, value in request.headers if value == REDACTED and name.lower() not in given]


def _parsed(data: str | bytes) -> Any:
    """`data` as JSON, or None when it is not JSON."""
    try:
        return _json.parse(data, max_depth=None)
    except ValueError:
        return None


def _kind(event: ServerSentEvent, value: Any) -> str:
    """The kind of an event: its SSE name; else the name its data gives itself (`type`); else `[DONE]` for a
    terminal frame, or `message`."""
    if event.event != _NAMELESS:
        return event.event
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        return str(value["type"])
    return _TERMINAL if event.data.strip() == _TERMINAL else _NAMELESS


#: Fields whose keys are data, not shape: a call's arguments (Gemini's `args`, Anthropic's `input`, a tool's
#: `response`), the completions API's `top_logprobs` (keyed by token), a request's `metadata`. Their paths end
#: at the field.
_OPAQUE = frozenset({"args", "input", "arguments", "response", "top_logprobs", "metadata"})


def _paths(value: Any, prefix: str) -> Iterable[str]:
    """Every field's path in a JSON value, an array's items all under `[]`; not into fields whose keys are
    data (`_OPAQUE`)."""
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            yield path
            if key not in _OPAQUE:
                yield from _paths(item, path)
    elif isinstance(value, list):
        for item in value:
            yield from _paths(item, f"{prefix}[]")


def _collapsed(kinds: Iterable[str]) -> list[str]:
    """`kinds` with each run of one kind as one."""
    out: list[str] = []
    for kind in kinds:
        if not out or out[-1] != kind:
            out.append(kind)
    return out


def _fields(what: str, fields: frozenset[tuple[str, str]], kinds: set[str]) -> list[str]:
    """One item saying `what` fields (new, missing) there are, of `kinds` only: a field under one of them is
    not said again (`usage` missing, not `usage.total_tokens` too)."""
    paths = {(kind, path) for kind, path in fields if kind in kinds}
    shown = sorted(
        (kind, path) for kind, path in paths if not any((kind, parent) in paths for parent in _parents(path))
    )
    if not shown:
        return []
    said = [path if kind in ("", _NAMELESS) else f"{path} (in {kind})" for kind, path in shown]
    return [f"{what} field{'s'[: len(said) != 1]} {', '.join(said)}"]


def _parents(path: str) -> Iterable[str]:
    """The paths that hold `path`: `a`, `a[]` and `a[].b` for `a[].b.c`."""
    for at, char in enumerate(path):
        if char in ".[" and at:
            yield path[:at]


def _error_message(body: bytes) -> str:
    """An error answer's message, as its API words it (`error.message`, `message`), else its text, on one line
    and with any credential in it redacted."""
    value = _parsed(body)
    inner = value.get("error") if isinstance(value, dict) else None
    message: Any = None
    if isinstance(inner, dict):
        message = inner.get("message")
    elif isinstance(value, dict):
        message = inner if isinstance(inner, str) else value.get("message") or value.get("detail")
    text = str(message) if message is not None else body.decode("utf-8", "replace")
    text = " ".join(text.split())
    text = text if len(text) <= 200 else text[:199] + "…"
    return Redaction().shapes.scrub(text, REDACTED)
