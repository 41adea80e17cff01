"""Journal entries of the requests a recording does not simply answer: a miss, an injected fault, another
responder's answer (the model list, a background response's). Apart from `journal`, and imported where one
is made, so that a server whose requests all replay defines none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .journal import Entry

__all__ = ["Answered", "FaultInjected", "Miss", "Missed"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Answered(Entry):
    """A responder other than replay and forwarding answered the request (the model list, say): `what` it said."""

    kind: ClassVar[str] = "answered"
    method: str
    path: str
    status: int
    what: str

    def line(self) -> str:
        return f"{self.method} {self.path} -> {self.status} {self.what}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Missed(Entry):
    """Nothing answered the request; `reason` names the closest recordings and how each differs."""

    kind: ClassVar[str] = "missed"
    method: str
    path: str
    status: int
    reason: str

    def line(self) -> str:
        return f"{self.method} {self.path} -> {self.status} {self.reason}"


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultInjected(Entry):
    """A fault changed the response: which one, and what it did."""

    kind: ClassVar[str] = "fault"
    method: str
    path: str
    fault: str
    what: str
    recording: str | None = None

    def line(self) -> str:
        return f"fault {self.fault}: {self.what} -> {self.method} {self.path} (request {self.request})"


@dataclass(frozen=True, slots=True)
class Miss:
    """A request nothing answered, and why."""

    request: int
    method: str
    path: str
    reason: str
