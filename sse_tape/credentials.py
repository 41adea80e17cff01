"""What a credential looks like, wherever it is: one table of shapes that the redactor and `check --secrets`
share.

Each `Shape` is a kind (`a GitHub token`) and an anchored, bounded regular
expression, and for the shapes whose words also occur in prose (`Basic`,
`Bearer`) a test of what was matched. `Shapes` is the table compiled, with the
patterns a user adds (`--secret-pattern REGEX`):
`kinds` says which shapes a text holds, `holds` whether it holds any, `find`
which of many texts hold which, in one reading of them all, and `scrub`
replaces each with a marker.

Every built-in expression is safe on hostile text: a token's first character
must not follow a character of its own alphabet (so a run of a million
`sk-sk-sk-...` has one place to start, not a million), every repetition is
possessive or bounded, and nothing nests. The tests feed each one megabytes
made to make a backtracking matcher stall.
"""

from __future__ import annotations

import base64
import binascii
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ._exceptions import ConfigError

__all__ = ["SHAPES", "Shape", "Shapes"]


@dataclass(frozen=True, slots=True)
class Shape:
    """One shape of credential: what it is called in `check --secrets`'s lines, and how it is found."""

    kind: str
    """What `check --secrets` says a text holds: `a GitHub token`."""
    pattern: str
    """The regular expression of one such credential."""
    valid: Callable[[str], bool] | None = None
    """Whether a match is one indeed (a `Basic` word in prose is not a credential); None: every match is."""
    hints: tuple[str, ...] = ()
    """Texts one of which a text must hold for the expression to be run on it: for an expression that cannot
    begin with a literal, which the regular expression engine would otherwise try at every character."""


def _has_digit(text: str) -> bool:
    # `Bearer authentication` and `Bearer YOUR_TOKEN` are prose and placeholders; a token has a digit somewhere.
    return any(c.isdigit() for c in text)


def _basic_pair(text: str) -> bool:
    """Whether `Basic X` holds base64 of `user:password`, as HTTP's Basic scheme sends them (RFC 7617)."""
    encoded = text.split()[-1]
    try:
        decoded = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded and all(32 <= byte < 127 for byte in decoded)


# A token's first character must not follow a character of its own alphabet, so that each run of that
# alphabet is one place to start (a lookbehind after the literal prefix, which keeps the prefix a fast search).
def _token(prefix: str, rest: str, alphabet: str = r"A-Za-z0-9_\-") -> str:
    return f"{re.escape(prefix)}(?<![{alphabet}]{re.escape(prefix)}){rest}(?![{alphabet}])"


SHAPES: tuple[Shape, ...] = (
    # Where two shapes match at one place, the longer match is the one found; of two as long, the first listed.
    Shape("a private key", r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
          r"(?:[A-Za-z0-9+/=\s:,.\\]|-(?!----)){0,20000}+(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?"),
    Shape("an Anthropic API key", _token("sk-ant-", r"[A-Za-z0-9_\-]{20,}+")),
    Shape("an OpenAI API key", _token("sk-", r"(?:proj-|svcacct-|admin-|or-v1-)?[A-Za-z0-9_\-]{20,}+")),
    Shape("a Stripe key", r"[sr]k_(?:live|test)_(?<![A-Za-z0-9_\-][sr]k_live_)(?<![A-Za-z0-9_\-][sr]k_test_)"
          r"[A-Za-z0-9]{16,}+(?![A-Za-z0-9_\-])", hints=("k_live_", "k_test_")),
    Shape("a Google API key", _token("AIza", r"[A-Za-z0-9_\-]{35}")),
    Shape("an AWS access key and its secret key", r"A(?:KIA|SIA)(?<![A-Za-z0-9]A[KS]IA)[A-Z0-9]{16}"
          r"[\s,;:|\"'=\\]{1,24}+[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"),
    Shape("an AWS access key", r"A(?:KIA|SIA)(?<![A-Za-z0-9]A[KS]IA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
    # A secret key is 40 characters of base64, as common as any: only beside its name is it one.
    Shape("an AWS secret key", r"(?i:(?<![A-Za-z0-9_])(?:aws_?secret(?:_?access)?_?key|secret_?access_?key))"
          r"\\?[\"']?[ \t]{0,4}+[:=][ \t]{0,4}+\\?[\"']?[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])",
          hints=("ecret", "ECRET")),
    Shape("a GitHub token", r"(?:gh[pousr]_|github_pat_)(?<![A-Za-z0-9_\-]gh[pousr]_)(?<![A-Za-z0-9_\-]github_pat_)"
          r"[A-Za-z0-9_]{30,}+(?![A-Za-z0-9_\-])"),
    Shape("a GitLab token", _token("glpat-", r"[A-Za-z0-9_\-]{20,}+")),
    Shape("a Slack token", r"xox[abposr]-(?<![A-Za-z0-9_\-]xox[abposr]-)[A-Za-z0-9\-]{10,}+(?![A-Za-z0-9_\-])"),
    Shape("a Hugging Face token", _token("hf_", r"[A-Za-z0-9]{30,}+")),
    Shape("a JWT", _token("eyJ", r"[A-Za-z0-9_\-]{8,}+\.eyJ[A-Za-z0-9_\-]{8,}+\.[A-Za-z0-9_\-]{8,}+")),
    Shape("a bearer token", r"Bearer(?<![A-Za-z0-9]Bearer)[ \t]{1,8}+[A-Za-z0-9._~+/=\-]{8,}+", _has_digit),
    Shape("Basic credentials", r"Basic(?<![A-Za-z0-9]Basic)[ \t]{1,8}+[A-Za-z0-9+/]{4,}+={0,2}+(?![A-Za-z0-9+/=])",
          _basic_pair),
    # From `://` on (the scheme before it is no secret), and its lookbehind after it, so that the search starts
    # at a fast literal.
    Shape("a password in a URL", r"://(?<=[A-Za-z0-9]://)[^\s/?#@:\"'<>\\]{1,256}+:[^\s/?#@\"'<>\\]{1,256}+@"),
)  # fmt: skip
"""The credentials sse-tape knows by their shape, whatever they are called (docs/reliability.md lists them)."""

# Shorter than any shape (`Basic dTpw`, `u:p`): a text this short is not looked at.
_SHORTEST = 10
_SEPARATOR = " \x00 "


class Shapes:
    """`SHAPES` and the patterns a user adds (`--secret-pattern`), compiled: each expression reads a text once."""

    def __init__(self, extra: Iterable[str] = ()) -> None:
        self.extra = tuple(extra)
        """The user's patterns, as given."""
        table = [*SHAPES, *(Shape(f"a match of --secret-pattern {p!r}", p) for p in self.extra)]
        self._compiled: list[tuple[Shape, re.Pattern[str]]] = []
        for shape in table:
            try:
                self._compiled.append((shape, re.compile(shape.pattern)))
            except re.error as exc:
                raise ConfigError(f"--secret-pattern {shape.pattern!r} is no regular expression: {exc}") from None
        self._shortest = 1 if self.extra else _SHORTEST

    def _matches(self, text: str) -> list[tuple[int, int, Shape]]:
        """Each credential in `text` as (start, end, shape), in order; one found within another is that one's
        (the API key in `Bearer sk-...` is the bearer token)."""
        if len(text) < self._shortest:
            return []
        found = sorted(
            (match.start(), -match.end(), n)
            for n, (shape, pattern) in enumerate(self._compiled)
            if not shape.hints or any(hint in text for hint in shape.hints)
            for match in pattern.finditer(text)
            if match.end() > match.start() and (shape.valid is None or shape.valid(match[0]))
        )
        kept: list[tuple[int, int, Shape]] = []
        for start, minus_end, n in found:
            if not kept or start >= kept[-1][1]:
                kept.append((start, -minus_end, self._compiled[n][0]))
        return kept

    def kinds(self, text: str) -> list[str]:
        """The kinds of credential `text` holds, in the table's order, each once."""
        return self.kinds_in_order({shape.kind for _, _, shape in self._matches(text)})

    def kinds_in_order(self, kinds: Iterable[str]) -> list[str]:
        """`kinds`, in the table's order."""
        chosen = set(kinds)
        return [shape.kind for shape, _ in self._compiled if shape.kind in chosen]

    def holds(self, text: str) -> bool:
        """Whether `text` holds any credential."""
        return bool(self.find([text]))

    def find(self, texts: Sequence[str]) -> dict[int, list[str]]:
        """The kinds of credential each of `texts` holds (in the table's order), by its place among them; the
        texts that hold none are left out. The texts are read together, each expression once, however many:
        a JSON body of 200,000 strings is 16 searches, not 3,200,000."""
        chosen = [n for n, text in enumerate(texts) if len(text) >= self._shortest]
        if not chosen:
            return {}
        # Between two texts, a space and a NUL: white space ends every built-in shape's alphabet but the
        # private key's, and NUL ends that one's.
        joined = _SEPARATOR.join(texts[n] for n in chosen)
        starts, at = [], 0
        for n in chosen:
            starts.append(at)
            at += len(texts[n]) + len(_SEPARATOR)
        found: dict[int, set[str]] = {}
        for start, _, shape in self._matches(joined):
            found.setdefault(chosen[bisect_right(starts, start) - 1], set()).add(shape.kind)
        return {n: self.kinds_in_order(kinds) for n, kinds in found.items()}

    def scrub(self, text: str, marker: str) -> str:
        """`text` with each credential in it replaced by `marker`."""
        pieces, at = [], 0
        for start, end, _ in self._matches(text):
            pieces += [text[at:start], marker]
            at = end
        return "".join(pieces) + text[at:] if pieces else text
