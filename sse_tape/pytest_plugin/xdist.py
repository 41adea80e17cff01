"""pytest-xdist: the controller's seed for every worker, and the module and session scopes spread over the
workers, each with a server of its own, whose parts the controller adds up to tell what the scope left undone.

Without pytest-xdist, `pytest_configure_node` and `pytest_testnodedown` are never called, and
`pytest_runtestloop` finds no scope spread.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from .options import SETTINGS
from .scopes import ScopeUse

__all__ = [
    "hand_over",
    "is_spread",
    "is_worker",
    "pytest_configure_node",
    "pytest_runtestloop",
    "pytest_testnodedown",
    "stop_run",
]


def is_worker(config: pytest.Config) -> bool:
    """Whether this process is a pytest-xdist worker, which reports to its controller."""
    return hasattr(config, "workerinput")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist: every worker takes the controller's seed, so that the header's seed repeats the run, and
    its `--dist` mode (a worker's own says `no`), so that it knows whether it runs a module's tests alone."""
    node.workerinput["sse_tape_seed"] = node.config.stash[SETTINGS].seed
    node.workerinput["sse_tape_dist"] = getattr(node.config.option, "dist", "load")


def stop_run(config: pytest.Config, items: list[pytest.Item], message: str) -> None:
    """Stop the run at its collection, saying `message`, as a `pytest.UsageError` does."""
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
        spread.add(node_id, part["scope"], ScopeUse.from_wire(part["use"]))


def is_spread(config: pytest.Config, scope: str) -> bool:
    """Whether pytest-xdist spreads the tests of a module (or the session) over several workers, each with a
    server of its own: then none of them can tell that a recording went unplayed, or a fault never acted, and
    the controller tells it from their parts (`hand_over`)."""
    worker = getattr(config, "workerinput", {})
    workers, dist = worker.get("workercount", 1), worker.get("sse_tape_dist", "load")
    if workers < 2 or dist == "each":
        return False
    return scope == "session" or dist not in ("loadfile", "loadscope")


def hand_over(config: pytest.Config, node_id: str, scope: str, use: ScopeUse) -> None:
    """A pytest-xdist worker: give the controller what this worker's part of a spread scope played, in the
    `workeroutput` it sends when its session finishes (`pytest_testnodedown` takes it)."""
    scopes = config.workeroutput.setdefault("sse_tape_scopes", {})  # type: ignore[attr-defined]
    if node_id in scopes:  # the module's tests came back to this worker after others': its server anew
        use.merge(ScopeUse.from_wire(scopes[node_id]["use"]))
    scopes[node_id] = {"scope": scope, "use": use.to_wire()}


class _SpreadScopes:
    """pytest-xdist's controller: the scopes spread over the workers, their parts added up."""

    def __init__(self) -> None:
        self.scopes: dict[str, tuple[str, ScopeUse]] = {}
        self.whole = True
        """No worker went down without its part (a crash): what it played is not known."""

    def add(self, node_id: str, scope: str, use: ScopeUse) -> None:
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
