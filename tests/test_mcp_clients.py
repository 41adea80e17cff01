"""MCP's clients beyond a `ClientSession` in the tests' own process: an agent's tests with the pytest fixture
(docs/mcp.md's worked example, recorded and replayed as a user runs them) and the Node SDK
(`@modelcontextprotocol/sdk`, tests/js/mcp_client.mjs). The server they record is the worked example's own
`tools.py`, the official SDK's `MCPServer` over Streamable HTTP; what answers without a recording, a local model
included, says so as MCP does.
"""

from __future__ import annotations

import contextlib
import re
import runpy
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import processes
import pytest
from click.testing import CliRunner
from matrix import NodeModules, Workers
from mcp.server.mcpserver import MCPServer
from sdk_servers import on_loopback

from sse_tape import Cassette, serve
from sse_tape.cassette import Chunk, Interaction, Request, Response
from sse_tape.cli import cli

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = dict(
    re.findall(r"<!-- docs-test: (\S+) -->\n```python\n(.*?)\n```", (ROOT / "docs" / "mcp.md").read_text(), re.DOTALL)
)
NODE = NodeModules()


@contextlib.contextmanager
def tools_server(folder: Path) -> Iterator[str]:
    """docs/mcp.md's `tools.py` (written into `folder`), served over Streamable HTTP on a free loopback port
    rather than its own 8000: its base URL. (`MCPServer` is imported with this module, not first by `tools.py`
    in a test: pytester takes the modules a test imports out of `sys.modules` after it, and the SDK's
    `cryptography` fails when they are imported again.)"""
    source = folder / "tools.py"
    source.write_text(EXAMPLES["tools.py"], encoding="utf-8")
    server = runpy.run_path(str(source))["server"]  # not as __main__: it does not run itself
    assert isinstance(server, MCPServer)
    with on_loopback(server.streamable_http_app(), "the MCP server") as url:
        yield url


def test_the_worked_example_records_a_session_per_test_once_then_replays_it_offline(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert list(EXAMPLES) == ["tools.py", "test_agent.py"]
    # As tests/test_pytest_plugin.py runs pytest: this plugin and pytest-asyncio only, in processes of their own.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        "addopts = -p sse_tape.pytest_plugin -p pytest_asyncio.plugin\n"
    )
    tests = pytester.mkdir("tests")
    (tests / "test_agent.py").write_text(EXAMPLES["test_agent.py"], encoding="utf-8")
    with tools_server(pytester.path) as upstream:
        recorded = pytester.runpytest_subprocess("--sse-tape-record=once", "--sse-tape-upstream", upstream)
        recorded.assert_outcomes(passed=2)
    cassettes = tests / "cassettes" / "test_agent"

    def asked(name: str) -> list[str]:
        """What each recording of a test's cassette asked, in order of name (a session's requests overlap)."""
        interactions = Cassette.load(cassettes / f"{name}.toml").interactions
        return sorted(
            i.request.json()["method"] if i.request.method == "POST" else i.request.method for i in interactions
        )

    # The whole session: the server's GET stream, open till the DELETE that ended it, too.
    session = ["DELETE", "GET", "initialize", "notifications/initialized", "tools/call", "tools/list"]
    assert asked("test_the_agent_counts_with_progress") == session
    # The 503 answered in the server's place, and was not recorded: only the session after it is.
    assert asked("test_a_server_down_fails_one_session_and_the_next_works") == session
    # Offline, twice: the marker's 503 acts on the replay, and every session gets what the server gave.
    for _ in range(2):
        pytester.runpytest_subprocess().assert_outcomes(passed=2)


MODULE_SESSION = """
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
async def session(sse_tape_module):
    async with streamable_http_client(sse_tape_module.mcp_url) as (read, write, *_), ClientSession(read, write) as s:
        await s.initialize()
        yield s


async def test_one(session):
    assert (await session.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}


async def test_two(session):
    assert (await session.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}
"""


def test_a_session_a_module_fixture_opened_goes_on_through_the_modules_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeini("[pytest]\naddopts = -p sse_tape.pytest_plugin -p anyio.pytest_plugin\n")
    pytester.makepyfile(test_module=MODULE_SESSION)
    # Recorded as it runs, its session open through both tests: the session's GET stream, which the upstream
    # holds open till the session ends, is no work in flight that the end of the first test would wait for.
    with tools_server(pytester.path) as upstream:
        record = ("--sse-tape-record=once", "--sse-tape-upstream", upstream)
        pytester.runpytest_subprocess("test_module.py", *record, timeout=120).assert_outcomes(passed=2)
    # Each test starts over (its `add` plays again), and the session the module's fixture opened before the
    # first goes on: the server forgets no session between tests.
    pytester.runpytest_subprocess("test_module.py").assert_outcomes(passed=2)


def test_the_node_sdk_gets_from_the_replay_what_it_got_from_the_server(workers: Workers, tmp_path: Path) -> None:
    cassette = tmp_path / "node.toml"
    with tools_server(tmp_path) as upstream, processes.recording_proxy(upstream, cassette) as url:
        live = workers.ask(NODE, "js-mcp", "add-first", f"{url}/mcp")["answer"]
    assert live == {
        "version": "2025-11-25",
        "server": "tools",
        "tools": [["add", "Add two numbers."], ["count", "Count to n, reporting each step as progress."]],
        "added": [{"result": 5}, False],
        "counted": [{"result": "counted 3"}, False],
        "progress": [[1, 3, "step 1"], [2, 3, "step 2"], [3, 3, "step 3"]],
    }
    with serve(cassette) as replay:  # in a thread of its own: node's session blocks this one
        # In the other order too: `count` is request 2 now, recorded as 3, and its progress token with it.
        for order in ("count-first", "add-first", "count-first"):
            assert workers.ask(NODE, "js-mcp", order, f"{replay.url}/mcp")["answer"] == live
        replay.control.wait_idle(30)
        assert replay.control.snapshot().misses == ()


def test_a_model_speaks_no_mcp_serve_answers_what_no_recording_does_as_a_miss_and_synth_says_so(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    model = str(tiny_model_path)
    made = CliRunner().invoke(
        cli, ["synth", "--model", model, "--dialect", "mcp", "--prompt", "Hi", "-c", str(tmp_path / "s.toml")]
    )
    said = "Error: synthesis needs an LLM API, and mcp is an SSE protocol without generation (see Generation)\n"
    assert (made.exit_code, made.output) == (2, said)
    listed = Interaction(
        Request("POST", "/mcp", body=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'),
        Response(
            200,
            (("content-type", "application/json"),),
            (Chunk(0.0, b'{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}'),),
        ),
    )
    cassette = tmp_path / "listed.toml"
    Cassette(interactions=[listed]).save(cassette)
    server, url = processes.start(["serve", str(cassette), "--model", model, "--port", "0", "-q"])
    try:
        headers = {"accept": "application/json, text/event-stream"}
        listing = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
        replayed = httpx.post(f"{url}/mcp", json=listing, headers=headers, timeout=30)
        prompts = {"jsonrpc": "2.0", "id": 1, "method": "prompts/list"}
        answer = httpx.post(f"{url}/mcp", json=prompts, headers=headers, timeout=30)
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        answered = httpx.post(f"{url}/v1/chat/completions", json=chat, timeout=60)
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=30)
    assert replayed.json() == {"jsonrpc": "2.0", "id": 7, "result": {"tools": []}}  # as without a model
    assert (answer.status_code, answer.headers["content-type"]) == (404, "application/json")
    assert answer.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": "sse-tape: no recorded interaction matches POST /mcp; closest: listed.toml #1 (POST /mcp): "
            'method is "prompts/list", recorded "tools/list"; '
            "the model answers the LLM APIs only, and this request is to none of them",
        },
    }
    assert answered.status_code == 200  # the model answers the API it speaks, and was there all along
    assert answered.json()["choices"][0]["message"]["role"] == "assistant"
    assert server.returncode in (0, 130)
    assert "Traceback" not in err
