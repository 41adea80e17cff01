"""Fault injection: every way a stream fails in production, reproducible.

A fault is written `NAME[:value][,key=value,...]`: `status:429`,
`status:code=429,retry_after=7`, `disconnect:50%,mode=reset`, `error:10`.
The bare value is the fault's main key (`code` for status, `at` for error).
Every fault also takes `p=` (the probability, per request, that it applies),
`times=` (only the first N matching requests), `path=` (only requests
whose path ends so) and `rpc=` (only JSON-RPC requests calling this method). Chance is drawn from a generator seeded by the server's
seed, the fault and the count of requests it has seen, so the same seed
gives the same faults at the same positions.

Each fault is one `FaultKind` (`model`): its name, the stage it acts in,
its keys with their types and defaults, and the one act it does to a stream
(an `Act`), whether that stream is replayed, forwarded or made by a model;
`stream` runs the acts.
The kinds live by stage (`before`, `answer`, `events`, `timing`, `wire`,
`end`); `registry` holds them by name and reads a fault from its text;
`injector` chooses the faults of each request; `profiles` names sets of them.
"""

from __future__ import annotations

from .events import corrupted, error_frames
from .injector import Injector
from .model import MAX_HEADER_FAULTS, Act, Fault, FaultKind, Key, Run, Stage
from .profiles import PROFILES, load_profile
from .registry import FAULTS, parse_fault, parse_faults, register
from .stream import FaultedStream, apply

__all__ = [
    "FAULTS",
    "MAX_HEADER_FAULTS",
    "PROFILES",
    "Act",
    "Fault",
    "FaultKind",
    "FaultedStream",
    "Injector",
    "Key",
    "Run",
    "Stage",
    "apply",
    "corrupted",
    "error_frames",
    "load_profile",
    "parse_fault",
    "parse_faults",
    "register",
]
