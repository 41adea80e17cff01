from __future__ import annotations

import gc
import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import processes
import pytest
from hypothesis import settings
from matrix import Workers
from tiny_model import write_tiny_gguf

from sse_tape import Cassette, Chunk, Interaction, MockServer, bundled_cassettes, serve

# The plugin's tests run generated test modules in sessions of their own.
pytest_plugins = ("pytester",)

# `just fuzz` (bench/fuzz.py without atheris) runs the fuzz-marked tests long.
settings.register_profile("fuzz", max_examples=int(os.environ.get("SSE_TAPE_FUZZ_EXAMPLES", "20000")), deadline=None)
# No deadline per example: on a busy shared machine an example can take seconds, and that is no failure.
settings.register_profile("sse-tape", deadline=None)
settings.load_profile("sse-tape")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave the `slow` tests out unless `-m` names the marker or the command line names the test.

    Done here, not with `-m "not slow"` in addopts: a user's own `-m` (say `-m "not model"`) would replace
    that one and bring the slow tests back; this way it combines with whatever `-m` says.
    """
    if re.search(r"\bslow\b", config.option.markexpr or ""):
        return
    named = [arg.split("::", 1)[1] for arg in config.args if "::" in arg]

    def wanted(item: pytest.Item) -> bool:
        if item.get_closest_marker("slow") is None:
            return True
        tail = item.nodeid.split("::", 1)[-1]
        return any(tail == name or tail.startswith((name + "[", name + "::")) for name in named)

    kept = [item for item in items if wanted(item)]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if not wanted(item)])
        items[:] = kept


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The parsed-TOML cache of this session (and the processes it starts), not the user's."""
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SSE_TAPE_TOML_CACHE", str(folder))
        yield folder


@pytest.fixture(scope="session")
def bundled() -> dict[str, Cassette]:
    """The bundled cassettes of the APIs sse-tape speaks, by name (openai-chat, lmstudio-chat, ...); not the
    plain event stream for EventSource (events), which has tests of its own."""
    return {path.stem: Cassette.load(path) for path in bundled_cassettes() if path.stem != "events"}


@pytest.fixture
def in_progress(bundled: dict[str, Cassette]) -> tuple[Interaction, dict[str, Any]]:
    """The bundled Responses API greeting asked for in the background, and its request's body: its first two
    events at once, the rest long after any test, so that it stays in progress."""
    recorded = bundled["openai-responses"].interactions[0]
    body = {**recorded.request.json(), "background": True}
    chunks = recorded.response.chunks
    held = [Chunk(0.0, c.data) for c in chunks[:2]] + [Chunk(c.t + 600, c.data) for c in chunks[2:]]
    greeting = Interaction(
        replace(recorded.request, body=json.dumps(body).encode()), replace(recorded.response, chunks=tuple(held))
    )
    return greeting, body


@pytest.fixture(scope="module")
def instant_server() -> Iterator[MockServer]:
    """The bundled cassettes served at instant pace, matched as they say (method and path), in a background thread."""
    with serve(pace="instant") as server:
        yield server


@pytest.fixture(scope="session")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    """The client matrix's workers (a venv, node with the npm packages of tests/js), each made when a test first
    needs it, and built once a run for every xdist worker (see `Workers`). A test that needs one skips, saying
    why, where node, npm or the packages are missing."""
    base = tmp_path_factory.getbasetemp()
    made = Workers((base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "workers")
    yield made
    made.close()


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight llama GGUF (about 460 KB), written once per session."""
    return write_tiny_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf", seed=0)


@pytest.fixture(scope="session")
def llama_server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`python -m llama_cpp.server` serving the tiny model on a free loopback port; yields its base URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Every server setting can also come from an environment variable, and HOST and PORT override the flags.
    # Their names are asked in a process of their own: llama_cpp opens files at import that it never closes.
    names = "from llama_cpp.server.settings import Settings; print(*Settings.model_fields)"
    fields = subprocess.run([sys.executable, "-c", names], capture_output=True, text=True, check=True, timeout=120)
    blocked = {name.upper() for name in fields.stdout.split()} | {"CONFIG_FILE"}
    env = {key: value for key, value in os.environ.items() if key.upper() not in blocked}
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(tiny_model_path), "--model_alias", "tiny",
        "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", "2048", "--n_threads", "1", "--n_threads_batch", "1", "--seed", "0",
        # By default a second request cuts the stream in flight short.
        "--interrupt_requests", "False", "--verbose", "False",
    ]  # fmt: skip
    base_url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {process.returncode}:\n{log_path.read_text()}")
            try:
                if httpx.get(f"{base_url}/v1/models", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not answer within 60 s:\n{log_path.read_text()}")
            time.sleep(0.05)
        yield base_url
    finally:
        processes.stop(process, timeout=10)


@pytest.fixture(scope="module")
def collected() -> Iterator[None]:
    """After the module, a collection, for a module that uses boto3: botocore's errors hold their connection in
    reference cycles, which would otherwise close its socket in the middle of a later test (one that counts the
    process's open files)."""
    yield
    gc.collect()
