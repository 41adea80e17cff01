"""Which faults apply to a request: by path, by `times`, and by seeded chance."""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from ..cassette import Request
from ..dialects import Protocol
from ..state import ReplayStore
from .model import Fault
from .registry import parse_fault

__all__ = ["Injector"]


class Injector:
    """Decides, per request, which faults apply: by path, by `times`, and by seeded chance.

    `times` and chance count the requests each fault has seen, in the replay
    store: a fault set on the server by its place in the list, a fault asked
    for in a request header by its text. Setting new faults starts the
    server's counts over. The faults and the seed, as they are set, are
    shared through the store with the other servers that share it (`refresh`
    takes theirs).
    """

    def __init__(self, faults: Iterable[Fault], seed: int, state: ReplayStore) -> None:
        self.seed = seed
        """What every random choice of the faults is drawn from."""
        self.state = state
        self.faults: list[Fault] = list(faults)
        self._share()

    def set(self, faults: Iterable[Fault]) -> None:
        """Replace the server's faults, and start their counts over."""
        self.faults = list(faults)
        self.state.restart_counts()
        self._share()

    def add(self, faults: Iterable[Fault]) -> None:
        """Add faults after the server's, leaving the counts of those already set as they are."""
        self.faults += faults
        self._share()

    def reseed(self, seed: int) -> None:
        """Draw the faults' random choices from `seed` from now on."""
        self.seed = seed
        self._share()

    def refresh(self) -> None:
        """Take the faults and seed another server sharing the store set since (`ReplayStore.settings`)."""
        changed = self.state.settings()
        if changed is not None:
            specs, self.seed = changed
            self.faults = [parse_fault(spec) for spec in specs]

    def _share(self) -> None:
        self.state.share_settings([fault.spec for fault in self.faults], self.seed)

    def choose(
        self, request: Request, dialect: Protocol, extra: Sequence[Fault] = ()
    ) -> tuple[list[Fault], random.Random | None]:
        """The faults that apply to this request of `dialect`'s, and the generator for their random choices.

        The generator is seeded by the seed and the faults chosen with their
        counts, so the same seed gives the same choices; None when no fault applies.
        """
        chosen: list[Fault] = []
        labels: list[str] = []
        state = self.state
        placed = len(self.faults)
        for n, fault in enumerate([*self.faults, *extra]):
            if not fault.applies_to(request, dialect):
                continue
            turn = state.count(n if n < placed else fault.spec)
            if fault.times is not None and turn >= fault.times:
                continue
            if fault.p < 1 and random.Random(f"{self.seed}:{fault.spec}:{turn}").random() >= fault.p:
                continue
            chosen.append(fault)
            labels.append(f"{fault.spec}:{turn}")
        if not chosen:
            return [], None
        return chosen, random.Random(f"{self.seed}:" + "|".join(labels))
