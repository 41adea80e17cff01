"""Every matcher by name: the built-in ones, then those the protocols bring.

A cassette's `match = [...]`, `--match-on`, the marker's `match_on` and
`ServeOptions.match_on` name matchers; `MATCHERS` finds each. A protocol
brings its own in `Protocol.matchers`, under names it chooses
(`jsonrpc-params`, say), and is found through the dialect registry, so a
package that adds a dialect through the entry-point group
`sse_tape.dialects` adds its matchers too. A protocol's matcher may not take
the name of a built-in one or of another protocol's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from .._exceptions import ConfigError
from ..dialects import DIALECTS, Protocol
from ..dialects.protocol import RequestMatcher
from .matchers import BUILT_IN

__all__ = ["MATCHERS", "STRICT", "Matchers"]

STRICT = "strict"
"""The word, named alone, for matching a request on everything: method, path, query and the whole body but
for ignored fields, `stream` and `stream_options` included (no answer is reshaped), so that any drift of a
client's requests from the recorded ones is a miss whose message is the difference."""


class Matchers(Mapping[str, RequestMatcher]):
    """Each matcher by name: `built_in`, then those each of `dialects` brings, in the dialects' order.

    The dialects are asked when a name is not built in, so naming only built-in matchers never reads the
    entry points.
    """

    def __init__(self, built_in: Mapping[str, RequestMatcher], dialects: Mapping[str, Protocol]) -> None:
        self._built_in = dict(built_in)
        self._dialects = dialects

    def __getitem__(self, name: str) -> RequestMatcher:
        found = self._built_in.get(name)
        return found if found is not None else self._brought()[name]  # an unknown name: KeyError, as a dict's

    def __iter__(self) -> Iterator[str]:
        return iter({**self._built_in, **self._brought()})

    def __len__(self) -> int:
        return len(self._built_in) + len(self._brought())

    def names(self, words: str | Iterable[str], what: str) -> tuple[str, ...]:
        """The matchers `words` name (`"method,path"` or a list), each once, in order; raises `ConfigError`
        naming `what` (the option or setting that gave them) and every known name, for none or an unknown one."""
        items = [w.strip() for w in words.split(",")] if isinstance(words, str) else [str(w) for w in words]
        parts = [w for w in items if w]
        if parts == [STRICT]:
            return (STRICT,)
        if not parts or any(w not in self._built_in and w not in self._brought() for w in parts):
            shown = words if isinstance(words, str) else ",".join(items)
            raise ConfigError(f"{what} {shown!r}: choose from {', '.join(self)}, or {STRICT} alone")
        return tuple(dict.fromkeys(parts))

    def _brought(self) -> dict[str, RequestMatcher]:
        """The matchers the protocols bring, by name; a `ConfigError` names a protocol whose name is taken."""
        found: dict[str, RequestMatcher] = {}
        owners: dict[str, str] = {}
        for dialect in self._dialects.values():
            for name, matcher in dialect.matchers.items():
                taken = "sse-tape" if name in self._built_in else owners.get(name)
                if taken is not None:
                    raise ConfigError(f"the matcher {name!r} of the dialect {dialect.name} is one of {taken}'s")
                found[name] = matcher
                owners[name] = dialect.name
        return found


MATCHERS = Matchers(BUILT_IN, DIALECTS)
"""Every matcher sse-tape knows, by name: the built-in ones (`MatchOn`), then the protocols'."""
