"""The fixtures: `sse_tape` (a server for one test), `sse_tape_module` and `sse_tape_session` (one shared by a
module's or the session's tests, started over before each), and what each test does with its tapes: begin
with its own faults, then fail at teardown on what it left undone."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from .marker import PER_TEST, own_words, read_marker
from .options import SETTINGS, profile_faults
from .scopes import SHARED, used_fixtures
from .tape import SSETape, one_line_failure, open_tape
from .variants import Variant, variant_of
from .xdist import hand_over, is_spread

__all__ = [
    "CALL_PASSED",
    "TAPES",
    "check_test",
    "each_test",
    "per_test",
    "sse_tape",
    "sse_tape_module",
    "sse_tape_session",
]

#: A test's tapes, by the name of their fixture (`node.stash`).
TAPES = pytest.StashKey[dict[str, SSETape]]()
#: Whether a test's call passed, as its report says (`node.stash`): only a test that passed is checked.
CALL_PASSED = pytest.StashKey[bool]()


@pytest.fixture
def sse_tape(request: pytest.FixtureRequest, _sse_tape_variant: Variant) -> Iterator[SSETape]:
    """A mock server for this test on a free loopback port, serving what its `sse_tape` marker names."""
    from ..server.threaded import run_in_thread

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
    from ..server.threaded import run_in_thread

    tape = open_tape(request, scope, threaded=True)
    with run_in_thread(tape.server):
        yield tape
    spread = is_spread(request.config, scope)
    if spread and not tape.allow_unused:
        hand_over(request.config, request.node.nodeid, scope, tape.use())
    if problems := tape.scope_problems(whole=not spread):
        pytest.fail(f"sse-tape ({scope} scope): " + "\n".join(problems), pytrace=False)


@pytest.fixture(autouse=True, name="_sse_tape_each")
def each_test(request: pytest.FixtureRequest, _sse_tape_variant: Variant) -> Iterator[None]:
    """Before each test that uses shared tapes: start each over; after it: check what the test left on each."""
    shared = [name for name in used_fixtures(request.fixturenames) if name in SHARED]
    if not shared:
        yield
        return
    tapes: dict[str, SSETape] = {name: request.getfixturevalue(name) for name in shared}
    with contextlib.ExitStack() as each:
        for name, tape in tapes.items():
            each.enter_context(per_test(request, tape, name))
        yield
    check_test(request, tapes, own=False)


@contextlib.contextmanager
def per_test(request: pytest.FixtureRequest, tape: SSETape, fixture: str) -> Iterator[SSETape]:
    """One test's use of `tape`, the tape of its `fixture`: started over with its variant's faults (and, on a
    shared tape, its own marker's), in its environment."""
    node = request.node
    shared = fixture in SHARED
    variant = variant_of(node)
    settings = request.config.stash[SETTINGS]
    faults = [f"split:at={variant.split}b"] if variant.split is not None else []
    if variant.gauntlet is not None:
        faults.append(settings.gauntlet[variant.gauntlet])
    with one_line_failure():
        marked = read_marker(node)  # raises on a word the marker does not know, as for a test's own server
        servers = used_fixtures(request.fixturenames)
        if marked.env and len(servers) > 1:  # one variable cannot name two servers: which one would be a guess
            raise pytest.UsageError(
                f"env=True points the SDKs at one server, and this test uses {len(servers)} ({', '.join(servers)}):"
                " give it env=False, and each client the url of the server it means"
            )
        asked: list[str] = []
        own: dict[str, Any] = {}
        if shared:
            own = own_words(node)
            if refused := sorted(set(own) - PER_TEST):
                raise pytest.UsageError(
                    f"a shared server serves as its scope's marker says: put {', '.join(refused)} there "
                    "(a test's own marker may give " + ", ".join(sorted(PER_TEST)) + ")"
                )
            profiled = [f.spec for f in profile_faults(request.config, own.get("profiles", ()))]
            asked = list(own.get("faults", ()))
            faults = [*profiled, *asked, *faults]
        tape.begin(node.nodeid, faults, asked, allow_unused=own.get("allow_unused") if shared else None)
    node.stash.setdefault(TAPES, {})[fixture] = tape
    with pytest.MonkeyPatch.context() as patch:
        if marked.env:
            patch.setenv("OPENAI_BASE_URL", tape.openai_url)
            patch.setenv("OPENAI_API_KEY", "sse-tape")
            patch.setenv("ANTHROPIC_BASE_URL", tape.url)  # Anthropic's SDK adds /v1 itself
            patch.setenv("ANTHROPIC_API_KEY", "sse-tape")
        yield tape
    tape.end()
    if tape.threaded:  # the test's recordings are whole before the next test, or the server's end
        tape.wait_recorded()


def check_test(request: pytest.FixtureRequest, tapes: dict[str, SSETape], *, own: bool) -> None:
    """Fail a test that passed yet left a miss, an unplayed recording or a fault that never acted on one of
    `tapes` (by the name of their fixture), in one failure.

    `own`: the tapes were the test's alone, so what their scope left undone is the test's too.
    """
    variant = variant_of(request.node)
    if not request.node.stash.get(CALL_PASSED, False) or variant.gauntlet is not None:
        return  # a failed test's report says it all; a gauntlet's run is judged by its outcome alone
    several = len(used_fixtures(request.fixturenames)) > 1  # then each server's lines say whose they are
    told = []
    for fixture, tape in tapes.items():
        if problems := tape.test_problems() + (tape.scope_problems() if own else []):
            told.append((f"{fixture}: " if several else "") + "\n".join(problems))
    if told:
        seed = request.config.stash[SETTINGS].seed
        pytest.fail("sse-tape: " + "\n".join(told) + f"\n(seed {seed})", pytrace=False)
