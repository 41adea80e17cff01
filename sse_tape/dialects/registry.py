"""The dialects sse-tape speaks, by name: the built-in ones, and those other installed packages add.

A package adds a dialect by naming its class (a `Protocol`, or a
`Generation` for an LLM API) in the entry-point group `sse_tape.dialects`,
under the dialect's name:

    [project.entry-points."sse_tape.dialects"]
    toy = "toy_sse:Toy"

The registry lists the built-in dialects itself rather than through
sse-tape's own entry points: so they are there whatever the installed
metadata says (a source checkout on `PYTHONPATH`, an editable install made
before a dialect was added), they come first and in a fixed order (the
order paths and streams are recognised in, and `--dialect`'s choices), and
no other package can take one of their names. The entry points are read
once, when a dialect not built in is first needed (`refresh` reads them
again).

Which dialect a request speaks is asked of the dialects themselves: each
says which paths it serves (`Protocol.serves_path`) and whether a
recording's stream is its (`Protocol.recognises`).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from importlib.metadata import EntryPoint, entry_points

from .._exceptions import ConfigError
from ..cassette import Interaction, Request
from .a2a import A2A
from .ag_ui import AGUI
from .ai_sdk_ui import AISDKUI
from .anthropic_messages import AnthropicMessages
from .bedrock import BedrockConverse, BedrockInvoke
from .gemini import Gemini
from .generation import Generation
from .lmstudio_chat import LMStudioChat
from .mcp import MCP
from .ollama import OllamaChat, OllamaGenerate
from .openai_chat import OpenAIChat
from .openai_completions import OpenAICompletions
from .openai_responses import OpenAIResponses
from .protocol import Protocol

__all__ = [
    "BUILT_IN",
    "DIALECTS",
    "ENTRY_POINTS",
    "Registry",
    "detect",
    "dialect_for",
    "fallback",
    "for_path",
    "for_request",
    "generation",
    "get",
    "speaking",
]

ENTRY_POINTS = "sse_tape.dialects"
"""The entry-point group through which other packages add dialects."""

BUILT_IN: tuple[type[Protocol], ...] = (
    OpenAIChat,
    OpenAICompletions,
    OpenAIResponses,
    LMStudioChat,
    AnthropicMessages,
    Gemini,
    OllamaChat,
    OllamaGenerate,
    BedrockConverse,
    BedrockInvoke,
    AGUI,
    AISDKUI,
    A2A,
    MCP,
)
"""The dialects sse-tape comes with, in the order they are asked about a path or a stream."""

# How many paths `for_path` remembers the dialect of: requests come for the same few. A long one is not
# remembered: a client that sends kilobytes of path, a new one each time, would fill it with them.
_PATHS = 1024
_REMEMBERED = 256  # characters of a path, at most


class Registry(Mapping[str, Protocol]):
    """Each dialect by name, one instance of each: `built_in`, then those of the entry-point `group`.

    It also says which dialect serves a path (`for_path`) and which one a
    recording speaks (`detect`), by asking each in turn.
    """

    def __init__(self, built_in: Sequence[type[Protocol]], group: str) -> None:
        self.group = group
        self._built_in: dict[str, Protocol] = {cls.name: cls() for cls in built_in}
        self._all: dict[str, Protocol] | None = None  # with the entry points', once they are read
        self._paths: dict[str, Protocol | None] = {}
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> Protocol:
        found = self._built_in.get(name)
        return found if found is not None else self._everyone()[name]  # an unknown name: KeyError, as a dict's

    def __iter__(self) -> Iterator[str]:
        return iter(self._everyone())

    def __len__(self) -> int:
        return len(self._everyone())

    def refresh(self) -> None:
        """Read the entry points again, for dialects installed (or removed) since they were read."""
        importlib.invalidate_caches()  # importlib.metadata's view of sys.path
        with self._lock:
            self._all = None
            self._paths.clear()

    def for_path(self, path: str) -> Protocol | None:
        """The dialect whose API streams from `path` (with any prefix before it), if any: the first that
        serves it."""
        try:
            return self._paths[path]
        except KeyError:
            pass
        found = next((dialect for dialect in self._everyone().values() if dialect.serves_path(path)), None)
        if len(path) <= _REMEMBERED:
            if len(self._paths) >= _PATHS:
                self._paths.clear()
            self._paths[path] = found
        return found

    def for_request(self, request: Request) -> Protocol | None:
        """The dialect whose API `request` is, by its path (`for_path`): None when that dialect does not speak it
        (`Protocol.speaks`: a path two APIs use, Ollama's `/api/chat` and an AI SDK app's chat route, is told
        by the body)."""
        found = self.for_path(request.path)
        return found if found is None or found.speaks(request) else None

    def speaking(self, request: Request) -> Protocol | None:
        """The protocol a request speaks, by its path or what it carries (`Protocol.speaks`): the first that
        claims it, in the registry's order."""
        return next((dialect for dialect in self._everyone().values() if dialect.speaks(request)), None)

    def detect(self, interaction: Interaction) -> Protocol | None:
        """The dialect an interaction speaks: by its path (`for_request`), or else the first that recognises its
        stream."""
        found = self.for_request(interaction.request)
        if found is not None:
            return found
        return next((dialect for dialect in self._everyone().values() if dialect.recognises(interaction)), None)

    def _everyone(self) -> dict[str, Protocol]:
        found = self._all
        if found is not None:
            return found
        with self._lock:
            if self._all is None:
                added = sorted(entry_points(group=self.group), key=lambda entry: entry.name)
                self._all = {**self._built_in, **{entry.name: self._load(entry) for entry in added}}
            return self._all

    def _load(self, entry: EntryPoint) -> Protocol:
        """The dialect an entry point names; a `ConfigError` says which package's entry point is wrong."""
        where = f"the dialect {entry.name!r} of {entry.dist.name if entry.dist is not None else 'a package'}"
        if entry.name in self._built_in:
            raise ConfigError(f"{where} has the name of one sse-tape comes with")
        try:
            cls = entry.load()
        except Exception as exc:  # a broken plug-in is named, whatever it raised
            raise ConfigError(f"{where} cannot be loaded ({entry.value}): {exc!r}") from None
        if not (isinstance(cls, type) and issubclass(cls, Protocol)):
            raise ConfigError(f"{where} names {entry.value}, which is not a class of sse_tape.dialects.Protocol")
        if getattr(cls, "name", None) != entry.name:
            raise ConfigError(f"{where} names {entry.value}, whose name is {getattr(cls, 'name', None)!r}")
        return cls()


DIALECTS = Registry(BUILT_IN, ENTRY_POINTS)
"""Every dialect sse-tape speaks, by name."""


def get(name: str) -> Protocol:
    """The dialect of this name; raises `ConfigError` naming the choices."""
    try:
        return DIALECTS[name]
    except KeyError:
        raise ConfigError(f"unknown dialect {name!r}: choose from {', '.join(DIALECTS)}") from None


def for_path(path: str) -> Protocol | None:
    """The dialect whose API streams from `path` (with any prefix before it), if any (`Registry.for_path`)."""
    return DIALECTS.for_path(path)


def for_request(request: Request) -> Protocol | None:
    """The dialect whose API `request` is, by its path, if that dialect speaks it (`Registry.for_request`)."""
    return DIALECTS.for_request(request)


def speaking(request: Request) -> Protocol | None:
    """The protocol a request speaks, by its path or what it carries (`Registry.speaking`)."""
    return DIALECTS.speaking(request)


def detect(interaction: Interaction) -> Protocol | None:
    """The dialect an interaction speaks: by its path, or else by what its stream looks like (`Registry.detect`)."""
    return DIALECTS.detect(interaction)


def dialect_for(path: str, interaction: Interaction | None = None) -> Generation:
    """The LLM API to answer a request for `path` in: the path's, else the recording's, else openai-chat.

    Errors, faults and misses are all framed by what this returns, so a
    client meets the error shape of the API it called. A protocol without
    generation is answered as an API sse-tape does not know is: in
    openai-chat's words, until replay frames its errors in its own.
    """
    found = DIALECTS.for_path(path) or (DIALECTS.detect(interaction) if interaction is not None else None)
    return found if isinstance(found, Generation) else fallback()


def fallback() -> Generation:
    """What a request no dialect speaks is answered in (a miss, a fault's error): openai-chat's words."""
    return generation(DIALECTS["openai-chat"], "replay")


def generation(dialect: Protocol, needed: str) -> Generation:
    """`dialect` as an LLM API, for what `needed` it (`synthesis`, `translation`); a protocol that does not
    generate text raises `ConfigError` saying so."""
    if isinstance(dialect, Generation):
        return dialect
    raise ConfigError(
        f"{needed} needs an LLM API, and {dialect.name} is an SSE protocol without generation (see Generation)"
    )
