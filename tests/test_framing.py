"""sse_tape.framing: Gemini's JSON array beside SSE, decoded however it is cut, written as Google writes it, and a
recorded stream reframed from one to the other with its timing."""

from __future__ import annotations

import json

import pytest
from upstream import GEMINI_CHUNKS, gemini_array

from sse_tape import Cassette, Chunk, End, Request, Response, bundled_cassettes
from sse_tape.faults.stream import Blocks
from sse_tape.framing import JSON_ARRAY, SSE, reframe
from sse_tape.pacing import PaceMode, Pacing
from sse_tape.plan import Plan
from sse_tape.shape import Recorded, reshape
from sse_tape.sse import ServerSentEvent, SSEDecoder

GOOGLES = b"".join(gemini_array(GEMINI_CHUNKS))
"""Three chunks as Google's server writes the array: `[{…}\\n`, `,\\r\\n{…}\\n`, ..., `]`."""


def test_the_array_is_written_as_google_writes_it() -> None:
    encoder = JSON_ARRAY.encoder()
    assert encoder.frame(ServerSentEvent(data='{"a":1}')) == b'[{\n  "a": 1\n}'
    assert encoder.frame(ServerSentEvent(data='{"b":["\xe9"]}')) == '\n,\r\n{\n  "b": [\n    "\xe9"\n  ]\n}'.encode()
    assert encoder.close() == b"\n]"
    assert JSON_ARRAY.encoder().close() == b"[]"
    assert JSON_ARRAY.encoder(sent=2).frame(ServerSentEvent(data="{}")) == b"\n,\r\n{}"


ARRAYS = {
    "google's writes": GOOGLES,
    "compact, brackets and quotes in strings": b'[{"a":"]},\\"{["},{"b":[1,{"c":"\\\\"}]},7,"x",null]',
    "a byte order mark and spaces": b'\xef\xbb\xbf \r\n[ {"a":1} ,\n{"b":2}\t]\n',
    "empty": b"[]",
}


@pytest.mark.parametrize("body", ARRAYS.values(), ids=ARRAYS.keys())
def test_every_split_of_an_array_gives_its_elements_whole(body: bytes) -> None:
    expected = json.loads(body.decode("utf-8-sig"))
    assert [json.loads(b.event.data) for b in JSON_ARRAY.blocks(body) if b.event] == expected
    for cut in range(len(body) + 1):
        blocks = Blocks(Plan(200, [], [], framing=JSON_ARRAY))
        got = blocks.feed([(0.0, body[:cut]), (1.0, body[cut:])]) + blocks.rest()
        assert b"".join(data for _, data, _ in got) == body, cut
        assert [json.loads(e.data) for _, _, e in got if e is not None] == expected, cut


def test_a_block_runs_to_its_element_end_so_a_cut_after_it_leaves_the_array_open() -> None:
    blocks = JSON_ARRAY.blocks(GOOGLES)
    assert [GOOGLES[b.start : b.end][:4] for b in blocks] == [b"[{\n ", b"\n,\r\n", b"\n,\r\n", b"\n]"]
    assert [b.event is not None for b in blocks] == [True, True, True, False]
    assert JSON_ARRAY.closes(GOOGLES[blocks[-1].start :])
    assert JSON_ARRAY.problems(GOOGLES) == []
    assert JSON_ARRAY.problems(GOOGLES[: blocks[1].end]) == ["the array is cut short after 2 elements: no closing ]"]
    assert JSON_ARRAY.problems(GOOGLES[: blocks[1].end - 3]) == [
        "the array is cut short after 1 elements: no closing ]"
    ]
    assert JSON_ARRAY.problems(b'{"error": {"code": 500}}') == ["the answer is not a JSON array"]
    assert JSON_ARRAY.problems(b"[]\n,{}") == ["bytes after the array's end: b',{}'"]


def test_an_element_comes_again_or_first_framed_as_the_array_needs() -> None:
    first, second, *_ = JSON_ARRAY.blocks(GOOGLES)
    block, other = GOOGLES[first.start : first.end], GOOGLES[second.start : second.end]
    assert JSON_ARRAY.opens(block)
    assert not JSON_ARRAY.opens(other)
    assert json.loads(block + JSON_ARRAY.again(block) + b"]") == [GEMINI_CHUNKS[0]] * 2
    assert json.loads(JSON_ARRAY.first(other) + b"]") == [GEMINI_CHUNKS[1]]
    error = b'data: {"error":{"code":503,"message":"overloaded","status":"UNAVAILABLE"}}\r\n\r\n'
    ended = block + JSON_ARRAY.ending(error, sent=1)
    assert json.loads(ended)[-1] == {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}
    assert SSE.ending(error, sent=1) == error


def test_a_recorded_stream_is_reframed_message_by_message_at_its_times() -> None:
    events = [b'data: {"n":1}\r\n\r\n', b": ping\n\n", b'data: {"n":2}\n', b"\n"]
    sse = Response(200, (("content-type", "text/event-stream"), ("x-up", "1")), (Chunk(0.1, events[0]), Chunk(0.2, events[1]), Chunk(0.3, events[2]), Chunk(0.5, events[3])), duration=0.7)  # fmt: skip
    array = reframe(sse, SSE, JSON_ARRAY)
    assert [(c.t, c.data) for c in array.chunks] == [
        (0.1, b'[{\n  "n": 1\n}'),
        (0.5, b'\n,\r\n{\n  "n": 2\n}'),
        (0.7, b"\n]"),
    ]
    assert array.headers == (("content-type", "application/json; charset=UTF-8"), ("x-up", "1"))
    back = reframe(array, JSON_ARRAY, SSE)
    assert [(c.t, c.data) for c in back.chunks] == [(0.1, b'data: {"n":1}\n\n'), (0.5, b'data: {"n":2}\n\n')]
    cut = reframe(Response(200, (), sse.chunks[:1], End.UPSTREAM_RESET), SSE, JSON_ARRAY)
    assert cut.body == b'[{\n  "n": 1\n}'  # a cut stream stays cut: the array is never closed


def test_a_bundled_gemini_stream_asked_for_without_alt_sse_is_the_array_at_the_recorded_times() -> None:
    interaction = next(iter(Cassette.load(next(p for p in bundled_cassettes() if p.name == "gemini.toml"))))
    request = Request("POST", interaction.request.path, "", interaction.request.headers, interaction.request.body)
    response, converted = reshape(interaction, Recorded.of(interaction).asked(request))
    recorded = [(t, json.loads(e.data)) for t, e in interaction.response.events()]
    assert converted == "as json-array"
    assert response.header("content-type") == "application/json; charset=UTF-8"
    assert [c.t for c in response.chunks] == [t for t, _ in recorded] + [interaction.response.end_time]
    assert json.loads(response.body) == [obj for _, obj in recorded]
    assert Recorded.of(interaction).asked(interaction.request).framing is None  # alt=sse: as recorded
    assert len(SSEDecoder().feed(reframe(response, JSON_ARRAY, SSE).body)) == len(recorded)


def test_a_rate_of_events_counts_an_arrays_elements() -> None:
    writes = gemini_array(GEMINI_CHUNKS)  # three elements, then the closing bracket
    array = Response(200, (("content-type", "application/json; charset=UTF-8"),), tuple(Chunk(0.0, w) for w in writes))
    offsets, _ = Pacing(PaceMode.TPS, 10.0).schedule(array)
    assert offsets == [0.0, 0.1, 0.2, 0.3]  # each write after the elements before it, ten a second
