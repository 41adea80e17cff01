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

pytest finds the plugin's hooks and fixtures in this module; each lives in
the module of its concept: `options` (the command line and ini settings),
`marker`, `cassettes` (which ones a test uses), `variants` (the `split`
sweep and the gauntlet's runs), `tape` (`SSETape`, opening one with its
server, and stopping a run that has nothing to record from), `fixtures`, `async_fixture` (with pytest-asyncio), `scopes` (which
fixture serves which scope), `xdist` (scopes spread over pytest-xdist's
workers), `reports` (failures and the gauntlet's table) and `probe` (the `sse_tape_probe` fixture: what a
gateway does to streams, for a gateway's own tests).
"""

from __future__ import annotations

import sys

import pytest

# pytest takes hooks and fixtures from this module object alone: each is imported here under its own name.
from .fixtures import each_test as each_test
from .fixtures import sse_tape as sse_tape
from .fixtures import sse_tape_module as sse_tape_module
from .fixtures import sse_tape_session as sse_tape_session
from .marker import MARKER, Marked
from .options import GAUNTLET, SETTINGS, check_faults, read_settings
from .options import pytest_addoption as pytest_addoption
from .options import pytest_report_header as pytest_report_header
from .probe import PROBE_MARKER
from .probe import sse_tape_probe as sse_tape_probe
from .reports import GauntletTable
from .reports import pytest_runtest_makereport as pytest_runtest_makereport
from .tape import MODELS, REWRITTEN, SSETape
from .tape import pytest_collection_modifyitems as pytest_collection_modifyitems
from .variants import pytest_generate_tests as pytest_generate_tests
from .variants import variant_fixture as variant_fixture
from .xdist import is_worker
from .xdist import pytest_configure_node as pytest_configure_node
from .xdist import pytest_runtestloop as pytest_runtestloop
from .xdist import pytest_testnodedown as pytest_testnodedown

__all__ = ["GAUNTLET", "Marked", "SSETape"]


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker, read the settings, and add the gauntlet's table and the async fixture when asked."""
    config.addinivalue_line("markers", MARKER)
    config.addinivalue_line("markers", PROBE_MARKER)
    settings = read_settings(config)
    config.stash[SETTINGS] = settings
    config.stash[MODELS] = {}
    config.stash[REWRITTEN] = set()
    if settings.faults or settings.profiles or settings.run_gauntlet:
        check_faults(config, settings)
    if settings.run_gauntlet and not is_worker(config):  # pytest-xdist's workers report to the controller
        config.pluginmanager.register(GauntletTable(settings), "sse_tape_gauntlet")
    asyncio_plugin = sys.modules.get("pytest_asyncio.plugin")
    if asyncio_plugin is not None and config.pluginmanager.is_registered(asyncio_plugin):
        from . import async_fixture

        config.pluginmanager.register(async_fixture, "sse_tape_async")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close the models the session loaded."""
    for engine in config.stash.get(MODELS, {}).values():
        engine.close()
