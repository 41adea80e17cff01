"""The `sse-tape` command line."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from . import __version__
from ._exceptions import ConfigError, SSETapeError
from ._units import parse_duration
from .cassette import Cassette, Interaction, check_cassette_path, find_cassettes
from .dialects import DIALECTS, Dialect, Violation, check_error_response, detect, translate
from .dialects import get as get_dialect
from .faults import FAULTS, PROFILES
from .options import MissPolicy, ServeOptions, parse_match
from .record import RecordMode, describe, record_once
from .redaction import Redaction, find_secrets
from .server import Limits, MockServer, load_cassettes, recording_server
from .show import html_page, lines, view

__all__ = ["cli", "main"]


class _Failure(click.ClickException):
    exit_code = 2


class _Group(click.Group):
    """Turns every `SSETapeError` into one line on stderr and exit status 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SSETapeError as exc:
            raise _Failure(str(exc)) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="sse-tape")
def cli() -> None:
    """Record, replay and fault-inject Server-Sent-Events streams.

    Cassettes are .toml (readable, the default) or .msgpack (compact) files
    holding each recorded request and the response's raw chunks with their
    timing.
    """


_SERVER_OPTIONS = [
    click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on."),
    click.option(
        "--port",
        default=8080,
        show_default=True,
        type=click.IntRange(0, 65535),
        help="Port to listen on; 0 picks a free one and prints it.",
    ),
    click.option(
        "--match",
        "match",
        metavar="PARTS",
        help="What a request must share with a recording, comma-separated from method, path, query, body. "
        "[default: what each cassette says, else method,path,body]",
    ),
    click.option(
        "--ignore-body-field",
        multiple=True,
        metavar="FIELD",
        help="A JSON body field to leave out when comparing bodies, as a dotted path "
        "(user, metadata.trace_id, messages.*.name). Repeatable; replaces the fields the cassettes name.",
    ),
    click.option(
        "--pace",
        default="recorded",
        show_default=True,
        help="recorded; xK to scale (x2 twice as fast, x0.5 half speed); instant; a fixed gap (20ms); "
        "or tps:N events per second.",
    ),
    click.option("--jitter", metavar="AMOUNT", help="Move each gap randomly by up to AMOUNT (5ms, or 10% of the gap)."),
    click.option(
        "--seed", default=0, show_default=True, type=int, help="Seed for --jitter and faults: same seed, same run."
    ),
    click.option(
        "--miss-status",
        default=404,
        show_default=True,
        type=click.IntRange(400, 599),
        help="HTTP status of the JSON error sent when no recording matches.",
    ),
    click.option(
        "--request-timeout",
        default="10s",
        show_default=True,
        help="Close a connection whose request head, or body, takes longer than this to arrive.",
    ),
    click.option(
        "--keep-alive", default="60s", show_default=True, help="Close a connection idle this long between requests."
    ),
    click.option(
        "--max-connections",
        type=click.IntRange(1),
        help="Turn connections beyond this many away with a 503. [default: what the descriptor limit leaves room for]",
    ),
    click.option(
        "--allow-remote-control",
        is_flag=True,
        help="Obey the X-SSE-Tape-Fault header and the /__sse_tape__/ endpoints from other machines too "
        "(by default, from this machine only).",
    ),
    click.option("-q", "--quiet", is_flag=True, help="Do not log each request on stderr."),
]


def _server_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options of a command that answers requests from recordings (serve, record)."""
    for option in reversed(_SERVER_OPTIONS):
        command = option(command)
    return command


def _options(words: dict[str, Any], **more: Any) -> tuple[ServeOptions, dict[str, Any]]:
    """The serving options from the words `_server_options` added (plus `more`), and where to listen."""
    match, ignored = words.pop("match"), words.pop("ignore_body_field")
    options = ServeOptions.build(
        match_on=None if match is None else parse_match(match, "--match"),
        ignore_body_fields=ignored or None,
        pace=words.pop("pace"),
        jitter=words.pop("jitter"),
        seed=words.pop("seed"),
        miss_status=words.pop("miss_status"),
        **more,
    )
    limits = Limits(
        request_timeout=parse_duration(words.pop("request_timeout")),
        keep_alive=parse_duration(words.pop("keep_alive")),
        **({"max_connections": n} if (n := words.pop("max_connections")) is not None else {}),
    )
    listen = {
        "host": words.pop("host"),
        "port": words.pop("port"),
        "log": None if words.pop("quiet") else _log,
        "limits": limits,
        "allow_remote_control": words.pop("allow_remote_control"),
    }
    return options, listen


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@_server_options
@click.option(
    "--fault",
    "faults",
    multiple=True,
    metavar="SPEC",
    help="Inject a fault, as NAME[:key=value,...]; every fault takes p=, times= and path=. Repeatable. "
    f"Faults: {', '.join(FAULTS)}; `sse-tape faults` describes them.",
)
@click.option(
    "--profile",
    "profiles",
    multiple=True,
    metavar="NAME",
    help=f"Inject a named set of faults from sse-tape.toml or pyproject.toml, or a shipped one: {', '.join(PROFILES)}.",
)
@click.option(
    "--report",
    type=click.Path(path_type=Path),
    help="Append every journal entry (each request, match, miss, fault and stream end) to this file as JSON lines.",
)
@click.option(
    "--on-miss",
    type=click.Choice([MissPolicy.ERROR.value, MissPolicy.FORWARD.value]),
    default=MissPolicy.ERROR.value,
    show_default=True,
    help="What a request no recording answers gets: error (the API's JSON error naming the closest recordings) "
    "or forward (sent to --upstream, its answer streamed back; to record it, use sse-tape record).",
)
@click.option("--upstream", metavar="URL", help="With --on-miss forward: the server to send misses to, as a base URL.")
def serve(
    paths: tuple[Path, ...],
    faults: tuple[str, ...],
    profiles: tuple[str, ...],
    report: Path | None,
    on_miss: str,
    upstream: str | None,
    **words: Any,
) -> None:
    """Replay cassettes as a mock HTTP server.

    PATHS are cassette files or folders of them (searched recursively); with
    none, the cassettes bundled with sse-tape are served, one or more for each
    supported API. Each request gets the recorded response that matches it,
    byte for byte, at the chosen pace. Ctrl-C stops the server.
    """
    # Checked before anything starts: a bad spec is one line naming what is wrong.
    options, listen = _options(words, faults=faults, profiles=profiles, report=report, on_miss=on_miss)
    if upstream is not None and options.on_miss is not MissPolicy.FORWARD:
        raise ConfigError("--upstream is for --on-miss forward")
    cassettes = load_cassettes(paths)
    if options.on_miss is MissPolicy.ERROR:  # forwarding, even nothing recorded leaves something to answer
        _refuse_nothing(cassettes, paths, "serve")
    server = MockServer(cassettes, options=options, upstream=upstream, **listen)
    count = sum(len(c) for c in cassettes)
    asyncio.run(_serve_until_stopped(server, f"serving {count} interactions from {len(cassettes)} cassettes"))


@cli.command()
@click.argument("url", required=False)
@click.option(
    "-c",
    "--cassette",
    required=True,
    type=click.Path(path_type=Path),
    help="Cassette to append to (.toml or .msgpack); created if missing.",
)
@click.option(
    "--upstream",
    metavar="URL",
    help="Proxy mode: the server to forward to, as a base URL (http://127.0.0.1:8000, https://host/v1).",
)
@click.option(
    "--record-mode",
    type=click.Choice([m.value for m in RecordMode]),
    default=RecordMode.NEW_EPISODES.value,
    show_default=True,
    help="Proxy mode: once (record if the cassette is new, else replay only), new_episodes (replay what "
    "matches, record the rest), none (replay only), all (always record).",
)
@click.option(
    "--idle-timeout",
    default="300s",
    show_default=True,
    help="Give up on an upstream that sends nothing for this long; the stream is recorded as a timeout.",
)
@click.option("--redact-header", multiple=True, metavar="NAME", help="Also redact this header. Repeatable.")
@click.option(
    "--keep-header",
    multiple=True,
    metavar="NAME",
    help="Record this header as is, even if it looks secret. Repeatable.",
)
@click.option(
    "--redact-json-field",
    multiple=True,
    metavar="FIELD",
    help="Redact this JSON request body field, as a dotted path (user, metadata.email). Repeatable.",
)
@click.option(
    "--keep-json-field",
    multiple=True,
    metavar="NAME",
    help="Record JSON request body fields of this name as they are, even if they look secret. Repeatable.",
)
@click.option("-X", "--method", help="One-shot mode: the request method [default: POST with --data, else GET].")
@click.option("-d", "--data", help="One-shot mode: the request body; @FILE reads a file, @- standard input.")
@click.option(
    "-H", "--header", multiple=True, metavar="'NAME: VALUE'", help="One-shot mode: a request header. Repeatable."
)
@_server_options
def record(url: str | None, cassette: Path, upstream: str | None, **words: Any) -> None:
    """Record SSE sessions, with the timing of every chunk, into a cassette.

    Proxy mode, `sse-tape record --upstream URL -c FILE`: point any client at
    this proxy as its base URL and use it as usual. Each response streams
    through untouched as it arrives and is appended to the cassette as soon
    as it ends. Requests the record mode says to replay are answered from the
    cassette, as `sse-tape serve` would.

    One-shot mode, `sse-tape record URL -d @body.json -c FILE`: send one
    request, print the stream as it arrives, and append it.

    Credentials (Authorization, cookies, organization and project ids, and
    headers, query parameters and JSON body fields named like keys, tokens,
    secrets, passwords, signatures or sessions) are replaced by <redacted>
    before anything is written. `sse-tape check --secrets` finds any that
    got into a cassette.
    """
    redaction = Redaction.build(
        headers=words.pop("redact_header"),
        keep_headers=words.pop("keep_header"),
        json_fields=words.pop("redact_json_field"),
        keep_json_fields=words.pop("keep_json_field"),
    )
    idle_timeout = parse_duration(words.pop("idle_timeout"))
    one_shot = (words.pop("method"), words.pop("data"), words.pop("header"))
    mode = RecordMode(words.pop("record_mode"))
    if (url is None) == (upstream is None):
        raise ConfigError("give either a URL (one-shot mode) or --upstream URL (proxy mode)")
    if upstream is not None:
        if any(one_shot):
            raise ConfigError("-X, -d and -H are for one-shot mode; in proxy mode the client sends the requests")
        options, listen = _options(words)
        server = recording_server(
            cassette, upstream, mode=mode, redaction=redaction, idle_timeout=idle_timeout, options=options, **listen
        )
        banner = f"recording {upstream.rstrip('/')} into {cassette} (record mode {mode})"
        asyncio.run(_serve_until_stopped(server, banner))
        if server.recorder is not None:
            _log(server.recorder.summary())
        if server.recorder is not None and server.recorder.failures:
            raise SSETapeError(f"{server.recorder.failures} writes to {cassette} or its spool failed: see above")
    else:
        assert url is not None
        _record_one_shot(url, cassette, *one_shot, redaction=redaction, idle_timeout=idle_timeout)


def _one_shot_request(
    method: str | None, data: str | None, header: tuple[str, ...]
) -> tuple[str, list[tuple[str, str]], bytes]:
    """Method, headers and body from the curl-like -X, -d and -H options."""
    headers = []
    for line in header:
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            raise ConfigError(f"-H {line!r}: write a header as 'Name: value'")
        headers.append((name.strip(), value.strip()))
    body = _read_data(data) if data is not None else b""
    if body and not any(name.lower() == "content-type" for name, _ in headers):
        headers.append(("content-type", "application/json"))
    return method or ("POST" if data is not None else "GET"), headers, body


def _record_one_shot(
    url: str,
    cassette: Path,
    method: str | None,
    data: str | None,
    header: tuple[str, ...],
    *,
    redaction: Redaction,
    idle_timeout: float,
) -> None:
    method, headers, body = _one_shot_request(method, data, header)
    check_cassette_path(cassette)
    if cassette.exists():
        Cassette.load(cassette)  # an unreadable cassette stops us before the request is sent
    try:
        interaction = asyncio.run(
            record_once(
                url,
                cassette,
                method=method,
                headers=headers,
                body=body,
                redaction=redaction,
                idle_timeout=idle_timeout,
                out=sys.stdout.buffer,
            )
        )
    except KeyboardInterrupt:
        _log(f"interrupted: what arrived is saved in {cassette}")
        sys.exit(130)
    _log(f"{describe(interaction)}; appended to {cassette}")


def _read_data(data: str) -> bytes:
    if not data.startswith("@"):
        return data.encode()
    if data == "@-":
        return sys.stdin.buffer.read()
    try:
        return Path(data[1:]).read_bytes()
    except OSError as exc:
        raise ConfigError(f"--data {data}: cannot read {data[1:]}: {exc.strerror or exc}") from None


async def _serve_until_stopped(server: MockServer, what: str) -> None:
    try:
        await server.start()
    except OSError as exc:
        # asyncio wraps the bind error's text in a sentence of its own; an unknown host is a gaierror.
        known = exc.errno is not None and exc.errno in errno.errorcode
        reason = os.strerror(exc.errno).lower() if known and exc.errno is not None else exc.strerror or str(exc)
        raise SSETapeError(f"cannot listen on {server.host}:{server.port}: {reason}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    click.echo(f"sse-tape: {what} at {server.url} (Ctrl-C stops)")
    if not _is_loopback_host(server.host):
        control = (
            "and so can the fault header and the control endpoints"
            if server.allow_remote_control
            else ("the fault header and the control endpoints still answer this machine only")
        )
        _log(f"warning: listening on {server.host}: other machines can reach every recording served; {control}")
    try:
        await stop.wait()
    finally:
        await server.close()
    _log("stopped")


def _is_loopback_host(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _log(line: str) -> None:
    click.echo(f"sse-tape: {line}", err=True)


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--events", is_flag=True, help="Also print every event of each stream, as it was on the wire.")
@click.option(
    "--html",
    "html_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write one self-contained HTML page with a timeline per interaction to this file.",
)
def show(paths: tuple[Path, ...], events: bool, html_file: Path | None) -> None:
    """Show what cassettes hold: per interaction, what was asked, the answer and its timing.

    PATHS are cassette files or folders of them. Each interaction shows its
    request line and the prompt's last message, the status, the answer put
    together by its API's decoder (text, reasoning, refusal, tool calls,
    finish reason, usage), then its timing: first byte, first token, end,
    tokens per second, the gaps between events and the stalls.
    """
    loaded = [(path, Cassette.load(path)) for path in find_cassettes(paths)]
    _refuse_nothing([c for _, c in loaded], paths, "show")
    if html_file is not None:
        shown = [(path.name, view(n, i)) for path, c in loaded for n, i in enumerate(c, 1)]
        title = "sse-tape: " + ", ".join(path.name for path, _ in loaded)
        try:
            html_file.write_text(html_page(title, shown), encoding="utf-8")
        except OSError as exc:
            raise SSETapeError(f"cannot write {html_file}: {exc.strerror or exc}") from None
        click.echo(f"wrote {html_file} ({len(shown)} interaction{'s'[: len(shown) != 1]})")
        return
    for number, (path, cassette) in enumerate(loaded):
        if number:
            click.echo()
        click.echo(f"{path}: {len(cassette)} interaction{'s'[: len(cassette) != 1]}")
        if cassette.description:
            click.echo(f"   {cassette.description}")
        for n, interaction in enumerate(cassette, 1):
            click.echo()
            for line in lines(view(n, interaction), events=events):
                click.echo(line)


def _refuse_nothing(cassettes: list[Cassette], paths: tuple[Path, ...], what: str) -> None:
    """Exit 2 with one line naming the paths when they hold no interaction at all."""
    if not any(len(cassette) for cassette in cassettes):
        found = "no cassettes" if not cassettes else "no interactions"
        raise SSETapeError(f"nothing to {what}: {found} in {', '.join(str(p) for p in paths)}")


@cli.command()
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
    "-H", "--header", multiple=True, metavar="'NAME: VALUE'", help="With --live: a request header. Repeatable."
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--secrets",
    is_flag=True,
    help="Instead of the contracts, look for secrets in the cassettes: API keys, bearer tokens, JWTs, AWS keys, "
    "and credentials in headers, query parameters or body fields that were not redacted. Exit 1 if any.",
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
) -> None:
    """Check streams against their API's contract.

    Each interaction's dialect (openai-chat, openai-completions,
    openai-responses, lmstudio-chat) is told from its path, or named with
    --dialect; every violation is reported with the position of the event and
    the reason. Exit status: 0 when clean, 1 when violations are found, 2 when
    the input cannot be used.
    """
    chosen = get_dialect(dialect) if dialect else None
    if (live is None) == (not cassettes):
        raise ConfigError("give cassettes to check, or --live URL")
    if secrets:
        if live is not None:
            raise ConfigError("--secrets checks cassettes, not --live streams")
        _check_secrets(cassettes, as_json)
        return
    if live is not None:
        request_method, headers, body = _one_shot_request(method, data, header)
        interaction = asyncio.run(record_once(live, None, method=request_method, headers=headers, body=body))
        sources: list[tuple[str, list[Interaction]]] = [(live, [interaction])]
    else:
        loaded = [(path, Cassette.load(path)) for path in find_cassettes(cassettes)]
        _refuse_nothing([c for _, c in loaded], cassettes, "check")
        sources = [(str(path), c.interactions) for path, c in loaded]
    rows = [
        _check_interaction(source, n, interaction, chosen)
        for source, interactions in sources
        for n, interaction in enumerate(interactions, 1)
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        for row in rows:
            where = f"{row['source']} #{row['interaction']} {row['method']} {row['path']}"
            if row["error"]:
                click.echo(f"{where}: {row['error']}")
                continue
            count = len(row["violations"])
            verdict = "ok" if not count else f"{count} violation{'s'[: count != 1]}"
            click.echo(f"{where} ({row['dialect']}): {verdict}")
            for v in row["violations"]:
                click.echo(f"  {Violation(v['event'], v['message'])}")
        total = sum(len(row["violations"]) for row in rows)
        click.echo(f"checked {len(rows)} interaction{'s'[: len(rows) != 1]}: {total} violation{'s'[: total != 1]}")
    if any(row["error"] for row in rows):
        sys.exit(2)
    if any(row["violations"] for row in rows):
        sys.exit(1)


def _check_secrets(paths: tuple[Path, ...], as_json: bool) -> None:
    """`check --secrets`: every secret in the cassettes, one line each; exit 1 when there is any."""
    loaded = [(path, Cassette.load(path)) for path in find_cassettes(paths)]
    _refuse_nothing([c for _, c in loaded], paths, "check")
    rows = [
        {"source": str(path), "interaction": n, "method": i.request.method, "path": i.request.path, "secret": found}
        for path, cassette in loaded
        for n, i in enumerate(cassette, 1)
        for found in find_secrets(i)
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        for row in rows:
            click.echo(f"{row['source']} #{row['interaction']} {row['method']} {row['path']}: {row['secret']}")
        click.echo(f"{len(rows)} secret{'s'[: len(rows) != 1]} found")
    if rows:
        sys.exit(1)


def _check_interaction(source: str, n: int, interaction: Interaction, chosen: Dialect | None) -> dict[str, Any]:
    request, response = interaction.request, interaction.response
    row: dict[str, Any] = {
        "source": source,
        "interaction": n,
        "method": request.method,
        "path": request.path,
        "status": response.status,
        "dialect": None,
        "violations": [],
        "error": None,
    }
    found = chosen or detect(interaction)
    if found is None:
        row["error"] = "cannot tell its dialect: name it with --dialect"
        return row
    row["dialect"] = found.name
    if response.status >= 400:
        violations = check_error_response(response)
    else:
        try:
            violations = found.check([event for _, event in response.events()], request)
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
            # A stream malformed in a way no rule foresaw is still a finding, not a crash.
            violations = [Violation(None, f"the stream is malformed in a way check cannot follow ({exc!r})")]
    row["violations"] = [{"event": v.event, "message": v.message} for v in violations]
    return row


@cli.command("faults")
def list_faults() -> None:
    """List the faults serve can inject, their keys, and the shipped profiles."""
    for name, kind in FAULTS.items():
        click.echo(f"{name:<11} {kind.help}")
        if kind.keys:
            main = f"; {name}:VALUE sets {kind.main}" if kind.main else ""
            click.echo(f"{'':<11} keys: {', '.join(key.describe() for key in kind.keys)}{main}")
    click.echo("\nevery fault also takes p=<probability, default 1>, times=<count> and path=<path ending>")
    click.echo("positions: 5 (after 5 events), 50% (of the events), 200b (a byte), 1.5s (a time)")
    click.echo("\nprofiles (--profile):")
    for name, specs in PROFILES.items():
        click.echo(f"  {name}: {'  '.join(specs)}")


@cli.command()
@click.argument("source", type=click.Path(path_type=Path))
@click.argument("target", type=click.Path(path_type=Path))
@click.option(
    "--to-dialect",
    metavar="NAME",
    help=f"Also translate every interaction into this API: {', '.join(DIALECTS)}. Timing is kept.",
)
@click.option("--dialect", "from_dialect", metavar="NAME", help="The source's dialect, if its paths do not tell.")
def convert(source: Path, target: Path, to_dialect: str | None, from_dialect: str | None) -> None:
    """Rewrite a cassette in another encoding, chosen by TARGET's suffix (.toml or .msgpack).

    Lossless: every chunk keeps its exact bytes and timing. With --to-dialect,
    each stream is decoded and encoded again as the other API would send it,
    each new event at the time of the original one, and each request's path
    and body are rewritten for that API: record once from an OpenAI-compatible
    server, test an LM Studio or Responses client.
    """
    loaded = Cassette.load(source)
    if to_dialect is not None:
        into = get_dialect(to_dialect)
        origin = get_dialect(from_dialect) if from_dialect else None
        loaded.interactions = [translate(i, into, origin) for i in loaded.interactions]
    loaded.save(target)
    click.echo(f"wrote {target} ({len(loaded)} interaction{'s'[: len(loaded) != 1]})")


def main() -> None:
    """The console script's entry point."""
    cli(prog_name="sse-tape")
