"""`Matcher`: which recorded interaction answers a request, and why none did.

A request must agree with a recording on each matcher its rule names (see
`matchers` and `registry`): by default method, path and body, the JSON body
compared as data (key order and whitespace do not matter), minus any ignored
fields. A cassette may say otherwise for its own recordings (`match`,
`ignore_body_fields`), and the server's options override both. Matchers are
handed both requests as they are compared: the ignored fields, and what only
chooses the answer's shape (below), taken out of their bodies once for each
recording and once for each request. In the APIs sse-tape speaks, `stream` and `stream_options`
are the shape of answer asked for, not a difference (and so is Gemini's
`:streamGenerateContent` beside `:generateContent` in the path): a streamed
recording answers a request that asks for no stream, and the other way round
(replay converts it); a recorder, which must fetch each shape from its
upstream, compares them like any part of the request.

Which recordings a request may agree with is looked up, not found by
comparing it with each (`index`: by the parts the built-in matchers compare,
as each cassette's rule compares them), so that an exact hit costs the same
whatever the number loaded; the matchers then decide among those only, and
all that follows (the phase, turns, repeats) is as it would be among all.
Where the key leaves many (a rule that keys no body, `method,path`, puts
every recording of a path under one), those of the request's very phase are
looked up among them (`index.Hits.split`, by each recording's
`Last-Event-ID` and phase, read as the recordings are loaded, so that no
request waits for a whole library's to be read; those a recorder adds, when
a request next asks): when some of those agree and can answer, they are
exactly the ones a comparison of all would rank first, and only they are
compared. When none does (no
recording of the very phase), when all have been played (repeats not
allowed), or when a recording of another phase would decide their order
(whether an answer is in the shape asked for ranks them only when one that
can answer is), every recording the key found is compared, as before.
A request sent as a recording was (the same API, path and body bytes)
agrees with it on the path and the body as the built-in matchers compare
them, and is not copied to be compared.

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

A miss names the closest recordings (those that fewest matchers disagree
with, then with the fewest body differences, then with the most alike path)
and what each matcher that disagrees says, the request's secrets redacted.
What an explanation costs is bounded, whatever the request and the
cassettes: it compares at most `_CANDIDATES` recordings (all of a cassette
that small; else those of the request's path first, then one of each other
path, then the rest, in the order loaded), the likeness of paths by their
first `_LIKENESS` characters, and at most 100 differences of two bodies; it
shows the first 100 characters of a long path (`matchers.shown`).

Of the recordings that agree, in an LLM API only those of the request's
phase can answer (see `dialects.phase`): both conversations end with a
tool's result or neither does, both offer tools or neither does (an empty
list offers none), and the recorded answer is one the request allows (it
calls only tools the request offers; it calls one when `tool_choice`
requires one, the named one when it names one, and none when it says none).
A request no recording of its phase answers is a miss that says so. Of
those that can, the closest phase wins (the same tool result answered, the
same tools, the same `tool_choice`, the same conversation in any of the
API's forms, the nearest number of turns), then the body most alike (see
`_likeness`), then one in the shape asked for. Repeated identical requests
get the best recordings of one phase in their recorded order, starting
over when all have been played: repeats never take turns across phases.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from .. import _json
from .._exceptions import NoMatchError
from .._paths import locate
from ..cassette import Cassette, End, Interaction, Recording, Request
from ..dialects import Protocol as Dialect
from ..dialects import detect, for_request
from ..dialects.answer import Answer
from ..dialects.generation import Generation
from ..dialects.phase import Phase, answer_of, calls_of, phase_of
from ..dialects.protocol import RequestMatcher
from ..framing import SSE, Framing, by_content_type
from ..state import MemoryStore, ReplayStore, recording_id
from .index import FEW, Hits, Index
from .matchers import AGREES, BUILT_IN, MatchOn, body_differences, digest, shown
from .registry import MATCHERS, STRICT

__all__ = [
    "CUT_SHORT",
    "DEFAULT_MATCH_ON",
    "Matcher",
    "asks_for_stream",
    "framing_of",
    "is_streamed",
    "last_event_id",
]

DEFAULT_MATCH_ON: tuple[str, ...] = (MatchOn.METHOD, MatchOn.PATH, MatchOn.BODY)
"""The matchers of a cassette that names none, served with no `match_on`."""

#: The ends of a stream cut short on the recording side, not by the upstream: a recorder fetches it again.
CUT_SHORT = frozenset({End.INTERRUPTED, End.CLIENT_GONE})

# Body fields that choose the answer's shape (a stream or one JSON document), never compared.
_SHAPE_FIELDS = ("stream", "stream_options")

_NOT_YET: Any = object()  # a part of a request not worked out yet

_NAN = b"NaN"  # in a JSON body, a value that equals nothing, not even itself

# The built-in matchers that compare parts of a request that comparing leaves as they came (see `_as_compared`).
_AS_SENT = (MatchOn.METHOD, MatchOn.QUERY)

# What the very same request agrees on: every built-in matcher.
_EVERY_PART = tuple(AGREES[matcher] for matcher in BUILT_IN.values())

# What `Phase.closeness` says of two phases as close as can be.
_CLOSEST = (True, True, True, True, 0)

#: How many recordings back a continuation's phase is followed (`previous_response_id` after
#: `previous_response_id`): a longer chain's oldest are read as requests that continue nothing.
_CHAIN = 1000

#: How many recordings a miss's explanation compares with the request, at most.
_CANDIDATES = 64

#: How many characters of two paths a miss's explanation compares for likeness (`SequenceMatcher` takes time
#: that grows with the product of their lengths).
_LIKENESS = 64


def asks_for_stream(request: Request) -> bool | None:
    """Whether a request asks for a stream (`"stream": true`, or as its API asks for one: Gemini's path);
    None when its body is not a JSON object."""
    return _asks_for_stream(request, for_request(request))


def _asks_for_stream(request: Request, api: Dialect | None) -> bool | None:
    """`asks_for_stream`, the API of the request (`for_request`) known."""
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


def framing_of(interaction: Interaction) -> Framing | None:
    """How a recorded answer frames its stream's messages; None when it is no stream.

    An event stream is SSE (see `is_streamed`); a successful answer to a request for a stream, in the content
    type of the framing its API streams that request in, is in that framing (Gemini's JSON array, to
    `streamGenerateContent` without `alt=sse`: `application/json`, which the same API's one JSON answer is
    sent as too, told apart by the request).
    """
    if is_streamed(interaction):
        return SSE
    request, response = interaction.request, interaction.response
    api = for_request(request)
    if api is None or not 200 <= response.status < 300:
        return None
    framing = api.stream_framing(request)
    if framing is SSE or by_content_type(response.header("content-type")) is not framing:
        return None
    return framing if api.wants_stream(request.json(), request.path) else None


@dataclass(frozen=True, slots=True)
class _Rule:
    """How one cassette's recordings are matched: the matchers, by name, and the ignored body fields."""

    names: tuple[str, ...]
    matchers: tuple[RequestMatcher, ...]
    agrees: tuple[Callable[[Request, Request], bool], ...]
    """Whether each matcher agrees, asked the quickest way (`AGREES`, for the built-in ones)."""
    ignore: tuple[tuple[str, ...], ...]
    strict: bool
    """Matched on everything (`STRICT`): the fields that choose the answer's shape are compared too."""
    reading: tuple[tuple[tuple[str, ...], ...], bool]
    """What decides how a request is compared under this rule: its ignored fields, and whether it is strict."""
    as_sent: tuple[Callable[[Request, Request], bool], ...] | None
    """When every matcher is built in: how those that compare what comparing leaves as it came (the method, the
    query) decide. A request sent as a recording was (`_Asked.sent_as`) is compared as that one is, so it agrees
    on the path and the body, and these alone decide; None when a protocol's matcher is one."""

    @classmethod
    def of(cls, names: tuple[str, ...], ignore: tuple[str, ...]) -> _Rule:
        """The rule of these matchers, by name (or `STRICT`: every built-in one), and these ignored fields."""
        strict = names == (STRICT,)
        names = tuple(BUILT_IN) if strict else names
        matchers = tuple(MATCHERS[name] for name in names)
        agrees = tuple(AGREES.get(matcher) or _agreeing(matcher) for matcher in matchers)
        fields = tuple(tuple(f.split(".")) for f in ignore)
        plain = all(name in BUILT_IN for name in names)
        as_sent = tuple(a for name, a in zip(names, agrees, strict=True) if name in _AS_SENT) if plain else None
        return cls(names, matchers, agrees, fields, strict, (fields, strict), as_sent)


def _agreeing(matcher: RequestMatcher) -> Callable[[Request, Request], bool]:
    """Whether `matcher` finds no difference."""
    return lambda request, recorded: matcher(request, recorded) is None


class Matcher:
    """Finds the recorded interaction that answers a request.

    `match_on` (names of matchers: `MatchOn`'s and those the protocols
    bring, see `registry`) and `ignore_body_fields`, when given, apply to
    every recording; when None, each cassette's own settings do, else the
    defaults. Ignored fields are dotted paths into the JSON body (`user`,
    `metadata.trace_id`, `messages.*.name`), removed on both sides before
    the matchers compare them. With `allow_repeats` off, each recording
    answers once and a request beyond them is a miss (vcrpy's
    `allow_playback_repeats`); on, they start over. With `reshape` (see
    below), a request in an API sse-tape speaks matches recordings whatever
    shape of answer it asks for. With `refetch` (a recorder's), a recording
    cut short on the recording side (see `CUT_SHORT`) answers nothing: the
    request is a miss, for the upstream to answer whole. What has played is
    kept in `state` (see `state`), which a server shares with the rest of its
    replay, by each recording's id (`recording_id`; `id_of`). A
    miss's explanation shows the request as `redact` makes it (a server's: its
    secrets redacted, as a cassette would hold it), and the recordings alike;
    it is still compared as it came. An unknown matcher name, given here or
    in a cassette's `match`, raises `ConfigError` naming the known ones.
    """

    def __init__(
        self,
        cassettes: Iterable[Cassette],
        *,
        match_on: Iterable[str] | None = None,
        ignore_body_fields: Iterable[str] | None = None,
        allow_repeats: bool = True,
        reshape: bool = True,
        resume: bool = True,
        refetch: bool = False,
        state: ReplayStore | None = None,
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
        self.state: ReplayStore = state or MemoryStore()
        named = None if match_on is None else list(match_on)
        self.match_on: tuple[str, ...] | None = MATCHERS.names(named, "match_on") if named else None
        """The matchers every recording is matched by, by name; None: what each cassette says."""
        self.ignore_body_fields = None if ignore_body_fields is None else tuple(ignore_body_fields)
        self.recordings: list[Recording] = []
        """Every recording it can answer with, in the order they were loaded or added."""
        self._ids: list[str | None] = []  # each one's id in the store, worked out when first needed
        self._by_id: dict[str, Recording] = {}  # those worked out
        self._twins: list[int] = []  # how many recordings before each had its cassette's name and place
        self._places: Counter[tuple[str, int]] = Counter()
        self._numbers: dict[Recording, int] = {}  # where each one is in `recordings`
        self._groups: dict[tuple[int, ...], str] = {}  # the store's key of each group of equally good ones
        self._apis: list[Dialect | None] = []  # the API of each recording's request (`for_request`), looked up once
        self._rules: list[_Rule] = []
        self._made: dict[tuple[tuple[str, ...], tuple[str, ...]], _Rule] = {}  # rules by names and fields
        self._compared: list[Request] = []  # each one's request as the matchers compare it
        self._bad_bodies: list[str | None] = []  # what each one's body is when its API answers it 400 (`_bad_body`)
        self._shapes: list[bool | None] = []  # whether each successful answer streams; None: an error answer
        self._last_ids: list[str | None] = []  # the Last-Event-ID each was recorded with
        self._reconnections = 0  # how many were recorded with one
        self._cut: list[bool] = []  # whether each was cut short on the recording side
        self._cut_ones: list[int] = []  # those that were
        self._index: Index[_Rule] = Index()  # the recordings that may agree with a request, by key
        self._phases: list[Any] = []  # each one's request's phase (None: it has none), worked out when needed
        self._answers: list[Any] = []  # each one's answer put together (see `answer_of`), worked out when needed
        self._calls: list[Any] = []  # the tools each one's answer calls (see `calls_of`), worked out when needed
        self._own_misfits: list[Any] = []  # why each one cannot answer its own request (see `_misfit`), likewise
        self._shown: list[Any] = []  # each one's request as a miss shows it (see `_shown_as`), likewise
        self._answer_ids: dict[str, int] | None = None  # which recording answered with each response id
        self._paths: dict[str, list[int]] = {}  # the recordings of each path, as compared: a miss's candidates
        for cassette in cassettes:
            for n, interaction in enumerate(cassette.interactions, 1):
                self._track(Recording(interaction, cassette.name, n), self._rule(cassette, interaction))
        # The phases of a key's many recordings, read now rather than by the first request that finds them, on a
        # server's event loop, where every other client would wait for them all (see the module).
        self._index.split(self._split_key)

    def add(self, interaction: Interaction, cassette: Cassette, index: int) -> Recording:
        """Make a new interaction (one just recorded into `cassette`) playable from the next request on."""
        recording = Recording(interaction, cassette.name, index)
        self._track(recording, self._rule(cassette, interaction))
        return recording

    def _rule(self, cassette: Cassette, interaction: Interaction) -> _Rule:
        """How one of a cassette's recordings is matched: the server's options first, then the cassette's own
        settings, then what the protocol it speaks matches its recordings by (`Protocol.match_on`)."""
        names = self.match_on
        if names is None and cassette.match_on:
            names = MATCHERS.names(cassette.match_on, f"{cassette.name}: match")
        if names is None:
            spoken = detect(interaction)
            names = spoken.match_on if spoken is not None else None
        names = names or DEFAULT_MATCH_ON
        fields = self.ignore_body_fields if self.ignore_body_fields is not None else cassette.ignore_body_fields or ()
        rule = self._made.get((names, fields))
        if rule is None:
            rule = self._made[names, fields] = _Rule.of(names, fields)
        return rule

    def _track(self, recording: Recording, rule: _Rule) -> None:
        request = recording.interaction.request
        self._apis.append(for_request(request))
        place = (recording.cassette, recording.index)
        self._twins.append(self._places[place])
        self._places[place] += 1
        self._numbers[recording] = len(self.recordings)
        self._ids.append(None)
        self.recordings.append(recording)
        self._rules.append(rule)
        compared = _as_compared(request, rule.ignore, self.reshape and not rule.strict, self._apis[-1])
        self._compared.append(compared)
        self._bad_bodies.append(_bad_body(compared) if isinstance(self._apis[-1], Generation) else None)
        self._paths.setdefault(compared.path, []).append(len(self.recordings) - 1)
        response = recording.interaction.response
        self._shapes.append(is_streamed(recording.interaction) if 200 <= response.status < 300 else None)
        self._last_ids.append(last_event_id(recording.interaction.request))
        self._reconnections += self._last_ids[-1] is not None
        self._cut.append(response.end in CUT_SHORT)
        if self._cut[-1]:
            self._cut_ones.append(len(self.recordings) - 1)
        self._index.add(len(self.recordings) - 1, rule, rule.matchers, compared)
        self._phases.append(_NOT_YET)
        self._answers.append(_NOT_YET)
        self._calls.append(_NOT_YET)
        self._own_misfits.append(_NOT_YET)
        self._shown.append(_NOT_YET)
        if self._answer_ids is not None:
            self._note_answer_id(self._answer_ids, len(self.recordings) - 1)

    def id_of(self, recording: Recording) -> str:
        """The id the store knows one of the matcher's recordings by (see `recording_id`; of cassettes of one
        name, in two folders, the second's recordings get `~2` after it, the third's `~3`, in the order they
        were loaded)."""
        return self._id(self._numbers[recording])

    def recording(self, recording_id: str) -> Recording | None:
        """The recording the store knows by this id, if the matcher has it."""
        found = self._by_id.get(recording_id)
        if found is None and len(self._by_id) < len(self.recordings):
            for n in range(len(self.recordings)):  # one this process has not played (a shared store's)
                self._id(n)
            found = self._by_id.get(recording_id)
        return found

    def plays(self, recording: Recording) -> int:
        """How many times one of the matcher's recordings has answered."""
        return self.state.plays(self.id_of(recording))

    def _id(self, n: int) -> str:
        rid = self._ids[n]
        if rid is None:  # a digest of its request: worked out at its first play, not for every one loaded
            twins = self._twins[n]
            rid = self._ids[n] = recording_id(self.recordings[n]) + (f"~{twins + 1}" if twins else "")
            self._by_id[rid] = self.recordings[n]
        return rid

    def find(self, request: Request, *, explain: bool = True, protocol: Dialect | None = _NOT_YET) -> Recording:
        """The recording that answers `request`, noted as played; raises `NoMatchError` naming the closest ones
        (with `explain` off, when none agrees, with no message: `explain_miss` says it, in a thread say, as it
        walks the request's body and every recording's). `protocol`, the protocol the request speaks by its
        path (`dialects.for_request`), when the caller knows it already: it is not looked up again."""
        asked = _Asked(request, self, protocol)
        # With no recording of a reconnection, a reconnection's recordings are those made without one, when
        # replay resumes them: `Last-Event-ID` changes nothing, and is not read.
        last_id = last_event_id(request) if self._reconnections or not self.resume else None
        hits = self._index.hits(asked.compared)
        if hits.count > FEW:  # many to compare: those of the request's very phase, looked up, when there are any
            closest = self._closest(asked, hits, last_id)
            chosen = self._choose(asked, closest) if closest else None
            if chosen is not None:
                return chosen
        # A recorder fetches what it cut short again.
        numbers = hits.numbers()
        agrees = self._agrees_as_sent if len(numbers) == 1 else self._agrees
        same: list[int] = []  # those that agree, of the request's `Last-Event-ID`
        resumable: list[int] = []  # and those made without one, to resume after that event when none is of it
        for n in numbers:  # a loop, not three comprehensions: one pass over what is found, for every request
            if (self.refetch and self._cut[n]) or not agrees(asked, n):
                continue
            recorded_id = self._last_ids[n]
            if recorded_id == last_id:
                same.append(n)
            elif recorded_id is None:
                resumable.append(n)
        if not same and last_id is not None and self.resume:
            same = resumable
        agreeing = [n for n in same if self._misfit(asked, n) is None]  # only recordings of its phase answer
        if not agreeing:
            raise NoMatchError(self.explain_miss(request) if explain else "")
        chosen = self._choose(asked, agreeing)
        if chosen is None:
            count = len(agreeing)
            raise NoMatchError(
                f"the {count} recording{'s'[: count != 1]} matching {request.method} {request.path} "
                f"{'have' if count != 1 else 'has'} been played already: {self.recordings[agreeing[0]]}"
            )
        return chosen

    def _choose(self, asked: _Asked, agreeing: list[int]) -> Recording | None:
        """Of the recordings that can answer a request (in the order loaded), the one that does, noted as played:
        the best (see `_scores`), repeats taking turns; with `allow_repeats` off, the best not played yet, or
        None when all have been."""
        if len(agreeing) == 1 and self.allow_repeats:
            return self._play(agreeing[0])
        scores = self._scores(asked, agreeing) if len(agreeing) > 1 else dict.fromkeys(agreeing, ((), 0, True))
        if not self.allow_repeats:
            # The most alike recording that has not answered yet.
            ranked = sorted(agreeing, key=lambda n: (scores[n], -n), reverse=True)
            # Taken in one step with its play: two servers sharing the store never both take one.
            claimed = self.state.claim([self._id(n) for n in ranked])
            return None if claimed is None else self._by_id[claimed]
        best = max(scores.values())
        # Repeats take turns among the best of one phase only: the first recorded's.
        first = next(n for n in agreeing if scores[n] == best)
        group = tuple(n for n in agreeing if scores[n] == best and self._phase(n) == self._phase(first))
        if len(group) == 1:
            return self._play(group[0])  # its turn cannot choose another
        key = self._groups.get(group)
        if key is None:
            key = self._groups[group] = " ".join(self._id(n) for n in group)
        return self._play(group[self.state.next_turn(key) % len(group)])

    def _closest(self, asked: _Asked, hits: Hits[_Rule], last_id: str | None) -> list[int]:
        """Of the recordings found by key, those that `find`'s comparison of all of them would rank first, found by
        their phase: the agreeing recordings of the request's very phase (`Phase.closeness` at its greatest),
        all of them, of the `Last-Event-ID` that comparison would take. Empty when there are none, or when what
        a comparison of all would choose among them is not theirs alone to say: `find` then compares all."""
        here = asked.phase()
        if here is None:
            return []
        splits = hits.split(self._split_key)
        if last_id is not None and self.resume and not any(last_id in split for split in splits):
            last_id = None  # no recording of this reconnection: those made without one, to resume
        key = _phase_key(here)
        found: list[int] = []
        for split in splits:
            slot = split.get(last_id, {}).get(key)
            if slot is not None:
                found.extend((slot,) if isinstance(slot, int) else slot)
        if len(splits) > 1:
            found.sort()
        closest = [
            n
            for n in found
            if not (self.refetch and self._cut[n])
            and self._agrees_as_sent(asked, n)
            and self._misfit(asked, n) is None
            and (there := self._phase(n)) is not None
            and here.closeness(there) == _CLOSEST  # not two phases sharing a key's hash
        ]
        # Whether an answer is in the shape asked for ranks it only when one of those that can answer is (see
        # `_scores`): where none of these is, but one of another phase may be, their order is not theirs to say.
        shapes = {self._shapes[n] for n in closest}
        stream = asked.stream()
        if None in shapes and (shapes - {None}) and not (stream is not None and stream in shapes):
            return []
        return closest

    def _split_key(self, n: int) -> tuple[Hashable, Hashable]:
        """Recording n's key in the index of phases (`Hits.split`): its `Last-Event-ID`, then its phase's key."""
        phase = self._phase(n)
        return self._last_ids[n], (None if phase is None else _phase_key(phase))

    def cut_short(self, request: Request) -> list[Recording]:
        """The recordings cut short on the recording side (see `CUT_SHORT`) of the very same request: the same
        method, path, query, body (but for ignored fields) and `Last-Event-ID`, whatever `match_on` lets
        differ, so that a whole answer to `request` can take their place. In recorded order."""
        asked = _Asked(request, self)
        last_id = last_event_id(request)
        return [
            self.recordings[n]
            for n in self._cut_ones
            if self._last_ids[n] == last_id
            and all(same(asked.compared(self._rules[n]), self._compared[n]) for same in _EVERY_PART)
        ]

    def _scores(self, asked: _Asked, agreeing: list[int]) -> dict[int, tuple[tuple[Any, ...], int, bool]]:
        """How well each of the agreeing recordings answers: how close its phase is (`Phase.closeness`), then
        how alike its body is (see `_likeness`), then whether it is in the shape asked for."""
        # A successful answer in the shape asked for beats one that must be converted, when there is one;
        # error answers have no shape (a recorded 429 then 200 replays in order to either kind of request).
        stream = asked.stream()
        in_shape = {n for n in agreeing if self._shapes[n] is not None and self._shapes[n] == stream}
        return {
            n: (
                self._closeness(asked, n),
                _likeness(asked.compared(self._rules[n]).json(), self._compared[n].json()),
                not in_shape or n in in_shape or self._shapes[n] is None,
            )
            for n in agreeing
        }

    def _phase(self, n: int) -> Phase | None:
        """The phase of recording n's request (see `_phase_of`)."""
        found = self._phases[n]
        if found is _NOT_YET:
            request = self.recordings[n].interaction.request
            found = self._phases[n] = self._phase_of(self._apis[n], request)
        return found  # type: ignore[no-any-return]

    def _phase_of(self, api: Dialect | None, request: Request) -> Phase | None:
        """The phase of a request as it came (its ignored fields too: they choose nothing), going on from the
        recordings it continues (`Generation.continues`), back to `_CHAIN` of them; None for an API with no
        phases. Worked out without recursion, each recording's phase kept once whole: a thread that explains
        a miss meanwhile finds either none or the right one."""
        if not isinstance(api, Generation):
            return None
        chain: list[tuple[Phase, Any]] = []  # this request's phase, then each it continues, with what it continues
        known: Phase | None = None  # the phase of the oldest one, worked out before
        seen: set[int] = set()
        while True:
            phase = phase_of(api, request)
            if phase is None:
                break
            going_on = api.continues(request.json())
            found = self._answered(going_on.previous) if going_on is not None else None
            chain.append((phase, (going_on, found)))
            if found is None or found in seen or len(chain) > _CHAIN:
                break
            seen.add(found)
            if self._phases[found] is not _NOT_YET:
                known = self._phases[found]
                break
            request = self.recordings[found].interaction.request
            api = self._apis[found]
            if not isinstance(api, Generation):
                break
        for phase, (going_on, found) in reversed(chain):
            answer = self._answer(found) if found is not None else None
            if known is not None and answer is not None and going_on is not None:
                phase = phase.after(known, answer, keeps_tools=going_on.keeps_tools)
            if found is not None and known is not None and self._phases[found] is _NOT_YET:
                self._phases[found] = known
            known = phase
        return known if chain else None

    def _answered(self, response_id: str) -> int | None:
        """The recording that answered with this response id, if any."""
        if self._answer_ids is None:
            ids: dict[str, int] = {}
            for n in range(len(self.recordings)):
                self._note_answer_id(ids, n)
            self._answer_ids = ids  # whole, for a thread that explains a miss meanwhile
        return self._answer_ids.get(response_id)

    def _note_answer_id(self, ids: dict[str, int], n: int) -> None:
        """Note in `ids` the response id recording n answered with, if it has one (the first recording of an id
        keeps it)."""
        answer = self._answer(n)
        if answer is not None and answer.start.id:
            ids.setdefault(answer.start.id, n)

    def _answer(self, n: int) -> Answer | None:
        """Recording n's answer put together; None when it is no answer of an LLM API."""
        found = self._answers[n]
        if found is _NOT_YET:
            interaction = self.recordings[n].interaction
            api = self._apis[n]
            if isinstance(api, Generation):
                found = answer_of(api, interaction.response, framing_of(interaction))
            else:
                found = None
            self._answers[n] = found
        return found  # type: ignore[no-any-return]

    def _misfit(self, asked: _Asked, n: int) -> str | None:
        """Why recording n cannot answer the request in its phase (see `Phase.fits`), or at all: to an LLM API,
        a request whose body is not a JSON object (none, or broken JSON) and a recording whose body is one, or a
        JSON object and a recording of a body that is not one, or of one sent empty (the API answers the one 400,
        never with the other's answer). None when it can: when the recording has no phase and no body that says
        otherwise (an API that is not an LLM's, no body at all, two bodies the API answers alike), or when the
        request's JSON object has none the API reads."""
        if asked.sent_as(n):  # its phase is recording n's own (see `_Asked.phase`): the answer is the same each time
            misfit = self._own_misfits[n]
            if misfit is _NOT_YET:
                there = self._phase(n)
                misfit = self._own_misfits[n] = None if there is None else there.fits(there, self._calls_of(n))
            return misfit  # type: ignore[no-any-return]
        here, there = asked.phase(), self._phase(n)
        if there is None:
            # A recording of a bad body (what the API answered it: a 400, say) answers none that is good.
            bad = self._bad_bodies[n]
            if bad is not None and isinstance(asked.request.json(), dict):
                return f"the request has a JSON object as its body, the recorded one {bad}"
            return None
        if here is None:
            # The API answers a body that is not its JSON object with a 400, never with this recording's answer.
            if isinstance(asked.request.json(), dict):
                return None  # an object it cannot read a phase of: other matchers say what they say of it
            said = "has no body" if not asked.request.body else "has a body that is not a JSON object"
            return f"the request {said}, the recorded one a JSON object (the API answers it 400)"
        return here.fits(there, self._calls_of(n))

    def _calls_of(self, n: int) -> frozenset[str] | None:
        """The tools recording n's answer calls (see `calls_of`)."""
        calls = self._calls[n]
        if calls is _NOT_YET:
            calls = self._calls[n] = calls_of(self._answer(n))
        return calls  # type: ignore[no-any-return]

    def _closeness(self, asked: _Asked, n: int) -> tuple[Any, ...]:
        here, there = asked.phase(), self._phase(n)
        return here.closeness(there) if here is not None and there is not None else ()

    def _play(self, n: int) -> Recording:
        self.state.played(self._id(n))
        return self.recordings[n]

    def explain_miss(self, request: Request, *, limit: int = 3) -> str:
        """A message naming the closest recordings and how each differs from `request` (of those compared:
        see the module)."""
        asked = _Asked(request, self)
        shown_as = _Asked(_same_json(self.redact(request), request), self) if self.redact is not None else asked
        # The path as it is shown: a segment that holds a credential redacted, as everywhere it is said.
        head = f"no recorded interaction matches {shown(request.method)} {shown(shown_as.request.path)}"
        if not self.recordings:
            return head + " (no interactions are loaded)"
        likeness: dict[str, float] = {}  # of each recorded path compared, to the request's
        ranked = []
        for n in self._candidates(asked):
            rec = self.recordings[n]
            parts, body_diffs = self._differences(request, asked, shown_as, n)
            # Fewer disagreeing matchers first, then fewer body differences, then the most alike
            # path (a typo'd path names its neighbour), then recorded order.
            there = rec.interaction.request.path
            if there not in likeness:
                likeness[there] = SequenceMatcher(None, request.path[:_LIKENESS], there[:_LIKENESS]).ratio()
            ranked.append(((len(parts), body_diffs, -likeness[there], n), rec, parts))
        ranked.sort(key=lambda row: row[0])
        closest = [f"{rec}: {'; '.join(parts)}" for _, rec, parts in ranked[:limit]]
        return f"{head}; closest: " + " | ".join(closest)

    def _candidates(self, asked: _Asked) -> list[int]:
        """The recordings a miss's explanation compares with a request: every one, up to `_CANDIDATES`; past
        that, those of the request's path first, then one of each other path, then the rest, in the order they
        were loaded, until there are `_CANDIDATES`."""
        count = len(self.recordings)
        if count <= _CANDIDATES:
            return list(range(count))
        path = asked.compared(self._rules[0]).path  # a rule chooses the fields cut, not the path
        chosen = dict.fromkeys(self._paths.get(path, ())[:_CANDIDATES])
        # A copy: a large request's miss is explained in a thread, while a recorder may add paths on the loop.
        for others in list(self._paths.values()):
            if len(chosen) >= _CANDIDATES:
                break
            chosen.setdefault(others[0])
        n = 0
        while len(chosen) < _CANDIDATES:  # fewer paths than candidates: there are more recordings than chosen
            chosen.setdefault(n)
            n += 1
        return sorted(chosen)

    def _agrees_as_sent(self, asked: _Asked, n: int) -> bool:
        """`_agrees`, asked first whether the request was sent as recording n's was: worth it where few are
        compared, as comparing one copies the request as its rule compares it (once for all of them)."""
        rule = self._rules[n]
        if rule.as_sent is not None and asked.sent_as(n) and _NAN not in asked.request.body:
            # Compared as recording n is, with no copy of the body made: equal as data (a NaN equals nothing).
            request, recorded = asked.request, self.recordings[n].interaction.request
            return all(agrees(request, recorded) for agrees in rule.as_sent)
        return self._agrees(asked, n)

    def _agrees(self, asked: _Asked, n: int) -> bool:
        rule = self._rules[n]
        here, there = asked.compared(rule), self._compared[n]
        return all(agrees(here, there) for agrees in rule.agrees)

    def _shown_as(self, n: int) -> Request:
        """Recording n's request as a miss's explanation shows it: redacted as `redact` has it, with the fields its
        rule ignores cut, and the path it came with (not shapeless). Worked out at the first miss that shows it:
        redacting is most of what explaining a miss costs, and a flood of misses shows the same few again."""
        shown = self._shown[n]
        if shown is _NOT_YET:
            rule, original = self._rules[n], self.recordings[n].interaction.request
            if self.redact is not None:
                redacted = _same_json(self.redact(original), original)
                reshape = self.reshape and not rule.strict
                recorded = _as_compared(redacted, rule.ignore, reshape, self._apis[n])
            else:
                redacted, recorded = original, self._compared[n]
            shown = self._shown[n] = recorded.with_json(redacted.path, recorded.body, recorded.json())
        return shown  # type: ignore[no-any-return]

    def _differences(self, request: Request, asked: _Asked, shown_as: _Asked, n: int) -> tuple[list[str], int]:
        """How request and recording n disagree: what each disagreeing matcher says, shown on both sides as
        `redact` has them, and how many differences their bodies have when a matcher that reads them (`body`, a
        protocol's own) is one of them."""
        rule = self._rules[n]
        here, there = asked.compared(rule), self._compared[n]
        parts: list[str] = []
        body_diffs = 0
        now, then = last_event_id(request), self._last_ids[n]
        if now != then and not (then is None and self.resume):
            parts.append(f"Last-Event-ID is {_show_id(now)}, recorded {_show_id(then)}")
        # What the texts show: both sides redacted alike, with the paths they came with (not shapeless), and
        # the fields the rule ignores cut from both.
        said_of: tuple[Request, Request] | None = None
        for name, matcher, agrees in zip(rule.names, rule.matchers, rule.agrees, strict=True):
            if agrees(here, there):
                continue
            if said_of is None:
                asked_as = shown_as.compared(rule)
                said_of = (asked_as.with_json(shown_as.request.path, asked_as.body, asked_as.json()), self._shown_as(n))
            said = matcher(*said_of)
            parts.append(said if said is not None else f"{name} differs in secrets only")
            if name == MatchOn.BODY or name not in BUILT_IN:  # a protocol's matcher (MCP's `jsonrpc`) reads the body
                body_diffs = len(body_differences(here, there))
        misfit = None if parts else self._misfit(asked, n)  # the matchers' differences say why, when they differ
        return (parts if misfit is None else [misfit]), body_diffs


class _Asked:
    """A request as one `find` (or `explain_miss`) reads it, each part worked out once, when first needed:
    the API its path names, whether it asks for a stream, and the request as each rule compares it (rules
    differ in the fields they ignore)."""

    __slots__ = ("_api", "_compared", "_phase", "_sent", "matcher", "request")  # one for every request

    def __init__(self, request: Request, matcher: Matcher, api: Dialect | None = _NOT_YET) -> None:
        self.request = request
        self.matcher = matcher
        self._api: Dialect | None = api  # `for_request`'s, when the caller knows it
        self._compared: dict[tuple[tuple[tuple[str, ...], ...], bool], Request] = {}
        self._phase: Phase | None = _NOT_YET
        self._sent = (-1, False)  # the recording last asked about in `sent_as`, and the answer

    def api(self) -> Dialect | None:
        """The API of the request (`for_request`), looked up once."""
        if self._api is _NOT_YET:
            self._api = for_request(self.request)
        return self._api

    def stream(self) -> bool | None:
        """Whether it asks for a stream (see `asks_for_stream`)."""
        return _asks_for_stream(self.request, self.api())

    def phase(self) -> Phase | None:
        """Its phase (see `Phase`); None when it has none. Read from recording n's when it was sent as that one
        was (`sent_as`, the last asked: most replays send what was recorded), else worked out from its body."""
        if self._phase is _NOT_YET:
            n, same = self._sent
            self._phase = self.matcher._phase(n) if same else self.matcher._phase_of(self.api(), self.request)
        return self._phase

    def sent_as(self, n: int) -> bool:
        """Whether it was sent as recording n's request was, to what reads it: the same API, path and body bytes
        (whatever its headers, method and query)."""
        if self._sent[0] != n:
            matcher = self.matcher
            recorded = matcher.recordings[n].interaction.request
            request = self.request
            same = request.body == recorded.body and request.path == recorded.path and self.api() is matcher._apis[n]
            self._sent = (n, same)
        return self._sent[1]

    def compared(self, rule: _Rule) -> Request:
        """The request as `rule` compares it."""
        found = self._compared.get(rule.reading)
        if found is None:
            reshape = self.matcher.reshape and not rule.strict
            found = self._compared[rule.reading] = _as_compared(self.request, rule.ignore, reshape, self.api())
        return found


def _phase_key(phase: Phase) -> int:
    """What two phases as close as can be (`Phase.closeness`) share: a hash of every part of them that it
    compares, their conversations as data (most are strings alone: hashed as they are, else as `digest` does)."""
    parts = (phase.answering, phase.tools, phase.choice, phase.named, phase.turns, phase.conversation)
    try:
        return hash(parts)
    except TypeError:  # a list or an object in a turn's content
        return digest(parts)


def _bad_body(request: Request) -> str | None:
    """How a miss names the body of a recorded request to an LLM API when the API answers it 400, whatever it
    says, and so never with another's answer: one that is not a JSON object, or none, sent so (`Content-Length:
    0`, which a recorder keeps). None for any other, and for no body at all without that header: a cassette
    written by hand often gives none, to answer any (see `Matcher._misfit`)."""
    if request.body:
        return None if isinstance(request.json(), dict) else "a body that is not a JSON object"
    return "none, sent so (Content-Length: 0)" if request.header("content-length") == "0" else None


def _as_compared(request: Request, ignore: tuple[tuple[str, ...], ...], reshape: bool, api: Dialect | None) -> Request:
    """The request as the matchers compare it: its JSON value (`json()`) without the ignored fields, nor (with
    `reshape`, in an `api` sse-tape speaks) those that choose the answer's shape, and its path without what
    chooses it (`Protocol.shapeless_path`), as the API names the same call (`Protocol.same_call_path`: Gemini's
    versions); its bytes as they came (serializing the cut value for every request
    was most of what issue 27's reshape added to an instant replay: docs/benchmarks.md). The request itself
    when that changes nothing."""
    shaping = reshape and api is not None
    path = api.same_call_path(request.path) if api is not None else request.path
    path = api.shapeless_path(path) if shaping and api is not None else path
    body = request.body
    parsed = request.json() if body else None
    cut = shaping and isinstance(parsed, dict) and any(name in parsed for name in _SHAPE_FIELDS)
    if parsed is not None and (ignore or cut):
        # The request keeps its parsed body as it is: fields are cut from a copy, parsed anew when ignored
        # fields may lie anywhere inside it (faster than a deep copy), else a copy of the top level.
        copy = _json.parse(body) if ignore else dict(parsed)
        if shaping and isinstance(copy, dict):
            for name in _SHAPE_FIELDS:
                copy.pop(name, None)
        for where in ignore:
            for container, key in reversed(locate(copy, where)):
                del container[key]
        # Its bytes stay as they came: the matchers compare the parsed value (`json()`), which is cut.
        return request.with_json(path, body, copy)
    if path == request.path:
        return request
    return request.with_json(path, body, parsed)


def _same_json(redacted: Request, request: Request) -> Request:
    """`redacted`, knowing its JSON value already when redacting left the body as it was (a large one is slow
    to parse again)."""
    if redacted.body is request.body:
        return redacted.with_json(redacted.path, redacted.body, request.json())
    return redacted


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
