"""sse_tape.framing: Gemini's JSON array, Ollama's NDJSON and AWS's event stream beside SSE, each decoded however
it is cut and written as its API writes it, and a recorded stream reframed from one to another with its timing."""

from __future__ import annotations

import json
import pickle
from random import Random

import pytest
from botocore.eventstream import EventStreamBuffer
from hypothesis import given
from hypothesis import strategies as st
from upstream import GEMINI_CHUNKS, gemini_array

from sse_tape import Cassette, Chunk, End, Request, Response, bundled_cassettes
from sse_tape.dialects import DIALECTS
from sse_tape.faults import parse_fault
from sse_tape.faults.stream import Blocks, apply
from sse_tape.framing import EVENT_STREAM, JSON_ARRAY, NDJSON, SSE, Framing, by_content_type, reframe
from sse_tape.framing.event_stream import FrameError, Message, encode_message, read_message
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


# --- NDJSON and AWS's event stream --------------------------------------------------------------------------

OLLAMAS = (
    b'{"model":"llama3.2","message":{"role":"assistant","content":"Hel"},"done":false}\n'
    b'{"model":"llama3.2","message":{"role":"assistant","content":"lo \\n\xc3\xa9"},"done":false}\r\n'
    b"\n"
    b'{"model":"llama3.2","message":{"role":"assistant","content":""},"done":true,"eval_count":2}\n'
)
"""Ollama's `/api/chat` stream: one JSON object a line (a CRLF and a blank line among them)."""


def _bedrock(name: str, payload: object, kind: str = "event") -> bytes:
    """A message as Bedrock writes it: its type, `:content-type`, `:message-type`, in that order."""
    key = ":exception-type" if kind == "exception" else ":event-type"
    headers = {key: name, ":content-type": "application/json", ":message-type": kind}
    return encode_message(headers, json.dumps(payload, separators=(",", ":")).encode())


BEDROCKS = b"".join(
    [
        _bedrock("messageStart", {"role": "assistant", "p": "abcdefghijkl"}),
        _bedrock("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hi \u00e9"}, "p": "ab"}),
        _bedrock("contentBlockStop", {"contentBlockIndex": 0, "p": "abcd"}),
        _bedrock("messageStop", {"stopReason": "end_turn", "p": "a"}),
        _bedrock("throttlingException", {"message": "Too many requests"}, kind="exception"),
    ]
)
"""A Bedrock `ConverseStream` answer cut off by an exception, as AWS frames it."""

STREAMS = {"ndjson": (NDJSON, OLLAMAS), "aws-event-stream": (EVENT_STREAM, BEDROCKS)}


def _messages(framing: Framing, body: bytes) -> list[tuple[str, str]]:
    return [(b.event.event, b.event.data) for b in framing.blocks(body) if b.event is not None]


def _fed(framing: Framing, pieces: list[bytes]) -> list[tuple[float, bytes, object]]:
    blocks = Blocks(Plan(200, [], [], framing=framing))
    return blocks.feed([(float(i), piece) for i, piece in enumerate(pieces)]) + blocks.rest()


@pytest.mark.parametrize("name", STREAMS)
def test_every_split_in_two_gives_the_same_messages_whole(name: str) -> None:
    framing, body = STREAMS[name]
    expected = _messages(framing, body)
    for cut in range(len(body) + 1):
        got = _fed(framing, [body[:cut], body[cut:]])
        assert b"".join(data for _, data, _ in got) == body, cut
        assert [(e.event, e.data) for _, _, e in got if e is not None] == expected, cut


@pytest.mark.parametrize("name", STREAMS)
@given(st.lists(st.integers(min_value=0, max_value=600), max_size=12))
def test_any_split_gives_the_same_messages_whole(name: str, cuts: list[int]) -> None:
    framing, body = STREAMS[name]
    at = sorted({min(c, len(body)) for c in cuts})
    pieces = [body[a:b] for a, b in zip([0, *at], [*at, len(body)], strict=True)]
    got = _fed(framing, pieces)
    assert [(e.event, e.data) for _, _, e in got if e is not None] == _messages(framing, body)


def test_ndjson_is_one_message_a_line_and_a_cut_line_is_none() -> None:
    messages = _messages(NDJSON, OLLAMAS)
    assert [json.loads(data)["done"] for _, data in messages] == [False, False, True]
    assert json.loads(messages[1][1])["message"]["content"] == "lo \n\xe9"
    assert [e for e, _ in messages] == ["message"] * 3
    assert NDJSON.problems(OLLAMAS) == []
    assert NDJSON.problems(OLLAMAS[:-5]) == ["the stream is cut inside a line: 3 whole lines, then no newline"]
    assert NDJSON.blocks(OLLAMAS[:-5])[-1].event is None
    encoder = NDJSON.encoder()
    assert encoder.frame(ServerSentEvent(data='{"a": 1,\n "b": "\xe9"}')) == '{"a":1,"b":"\xe9"}\n'.encode()
    assert encoder.close() == b""
    error = b'data: {"error":"model runner stopped"}\n\n'
    assert NDJSON.ending(error, sent=2) == b'{"error":"model runner stopped"}\n'
    assert NDJSON.heartbeat(b": ping\n\n") == b""  # a blank line is no JSON: nothing keeps it open


def test_the_empty_message_is_aws_s_test_vector() -> None:
    empty = bytes.fromhex("000000100000000005c248eb7d98c8ff")  # AWS's and botocore's: 16 bytes, no headers
    assert encode_message({}, b"") == empty
    assert read_message(empty) == (Message({}, b""), 16)


def test_botocore_reads_the_messages_we_frame_and_we_read_them_back() -> None:
    buffer = EventStreamBuffer()
    buffer.add_data(BEDROCKS)
    theirs = [(m.headers, m.payload) for m in buffer]
    ours = []
    at = 0
    while (found := read_message(BEDROCKS, at)) is not None:
        ours.append((dict(found[0].headers), found[0].payload))
        at = found[1]
    assert ours == theirs
    assert [h[":message-type"] for h, _ in theirs] == ["event"] * 4 + ["exception"]
    messages = _messages(EVENT_STREAM, BEDROCKS)
    assert [e for e, _ in messages] == [
        "messageStart", "contentBlockDelta", "contentBlockStop", "messageStop", "throttlingException"
    ]  # fmt: skip
    assert json.loads(messages[1][1])["delta"]["text"] == "Hi \xe9"
    encoder = EVENT_STREAM.encoder()  # framed again as AWS frames them, byte for byte
    assert b"".join(encoder.frame(ServerSentEvent(event=e, data=d)) for e, d in messages) == BEDROCKS


def test_a_message_with_a_wrong_crc_is_an_error_not_a_message() -> None:
    first = read_message(BEDROCKS)
    assert first is not None
    end = first[1]
    for at, what in [(end - 1, "the message's CRC"), (20, "the message's CRC"), (9, "the prelude's CRC")]:
        broken = bytearray(BEDROCKS)
        broken[at] ^= 0x01
        with pytest.raises(FrameError, match=what):
            read_message(bytes(broken))
        assert EVENT_STREAM.problems(bytes(broken))[0].startswith(f"message 1 (at byte 0) cannot be read: {what}")
        blocks = EVENT_STREAM.blocks(bytes(broken))
        assert blocks[0].event is None
        if what == "the message's CRC":  # its length is still known: the messages after it are read
            assert [b.event.event for b in blocks[1:] if b.event] == [
                e for e, _ in _messages(EVENT_STREAM, BEDROCKS)[1:]
            ]
    assert EVENT_STREAM.problems(BEDROCKS[:-3]) == ["the stream is cut inside message 5, after 4 whole"]
    assert EVENT_STREAM.problems(BEDROCKS) == []


def test_each_framing_is_known_by_its_content_type() -> None:
    assert by_content_type("application/x-ndjson") is NDJSON
    assert by_content_type("application/vnd.amazon.eventstream") is EVENT_STREAM
    assert by_content_type("text/event-stream; charset=utf-8") is SSE
    assert by_content_type("text/plain") is None


def test_a_recorded_sse_stream_is_reframed_as_ndjson_and_as_an_event_stream_and_back() -> None:
    sse = Response(
        200,
        (("content-type", "text/event-stream"),),
        (Chunk(0.1, b'event: messageStart\ndata: {"role":"assistant"}\n\n'), Chunk(0.4, b'event: messageStop\ndata: {"stopReason":"end_turn"}\n\n')),
    )  # fmt: skip
    for framing in (NDJSON, EVENT_STREAM):
        framed = reframe(sse, SSE, framing)
        assert framed.header("content-type") == framing.content_type
        assert [c.t for c in framed.chunks] == [0.1, 0.4]
        back = reframe(framed, framing, SSE)
        assert [json.loads(e.data) for _, e in back.events()] == [{"role": "assistant"}, {"stopReason": "end_turn"}]
    assert [e.event for _, e in reframe(reframe(sse, SSE, EVENT_STREAM), EVENT_STREAM, SSE).events()] == [
        "messageStart",
        "messageStop",
    ]


@pytest.mark.parametrize("framing", [NDJSON, EVENT_STREAM], ids=lambda f: f.name)
def test_a_stall_in_a_framing_with_no_heartbeat_is_silent_and_says_so(framing: Framing) -> None:
    body = OLLAMAS if framing is NDJSON else BEDROCKS
    plan = Plan(200, [("content-type", framing.content_type)], [(0.0, body)], framing=framing)
    notes = apply(
        [parse_fault("stall:at=1,for=2s,heartbeat=500ms")], plan, dialect=DIALECTS["openai-chat"], rng=Random(0)
    )
    assert plan.beats == []
    assert b"".join(data for _, data in plan.writes) == body
    assert notes[0][1].endswith(f"no heartbeat: {framing.name} has none")


def test_an_integer_header_too_big_for_four_bytes_is_written_in_eight() -> None:
    big = encode_message({":date": 2**40, "n": -5}, b"{}")
    found = read_message(big)
    assert found is not None
    assert found[0].headers == {":date": 2**40, "n": -5}


def test_line_ends_are_rewritten_in_a_framing_of_lines_and_never_inside_binary_messages() -> None:
    ndjson = Plan(200, [("content-type", NDJSON.content_type)], [(0.0, OLLAMAS)], framing=NDJSON)
    apply([parse_fault("eol:crlf")], ndjson, dialect=DIALECTS["openai-chat"], rng=Random(0))
    assert ndjson.body == OLLAMAS.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    binary = Plan(200, [("content-type", EVENT_STREAM.content_type)], [(0.0, BEDROCKS)], framing=EVENT_STREAM)
    notes = apply([parse_fault("eol:crlf")], binary, dialect=DIALECTS["openai-chat"], rng=Random(0))
    assert binary.body == BEDROCKS  # its CRCs still hold
    assert notes[0][1] == "aws-event-stream has no line ends: left alone"


def test_dropping_the_done_of_a_stream_that_has_none_says_so() -> None:
    plan = Plan(200, [("content-type", NDJSON.content_type)], [(0.0, OLLAMAS)], framing=NDJSON)
    notes = apply([parse_fault("drop:at=done")], plan, dialect=DIALECTS["ollama-chat"], rng=Random(0))
    assert plan.body == OLLAMAS
    assert notes[0][1] == "no [DONE] in ollama-chat's stream: left alone"


@pytest.mark.parametrize("framing", [SSE, JSON_ARRAY, NDJSON, EVENT_STREAM])
def test_a_framing_read_back_from_a_pickle_is_the_one_instance(framing: Framing) -> None:
    # What a shared replay state keeps (an MCP session's streams) is pickled: the plan read back frames as before.
    plan = Plan(200, [("content-type", framing.content_type)], [(0.0, b"x")], framing=framing)
    assert pickle.loads(pickle.dumps(plan)).framing is framing
