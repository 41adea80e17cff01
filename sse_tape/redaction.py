"""Keeping secrets out of cassettes, and finding the ones that got in.

By default everything that carries a credential is replaced by a marker
before anything is written:

- headers: `Authorization`, `Proxy-Authorization`, `Cookie`, `Set-Cookie`,
  `OpenAI-Organization`, `OpenAI-Project`, `Anthropic-Organization-Id`, and
  any header with a word in its name that begins like `key`, `token`,
  `secret`, `password`, `credential`, `auth`, `signature`, `session` or
  `cookie` (`x-api-key`, `X-Authentication`, `x-goog-api-key`, `X-Signature`,
  `X-Session-Id`), in requests and responses;
  rate-limit headers (`x-ratelimit-remaining-tokens`) are counts, and kept;
- query parameters named so, plus `sig` and `code` (`X-Amz-Signature`,
  `?sig=`, an OAuth `?code=`), with `&` or `;` between them;
- JSON request body fields named so, at any depth (`api_key`,
  `metadata.password`, `auth.token`); a field must be such a word whole, so
  `max_tokens` is kept. Model output a client sends back is kept: Gemini's
  `thoughtSignature` and the `signature` of an Anthropic thinking block (an
  opaque seal the API set on its own reasoning, shown in the stream's
  `signature_delta`, that must come back unchanged).

Chosen headers and JSON body fields can be redacted too, and chosen ones
kept (`--keep-header`, `--keep-json-field`). A recorded value equal to the
marker matches any value on replay. `find_secrets` looks for what slipped
through: API keys, bearer tokens, JWTs and AWS keys anywhere in a recording,
and secret-named headers, parameters and fields left as they were.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote, unquote_plus

from . import _json
from ._paths import locate
from .cassette import REDACTED, Headers, Interaction, Request, Response

__all__ = ["REDACTED", "Redaction", "find_secrets"]

# A header word that begins with one of these marks a secret: authentication, tokens, passwords.
_SECRET_STEMS = ("key", "apikey", "token", "secret", "passw", "credential", "cookie", "auth", "signature", "session")
# A JSON field or query parameter must be one of these words whole (max_tokens is not a secret).
_SECRET_WORDS = frozenset(
    {
        "key", "apikey", "token", "secret", "password", "passwd", "pwd", "credential", "credentials", "cookie",
        "auth", "authorization", "authentication", "signature", "session", "sessionid",
    }
)  # fmt: skip
_QUERY_WORDS = _SECRET_WORDS | {"sig", "code"}
_ALWAYS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "openai-organization",
        "openai-project",
        "anthropic-organization-id",
    }
)
# Words of a name in any style: x-api-key, api_key, apiKey, accessToken, X-AuthToken.
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_QUERY_SEPARATOR = re.compile(r"[&;]")
_QUERY_PIECES = re.compile(r"([&;])")
# Named like secrets, but not: OpenAI's prompt cache key, a request's idempotency key, and Gemini's thought
# signature (the model's reasoning, sealed, which a client sends back with the conversation).
_NOT_SECRET = frozenset(
    {"prompt_cache_key", "idempotency-key", "idempotency_key", "thoughtsignature", "thought_signature"}
)

# Anthropic's content blocks whose `signature` is the API's seal on the model's reasoning, which a client
# sends back with the conversation as the stream gave it: model output, no credential
# (https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking, "preserving thinking blocks").
_SIGNED_BLOCKS = frozenset({"thinking"})


def _words(name: str) -> set[str]:
    return {word.lower() for word in _WORD.findall(name)}


def _secret_header(name: str) -> bool:
    lower = name.lower()
    if lower in _ALWAYS:
        return True
    if lower in _NOT_SECRET:
        return False
    words = _words(name)
    if "ratelimit" in words or lower.startswith(("ratelimit", "x-ratelimit")):
        return False  # counts of requests and tokens, not credentials
    return any(word.startswith(_SECRET_STEMS) for word in words)


def _secret_field(name: str, words: frozenset[str]) -> bool:
    if name.lower() in _NOT_SECRET:
        return False
    parts = _words(name)
    return bool(parts & words) or "".join(parts) in words or name.lower() in words


@dataclass(frozen=True, slots=True)
class Redaction:
    """What to redact. The defaults keep credentials out; `keep_headers` and `keep_json_fields` let one
    through on purpose."""

    headers: frozenset[str] = frozenset()
    """Header names to redact besides the defaults (any case)."""
    keep_headers: frozenset[str] = frozenset()
    """Header names to record as they are, even if they look secret."""
    json_fields: tuple[str, ...] = ()
    """Dotted paths into a JSON request body to redact besides the defaults (`user`, `metadata.*.email`)."""
    keep_json_fields: frozenset[str] = frozenset()
    """JSON body field names to record as they are, even if they look secret (`token`)."""

    @classmethod
    def build(
        cls,
        *,
        headers: Iterable[str] = (),
        keep_headers: Iterable[str] = (),
        json_fields: Iterable[str] = (),
        keep_json_fields: Iterable[str] = (),
    ) -> Redaction:
        """A redaction from command-line lists."""
        return cls(
            frozenset(h.lower() for h in headers),
            frozenset(h.lower() for h in keep_headers),
            tuple(json_fields),
            frozenset(keep_json_fields),
        )

    def is_secret(self, name: str) -> bool:
        """Whether a header of this name is redacted."""
        lower = name.lower()
        if lower in self.keep_headers:
            return False
        return lower in self.headers or _secret_header(name)

    def interaction(self, interaction: Interaction) -> Interaction:
        """The interaction with its secrets replaced by the marker."""
        return replace(
            interaction, request=self.request(interaction.request), response=self.response(interaction.response)
        )

    def request(self, request: Request) -> Request:
        """The request with the secrets in its headers, query and JSON body replaced by the marker."""
        return replace(
            request,
            headers=self._headers(request.headers),
            query=self.query(request.query),
            body=self._body(request.body),
        )

    def response(self, response: Response) -> Response:
        """The response with the secrets in its headers replaced by the marker."""
        return replace(response, headers=self._headers(response.headers))

    def _headers(self, headers: Headers) -> Headers:
        return tuple((name, REDACTED if self.is_secret(name) else value) for name, value in headers)

    def _secret_param(self, name: str) -> bool:
        lower = name.lower()
        return lower not in self.keep_headers and (lower in self.headers or _secret_field(name, _QUERY_WORDS))

    def query(self, query: str) -> str:
        """A query string with the values of its secret parameters replaced by the marker (percent-encoded)."""
        if not query:
            return query
        # Only the secret values change: names, order and separators stay exactly as they were sent.
        pieces = _QUERY_PIECES.split(query)
        for n in range(0, len(pieces), 2):
            name, eq, _ = pieces[n].partition("=")
            if eq and self._secret_param(unquote_plus(name)):
                pieces[n] = f"{name}={quote(REDACTED, safe='')}"
        return "".join(pieces)

    def url(self, url: str) -> str:
        """A URL as sse-tape shows it in a message: its user info (`user:password@`) replaced by the marker,
        and its query and fragment redacted as `query` redacts a query (`?key=...` as Gemini takes it)."""
        scheme, sep, rest = url.partition("://")
        if sep:
            # The authority ends at the first `/`, not at `?` or `#`: a password with one of those in it, not
            # percent-encoded, is still not shown.
            authority, slash, after = rest.partition("/")
            if "@" in authority:
                authority = f"{quote(REDACTED, safe='')}@{authority.rpartition('@')[2]}"
                url = f"{scheme}{sep}{authority}{slash}{after}"
        before, hash_, fragment = url.partition("#")
        base, mark, query = before.partition("?")
        return base + mark + self.query(query) + hash_ + self.query(fragment)

    def _body(self, body: bytes) -> bytes:
        if not body:
            return body
        try:
            doc = _json.parse(body)
        except ValueError:
            return body
        hits = [hit for path in self.json_fields for hit in locate(doc, path.split("."))]
        hits += list(self._secret_fields(doc))
        changed = False
        for container, key in hits:
            if container[key] != REDACTED:
                container[key] = REDACTED
                changed = True
        return _json.dumps(doc, compact=False).encode() if changed else body

    def _secret_json_field(self, container: dict[Any, Any], key: Any) -> bool:
        if key in self.keep_json_fields:
            return False
        if key == "signature" and container.get("type") in _SIGNED_BLOCKS:
            return False  # the model's, not the user's: what the stream sent, sent back
        return _secret_field(str(key), _SECRET_WORDS)

    def _secret_fields(self, doc: Any) -> Iterator[tuple[Any, Any]]:
        """Every (container, key) of a field named like a secret, at any depth (bounded by the parser)."""
        stack = [doc]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                for key, value in node.items():
                    scalar = isinstance(value, str | int | float) and not isinstance(value, bool)
                    if scalar and self._secret_json_field(node, key):
                        yield node, key
                    else:
                        stack.append(value)
            elif isinstance(node, list):
                stack.extend(node)


# What a secret looks like wherever it is: an API key, a bearer token, a JWT, an AWS access key.
_PATTERNS = [
    ("an API key", re.compile(r"\bsk-(?:proj-|ant-|or-v1-|live-)?[A-Za-z0-9_\-]{20,}")),
    ("a bearer token", re.compile(r"\bBearer\s+(?!<redacted>)[A-Za-z0-9._~+/=\-]{8,}")),
    ("a JWT", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")),
    ("an AWS access key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
]


def find_secrets(interaction: Interaction, redaction: Redaction | None = None) -> list[str]:
    """Where `interaction` holds something that looks like a secret, and what, one line each."""
    redaction = redaction or Redaction()
    request, response = interaction.request, interaction.response
    found: list[str] = []
    for side, headers in (("request", request.headers), ("response", response.headers)):
        for name, value in headers:
            if value != REDACTED and redaction.is_secret(name):
                found.append(f"{side} header {name} is not redacted")
    for part in _QUERY_SEPARATOR.split(request.query) if request.query else ():
        name, eq, value = part.partition("=")
        if eq and value != quote(REDACTED, safe="") and redaction._secret_param(unquote_plus(name)):
            found.append(f"query parameter {unquote_plus(name)} is not redacted")
    try:
        doc = _json.parse(request.body) if request.body else None
    except ValueError:
        doc = None
    found += [
        f"request body field {key} is not redacted"
        for container, key in redaction._secret_fields(doc)
        if container[key] != REDACTED
    ]
    # What is left once the secrets named above are redacted: a leaked header is one finding, not three (its
    # name, then the bearer token and the API key in its value).
    redacted = redaction.interaction(interaction)
    request, response = redacted.request, redacted.response
    texts = [
        ("request", " ".join(f"{k}: {v}" for k, v in request.headers) + "\n" + request.query),
        ("request body", request.body.decode("utf-8", "replace")),
        ("response", " ".join(f"{k}: {v}" for k, v in response.headers)),
        ("response body", response.body.decode("utf-8", "replace")),
    ]
    for where, text in texts:
        found += [f"{where} holds {what}" for what in _kinds(text)]
    return found


def _kinds(text: str) -> list[str]:
    """The kinds of secret `text` holds, in the order of `_PATTERNS`; a match within another is that one's
    (the API key in `Bearer sk-...` is the bearer token)."""
    matches = sorted((m.start(), -m.end(), what) for what, pattern in _PATTERNS for m in pattern.finditer(text))
    kinds, end = set(), -1
    for start, minus_end, what in matches:
        if start >= end:
            kinds.add(what)
            end = -minus_end
    return [what for what, _ in _PATTERNS if what in kinds]
