"""The scopes a mock server serves (a test, a module, the session): the fixture of each, and what the tests of
a shared one used of it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["FIXTURES", "SHARED", "ScopeUse", "used_fixtures"]

#: The fixtures whose server a module's or the session's tests share.
SHARED = ("sse_tape_module", "sse_tape_session")
#: Every fixture that yields a server, narrowest first.
FIXTURES = ("sse_tape", "async_sse_tape", *SHARED)


def used_fixtures(fixturenames: Sequence[str]) -> list[str]:
    """The sse-tape fixtures among a test's fixtures (those of the fixtures it uses too), narrowest first."""
    return [name for name in FIXTURES if name in fixturenames]


@dataclass(slots=True, kw_only=True)
class ScopeUse:
    """What a shared server's tests played and injected, to tell what they left undone. Under pytest-xdist,
    one worker's part of a scope spread over the workers: the controller adds the parts up (`merge`)."""

    recordings: dict[str, str]
    """Every recording, by a key that is the same in every worker (its position and label), to its label."""
    played: set[str]
    asked: list[str]
    """The scope's faults that must act at least once (`clear_faults` lets a test drop those yet to act)."""
    injected: Counter[str]
    allow_hint: str
    last_test: str
    """The node id of the test that began last, at `last_began` (Unix seconds): the scope ends after it."""
    last_began: float

    def merge(self, other: ScopeUse) -> None:
        """Add another worker's part of the scope to this one."""
        self.recordings.update(other.recordings)
        self.played |= other.played
        self.asked = [spec for spec in self.asked if spec in other.asked]  # dropped in either part: dropped
        self.injected += other.injected
        if other.last_began > self.last_began:
            self.last_test, self.last_began = other.last_test, other.last_began

    def problems(self) -> list[str]:
        """What the scope's tests left undone: recordings never played, faults asked for that never acted."""
        problems = []
        unplayed = [label for key, label in self.recordings.items() if key not in self.played]
        if unplayed:
            listed = "; ".join(unplayed[:10]) + (" ..." if len(unplayed) > 10 else "")
            problems.append(
                f"{len(unplayed)} recording{'s'[: len(unplayed) != 1]} never played: {listed} "
                f"({self.allow_hint} lets them)"
            )
        return problems + [f"fault {spec!r} was never injected" for spec in self.asked if not self.injected[spec]]

    def to_wire(self) -> dict[str, Any]:
        """As pytest-xdist's `workeroutput` carries it (execnet's plain types)."""
        return {
            "recordings": self.recordings,
            "played": sorted(self.played),
            "asked": self.asked,
            "injected": dict(self.injected),
            "allow_hint": self.allow_hint,
            "last_test": self.last_test,
            "last_began": self.last_began,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ScopeUse:
        """A worker's part as `to_wire` gave it."""
        return cls(
            recordings=dict(data["recordings"]),
            played=set(data["played"]),
            asked=list(data["asked"]),
            injected=Counter(data["injected"]),
            allow_hint=data["allow_hint"],
            last_test=data["last_test"],
            last_began=data["last_began"],
        )
