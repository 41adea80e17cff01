"""`sse-tape check`: streams against their API's contract, or cassettes for secrets (`sse_tape.checking`)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import click

from .._exceptions import ConfigError
from ..cassette import Interaction
from ..checking import ContractCheck, SecretFound, check_interactions, secrets_in
from ..dialects import DIALECTS
from ..dialects import get as get_dialect
from ..drift import DriftCheck, drift_checks
from ..redaction import Redaction
from .loading import load_each
from .one_shot import one_shot_request

__all__ = ["check"]


@click.command()
@click.argument("cassettes", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--dialect",
    metavar="NAME",
    help=f"Check against this dialect instead of telling it from the path: {', '.join(DIALECTS)}.",
)
@click.option(
    "--live", metavar="URL", help="Send one request to URL and check the stream it answers, instead of cassettes."
)
@click.option("-X", "--method", help="With --live: the request method [default: POST with --data, else GET].")
@click.option("-d", "--data", help="With --live: the request body; @FILE reads a file, @- standard input.")
@click.option(
    "-H",
    "--header",
    multiple=True,
    metavar="'NAME: VALUE'",
    help="With --live: a request header; with --drift, one that each request re-sent carries (its credentials, "
    "in place of those the cassette redacted). Repeatable.",
)
@click.option(
    "--drift",
    is_flag=True,
    help="Instead of the contracts, re-send each recorded request to --upstream and report how the answer's shape "
    "drifted from the recorded one: new or missing JSON fields, event types, their order, the status, the content "
    "type, a stream or one JSON answer. Exit 1 if any did.",
)
@click.option(
    "--upstream",
    metavar="URL",
    help="With --drift: the server's base URL, as record --upstream takes it (a user:password@ in it goes as Basic "
    "credentials).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--secrets",
    is_flag=True,
    help="Instead of the contracts, look for secrets in the cassettes, streamed chunks too: provider API keys, "
    "bearer tokens, JWTs, AWS keys, private keys, passwords in URLs, and credentials in headers, query parameters "
    "or body fields that were not redacted. Exit 1 if any.",
)
@click.option(
    "--secret-pattern",
    "secret_patterns",
    multiple=True,
    metavar="REGEX",
    help="With --secrets: also find what this regular expression matches, as record's --secret-pattern redacts it. "
    "Repeatable.",
)
def check(
    cassettes: tuple[Path, ...],
    dialect: str | None,
    live: str | None,
    method: str | None,
    data: str | None,
    header: tuple[str, ...],
    as_json: bool,
    secrets: bool,
    secret_patterns: tuple[str, ...],
    drift: bool,
    upstream: str | None,
) -> None:
    """Check streams against their API's contract.

    Each interaction's dialect (openai-chat, openai-completions,
    openai-responses, lmstudio-chat, anthropic-messages, gemini) is told from
    its path, or named with --dialect; every violation is reported with the
    position of the event and the reason. A JSON answer to a request for no
    stream is checked as that API's answer, and an error response for its
    error body. A stream whose events look like none of them (a notification
    feed) is checked as plain SSE: UTF-8, and no block left unfinished. A
    cassette that cannot be read is reported, and the others checked all the
    same. Exit status: 0 when clean, 1 when violations are found, 2 when some
    input cannot be used.

    With --drift and --upstream URL, each recorded request is sent again to
    that server, and each answer's shape is compared with the recorded one's:
    one line per interaction, exit status 1 when any drifted, 2 when the
    server sends no answer.
    """
    if upstream is not None and not drift:
        raise ConfigError("--upstream goes with --drift")
    if drift:
        if live is not None or secrets or dialect is not None or method is not None or data is not None:
            raise ConfigError(
                "--drift re-sends the cassettes' requests as recorded: it takes no --live, --secrets, "
                "--dialect, -X or -d"
            )
        if upstream is None or not cassettes:
            raise ConfigError("check --drift CASSETTE... --upstream URL: give both")
        _check_drift(cassettes, upstream, header, as_json)
        return
    chosen = get_dialect(dialect) if dialect else None
    if (live is None) == (not cassettes):
        raise ConfigError("give cassettes to check, or --live URL")
    if secret_patterns and not secrets:
        raise ConfigError("--secret-pattern goes with --secrets")
    if secrets:
        if live is not None:
            raise ConfigError("--secrets checks cassettes, not --live streams")
        _check_secrets(cassettes, as_json, Redaction.build(secret_patterns=secret_patterns))
        return

    if live is not None:
        from ..record import record_once  # the recorder: only a live check records

        request_method, headers, body = one_shot_request(method, data, header)
        interaction = asyncio.run(record_once(live, None, method=request_method, headers=headers, body=body))
        # Named as a cassette would store its request: a key in its query (Gemini's `?key=`) is not printed.
        sources: list[tuple[str, list[Interaction] | str]] = [(Redaction().url(live), [interaction])]
    else:
        loaded = load_each(cassettes, "check")
        sources = [(source, c if isinstance(c, str) else c.interactions) for source, c in loaded]
    results: list[ContractCheck] = []
    for source, what in sources:
        if isinstance(what, str):  # why the cassette cannot be read
            results.append(ContractCheck.unreadable(source, what))
        else:
            results += check_interactions(what, chosen, source=source)
    if as_json:
        _print_json(results)
    else:
        for result in results:
            where = result.source
            if result.number is not None:  # else the cassette cannot be read
                where += f" #{result.number} {result.method} {result.path}"
            if result.error:
                click.echo(f"{where}: {result.error}")
                continue
            count = len(result.violations)
            verdict = "ok" if not count else f"{count} violation{'s'[: count != 1]}"
            click.echo(f"{where} ({result.dialect}): {verdict}")
            for violation in result.violations:
                click.echo(f"  {violation}")
        total = sum(len(result.violations) for result in results)
        checked = sum(result.number is not None for result in results)
        click.echo(
            f"checked {checked} interaction{'s'[: checked != 1]}: {total} violation{'s'[: total != 1]}"
            + _unreadable(len(results) - checked)
        )
    if any(result.error for result in results):
        sys.exit(2)
    if any(result.violations for result in results):
        sys.exit(1)


def _check_secrets(paths: tuple[Path, ...], as_json: bool, redaction: Redaction) -> None:
    """`check --secrets`: every secret in the cassettes, one line each; exit 1 when there is any, 2 when a
    cassette cannot be read."""
    results: list[SecretFound] = []
    for source, cassette in load_each(paths, "check"):
        if isinstance(cassette, str):  # why it cannot be read
            results.append(SecretFound.unreadable(source, cassette))
        else:
            results += secrets_in(cassette, source=source, redaction=redaction)
    found = sum(result.error is None for result in results)
    if as_json:
        _print_json(results)
    else:
        for result in results:
            where = result.source if result.error else f"{result.source} #{result.number} {result.method} {result.path}"
            click.echo(f"{where}: {result.error or result.secret}")
        click.echo(f"{found} secret{'s'[: found != 1]} found" + _unreadable(len(results) - found))
    if found < len(results):
        sys.exit(2)
    if results:
        sys.exit(1)


def _check_drift(paths: tuple[Path, ...], upstream: str, header: tuple[str, ...], as_json: bool) -> None:
    """`check --drift`: each recorded request re-sent to `upstream`, a line for each as its answer comes; exit 1
    when any drifted, 2 when a cassette cannot be read or the upstream sends no answer."""
    headers = one_shot_request(None, None, header)[1]
    results: list[DriftCheck] = []

    def say(line: str) -> None:
        if not as_json:
            click.echo(line)

    async def run() -> None:
        for source, cassette in load_each(paths, "check"):
            if isinstance(cassette, str):  # why it cannot be read
                results.append(DriftCheck.unreadable(source, cassette))
                say(results[-1].line())
                continue
            async for result in drift_checks(cassette, upstream, headers=headers, source=source):
                results.append(result)
                say(result.line())

    try:
        asyncio.run(run())
    finally:  # what was found before the upstream failed is printed all the same
        if as_json:
            _print_json(results)
    drifted = sum(result.drifted for result in results)
    unreadable = sum(result.error is not None for result in results)
    sent = sum(result.skipped is None and result.error is None for result in results)
    say(
        f"re-sent {sent} request{'s'[: sent != 1]} to {Redaction().url(upstream)}: {drifted} drifted"
        + _unreadable(unreadable)
    )
    if unreadable:
        sys.exit(2)
    if drifted:
        sys.exit(1)


class _Row(Protocol):
    def as_json(self) -> dict[str, Any]: ...


def _print_json(results: Sequence[_Row]) -> None:
    click.echo(json.dumps([result.as_json() for result in results], indent=2, ensure_ascii=False))


def _unreadable(count: int) -> str:
    """The end of a summary line: how many cassettes could not be read, if any."""
    return f"; {count} cassette{'s'[: count != 1]} unreadable" if count else ""
