"""`Index`: the recordings a request may agree with, found by key, not by comparing it with each.

Recordings are grouped by their rule (the matchers and ignored fields of
their cassette, see `finder`) and by which of its matchers can key them:
the built-in ones (`matchers.KEYS`: method, path, query, body) and a
protocol's that says what it compares (`KeyedMatcher`: MCP's `jsonrpc`, by
the JSON-RPC method and params; A2A's `a2a`, by what a request asks without
the ids its client mints), not one whose recorded part holds a redacted
value (`matchers.WILD`, `KeyedMatcher.wild`).
Within a group, each recording sits under the hash of its keyed parts. A
request is keyed once for each group, as that group's rule compares it, and
gets the recordings under its key (`Hits`): an exact hit is found in the
same time whatever the number loaded. What the index gives is a superset, in
the order the recordings were added: every recording that agrees is in it,
and the matchers still decide (two parts may share a hash). A group keyed by
no part (a rule of matchers that say nothing of what they compare, a
recording redacted everywhere it is compared) gives all its recordings: they are compared one by one, as
before there was an index, and only they.

A rule that keys no body (`method,path`, common for a library of LLM
recordings) puts every recording of a path under one key. Those can be told
apart further by what the finder knows of each (`Hits.split`: its
conversation's phase, see `finder`): the recordings under each key that
holds more than `FEW` are split by a key of the finder's when it has loaded
them (`Index.split`), so that no request waits for all of them to be read
(a server's first request would hold up every other client meanwhile);
those added since, and a smaller key's, are split when a request next asks.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from ..cassette import Request
from ..dialects.protocol import KeyedMatcher, RequestMatcher
from .matchers import KEYS, WILD, digest

__all__ = ["FEW", "Hits", "Index", "Split"]

R = TypeVar("R", bound=Hashable)
K = TypeVar("K", bound=Hashable)

FEW = 32
"""A group of at most this many recordings is compared whole, unkeyed (unless a protocol's matcher keys it)."""

_WHOLE = object()  # the key a group's split of all its recordings (while they are `FEW`) is kept under

Split = dict[Hashable, dict[Hashable, "int | list[int]"]]
"""Recordings by the two parts of a key of the finder's (`Hits.split`): the outer, then the inner; one alone
under a key as its number, more as a list, in the order they were added."""


class _Splitting:
    """The recordings of one slot split by a key (see `Hits.split`), and how many of them it holds so far."""

    __slots__ = ("held", "split")

    def __init__(self) -> None:
        self.split: Split = {}
        self.held = 0

    def catch_up(self, slot: int | list[int], key_of: Callable[[int], tuple[Hashable, Hashable]]) -> Split:
        """The split, with the recordings of `slot` added since it was last asked for put in it."""
        numbers = (slot,) if isinstance(slot, int) else slot
        for n in numbers[self.held :]:
            outer, inner = key_of(n)
            _put(self.split.setdefault(outer, {}), inner, n)
        self.held = len(numbers)
        return self.split


class _Group(Generic[R]):
    """The recordings of one rule keyed by the same matchers, by the hash of their keys."""

    __slots__ = ("few", "keys", "rule", "slots", "splits")

    def __init__(self, rule: R, keyed: tuple[RequestMatcher, ...]) -> None:
        self.rule = rule
        self.keys = tuple(keying[0] for m in keyed if (keying := _keying(m)) is not None)
        """The key of the part each of its keyed matchers compares, of a request as its rule compares it."""
        self.few: list[int] | None = [] if all(m in KEYS for m in keyed) else None
        """Every recording of the group while it holds at most `FEW`: comparing those costs less than keying the
        request (a large body's key walks all of it in Python; comparing it is C's `==`). Never for a group a
        protocol's matcher keys: comparing with one walks both requests in Python, which keying the request
        does once."""
        self.slots: dict[int, int | list[int]] = {}
        """The recordings under each hash: one alone as its number (most are alone: a list each would be
        memory, and objects for the collector to walk)."""
        self.splits: dict[object, _Splitting] = {}
        """Each slot's split (`Hits.split`), by its hash (`_WHOLE`: of `few`), made by `Index.split` or when a
        request first asks."""

    def split(self, key: object, slot: int | list[int], key_of: Callable[[int], tuple[Hashable, Hashable]]) -> Split:
        """The split of the recordings under `key` (`slot` of them), those added since it was last asked for put
        in it (see `Hits.split`)."""
        splitting = self.splits.get(key)
        if splitting is None:
            splitting = self.splits[key] = _Splitting()
        return splitting.catch_up(slot, key_of)


class Hits(Generic[R]):
    """What a request's keys find in an index: for each group, the recordings under the request's key."""

    __slots__ = ("count", "found")

    def __init__(self, found: list[tuple[_Group[R], object, int | list[int]]], count: int) -> None:
        self.found = found
        """Each group with a recording under the request's key, that key, and those recordings."""
        self.count = count
        """How many recordings were found."""

    def numbers(self) -> list[int]:
        """The recordings found, in the order they were added."""
        if len(self.found) == 1:
            slot = self.found[0][2]
            return [slot] if isinstance(slot, int) else list(slot)
        numbers: list[int] = []
        for _, _, slot in self.found:
            if isinstance(slot, int):
                numbers.append(slot)
            else:
                numbers.extend(slot)
        return sorted(numbers)

    def split(self, key_of: Callable[[int], tuple[Hashable, Hashable]]) -> list[Split]:
        """The recordings found, split by `key_of` (a key in two parts, of a recording by its number): one split
        for each group, kept from one request to the next. The same `key_of` must be given every time, and to
        `Index.split` (it is asked once for each recording, the first time either needs it); it must not change
        for a recording."""
        return [group.split(key, slot, key_of) for group, key, slot in self.found]


class Index(Generic[R]):
    """Recordings, by number, under the keys of the parts their rules compare (see the module)."""

    def __init__(self) -> None:
        self._groups: dict[tuple[R, tuple[RequestMatcher, ...]], _Group[R]] = {}

    def add(self, number: int, rule: R, matchers: Sequence[RequestMatcher], recorded: Request) -> None:
        """Put recording `number` (greater than any added before) in the index: `rule` is how it is matched,
        `matchers` that rule's matchers, and `recorded` its request as that rule compares it."""
        keyed = tuple(m for m in matchers if (keying := _keying(m)) is not None and not keying[1](recorded))
        group = self._groups.get((rule, keyed))
        if group is None:
            group = self._groups[rule, keyed] = _Group(rule, keyed)
        if group.few is not None:
            group.few.append(number)
            if len(group.few) > FEW:
                group.few = None
                group.splits.pop(_WHOLE, None)
        _put(group.slots, _key(group.keys, recorded), number)

    def split(self, key_of: Callable[[int], tuple[Hashable, Hashable]]) -> None:
        """Split by `key_of` now (see `Hits.split`, given the same) the recordings under every key that holds more
        than `FEW`, in every group: what a request's `Hits.split` would do the first time it found them."""
        for group in self._groups.values():
            if group.few is not None:
                continue
            for key, slot in group.slots.items():
                if isinstance(slot, list) and len(slot) > FEW:
                    group.split(key, slot, key_of)

    def hits(self, compared: Callable[[R], Request]) -> Hits[R]:
        """The recordings a request may agree with: `compared` gives the request as a rule compares it."""
        found: list[tuple[_Group[R], object, int | list[int]]] = []
        count = 0
        for group in self._groups.values():
            if group.few is not None:
                found.append((group, _WHOLE, group.few))
                count += len(group.few)
                continue
            key = _key(group.keys, compared(group.rule))
            slot = group.slots.get(key)
            if slot is not None:
                found.append((group, key, slot))
                count += 1 if isinstance(slot, int) else len(slot)
        return Hits(found, count)


def _put(slots: dict[K, int | list[int]], key: K, number: int) -> None:
    """Put recording `number` under `key` in `slots`: alone as its number, more as a list in the order they were
    added (see `_Group.slots`)."""
    slot = slots.get(key)
    if slot is None:
        slots[key] = number
    elif isinstance(slot, int):
        slots[key] = [slot, number]
    else:
        slot.append(number)


def _keying(matcher: RequestMatcher) -> tuple[Callable[[Request], Hashable], Callable[[Request], bool]] | None:
    """How a matcher's part of a request is keyed, and whether a recorded request's says nothing (it holds a
    redacted value); None for a matcher that says nothing of what it compares."""
    key = KEYS.get(matcher)
    if key is not None:
        return key, WILD[matcher]
    if isinstance(matcher, KeyedMatcher):
        part = matcher.part
        return (lambda request: digest(part(request))), matcher.wild
    return None


def _key(keys: tuple[Callable[[Request], Hashable], ...], request: Request) -> int:
    """The hash of the parts of `request` its group's matchers key (the same for every request when none)."""
    return hash(tuple(key(request) for key in keys))
