"""A tool call generated under its tool's schema is valid JSON that follows the schema, whatever the model.

Random-weight models (tests/tiny_model.py, one per seed) sampled wide
(a high temperature, no top-k, top-p or min-p) pick byte tokens, control
characters and pieces of multi-byte characters now and then: what a grammar
must keep out of a JSON string. The schemas are bounded (strings and arrays
have a most length), so every call ends within its tokens.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import product
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_model import write_tiny_gguf

from sse_tape.dialects import DIALECTS
from sse_tape.dialects.events import ToolCallDelta, ToolCallStart
from sse_tape.synth.batch import synthesize
from sse_tape.synth.constraints import unfinished
from sse_tape.synth.engine import Engine
from sse_tape.synth.pipeline import Settings

CHAT = DIALECTS["openai-chat"]
MODELS = 6

names = st.from_regex(r"[a-z][a-z_]{0,5}", fullmatch=True)
leaves = st.one_of(
    st.integers(0, 8).map(lambda n: {"type": "string", "maxLength": n}),
    st.integers(1, 6).map(lambda n: {"type": "string", "minLength": 1, "maxLength": n}),
    st.just({"type": "integer"}),
    st.just({"type": "number"}),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.lists(st.text(max_size=4), min_size=1, max_size=3, unique=True).map(lambda values: {"enum": values}),
)


def objects(values: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    def with_required(properties: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
        required = st.lists(st.sampled_from(sorted(properties)), unique=True)
        return required.map(lambda names: {"type": "object", "properties": properties, "required": names})

    return st.dictionaries(names, values, min_size=1, max_size=3).flatmap(with_required)


schemas = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.builds(lambda items, n: {"type": "array", "items": items, "maxItems": n}, inner, st.integers(0, 3)),
        objects(inner),
    ),
    max_leaves=5,
)
tools = st.lists(st.tuples(names, objects(schemas)), min_size=1, max_size=3, unique_by=lambda tool: tool[0])


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Engine]]:
    folder = tmp_path_factory.mktemp("models")
    loaded = [Engine(write_tiny_gguf(folder / f"{n}.gguf", seed=n), ctx=1024, threads=1) for n in range(MODELS)]
    yield loaded
    for engine in loaded:
        engine.close()


def calls(
    engine: Engine, offered: list[tuple[str, dict[str, Any]]], choice: Any, seeds: list[int]
) -> list[tuple[str, str, str]]:
    """The tool call the model makes for each seed, sampled wide: its name, its arguments as sent, and the finish
    reason."""
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "call a tool"}],
        "tools": [{"type": "function", "function": {"name": name, "parameters": schema}} for name, schema in offered],
        "tool_choice": choice,
        "stream": True,
        "max_tokens": 800,
        "temperature": 4.0,
        "top_k": 0,
        "top_p": 1.0,
        "min_p": 0.0,
    }
    out = []
    for made in synthesize(engine, CHAT, [json.dumps(body | {"seed": seed}).encode() for seed in seeds], Settings()):
        events = list(CHAT.decode(sse for _, sse in made.interaction.response.events()))
        (start,) = [e for e in events if isinstance(e, ToolCallStart)]
        arguments = "".join(e.arguments for e in events if isinstance(e, ToolCallDelta))
        out.append((start.name, arguments, made.stats.finish))
    return out


def check_calls(engines: list[Engine], data: st.DataObject) -> None:
    offered = data.draw(tools, label="tools")
    forced = data.draw(st.sampled_from(["required", *(name for name, _ in offered)]), label="tool_choice")
    choice = forced if forced == "required" else {"type": "function", "function": {"name": forced}}
    engine = engines[data.draw(st.integers(0, MODELS - 1), label="model")]
    ((name, arguments, finish),) = calls(engine, offered, choice, [data.draw(st.integers(0, 2**31), label="seed")])
    assert finish == "tool_calls", arguments
    assert forced in ("required", name)
    assert "\ufffd" not in arguments  # no byte left over from a character the model never finished
    jsonschema.validate(json.loads(arguments), dict(offered)[name])


def test_long_strings_sampled_wide_hold_no_control_character_and_no_broken_character(engines: list[Engine]) -> None:
    # Each model, with these seeds, picks a raw control character or a byte that starts no well-formed character
    # inside the string now and then, where llama-cpp-python's grammar and llama.cpp's UTF-8 reading let them.
    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 48}}, "required": ["s"]}
    for engine in engines:
        for name, arguments, finish in calls(engine, [("f", schema)], "required", list(range(12))):
            assert (name, finish) == ("f", "tool_calls")
            assert "\ufffd" not in arguments
            jsonschema.validate(json.loads(arguments), schema)


def test_constants_that_json_escapes_are_generated_exactly(engines: list[Engine]) -> None:
    # llama-cpp-python writes `"a\\"b"` into the grammar as it is: llama.cpp refuses that grammar, or reads another.
    values = ['a"b', "back\\slash", "\b\t\x01", "é€😀", '\\"']
    schema = {
        "type": "object",
        "properties": {"v": {"enum": values}, "c": {"const": "x\\y"}, 'odd "key"\\': {"type": "boolean"}},
        "required": ["v", "c", 'odd "key"\\'],
    }
    seen = set()
    for engine in engines[:2]:
        for _, arguments, finish in calls(
            engine, [("f", schema)], {"type": "function", "function": {"name": "f"}}, [1, 2, 3]
        ):
            assert finish == "tool_calls", arguments
            parsed = json.loads(arguments)
            jsonschema.validate(parsed, schema)
            seen.add(parsed["v"])
    assert len(seen) > 1


@settings(max_examples=20, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_forced_tool_calls_arguments_are_json_that_follows_its_schema(
    engines: list[Engine], data: st.DataObject
) -> None:
    check_calls(engines, data)


@pytest.mark.slow
@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_forced_tool_calls_arguments_are_json_that_follows_its_schema_at_length(
    engines: list[Engine], data: st.DataObject
) -> None:
    check_calls(engines, data)


# Bytes that may follow a lead byte: the lowest and highest of each range, enough to finish any character.
CONTINUATIONS = [b"", *(bytes(t) for n in (1, 2, 3) for t in product((0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF), repeat=n))]


def decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@given(st.binary(max_size=8))
def test_unfinished_says_what_python_decodes_and_what_is_left_of_a_character(data: bytes) -> None:
    tail = unfinished(data)
    finishable = any(decodes(data + more) for more in CONTINUATIONS)
    assert (tail is not None) == finishable
    if tail is not None:
        assert len(tail) < 4
        assert decodes(data[: len(data) - len(tail)])
        assert tail == b"" or not decodes(tail)


def test_unfinished_refuses_what_llama_cpps_grammar_lets_through() -> None:
    # An overlong NUL, a surrogate, a code point past U+10FFFF, a lone continuation byte: llama.cpp's grammar
    # reads the first as no character at all and the others as characters.
    for data in (b"\xe0\x80", b"\xc0", b"\xed\xa0", b"\xf4\x90", b"\xf5", b"\x80", b"a\xbf"):
        assert unfinished(data) is None, data
    assert unfinished("é".encode()[:1]) == b"\xc3"
    assert unfinished("a€".encode()[:3]) == b"\xe2\x82"
    assert unfinished("😀".encode()) == b""
