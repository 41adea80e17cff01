"""Every kind of fault, by name: the built-in ones and those registered from outside; and reading a fault
from its text.

A package (or a test) adds a fault with `register`, or through the `sse_tape.faults` entry-point group
(each entry point names a `FaultKind`); it then works wherever the built-in ones do: on replays, on
forwarded streams and on a model's, from the command line, a profile, the marker or a request's header.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from importlib.metadata import entry_points

from .._exceptions import ConfigError
from .answer import ANSWER
from .before import BEFORE
from .end import END
from .events import EVENTS
from .model import MAX_SPEC, Fault, FaultKind, whole_number
from .timing import TIMING
from .wire import WIRE

__all__ = ["FAULTS", "parse_fault", "parse_faults", "register"]

#: Every fault, by name, in the order `sse-tape faults` lists them.
FAULTS: dict[str, FaultKind] = {kind.name: kind for kind in (*BEFORE, *EVENTS, *TIMING, *WIRE, *END, *ANSWER)}

_FROM_ENTRY_POINTS = False


def register(kind: FaultKind) -> None:
    """Add a kind of fault; raises `ConfigError` for a name already taken."""
    if kind.name in FAULTS and FAULTS[kind.name] is not kind:
        raise ConfigError(f"fault {kind.name!r} is defined already")
    FAULTS[kind.name] = kind


def _load_entry_points() -> None:
    """Register the faults other installed packages declare, once."""
    global _FROM_ENTRY_POINTS
    if _FROM_ENTRY_POINTS:
        return
    _FROM_ENTRY_POINTS = True
    for point in entry_points(group="sse_tape.faults"):
        kind = point.load()
        if not isinstance(kind, FaultKind):
            raise ConfigError(f"entry point {point.name!r} of sse_tape.faults is not a FaultKind")
        register(kind)


_COMMON = ("p", "path", "rpc", "times")


def parse_fault(spec: str) -> Fault:
    """A fault from its text; raises `ConfigError` naming the bad part and what is valid."""
    try:
        return _parsed(spec)
    except ConfigError as exc:
        if ";" not in spec:
            raise
        # Two faults in one, as a request's header gives them (a `message=` may hold a `;`: only a bad spec is told).
        raise ConfigError(
            f"{exc}; `;` separates faults in a request's header only: give each fault on its own"
        ) from None


def _parsed(spec: str) -> Fault:
    if len(spec) > MAX_SPEC:
        raise ConfigError(f"fault {spec[:40]!r}...: a spec is at most {MAX_SPEC:,} characters")
    name, _, rest = spec.strip().partition(":")
    _load_entry_points()
    kind = FAULTS.get(name.replace("_", "-"))  # slow_close is slow-close
    if kind is None:
        hint = _did_you_mean(name, FAULTS)
        raise ConfigError(f"fault {spec!r}: unknown fault {name!r}{hint}; faults are {', '.join(FAULTS)}")
    given: dict[str, str] = {}
    for n, part in enumerate(p.strip() for p in rest.split(",")):
        if not part:
            continue
        key, eq, value = part.partition("=")
        if not eq and n == 0 and kind.main is not None and kind.key(part) is None and part not in _COMMON:
            key, value = kind.main, part  # the main key's value alone: status:429
        elif not eq or not value:
            raise ConfigError(f"fault {spec!r}: {part!r} is not key=value")
        if kind.key(key) is None and key not in _COMMON:
            keys = sorted([*(k.name for k in kind.keys), *_COMMON])
            hint = _did_you_mean(key, keys)
            raise ConfigError(f"fault {spec!r}: {name} takes no {key!r}{hint}; its keys are {', '.join(keys)}")
        if key in given:  # one value must win, and neither the spec nor the header says which was meant
            raise ConfigError(f"fault {spec!r}: {key} is given twice ({given[key]} and {value}); give it once")
        given[key] = value
    try:
        p = float(given.pop("p", "1"))
        times = whole_number(0, 10**9)("times", given.pop("times")) if "times" in given else None
        if not 0 <= p <= 1:
            raise ValueError("p is a probability from 0 to 1")
        path = given.pop("path", None)
        rpc = given.pop("rpc", None)
        values = []
        for k in kind.keys:
            text = given.get(k.name, k.default)
            if text is None and k.required:
                example = f"{name}:{k.name}=429" if name == "status" else f"{name}:{k.name}=..."
                raise ValueError(f"{name} needs {k.name}=, such as {example}")
            values.append((k.name, None if text is None else k.parse(k.name, text)))
    except ValueError as exc:  # ConfigError too
        raise ConfigError(f"fault {spec!r}: {exc}") from None
    return Fault(kind, tuple(values), p, times, path, rpc, spec.strip())


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` (did you mean 'error'?)` for the choice closest to a misspelt word, or nothing when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def parse_faults(specs: Iterable[str]) -> list[Fault]:
    """Faults from their texts, each checked; raises `ConfigError` at the first bad one."""
    return [parse_fault(spec) for spec in specs]
