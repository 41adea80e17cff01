"""`Index`: the recordings a request may agree with, found by key, not by comparing it with each.

Recordings are grouped by their rule (the matchers and ignored fields of
their cassette, see `finder`) and by which of its built-in matchers can key
them (`matchers.KEYS`: method, path, query, body; not one whose recorded
part holds a redacted value, `matchers.WILD`, nor a protocol's own matcher).
Within a group, each recording sits under the hash of its keyed parts. A
request is keyed once for each group, as that group's rule compares it, and
gets the recordings under its key: an exact hit is found in the same time
whatever the number loaded. What the index gives is a superset, in the order
the recordings were added: every recording that agrees is in it, and the
matchers still decide (two parts may share a hash). A group keyed by no
part (a rule of protocol matchers only, a recording redacted everywhere it
is compared) gives all its recordings: they are compared one by one, as
before there was an index, and only they.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from ..cassette import Request
from ..dialects.protocol import RequestMatcher
from .matchers import KEYS, WILD

__all__ = ["FEW", "Index"]

R = TypeVar("R", bound=Hashable)

FEW = 32
"""A group of at most this many recordings is compared whole, unkeyed."""


class _Group(Generic[R]):
    """The recordings of one rule keyed by the same matchers, by the hash of their keys."""

    __slots__ = ("few", "keyed", "rule", "slots")

    def __init__(self, rule: R, keyed: tuple[RequestMatcher, ...]) -> None:
        self.rule = rule
        self.keyed = keyed
        self.few: list[int] | None = []
        """Every recording of the group while it holds at most `FEW`: comparing those costs less than keying the
        request (a large body's key walks all of it in Python; comparing it is C's `==`)."""
        self.slots: dict[int, int | list[int]] = {}
        """The recordings under each hash: one alone as its number (most are alone: a list each would be
        memory, and objects for the collector to walk)."""


class Index(Generic[R]):
    """Recordings, by number, under the keys of the parts their rules compare (see the module)."""

    def __init__(self) -> None:
        self._groups: dict[tuple[R, tuple[RequestMatcher, ...]], _Group[R]] = {}

    def add(self, number: int, rule: R, matchers: Sequence[RequestMatcher], recorded: Request) -> None:
        """Put recording `number` (greater than any added before) in the index: `rule` is how it is matched,
        `matchers` that rule's matchers, and `recorded` its request as that rule compares it."""
        keyed = tuple(m for m in matchers if m in KEYS and not WILD[m](recorded))
        group = self._groups.get((rule, keyed))
        if group is None:
            group = self._groups[rule, keyed] = _Group(rule, keyed)
        if group.few is not None:
            group.few.append(number)
            if len(group.few) > FEW:
                group.few = None
        key = _key(keyed, recorded)
        slot = group.slots.get(key)
        if slot is None:
            group.slots[key] = number
        elif isinstance(slot, int):
            group.slots[key] = [slot, number]
        else:
            slot.append(number)

    def candidates(self, compared: Callable[[R], Request]) -> list[int]:
        """The recordings a request may agree with, in the order they were added: `compared` gives the request
        as a rule compares it."""
        found: list[int] = []
        many = False
        for group in self._groups.values():
            slot = group.few if group.few is not None else group.slots.get(_key(group.keyed, compared(group.rule)))
            if slot is None:
                continue
            many = many or bool(found)
            if isinstance(slot, int):
                found.append(slot)
            else:
                found.extend(slot)
        return sorted(found) if many else found


def _key(keyed: tuple[RequestMatcher, ...], request: Request) -> int:
    """The hash of the parts of `request` the `keyed` matchers compare (the same for every request when none)."""
    return hash(tuple(KEYS[m](request) for m in keyed))
