"""Which recorded interaction answers a request, and why none did.

By default a request must agree with a recording on method, path and body,
the JSON body compared as data (key order and whitespace do not matter),
minus any ignored fields. A cassette may say otherwise for its own
recordings (`match`, `ignore_body_fields`), and the server's options
override both. In the APIs sse-tape speaks, `stream` and `stream_options`
are the shape of answer asked for, not a difference (and so is Gemini's
`:streamGenerateContent` beside `:generateContent` in the path): a streamed
recording answers a request that asks for no stream, and the other way round
(replay converts it); a recorder, which must fetch each shape from its
upstream, compares them like any part of the request.

A reconnection (a request with `Last-Event-ID`, as an `EventSource` sends
it) is answered by a recording of the same reconnection, made with the same
`Last-Event-ID`, when there is one; else, when replaying, by a recording made
without one, which replay resumes after that event. A request without the
header never gets a recording of a reconnection (it is not the whole
stream). A recorder, which must fetch each reconnection from its upstream,
resumes nothing.

A recording cut short on the recording side (ended `interrupted`: the
recorder was stopped mid-stream; or `client-gone`: its client hung up) is
not what the upstream answers. Replay gives it as it was recorded, which is
what happened; a recorder (`refetch`) never answers with one, but fetches
the request from its upstream again, and the whole answer takes the place
of every cut-off recording of that request (`cut_short` finds them). A
stream the upstream itself cut (`upstream-reset`, `timeout`) is the
upstream's answer, and replays.

Among the recordings that agree, the one whose body is most alike wins (see
`_likeness`), so with `match_on=("method", "path")` a request with `tools`
gets the tool-call recording and a conversation that ends with a tool's
result gets the recording that answers one; on a tie, one in the shape asked
for. Repeated identical requests get the agreeing recordings in their
recorded order, starting over when all have been played.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any
from urllib.parse import parse_qsl

from . import _json
from ._exceptions import ConfigError, NoMatchError
from ._paths import locate
from .cassette import REDACTED, Cassette, End, Interaction, MatchOn, Recording, Request
from .dialects import Protocol as Dialect
from .dialects import for_path
from .journal import ReplayState

__all__ = ["CUT_SHORT", "DEFAULT_MATCH_ON", "MatchOn", "Matcher", "asks_for_stream", "is_streamed", "last_event_id"]

DEFAULT_MATCH_ON: tuple[MatchOn, ...] = (MatchOn.METHOD, MatchOn.PATH, MatchOn.BODY)

#: The ends of a stream cut short on the recording side, not by the upstream: a recorder fetches it again.
CUT_SHORT = frozenset({End.INTERRUPTED, End.CLIENT_GONE})

# Body fields that choose the answer's shape (a stream or one JSON document), never compared.
_SHAPE_FIELDS = ("stream", "stream_options")

_MISSING: Any = object()
_NOT_YET: Any = object()  # a part of a request not worked out yet


def asks_for_stream(request: Request) -> bool | None:
    """Whether a request asks for a stream (`"stream": true`, or as its API asks for one: Gemini's path);
    None when its body is not a JSON object."""
    return _asks_for_stream(request, for_path(request.path))


def _asks_for_stream(request: Request, api: Dialect | None) -> bool | None:
    """`asks_for_stream`, the API of the request's path (`for_path`) known."""
    body = request.json()
    if not isinstance(body, dict):
        return None
    return api.wants_stream(body, request.path) if api is not None else body.get("stream") is True


def is_streamed(interaction: Interaction) -> bool:
    """Whether a recorded answer is an event stream: by its content type, else by what its request asked."""
    kind = (interaction.response.header("content-type") or "").split(";")[0].strip().lower()
    if kind:
        return kind == "text/event-stream"
    return asks_for_stream(interaction.request) is True


@dataclass(frozen=True, slots=True)
class _Rule:
    """How one cassette's recordings are matched."""

    match_on: tuple[MatchOn, ...]
    ignore: tuple[tuple[str, ...], ...]


class Matcher:
    """Finds the recorded interaction that answers a request.

    `match_on` and `ignore_body_fields`, when given, apply to every
    recording; when None, each cassette's own settings do, else the
    defaults. Ignored fields are dotted paths into the JSON body (`user`,
    `metadata.trace_id`, `messages.*.name`), removed on both sides before
    bodies are compared. With `allow_repeats` off, each recording answers
    once and a request beyond them is a miss (vcrpy's
    `allow_playback_repeats`); on, they start over. With `reshape` (see
    below), a request in an API sse-tape speaks matches recordings whatever
    shape of answer it asks for. With `refetch` (a recorder's), a recording
    cut short on the recording side (see `CUT_SHORT`) answers nothing: the
    request is a miss, for the upstream to answer whole. What has played is
    kept in `state`, which a server shares with the rest of its replay. A
    miss's explanation shows the request as `redact` makes it (a server's: its
    secrets redacted, as a cassette would hold it); it is still compared as it
    came.
    """

    def __init__(
        self,
        cassettes: Iterable[Cassette],
        *,
        match_on: Iterable[MatchOn | str] | None = None,
        ignore_body_fields: Iterable[str] | None = None,
        allow_repeats: bool = True,
        reshape: bool = True,
        resume: bool = True,
        refetch: bool = False,
        state: ReplayState | None = None,
        redact: Callable[[Request], Request] | None = None,
    ) -> None:
        self.allow_repeats = allow_repeats
        self.redact = redact
        self.reshape = reshape
        """Whether `stream` and `stream_options` only choose the answer's shape (replay converts it); off,
        they are compared like any field, so a recorder fetches each shape from its upstream."""
        self.resume = resume
        """Whether a reconnection no recording of the same reconnection answers gets one made without
        `Last-Event-ID` (replay resumes it); off, it is a miss, so a recorder fetches it from its upstream."""
        self.refetch = refetch
        """Whether a recording cut short on the recording side (`CUT_SHORT`) is left unanswered, so that a
        recorder fetches it from its upstream again; off, it replays as it was recorded."""
        self.state = state or ReplayState()
        try:
            self.match_on = None if match_on is None else tuple(dict.fromkeys(MatchOn(m) for m in match_on))
        except ValueError as exc:
            raise ConfigError(f"{exc}: choose from {', '.join(MatchOn)}") from None
        self.ignore_body_fields = None if ignore_body_fields is None else tuple(ignore_body_fields)
        self.recordings: list[Recording] = []
        self._apis: dict[str, Dialect | None] = {}  # the API each recorded path names: requests for them need no lookup
        self._rules: list[_Rule] = []
        self._bodies: list[Any] = []
        self._shapes: list[bool | None] = []  # whether each successful answer streams; None: an error answer
        self._last_ids: list[str | None] = []  # the Last-Event-ID each was recorded with
        self._shapeless: list[str] = []  # each one's path without what only chooses the answer's shape
        self._cut: list[bool] = []  # whether each was cut short on the recording side
        for cassette in cassettes:
            rule = self._rule(cassette.match_on, cassette.ignore_body_fields)
            for n, interaction in enumerate(cassette.interactions, 1):
                self._track(Recording(interaction, cassette.name, n), rule)

    def add(self, interaction: Interaction, cassette: Cassette, index: int) -> Recording:
        """Make a new interaction (one just recorded into `cassette`) playable from the next request on."""
        recording = Recording(interaction, cassette.name, index)
        self._track(recording, self._rule(cassette.match_on, cassette.ignore_body_fields))
        return recording

    def _rule(self, match_on: tuple[MatchOn, ...] | None, ignore: tuple[str, ...] | None) -> _Rule:
        """How a cassette with these settings is matched: the server's options first, then its own."""
        parts = self.match_on or match_on or DEFAULT_MATCH_ON
        fields = self.ignore_body_fields if self.ignore_body_fields is not None else ignore or ()
        return _Rule(parts, tuple(tuple(f.split(".")) for f in fields))

    def _track(self, recording: Recording, rule: _Rule) -> None:
        request = recording.interaction.request
        if request.path not in self._apis:
            self._apis[request.path] = for_path(request.path)
        self.recordings.append(recording)
        self._rules.append(rule)
        self._bodies.append(_comparable_body(request, rule.ignore, self.reshape, self._apis[request.path]))
        response = recording.interaction.response
        self._shapes.append(is_streamed(recording.interaction) if 200 <= response.status < 300 else None)
        self._last_ids.append(last_event_id(recording.interaction.request))
        self._shapeless.append(_shapeless(request.path, self._apis[request.path]))
        self._cut.append(response.end in CUT_SHORT)
        self.state.track([recording])

    def find(self, request: Request) -> Recording:
        """The recording that answers `request`, noted as played; raises `NoMatchError` naming the closest ones."""
        asked = _Asked(request, self)
        last_id = last_event_id(request)
        # A recorder fetches what it cut short again.
        agreeing = [
            n
            for n in range(len(self.recordings))
            if not (self.refetch and self._cut[n]) and self._agrees(request, asked, n)
        ]
        same = [n for n in agreeing if self._last_ids[n] == last_id]
        if not same and last_id is not None and self.resume:
            same = [n for n in agreeing if self._last_ids[n] is None]  # to resume after that event
        agreeing = same
        if not agreeing:
            raise NoMatchError(self.explain_miss(request))
        scores = self._scores(asked, agreeing) if len(agreeing) > 1 else dict.fromkeys(agreeing, (0, True))
        if not self.allow_repeats:
            # The most alike recording that has not answered yet.
            plays = self.state.plays
            ranked = sorted(agreeing, key=lambda n: (scores[n], -n), reverse=True)
            fresh = [n for n in ranked if not plays[self.recordings[n]]]
            if not fresh:
                count = len(agreeing)
                raise NoMatchError(
                    f"the {count} recording{'s'[: count != 1]} matching {request.method} {request.path} "
                    f"{'have' if count != 1 else 'has'} been played already: {self.recordings[agreeing[0]]}"
                )
            return self._play(fresh[0])
        best = max(scores.values())
        group = tuple(n for n in agreeing if scores[n] == best)
        turn = self.state.turns.get(group, 0)
        self.state.turns[group] = turn + 1
        return self._play(group[turn % len(group)])

    def cut_short(self, request: Request) -> list[Recording]:
        """The recordings cut short on the recording side (see `CUT_SHORT`) of the very same request: the same
        method, path, query, body (but for ignored fields) and `Last-Event-ID`, whatever `match_on` lets
        differ, so that a whole answer to `request` can take their place. In recorded order."""
        asked = _Asked(request, self)
        last_id = last_event_id(request)
        return [
            self.recordings[n]
            for n in range(len(self.recordings))
            if self._cut[n]
            and self._last_ids[n] == last_id
            and all(self._same(part, request, asked, n) for part in MatchOn)
        ]

    def _scores(self, asked: _Asked, agreeing: list[int]) -> dict[int, tuple[int, bool]]:
        """How well each of the agreeing recordings answers: how alike its body is (see `_likeness`), then
        whether it is in the shape asked for."""
        # A successful answer in the shape asked for beats one that must be converted, when there is one;
        # error answers have no shape (a recorded 429 then 200 replays in order to either kind of request).
        stream = asked.stream()
        in_shape = {n for n in agreeing if self._shapes[n] is not None and self._shapes[n] == stream}
        return {
            n: (
                _likeness(asked.body(self._rules[n]), self._bodies[n]),
                not in_shape or n in in_shape or self._shapes[n] is None,
            )
            for n in agreeing
        }

    def _play(self, n: int) -> Recording:
        self.state.played(self.recordings[n])
        return self.recordings[n]

    def explain_miss(self, request: Request, *, limit: int = 3) -> str:
        """A message naming the closest recordings and how each differs from `request`."""
        head = f"no recorded interaction matches {request.method} {request.path}"
        if not self.recordings:
            return head + " (no interactions are loaded)"
        asked = _Asked(request, self)
        shown = _Asked(self.redact(request), self) if self.redact is not None else asked
        ranked = []
        for n, rec in enumerate(self.recordings):
            parts, body_diffs = self._differences(request, asked, shown, n)
            # Fewer disagreeing parts first, then fewer body differences, then the most alike
            # path (a typo'd path names its neighbour), then recorded order.
            path_likeness = SequenceMatcher(None, request.path, rec.interaction.request.path).ratio()
            ranked.append(((len(parts), len(body_diffs), -path_likeness, n), rec, parts))
        ranked.sort(key=lambda row: row[0])
        closest = [f"{rec}: {'; '.join(parts)}" for _, rec, parts in ranked[:limit]]
        return f"{head}; closest: " + " | ".join(closest)

    def _agrees(self, request: Request, asked: _Asked, n: int) -> bool:
        return all(self._same(part, request, asked, n) for part in self._rules[n].match_on)

    def _same(self, part: MatchOn, request: Request, asked: _Asked, n: int) -> bool:
        recorded = self.recordings[n].interaction.request
        if part is MatchOn.METHOD:
            return request.method.upper() == recorded.method.upper()
        if part is MatchOn.PATH:
            return request.path == recorded.path or (self.reshape and asked.shapeless() == self._shapeless[n])
        if part is MatchOn.QUERY:
            return _query_agrees(request.query, recorded.query)
        return _json_agrees(asked.body(self._rules[n]), self._bodies[n])

    def _differences(self, request: Request, asked: _Asked, shown: _Asked, n: int) -> tuple[list[str], list[str]]:
        """How request and recording n disagree: one line per part, and the body's differences, with the
        request's values as `shown` has them."""
        recorded = self.recordings[n].interaction.request
        parts: list[str] = []
        body_diffs: list[str] = []
        here, there = last_event_id(request), self._last_ids[n]
        if here != there and not (there is None and self.resume):
            parts.append(f"Last-Event-ID is {_show_id(here)}, recorded {_show_id(there)}")
        for part in self._rules[n].match_on:
            if self._same(part, request, asked, n):
                continue
            if part is MatchOn.BODY:
                rule = self._rules[n]
                body_diffs = _json_diff(asked.body(rule), self._bodies[n], "body", shown.body(rule))
                more = f" and {len(body_diffs) - 3} more" if len(body_diffs) > 3 else ""
                parts.append(", ".join(body_diffs[:3]) + more)
            else:
                here, there = getattr(shown.request, part.value), getattr(recorded, part.value)
                parts.append(f"{part.value} is {here!r}, recorded {there!r}")
        return parts, body_diffs


class _Asked:
    """A request as one `find` (or `explain_miss`) reads it, each part worked out once, when first needed:
    the API its path names, whether it asks for a stream, and its body as each rule compares it (rules
    differ in the fields they ignore)."""

    def __init__(self, request: Request, matcher: Matcher) -> None:
        self.request = request
        self.matcher = matcher
        self._api: Dialect | None = _NOT_YET
        self._shapeless: str | None = None
        self._bodies: dict[tuple[tuple[str, ...], ...], Any] = {}

    def api(self) -> Dialect | None:
        """The API of the request's path: known for every recorded path, looked up for any other."""
        if self._api is _NOT_YET:
            path, known = self.request.path, self.matcher._apis
            self._api = known[path] if path in known else for_path(path)
        return self._api

    def shapeless(self) -> str:
        """The request's path without what only chooses the answer's shape."""
        if self._shapeless is None:
            self._shapeless = _shapeless(self.request.path, self.api())
        return self._shapeless

    def stream(self) -> bool | None:
        """Whether it asks for a stream (see `asks_for_stream`)."""
        return _asks_for_stream(self.request, self.api())

    def body(self, rule: _Rule) -> Any:
        """The body as `rule` compares it."""
        if rule.ignore not in self._bodies:
            self._bodies[rule.ignore] = _comparable_body(self.request, rule.ignore, self.matcher.reshape, self.api())
        return self._bodies[rule.ignore]


def _comparable_body(request: Request, ignore: tuple[tuple[str, ...], ...], reshape: bool, api: Dialect | None) -> Any:
    """The body as it is compared: JSON as data, without the ignored fields, nor (with `reshape`, in an `api`
    sse-tape speaks) those that choose the answer's shape."""
    if not request.body:
        return None
    if request.json() is None:
        return request.body  # not JSON: compared as bytes
    # The request keeps its parsed body as it is: fields are cut from a copy, parsed anew when ignored
    # fields may lie anywhere inside it (faster than a deep copy), else a copy of the top level.
    parsed = _json.parse(request.body) if ignore else request.json()
    if reshape and isinstance(parsed, dict) and api is not None:
        parsed = {name: value for name, value in parsed.items() if name not in _SHAPE_FIELDS}
    for path in ignore:
        for container, key in reversed(locate(parsed, path)):
            del container[key]
    return parsed


def _shapeless(path: str, api: Dialect | None) -> str:
    """The path with what only chooses the answer's shape taken out, in an `api` sse-tape speaks (the one
    `for_path` finds for it)."""
    return api.shapeless_path(path) if api is not None else path


def _likeness(a: Any, b: Any) -> int:
    """How alike two bodies are, for choosing among recordings that agree with a request.

    Per top-level key: +8 equal on both sides, +1 present on both, -1 present
    on one. A list on both sides (the conversation so far) scores up to +4
    more: +1 for the same length, +2 when its last items have the same
    `role` and `type`, and +1 when they have the same keys; the same list
    and the same `model` score +16, so that what is asked, and of which
    model, outweighs a setting such as `max_tokens` (Anthropic's SDK always
    sends one, a translation says 4096).
    A conversation that ends with a tool's result is most like a recording of
    one, and an equal value always beats a like one.
    """
    if not isinstance(a, dict) or not isinstance(b, dict):
        return 0
    score = 0
    for key in a.keys() | b.keys():
        if key not in a or key not in b:
            score -= 1
        elif a[key] == b[key]:
            score += 16 if key == "model" or isinstance(a[key], list) else 8
        else:
            score += 1 + _list_likeness(a[key], b[key])
    return score


def _list_likeness(a: Any, b: Any) -> int:
    if not isinstance(a, list) or not isinstance(b, list) or not a or not b:
        return 0
    score = 1 if len(a) == len(b) else 0
    last, other = a[-1], b[-1]
    if (
        isinstance(last, dict)
        and isinstance(other, dict)
        and (last.get("role"), last.get("type")) == (other.get("role"), other.get("type"))
    ):
        score += 2 + (last.keys() == other.keys())
    return score


def last_event_id(request: Request) -> str | None:
    """The event id a reconnection resumes after (its `Last-Event-ID`); None for a request that is none."""
    return request.header("Last-Event-ID") or None


def _show_id(last_id: str | None) -> str:
    return "absent" if last_id is None else repr(last_id)


def _query_agrees(here: str, recorded: str) -> bool:
    """Same parameters in any order; a recorded value that was redacted stands for any value."""
    if here == recorded:
        return True
    ours = sorted(parse_qsl(here, keep_blank_values=True))
    theirs = sorted(parse_qsl(recorded, keep_blank_values=True))
    return len(ours) == len(theirs) and all(
        a == b and (x == y or y == REDACTED) for (a, x), (b, y) in zip(ours, theirs, strict=True)
    )


def _json_agrees(here: Any, recorded: Any) -> bool:
    """Equal as data, where a recorded value that was redacted stands for any value."""
    if here == recorded or recorded == REDACTED:
        return True
    if isinstance(here, dict) and isinstance(recorded, dict):
        return here.keys() == recorded.keys() and all(_json_agrees(here[k], recorded[k]) for k in here)
    if isinstance(here, list) and isinstance(recorded, list):
        return len(here) == len(recorded) and all(map(_json_agrees, here, recorded))
    return False


def _show(value: Any) -> str:
    if value is _MISSING:
        return "absent"
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, bytes) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _json_diff(a: Any, b: Any, where: str, shown: Any) -> list[str]:
    """Where two JSON values differ, as `path: here X, recorded Y` strings; X as `shown` (`a` with its secrets
    redacted, the same shape) has it."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in [*a, *(k for k in b if k not in a)]:
            av, bv = a.get(key, _MISSING), b.get(key, _MISSING)
            if av != bv:
                sv = shown.get(key, _MISSING) if isinstance(shown, dict) else av
                out.extend(_json_diff(av, bv, f"{where}.{key}", sv))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        seen = shown if isinstance(shown, list) and len(shown) == len(a) else a
        return [
            d for i, (x, y, z) in enumerate(zip(a, b, seen, strict=True)) for d in _json_diff(x, y, f"{where}[{i}]", z)
        ]
    if a == b or b == REDACTED:
        return []
    return [f"{where} is {_show(shown)}, recorded {_show(b)}"]
