"""The option lists several commands share: a server's (serve, record), a model's (serve, record, synth) and
the faults' (serve, record), each a decorator, and what their words mean once parsed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from .._units import parse_duration
from ..faults import FAULTS, PROFILES
from ..options import ServeOptions, parse_match
from .terminal import log

__all__ = ["Listening", "fault_options", "model_options", "server_options", "take_model_words", "take_serving_options"]

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


def server_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options of a command that answers requests from recordings (serve, record)."""
    for option in reversed(_SERVER_OPTIONS):
        command = option(command)
    return command


@dataclass(frozen=True, slots=True)
class Listening:
    """Where a server listens and how long it waits for its clients, from the words `server_options` added."""

    host: str
    port: int
    log: Callable[[str], None] | None
    """Where each request is logged; None with --quiet."""
    request_timeout: float
    keep_alive: float
    max_connections: int | None
    """None: what the descriptor limit leaves room for."""
    allow_remote_control: bool


def take_serving_options(words: dict[str, Any], **more: Any) -> tuple[ServeOptions, Listening]:
    """The serving options from the words `server_options` added (plus `more`), and where to listen; the words
    are taken out of `words`. A word that means nothing is a `ConfigError`, before any server is made."""
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
    listening = Listening(
        request_timeout=parse_duration(words.pop("request_timeout")),
        keep_alive=parse_duration(words.pop("keep_alive")),
        max_connections=words.pop("max_connections"),
        host=words.pop("host"),
        port=words.pop("port"),
        log=None if words.pop("quiet") else log,
        allow_remote_control=words.pop("allow_remote_control"),
    )
    return options, listening


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


def model_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options of a command that runs a model (synth, serve --model, record --on-miss synth)."""
    for option in reversed(_MODEL_OPTIONS):
        command = option(command)
    return command


def take_model_words(words: dict[str, Any]) -> dict[str, Any]:
    """Take the words `model_options` added out of `words`."""
    return {name: words.pop(name) for name in _MODEL_WORDS}


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


def fault_options(command: Callable[..., None]) -> Callable[..., None]:
    """--fault and --profile, read the same way by every command that answers requests (serve, record)."""
    for option in reversed(_FAULT_OPTIONS):
        command = option(command)
    return command
