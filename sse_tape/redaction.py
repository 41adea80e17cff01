"""Keeping secrets out of cassettes, and finding the ones that got in.

By default everything that carries a credential is replaced by a marker
before anything is written, by its name and by its shape:

- headers: `Authorization`, `Proxy-Authorization`, `Cookie`, `Set-Cookie`,
  `OpenAI-Organization`, `OpenAI-Project`, `Anthropic-Organization-Id`, and
  any header with a word in its name that begins like `key`, `token`,
  `secret`, `pass`, `credential`, `auth`, `signature`, `session`, `cookie`,
  `jwt`, `bearer`, `private` or `cert`, or is `pin` (`x-api-key`,
  `X-Authentication`, `x-goog-api-key`, `X-Signature`, `X-Session-Id`,
  `X-Upstream-Bearer`, `X-Client-Cert`), in requests and responses;
  rate-limit headers (`x-ratelimit-remaining-tokens`) are counts, and kept,
  as is MCP's `Mcp-Session-Id` (an identifier, never a credential);
- query parameters and form-encoded body fields named so, plus `sig` and
  `code` (`X-Amz-Signature`, `?sig=`, an OAuth `?code=`), with `&` or `;`
  between them;
- JSON request body fields named so, at any depth (`api_key`,
  `metadata.password`, `auth.token`), whole when they hold a list or an
  object (`"auth": {"bearer": ...}`); a field must be such a word whole, so
  `max_tokens` is kept, and so is MCP's `progressToken`. A body that is not valid UTF-8 is read all the same;
- any value, whatever its name, that has the shape of a credential (see
  `credentials.SHAPES`: provider keys, JWTs, private keys, Basic credentials, a
  password in a URL), in request headers, the query, path segments, JSON
  strings at any depth, form fields and other bodies, and response headers.
  A header, parameter, path segment or JSON string that holds one is
  replaced whole (so that the marker matches on replay); in a body that is
  neither JSON nor a form, the credential alone is.

Model output a client sends back is kept, by name and by shape: Gemini's
`thoughtSignature`, the Responses API's `encrypted_content`, and the
`signature` of an Anthropic thinking block and the `data` of a redacted one
(opaque seals the API set on its own reasoning, that must come back
unchanged). Response bodies are the recording: they are kept as they came.

Chosen headers and JSON body fields can be redacted too, chosen ones kept
(`--keep-header`, `--keep-json-field`), and shapes added
(`--secret-pattern`). A recorded value equal to the marker matches any value
on replay. `find_secrets` looks for what slipped through: every shape
anywhere in a recording, streamed chunks too, and secret-named headers,
parameters and fields left as they were.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote, unquote, unquote_plus, urlsplit

from . import _json
from ._paths import locate
from .cassette import REDACTED, Headers, Interaction, Request, Response
from .credentials import Shapes

__all__ = ["REDACTED", "Redaction", "find_secrets", "shown_url"]

# A header word that begins with one of these marks a secret: authentication, tokens, passwords, keys.
_SECRET_STEMS = (
    "key", "apikey", "token", "secret", "pass", "credential", "cookie", "auth", "signature", "session", "jwt",
    "bearer", "private", "cert",
)  # fmt: skip
# A JSON field or query parameter must be one of these words whole (max_tokens is not a secret).
_SECRET_WORDS = frozenset(
    {
        "key", "apikey", "token", "secret", "password", "passwd", "pwd", "pass", "passphrase", "pin", "credential",
        "credentials", "cookie", "auth", "authorization", "authentication", "signature", "session", "sessionid",
        "jwt", "bearer", "private", "privatekey", "cert", "certificate",
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
# Named like secrets, but not: OpenAI's prompt cache key, a request's idempotency key, and MCP's session id and
# progress token, which a server mints and a client numbers to tell its sessions and requests apart, never to
# authenticate ("servers MUST NOT use sessions for authentication",
# https://modelcontextprotocol.io/specification/2025-11-25/basic/security_best_practices): replay answers with them.
_NOT_SECRET = frozenset({"prompt_cache_key", "idempotency-key", "idempotency_key", "mcp-session-id", "progresstoken"})
# Model output a client sends back as the stream gave it, neither redacted nor looked into: Gemini's thought
# signature, the Responses API's encrypted reasoning.
_MODEL_OUTPUT = frozenset({"thoughtsignature", "thought_signature", "encrypted_content"})
# Anthropic's content blocks whose field is the API's seal on the model's reasoning, which a client sends back
# with the conversation: model output, no credential
# (https://docs.anthropic.com/en/docs/build-with-claude/extended-thinking, "preserving thinking blocks").
_SIGNED_BLOCKS = {"thinking": "signature", "redacted_thinking": "data"}
# JSON text escapes of white space, read as white space when a recorded body is searched for shapes: a key at the
# start of a line of a streamed answer (`\nsk-...`) follows no letter.
_ESCAPED_SPACE = re.compile(r"\\[nrt]")
_FORM = "application/x-www-form-urlencoded"
_QUOTED_MARKER = quote(REDACTED, safe="")


def _words(name: str) -> set[str]:
    return {word.lower() for word in _WORD.findall(name)}


def _secret_header(name: str) -> bool:
    lower = name.lower()
    if lower in _ALWAYS:
        return True
    if lower in _NOT_SECRET or lower in _MODEL_OUTPUT:
        return False
    words = _words(name)
    if "ratelimit" in words or lower.startswith(("ratelimit", "x-ratelimit")):
        return False  # counts of requests and tokens, not credentials
    return "pin" in words or any(word.startswith(_SECRET_STEMS) for word in words)


def _secret_field(name: str, words: frozenset[str]) -> bool:
    if name.lower() in _NOT_SECRET:
        return False
    parts = _words(name)
    return bool(parts & words) or "".join(parts) in words or name.lower() in words


def _redactable(value: Any) -> bool:
    """Whether a secret-named field's value is redacted: a string, a number, a list or an object; not `null` or
    a boolean (`"private": false` says nothing), nor what is redacted already."""
    return value is not None and not isinstance(value, bool) and value != REDACTED and value not in ([], {})


@dataclass(frozen=True, slots=True)
class Redaction:
    """What to redact. The defaults keep credentials out; `keep_headers` and `keep_json_fields` let one
    through on purpose, `secret_patterns` add shapes of credential to `credentials.SHAPES`."""

    headers: frozenset[str] = frozenset()
    """Header names to redact besides the defaults (any case)."""
    keep_headers: frozenset[str] = frozenset()
    """Header names to record as they are, even if they look secret."""
    json_fields: tuple[str, ...] = ()
    """Dotted paths into a JSON request body to redact besides the defaults (`user`, `metadata.*.email`)."""
    keep_json_fields: frozenset[str] = frozenset()
    """JSON body field names to record as they are, even if they look secret (`token`)."""
    secret_patterns: tuple[str, ...] = ()
    """Regular expressions of credentials besides the built-in shapes (`--secret-pattern`)."""
    shapes: Shapes = field(init=False, repr=False, compare=False)
    """The shapes looked for: the built-in ones and `secret_patterns`."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shapes", Shapes(self.secret_patterns))

    @classmethod
    def build(
        cls,
        *,
        headers: Iterable[str] = (),
        keep_headers: Iterable[str] = (),
        json_fields: Iterable[str] = (),
        keep_json_fields: Iterable[str] = (),
        secret_patterns: Iterable[str] = (),
    ) -> Redaction:
        """A redaction from command-line lists; a secret pattern that is no regular expression is a
        `ConfigError`."""
        return cls(
            frozenset(h.lower() for h in headers),
            frozenset(h.lower() for h in keep_headers),
            tuple(json_fields),
            frozenset(keep_json_fields),
            tuple(secret_patterns),
        )

    def is_secret(self, name: str) -> bool:
        """Whether a header of this name is redacted, whatever its value."""
        lower = name.lower()
        if lower in self.keep_headers:
            return False
        return lower in self.headers or _secret_header(name)

    def _secret_header_value(self, name: str, value: str) -> bool:
        if name.lower() in self.keep_headers:
            return False
        return self.is_secret(name) or self.shapes.holds(value)

    def interaction(self, interaction: Interaction) -> Interaction:
        """The interaction with its secrets replaced by the marker."""
        return replace(
            interaction, request=self.request(interaction.request), response=self.response(interaction.response)
        )

    def request(self, request: Request) -> Request:
        """The request with the secrets in its path, headers, query and body replaced by the marker."""
        return replace(
            request,
            path=self.path(request.path),
            headers=self._headers(request.headers),
            query=self.query(request.query),
            body=self._body(request.body, request.header("content-type") or ""),
        )

    def response(self, response: Response) -> Response:
        """The response with the secrets in its headers replaced by the marker (its body is the recording)."""
        return replace(response, headers=self._headers(response.headers))

    def _headers(self, headers: Headers) -> Headers:
        return tuple(
            (name, REDACTED if value != REDACTED and self._secret_header_value(name, value) else value)
            for name, value in headers
        )

    def _secret_param(self, name: str) -> bool:
        lower = name.lower()
        return lower not in self.keep_headers and (lower in self.headers or _secret_field(name, _QUERY_WORDS))

    def path(self, path: str) -> str:
        """A request's path with each segment that holds a credential replaced by the marker (percent-encoded)."""
        if not self.shapes.holds(unquote(path)):
            return path
        return "/".join(_QUOTED_MARKER if self.shapes.holds(unquote(s)) else s for s in path.split("/"))

    def query(self, query: str) -> str:
        """A query string (or a form-encoded body) with the values of its secret parameters, and every value
        that holds a credential, replaced by the marker (percent-encoded)."""
        if not query:
            return query
        # Only the secret values change: names, order and separators stay exactly as they were sent.
        pieces = _QUERY_PIECES.split(query)
        for n in range(0, len(pieces), 2):
            name, eq, value = pieces[n].partition("=")
            if not eq:  # a bare word: a credential given as the whole parameter
                pieces[n] = _QUOTED_MARKER if self.shapes.holds(unquote_plus(name)) else name
            elif value != _QUOTED_MARKER and (
                self._secret_param(unquote_plus(name))
                or (unquote_plus(name).lower() not in self.keep_headers and self.shapes.holds(unquote_plus(value)))
            ):
                pieces[n] = f"{name}={_QUOTED_MARKER}"
        return "".join(pieces)

    def url(self, url: str) -> str:
        """A URL as sse-tape shows it in a message: its user info (`user:password@`) replaced by the marker,
        its path's credentials redacted as `path` redacts them, and its query and fragment as `query` does
        (`?key=...` as Gemini takes it)."""
        scheme, sep, rest = url.partition("://")
        if sep:
            # The authority ends at the first `/`, not at `?` or `#`: a password with one of those in it, not
            # percent-encoded, is still not shown.
            authority, slash, after = rest.partition("/")
            if "@" in authority:
                authority = f"{_QUOTED_MARKER}@{authority.rpartition('@')[2]}"
            before, hash_, fragment = after.partition("#")
            path, mark, query = before.partition("?")
            return f"{scheme}{sep}{authority}{slash}{self.path(path)}{mark}{self.query(query)}{hash_}{self.query(fragment)}"
        before, hash_, fragment = url.partition("#")
        base, mark, query = before.partition("?")
        return self.path(base) + mark + self.query(query) + hash_ + self.query(fragment)

    def _body(self, body: bytes, content_type: str) -> bytes:
        if not body:
            return body
        parsed = _parse(body)
        if parsed is not None:
            doc, utf8 = parsed
            changed = False
            for container, key in [hit for path in self.json_fields for hit in locate(doc, path.split("."))]:
                if container[key] != REDACTED:
                    container[key], changed = REDACTED, True
            if isinstance(doc, str) and self.shapes.holds(doc):
                doc, changed = REDACTED, True
            named, strings = self._fields(doc)
            held = self.shapes.find([container[key] for container, key in strings])
            for container, key in [*named, *(strings[n] for n in held)]:
                container[key], changed = REDACTED, True
            return _dump(doc, utf8) if changed else body
        # Bytes as latin-1: one character each, so that whatever is not a credential comes back as it was.
        text = body.decode("latin-1")
        if content_type.split(";")[0].strip().lower() == _FORM:
            return self.query(text).encode("latin-1")
        return self.shapes.scrub(text, REDACTED).encode("latin-1")

    def _fields(self, doc: Any) -> tuple[list[tuple[Any, Any]], list[tuple[Any, Any]]]:
        """The (container, key) pairs of a JSON document to redact or look into, at any depth, in one walk
        (bounded by the parser): the fields named like a secret that hold a value to redact (not walked into),
        then every other string. Model output the client sends back is left out, and so are the fields the
        user keeps."""
        named: list[tuple[Any, Any]] = []
        strings: list[tuple[Any, Any]] = []
        stack = [doc]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                signed = _SIGNED_BLOCKS.get(node["type"]) if isinstance(node.get("type"), str) else None
                for key, value in node.items():
                    if key in self.keep_json_fields or key == signed or str(key).lower() in _MODEL_OUTPUT:
                        continue  # the model's, not the user's: what the stream sent, sent back
                    if _secret_field(str(key), _SECRET_WORDS):
                        if _redactable(value):
                            named.append((node, key))
                    elif isinstance(value, str):
                        strings.append((node, key))
                    elif isinstance(value, dict | list):
                        stack.append(value)
            elif isinstance(node, list):
                for n, value in enumerate(node):
                    if isinstance(value, str):
                        strings.append((node, n))
                    elif isinstance(value, dict | list):
                        stack.append(value)
        return named, strings


def _parse(body: bytes) -> tuple[Any, bool] | None:
    """A JSON body's value, and whether it is UTF-8; None when it is no JSON. Bytes that are not UTF-8 are read
    all the same (each stands for itself, as a lone surrogate), so that what they hide is found, and written
    back as they came."""
    stepwise = len(body) > _json.STEPWISE_FROM  # a body this large is redacted in a thread (`thorough`)
    try:
        try:
            return _json.parse(body.decode("utf-8"), stepwise=stepwise), True
        except UnicodeDecodeError:
            return _json.parse(body.decode("utf-8", "surrogateescape"), stepwise=stepwise), False
    except ValueError:
        return None


def _dump(doc: Any, utf8: bool) -> bytes:
    """The JSON of `doc`, a body that was parsed, with any byte that was not UTF-8 as it was."""
    if not utf8:
        try:
            return json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            pass  # an escaped lone surrogate (`"\ud800"`) besides: escaped again
    return _json.dumps(doc, compact=False).encode()


def find_secrets(interaction: Interaction, redaction: Redaction | None = None) -> list[str]:
    """Where `interaction` holds something that looks like a secret, and what, one line each (never the secret
    itself): a header, parameter or field named like a secret and not redacted, or any shape of
    `credentials.SHAPES` (and `redaction`'s own) anywhere, the streamed chunks of the response too."""
    redaction = redaction or Redaction()
    shapes = redaction.shapes
    request, response = interaction.request, interaction.response
    found: list[str] = []
    found += [f"request path holds {kind}" for kind in shapes.kinds(unquote(request.path))]
    for side, headers in (("request", request.headers), ("response", response.headers)):
        for name, value in headers:
            if value == REDACTED or name.lower() in redaction.keep_headers:
                continue
            if redaction.is_secret(name):
                found.append(f"{side} header {name} is not redacted")
            else:
                found += [f"{side} header {name} holds {kind}" for kind in shapes.kinds(value)]
    found += _query_secrets(redaction, request.query, "query parameter", "query")
    parsed = _parse(request.body) if request.body else None
    if parsed is not None:
        doc = parsed[0]
        named, strings = redaction._fields(doc)
        found += [f"request body field {key} is not redacted" for _, key in named]
        held = shapes.find([doc] if isinstance(doc, str) else [container[key] for container, key in strings])
        kinds = {kind for kinds in held.values() for kind in kinds}
        found += [f"request body holds {kind}" for kind in shapes.kinds_in_order(kinds)]
    elif request.body:
        text = request.body.decode("latin-1")
        if (request.header("content-type") or "").split(";")[0].strip().lower() == _FORM:
            found += _query_secrets(redaction, text, "request body field", "request body")
        else:
            found += [f"request body holds {kind}" for kind in shapes.kinds(_ESCAPED_SPACE.sub("  ", text))]
    body = _ESCAPED_SPACE.sub("  ", response.body.decode("latin-1"))
    found += [f"response body holds {kind}" for kind in shapes.kinds(body)]
    return found


def _query_secrets(redaction: Redaction, query: str, what: str, whole: str) -> list[str]:
    """What `find_secrets` says of a query string or a form body: `what` names one of its fields, `whole` it."""
    found: list[str] = []
    for part in _QUERY_SEPARATOR.split(query) if query else ():
        name, eq, value = part.partition("=")
        shown = unquote_plus(name)
        if not eq:  # a bare word
            found += [f"{whole} holds {kind}" for kind in redaction.shapes.kinds(shown)]
            continue
        if value == _QUOTED_MARKER or shown.lower() in redaction.keep_headers:
            continue
        if redaction._secret_param(shown):
            found.append(f"{what} {shown} is not redacted")
        else:
            found += [f"{what} {shown} holds {kind}" for kind in redaction.shapes.kinds(unquote_plus(value))]
    return found


def shown_url(url: str) -> str:
    """A URL as a log line or an error may show it: without the user and password before its host, and without
    its query, which may carry them too (Redis's `?password=`)."""
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2], query="").geturl()
