"""`sse-tape record`: record SSE sessions into a cassette, through a proxy, from one request, or from a model."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import click

from .._exceptions import ConfigError, SSETapeError
from ..cassette import Cassette, check_cassette_path
from ..options import OPTIONS, Group, MissPolicy, RecordMode, check_sources
from ..redaction import Redaction
from .model import synthesizer
from .one_shot import one_shot_request
from .option_lists import command_options, take_group, take_serving_options
from .terminal import log

__all__ = ["record"]


@click.command()
@click.argument("url", required=False)
@command_options("record")
def record(
    url: str | None,
    cassette: Path,
    record_mode: str,
    upstream: str | None,
    model: str | None,
    idle_timeout: str,
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

    Credentials (Authorization, cookies, organization and project ids;
    headers, query parameters, form and JSON body fields named like keys,
    tokens, secrets, passwords, signatures or sessions; and any value shaped
    like a provider's key, a JWT, a private key or a password in a URL,
    whatever its name, and what --secret-pattern matches) are replaced by
    <redacted> before anything is written. `sse-tape check --secrets` finds
    any that got into a cassette.
    """
    redaction = Redaction.build(
        headers=words.pop("redact_header"),
        keep_headers=words.pop("keep_header"),
        json_fields=words.pop("redact_json_field"),
        keep_json_fields=words.pop("keep_json_field"),
        secret_patterns=words.pop("secret_pattern"),
    )
    timeout = OPTIONS["idle_timeout"].read(idle_timeout)
    one_shot = (words.pop("method"), words.pop("data"), words.pop("header"))
    mode = OPTIONS["record_mode"].read(record_mode)
    model_words = take_group(words, Group.MODEL)
    if [url, upstream, model].count(None) != 2:
        raise ConfigError("give a URL (one-shot mode), --upstream URL (proxy mode) or --model MODEL (synthesis)")
    policy = words["on_miss"] or (MissPolicy.SYNTH if model is not None else MissPolicy.RECORD)
    check_sources(OPTIONS["on_miss"].read(policy), upstream=model is None, model=model is not None, recording=True)
    if upstream is not None or model is not None:
        if any(one_shot):
            raise ConfigError("-X, -d and -H are for one-shot mode; in proxy mode the client sends the requests")
        options, listening = take_serving_options(words, on_miss=policy)
        # The server, once the words are understood: a mistyped option is said without it.
        from ..server import build_server
        from .serving import say_what_stays_whole, serve_until_stopped, server_arguments

        model_answers = (
            synthesizer(model, model_words, options.seed, OPTIONS["max_queue"].default) if model is not None else None
        )
        say_what_stays_whole(options, "the model's answers" if model is not None else "forwarded streams")
        try:
            server = build_server(
                [],
                options,
                upstream=upstream,
                model=model_answers,
                record_into=cassette,
                mode=mode,
                redaction=redaction,
                idle_timeout=timeout,
                **server_arguments(listening),
            )
            source = redaction.url(upstream.rstrip("/")) if upstream is not None else f"what {model} answers"
            banner = (
                f"replaying {cassette}, never asking {source} (record mode none)"
                if mode is RecordMode.NONE
                else f"recording {source} into {cassette} (record mode {mode})"
            )
            asyncio.run(serve_until_stopped(server, banner))
        finally:
            if model_answers is not None:
                model_answers.engine.close()
        if server.recorder is not None:
            log(server.recorder.summary())
        if server.recorder is not None and (unsaved := server.recorder.unsaved()) is not None:
            raise SSETapeError(unsaved)
    else:
        if words["faults"] or words["profiles"]:
            raise ConfigError("--fault and --profile are for proxy mode: one-shot mode prints what the upstream sends")
        assert url is not None
        _record_one_shot(url, cassette, *one_shot, redaction=redaction, idle_timeout=timeout)


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
        asyncio.run(
            record_once(
                url,
                cassette,
                method=method,
                headers=headers,
                body=body,
                redaction=redaction,
                idle_timeout=idle_timeout,
                out=sys.stdout.buffer,
                log=log,  # when the answer starts, when it ends and where it is saved, as a proxy's log says
            )
        )
    except KeyboardInterrupt:
        log(f"interrupted: what arrived is saved in {cassette}")
        sys.exit(130)
