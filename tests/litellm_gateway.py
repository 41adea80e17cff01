"""LiteLLM's proxy (`litellm[proxy]`) in a process of its own on loopback, in front of an OpenAI-compatible
upstream (an sse-tape server), for the tests that probe it as a gateway (issue 32).

It runs from a venv of its own (`proxy_python`: pip installs `litellm[proxy]` there the first time, from the
package index or pip's cache), and needs no network once it runs: the model cost map is read from the copy
inside the package (`LITELLM_LOCAL_MODEL_COST_MAP`), telemetry is off, and with no `DATABASE_URL` there is
no database. It does ask its upstream for `GET /v1/models` once as it starts (LiteLLM's model discovery), a
request no recording needs to answer. A test that uses it is skipped, saying why, where the proxy cannot be
installed or started.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import processes
import pytest

STARTUP_NET = 300.0
"""Seconds LiteLLM's proxy may take to answer its health check: a safety net, generous on purpose (it imports
for seconds on an idle machine, and for a minute on a busy one with a cold disk cache)."""

# The settings that would send it elsewhere than the config says: a proxy for its outgoing requests, a
# database, a master key or a config of the user's own.
_BLOCKED = {
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
    "DATABASE_URL", "DIRECT_URL", "LITELLM_MASTER_KEY", "CONFIG_FILE_PATH", "WORKER_CONFIG",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class LiteLLM:
    """A running LiteLLM proxy: its base URL and the master key its clients must send."""

    url: str
    key: str
    log: Path
    """What it wrote on stdout and stderr."""

    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        """The header that lets a client in (`Authorization: Bearer KEY`), as a probe's `headers` take it."""
        return (("Authorization", f"Bearer {self.key}"),)


def config(upstream: str, model: str, key: str) -> str:
    """The proxy's YAML config: `model` (what clients ask for) sent as `openai/MODEL` to `UPSTREAM/v1` with a
    dummy key, and the master key `key`. JSON is YAML, and LiteLLM reads it as such."""
    return json.dumps(
        {
            "model_list": [
                {
                    "model_name": model,
                    "litellm_params": {
                        "model": f"openai/{model}",
                        "api_base": upstream.rstrip("/") + "/v1",
                        "api_key": "sk-sse-tape-dummy",
                    },
                }
            ],
            "litellm_settings": {"telemetry": False},
            "general_settings": {"master_key": key},
        },
        indent=2,
    )


VENV = Path(tempfile.gettempdir()) / f"sse-tape-litellm-proxy-{sys.version_info[0]}.{sys.version_info[1]}"
"""Where LiteLLM's proxy is installed, kept from one run to the next."""


def proxy_python() -> str:
    """The Python of a venv of its own with `litellm[proxy]` in it, made the first time (pip picks the newest
    release it can install), and reused after; skips the test, with pip's word, where it cannot be made.

    The proxy lives apart from the tests' environment: its extra pins what the client libraries there need
    newer, and from 1.110 on it needs the `litellm-proxy` package, which not every package index holds."""
    python = VENV / "bin" / "python"
    with (Path(tempfile.gettempdir()) / f"{VENV.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one pytest-xdist worker makes it; the others wait and use it
        ready = VENV / "ready"
        if not ready.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True, timeout=120)
            pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "litellm[proxy]"]
            done = subprocess.run(pip, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                said = [line for line in done.stderr.splitlines() if line.strip()] or ["no word"]
                pytest.skip(f"pip could not install litellm[proxy] in a venv of its own: {said[-1]}")
            ready.touch()
    return str(python)


@contextmanager
def litellm_proxy(upstream: str, *, model: str = "local-model") -> Iterator[LiteLLM]:
    """LiteLLM's proxy on a free loopback port while the block runs, sending `model` to the OpenAI-compatible
    server at `upstream` (a base URL, such as an sse-tape server's); ready, its health check answered, when the
    block starts. Ctrl-C stops it after the block. Skips the test where LiteLLM's proxy cannot be installed
    (`proxy_python`), or cannot start for want of a module."""
    python = proxy_python()
    with tempfile.TemporaryDirectory(prefix="sse-tape-litellm-") as folder:
        directory = Path(folder)
        key = "sk-sse-tape-probe-" + os.urandom(8).hex()
        (directory / "config.yaml").write_text(config(upstream, model, key))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        env = {name: value for name, value in os.environ.items() if name.upper() not in _BLOCKED}
        env |= {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True"}
        # `litellm`, the command, run by the venv's Python; in the config's folder, where it reads a `.env` if any.
        command = [
            python, "-c", "from litellm.proxy.proxy_cli import run_server; run_server()",
            "--config", "config.yaml", "--host", "127.0.0.1", "--port", str(port),
        ]  # fmt: skip
        log = directory / "litellm.log"
        with log.open("wb") as output:
            process = subprocess.Popen(command, cwd=directory, env=env, stdout=output, stderr=subprocess.STDOUT)
        gateway = LiteLLM(f"http://127.0.0.1:{port}", key, log)
        try:
            _wait_ready(process, gateway)
            yield gateway
        finally:
            processes.stop(process, timeout=30, signum=signal.SIGINT)


def _wait_ready(process: subprocess.Popen[bytes], gateway: LiteLLM) -> None:
    # Uvicorn answers only once the app's startup (the config read, the router built) is done.
    deadline = time.monotonic() + STARTUP_NET
    while True:
        if process.poll() is not None:
            text = gateway.log.read_text(errors="replace")
            missing = [line for line in text.splitlines() if line.startswith(("ModuleNotFoundError", "ImportError"))]
            if missing:
                pytest.skip(f"LiteLLM's proxy cannot start: {missing[-1]} (pip install 'litellm[proxy]')")
            pytest.fail(f"LiteLLM's proxy exited with {process.returncode}:\n{text[-4000:]}")
        try:
            if httpx.get(f"{gateway.url}/health/liveliness", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"LiteLLM's proxy did not answer within {STARTUP_NET:g} s:\n{gateway.log.read_text()[-4000:]}")
        time.sleep(0.1)
