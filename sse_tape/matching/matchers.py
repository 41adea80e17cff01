"""The built-in matchers: each a function `(request, recorded)` that says how the two differ, or None.

As in vcrpy (`vcr/matchers.py`), a matcher compares one part of two
requests and returns a short text saying how they differ (what a miss's
explanation shows), or None when they agree. `MatchOn` names the built-in
ones; protocols bring more (`Protocol.matchers`), and `registry` finds them
all by name.

A matcher is handed the requests as they are compared (see `finder`): their
JSON bodies without the ignored fields and, when replay converts between
shapes of answer, without the fields (and path) that only choose one. A
recorded value that was redacted (`REDACTED`) stands for any value.

Each built-in matcher decides by equality of one part of the two requests,
but where a recorded value was redacted: `KEYS` gives that part as a
hashable key, and `WILD` says whether a recorded request holds a redacted
value in it (then its key says nothing), so that an index (`index`) finds
the recordings a request can agree with without comparing it with each.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Hashable
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qsl, quote

from ..cassette import REDACTED, Request
from ..cassette.model import agrees_as_recorded, holds_redacted
from ..dialects.protocol import RequestMatcher

__all__ = [
    "AGREES",
    "BUILT_IN",
    "KEYS",
    "WILD",
    "MatchOn",
    "body",
    "body_differences",
    "digest",
    "method",
    "path",
    "query",
    "shown",
]

_MISSING: Any = object()
# The marker as a redacted path segment or form field holds it.
_QUOTED_MARKER = quote(REDACTED, safe="")
# The values that hold others: JSON's, and the tuples a finder's keys are made of.
_NESTED = (dict, list, tuple)
# What a body's digest keeps of the numbers it is made of.
_BITS = (1 << 64) - 1

#: How much of a method, path or query a matcher's text shows: a request may send kilobytes of it.
_SHOWN = 100

#: How many of two bodies' differences are looked for, at most: enough to rank and to name the first three.
_COUNTED = 100


class MatchOn(StrEnum):
    """The names of the built-in matchers (a cassette's `match`, `--match-on`, the marker's `match_on`)."""

    METHOD = "method"
    PATH = "path"
    QUERY = "query"
    BODY = "body"


def shown(text: str) -> str:
    """A method, path or query as a miss's explanation shows it: whole up to 100 characters, else its first
    100 and how long it is."""
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text):,} characters)"


def _quoted(text: str) -> str:
    return repr(text) if len(text) <= _SHOWN else f"{text[:_SHOWN]!r}... ({len(text):,} characters)"


def method(request: Request, recorded: Request) -> str | None:
    """The HTTP method, in any case."""
    if _same_method(request, recorded):
        return None
    return f"method is {_quoted(request.method)}, recorded {_quoted(recorded.method)}"


def path(request: Request, recorded: Request) -> str | None:
    """The path, exactly, where a segment recorded redacted (it held a credential) stands for any segment."""
    if _same_path(request, recorded):
        return None
    return f"path is {_quoted(request.path)}, recorded {_quoted(recorded.path)}"


def query(request: Request, recorded: Request) -> str | None:
    """The query's parameters, in any order."""
    if _same_query(request, recorded):
        return None
    return f"query is {_quoted(request.query)}, recorded {_quoted(recorded.query)}"


def body(request: Request, recorded: Request) -> str | None:
    """The body: JSON compared as data (key order and whitespace do not matter), anything else as bytes.

    The text names the first three differences by their JSON path (`body.messages[0].content is "Hi",
    recorded "Hello!"`) and counts the rest (up to 100: past that, `at least 97 more`).
    """
    if _same_body(request, recorded):
        return None
    found = _json_diff(_comparable(request), _comparable(recorded), "body", [])
    if len(found) >= _COUNTED:
        more = f" and at least {_COUNTED - 3} more"
    else:
        more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return ", ".join(found[:3]) + more if found else "body differs"


def body_differences(request: Request, recorded: Request) -> list[str]:
    """The differences between two bodies, as `body`'s text names them (none when they agree): the first 100
    found, at most, so that two large bodies cost no more to compare than that."""
    if _same_body(request, recorded):
        return []
    return _json_diff(_comparable(request), _comparable(recorded), "body", [])


def _same_method(request: Request, recorded: Request) -> bool:
    return request.method.upper() == recorded.method.upper()


def _same_path(request: Request, recorded: Request) -> bool:
    if request.path == recorded.path:
        return True
    if _QUOTED_MARKER not in recorded.path:
        return False
    here, there = request.path.split("/"), recorded.path.split("/")
    return len(here) == len(there) and all(a == b or b == _QUOTED_MARKER for a, b in zip(here, there, strict=True))


def _same_query(request: Request, recorded: Request) -> bool:
    return _query_agrees(request.query, recorded.query)


def _same_body(request: Request, recorded: Request) -> bool:
    here, there = _comparable(request), _comparable(recorded)
    if isinstance(here, bytes) and isinstance(there, bytes) and _QUOTED_MARKER.encode() in there:
        # A form whose secret fields were redacted: compared as a query is.
        return _query_agrees(here.decode("latin-1"), there.decode("latin-1"))
    return here == there or agrees_as_recorded(here, there)


BUILT_IN: dict[str, RequestMatcher] = {
    MatchOn.METHOD: method,
    MatchOn.PATH: path,
    MatchOn.QUERY: query,
    MatchOn.BODY: body,
}
"""The built-in matchers by name, in the order `MatchOn` lists them."""

AGREES: dict[RequestMatcher, Callable[[Request, Request], bool]] = {
    method: _same_method,
    path: _same_path,
    query: _same_query,
    body: _same_body,
}
"""How each built-in matcher decides, without making the text that only a miss shows: what `Matcher.find`
asks, for every recording, of every request."""


KEYS: dict[RequestMatcher, Callable[[Request], Hashable]] = {
    method: lambda request: request.method.upper(),
    path: lambda request: request.path,
    query: lambda request: _query_key(request.query),
    body: lambda request: digest(_comparable(request)),
}
"""The part of a request each built-in matcher compares, as a key: two requests it finds agree have equal keys,
unless the recorded one holds a redacted value there (see `WILD`). Unequal requests may share a key (the body's
is a hash): a key finds the recordings a request may agree with, the matcher still decides."""

WILD: dict[RequestMatcher, Callable[[Request], bool]] = {
    method: lambda recorded: False,
    path: lambda recorded: _QUOTED_MARKER in recorded.path,
    query: lambda recorded: _query_wild(recorded.query),
    body: lambda recorded: _body_wild(recorded),
}
"""Whether a recorded request holds a redacted value (`REDACTED`) in the part each built-in matcher compares:
there, it agrees with requests whose keys (`KEYS`) differ from its own."""


def _query_key(text: str) -> Hashable:
    return tuple(sorted(parse_qsl(text, keep_blank_values=True))) if text else ()


def _query_wild(text: str) -> bool:
    return REDACTED in text or ("%" in text and any(value == REDACTED for _, value in parse_qsl(text)))


def _body_wild(recorded: Request) -> bool:
    there = _comparable(recorded)
    if isinstance(there, bytes):
        return _QUOTED_MARKER.encode() in there
    return holds_redacted(recorded)


def digest(value: Any) -> int:
    """A hash of a JSON value (or bytes, or None; or tuples of them, hashed as lists are), equal for equal values
    as Python compares them (`1`, `1.0` and `true` alike; objects in any key order). Made of numbers only: a
    recording's costs the collector nothing to keep track of, as a tuple of its parts would."""
    if isinstance(value, dict):
        total = len(value)
        for key, item in value.items():  # summed: in any order
            total += hash(key) * 31 ^ (digest(item) if isinstance(item, _NESTED) else hash(item))
        return total & _BITS
    if isinstance(value, (list, tuple)):
        total = len(value)
        for item in value:
            total = (total * 1000003 ^ (digest(item) if isinstance(item, _NESTED) else hash(item))) & _BITS
        return total
    return hash(value)


def _comparable(request: Request) -> Any:
    """A body as `body` compares it: None when empty, its JSON value, or else its bytes."""
    if not request.body:
        return None
    parsed = request.json()
    return request.body if parsed is None else parsed


def _query_agrees(here: str, recorded: str) -> bool:
    """Same parameters in any order; a recorded value that was redacted stands for any value."""
    if here == recorded:
        return True
    ours = sorted(parse_qsl(here, keep_blank_values=True))
    theirs = sorted(parse_qsl(recorded, keep_blank_values=True))
    return len(ours) == len(theirs) and all(
        a == b and (x == y or y == REDACTED) for (a, x), (b, y) in zip(ours, theirs, strict=True)
    )


def _show(value: Any) -> str:
    if value is _MISSING:
        return "absent"
    text = json.dumps(_shortened(value, [40]), ensure_ascii=False) if not isinstance(value, bytes) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _shortened(value: Any, room: list[int]) -> Any:
    """`value` with its strings cut to 40 characters and no more than 40 items and strings in all: what `_show`
    writes of it begins as it would of the whole, which may be a body of any size."""
    room[0] -= 1
    if isinstance(value, str):
        return value[:40]
    if isinstance(value, dict):
        return {k[:40]: _shortened(v, room) for k, v in _first(value.items(), room)}
    if isinstance(value, list):
        return [_shortened(v, room) for v in _first(value, room)]
    return value


def _first(items: Any, room: list[int]) -> Any:
    """The items of `items` while there is `room`."""
    for item in items:
        if room[0] <= 0:
            return
        yield item


def _json_diff(a: Any, b: Any, where: str, found: list[str]) -> list[str]:
    """Where two JSON values differ, as `path: here X, recorded Y` strings, added to `found` until it holds
    `_COUNTED` of them; returns `found`."""
    if len(found) >= _COUNTED:
        return found
    if isinstance(a, dict) and isinstance(b, dict):
        for key in itertools.chain(a, (k for k in b if k not in a)):
            av, bv = a.get(key, _MISSING), b.get(key, _MISSING)
            if av != bv:
                _json_diff(av, bv, f"{where}.{key}", found)
                if len(found) >= _COUNTED:
                    break
        return found
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                _json_diff(x, y, f"{where}[{i}]", found)
                if len(found) >= _COUNTED:
                    break
        return found
    if a == b or b == REDACTED:
        return found
    found.append(f"{where} is {_show(a)}, recorded {_show(b)}")
    return found
