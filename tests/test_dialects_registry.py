"""The dialect registry: a protocol another package installs is found by name, by path and by its stream."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from sse_tape import Chunk, ConfigError, Interaction, Request, Response
from sse_tape.dialects import (
    DIALECTS,
    ENTRY_POINTS,
    Generation,
    Protocol,
    detect,
    dialect_for,
    for_path,
    generation,
    get,
)
from sse_tape.dialects.events import Error
from sse_tape.dialects.registry import BUILT_IN, Registry
from sse_tape.show import lines, view
from sse_tape.translation import translate

# A toy SSE protocol, as a package of its own would ship it: ticks, then `event: done`; an error is `event: oops`.
TOY = '''
from sse_tape.dialects.protocol import Protocol, opening
from sse_tape.sse import encode_event


class Ticks(Protocol):
    """Ticks of a clock, then `event: done`."""

    name = "toy-ticks"
    path = "/toy/ticks"

    def recognises(self, interaction):
        return any(sse.event == "tick" for sse, _ in opening(interaction))

    def is_terminal(self, event):
        return event.event == "done"

    def error_frames(self, error, before=(), sent=()):
        return [encode_event(error.message, event="oops"), encode_event("", event="done")]
'''


def install(root: Path, module: str, source: str, entries: str, name: str = "toy-ticks") -> None:
    """A package installed in `root` as pip leaves one: its module, and its dist-info with its entry points."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINTS}]\n{entries}\n")


@pytest.fixture
def installed(tmp_path: Path) -> Iterator[Path]:
    """A directory on sys.path for packages a test installs; the registry reads the entry points again after."""
    sys.path.insert(0, str(tmp_path))
    try:
        yield tmp_path
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("toy_")]:
            del sys.modules[name]
        DIALECTS.refresh()


@pytest.fixture
def toy(installed: Path) -> Protocol:
    install(installed, "toy_ticks", TOY, "toy-ticks = toy_ticks:Ticks")
    DIALECTS.refresh()
    return DIALECTS["toy-ticks"]


TICKS = b"event: tick\ndata: 1\n\nevent: tick\ndata: 2\n\nevent: done\ndata: \n\n"


def ticks(path: str) -> Interaction:
    return Interaction(
        Request("GET", path), Response(200, (("content-type", "text/event-stream"),), (Chunk(0.0, TICKS),))
    )


def test_a_protocol_installed_through_the_entry_point_group_is_found_by_name_path_and_stream(toy: Protocol) -> None:
    assert toy.name == "toy-ticks"
    assert list(DIALECTS) == [*(cls.name for cls in BUILT_IN), "toy-ticks"]  # after the built-in ones
    assert get("toy-ticks") is toy
    assert for_path("/toy/ticks") is toy
    assert for_path("/a/router/prefix/toy/ticks/") is toy
    assert detect(ticks("/toy/ticks")) is toy
    assert detect(ticks("/moved/by/a/gateway")) is toy  # its stream says so
    assert for_path("/v1/chat/completions") is DIALECTS["openai-chat"]  # the built-in ones are asked first


def test_the_toy_protocol_keeps_what_it_says_of_itself_and_the_defaults_for_the_rest(toy: Protocol) -> None:
    done, tick = (
        Response(chunks=(Chunk(0.0, TICKS),)).events()[-1][1],
        Response(chunks=(Chunk(0.0, TICKS),)).events()[0][1],
    )
    assert toy.is_terminal(done)
    assert not toy.is_terminal(tick)
    assert toy.error_frames(Error("late")) == [b"event: oops\ndata: late\n\n", b"event: done\ndata: \n\n"]
    assert toy.wants_stream({"anything": 1})  # an SSE protocol streams every answer
    assert toy.http_error(503, "busy") == (
        503,
        (("content-type", "application/json"),),
        b'{"error":{"message":"busy","type":null,"code":null}}',
    )
    assert toy.check([tick]) == []
    assert not isinstance(toy, Generation)


def test_what_needs_generation_says_that_the_protocol_has_none(toy: Protocol) -> None:
    with pytest.raises(ConfigError, match=r"^synthesis needs an LLM API, and toy-ticks is an SSE protocol without"):
        generation(toy, "synthesis")
    with pytest.raises(ConfigError, match=r"^translation needs an LLM API, and toy-ticks is"):
        translate(ticks("/toy/ticks"), DIALECTS["openai-chat"])
    with pytest.raises(ConfigError, match=r"^translation needs an LLM API, and toy-ticks is"):
        translate(Interaction(Request("POST", "/v1/chat/completions", body=b"{}"), Response()), toy)
    shown = lines(view(1, ticks("/toy/ticks")))
    assert "   -> 200 text/event-stream, toy-ticks, ended complete" in shown
    assert "   3 events" in shown
    assert "   note: toy-ticks is an SSE protocol without generation: its answer is not put together" in shown


def test_a_protocol_without_generation_is_answered_in_openai_chats_words_until_replay_speaks_it(toy: Protocol) -> None:
    assert dialect_for("/toy/ticks") is DIALECTS["openai-chat"]


def test_the_registry_forgets_a_protocol_once_its_package_is_gone(installed: Path) -> None:
    install(installed, "toy_ticks", TOY, "toy-ticks = toy_ticks:Ticks")
    DIALECTS.refresh()
    assert for_path("/toy/ticks") is not None
    (installed / "toy_ticks-0.1.dist-info" / "entry_points.txt").write_text(f"[{ENTRY_POINTS}]\n")
    DIALECTS.refresh()
    assert for_path("/toy/ticks") is None
    assert "toy-ticks" not in DIALECTS
    with pytest.raises(ConfigError, match=r"^unknown dialect 'toy-ticks': choose from openai-chat, "):
        get("toy-ticks")


@pytest.mark.parametrize(
    ("entries", "source", "message"),
    [
        pytest.param(
            "gemini = toy_ticks:Ticks",
            TOY,
            "the dialect 'gemini' of toy-ticks has the name of one sse-tape comes with",
            id="a-built-in-name",
        ),
        pytest.param(
            "ticks = toy_ticks:Ticks",
            TOY,
            "the dialect 'ticks' of toy-ticks names toy_ticks:Ticks, whose name is 'toy-ticks'",
            id="another-name",
        ),
        pytest.param(
            "toy-ticks = toy_ticks:Ticks",
            "class Ticks:\n    name = 'toy-ticks'\n",
            "the dialect 'toy-ticks' of toy-ticks names toy_ticks:Ticks, which is not a class of "
            "sse_tape.dialects.Protocol",
            id="not-a-protocol",
        ),
        pytest.param(
            "toy-ticks = toy_ticks:Ticks",
            "raise RuntimeError('no clock')\n",
            "the dialect 'toy-ticks' of toy-ticks cannot be loaded (toy_ticks:Ticks): RuntimeError('no clock')",
            id="broken",
        ),
    ],
)
def test_a_wrong_entry_point_is_one_error_naming_its_package(
    installed: Path, entries: str, source: str, message: str
) -> None:
    group = "sse_tape.test_dialects"
    install(installed, "toy_ticks", source, entries)
    (installed / "toy_ticks-0.1.dist-info" / "entry_points.txt").write_text(f"[{group}]\n{entries}\n")
    importlib.invalidate_caches()
    registry = Registry(BUILT_IN, group)
    assert registry["openai-chat"].name == "openai-chat"  # a built-in one needs no entry point read
    with pytest.raises(ConfigError) as raised:
        list(registry)
    assert str(raised.value) == message


def test_each_built_in_dialect_says_which_paths_it_serves() -> None:
    served = {
        "/v1/chat/completions": "openai-chat",
        "/chat/completions": "openai-chat",
        "/v1/completions": "openai-completions",
        "/openai/v1/responses/": "openai-responses",
        "/api/v1/chat": "lmstudio-chat",
        "/v1/messages": "anthropic-messages",
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent": "gemini",
        "/v1/projects/p/locations/l/publishers/google/models/g:generateContent": "gemini",
    }
    for path, name in served.items():
        assert [d.name for d in DIALECTS.values() if d.serves_path(path)] == [name], path
    assert not any(d.serves_path("/v1/responses/resp_1/cancel") for d in DIALECTS.values())
