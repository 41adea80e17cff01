"""`sse-tape record`: record SSE sessions into a cassette, through a proxy, from one request, or from a model."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import click

from .._exceptions import ConfigError, SSETapeError
from .._units import parse_duration
from ..cassette import Cassette, check_cassette_path
from ..options import MissPolicy, RecordMode
from ..redaction import Redaction
from ..show import describe
from .model import synthesizer
from .one_shot import one_shot_request
from .option_lists import fault_options, model_options, server_options, take_model_words, take_serving_options
from .terminal import log

__all__ = ["record"]


@click.command()
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
@click.option(
    "--on-miss",
    type=click.Choice([MissPolicy.RECORD.value, MissPolicy.SYNTH.value]),
    help="Proxy mode: who answers what is recorded: record (the --upstream) or synth (the --model). "
    "[default: synth with --model, else record]",
)
@click.option(
    "--model",
    metavar="MODEL",
    help="Record what a local model answers, in place of an upstream (a .gguf file or a model package).",
)
@model_options
@server_options
@fault_options
def record(
    url: str | None,
    cassette: Path,
    upstream: str | None,
    on_miss: str | None,
    model: str | None,
    faults: tuple[str, ...],
    profiles: tuple[str, ...],
    **words: Any,
) -> None:
    """Record SSE sessions, with the timing of every chunk, into a cassette.

    Proxy mode, `sse-tape record --upstream URL -c FILE`: point any client at
    this proxy as its base URL and use it as usual. Each response streams
    through untouched as it arrives, each chunk written to a spool beside the
    cassette (FILE.<id>.spool) before the client gets it; the session's
    interactions are written into the cassette itself when the recorder
    stops (a killed recorder's spool is read as part of the cassette). Requests the
    record mode says to replay are answered from the cassette, as `sse-tape
    serve` would.

    With --fault or --profile, the client gets each forwarded stream as the
    faults make it, and the cassette keeps what the upstream sent, whole,
    noting each fault that acted; `sse-tape serve --recorded-faults` replays
    what the client got. A status, hang or empty fault answers in the
    upstream's place: nothing is forwarded or recorded.

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
    model_words = take_model_words(words)
    if (on_miss == MissPolicy.SYNTH.value) != (model is not None) and on_miss is not None:
        raise ConfigError("--on-miss synth and --model go together")
    if [url, upstream, model].count(None) != 2:
        raise ConfigError("give a URL (one-shot mode), --upstream URL (proxy mode) or --model MODEL (synthesis)")
    if upstream is not None or model is not None:
        if any(one_shot):
            raise ConfigError("-X, -d and -H are for one-shot mode; in proxy mode the client sends the requests")
        options, listening = take_serving_options(words, faults=faults, profiles=profiles)
        # The server, once the words are understood: a mistyped option is said without it.
        from ..server import recording_server
        from .serving import say_what_stays_whole, serve_until_stopped, server_arguments

        model_answers = synthesizer(model, model_words, options.seed, 16) if model is not None else None
        say_what_stays_whole(options, "the model's answers" if model is not None else "forwarded streams")
        try:
            server = recording_server(
                cassette,
                upstream,
                mode=mode,
                redaction=redaction,
                idle_timeout=idle_timeout,
                options=options,
                model=model_answers,
                **server_arguments(listening),
            )
            source = redaction.url(upstream.rstrip("/")) if upstream is not None else f"what {model} answers"
            banner = f"recording {source} into {cassette} (record mode {mode})"
            asyncio.run(serve_until_stopped(server, banner))
        finally:
            if model_answers is not None:
                model_answers.engine.close()
        if server.recorder is not None:
            log(server.recorder.summary())
        if server.recorder is not None and server.recorder.failures:
            raise SSETapeError(f"{server.recorder.failures} writes to {cassette} or its spool failed: see above")
    else:
        if faults or profiles:
            raise ConfigError("--fault and --profile are for proxy mode: one-shot mode prints what the upstream sends")
        assert url is not None
        _record_one_shot(url, cassette, *one_shot, redaction=redaction, idle_timeout=idle_timeout)


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
    from ..record import record_once  # the recorder: a subsystem of its own

    method, headers, body = one_shot_request(method, data, header)
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
        log(f"interrupted: what arrived is saved in {cassette}")
        sys.exit(130)
    log(f"{describe(interaction)}; appended to {cassette}")
