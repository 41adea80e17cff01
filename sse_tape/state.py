"""The replay state: what replay counts and keeps between requests, behind a store.

Replay depends on a few counters and lists: the number of each request, the
turns of equally good matches (so that repeated identical requests get their
recordings in order), how often each recording has played (and, where each
plays once, which one a request takes: `claim`, the check and the play in one
step), how many requests each fault has seen (for `times=` and `p=`), how
often each was applied, the misses, the requests received, and what the
responders the protocols bring keep between requests (the Responses API's
background responses). They sit behind `ReplayStore`, a handful of
operations keyed by stable values (a recording by its `recording_id`, a fault
by its place or its text), never by an object of this process: so
`MemoryStore`, the default, can give way to a store shared by several
processes without touching replay (`state_redis.RedisStore`). A shared store
also hands the faults and seed set on one server to the others
(`share_settings`, `settings`), and keeps their journal entries (`shared`,
`add_entries`).

Only the server's own parts (the matcher, the injector, the responders)
call a store, on the server's event loop; everything else goes through the
server's `control` (`sse_tape.server.control.Control`).
"""

from __future__ import annotations

import hashlib
from collections import Counter, OrderedDict, deque
from collections.abc import Collection, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .cassette import Recording, Request
from .journal import Miss

__all__ = ["FaultKey", "MemoryStore", "ReplayStore", "State", "forget", "recording_id"]

#: What a fault's counts are kept by: a fault set on the server by its place in the server's list (an `int`),
#: one a request asks for in its header by its text (a `str`).
FaultKey = int | str


def recording_id(recording: Recording) -> str:
    """The id a store knows a recording by: its cassette's name, its place there, and a digest of its request
    (method, path, query and body), such as `openai-chat.toml#2:5f1c0e9a7b3d`.

    It is the same in every process that loads the same cassette, and whenever it is loaded again.
    """
    request = recording.interaction.request
    digest = hashlib.sha256()
    for part in (request.method.encode(), request.path.encode(), request.query.encode(), request.body):
        digest.update(len(part).to_bytes(8, "big"))  # each with its length: no two requests give the same bytes
        digest.update(part)
    return f"{recording.cassette}#{recording.index}:{digest.hexdigest()[:12]}"


@dataclass(frozen=True, slots=True)
class State:
    """What a store holds at one moment (`ReplayStore.snapshot`)."""

    requests: int
    """How many requests arrived."""
    received: tuple[Request, ...]
    """The last requests that arrived, in order, bodies and all (a store may keep the oldest of them without
    their bodies: `MemoryStore`)."""
    answered: tuple[str, ...]
    """The ids of the recordings that answered, in order (one each time one answers)."""
    plays: Mapping[str, int]
    """How many times each recording answered, by id; one that never did is not there."""
    misses: tuple[Miss, ...]
    """The last requests nothing answered, each with why."""
    missed: int
    """How many requests nothing answered: `misses` are the last of them."""
    injected: Mapping[str, int]
    """How many times each fault, by its text, was applied."""
    counts: Mapping[FaultKey, int]
    """How many requests each fault has seen (see `FaultKey`)."""
    kept: Mapping[str, tuple[str, ...]]
    """What the protocols' responders keep, by the key of each (see `ReplayStore.kept`): the keys of what it
    keeps (the Responses API's background responses by id; MCP's sessions by id, each stream a session kept under
    `"<session> <event id>"`, and, a moment, a `"<session> <event id>"` claimed before its stream is set)."""


def forget(kept: MutableMapping[str, Any], keys: Iterable[str]) -> None:
    """Delete `keys` from what a responder keeps (`ReplayStore.kept`), those not kept passed over: in one step
    where the mapping has one (`discard(keys)`: a shared store's, one round trip), else one key at a time (a
    `MemoryStore`'s plain dict)."""
    discard = getattr(kept, "discard", None)
    if discard is not None:
        discard(keys)
        return
    for key in keys:
        kept.pop(key, None)


class ReplayStore(Protocol):
    """What replay counts and keeps between requests (see the module): the operations replay needs.

    A store is called on the server's event loop only, one operation at a time; each operation counts and
    answers at once, so that one shared by several servers can make it atomic.
    """

    @property
    def shared(self) -> bool:
        """Whether several servers may share it: then it keeps their journal entries too (`add_entries`)."""
        ...

    def next_request(self) -> int:
        """Count a request that arrived; returns its number, from 1 since the start or the last reset."""
        ...

    def requests(self) -> int:
        """How many requests arrived since the start or the last reset (`snapshot().requests`, without the
        rest)."""
        ...

    def add_received(self, request: Request) -> None:
        """Keep a request as it arrived, body and all (a store may drop the bodies of the oldest it keeps)."""
        ...

    def next_turn(self, key: str) -> int:
        """How many requests the group of equally good recordings named `key` has answered before this one,
        counting this one."""
        ...

    def played(self, recording_id: str) -> None:
        """Note that a recording answers a request. Nothing waits on it: a store several processes share may
        send it on without waiting for its answer."""
        ...

    def plays(self, recording_id: str) -> int:
        """How many times a recording has answered."""
        ...

    def claim(self, recording_ids: Sequence[str]) -> str | None:
        """The first of `recording_ids` that has never answered (`plays` 0), noted as answering this request (as
        `played` notes it: its plays at 1, its id last of those answered); None, noting nothing, when every one
        has answered. One atomic step, the check with the play: of servers sharing a store that claim at the
        same moment, no two get the same recording (each recording answers once, with `allow_repeats` off)."""
        ...

    def count(self, fault_key: FaultKey) -> int:
        """How many requests a fault has seen before this one, counting this one."""
        ...

    def restart_counts(self) -> None:
        """Start the counts of the faults set on the server (the `int` keys) over, as new faults are set."""
        ...

    def note_injected(self, spec: str) -> None:
        """Count one more application of a fault, by its text."""
        ...

    def share_settings(self, faults: Sequence[str], seed: int) -> None:
        """The server's faults (their texts, in order) and seed, as they are set now (at its start, or through
        its control): a store several servers share hands them to the others (`settings`)."""
        ...

    def settings(self) -> tuple[tuple[str, ...], int] | None:
        """The faults (their texts) and seed another server sharing the store set (`share_settings`) since this
        one last asked, or None: none did (always None for a store of one server)."""
        ...

    def add_miss(self, miss: Miss) -> None:
        """Keep a request nothing answered, with why, and count it (a store may keep only the last ones)."""
        ...

    def kept(self, key: str) -> MutableMapping[str, Any]:
        """What a protocol's responder keeps between requests (the Responses API's background responses, MCP's
        sessions, by id), under its `key`: a mapping the store holds, which a reset empties.

        A value read from a shared store may be a copy: a responder that changes one sets it again. Its
        `setdefault` is one step: of servers setting one item at the same moment, one sets it, and the others
        read it (MCP claims a stream's event ids so). A shared store's mapping also reads all it keeps in one
        round trip (`items()`), counts it without listing it (`len`), and deletes many keys in one
        (`discard(keys)`: see `forget`)."""
        ...

    def add_entries(self, entries: Sequence[Mapping[str, Any]]) -> None:
        """Keep journal entries (as JSON objects: `journal.Entry.to_json`), for every server sharing the store
        to read (`entries`); a store that is not `shared` is never asked (each server's journal is its own)."""
        ...

    def entries(self, limit: int | None) -> list[Mapping[str, Any]]:
        """The last `limit` journal entries kept (`add_entries`; all of them, if None), by every server sharing
        the store, oldest first."""
        ...

    def snapshot(self) -> State:
        """What the store holds now."""
        ...

    def reset(self, keep: Collection[str] = ()) -> None:
        """Start over: every count at zero, nothing received, no misses, nothing kept by a protocol's
        responder but what the responders named in `keep` keep (`kept(key)`), which stays as it is: in one step
        where the store is shared, so that no other server ever finds it gone."""
        ...


class MemoryStore:
    """A `ReplayStore` in this process's memory: the default.

    What grows with traffic is bounded, so that no stream of requests can grow it without bound: by `keep`,
    the last `keep` requests received and recordings answered, and the counts of the last `keep` distinct
    faults asked for in request headers and applied (one seen longest ago starts over if it comes again);
    by `keep_misses`, the last misses (the others are counted); by `keep_bytes`, the requests received: past
    that many bytes of bodies, heads (method, path, query and headers) and all, the oldest requests kept lose
    their bodies (`body` empty; their `Content-Length` header, if they sent one, still says how long it was),
    and past it in heads alone, they go. The newest request is always kept whole. Its `keep` and
    `keep_misses` are `RedisStore`'s, which has no bound in bytes.
    """

    shared = False
    """A store of one server's: its journal is its own."""

    def __init__(self, *, keep: int = 1_000, keep_misses: int = 1_000, keep_bytes: int = 64 * 2**20) -> None:
        self.keep = keep
        self.keep_misses = keep_misses
        self.keep_bytes = keep_bytes
        self._requests = 0
        self._received: deque[Request] = deque()
        self._received_bytes = 0  # what the requests in `_received` hold, heads and bodies
        self._headless = 0  # how many of the oldest requests kept have lost their bodies
        self._answered: deque[str] = deque(maxlen=keep)
        self._plays: Counter[str] = Counter()
        self._turns: dict[str, int] = {}
        self._placed: dict[int, int] = {}  # the server's faults, by place
        self._asked: OrderedDict[str, int] = OrderedDict()  # faults asked for in headers, by text, newest last
        self._injected: Counter[str] = Counter()
        self._misses: deque[Miss] = deque(maxlen=keep_misses)
        self._missed = 0
        self._kept: dict[str, dict[str, Any]] = {}

    def next_request(self) -> int:
        self._requests += 1
        return self._requests

    def requests(self) -> int:
        return self._requests

    def add_received(self, request: Request) -> None:
        received = self._received
        received.append(request)
        self._received_bytes += _size(request)
        if len(received) > self.keep:
            self._received_bytes -= _size(received.popleft())
            self._headless = max(self._headless - 1, 0)
        # Past the bytes kept, the oldest requests lose their bodies first, then go.
        while self._received_bytes > self.keep_bytes and self._headless < len(received) - 1:
            old = received[self._headless]
            if old.body:
                received[self._headless] = Request(old.method, old.path, old.query, old.headers)
                self._received_bytes -= len(old.body)
            self._headless += 1
        while self._received_bytes > self.keep_bytes and len(received) > 1:
            self._received_bytes -= _size(received.popleft())
            self._headless = max(self._headless - 1, 0)

    def next_turn(self, key: str) -> int:
        turn = self._turns.get(key, 0)
        self._turns[key] = turn + 1
        return turn

    def played(self, recording_id: str) -> None:
        self._plays[recording_id] += 1
        self._answered.append(recording_id)

    def plays(self, recording_id: str) -> int:
        return self._plays[recording_id]

    def claim(self, recording_ids: Sequence[str]) -> str | None:
        for rid in recording_ids:
            if not self._plays[rid]:
                self.played(rid)
                return rid
        return None

    def count(self, fault_key: FaultKey) -> int:
        if isinstance(fault_key, int):
            n = self._placed.get(fault_key, 0)
            self._placed[fault_key] = n + 1
            return n
        asked = self._asked
        n = asked.get(fault_key, 0)
        asked[fault_key] = n + 1
        asked.move_to_end(fault_key)
        if len(asked) > self.keep:
            asked.popitem(last=False)
        return n

    def restart_counts(self) -> None:
        self._placed.clear()

    def note_injected(self, spec: str) -> None:
        self._injected[spec] = self._injected.pop(spec, 0) + 1  # last: the one applied longest ago goes first
        if len(self._injected) > self.keep:
            del self._injected[next(iter(self._injected))]

    def share_settings(self, faults: Sequence[str], seed: int) -> None:
        return  # one server: its own are the only ones

    def settings(self) -> tuple[tuple[str, ...], int] | None:
        return None

    def add_miss(self, miss: Miss) -> None:
        self._misses.append(miss)
        self._missed += 1

    def kept(self, key: str) -> MutableMapping[str, Any]:
        found = self._kept.get(key)
        if found is None:
            found = self._kept[key] = {}
        return found

    def add_entries(self, entries: Sequence[Mapping[str, Any]]) -> None:
        return  # never asked: not shared

    def entries(self, limit: int | None) -> list[Mapping[str, Any]]:
        return []  # the server's own journal holds them

    def snapshot(self) -> State:
        counts: dict[FaultKey, int] = {key: n for counted in (self._placed, self._asked) for key, n in counted.items()}
        return State(
            requests=self._requests,
            received=tuple(self._received),
            answered=tuple(self._answered),
            plays=dict(self._plays),
            misses=tuple(self._misses),
            missed=self._missed,
            injected=dict(self._injected),
            counts=counts,
            kept={key: tuple(values) for key, values in self._kept.items()},
        )

    def reset(self, keep: Collection[str] = ()) -> None:
        self._requests = 0
        self._received.clear()
        self._received_bytes = self._headless = 0
        self._answered.clear()
        self._plays.clear()
        self._turns.clear()
        self._placed.clear()
        self._asked.clear()
        self._injected.clear()
        self._misses.clear()
        self._missed = 0
        self._kept = {key: values for key, values in self._kept.items() if key in keep}


def _size(request: Request) -> int:
    """The bytes a request kept holds: its body, and its head (method, path, query, headers) roughly."""
    head = len(request.method) + len(request.path) + len(request.query)
    return head + sum(len(name) + len(value) for name, value in request.headers) + len(request.body)
