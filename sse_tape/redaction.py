"""Keeping secrets out of cassettes.

By default every header that carries a credential is replaced by a marker
before anything is written: `Authorization`, `Proxy-Authorization`, `Cookie`,
`Set-Cookie`, and any header or query parameter whose name has a word such as
`key`, `token`, `secret` or `password` in it (`x-api-key`, `x-goog-api-key`,
`x-auth-token`, `?api_key=`). A word must match whole, so
`x-ratelimit-remaining-tokens` is kept. Chosen JSON body fields (`user`,
`metadata.email`) can be redacted too. A recorded value equal to the marker
matches any value on replay.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from urllib.parse import parse_qsl, quote

from . import _json
from ._paths import locate
from .cassette import Headers, Interaction, Request, Response

__all__ = ["REDACTED", "Redaction"]

#: What a secret is replaced with.
REDACTED = "<redacted>"

_SECRET_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials", "cookie", "auth"}
)
_ALWAYS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie", "api-key", "x-api-key"})
# Words of a name in any style: x-api-key, api_key, apiKey, accessToken, X-AuthToken.
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


@dataclass(frozen=True, slots=True)
class Redaction:
    """What to redact. The defaults keep credentials out; `keep_headers` lets one through on purpose."""

    headers: frozenset[str] = frozenset()
    """Header names to redact besides the defaults (any case)."""
    keep_headers: frozenset[str] = frozenset()
    """Header names to record as they are, even if they look secret."""
    json_fields: tuple[str, ...] = ()
    """Dotted paths into a JSON request body (`user`, `metadata.*.email`)."""

    @classmethod
    def build(
        cls, *, headers: Iterable[str] = (), keep_headers: Iterable[str] = (), json_fields: Iterable[str] = ()
    ) -> Redaction:
        """A redaction from command-line lists."""
        return cls(
            frozenset(h.lower() for h in headers), frozenset(h.lower() for h in keep_headers), tuple(json_fields)
        )

    def is_secret(self, name: str) -> bool:
        """Whether a header or query parameter of this name is redacted."""
        lower = name.lower()
        if lower in self.keep_headers:
            return False
        words = {word.lower() for word in _WORD.findall(name)}
        return lower in _ALWAYS or lower in self.headers or not _SECRET_WORDS.isdisjoint(words)

    def interaction(self, interaction: Interaction) -> Interaction:
        """The interaction with its secrets replaced by the marker."""
        return replace(
            interaction, request=self.request(interaction.request), response=self.response(interaction.response)
        )

    def request(self, request: Request) -> Request:
        return replace(
            request,
            headers=self._headers(request.headers),
            query=self._query(request.query),
            body=self._body(request.body),
        )

    def response(self, response: Response) -> Response:
        return replace(response, headers=self._headers(response.headers))

    def _headers(self, headers: Headers) -> Headers:
        return tuple((name, REDACTED if self.is_secret(name) else value) for name, value in headers)

    def _query(self, query: str) -> str:
        if not query:
            return query
        pairs = parse_qsl(query, keep_blank_values=True)
        if not any(self.is_secret(name) for name, _ in pairs):
            return query  # leave the recorded query string exactly as it was sent
        return "&".join(
            f"{quote(name, safe='')}={quote(REDACTED if self.is_secret(name) else value, safe='')}"
            for name, value in pairs
        )

    def _body(self, body: bytes) -> bytes:
        if not self.json_fields or not body:
            return body
        try:
            doc = _json.parse(body)
        except ValueError:
            return body
        hits = [hit for path in self.json_fields for hit in locate(doc, path.split("."))]
        for container, key in hits:
            container[key] = REDACTED
        if not hits:
            return body
        return _json.dumps(doc, compact=False).encode()
