"""The replay state in Redis: `RedisStore`, so that several servers answer as one.

N `sse-tape serve` processes (or `--workers N`) given the same Redis (`--state
redis://host:6379/0`) count in one place: a recording's plays and the turns of
equally good ones, each fault's requests (`times=`, `p=`'s seeded chance), the
requests received, the misses, what the protocols' responders keep (the
Responses API's background responses, A2A's task streams), the faults and
seed as last set (at a server's start, or through any server's control: the
others take them at their next request), and the journal's entries (each
server's a batch at a time: `journal.Journal`'s `share`; a batch made before
a reset another server was asked for is dropped, as the reset forgot what
came before it: each reset counts a generation, which a server learns with
each request's number). Each operation of
`ReplayStore` is one Redis round trip (several commands in a pipeline where it
needs them), each atomic on its own, so that two servers never count the same
request twice; one that must read and write in one step is a Lua script
(`claim`: the check that a recording never played and its play, so that two
servers never both play it). A request received (`add_received`) goes with
the next operation that writes (a play, a claim, a miss, a batch of journal
entries, a snapshot), so that a replayed stream costs two round trips, not
three.

Where Redis does not answer, each operation raises `StateError`: the server
answers that request with a 503, or, where its answer has begun, closes its
connection where it is, in one log line.

What responders keep is pickled into Redis: whoever may write to that Redis
may run code in the servers that read it. Give a Redis of your own.

Needs redis-py (`pip install 'sse-tape[redis]'`).
"""

from __future__ import annotations

import functools
import json
import pickle
import time
from collections.abc import (
    Callable,
    Collection,
    ItemsView,
    Iterable,
    Iterator,
    KeysView,
    Mapping,
    MutableMapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, TypeVar

import msgpack

from ._exceptions import ConfigError, StateError
from .cassette import Request
from .journal import Miss
from .redaction import shown_url
from .state import FaultKey, State

if TYPE_CHECKING:  # redis-py is an optional dependency: imported where a store is made
    import redis

__all__ = ["RedisStore"]


F = TypeVar("F", bound=Callable[..., Any])

_CLAIM = """
-- RedisStore.claim: the first recording id never played, counted as played, in one step (a script runs whole,
-- alone). KEYS: the plays, the recordings answered, the requests received. ARGV: how many of the last answered
-- and received to keep, how many ids, the ids in order, then the requests received not sent yet.
local keep, count = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = count + 3, #ARGV, 1000 do  -- (a thousand at a time: Lua's unpack has a limit)
    redis.call('RPUSH', KEYS[3], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
if #ARGV > count + 2 then
    redis.call('LTRIM', KEYS[3], -keep, -1)
end
for i = 3, count + 2 do
    if redis.call('HSETNX', KEYS[1], ARGV[i], 1) == 1 then  -- a count is never 0: missing is never played
        redis.call('RPUSH', KEYS[2], ARGV[i])
        redis.call('LTRIM', KEYS[2], -keep, -1)
        return ARGV[i]
    end
end
return false
"""

_BUMP = """
-- RedisStore.count (a fault asked for in a header) and note_injected: one more in a hash of counts, which keeps
-- the last `keep` distinct fields counted: the one counted longest ago goes (and starts over if it comes again).
-- KEYS: the hash, a sorted set of its fields by when each was last counted. ARGV: the field, keep.
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
redis.call('ZADD', KEYS[2], last[2] and tonumber(last[2]) + 1 or 0, ARGV[1])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[2])
if over > 0 then
    local gone = redis.call('ZPOPMIN', KEYS[2], over)
    for i = 1, #gone, 2 do
        redis.call('HDEL', KEYS[1], gone[i])
    end
end
return n
"""

_RESET = """
-- RedisStore.reset: the store's keys and every hash a responder keeps (named in a set) but those to keep, gone in
-- one step, so that nothing kept at the same moment outlives the reset unnamed, and no other server ever finds
-- what is kept gone; the reset's generation one more, which it returns. KEYS: the generation, the store's keys,
-- that set last. ARGV: the prefix of a responder's hash, then the responders' keys whose hashes stay.
local keep = {}
for i = 2, #ARGV do
    keep[ARGV[i]] = true
end
for _, key in ipairs(redis.call('SMEMBERS', KEYS[#KEYS])) do
    if not keep[key] then
        redis.call('DEL', ARGV[1] .. key)
        redis.call('SREM', KEYS[#KEYS], key)
    end
end
redis.call('DEL', unpack(KEYS, 2, #KEYS - 1))
return redis.call('INCR', KEYS[1])
"""

_APPEND = """
-- RedisStore.add_entries: journal entries appended, the last `keep` kept, unless a reset came since the server
-- that made them last heard of one (they belong to what it forgot); with them, the requests received not sent
-- yet. Returns the reset's generation. KEYS: the journal, the generation, the requests received. ARGV: the
-- generation the server knows, how many entries to keep, how many requests received, how many entries, the
-- entries, then the requests.
local generation = tonumber(redis.call('GET', KEYS[2]) or '0')
local count = tonumber(ARGV[4])
if generation == tonumber(ARGV[1]) and count > 0 then
    for i = 5, count + 4, 1000 do  -- (a thousand at a time: Lua's unpack has a limit)
        redis.call('RPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, count + 4)))
    end
    redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
end
if #ARGV > count + 4 then
    for i = count + 5, #ARGV, 1000 do
        redis.call('RPUSH', KEYS[3], unpack(ARGV, i, math.min(i + 999, #ARGV)))
    end
    redis.call('LTRIM', KEYS[3], -tonumber(ARGV[3]), -1)
end
return generation
"""


_SETDEFAULT = """
-- _Kept.setdefault: the value kept under a field, or, where there is none, the one given, kept there (and the hash
-- named in the set of those responders keep, for a reset), in one step: nothing deletes the field between the two.
-- Returns false where it kept the one given. KEYS: the hash, that set. ARGV: the field, the value, the hash's key.
redis.call('SADD', KEYS[2], ARGV[3])
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
    return false
end
return redis.call('HGET', KEYS[1], ARGV[1])
"""


def _answered(operation: F) -> F:
    """`operation`, raising `StateError` where Redis fails (gone, or too slow to answer)."""

    @functools.wraps(operation)
    def wrapped(self: RedisStore | _Kept, *args: Any, **kwargs: Any) -> Any:
        try:
            return operation(self, *args, **kwargs)
        except self.failures as exc:
            raise StateError(
                f"the replay state's Redis at {self.shown} does not answer ({type(exc).__name__})"
            ) from None

    return wrapped  # type: ignore[return-value]


class RedisStore:
    """A `ReplayStore` in Redis at `url` (`redis://host:port/db`, `rediss://`, `unix://`), its keys named
    from `prefix`: servers given the same URL and prefix share their replay state.

    What grows with traffic is bounded in count, not in bytes: the last `keep` requests received (bodies and
    all) and recordings answered, the counts of the last `keep` distinct faults asked for in request headers
    and applied (one counted longest ago starts over if it comes again), the last `keep_misses` misses, the
    last `keep_entries` journal entries. What grows with the cassettes (the plays, the turns) or the faults set
    on the servers is not trimmed. A URL Redis does not answer at, or no redis-py, is a `ConfigError`.
    """

    shared = True
    """Several servers share it: it keeps their journal entries too."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "sse-tape:",
        keep: int = 1_000,
        keep_misses: int = 1_000,
        keep_entries: int = 10_000,
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.keep = keep
        self.keep_misses = keep_misses
        self.keep_entries = keep_entries
        self._redis, self.failures = _connect(url)
        """What redis-py raises when Redis fails: each operation raises `StateError` in its place."""
        self.shown = shown_url(url)
        """The URL as messages show it: without its password."""
        self._unsent: list[bytes] = []  # requests received, packed, not sent yet (see `_send`)
        names = ("requests", "received", "answered", "plays", "turns", "placed", "asked", "injected")
        (
            self._requests,
            self._received,
            self._answered,
            self._plays,
            self._turns,
            self._placed,
            self._asked,
            (self._injected),
        ) = (prefix + name for name in names)
        self._misses, self._missed, self._kept_keys = prefix + "misses", prefix + "missed", prefix + "kept"
        self._settings, self._version = prefix + "settings", prefix + "settings-version"
        self._journal, self._generation = prefix + "journal", prefix + "generation"
        try:  # the reset's generation as this server last heard it (see `add_entries`)
            self._known = int(self._redis.get(self._generation) or 0)
        except self.failures as exc:
            raise ConfigError(f"state {self.shown}: Redis does not answer there ({type(exc).__name__})") from None
        self._heard = 0.0  # when it heard of the last reset it knows (the time of journal entries, in Unix seconds)
        self._latest: int | None = None  # the settings' version as Redis last said it
        self._claim = self._redis.register_script(_CLAIM)
        self._bump = self._redis.register_script(_BUMP)
        self._reset = self._redis.register_script(_RESET)
        self._append = self._redis.register_script(_APPEND)
        self.setdefault_script = self._redis.register_script(_SETDEFAULT)
        """`_Kept.setdefault`'s script."""
        # When each fault asked for and applied was last counted: the counts kept are of the last `keep`.
        self._asked_order, self._injected_order = prefix + "asked-order", prefix + "injected-order"
        self._taken: int | None = None  # the version of the settings this server has (its own or taken)

    @property
    def redis(self) -> redis.Redis:
        """The client it talks to Redis with (a pool that starts anew in a forked worker)."""
        return self._redis

    @_answered
    def next_request(self) -> int:
        pipe = self._redis.pipeline(transaction=False)
        pipe.incr(self._requests)
        pipe.get(self._version)  # in the same round trip: whether another server set new faults,
        pipe.get(self._generation)  # and whether one reset the state
        number, version, generation = pipe.execute()
        self._latest = int(version) if version is not None else None
        self._hear(int(generation or 0))
        return int(number)

    @_answered
    def requests(self) -> int:
        return int(self._redis.get(self._requests) or 0)

    @_answered
    def add_received(self, request: Request) -> None:
        packed = msgpack.packb(
            [request.method, request.path, request.query, [list(h) for h in request.headers], request.body]
        )
        self._unsent.append(packed)  # sent with the next operation that writes (see `_send`): a round trip less

    @_answered
    def next_turn(self, key: str) -> int:
        return int(self._redis.hincrby(self._turns, key, 1)) - 1

    @_answered
    def played(self, recording_id: str) -> None:
        pipe = self._redis.pipeline(transaction=False)
        pipe.hincrby(self._plays, recording_id, 1)
        pipe.rpush(self._answered, recording_id)
        pipe.ltrim(self._answered, -self.keep, -1)
        self._send(pipe)

    @_answered
    def plays(self, recording_id: str) -> int:
        found = self._redis.hget(self._plays, recording_id)
        return int(found) if found is not None else 0

    @_answered
    def claim(self, recording_ids: Sequence[str]) -> str | None:
        unsent = self._unsent  # sent in the script: one round trip (see `_send`)
        keys = [self._plays, self._answered, self._received]
        found = self._claim(keys=keys, args=[self.keep, len(recording_ids), *recording_ids, *unsent])
        del unsent[:]
        return _text(found) if found is not None else None

    @_answered
    def count(self, fault_key: FaultKey) -> int:
        if isinstance(fault_key, int):
            return int(self._redis.hincrby(self._placed, str(fault_key), 1)) - 1
        return int(self._bump(keys=[self._asked, self._asked_order], args=[fault_key, self.keep])) - 1

    @_answered
    def restart_counts(self) -> None:
        self._redis.delete(self._placed)

    @_answered
    def note_injected(self, spec: str) -> None:
        self._bump(keys=[self._injected, self._injected_order], args=[spec, self.keep])

    @_answered
    def share_settings(self, faults: Sequence[str], seed: int) -> None:
        pipe = self._redis.pipeline(transaction=True)
        pipe.set(self._settings, json.dumps({"faults": list(faults), "seed": seed}))
        pipe.incr(self._version)
        self._taken = self._latest = int(pipe.execute()[1])

    @_answered
    def settings(self) -> tuple[tuple[str, ...], int] | None:
        if self._latest == self._taken:
            return None
        pipe = self._redis.pipeline(transaction=True)
        pipe.get(self._settings)
        pipe.get(self._version)
        settings, version = pipe.execute()
        self._taken = self._latest = int(version) if version is not None else None
        if settings is None:
            return None
        found = json.loads(settings)
        return tuple(found["faults"]), int(found["seed"])

    @_answered
    def add_miss(self, miss: Miss) -> None:
        pipe = self._redis.pipeline(transaction=False)
        pipe.rpush(self._misses, msgpack.packb([miss.request, miss.method, miss.path, miss.reason]))
        pipe.ltrim(self._misses, -self.keep_misses, -1)
        pipe.incr(self._missed)
        self._send(pipe)

    def kept(self, key: str) -> MutableMapping[str, Any]:
        return _Kept(self, self._kept_keys, f"{self.prefix}kept:{key}", key)

    @_answered
    def add_entries(self, entries: Sequence[Mapping[str, Any]]) -> None:
        # Those made before this server heard of the last reset belong to what it forgot; a reset it has not
        # heard of yet, the script sees. One script, not a pipeline, with the requests received not sent yet:
        # a pipeline with a script asks Redis first whether it has the script, a round trip more.
        made = [json.dumps(entry) for entry in entries if entry.get("time", 0) >= self._heard]
        unsent = self._unsent
        if not made and not unsent:
            return
        keys = [self._journal, self._generation, self._received]
        args: list[int | str | bytes] = [self._known, self.keep_entries, self.keep, len(made), *made, *unsent]
        generation = self._append(keys=keys, args=args)
        del unsent[:]
        self._hear(int(generation))

    @_answered
    def entries(self, limit: int | None) -> list[Mapping[str, Any]]:
        if limit is not None and limit <= 0:
            return []
        start = -limit if limit is not None else 0
        found = [json.loads(entry) for entry in self._redis.lrange(self._journal, start, -1)]
        return sorted(found, key=lambda entry: entry.get("time", 0))  # each server's batches, in one order

    @_answered
    def snapshot(self) -> State:
        if self._unsent:
            self._send(self._redis.pipeline(transaction=False))
        pipe = self._redis.pipeline(transaction=True)  # every part at the same moment
        pipe.get(self._requests)
        pipe.lrange(self._received, 0, -1)
        pipe.lrange(self._answered, 0, -1)
        pipe.hgetall(self._plays)
        pipe.lrange(self._misses, 0, -1)
        pipe.get(self._missed)
        pipe.hgetall(self._injected)
        pipe.hgetall(self._placed)
        pipe.hgetall(self._asked)
        pipe.smembers(self._kept_keys)
        pipe.get(self._version)
        requests, received, answered, plays, misses, missed, injected, placed, asked, kept_keys, version = (
            pipe.execute()
        )
        self._latest = int(version) if version is not None else None
        kept: dict[str, tuple[str, ...]] = {}
        if kept_keys:
            read = self._redis.pipeline(transaction=False)
            keys = sorted(k.decode() for k in kept_keys)
            for key in keys:
                read.hkeys(f"{self.prefix}kept:{key}")
            for key, ids in zip(keys, read.execute(), strict=True):
                if ids:
                    kept[key] = tuple(i.decode() for i in ids)
        counts: dict[FaultKey, int] = {int(k): int(n) for k, n in placed.items()}
        counts.update({k.decode(): int(n) for k, n in asked.items()})
        return State(
            requests=int(requests or 0),
            received=tuple(_request(packed) for packed in received),
            answered=tuple(rid.decode() for rid in answered),
            plays={rid.decode(): int(n) for rid, n in plays.items()},
            misses=tuple(Miss(*msgpack.unpackb(packed)) for packed in misses),
            missed=int(missed or 0),
            injected={spec.decode(): int(n) for spec, n in injected.items()},
            counts=counts,
            kept=kept,
        )

    @_answered
    def reset(self, keep: Collection[str] = ()) -> None:
        names = (self._requests, self._received, self._answered, self._plays, self._turns, self._placed)
        others = (self._asked, self._injected, self._asked_order, self._injected_order, self._misses, self._missed)
        keys = [self._generation, *names, *others, self._journal, self._kept_keys]
        self._hear(int(self._reset(keys=keys, args=[f"{self.prefix}kept:", *keep])))
        self._unsent.clear()

    def _hear(self, generation: int) -> None:
        """Note the reset's generation Redis said: a newer one than this server knew is a reset since, and the
        journal entries made before now belong to what it forgot."""
        if generation != self._known:
            self._known, self._heard = generation, time.time()

    def _send(self, pipe: Any) -> list[Any]:
        """Send `pipe` with the requests received since the last write (`add_received`) after its own
        commands; its own commands' results."""
        unsent = self._unsent
        if unsent:
            pipe.rpush(self._received, *unsent)
            pipe.ltrim(self._received, -self.keep, -1)
        results: list[Any] = pipe.execute()
        if unsent:
            del unsent[:]
            del results[-2:]
        return results


class _Kept(MutableMapping[str, Any]):
    """What a responder keeps, in a Redis hash: each value pickled. A value read is a copy: a responder that
    changes one sets it again. Whether one is kept (`in`, `keys() & items`) is asked without reading it, several
    are set in one round trip (`update`), all are read in one (`items()`), several deleted in one (`discard`),
    and `setdefault` is one step."""

    def __init__(self, store: RedisStore, index: str, name: str, key: str) -> None:
        self._redis = store.redis
        self._setdefault = store.setdefault_script
        self.failures, self.shown = store.failures, store.shown
        self._index = index  # the set of the responders' keys that keep anything, for `reset` and `snapshot`
        self._name = name
        self._key = key

    @_answered
    def __getitem__(self, item: str) -> Any:
        found = self._redis.hget(self._name, item)
        if found is None:
            raise KeyError(item)
        return _unpickled(found)

    def __setitem__(self, item: str, value: Any) -> None:
        self._set({item: self._packed(item, value)})

    @_answered
    def __delitem__(self, item: str) -> None:
        if not self._redis.hdel(self._name, item):
            raise KeyError(item)

    @_answered
    def __contains__(self, item: object) -> bool:
        return isinstance(item, str) and bool(self._redis.hexists(self._name, item))

    def keys(self) -> KeysView[str]:
        """The keys, as a view whose `&` (which of these are kept?) is one round trip."""
        return _Keys(self)

    @_answered
    def present(self, items: Iterable[Any]) -> set[str]:
        """Which of `items` are kept, in one round trip (`keys() & items`)."""
        asked = [item for item in items if isinstance(item, str)]
        pipe = self._redis.pipeline(transaction=False)
        for item in asked:
            pipe.hexists(self._name, item)
        return {item for item, found in zip(asked, pipe.execute(), strict=True) if found}

    def setdefault(self, item: str, default: Any = None) -> Any:
        """The value kept under `item`; where there is none, `default`, kept there: in one step (a script), so
        that of servers setting one item at the same moment, one sets it and the others read it (and none finds
        it deleted between the two)."""
        found = self._claim(item, self._packed(item, default))
        return default if found is None else _unpickled(found)

    @_answered
    def _claim(self, item: str, packed: bytes) -> bytes | None:
        # The value and its key's name together: a reset takes both.
        found: bytes | None = self._setdefault(keys=[self._name, self._index], args=[item, packed, self._key])
        return found

    @_answered
    def items(self) -> ItemsView[str, Any]:
        """What it keeps, each key with its value, read in one round trip (`HGETALL`): a copy."""
        return {_text(k): _unpickled(v) for k, v in self._redis.hgetall(self._name).items()}.items()

    @_answered
    def discard(self, items: Iterable[str]) -> None:
        """Delete `items`, those not kept passed over, in one round trip (`HDEL`; see `state.forget`)."""
        fields = list(items)
        if fields:
            self._redis.hdel(self._name, *fields)

    def update(self, other: Any = (), /, **more: Any) -> None:
        """Set several values in one round trip (each pickled, as `__setitem__` does)."""
        values = dict(other, **more)
        if not values:
            return
        packed = {item: self._packed(item, value) for item, value in values.items()}
        self._set(packed)

    @_answered
    def _set(self, packed: Mapping[str, bytes]) -> None:
        pipe = self._redis.pipeline(transaction=True)  # the values and their key's name together: a reset takes all
        values: dict[Any, Any] = dict(packed)  # (redis-py's types want a wider key than `str`)
        pipe.hset(self._name, mapping=values)
        pipe.sadd(self._index, self._key)
        pipe.execute()

    def _packed(self, item: str, value: Any) -> bytes:
        """`value` pickled; what cannot be is the store's failure (`StateError`), said as such, not a 500."""
        try:
            return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # a live object a responder keeps
            raise StateError(f"the replay state cannot keep {self._key}'s {item!r}: {exc}") from None

    @_answered
    def __iter__(self) -> Iterator[str]:
        return iter([_text(k) for k in self._redis.hkeys(self._name)])

    @_answered
    def __len__(self) -> int:
        return int(self._redis.hlen(self._name))


class _Keys(KeysView[str]):
    """The keys of what a responder keeps in Redis: `&` asks Redis which of the others are kept, in one round
    trip, without listing them all."""

    def __init__(self, kept: _Kept) -> None:
        super().__init__(kept)
        self._kept = kept

    def __and__(self, other: Iterable[Any]) -> set[str]:
        return self._kept.present(other)


def _connect(url: str) -> tuple[redis.Redis, type[Exception]]:
    """A client of the Redis at `url`, once it has answered, and what its failures raise; a `ConfigError`
    saying why not (the URL shown without its password)."""
    shown = shown_url(url)
    try:
        import redis
    except ImportError:
        raise ConfigError(f"state {shown}: needs redis-py: pip install 'sse-tape[redis]'") from None
    try:
        client = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)
        client.ping()
    except ValueError:
        raise ConfigError(f"state {shown}: not a Redis URL") from None
    except redis.RedisError as exc:
        raise ConfigError(f"state {shown}: Redis does not answer there ({type(exc).__name__})") from None
    return client, redis.RedisError


def _text(value: bytes | str) -> str:
    """A Redis key or member as text (the client answers bytes)."""
    return value.decode() if isinstance(value, bytes) else value


def _unpickled(found: bytes | str) -> Any:
    """A value a responder kept, as it was: what these servers wrote (see the module on trusting Redis)."""
    return pickle.loads(found if isinstance(found, bytes) else found.encode())


def _request(packed: bytes) -> Request:
    method, path, query, headers, body = msgpack.unpackb(packed)
    return Request(method, path, query, tuple((name, value) for name, value in headers), body)
