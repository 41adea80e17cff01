"""Which recorded interaction answers a request, and why none did.

By default a request must agree with a recording on method, path and body,
the JSON body compared as data (key order and whitespace do not matter),
minus any ignored fields. Among the recordings that agree, the one whose body
is most alike wins, so with `match_on=("method", "path")` a request with
`tools` gets the tool-call recording and one without gets the text one.
Repeated identical requests get the agreeing recordings in their recorded
order, starting over when all have been played.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from difflib import SequenceMatcher
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qsl

from ._exceptions import ConfigError, NoMatchError
from ._paths import locate
from .cassette import Cassette, Interaction, Recording, Request
from .journal import ReplayState
from .redaction import REDACTED

__all__ = ["DEFAULT_MATCH_ON", "MatchOn", "Matcher"]


class MatchOn(StrEnum):
    """A part of the request that must agree with the recording."""

    METHOD = "method"
    PATH = "path"
    QUERY = "query"
    BODY = "body"


DEFAULT_MATCH_ON: tuple[MatchOn, ...] = (MatchOn.METHOD, MatchOn.PATH, MatchOn.BODY)

_MISSING: Any = object()


class Matcher:
    """Finds the recorded interaction that answers a request.

    `ignore_body_fields` are dotted paths into the JSON body (`user`,
    `metadata.trace_id`, `messages.*.name`): they are removed on both sides
    before bodies are compared. With `allow_repeats` off, each recording
    answers once and a request beyond them is a miss (vcrpy's
    `allow_playback_repeats`); on, they start over. What has played is kept
    in `state`, which a server shares with the rest of its replay.
    """

    def __init__(
        self,
        cassettes: Iterable[Cassette],
        *,
        match_on: Iterable[MatchOn | str] = DEFAULT_MATCH_ON,
        ignore_body_fields: Iterable[str] = (),
        allow_repeats: bool = True,
        state: ReplayState | None = None,
    ) -> None:
        self.allow_repeats = allow_repeats
        self.state = state or ReplayState()
        try:
            self.match_on = tuple(dict.fromkeys(MatchOn(m) for m in match_on))
        except ValueError as exc:
            raise ConfigError(f"{exc}: choose from {', '.join(MatchOn)}") from None
        self.ignore_body_fields = tuple(f.split(".") for f in ignore_body_fields)
        self.recordings = [
            Recording(interaction, cassette.name, n)
            for cassette in cassettes
            for n, interaction in enumerate(cassette.interactions, 1)
        ]
        self._bodies = [self._comparable_body(r.interaction.request) for r in self.recordings]
        self.state.track(self.recordings)

    def add(self, interaction: Interaction, cassette: str, index: int) -> Recording:
        """Make a new interaction (one just recorded) playable: it answers from the next request on."""
        recording = Recording(interaction, cassette, index)
        self.recordings.append(recording)
        self._bodies.append(self._comparable_body(interaction.request))
        self.state.track([recording])
        return recording

    def find(self, request: Request) -> Recording:
        """The recording that answers `request`, noted as played; raises `NoMatchError` naming the closest ones."""
        body = self._comparable_body(request)
        agreeing = [n for n in range(len(self.recordings)) if self._agrees(request, body, n)]
        if not agreeing:
            raise NoMatchError(self.explain_miss(request))
        scores = {n: _likeness(body, self._bodies[n]) for n in agreeing}
        if not self.allow_repeats:
            # The most alike recording that has not answered yet.
            plays = self.state.plays
            fresh = [n for n in sorted(agreeing, key=lambda n: (-scores[n], n)) if not plays[self.recordings[n]]]
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

    def _play(self, n: int) -> Recording:
        self.state.played(self.recordings[n])
        return self.recordings[n]

    def explain_miss(self, request: Request, *, limit: int = 3) -> str:
        """A message naming the closest recordings and how each differs from `request`."""
        head = f"no recorded interaction matches {request.method} {request.path}"
        if not self.recordings:
            return head + " (no interactions are loaded)"
        body = self._comparable_body(request)
        ranked = []
        for n, rec in enumerate(self.recordings):
            parts, body_diffs = self._differences(request, body, n)
            # Fewer disagreeing parts first, then fewer body differences, then the most alike
            # path (a typo'd path names its neighbour), then recorded order.
            path_likeness = SequenceMatcher(None, request.path, rec.interaction.request.path).ratio()
            ranked.append(((len(parts), len(body_diffs), -path_likeness, n), rec, parts))
        ranked.sort(key=lambda row: row[0])
        closest = [f"{rec}: {'; '.join(parts)}" for _, rec, parts in ranked[:limit]]
        return f"{head}; closest: " + " | ".join(closest)

    def _comparable_body(self, request: Request) -> Any:
        if not request.body:
            return None
        parsed = request.json()
        if parsed is None:
            return request.body  # not JSON: compared as bytes
        for path in self.ignore_body_fields:
            for container, key in reversed(locate(parsed, path)):
                del container[key]
        return parsed

    def _agrees(self, request: Request, body: Any, n: int) -> bool:
        return all(self._same(part, request, body, n) for part in self.match_on)

    def _same(self, part: MatchOn, request: Request, body: Any, n: int) -> bool:
        recorded = self.recordings[n].interaction.request
        if part is MatchOn.METHOD:
            return request.method.upper() == recorded.method.upper()
        if part is MatchOn.PATH:
            return request.path == recorded.path
        if part is MatchOn.QUERY:
            return _query_agrees(request.query, recorded.query)
        return _json_agrees(body, self._bodies[n])

    def _differences(self, request: Request, body: Any, n: int) -> tuple[list[str], list[str]]:
        """How request and recording n disagree: one line per part, and the body's differences."""
        recorded = self.recordings[n].interaction.request
        parts: list[str] = []
        body_diffs: list[str] = []
        for part in self.match_on:
            if self._same(part, request, body, n):
                continue
            if part is MatchOn.BODY:
                body_diffs = _json_diff(body, self._bodies[n], "body")
                more = f" and {len(body_diffs) - 3} more" if len(body_diffs) > 3 else ""
                parts.append(", ".join(body_diffs[:3]) + more)
            else:
                here, there = getattr(request, part.value), getattr(recorded, part.value)
                parts.append(f"{part.value} is {here!r}, recorded {there!r}")
        return parts, body_diffs


def _likeness(a: Any, b: Any) -> int:
    """How alike two bodies are: +2 per top-level key equal on both sides, +1 per key on both, -1 per key on one."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return 0
    score = 0
    for key in a.keys() | b.keys():
        if key in a and key in b:
            score += 2 if a[key] == b[key] else 1
        else:
            score -= 1
    return score


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


def _json_diff(a: Any, b: Any, where: str) -> list[str]:
    """Where two JSON values differ, as `path: here X, recorded Y` strings."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in [*a, *(k for k in b if k not in a)]:
            av, bv = a.get(key, _MISSING), b.get(key, _MISSING)
            if av != bv:
                out.extend(_json_diff(av, bv, f"{where}.{key}"))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _json_diff(x, y, f"{where}[{i}]")]
    if a == b or b == REDACTED:
        return []
    return [f"{where} is {_show(a)}, recorded {_show(b)}"]
