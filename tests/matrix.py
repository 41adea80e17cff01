"""The client matrix: each client library people use, driven as its own docs say (a base URL and a key), against
`sse-tape serve` of the bundled cassettes (tests/test_clients.py runs it).

A client is a row of cases, each a function of the server's base URL that may be async: a streamed answer, a plain
(JSON) answer, and a tool loop, where the client offers `get_weather`, runs it when the recording calls it, sends
its result back and returns the recorded answer after it. A client leaves out a case it has no way to make.
"""

from __future__ import annotations

import fcntl
import inspect
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import pytest

from sse_tape import MockServer
from sse_tape.journal import Answered, Matched, Missed

QUESTION = "What's the weather in Tokyo?"
GREETING_PROMPT = "Hello!"
TOOL_DESCRIPTION = "Get weather for a city"
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
LOOP_LIMIT = 6
"""Model calls a tool loop may make before a test gives up on it: the recordings need two."""


@dataclass(frozen=True, slots=True)
class Api:
    """What a bundled cassette answers: its greeting, and the answer after the get_weather call it makes."""

    cassette: str
    model: str
    greeting: str
    answer: str

    def recording(self, number: int) -> str:
        """How the journal names the cassette's interaction `number` (from 1)."""
        return f"{self.cassette}.toml #{number}"


RAINY = "It's 18°C with light rain in Tokyo right now, so take an umbrella."
CHAT = Api("openai-chat", "local-model", "Hi there! How can I help you today?", RAINY)
RESPONSES = Api("openai-responses", "claude-sonnet-4-20250514", "Hello! How can I help you today?", RAINY)
MESSAGES = Api(
    "anthropic-messages",
    "claude-sonnet-4-6",
    "Hello! How can I help you today?",
    "It's currently 18°C and sunny in Tokyo.",
)
GEMINI = Api(
    "gemini", "gemini-2.5-flash", "Hello! How can I help you today?", "It's 18°C and sunny in Tokyo right now."
)

Answer: TypeAlias = "str | Awaitable[str]"
Ask: TypeAlias = "Callable[[str], Answer] | InWorker"
"""A case without a tool: the server's base URL in, the answer's text out."""
Loop: TypeAlias = "Callable[[str, Weather], Answer] | InWorker"
"""A tool loop: the server's base URL and the tool in, the final answer's text out."""


@dataclass(frozen=True, slots=True)
class Venv:
    """A venv of its own for clients whose pins conflict with the shared environment's packages: it sees those
    (`--system-site-packages`) and installs `requirements` over them; `venv_clients.py` runs in it."""

    name: str
    requirements: tuple[str, ...]
    why: str
    """The pins that keep its clients out of the shared environment."""


@dataclass(frozen=True, slots=True)
class NodeModules:
    """The JavaScript clients: `js/package.json` installed with npm (from its cache where it can), and
    `js/clients.mjs` (with the modules it imports) run by node."""

    name: str = "js"


@dataclass(frozen=True, slots=True)
class InWorker:
    """A case its client makes in the row's worker, a process of its own (a venv's Python, or node) that reads
    `CLIENT CASE URL` lines and answers each with a `RESULT` line."""

    case: str


@dataclass(frozen=True, slots=True)
class Client:
    """One row of the matrix: a client library (or one way of using it) and the cases it can make."""

    name: str
    api: Api
    stream: Ask | None = None
    plain: Ask | None = None
    loop: Loop | None = None
    """The tool loop over plain answers."""
    streamed_loop: Loop | None = None
    """The tool loop over streamed answers."""
    extract: Ask | None = None
    """Structured output by a forced tool: the client makes the model call get_weather, and returns its city."""
    streamed_extract: Ask | None = None
    """The same over a stream."""
    worker: Venv | NodeModules | None = None
    """Where the client runs, when not in the tests' own process (its cases are then `InWorker`)."""
    streams_always: bool = False
    """The client asks for a stream even where its call is plain (pydantic-ai's Anthropic model does)."""
    ignored_warnings: tuple[str, ...] = ()
    """Warnings filters (pytest's `filterwarnings` words) for what the client library itself warns of, each
    with its reason where the row is made: never a warning of sse-tape's."""


class Weather:
    """The tool the loops offer: it notes each city it is asked about, and answers what the recordings expect."""

    def __init__(self) -> None:
        self.cities: list[str] = []

    def __call__(self, city: str) -> str:
        self.cities.append(city)
        return json.dumps({"city": city, "temperature_c": 18, "conditions": "light rain"})

    def function(self) -> Callable[[str], str]:
        """The tool as a plain function, as frameworks want one: its name, annotations and docstring say what it
        is."""

        def get_weather(city: str) -> str:
            """Get weather for a city."""
            return self(city)

        return get_weather

    def call(self, name: str, arguments: str | dict[str, Any]) -> str:
        """Run the call a model asked for by name, with its arguments as JSON text or an object."""
        assert name == "get_weather", f"the model called {name!r}, which was never offered"
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
        return self(**args)


TESTS = Path(__file__).parent


class Workers:
    """The workers of a test run, each made the first time a client needs it: a venv with `venv_clients.py` running
    in it, or the npm packages with `js/clients.mjs` running in node. Each imports its clients once, and makes one
    case after another.

    What a worker runs in (the venv, `node_modules`) is built once under `root` for every process of the run that
    shares it (pytest-xdist's workers): the first to need it builds it under a file lock, the others wait for it
    and start their own worker in it, each with a stderr log of its own."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made: dict[str, subprocess.Popen[str] | str] = {}  # a worker, or why it could not be made

    def _worker(self, where: Venv | NodeModules) -> subprocess.Popen[str]:
        """The worker, made now if it is not yet; the test skips, saying why, when it cannot be made here."""
        made = self._made.get(where.name)
        if made is None:
            made = self._made[where.name] = self._make(where)
        if isinstance(made, str):
            pytest.skip(made)
        return made

    def _make(self, where: Venv | NodeModules) -> subprocess.Popen[str] | str:
        folder = self.root / where.name
        why = self.root / f"{where.name}.why"  # why it could not be built, for every process that asks
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / f"{where.name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not why.exists() and not (folder / ".built").exists():
                failed = self._venv(where, folder) if isinstance(where, Venv) else self._node(folder)
                if failed is None:
                    (folder / ".built").touch()
                else:
                    why.write_text(failed)
        if why.exists():
            return why.read_text()
        if isinstance(where, Venv):
            return self._start([str(folder / "bin" / "python"), str(TESTS / "venv_clients.py")], where)
        node = shutil.which("node")
        assert node is not None  # it was there to build with
        return self._start([node, "clients.mjs"], where)

    @staticmethod
    def _venv(venv: Venv, folder: Path) -> str | None:
        """Build `venv` in `folder`: None, or why it could not be."""
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(folder)], check=True, timeout=120)
        python = folder / "bin" / "python"
        # pip's own cache makes this quick after the first time; with no index to reach, it fails soon.
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--timeout", "15"]
        installed = subprocess.run(
            [*pip, "--retries", "1", *venv.requirements], capture_output=True, text=True, timeout=300
        )
        if installed.returncode != 0:
            said = installed.stderr.strip().splitlines()[-1:] or ["(nothing on stderr)"]
            return f"{venv.why}; pip could not install {' '.join(venv.requirements)} in a venv of its own: {said[0]}"
        return None

    @staticmethod
    def _node(folder: Path) -> str | None:
        """Install the JavaScript clients in `folder`: None, or why they could not be."""
        node, npm = shutil.which("node"), shutil.which("npm")
        if node is None or npm is None:
            return "the JavaScript clients need node and npm, and this machine has no " + (
                "node" if node is None else "npm"
            )
        folder.mkdir()
        for name in ("package.json", "clients.mjs", "mcp_client.mjs"):
            shutil.copy(TESTS / "js" / name, folder / name)
        # npm's own cache makes this quick after the first time.
        npm_install = [npm, "install", "--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error"]
        npm_install += ["--fetch-timeout=15000", "--fetch-retries=1"]  # with no registry to reach, it fails soon
        installed = subprocess.run(npm_install, cwd=folder, capture_output=True, text=True, timeout=300)
        if installed.returncode != 0:
            said = installed.stderr.strip().splitlines()[-1:] or ["(nothing on stderr)"]
            return f"npm could not install the JavaScript clients (tests/js/package.json): {said[0]}"
        return None

    def _log(self, where: Venv | NodeModules) -> Path:
        """Where this process's worker in `where` writes its stderr."""
        return self.root / where.name / f"stderr-{os.getpid()}.log"

    def _start(self, command: list[str], where: Venv | NodeModules) -> subprocess.Popen[str]:
        with self._log(where).open("w") as log:  # read when a case fails; a pipe nobody reads could fill
            return subprocess.Popen(
                command,
                cwd=self.root / where.name,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                encoding="utf-8",
            )

    def run(self, client: Client, case: InWorker, url: str) -> dict[str, Any]:
        """Make `case` of `client` in its worker against the server at `url`: what the client answered, and the
        cities its tool was asked about."""
        assert client.worker is not None
        return self.ask(client.worker, client.name, case.case, url)

    def ask(self, where: Venv | NodeModules, name: str, case: str, url: str) -> dict[str, Any]:
        """Have the worker `where` make `case` (a word, no spaces) of the client it knows as `name` against
        `url`: its `RESULT`, which the client makes up (a matrix row's answer and cities, a reader's message)."""
        worker = self._worker(where)
        assert worker.stdin is not None
        assert worker.stdout is not None
        worker.stdin.write(f"{name} {case} {url}\n")
        worker.stdin.flush()
        for line in worker.stdout:
            if line.startswith("RESULT "):
                result: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
                assert "error" not in result, f"{name} {case} raised:\n{result['error']}"
                return result
        log = self._log(where).read_text()
        raise AssertionError(f"the worker exited with {worker.wait()} during {name} {case}:\n{log}")

    def close(self) -> None:
        """End the workers."""
        for made in self._made.values():
            if not isinstance(made, str):
                assert made.stdin is not None
                made.stdin.close()
                made.wait(timeout=30)
                assert made.stdout is not None
                made.stdout.close()


async def answer_of(client: Client, case: str, url: str, workers: Workers, weather: Weather | None = None) -> str:
    """The text of the answer `client` gets in `case` (a field's name) from the server at `url`."""
    how = getattr(client, case)
    if isinstance(how, InWorker):
        result = workers.run(client, how, url)
        if weather is not None:
            weather.cities += result["cities"]
        return str(result["answer"])
    answer = how(url) if weather is None else how(url, weather)
    return await answer if inspect.isawaitable(answer) else answer


def outcomes(server: MockServer) -> list[str]:
    """What answered each request, in order: the recording (with how it was reshaped), a miss, or another
    responder's answer."""
    server.control.wait_idle(60)
    said: list[str] = []
    for entry in server.journal:
        if isinstance(entry, Matched):
            # Sent without usage is still the stream as recorded; as JSON or as a stream is another shape.
            shape = f" {entry.converted}" if entry.converted in ("as JSON", "as a stream") else ""
            said.append(entry.recording.split(" (")[0] + shape)
        elif isinstance(entry, Missed):
            said.append(f"miss ({entry.status})")
        elif isinstance(entry, Answered):
            said.append(f"{entry.method} {entry.path}: {entry.what}")
    return said


def transcript(server: MockServer) -> str:
    """Each request the server got, its body, and what answered it: what a failure shows."""
    server.control.wait_idle(60)
    received = server.control.snapshot().received
    lines = []
    for number, request in enumerate(received, start=1):
        body = request.body.decode(errors="replace")
        if len(body) > 1500:
            body = body[:1500] + f"... ({len(request.body)} bytes)"
        what = [e.line() for e in server.journal if e.request == number and isinstance(e, Matched | Missed | Answered)]
        lines.append(f"request {number}: {request.method} {request.path} {body}\n  -> {'; '.join(what)}")
    return "\n".join(lines)


def streamed(api: Api, number: int) -> str:
    """The outcome of recording `number` played as the stream it is."""
    return api.recording(number)


def as_json(api: Api, number: int) -> str:
    """The outcome of recording `number` answered as one JSON body."""
    return f"{api.recording(number)} as JSON"


def check(server: MockServer, got: object, want: object, expected: list[str]) -> None:
    """Assert the client's answer and the server's outcomes, showing the whole exchange when either differs."""
    seen = outcomes(server)
    assert (got, seen) == (want, expected), f"\ngot {got!r}, want {want!r}\n{transcript(server)}"
