"""Matching: which recording answers a request, by matchers registered by name, and why none did.

The package by concept:

- `matchers`: the built-in matchers, each a function `(request, recorded)` that returns how the two
  differ (a short text, what a miss shows) or None (vcrpy's `vcr/matchers.py`); `MatchOn` names them.
- `registry`: every matcher by name (`MATCHERS`), the built-in ones and those the protocols bring
  (`Protocol.matchers`, found through the dialect registry and its entry-point group), and `STRICT`, the
  word for matching on everything.
- `index`: the recordings a request may agree with, by the hash of the parts the built-in matchers compare
  (`matchers.KEYS`) and those a protocol's matcher says it compares (MCP's `jsonrpc`, A2A's `a2a`), then, where
  a key leaves many, by the conversation's phase, so that finding one costs the same however many are loaded.
- `finder`: the `Matcher` that finds the recording answering a request, with the rule each cassette's
  recordings are matched by, and the explanation of a miss.
"""

from __future__ import annotations

from .finder import CUT_SHORT, DEFAULT_MATCH_ON, Matcher, asks_for_stream, framing_of, is_streamed, last_event_id
from .matchers import MatchOn
from .registry import MATCHERS, STRICT, Matchers

__all__ = [
    "CUT_SHORT",
    "DEFAULT_MATCH_ON",
    "MATCHERS",
    "STRICT",
    "MatchOn",
    "Matcher",
    "Matchers",
    "asks_for_stream",
    "framing_of",
    "is_streamed",
    "last_event_id",
]
