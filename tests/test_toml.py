from __future__ import annotations

import tomllib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sse_tape.cassette import toml

# Text of every kind `_string` tells apart: plain, quotes, backslashes, line breaks (LF, CRLF, a lone CR),
# control characters, `'''`, a quote at the end, non-ASCII.
AWKWARD = st.text(st.sampled_from(["a", "é", "東", '"', "'", "\\", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "{", "}"]))
TEXT = AWKWARD | st.text(max_size=40) | st.sampled_from(["data: {}\n\n", "data: '''\n\n", "x'\n", "''\n", "'\n"])
NUMBER = st.floats(allow_nan=False) | st.integers(-(2**63), 2**63 - 1)
KEYS = st.sampled_from(["t", "text", "base64", "a key", "{x}"])


def typed(value: Any) -> Any:
    """A document with each value's type beside it and each table's keys in order."""
    if isinstance(value, dict):
        return [(k, typed(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [typed(v) for v in value]
    return type(value).__name__, repr(value)


def dumps(doc: dict[str, Any]) -> str:
    return toml.encode(doc).decode()


def one_at_a_time(doc: dict[str, Any]) -> str:
    """What `encode` writes with no array of tables written a column at a time."""
    return toml.encode(doc, by_column=False).decode()


@given(
    st.lists(st.fixed_dictionaries({"t": NUMBER, "text": TEXT}), min_size=1, max_size=8)
    | st.lists(st.fixed_dictionaries({"t": NUMBER, "base64": st.text(max_size=10)}), min_size=1, max_size=3)
)
def test_chunk_tables_are_written_a_column_at_a_time_as_one_at_a_time(chunks: list[dict[str, Any]]) -> None:
    doc = {"format_version": 1, "interactions": [{"response": {"status": 200, "chunks": chunks}}]}
    text = dumps(doc)
    assert text == one_at_a_time(doc)
    assert typed(tomllib.loads(text)) == typed(doc)
    if (columns := toml.TextTables.of(chunks)) is not None:  # as a cassette's chunks come to the writer
        assert dumps({**doc, "interactions": [{"response": {"status": 200, "chunks": columns}}]}) == text


@given(
    st.lists(
        st.dictionaries(KEYS, TEXT | NUMBER | st.booleans() | st.lists(TEXT, max_size=2), max_size=3),
        min_size=1,
        max_size=5,
    )
)
def test_any_array_of_tables_is_written_as_one_at_a_time(tables: list[dict[str, Any]]) -> None:
    doc = {"tables": tables, "nested": {"tables": tables}}
    text = dumps(doc)
    assert text == one_at_a_time(doc)
    assert typed(tomllib.loads(text)) == typed(doc)


@pytest.mark.parametrize("line_end", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_stream_chunks_are_written_as_multi_line_literals_or_escaped_where_they_must_be(line_end: str) -> None:
    chunks = [{"t": 0.5, "text": f'data: {{"a": "b"}}{line_end}{line_end}'}, {"t": 1.0, "text": "data: [DONE]\n\n"}]
    text = dumps({"chunks": chunks})
    assert text == one_at_a_time({"chunks": chunks})
    if line_end == "\n":  # kept as sent
        assert "text = '''\ndata: {\"a\": \"b\"}\n\n'''" in text
    else:  # a CR, which TOML readers may drop from a multi-line string, is escaped
        assert "\r" not in text
        assert "\\r" in text
    assert tomllib.loads(text) == {"chunks": chunks}


# A chunk unlike a stream's, by what makes `_string` write it otherwise; "none": one like the others.
ODD = {
    "none": "data: [DONE]\n\n",
    "ends-with-quote": "data: x\n'",
    "triple-quote": "data: '''\n",
    "two-quotes": "data: ''\n",
    "starts-with-quote": "'data: x\n",
    "nul": "data: \x00\n",
    "del": "data: \x7f\n",
    "tab": "data: \t\n",
    "no-line-break": "data: x",
}


@pytest.mark.parametrize("odd", ODD.values(), ids=ODD.keys())
def test_one_odd_chunk_among_stream_chunks_is_written_as_alone(odd: str) -> None:
    chunks = [{"t": n / 10, "text": f'data: {{"n": {n}}}\n\n'} for n in range(3)]
    for at in range(4):
        doc = {"chunks": [*chunks[:at], {"t": 9.5, "text": odd}, *chunks[at:]]}
        text = dumps(doc)
        assert text == one_at_a_time(doc)
        assert dumps({"chunks": toml.TextTables.of(doc["chunks"])}) == text
        assert typed(tomllib.loads(text)) == typed(doc)


# --- reading -------------------------------------------------------------------------------------------------


def fast(text: str) -> Any:
    """What `loads` reads in `text`, as tomllib gives it; None where it leaves the file to tomllib whole."""
    doc = toml.loads(text.encode(), tomllib.loads)
    return None if doc is None else toml.expand(doc)


def whole(text: str) -> Any:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None


# A stream's chunk as a server sends it: an event's lines and the blank line after them.
STREAM_TEXT = (
    st.text(st.sampled_from(["a", "é", "東", '"', "'", "\\", "\t", "{", "}", " ", "\n"]))
    .map(lambda text: f"data: {text}\n\n")
    .filter(lambda text: "'''" not in text)
)


def cassette(streams: list[list[dict[str, Any]]]) -> dict[str, Any]:
    response = {"status": 200, "end": "complete", "headers": {"content-type": "text/event-stream"}}
    return {
        "format_version": 1,
        "interactions": [
            {"request": {"method": "POST", "body": "{}"}, "response": {**response, "chunks": chunks}}
            for chunks in streams
        ],
    }


@given(
    st.lists(
        st.lists(st.builds(lambda t, text: {"t": t, "text": text}, st.floats(0, 1e6), STREAM_TEXT), min_size=1),
        min_size=1,
    )
)
def test_a_streams_chunks_are_found_apart_and_read_as_tomllib_reads_them(streams: list[list[dict[str, Any]]]) -> None:
    text = dumps(cassette(streams))
    read = toml.loads(text.encode(), tomllib.loads)
    assert read is not None
    assert [type(chunks) for _, chunks in toml.interaction_chunks(read)] == [toml.TextTables] * len(streams)
    assert typed(toml.expand(read)) == typed(tomllib.loads(text))


@given(
    st.lists(
        st.lists(st.builds(lambda t, text: {"t": t, "text": text}, NUMBER, TEXT), max_size=5), min_size=1, max_size=4
    )
)
def test_any_chunks_are_read_as_tomllib_reads_them(streams: list[list[dict[str, Any]]]) -> None:
    text = dumps(cassette(streams))
    assert typed(fast(text) or tomllib.loads(text)) == typed(tomllib.loads(text))


ROWS = "[[interactions.response.chunks]]\nt = 0.5\ntext = '''\ndata: x\n\n'''\n"
CONTROL_ROWS = ROWS.replace("data: x", "data: \x01")
CRLF_ROWS = ROWS.replace("data: x\n", "data: x\r\n")


@pytest.mark.parametrize(
    "text",
    [
        f"format_version = 1\n[[interactions]]\n[interactions.response]\nstatus = 200\n\n{ROWS}\n{ROWS}",
        f"[[interactions]]\n[interactions.response]\n\n{ROWS}note = 'a key after a row'\n",
        f"[[interactions]]\n[interactions.response]\n\n{ROWS}[interactions.response.chunks.sub]\nx = 1\n",
        f"[[interactions]]\n[interactions.response]\n\n{ROWS}# a comment\n{ROWS}\n{ROWS}",
        f"[[interactions]]\n[interactions.response]\n\n{ROWS}\n{ROWS.replace('0.5', '1')}\n{ROWS}",  # an integer
        f"[[interactions]]\n[interactions.response]\n\n{ROWS}\n{ROWS.replace('0.5', 'nan')}",
        f'[[interactions]]\n[interactions.response]\nbody = """\n{ROWS}"""\n',  # inside a string
        f'[[interactions]]\n[interactions.response]\nbody = """\n{ROWS}\n{ROWS}\n',  # a string never closed
        f"[interactions]\n[interactions.response]\n\n{ROWS}",  # a table, not an array of them
        f"[[interactions]]\n[interactions.response]\nchunks = []\n\n{ROWS}",  # an array already
        f"[[interactions]]\n[interactions.response]\n\n{ROWS}\n{ROWS}t = 2.0\n",  # a key twice
        f"x = 1\n{ROWS}\n{ROWS}",  # no interactions
        f"[[interactions]]\n[interactions.response]\n\n{ROWS}\n{ROWS}".replace("\n", "\r\n"),
        f"[[interactions]]\n[interactions.response]\n\n{ROWS}\n{ROWS}".rstrip("\n"),
        f"[[interactions]]\n[interactions.response]\n\n{ROWS}\n[[interactions]]\n{ROWS}",
        f"[[interactions]]\n[interactions.response]\n\n{ROWS}\n{CONTROL_ROWS}",  # TOML refuses it
        f"[[interactions]]\n[interactions.response]\n\n{ROWS}\n{CRLF_ROWS}",  # read with LF
    ],
    ids=[
        "two-rows",
        "key-after",
        "sub-table",
        "comment",
        "integer-time",
        "nan-time",
        "in-a-string",
        "string-never-closed",
        "not-an-array",
        "inline-array",
        "key-twice",
        "no-interactions",
        "crlf",
        "no-last-line-break",
        "two-interactions",
        "control-character",
        "crlf-in-a-chunk",
    ],
)
def test_a_file_unlike_what_sse_tape_writes_is_read_as_tomllib_reads_it(text: str) -> None:
    read = fast(text)
    assert read is None or typed(read) == typed(whole(text))
    if whole(text) is None:
        assert read is None  # a damaged file's error is tomllib's, about the whole file


@given(st.data())
def test_a_damaged_cassette_is_read_as_tomllib_reads_it_or_left_to_it(data: st.DataObject) -> None:
    text = dumps(
        cassette([[{"t": 0.25, "text": 'data: {"a": "\'b\'"}\n\n'}, {"t": 0.5, "text": "data: [DONE]\n\n"}]] * 2)
    )
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 3))
        added = data.draw(
            st.text(st.sampled_from(["'", '"', "\n", "\r", "[", "]", "=", "#", ".", " ", "x", "1"]), max_size=3)
        )
        text = text[:at] + added + text[at + cut :]
    read = fast(text)
    assert read is None or typed(read) == typed(whole(text))
    if whole(text) is None:
        assert read is None


# --- the heads of tables, read apart from tomllib ------------------------------------------------------------

# The values `encode` writes on a line of their own, or as a multi-line string: what a cassette's heads hold.
HEAD_VALUE = (
    TEXT
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(-(10**17), 10**17)
    | st.booleans()
    | st.lists(st.text(st.characters(blacklist_categories=["Cc", "Cs"]), max_size=5), max_size=3)
)
HEAD_KEYS = st.sampled_from(["method", "path", "content-type", "a key", "x.y", "é", ""])


@given(
    st.recursive(
        st.dictionaries(HEAD_KEYS, HEAD_VALUE, max_size=4),
        lambda tables: st.dictionaries(HEAD_KEYS, tables | st.lists(tables, min_size=1, max_size=3), max_size=3),
        max_leaves=12,
    )
)
def test_the_heads_sse_tape_writes_are_read_apart_as_tomllib_reads_them(doc: dict[str, Any]) -> None:
    text = dumps({"interactions": [{"request": doc, "response": {"status": 200, **doc}}]})
    read = toml.read_heads(text)
    assert read is not None
    assert typed(read) == typed(tomllib.loads(text))


# Lines of every kind `read_heads` reads, and some it leaves to tomllib, over keys that meet: tables made twice,
# keys given twice, a table where a value is, an array of tables where a table or an array of strings is.
HEAD_LINE = st.sampled_from(
    [
        "",
        "[a]",
        "[b]",
        "[a.b]",
        "[a.b.c]",
        "[[a]]",
        "[[b]]",
        "[[a.b]]",
        "[[a.c]]",
        "a = 1",
        "b = -0",
        "c = 0.5",
        "a = 1e-05",
        "b = true",
        'c = "x"',
        "a = 'x'",
        '"b" = "é\\u00e9\\n\\"\\\\"',
        '"" = "\\U0001F600"',
        'c = "\\uD800"',  # a surrogate, which TOML refuses
        'a = "\\x41"',  # an escape TOML 1.0 does not have
        "b = '''\nx\n'''",
        'c = """\nx\\\n  y"""',  # a line-ending backslash
        'a = """\n"x"\\r"""',
        "b = []",
        "c = ['x', \"y\"]",
        "a = 01",
        "b = 1_000",
        "c=1",
        "# a comment",
        "a = 1 # a comment",
        "[ a ]",
        "a.b = 1",
        "b = {x = 1}",
    ]
)


@given(st.lists(HEAD_LINE, max_size=12))
def test_any_heads_are_read_apart_as_tomllib_reads_them_or_left_to_it(lines: list[str]) -> None:
    text = "".join(f"{line}\n" for line in lines)
    read = toml.read_heads(text)
    assert read is None or typed(read) == typed(whole(text))
    if whole(text) is None:
        assert read is None
