"""The client matrix: each client library people use, driven as its own docs say (a base URL and a key), against
`sse-tape serve` of the bundled cassettes (tests/test_clients.py runs it).

A client is a row of cases, each a function of the server's base URL that may be async: a streamed answer, a plain
(JSON) answer, and a tool loop, where the client offers `get_weather`, runs it when the recording calls it, sends
its result back and returns the recorded answer after it. A client leaves out a case it has no way to make.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

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
Ask: TypeAlias = Callable[[str], Answer]
"""A case without a tool: the server's base URL in, the answer's text out."""
Loop: TypeAlias = Callable[[str, "Weather"], Answer]
"""A tool loop: the server's base URL and the tool in, the final answer's text out."""


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


async def answer_of(answer: Answer) -> str:
    """The text of a case's answer, awaited when the client is async."""
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
