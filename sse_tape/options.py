"""How a server answers requests: one typed, frozen options object, built from the same words everywhere.

`sse-tape serve --pace x2 --fault error:5`, `serve(pace="x2", faults=["error:5"])`
and the pytest plugin's marker all go through `ServeOptions.build`, so a word
means the same thing, and is refused with the same message, wherever it is
written.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from ._exceptions import ConfigError
from .faults import Fault, load_profile, parse_fault
from .matching import MATCHERS
from .pacing import Pacing

__all__ = ["MissPolicy", "RecordMode", "ServeOptions", "parse_match"]


class RecordMode(StrEnum):
    """When to replay and when to record, with VCR.py's words and meanings."""

    ONCE = "once"
    """Record everything if the cassette does not exist yet; if it does, replay only (a miss is an error).

    A new cassette records every request of the session, repeats too, so a replay
    plays them back in order, as VCR.py does. Replaying, a stream cut short when
    it was recorded (`interrupted`, `client-gone`) replays as it was recorded.
    """
    NEW_EPISODES = "new_episodes"
    """Replay each matching recording once; forward and record every other request.

    What is recorded replays at once: an identical request later in the session gets it.
    A recording cut short on the recording side (the recorder stopped or killed mid-stream:
    `interrupted`; its client hung up: `client-gone`) never replays: the request is forwarded
    again, and its whole answer takes the place of every cut-off recording of that request.
    """
    NONE = "none"
    """Replay only; never contact the upstream. A stream cut short when it was recorded replays as it was."""
    ALL = "all"
    """Forward and record every request; never replay. Existing interactions are kept."""


class MissPolicy(StrEnum):
    """What happens to a request no recording answers."""

    ERROR = "error"
    """Answer with the API's JSON error naming the closest recordings (status `miss_status`)."""
    FORWARD = "forward"
    """Send it to the upstream and stream its answer back; record nothing."""
    RECORD = "record"
    """Send it to the upstream, stream its answer back, and record it into the cassette."""
    SYNTH = "synth"
    """Answer it with a local model (`--model`); when recording, record the answer like a forwarded one."""


def parse_match(words: str | Iterable[str], name: str = "match_on") -> tuple[str, ...]:
    """The matchers named by `method,path` or a list of names (`MatchOn`'s and those the protocols bring);
    raises `ConfigError` naming the option `name` and the known matchers."""
    return MATCHERS.names(words, name)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeOptions:
    """How a server answers: matching, pacing, misses, repeats and faults. Build one with `build`."""

    match_on: tuple[str, ...] | None = None
    """The matchers a request must satisfy to get a recording, by name; None: what each cassette says, else
    method, path and body."""
    ignore_body_fields: tuple[str, ...] | None = None
    """Dotted paths into JSON bodies left out of the comparison (`user`, `messages.*.name`); None: what each
    cassette says, else none."""
    pace: Pacing = field(default_factory=Pacing)
    """When each recorded chunk goes out."""
    miss_status: int = 404
    """The status of the error a miss gets under `MissPolicy.ERROR`."""
    on_miss: MissPolicy = MissPolicy.ERROR
    """What happens to a request no recording answers."""
    allow_repeats: bool = True
    """Recordings answer again once all that match have played; off: each answers once."""
    faults: tuple[Fault, ...] = ()
    """Faults for every request, besides those a request asks for in its header."""
    seed: int = 0
    """Seed of every random choice: jitter, fault chance and fault bytes."""
    recorded_faults: bool = False
    """Put back the faults a recording notes its client got (`record --fault`), so that a replay is what that
    client got; off, a recording is replayed as its upstream sent it."""
    report: Path | None = None
    """A file that gets every journal entry as a JSON line."""

    @classmethod
    def build(
        cls,
        *,
        match_on: str | Iterable[str] | None = None,
        ignore_body_fields: Iterable[str] | None = None,
        pace: str | Pacing = "recorded",
        jitter: str | None = None,
        seed: int = 0,
        miss_status: int = 404,
        on_miss: MissPolicy | str = MissPolicy.ERROR,
        allow_repeats: bool = True,
        faults: Iterable[Fault | str] = (),
        profiles: Iterable[str] = (),
        recorded_faults: bool = False,
        report: str | os.PathLike[str] | None = None,
    ) -> ServeOptions:
        """Options from the words a user writes; raises `ConfigError` naming a bad one.

        `match_on` is `"method,path"` or a list of matcher names, and with
        `ignore_body_fields` overrides what the cassettes say; `pace` is a pace
        word (`recorded`, `x2`, `instant`, `20ms`, `tps:40`) or a `Pacing`;
        `jitter` is `5ms` or `10%`; `faults` are specs (`error:5`) or `Fault`s;
        `profiles` name sets of faults (they come before `faults`);
        `recorded_faults` puts back those a recording notes its client got.
        """
        if isinstance(pace, Pacing):
            if jitter is not None:
                raise ConfigError("give jitter inside the Pacing, or pace as a word")
            pacing = pace
        else:
            pacing = Pacing.parse(pace, jitter=jitter, seed=seed)
        if not 400 <= miss_status <= 599:
            raise ConfigError(f"miss status {miss_status} is not an HTTP error status (400-599)")
        try:
            policy = MissPolicy(on_miss)
        except ValueError:
            raise ConfigError(f"on miss {on_miss!r}: choose from {', '.join(MissPolicy)}") from None
        fields = None if ignore_body_fields is None else tuple(ignore_body_fields)
        for name in fields or ():
            if not name or "" in name.split("."):
                raise ConfigError(f"ignored body field {name!r}: write a dotted path such as user or metadata.trace_id")
        chosen = [f for name in profiles for f in load_profile(name)]
        chosen += [parse_fault(f) if isinstance(f, str) else f for f in faults]
        return cls(
            match_on=None if match_on is None else parse_match(match_on),
            ignore_body_fields=fields,
            pace=pacing,
            miss_status=miss_status,
            on_miss=policy,
            allow_repeats=allow_repeats,
            faults=tuple(chosen),
            seed=seed,
            recorded_faults=recorded_faults,
            report=None if report is None else Path(report),
        )
