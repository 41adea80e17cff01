"""What the plugin adds to the reports: a failed test's sse-tape section, its teardown failures joined in one,
and the gauntlet's results, gathered from every report (a pytest-xdist worker's too) into a table."""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any, cast

import pytest

from .fixtures import CALL_PASSED, TAPES
from .marker import read_marker
from .options import SETTINGS, Settings
from .variants import AS_RECORDED, variant_of

__all__ = ["GauntletTable", "pytest_runtest_makereport"]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A test's report, with what sse-tape adds to it: its section, its teardown failures joined, the gauntlet's
    result."""
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
    tapes = item.stash.get(TAPES, None)
    if not tapes:
        return
    if report.when == "call":
        item.stash[CALL_PASSED] = report.passed
        if report.failed:
            for fixture, tape in tapes.items():
                report.sections.append(("sse-tape" + (f" ({fixture})" if len(tapes) > 1 else ""), tape.describe()))
    settings = item.config.stash[SETTINGS]
    if not settings.run_gauntlet:
        return
    gauntlet = settings.gauntlet
    variant = variant_of(item)
    try:
        survives = read_marker(item).survives
    except pytest.UsageError:
        survives = ()  # the test's setup failed, saying why
    name = variant.gauntlet or AS_RECORDED
    promised = variant.gauntlet is None or survives == "all" or name in survives
    if report.failed or report.when == "call":
        # In the report, so that it reaches pytest-xdist's controller too.
        result = [
            variant.plain(item.nodeid),
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


class GauntletTable:
    """Gathers the gauntlet's results from the reports (a worker's too), and shows them at the end."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.results: dict[str, dict[str, tuple[bool, bool, str | None]]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Keep the gauntlet's result a report carries."""
        for key, value in report.user_properties:
            if key == _GAUNTLET_PROPERTY:
                test, name, passed, promised, reason = cast(list[Any], value)
                row = self.results.setdefault(test, {})
                if not passed or name not in row:  # a failure in any phase stands
                    row[name] = (passed, promised, reason)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """Show the table (and write the JSON report, when asked)."""
        settings, results = self.settings, self.results
        names = [AS_RECORDED, *settings.gauntlet]
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
