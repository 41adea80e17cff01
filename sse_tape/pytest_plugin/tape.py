"""The `SSETape` a fixture yields, and opening one: its mock server, replaying the cassettes its scope's marker
names or recording into them, as the session's settings say."""

from __future__ import annotations

import contextlib
import time
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .._exceptions import SSETapeError
from ..faults import parse_faults
from ..journal import Entry, Journal, Miss, Missed
from ..options import MissPolicy, RecordMode, ServeOptions
from .cassettes import did_you_mean, record_target, scope_cassettes
from .marker import Marked, read_marker
from .options import SETTINGS, Settings, no_upstream, profile_faults
from .scopes import ScopeUse
from .variants import recorded_name
from .xdist import stop_run

if TYPE_CHECKING:
    from ..cassette import Recording, Request
    from ..server import MockServer

__all__ = [
    "MODELS",
    "REWRITTEN",
    "SSETape",
    "one_line_failure",
    "open_tape",
    "pytest_collection_modifyitems",
]

#: The models that answer misses in this session, loaded once each, by name (`config.stash`).
MODELS = pytest.StashKey[dict[str, Any]]()
#: The cassettes `--sse-tape-record=rewrite` has made anew in this session (`config.stash`).
REWRITTEN = pytest.StashKey[set[Path]]()


@pytest.hookimpl(trylast=True)  # after -k and -m have chosen the tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Stop the run at its start when `--sse-tape-record` has nothing to record from: no upstream, and no
    model, neither from the command line nor from a marker of the tests chosen (rather than fail each test
    with the same line)."""
    settings = config.stash[SETTINGS]
    if settings.record is RecordMode.NONE or settings.upstream is not None or settings.model is not None:
        return
    if any(_model_answers(item) for item in items):
        return  # those tests record what their model answers; the others fail saying so (`_server`)
    stop_run(config, items, "sse-tape: " + no_upstream(settings.record, "a test's marker"))


def _model_answers(item: pytest.Item) -> bool:
    """Whether a model given in a marker answers a test's requests: the test's own marker's for its own
    server, the module's for the module's (no marker reaches the session's)."""
    names = getattr(item, "fixturenames", ())
    module = item.getparent(pytest.Module)
    nodes: list[pytest.Item | pytest.Module] = [item] if {"sse_tape", "async_sse_tape"} & set(names) else []
    if "sse_tape_module" in names and module is not None:
        nodes.append(module)
    try:
        return any(read_marker(node).model for node in nodes)
    except pytest.UsageError:
        return False  # the test fails at its setup, saying what is wrong with its marker


class SSETape:
    """A live mock endpoint for tests: what the `sse_tape` fixtures yield.

    `url` is its base URL, `openai_url` the one an OpenAI client takes and
    `mcp_url` the endpoint an MCP client takes; `requests` are what the
    client sent in this test and `played` the recordings that answered, in
    order; `journal` has every step of every request; `add_faults` and
    `clear_faults` change the faults for the rest of the test.

    A client can have read a whole stream a moment before the server notes
    that it ended: `requests`, `played`, `misses` and `journal` wait for the
    answers in flight to end first (up to `IDLE_WAIT` seconds). With the server
    in the test's own event loop (`async_sse_tape`) they cannot wait: `await
    async_sse_tape.idle()` first.

    It drives its server through the server's `control` alone, from whichever
    thread the test runs in.
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
        self.threaded = threaded
        """Whether its server runs in a thread of its own, not in the test's event loop (`async_sse_tape`'s)."""
        self._record_hint = record_hint  # how to record a miss: the line after the misses in a failure
        self._scope_faults = list(server.control.snapshot().faults)
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
    def mcp_url(self) -> str:
        """The endpoint an MCP client takes (Streamable HTTP): `url + "/mcp"`, where the SDKs' servers serve it
        by default (a server recorded at another path is replayed at that path)."""
        return self.server.url + "/mcp"

    @property
    def requests(self) -> list[Request]:
        """What the client sent in this test, in order, bodies and all: the last 1,000 requests, and of their
        bodies the newest 64 MiB (an older request is kept without its body: see `state.MemoryStore`)."""
        self._settle()
        return list(self.server.control.snapshot().received)

    @property
    def played(self) -> list[Recording]:
        """The recordings that answered in this test, in order: the last 1,000 (see `state.MemoryStore`)."""
        self._settle()
        return list(self.server.control.snapshot().played)

    @property
    def journal(self) -> Journal:
        """Every step of answering each request of this test."""
        self._settle()
        return self.server.control.journal

    @property
    def misses(self) -> list[Miss]:
        """The requests no recording answered in this test, each with why (the last 1,000 of them)."""
        self._settle()
        return list(self.server.control.snapshot().misses)

    def unplayed(self) -> list[Recording]:
        """The recordings that have not answered a request in this test."""
        self._settle()
        return list(self.server.control.snapshot().unplayed)

    def add_faults(self, *specs: str) -> None:
        """Put these faults (`"error:5"`, `"status:429"`) on every request from now on, in this test."""
        faults = parse_faults(specs)
        self.server.control.add_faults(faults)
        self._asked_now += [f.spec for f in faults if _certain(f.p, f.times)]

    def clear_faults(self) -> None:
        """No faults from now on, in this test (not even the command line's); none is missed at its end."""
        self.server.control.set_faults([])
        injected = self.server.control.snapshot().injected
        self._asked = [spec for spec in self._asked if injected.get(spec) or self._ever_injected[spec]]
        self._asked_now = [spec for spec in self._asked_now if injected.get(spec)]

    def wait_idle(self, timeout: float = IDLE_WAIT) -> bool:
        """Wait until no answer is in flight and nothing is left to record (from another thread than the
        server's); whether that came within `timeout` seconds."""
        return self.server.control.wait_idle(timeout)

    async def idle(self) -> None:
        """Wait until no answer is in flight and nothing is left to record, from an event loop (`asyncio.timeout`
        bounds it)."""
        await self.server.control.idle()

    def wait_recorded(self) -> None:
        """Wait until what the requests brought is recorded (from another thread than the server's): the
        recorder reads an upstream on after a fault cut its client's copy short, for the cassette."""
        if self.recording:
            self.server.control.wait_idle()

    async def recorded(self) -> None:
        """`wait_recorded`, from an event loop."""
        if self.recording:
            await self.server.control.idle()

    def _settle(self) -> None:
        if self.threaded:
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
        self._settle()  # a stream the last test left open ends in its journal, not this one's
        control = self.server.control
        before = control.snapshot()
        unplayed = set(before.unplayed)
        self._ever_played.update(r for r in before.recordings if r not in unplayed)
        self._ever_injected.update(before.injected)
        self._outside += _misses_since(before.misses, before.missed, self._told)
        # The clients of a shared scope's fixtures outlive a test: their MCP sessions go on into the next one.
        control.reset(protocols=False)
        self._told = 0
        chosen = parse_faults(faults)
        control.set_faults([*self._scope_faults, *chosen])
        control.set_seed(zlib.crc32(f"{self.seed}:{test}".encode()))
        self._asked_now = [f.spec for f in chosen if f.spec in asked and _certain(f.p, f.times)]
        self._test_allows = allow_unused
        self._test, self._began = test, time.time()

    def end(self) -> None:
        """End the test that began last: the misses so far are its own; any later one is the scope's."""
        self._settle()
        self._told = self.server.control.snapshot().missed

    def test_problems(self) -> list[str]:
        """What went wrong in this test's requests: misses, and faults it asked for that never acted."""
        self._settle()
        now = self.server.control.snapshot()
        problems = self._missed(
            [f"request {m.request} ({m.method} {m.path}) matched no recording: {m.reason}" for m in now.misses]
            + _untold(now.missed - len(now.misses))
        )
        allowed = self.allow_unused if self._test_allows is None else self._test_allows or self.recording
        if allowed:
            return problems
        injected = self.server.control.snapshot().injected
        return problems + [f"fault {spec!r} was never injected" for spec in self._asked_now if not injected.get(spec)]

    def scope_problems(self, *, whole: bool = True) -> list[str]:
        """What the whole scope left undone: requests outside any test that missed, recordings never played,
        and faults asked for that never acted; the last two only if the scope's tests all ran here (`whole`)."""
        self._settle()
        now = self.server.control.snapshot()
        outside = [*self._outside, *_misses_since(now.misses, now.missed, self._told)]
        problems = self._missed(
            [
                f"request {m.request} ({m.method} {m.path}), outside any test, matched no recording: {m.reason}"
                for m in outside
            ]
        )
        if self.allow_unused or not whole:
            return problems
        return problems + self.use().problems()

    def use(self) -> ScopeUse:
        """What the tests have played and injected so far, and what they had to."""
        self._settle()
        now = self.server.control.snapshot()
        unplayed = set(now.unplayed)
        played = self._ever_played | {r for r in now.recordings if r not in unplayed}
        # By position too: two cassettes of one name in two folders have recordings of one label.
        keys = {r: f"{n} {r}" for n, r in enumerate(now.recordings)}
        return ScopeUse(
            recordings={keys[r]: str(r) for r in now.recordings},
            played={keys[r] for r in played if r in keys},
            asked=list(self._asked),
            injected=self._ever_injected + Counter(now.injected),
            allow_hint=self._allow_hint,
            last_test=self._test,
            last_began=self._began,
        )

    def describe(self) -> str:
        """The seed, the faults and the last steps, for a failed test's report."""
        now = self.server.control.snapshot()
        faults = ", ".join(f.spec for f in now.faults) or "none"
        lines = [f"seed {self.seed} (--sse-tape-seed={self.seed} repeats it); faults: {faults}"]
        if now.injected:
            lines.append("injected: " + ", ".join(f"{spec} x{n}" for spec, n in now.injected.items()))
        lines += self._missed([f"miss: request {m.request} ({m.method} {m.path}): {m.reason}" for m in now.misses])
        steps = [line for entry in self.server.control.journal.last(20) if (line := _step(entry)) is not None]
        if steps:
            lines += ["last steps:", *(f"  {line}" for line in steps)]
        return "\n".join(lines)

    def _missed(self, misses: list[str]) -> list[str]:
        """The lines of `misses`, and after them how to record what they asked, when there are any."""
        return [*misses, self._record_hint] if misses and self._record_hint is not None else misses


def _misses_since(misses: Sequence[Miss], missed: int, told: int) -> list[Miss]:
    """Of the last `misses` kept of `missed` in all, those after the first `told`."""
    new = missed - told
    return list(misses[max(len(misses) - new, 0) :]) if new > 0 else []


def _untold(count: int) -> list[str]:
    """The line that says how many earlier misses were not kept, if any were not."""
    return [f"and {count} earlier request{'s'[: count != 1]} matched no recording (not kept)"] if count > 0 else []


def _step(entry: Entry) -> str | None:
    """A journal entry's line in a failure's report: a miss's without its reason, which the report's miss line
    has already given (closest recordings, differences: many lines' worth)."""
    if isinstance(entry, Missed):
        return f"{entry.method} {entry.path} -> {entry.status}: request {entry.request} matched no recording (above)"
    return entry.line()


def _certain(p: float, times: int | None) -> bool:
    """Whether a fault acts on the first request it meets."""
    return p >= 1 and times != 0


@contextlib.contextmanager
def one_line_failure() -> Iterator[None]:
    """A mistake in a marker, an option or a cassette fails the test with its one line, and no traceback."""
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
    settings = config.stash[SETTINGS]
    with one_line_failure():
        marked = read_marker(request.node)
        server = _server(config, settings, marked, request.node, scope)
        # A server that records forwards what it misses; one that replays only can tell how to record it.
        hint = _record_hint(config, settings, marked, request.node, scope) if server.recorder is None else None
    asked = [f.spec for f in server.control.snapshot().faults if f.spec in marked.faults and _certain(f.p, f.times)]
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


def _server(config: pytest.Config, settings: Settings, marked: Marked, node: Any, scope: str) -> MockServer:
    """The server for a test, a module or the session: replaying its cassettes, or recording into one."""
    from ..server import build_server, load_cassettes

    def load(chosen: list[Path]) -> list[Any]:
        """The cassettes among `chosen` that exist (`load_cassettes` of none would be the bundled ones)."""
        there = [p for p in chosen if p.exists()]
        return load_cassettes(there) if there else []

    name = recorded_name(node)
    paths = scope_cassettes(config, node, scope, marked, name)
    target = record_target(config, node, scope, paths, name)
    model = marked.model or settings.model
    synthesizer = _synthesizer(config, model, settings.seed) if model else None
    recording = settings.record is not RecordMode.NONE
    # Recording, from the upstream when there is one, else from the model.
    answers = synthesizer if not recording or settings.upstream is None else None
    options = ServeOptions.build(
        match_on=marked.match_on,
        ignore_body_fields=marked.ignore_body_fields,
        pace=marked.pace,
        jitter=marked.jitter,
        seed=settings.seed,
        miss_status=marked.miss_status,
        on_miss=MissPolicy.SYNTH if answers is not None else MissPolicy.ERROR,
        # The marker's first, then the command line's: of two that answer in the stream's place, the test's own wins.
        faults=[*profile_faults(config, [*marked.profiles, *settings.profiles]), *marked.faults, *settings.faults],
        recorded_faults=marked.recorded_faults,
        max_body=marked.max_body,
    )
    if recording:
        if settings.upstream is None and synthesizer is None:
            marker = {"function": "the test's marker", "module": "the module's marker"}.get(scope)
            raise pytest.UsageError(no_upstream(settings.record, marker))
        mode = settings.record
        if mode is RecordMode.REWRITE:
            rewritten = config.stash[REWRITTEN]
            if target in rewritten:  # the first test that records into it makes it anew; the others add
                mode = RecordMode.NEW_EPISODES
            rewritten.add(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        also = load([p for p in paths if p != target])
        upstream = settings.upstream if answers is None else None
        return build_server(
            also,
            options,
            upstream=upstream,
            model=answers,
            record_into=target,
            mode=mode,
            redaction=settings.redaction,
        )
    missing = [p for p in paths if not p.exists()]
    if missing and synthesizer is None:
        raise pytest.UsageError(
            f"no cassette {missing[0]}{did_you_mean(missing[0]) if marked.cassettes else ''}: "
            "record it with --sse-tape-record=once --sse-tape-upstream URL"
        )
    if target not in paths and target.exists() and not any(target.is_relative_to(p) for p in paths):
        paths.append(target)  # what a test that names only folders recorded into its own cassette replays too
    models = [synthesizer.engine.id] if synthesizer is not None else []
    return build_server(load(paths), options, model=synthesizer, models=models)


def _record_hint(config: pytest.Config, settings: Settings, marked: Marked, node: Any, scope: str) -> str:
    """The line a miss's failure ends with: how to record what no recording answered (as vcrpy and
    pytest_httpx say what to do). `once` records a cassette that is not there yet, `new_episodes` adds to one."""
    name = recorded_name(node)
    target = record_target(config, node, scope, scope_cassettes(config, node, scope, marked, name), name)
    mode = "new_episodes" if target.exists() else "once"
    upstream = "" if settings.upstream is not None else " --sse-tape-upstream URL"
    return f"to record what no recording answered, re-run with --sse-tape-record={mode}{upstream}"


def _synthesizer(config: pytest.Config, model: str, seed: int) -> Any:
    """A responder answering with `model`, loaded once per session."""
    from ..synth import require

    require()
    from ..synth.batch import open_model
    from ..synth.live import Synthesizer
    from ..synth.pipeline import Settings as SynthSettings

    engines = config.stash[MODELS]
    if model not in engines:
        engines[model], _ = open_model(model)
    return Synthesizer(engines[model], SynthSettings(seed=seed))
