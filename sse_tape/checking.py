"""Checking recorded interactions: each stream against its API's contract, and each request and response for
secrets that were not redacted.

What `sse-tape check` prints, as data: one `ContractCheck` per interaction (or per source that cannot be
read), from `check_interaction` and `check_interactions`; one `SecretFound` per secret, from
`secrets_in`. Each turns into the row `check --json` prints with `as_json`.

    from sse_tape import Cassette
    from sse_tape.checking import check_interactions

    for result in check_interactions(Cassette.load("chat.toml"), source="chat.toml"):
        print(result.number, result.dialect, [str(v) for v in result.violations])
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .cassette import Interaction
from .dialects import Protocol, Violation, check_error_response, check_framing, detect
from .framing import SSE
from .matching import framing_of, is_streamed
from .redaction import Redaction, find_secrets

__all__ = ["FRAMING_ONLY", "ContractCheck", "SecretFound", "check_interaction", "check_interactions", "secrets_in"]

FRAMING_ONLY = "sse"
"""The `dialect` of a stream whose events look like no API sse-tape knows: its SSE framing is all that is checked."""


@dataclass(frozen=True, slots=True)
class ContractCheck:
    """What checking one interaction against its API's contract found; or, with `number` None, why its
    source (a cassette file, a live URL) could not be read at all.

    `dialect` is the API it was checked as (`FRAMING_ONLY` for a stream of no known API); `error` says why
    it could not be checked (its dialect cannot be told), and then `violations` is empty.
    """

    source: str
    number: int | None
    """The interaction's place in its source, from 1; None when the source cannot be read."""
    method: str | None = None
    path: str | None = None
    status: int | None = None
    dialect: str | None = None
    violations: tuple[Violation, ...] = ()
    error: str | None = None

    @classmethod
    def unreadable(cls, source: str, why: str) -> ContractCheck:
        """The result for a source that cannot be read, and `why`."""
        return cls(source, None, error=why)

    @property
    def ok(self) -> bool:
        """Checked, and nothing found."""
        return self.error is None and not self.violations

    def as_json(self) -> dict[str, Any]:
        """The row `sse-tape check --json` prints for it."""
        return {
            "source": self.source,
            "interaction": self.number,
            "method": self.method,
            "path": self.path,
            "status": self.status,
            "dialect": self.dialect,
            "violations": [{"event": v.event, "message": v.message} for v in self.violations],
            "error": self.error,
        }


def check_interaction(
    interaction: Interaction, dialect: Protocol | None = None, *, source: str = "", number: int = 1
) -> ContractCheck:
    """Check `interaction` against `dialect`'s contract, or, when None, against the API it speaks (told from
    its path, or else from what its first events look like).

    A stream is checked event by event (a JSON array's, element by element, and for being one whole
    array: a cut one says so); a JSON answer to a request for no stream as that API's answer; an
    error response (status 400 or more) for its error body; and, whatever it answered, the exchange as a whole
    (its headers) by the API's own rules (`Protocol.check_exchange`). A stream whose events look like no API sse-tape
    knows is checked as plain SSE (`FRAMING_ONLY`): UTF-8, and no block left unfinished. A stream malformed
    in a way no rule foresaw is one violation that says so, never an exception. `source` and `number` say
    where it comes from, for the result.
    """
    request, response = interaction.request, interaction.response

    def result(**verdict: Any) -> ContractCheck:
        return ContractCheck(source, number, request.method, request.path, response.status, **verdict)

    found = dialect or detect(interaction)
    if found is None and is_streamed(interaction) and response.events():
        return result(dialect=FRAMING_ONLY, violations=tuple(check_framing(response)))
    if found is None:
        return result(error="cannot tell its dialect: name it with --dialect")
    if response.status >= 400:
        violations = check_error_response(response)
    else:
        framing = framing_of(interaction)
        try:
            if framing is not None and framing is not SSE:
                # A stream framed otherwise (Gemini's JSON array): the framing as a whole, then its messages.
                violations = [Violation(None, problem) for problem in framing.problems(response.body)]
                violations += found.check([event for _, event in framing.events(response.chunks)], request)
            elif (events := [event for _, event in response.events()]) or is_streamed(interaction):
                violations = found.check(events, request)  # events with no content type are a stream all the same
            else:  # one JSON answer, to a request for no stream: no stream rule applies
                violations = found.check_json(response.body, request)
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
            # A stream malformed in a way no rule foresaw is still a finding, not a crash.
            violations = [Violation(None, f"the stream is malformed in a way check cannot follow ({exc!r})")]
    violations += found.check_exchange(interaction)
    return result(dialect=found.name, violations=tuple(violations))


def check_interactions(
    interactions: Iterable[Interaction], dialect: Protocol | None = None, *, source: str = ""
) -> list[ContractCheck]:
    """`check_interaction` of each of `interactions` (a `Cassette`, say), numbered from 1."""
    return [
        check_interaction(interaction, dialect, source=source, number=n)
        for n, interaction in enumerate(interactions, 1)
    ]


@dataclass(frozen=True, slots=True)
class SecretFound:
    """A secret that was not redacted, in one interaction; or, with `number` None, why a source (a cassette
    file) could not be read to look for them."""

    source: str
    number: int | None
    """The interaction's place in its source, from 1; None when the source cannot be read."""
    method: str | None = None
    path: str | None = None
    secret: str | None = None
    """Where it is and what it looks like, in words (`request header x-api-key is not redacted`)."""
    error: str | None = None

    @classmethod
    def unreadable(cls, source: str, why: str) -> SecretFound:
        """The result for a source that cannot be read, and `why`."""
        return cls(source, None, error=why)

    def as_json(self) -> dict[str, Any]:
        """The row `sse-tape check --secrets --json` prints for it."""
        return {
            "source": self.source,
            "interaction": self.number,
            "method": self.method,
            "path": self.path,
            "secret": self.secret,
            "error": self.error,
        }


def secrets_in(
    interactions: Iterable[Interaction], *, source: str = "", redaction: Redaction | None = None
) -> list[SecretFound]:
    """Every secret `interactions` (a `Cassette`, say) hold: headers, query parameters and body fields that
    `redaction` (by default, what `sse-tape record` redacts) names and that are not redacted, and whatever
    has the shape of a credential (`credentials.SHAPES`, and `redaction`'s own patterns) anywhere else, the
    streamed chunks of the responses too. One result per secret, in order, its path shown as a cassette
    would hold it; [] when there is none."""
    redaction = redaction or Redaction()
    return [
        SecretFound(source, n, interaction.request.method, redaction.path(interaction.request.path), secret=found)
        for n, interaction in enumerate(interactions, 1)
        for found in find_secrets(interaction, redaction)
    ]
