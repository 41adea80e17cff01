"""The pytest plugin: a live streaming endpoint in one fixture, for any client test.

::

    @pytest.mark.sse_tape("chat", faults=["error:5"])
    def test_a_stream_that_fails(sse_tape):
        client = OpenAI(base_url=sse_tape.openai_url, api_key="test")
        ...

`sse_tape` starts a mock server on a free loopback port for one test and
yields an `SSETape`; `sse_tape_module` and `sse_tape_session` share one
server across a module or the session, started over before each test. The
`sse_tape` marker says what it serves and how (see `Marked`); with no
cassette named, a test gets `cassettes/<module>/<test>.toml` beside its file.

From the command line: `--sse-tape-record=MODE` records what is missing from
`--sse-tape-upstream URL` (pytest-recording's modes); `--sse-tape-fault`,
`--sse-tape-profile` and `--sse-tape-seed` put faults on every test;
`--sse-tape-gauntlet` runs each test once more under each fault of a
standard set and prints which it survived. A test fails when a request
matched no recording (with the closest ones and how they differ), and at
teardown when a recording never played or a fault asked for was never
injected, as pytest_httpx does.

The plugin is registered through the `pytest11` entry point and imports
sse-tape's server only when a test uses it. docs/pytest.md has examples.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import sys
import time
import tomllib
import zlib
from collections import Counter
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

if TYPE_CHECKING:
    from .cassette import Recording, Request
    from .faults import Fault
    from .incidents import Miss
    from .journal import Entry, Journal
    from .server import MockServer

__all__ = ["GAUNTLET", "Marked", "SSETape"]

#: The faults `--sse-tape-gauntlet` runs each test under, by name: each a failure a client should live
#: through. The ones that end a request act once (`times=1`), so that a client that retries recovers.
GAUNTLET: dict[str, str] = {
    "429": "status:code=429,retry_after=1,times=1",
    "500": "status:code=500,times=1",
    "error": "error:at=50%,times=1",
    "reset": "disconnect:after=50%,mode=reset,times=1",
    "stall": "stall:at=50%,for=1s,heartbeat=250ms",
    "fragment": "fragment:size=1",
    "crlf": "eol:crlf",
    "no-done": "drop:at=done",
}

_SHARED = ("sse_tape_module", "sse_tape_session")
_FIXTURES = ("sse_tape", "async_sse_tape", *_SHARED)
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_RECORD_MODES = ("none", "once", "new_episodes", "all", "rewrite")
_UNSAFE = re.compile(r"[<>?%*:|\"'/\\]")
_AS_RECORDED = "as-recorded"


# --- configuration ----------------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sse-tape", "sse-tape: recorded SSE streams as a live endpoint")
    group.addoption(
        "--sse-tape-record",
        choices=_RECORD_MODES,
        default=None,
        help="Record from the upstream: once (cassettes that do not exist yet), new_episodes (requests no "
        "recording answers), all (every request, added to the cassette), rewrite (each test's cassette made "
        "anew), none (replay only; the default).",
    )
    group.addoption("--sse-tape-upstream", metavar="URL", help="The server to record from (or ini sse_tape_upstream).")
    group.addoption(
        "--sse-tape-model",
        metavar="MODEL",
        help="A local model (.gguf or model package) answers what no recording does.",
    )
    group.addoption(
        "--sse-tape-fault",
        action="append",
        default=[],
        metavar="SPEC",
        help="A fault on every sse_tape test, such as 'error:5' or 'disconnect:50%%,mode=reset' (repeatable).",
    )
    group.addoption(
        "--sse-tape-profile", action="append", default=[], metavar="NAME", help="A fault profile on every test."
    )
    group.addoption("--sse-tape-seed", type=int, metavar="N", help="Seed of every random choice (default: random).")
    group.addoption(
        "--sse-tape-gauntlet",
        action="store_true",
        help="Run each sse_tape test once more under each fault of the gauntlet, and report what it survived.",
    )
    group.addoption(
        "--sse-tape-gauntlet-report", metavar="FILE", help="Run the gauntlet, and write its results there as JSON."
    )
    parser.addini(
        "sse_tape_cassette_dir",
        "Folder of the sse_tape cassettes, relative to the ini file (default: cassettes/ beside each test file).",
    )
    parser.addini("sse_tape_upstream", "The server --sse-tape-record records from.")
    parser.addini("sse_tape_allow_unused", "Let recordings go unplayed without failing the test.", type="bool")
    parser.addini(
        "sse_tape_gauntlet", "The gauntlet's faults, one 'name = spec' a line (default: the standard set).", "linelist"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Settings:
    """What the command line and the ini file say, read once per session."""

    record: str
    upstream: str | None
    model: str | None
    faults: tuple[str, ...]
    profiles: tuple[str, ...]
    seed: int
    gauntlet: dict[str, str]
    """The gauntlet's faults by name: the standard set, or the ini's."""
    run_gauntlet: bool
    gauntlet_report: Path | None
    cassette_dir: Path | None
    allow_unused: bool


_SETTINGS = pytest.StashKey[_Settings]()
_MODELS = pytest.StashKey[dict[str, Any]]()
_TAPES = pytest.StashKey[dict[str, "SSETape"]]()  # a test's tapes, by the name of their fixture
_VARIANT = pytest.StashKey["_Variant"]()
_CALL_PASSED = pytest.StashKey[bool]()
_REWRITTEN = pytest.StashKey[set[Path]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "sse_tape(*cassettes, pace='instant', jitter=None, match_on=None, ignore_body_fields=None, faults=(), "
        "profiles=(), recorded_faults=False, miss_status=404, model=None, env=False, allow_unused=None, split=None, "
        "survives=()): "
        "what the sse_tape fixtures serve and how; see sse_tape.pytest_plugin.Marked.",
    )
    settings = _read_settings(config)
    config.stash[_SETTINGS] = settings
    config.stash[_MODELS] = {}
    config.stash[_REWRITTEN] = set()
    if settings.faults or settings.profiles or settings.run_gauntlet:
        _check_faults(config, settings)
    if settings.run_gauntlet and not hasattr(config, "workerinput"):  # pytest-xdist's workers report to the controller
        config.pluginmanager.register(_GauntletTable(settings), "sse_tape_gauntlet")
    asyncio_plugin = sys.modules.get("pytest_asyncio.plugin")
    if asyncio_plugin is not None and config.pluginmanager.is_registered(asyncio_plugin):
        from . import _pytest_async

        config.pluginmanager.register(_pytest_async, "sse_tape_async")


def _read_settings(config: pytest.Config) -> _Settings:
    option = config.option
    record = option.sse_tape_record or "none"
    upstream = option.sse_tape_upstream or config.getini("sse_tape_upstream") or None
    if upstream is not None and not upstream.startswith(("http://", "https://")):
        from .redaction import Redaction

        shown = Redaction().url(upstream)  # a key in its query is not printed
        raise pytest.UsageError(f"sse-tape upstream {shown!r}: give a base URL, such as http://127.0.0.1:8000")
    base = config.inipath.parent if config.inipath is not None else config.rootpath
    folder = config.getini("sse_tape_cassette_dir") or _pyproject_cassette_dir(config.rootpath)
    gauntlet = dict(GAUNTLET)
    if lines := config.getini("sse_tape_gauntlet"):
        gauntlet = {}
        for line in lines:
            name, eq, spec = (part.strip() for part in line.partition("="))
            if not eq or not _NAME.fullmatch(name) or not spec:
                raise pytest.UsageError(f"sse_tape_gauntlet: write each line as 'name = fault spec', not {line!r}")
            gauntlet[name] = spec
    report = option.sse_tape_gauntlet_report
    run_gauntlet = bool(option.sse_tape_gauntlet or report)
    if run_gauntlet and record != "none":
        raise pytest.UsageError("--sse-tape-gauntlet replays what is recorded: record first, then run the gauntlet")
    seed = option.sse_tape_seed
    if seed is None:  # pytest-xdist's workers take the controller's (pytest_configure_node)
        seed = getattr(config, "workerinput", {}).get("sse_tape_seed")
    if seed is None:
        seed = random.SystemRandom().randrange(100_000)
    return _Settings(
        record=record,
        upstream=upstream,
        model=option.sse_tape_model,
        faults=tuple(option.sse_tape_fault),
        profiles=tuple(option.sse_tape_profile),
        seed=seed,
        gauntlet=gauntlet,
        run_gauntlet=run_gauntlet,
        gauntlet_report=Path(report) if report else None,
        cassette_dir=base / folder if folder else None,
        allow_unused=bool(config.getini("sse_tape_allow_unused")),
    )


def _pyproject_cassette_dir(root: Path) -> str | None:
    """`cassette_dir` of `[tool.sse-tape]` in the project's pyproject.toml."""
    try:
        data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    value = data.get("tool", {}).get("sse-tape", {}).get("cassette_dir")
    return value if isinstance(value, str) and value else None


def _check_faults(config: pytest.Config, settings: _Settings) -> None:
    """Read every fault the command line names now: a bad one stops the run before any test."""
    from ._exceptions import ConfigError
    from .faults import parse_fault

    try:
        for spec in [*settings.faults, *(settings.gauntlet.values() if settings.run_gauntlet else ())]:
            parse_fault(spec)
        _profile_faults(config, settings.profiles)
    except ConfigError as exc:
        raise pytest.UsageError(f"sse-tape: {exc}") from None


def _profile_faults(config: pytest.Config, names: Sequence[str]) -> list[Fault]:
    """The faults of the profiles `names`, the project's read from the rootdir's `sse-tape.toml` or
    `pyproject.toml` (as `cassette_dir` is), wherever pytest runs from."""
    from .faults import load_profile

    return [fault for name in names for fault in load_profile(name, config.rootpath)]


def pytest_report_header(config: pytest.Config) -> str:
    settings = config.stash[_SETTINGS]
    words = [f"seed {settings.seed} (--sse-tape-seed={settings.seed} repeats it)", f"record mode {settings.record}"]
    if settings.faults or settings.profiles:
        words.append("faults " + ", ".join([*settings.profiles, *settings.faults]))
    if settings.run_gauntlet:
        words.append("gauntlet " + ", ".join(settings.gauntlet))
    return "sse-tape: " + "; ".join(words)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: every worker takes the controller's seed, so that the header's seed repeats the run, and
    its `--dist` mode (a worker's own says `no`), so that it knows whether it runs a module's tests alone."""
    node.workerinput["sse_tape_seed"] = node.config.stash[_SETTINGS].seed
    node.workerinput["sse_tape_dist"] = getattr(node.config.option, "dist", "load")


@pytest.hookimpl(trylast=True)  # after -k and -m have chosen the tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Stop the run at its start when `--sse-tape-record` has nothing to record from: no upstream, and no
    model, neither from the command line nor from a marker of the tests chosen (rather than fail each test
    with the same line)."""
    settings = config.stash[_SETTINGS]
    if settings.record == "none" or settings.upstream is not None or settings.model is not None:
        return
    if any(_model_answers(item) for item in items):
        return  # those tests record what their model answers; the others fail saying so (`_server`)
    message = "sse-tape: " + _no_upstream(settings.record, "a test's marker")
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is None:
        raise pytest.UsageError(message)
    # A pytest-xdist worker's UsageError is the controller's INTERNALERROR: the worker runs nothing, and its
    # controller stops the run with the line (pytest_testnodedown).
    workeroutput["sse_tape_usage"] = message
    items.clear()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist's controller, as a worker goes down: a worker that found nothing to record from stops the
    run, as it would alone; the parts of spread scopes a worker played are added up (`pytest_runtestloop`)."""
    output = getattr(node, "workeroutput", None)  # none from a worker that crashed
    if output is not None and (message := output.get("sse_tape_usage")):
        raise pytest.UsageError(message)
    spread = node.config.stash.setdefault(_SPREAD, _SpreadScopes())
    if output is None or error is not None:
        spread.whole = False
        return
    for node_id, part in output.get("sse_tape_scopes", {}).items():
        spread.add(node_id, part["scope"], _ScopeUse.from_wire(part["use"]))


def _model_answers(item: pytest.Item) -> bool:
    """Whether a model given in a marker answers a test's requests: the test's own marker's for its own
    server, the module's for the module's (no marker reaches the session's)."""
    names = getattr(item, "fixturenames", ())
    module = item.getparent(pytest.Module)
    nodes: list[pytest.Item | pytest.Module] = [item] if {"sse_tape", "async_sse_tape"} & set(names) else []
    if "sse_tape_module" in names and module is not None:
        nodes.append(module)
    try:
        return any(_marked(node).model for node in nodes)
    except pytest.UsageError:
        return False  # the test fails at its setup, saying what is wrong with its marker


def _no_upstream(record: str, marker: str | None) -> str:
    """Why `--sse-tape-record=record` cannot record; `marker`: whose `model=` would answer, if a marker can."""
    model = "--sse-tape-model MODEL" + (f", or model= in {marker}" if marker is not None else "")
    return (
        f"--sse-tape-record={record} records from an upstream: give --sse-tape-upstream URL "
        f"(or the ini's sse_tape_upstream), or a model ({model})"
    )


def pytest_unconfigure(config: pytest.Config) -> None:
    for engine in config.stash.get(_MODELS, {}).values():
        engine.close()


# --- the marker -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Marked:
    """What `@pytest.mark.sse_tape(...)` says; each word as `ServeOptions.build` reads it, unless said here.

    Markers on the class and module add what the test's own leaves out.
    """

    cassettes: tuple[str, ...] = ()
    """Cassette names (`chat`: `chat.toml`), files or folders, in the cassette folder; none: the test's own."""
    pace: str = "instant"
    """`instant` by default in tests; `recorded`, `x2`, `20ms`, `tps:40` as for `serve`."""
    jitter: str | None = None
    match_on: str | Sequence[str] | None = None
    ignore_body_fields: Sequence[str] | None = None
    faults: Sequence[str] = ()
    profiles: Sequence[str] = ()
    recorded_faults: bool = False
    """Put back the faults each recording notes its client got when it was recorded (with faults)."""
    miss_status: int = 404
    model: str | None = None
    """A local model (a .gguf file or a model package) answers what no recording does."""
    env: bool = False
    """Set `OPENAI_BASE_URL`, `ANTHROPIC_BASE_URL` and their API keys (dummies) for the test, so code that makes
    its own client reaches the mock."""
    allow_unused: bool | None = None
    """Let recordings go unplayed, and faults asked for go uninjected; None: the ini's `sse_tape_allow_unused`."""
    split: str | int | None = None
    """`"every"`: run the test once per byte offset of the longest stream, each stream sent as two writes
    cut there; N: at N offsets spread evenly."""
    survives: Sequence[str] = ()
    """The gauntlet's faults (by name, or `"all"`) the test promises to survive: only those fail the run."""


def _bind(*cassettes: str, **words: Any) -> Marked:
    return Marked(cassettes=tuple(str(c) for c in cassettes), **words)


def _marked(node: pytest.Item | pytest.Collector | Any) -> Marked:
    """What the sse_tape markers on a test (then its class, then its module) say; raises `pytest.UsageError`
    naming what is wrong."""
    args: tuple[Any, ...] | None = None
    words: dict[str, Any] = {}
    for marker in node.iter_markers("sse_tape"):
        if args is None and marker.args:
            args = marker.args
        words = {**marker.kwargs, **words}
    try:
        marked = _bind(*(args or ()), **words)
    except TypeError as exc:
        known = ", ".join(f.name for f in fields(Marked) if f.name != "cassettes")
        message = str(exc).replace("Marked.__init__()", "@pytest.mark.sse_tape")
        raise pytest.UsageError(f"{message}; it takes cassette names, then {known}") from None
    if isinstance(marked.faults, str) or isinstance(marked.profiles, str):
        raise pytest.UsageError("@pytest.mark.sse_tape: give faults and profiles as lists, such as faults=['error:5']")
    split = marked.split
    if split is not None and split != "every" and (isinstance(split, bool) or not isinstance(split, int) or split < 1):
        raise pytest.UsageError(f"@pytest.mark.sse_tape: split={split!r}: give 'every' or a number of offsets")
    gauntlet = node.config.stash[_SETTINGS].gauntlet
    if marked.survives != "all":
        if isinstance(marked.survives, str):
            raise pytest.UsageError("@pytest.mark.sse_tape: give survives as a list of the gauntlet's faults, or 'all'")
        if unknown := sorted(set(marked.survives) - set(gauntlet)):
            raise pytest.UsageError(
                f"@pytest.mark.sse_tape: survives {unknown}: the gauntlet's faults are {', '.join(gauntlet)}"
            )
    return marked


# --- cassettes ------------------------------------------------------------------------------------------


def _folder(config: pytest.Config, test_file: Path | None) -> Path:
    """The cassette folder: the configured one, else `cassettes/` beside the test file (or the rootdir)."""
    configured = config.stash[_SETTINGS].cassette_dir
    if configured is not None:
        return configured
    return (test_file.parent if test_file is not None else config.rootpath) / "cassettes"


def _named(folder: Path, names: Sequence[str]) -> list[Path]:
    """The cassette files and folders `names` name in `folder` (`chat` is `chat.toml`); none may leave it."""
    paths = []
    for name in names:
        if not name.strip():
            raise pytest.UsageError("@pytest.mark.sse_tape: a cassette name is empty")
        path = folder / name
        if path.suffix not in (".toml", ".msgpack") and not path.is_dir() and not name.endswith(("/", "\\")):
            path = path.with_name(path.name + ".toml")
        if Path(name).is_absolute() or not path.resolve().is_relative_to(folder.resolve()):
            raise pytest.UsageError(f"@pytest.mark.sse_tape: cassette {name!r} is outside the cassette folder {folder}")
        paths.append(path)
    return paths


def _test_cassettes(config: pytest.Config, item: Any, marked: Marked, variant: _Variant) -> list[Path]:
    """A test's cassettes: those its marker names, else `<folder>/<module>/<test>.toml`."""
    test_file = Path(item.path)
    folder = _folder(config, test_file)
    if marked.cassettes:
        return _named(folder, marked.cassettes)
    name = _plain(item.name, variant)
    if getattr(item, "cls", None) is not None:
        name = f"{item.cls.__name__}.{name}"
    return [folder / test_file.stem / f"{_UNSAFE.sub('-', name)}.toml"]


def _plain(name: str, variant: _Variant) -> str:
    """A test's name or node id without the parameter this plugin adds."""
    ours = variant.id
    for form, keep in ((f"[{ours}]", ""), (f"[{ours}-", "["), (f"-{ours}-", "-"), (f"-{ours}]", "]")):
        if form in name:
            return name.replace(form, keep)
    return name


# --- variants: the split sweep and the gauntlet ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Variant:
    """One run of a test: its streams split at a byte, or under a gauntlet fault, or as recorded."""

    split: int | None = None
    gauntlet: str | None = None

    @property
    def id(self) -> str:
        return "sse-tape@" + (f"split={self.split}" if self.split is not None else self.gauntlet or _AS_RECORDED)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not any(name in metafunc.fixturenames for name in _FIXTURES):
        return
    config = metafunc.config
    settings = config.stash[_SETTINGS]
    test = metafunc.definition
    try:
        marked = _marked(test)
        splits: list[int | None] = [None]
        # A sweep replays a recorded stream: none while recording (the cassette may not be there yet).
        if marked.split is not None and settings.record == "none":
            paths: list[Path] = []
            for fixture in _servers(metafunc.fixturenames):  # the sweep splits the streams of each
                scope = fixture.removeprefix("sse_tape_") if fixture in _SHARED else "function"
                node = {"function": test, "module": test.getparent(pytest.Module), "session": test.session}[scope]
                found = _scope_cassettes(config, node, scope, _marked(node))
                if scope == "function" and not marked.cassettes:  # a parametrized test has a cassette for each case
                    found += sorted(found[0].parent.glob(found[0].stem + "[[]*.toml"))
                paths += found
            splits = [*_offsets(_stream_sizes(paths), marked.split)] or [None]
    except pytest.UsageError:
        return  # the test runs once, and its fixture fails it saying why
    # The gauntlet runs the test as recorded, not at each offset: a sweep crossed with it would be mostly the
    # same runs (fragment and the line ends undo a split), and thousands of them.
    gauntlet = [_Variant(None, name) for name in settings.gauntlet] if settings.run_gauntlet else []
    variants = [_Variant(s) for s in splits] + gauntlet
    if variants != [_Variant()]:
        metafunc.parametrize("_sse_tape_variant", variants, ids=[v.id for v in variants], indirect=True)


def _stream_sizes(paths: list[Path]) -> list[int]:
    """The size of each streamed answer the cassettes hold."""
    from ._exceptions import SSETapeError
    from .cassette import Cassette, find_cassettes
    from .matching import is_streamed

    try:
        files = find_cassettes(p for p in paths if p.exists())
        return [len(i.response.body) for f in files for i in Cassette.load(f).interactions if is_streamed(i)]
    except SSETapeError as exc:
        raise pytest.UsageError(f"sse-tape split: {exc}") from None


def _offsets(sizes: list[int], split: str | int) -> list[int]:
    """The byte offsets to split at: every one inside the longest stream, or `split` of them spread evenly."""
    longest = max(sizes, default=0)
    if longest < 2:
        return []
    if split == "every":
        return list(range(1, longest))
    count = min(int(split), longest - 1)
    if count == 1:
        return [longest // 2]
    return sorted({1 + round(n * (longest - 2) / (count - 1)) for n in range(count)})


@pytest.fixture
def _sse_tape_variant(request: pytest.FixtureRequest) -> _Variant:
    """The variant this run of the test is (the plugin parametrizes it); a plain run: as recorded."""
    variant: _Variant = getattr(request, "param", _Variant())
    request.node.stash[_VARIANT] = variant
    return variant


# --- the fixtures -------------------------------------------------------------------------------------------


class SSETape:
    """A live mock endpoint for tests: what the `sse_tape` fixtures yield.

    `url` is its base URL and `openai_url` the one an OpenAI client takes;
    `requests` are what the client sent in this test and `played` the
    recordings that answered, in order; `journal` has every step of every
    request; `add_faults` and `clear_faults` change the faults for the rest
    of the test.

    A client can have read a whole stream a moment before the server notes
    that it ended: `requests`, `played`, `misses` and `journal` wait for the
    answers in flight to end first (up to `IDLE_WAIT` seconds). With the server
    in the test's own event loop (`async_sse_tape`) they cannot wait: `await
    async_sse_tape.idle()` first.
    """

    IDLE_WAIT = 5.0

    def __init__(
        self,
        server: MockServer,
        *,
        seed: int,
        asked: Sequence[str],
        allow_unused: bool,
        threaded: bool,
        session: bool = False,
        record_hint: str | None = None,
    ) -> None:
        self.server = server
        """The `MockServer` behind it."""
        self.seed = seed
        """The seed of every random choice (jitter, fault chance): `--sse-tape-seed` repeats it."""
        self.allow_unused = allow_unused
        self.recording = server.recorder is not None
        """Whether what no recording answers is recorded (`--sse-tape-record`)."""
        self._threaded = threaded
        self._record_hint = record_hint  # how to record a miss: the line after the misses in a failure
        self._scope_faults = list(server.injector.faults)
        self._asked = list(asked)  # the faults the scope's marker asked for: each must act at least once
        self._asked_now: list[str] = []  # and those the test asked for
        self._ever_played: set[Recording] = set()
        self._ever_injected: Counter[str] = Counter()
        self._outside: list[Miss] = []  # misses outside any test (a wider fixture's requests): the scope's
        self._told = 0  # how many of the server's misses are the last test's, told at its teardown or in its report
        self._test_allows: bool | None = None  # a test's own allow_unused, on a shared tape
        self._test = ""  # the test that began last, and when: where a scope's problems are told
        self._began = 0.0
        # No marker reaches the session's server: only the ini file can let its recordings go unplayed.
        self._allow_hint = (
            "sse_tape_allow_unused = true in the ini file" if session else "allow_unused=True in the marker"
        )

    @property
    def url(self) -> str:
        """The base URL, such as `http://127.0.0.1:41234`."""
        return self.server.url

    @property
    def openai_url(self) -> str:
        """The base URL an OpenAI client takes: `url + "/v1"`."""
        return self.server.url + "/v1"

    @property
    def requests(self) -> list[Request]:
        """What the client sent in this test, in order, bodies and all."""
        self._settle()
        return list(self.server.state.received)

    @property
    def played(self) -> list[Recording]:
        """The recordings that answered in this test, in order."""
        self._settle()
        return list(self.server.state.answered)

    @property
    def journal(self) -> Journal:
        """Every step of answering each request of this test."""
        self._settle()
        return self.server.journal

    @property
    def misses(self) -> list[Miss]:
        """The requests no recording answered in this test, each with why."""
        self._settle()
        return list(self.server.state.misses)

    def unplayed(self) -> list[Recording]:
        """The recordings that have not answered a request in this test."""
        self._settle()
        return self.server.state.unplayed()

    def add_faults(self, *specs: str) -> None:
        """Put these faults (`"error:5"`, `"status:429"`) on every request from now on, in this test."""
        from .faults import parse_faults

        faults = parse_faults(specs)
        self.server.injector.add(faults)
        self._asked_now += [f.spec for f in faults if _certain(f.p, f.times)]

    def clear_faults(self) -> None:
        """No faults from now on, in this test (not even the command line's); none is missed at its end."""
        self.server.injector.set([])
        injected = self.server.state.injected
        self._asked = [spec for spec in self._asked if injected[spec] or self._ever_injected[spec]]
        self._asked_now = [spec for spec in self._asked_now if injected[spec]]

    def wait_idle(self, timeout: float = IDLE_WAIT) -> bool:
        """Wait until no answer is in flight (from another thread than the server's); whether it came."""
        deadline = time.monotonic() + timeout
        while self.server.active_streams:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    async def idle(self) -> None:
        """Wait until no answer is in flight, from the server's own event loop (`asyncio.timeout` bounds it)."""
        while self.server.active_streams:  # noqa: ASYNC110 - a count the server keeps; it signals nothing
            await asyncio.sleep(0.001)

    def wait_recorded(self) -> None:
        """Wait until what the requests brought is recorded (from another thread than the server's): the
        recorder reads an upstream on after a fault cut its client's copy short, for the cassette."""
        while self.server.recorder is not None and self.server.recorder.in_flight:
            time.sleep(0.005)

    async def recorded(self) -> None:
        """`wait_recorded`, from the server's own event loop."""
        while self.server.recorder is not None and self.server.recorder.in_flight:  # noqa: ASYNC110
            await asyncio.sleep(0.005)

    def _settle(self) -> None:
        if self._threaded:
            self.wait_idle()

    # --- what the plugin does with it ---------------------------------------------------------------------

    def begin(
        self, test: str, faults: Sequence[str], asked: Sequence[str] = (), *, allow_unused: bool | None = None
    ) -> None:
        """Start the test named `test`: replay from the start, with the scope's faults, then `faults`;
        `asked`: those of them the test asked for itself, each of which must act unless `allow_unused` (the
        test's own marker's word; None: the scope's).

        Each test draws its faults' chances from a seed of its own, made from the session's seed and
        its name: the same for the same test in every run with that seed, and not the same draw for
        every test (which would give a `p=0.3` fault to all of them or to none).
        """
        from .faults import parse_faults

        self._settle()  # a stream the last test left open ends in its journal, not this one's
        state = self.server.state
        self._ever_played.update(r for r in state.recordings if state.plays[r])
        self._ever_injected.update(state.injected)
        self._outside += state.misses[self._told :]
        self.server.reset()
        self._told = 0
        chosen = parse_faults(faults)
        self.server.injector.set([*self._scope_faults, *chosen])
        self.server.injector.seed = zlib.crc32(f"{self.seed}:{test}".encode())
        self._asked_now = [f.spec for f in chosen if f.spec in asked and _certain(f.p, f.times)]
        self._test_allows = allow_unused
        self._test, self._began = test, time.time()

    def end(self) -> None:
        """End the test that began last: the misses so far are its own; any later one is the scope's."""
        self._settle()
        self._told = len(self.server.state.misses)

    def test_problems(self) -> list[str]:
        """What went wrong in this test's requests: misses, and faults it asked for that never acted."""
        self._settle()
        problems = self._missed(
            [f"request {m.request} ({m.method} {m.path}) matched no recording: {m.reason}" for m in self.misses]
        )
        allowed = self.allow_unused if self._test_allows is None else self._test_allows or self.recording
        if allowed:
            return problems
        injected = self.server.state.injected
        return problems + [f"fault {spec!r} was never injected" for spec in self._asked_now if not injected[spec]]

    def scope_problems(self, *, whole: bool = True) -> list[str]:
        """What the whole scope left undone: requests outside any test that missed, recordings never played,
        and faults asked for that never acted; the last two only if the scope's tests all ran here (`whole`)."""
        self._settle()
        outside = [*self._outside, *self.server.state.misses[self._told :]]
        problems = self._missed(
            [
                f"request {m.request} ({m.method} {m.path}), outside any test, matched no recording: {m.reason}"
                for m in outside
            ]
        )
        if self.allow_unused or not whole:
            return problems
        return problems + self.use().problems()

    def use(self) -> _ScopeUse:
        """What the tests have played and injected so far, and what they had to."""
        self._settle()
        state = self.server.state
        played = self._ever_played | {r for r in state.recordings if state.plays[r]}
        # By position too: two cassettes of one name in two folders have recordings of one label.
        keys = {r: f"{n} {r}" for n, r in enumerate(state.recordings)}
        return _ScopeUse(
            recordings={keys[r]: str(r) for r in state.recordings},
            played={keys[r] for r in played if r in keys},
            asked=list(self._asked),
            injected=self._ever_injected + state.injected,
            allow_hint=self._allow_hint,
            last_test=self._test,
            last_began=self._began,
        )

    def describe(self) -> str:
        """The seed, the faults and the last steps, for a failed test's report."""
        state = self.server.state
        faults = ", ".join(f.spec for f in self.server.injector.faults) or "none"
        lines = [f"seed {self.seed} (--sse-tape-seed={self.seed} repeats it); faults: {faults}"]
        if state.injected:
            lines.append("injected: " + ", ".join(f"{spec} x{n}" for spec, n in state.injected.items()))
        lines += self._missed([f"miss: request {m.request} ({m.method} {m.path}): {m.reason}" for m in state.misses])
        steps = [line for entry in self.server.journal.last(20) if (line := _step(entry)) is not None]
        if steps:
            lines += ["last steps:", *(f"  {line}" for line in steps)]
        return "\n".join(lines)

    def _missed(self, misses: list[str]) -> list[str]:
        """The lines of `misses`, and after them how to record what they asked, when there are any."""
        return [*misses, self._record_hint] if misses and self._record_hint is not None else misses


@dataclass(slots=True, kw_only=True)
class _ScopeUse:
    """What a shared server's tests played and injected, to tell what they left undone. Under pytest-xdist,
    one worker's part of a scope spread over the workers: the controller adds the parts up (`merge`)."""

    recordings: dict[str, str]
    """Every recording, by a key that is the same in every worker (its position and label), to its label."""
    played: set[str]
    asked: list[str]
    """The scope's faults that must act at least once (`clear_faults` lets a test drop those yet to act)."""
    injected: Counter[str]
    allow_hint: str
    last_test: str
    """The node id of the test that began last, at `last_began` (Unix seconds): the scope ends after it."""
    last_began: float

    def merge(self, other: _ScopeUse) -> None:
        self.recordings.update(other.recordings)
        self.played |= other.played
        self.asked = [spec for spec in self.asked if spec in other.asked]  # dropped in either part: dropped
        self.injected += other.injected
        if other.last_began > self.last_began:
            self.last_test, self.last_began = other.last_test, other.last_began

    def problems(self) -> list[str]:
        problems = []
        unplayed = [label for key, label in self.recordings.items() if key not in self.played]
        if unplayed:
            listed = "; ".join(unplayed[:10]) + (" ..." if len(unplayed) > 10 else "")
            problems.append(
                f"{len(unplayed)} recording{'s'[: len(unplayed) != 1]} never played: {listed} "
                f"({self.allow_hint} lets them)"
            )
        return problems + [f"fault {spec!r} was never injected" for spec in self.asked if not self.injected[spec]]

    def to_wire(self) -> dict[str, Any]:
        """As pytest-xdist's `workeroutput` carries it (execnet's plain types)."""
        return {
            "recordings": self.recordings,
            "played": sorted(self.played),
            "asked": self.asked,
            "injected": dict(self.injected),
            "allow_hint": self.allow_hint,
            "last_test": self.last_test,
            "last_began": self.last_began,
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> _ScopeUse:
        return cls(
            recordings=dict(data["recordings"]),
            played=set(data["played"]),
            asked=list(data["asked"]),
            injected=Counter(data["injected"]),
            allow_hint=data["allow_hint"],
            last_test=data["last_test"],
            last_began=data["last_began"],
        )


def _step(entry: Entry) -> str | None:
    """A journal entry's line in a failure's report: a miss's without its reason, which the report's miss line
    has already given (closest recordings, differences: many lines' worth)."""
    from .incidents import Missed

    if isinstance(entry, Missed):
        return f"{entry.method} {entry.path} -> {entry.status}: request {entry.request} matched no recording (above)"
    return entry.line()


def _certain(p: float, times: int | None) -> bool:
    """Whether a fault acts on the first request it meets."""
    return p >= 1 and times != 0


@contextlib.contextmanager
def _one_line_failure() -> Iterator[None]:
    """A mistake in a marker, an option or a cassette fails the test with its one line, and no traceback."""
    from ._exceptions import SSETapeError

    try:
        yield
    except (SSETapeError, pytest.UsageError) as exc:
        problem = str(exc).removeprefix("sse-tape: ")
        # `from None`: the `with` block's exception is still being handled (its __exit__ throws it in here), and
        # pytest would print it as the context of this one: the line twice.
        raise pytest.fail.Exception(f"sse-tape: {problem}", pytrace=False) from None


def open_tape(request: pytest.FixtureRequest, scope: str, *, threaded: bool) -> SSETape:
    """An `SSETape` for the requesting test, module or session (`scope`), as its markers say; not started.

    `threaded`: its server runs in a thread of its own, not in the test's event loop.
    """
    config = request.config
    settings = config.stash[_SETTINGS]
    with _one_line_failure():
        marked = _marked(request.node)
        server = _server(config, settings, marked, request.node, scope)
        # A server that records forwards what it misses; one that replays only can tell how to record it.
        hint = _record_hint(config, settings, marked, request.node, scope) if server.recorder is None else None
    asked = [f.spec for f in server.injector.faults if f.spec in marked.faults and _certain(f.p, f.times)]
    allow_unused = settings.allow_unused if marked.allow_unused is None else marked.allow_unused
    # What a recording session records has not played: only a replay can leave recordings unplayed.
    recording = server.recorder is not None
    return SSETape(
        server,
        seed=settings.seed,
        asked=asked,
        allow_unused=allow_unused or recording,
        threaded=threaded,
        session=scope == "session",
        record_hint=hint,
    )


def _scope_cassettes(config: pytest.Config, node: Any, scope: str, marked: Marked) -> list[Path]:
    """The cassettes of a test (`scope` function), of its module or of the session."""
    if scope == "function":
        return _test_cassettes(config, node, marked, node.stash.get(_VARIANT, _Variant()))
    test_file = Path(node.path) if scope == "module" else None
    own = f"{test_file.stem}.toml" if test_file is not None else "session.toml"
    return _named(_folder(config, test_file), marked.cassettes or [own])


def _server(config: pytest.Config, settings: _Settings, marked: Marked, node: Any, scope: str) -> MockServer:
    """The server for a test, a module or the session: replaying its cassettes, or recording into one."""
    from .options import MissPolicy, ServeOptions
    from .server import MockServer, load_cassettes, recording_server

    def load(chosen: list[Path]) -> list[Any]:
        """The cassettes among `chosen` that exist (`load_cassettes` of none would be the bundled ones)."""
        there = [p for p in chosen if p.exists()]
        return load_cassettes(there) if there else []

    paths = _scope_cassettes(config, node, scope, marked)
    target = _target(config, node, scope, paths)
    model = marked.model or settings.model
    synthesizer = _synthesizer(config, model, settings.seed) if model else None
    options = ServeOptions.build(
        match_on=marked.match_on,
        ignore_body_fields=marked.ignore_body_fields,
        pace=marked.pace,
        jitter=marked.jitter,
        seed=settings.seed,
        miss_status=marked.miss_status,
        on_miss=MissPolicy.SYNTH if synthesizer is not None else MissPolicy.ERROR,
        # The marker's first, then the command line's: of two that answer in the stream's place, the test's own wins.
        faults=[*_profile_faults(config, [*marked.profiles, *settings.profiles]), *marked.faults, *settings.faults],
        recorded_faults=marked.recorded_faults,
    )
    if settings.record != "none":
        if settings.upstream is None and synthesizer is None:
            marker = {"function": "the test's marker", "module": "the module's marker"}.get(scope)
            raise pytest.UsageError(_no_upstream(settings.record, marker))
        also = load([p for p in paths if p != target])
        mode = settings.record
        if mode == "rewrite":
            rewritten = config.stash[_REWRITTEN]
            if target not in rewritten:  # the first test that records into it makes it anew; the others add
                rewritten.add(target)
                target.unlink(missing_ok=True)
            mode = "new_episodes"
        target.parent.mkdir(parents=True, exist_ok=True)
        # From the upstream when there is one, else from the model.
        model_answers = synthesizer if settings.upstream is None else None
        return recording_server(target, settings.upstream, mode=mode, options=options, model=model_answers, also=also)
    missing = [p for p in paths if not p.exists()]
    if missing and synthesizer is None:
        raise pytest.UsageError(
            f"no cassette {missing[0]}{_did_you_mean(missing[0]) if marked.cassettes else ''}: "
            "record it with --sse-tape-record=once --sse-tape-upstream URL"
        )
    if target not in paths and target.exists() and not any(target.is_relative_to(p) for p in paths):
        paths.append(target)  # what a test that names only folders recorded into its own cassette replays too
    cassettes = load(paths)
    models = [synthesizer.engine.id] if synthesizer is not None else []
    return MockServer(cassettes, options=options, model=synthesizer, models=models)


def _target(config: pytest.Config, node: Any, scope: str, paths: list[Path]) -> Path:
    """The cassette that what is recorded goes into, of the scope's cassettes `paths`: the first file named (a
    folder cannot be recorded into), else the scope's own; the others are replayed as they are. A file name
    has its suffix (`_named` gives it one); a folder named with a trailing `/` has none, there or not."""
    own = _scope_cassettes(config, node, scope, Marked())[0]
    return next((p for p in paths if p.suffix in (".toml", ".msgpack") and not p.is_dir()), own)


def _record_hint(config: pytest.Config, settings: _Settings, marked: Marked, node: Any, scope: str) -> str:
    """The line a miss's failure ends with: how to record what no recording answered (as vcrpy and
    pytest_httpx say what to do). `once` records a cassette that is not there yet, `new_episodes` adds to one."""
    target = _target(config, node, scope, _scope_cassettes(config, node, scope, marked))
    mode = "new_episodes" if target.exists() else "once"
    upstream = "" if settings.upstream is not None else " --sse-tape-upstream URL"
    return f"to record what no recording answered, re-run with --sse-tape-record={mode}{upstream}"


def _did_you_mean(missing: Path) -> str:
    """` (did you mean 'chat'?)` when a cassette beside `missing` has a name close to its name. Only for a
    name the marker gives: a new test's own cassette is close to its neighbours' (`test_ask_2`, `test_ask_1`)."""
    import difflib

    try:
        there = [
            p.name + "/" if p.is_dir() else p.stem if p.suffix == ".toml" else p.name for p in missing.parent.iterdir()
        ]
    except OSError:
        return ""
    close = difflib.get_close_matches(missing.stem, there, n=1)
    if not close and not missing.suffix:  # a folder
        close = difflib.get_close_matches(missing.name + "/", there, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _synthesizer(config: pytest.Config, model: str, seed: int) -> Any:
    """A responder answering with `model`, loaded once per session."""
    from .synth import require

    require()
    from .synth.batch import open_model
    from .synth.live import Synthesizer
    from .synth.pipeline import Settings

    engines = config.stash[_MODELS]
    if model not in engines:
        engines[model], _ = open_model(model)
    return Synthesizer(engines[model], Settings(seed=seed))


# What a test's own marker may say to a server its module or session shares: the rest is the scope's.
_PER_TEST = frozenset({"faults", "profiles", "env", "allow_unused", "split", "survives"})


def _servers(fixturenames: Sequence[str]) -> list[str]:
    """The sse-tape fixtures among a test's fixtures (those of the fixtures it uses too), narrowest first."""
    return [name for name in _FIXTURES if name in fixturenames]


@contextlib.contextmanager
def per_test(request: pytest.FixtureRequest, tape: SSETape, fixture: str) -> Iterator[SSETape]:
    """One test's use of `tape`, the tape of its `fixture`: started over with its variant's faults (and, on a
    shared tape, its own marker's), in its environment."""
    node = request.node
    shared = fixture in _SHARED
    variant = node.stash.get(_VARIANT, _Variant())
    settings = request.config.stash[_SETTINGS]
    faults = [f"split:at={variant.split}b"] if variant.split is not None else []
    if variant.gauntlet is not None:
        faults.append(settings.gauntlet[variant.gauntlet])
    with _one_line_failure():
        marked = _marked(node)  # raises on a word the marker does not know, as for a test's own server
        servers = _servers(request.fixturenames)
        if marked.env and len(servers) > 1:  # one variable cannot name two servers: which one would be a guess
            raise pytest.UsageError(
                f"env=True points the SDKs at one server, and this test uses {len(servers)} ({', '.join(servers)}):"
                " give it env=False, and each client the url of the server it means"
            )
        asked: list[str] = []
        own: dict[str, Any] = {}
        if shared:
            own = _own_words(node)
            if refused := sorted(set(own) - _PER_TEST):
                raise pytest.UsageError(
                    f"a shared server serves as its scope's marker says: put {', '.join(refused)} there "
                    "(a test's own marker may give " + ", ".join(sorted(_PER_TEST)) + ")"
                )
            profiled = [f.spec for f in _profile_faults(request.config, own.get("profiles", ()))]
            asked = list(own.get("faults", ()))
            faults = [*profiled, *asked, *faults]
        tape.begin(node.nodeid, faults, asked, allow_unused=own.get("allow_unused") if shared else None)
    node.stash.setdefault(_TAPES, {})[fixture] = tape
    with pytest.MonkeyPatch.context() as patch:
        if marked.env:
            patch.setenv("OPENAI_BASE_URL", tape.openai_url)
            patch.setenv("OPENAI_API_KEY", "sse-tape")
            patch.setenv("ANTHROPIC_BASE_URL", tape.url)  # Anthropic's SDK adds /v1 itself
            patch.setenv("ANTHROPIC_API_KEY", "sse-tape")
        yield tape
    tape.end()
    if tape._threaded:  # the test's recordings are whole before the next test, or the server's end
        tape.wait_recorded()


def _own_words(item: Any) -> dict[str, Any]:
    """What the sse_tape markers on a test and its class say, not its module's; cassettes as `cassettes`."""
    module = item.getparent(pytest.Module)
    theirs = list(module.iter_markers("sse_tape")) if module is not None else []
    words: dict[str, Any] = {}
    for marker in item.iter_markers("sse_tape"):
        if marker in theirs:
            continue
        words = {**marker.kwargs, **words}
        if marker.args:
            words.setdefault("cassettes", marker.args)
    return words


def check_test(request: pytest.FixtureRequest, tapes: dict[str, SSETape], *, own: bool) -> None:
    """Fail a test that passed yet left a miss, an unplayed recording or a fault that never acted on one of
    `tapes` (by the name of their fixture), in one failure.

    `own`: the tapes were the test's alone, so what their scope left undone is the test's too.
    """
    variant = request.node.stash.get(_VARIANT, _Variant())
    if not request.node.stash.get(_CALL_PASSED, False) or variant.gauntlet is not None:
        return  # a failed test's report says it all; a gauntlet's run is judged by its outcome alone
    several = len(_servers(request.fixturenames)) > 1  # then each server's lines say whose they are
    told = []
    for fixture, tape in tapes.items():
        if problems := tape.test_problems() + (tape.scope_problems() if own else []):
            told.append((f"{fixture}: " if several else "") + "\n".join(problems))
    if told:
        seed = request.config.stash[_SETTINGS].seed
        pytest.fail("sse-tape: " + "\n".join(told) + f"\n(seed {seed})", pytrace=False)


@pytest.fixture
def sse_tape(request: pytest.FixtureRequest, _sse_tape_variant: _Variant) -> Iterator[SSETape]:
    """A mock server for this test on a free loopback port, serving what its `sse_tape` marker names."""
    from ._http import run_in_thread

    tape = open_tape(request, "function", threaded=True)
    with run_in_thread(tape.server), per_test(request, tape, "sse_tape"):
        yield tape
    check_test(request, {"sse_tape": tape}, own=True)


@pytest.fixture(scope="module")
def sse_tape_module(request: pytest.FixtureRequest) -> Iterator[SSETape]:
    """One mock server for the module's tests, as the module's marker says (`pytestmark`; by default
    `cassettes/<module>.toml`), started over before each test."""
    yield from _shared(request, "module")


@pytest.fixture(scope="session")
def sse_tape_session(request: pytest.FixtureRequest) -> Iterator[SSETape]:
    """One mock server for the whole session (by default `cassettes/session.toml` in the rootdir or the
    ini's cassette folder), started over before each test."""
    yield from _shared(request, "session")


def _shared(request: pytest.FixtureRequest, scope: str) -> Iterator[SSETape]:
    from ._http import run_in_thread

    tape = open_tape(request, scope, threaded=True)
    with run_in_thread(tape.server):
        yield tape
    spread = _spread(request.config, scope)
    if spread and not tape.allow_unused:
        _hand_over(request.config, request.node.nodeid, scope, tape.use())
    if problems := tape.scope_problems(whole=not spread):
        pytest.fail(f"sse-tape ({scope} scope): " + "\n".join(problems), pytrace=False)


def _spread(config: pytest.Config, scope: str) -> bool:
    """Whether pytest-xdist spreads the tests of a module (or the session) over several workers, each with a
    server of its own: then none of them can tell that a recording went unplayed, or a fault never acted, and
    the controller tells it from their parts (`_hand_over`)."""
    worker = getattr(config, "workerinput", {})
    workers, dist = worker.get("workercount", 1), worker.get("sse_tape_dist", "load")
    if workers < 2 or dist == "each":
        return False
    return scope == "session" or dist not in ("loadfile", "loadscope")


def _hand_over(config: pytest.Config, node_id: str, scope: str, use: _ScopeUse) -> None:
    """A pytest-xdist worker: give the controller what this worker's part of a spread scope played, in the
    `workeroutput` it sends when its session finishes (`pytest_testnodedown` takes it)."""
    scopes = config.workeroutput.setdefault("sse_tape_scopes", {})  # type: ignore[attr-defined]
    if node_id in scopes:  # the module's tests came back to this worker after others': its server anew
        use.merge(_ScopeUse.from_wire(scopes[node_id]["use"]))
    scopes[node_id] = {"scope": scope, "use": use.to_wire()}


class _SpreadScopes:
    """pytest-xdist's controller: the scopes spread over the workers, their parts added up."""

    def __init__(self) -> None:
        self.scopes: dict[str, tuple[str, _ScopeUse]] = {}
        self.whole = True
        """No worker went down without its part (a crash): what it played is not known."""

    def add(self, node_id: str, scope: str, use: _ScopeUse) -> None:
        if node_id in self.scopes:
            self.scopes[node_id][1].merge(use)
        else:
            self.scopes[node_id] = (scope, use)


_SPREAD = pytest.StashKey[_SpreadScopes]()


@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Generator[None, object, object]:
    """After pytest-xdist's controller ran the tests (every worker down): what the spread scopes left undone
    fails the run, as an error at the teardown of the scope's last test, as it would with no workers."""
    result = yield
    spread = session.config.stash.get(_SPREAD, None)
    if spread is None or not spread.whole:
        return result  # no scope spread, or a worker crashed, which fails the run, saying so
    for scope, use in spread.scopes.values():
        if problems := use.problems():
            path, _, name = use.last_test.partition("::")
            report = pytest.TestReport(
                nodeid=use.last_test,
                location=(path, None, name.replace("::", ".")),  # as pytest's own for a test function
                keywords={},
                outcome="failed",
                longrepr=f"sse-tape ({scope} scope): " + "\n".join(problems),
                when="teardown",
            )
            session.config.hook.pytest_runtest_logreport(report=report)
    return result


@pytest.fixture(autouse=True)
def _sse_tape_each(request: pytest.FixtureRequest, _sse_tape_variant: _Variant) -> Iterator[None]:
    """Before each test that uses shared tapes: start each over; after it: check what the test left on each."""
    shared = [name for name in _servers(request.fixturenames) if name in _SHARED]
    if not shared:
        yield
        return
    tapes: dict[str, SSETape] = {name: request.getfixturevalue(name) for name in shared}
    with contextlib.ExitStack() as each:
        for name, tape in tapes.items():
            each.enter_context(per_test(request, tape, name))
        yield
    check_test(request, tapes, own=False)


# --- reports: failures and the gauntlet ---------------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and report.when == "teardown" and call.excinfo is not None:
        _join_teardown_failures(item, report, call.excinfo.value)
    _note(item, report)
    return report


def _join_teardown_failures(item: pytest.Item, report: pytest.TestReport, error: BaseException) -> None:
    """Show the lines of several sse-tape teardown failures (a test's, its module's and the session's scopes
    ending at once) as one failure: pytest groups them into a `BaseExceptionGroup` and prints its traceback."""
    if not isinstance(error, BaseExceptionGroup):
        return
    leaves: list[BaseException] = []
    groups: list[BaseException] = [error]
    while groups:
        group = groups.pop(0)
        if isinstance(group, BaseExceptionGroup):
            groups[:0] = group.exceptions
        else:
            leaves.append(group)
    lines = [e.msg or "" for e in leaves if isinstance(e, pytest.fail.Exception) and not e.pytrace]
    if len(lines) != len(leaves) or not all(line.startswith("sse-tape") for line in lines):
        return  # another fixture's failure too: pytest's report, traceback and all
    try:
        pytest.fail("\n".join(reversed(lines)), pytrace=False)  # the outermost scope last
    except pytest.fail.Exception as joined:
        report.longrepr = item.repr_failure(pytest.ExceptionInfo.from_exception(joined))


def _note(item: pytest.Item, report: pytest.TestReport) -> None:
    """Add the sse-tape section (one for each of its servers) to a failed test's report; keep the gauntlet's results."""
    tapes = item.stash.get(_TAPES, None)
    if not tapes:
        return
    if report.when == "call":
        item.stash[_CALL_PASSED] = report.passed
        if report.failed:
            for fixture, tape in tapes.items():
                report.sections.append(("sse-tape" + (f" ({fixture})" if len(tapes) > 1 else ""), tape.describe()))
    settings = item.config.stash[_SETTINGS]
    if not settings.run_gauntlet:
        return
    gauntlet = settings.gauntlet
    variant = item.stash.get(_VARIANT, _Variant())
    try:
        survives = _marked(item).survives
    except pytest.UsageError:
        survives = ()  # the test's setup failed, saying why
    name = variant.gauntlet or _AS_RECORDED
    promised = variant.gauntlet is None or survives == "all" or name in survives
    if report.failed or report.when == "call":
        # In the report, so that it reaches pytest-xdist's controller too.
        result = [
            _plain(item.nodeid, variant),
            name,
            report.passed,
            promised,
            None if report.passed else _reason(report),
        ]
        report.user_properties.append((_GAUNTLET_PROPERTY, result))
    if report.failed and not promised and report.when == "call":
        # Not a promise the test made: the gauntlet reports it, the run does not fail on it. (A failed setup or
        # teardown is no answer to the fault: it stays an error.)
        report.outcome = "skipped"
        report.wasxfail = f"sse-tape gauntlet: did not survive {name} ({gauntlet[name]})"


def _reason(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "failed")
    return first[:200]


_GAUNTLET_PROPERTY = "sse-tape-gauntlet"


class _GauntletTable:
    """Gathers the gauntlet's results from the reports (a worker's too), and shows them at the end."""

    def __init__(self, settings: _Settings) -> None:
        self.settings = settings
        self.results: dict[str, dict[str, tuple[bool, bool, str | None]]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for key, value in report.user_properties:
            if key == _GAUNTLET_PROPERTY:
                test, name, passed, promised, reason = cast(list[Any], value)
                row = self.results.setdefault(test, {})
                if not passed or name not in row:  # a failure in any phase stands
                    row[name] = (passed, promised, reason)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        settings, results = self.settings, self.results
        names = [_AS_RECORDED, *settings.gauntlet]
        write = terminalreporter.write_line
        terminalreporter.section(f"sse-tape gauntlet (seed {settings.seed})")
        if not results:
            write("no test used an sse_tape fixture")
        width = max((len(test) for test in results), default=4)
        write(f"{'test':<{width}}  " + "  ".join(names))
        for test, row in results.items():
            cells = []
            for name in names:
                survived, promised, _ = row.get(name, (None, False, None))
                mark = "-" if survived is None else "ok" if survived else "FAIL" if promised else "x"
                cells.append(f"{mark:^{len(name)}}")
            write((f"{test:<{width}}  " + "  ".join(cells)).rstrip())
        write("ok: survived; x: did not; FAIL: did not, and the test promises to (survives=[...]); -: did not run")
        for test, row in results.items():
            for name, (survived, promised, reason) in row.items():
                if not survived:
                    write(f"{test} under {name}{' (promised)' if promised else ''}: {reason}")
        if settings.gauntlet_report is not None:
            document = {
                "seed": settings.seed,
                "faults": settings.gauntlet,
                "tests": {
                    test: {
                        name: {"survived": survived, "promised": promised, "reason": reason}
                        for name, (survived, promised, reason) in row.items()
                    }
                    for test, row in results.items()
                },
            }
            settings.gauntlet_report.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
            write(f"sse-tape gauntlet report: {settings.gauntlet_report}")
