"""The SSE codec against the WHATWG HTML standard, section 9.2 "Server-sent events".

Tests named `test_spec_*` replay the standard's own examples.
"""

from __future__ import annotations

import itertools

import pytest
from allocations import peak_allocated
from hypothesis import given
from hypothesis import strategies as st

from sse_tape import ServerSentEvent, SSEDecoder, StreamError, encode_comment, encode_event


def decode(data: bytes) -> list[ServerSentEvent]:
    return SSEDecoder().feed(data)


def decode_bytewise(data: bytes) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    return [event for i in range(len(data)) for event in decoder.feed(data[i : i + 1])]


EOLS = pytest.mark.parametrize("eol", ["\n", "\r", "\r\n"], ids=["lf", "cr", "crlf"])


@EOLS
def test_spec_stock_quotes_data_lines_join_with_lf(eol: str) -> None:
    stream = eol.join(["data: YHOO", "data: +2", "data: 10", "", ""]).encode()
    assert decode(stream) == [ServerSentEvent(data="YHOO\n+2\n10")]


@EOLS
def test_spec_comment_ids_and_one_leading_space(eol: str) -> None:
    stream = eol.join(
        [
            ": test stream",
            "",
            "data: first event",
            "id: 1",
            "",
            "data:second event",
            "id",
            "",
            "data:  third event",
            "",
            "",
        ]
    ).encode()
    assert decode(stream) == [
        ServerSentEvent(data="first event", id="1"),
        ServerSentEvent(data="second event", id=""),
        ServerSentEvent(data=" third event", id=""),
    ]


@EOLS
def test_spec_empty_data_fields_and_unterminated_last_block(eol: str) -> None:
    stream = eol.join(["data", "", "data", "data", "", "data:"]).encode()
    assert decode(stream) == [ServerSentEvent(data=""), ServerSentEvent(data="\n")]


@EOLS
def test_spec_space_after_colon_is_optional(eol: str) -> None:
    stream = eol.join(["data:test", "", "data: test", "", ""]).encode()
    assert decode(stream) == [ServerSentEvent(data="test"), ServerSentEvent(data="test")]


def test_spec_named_events_add_remove() -> None:
    stream = b"event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\nevent: add\ndata: 113411\n\n"
    assert [(e.event, e.data) for e in decode(stream)] == [("add", "73857293"), ("remove", "2153"), ("add", "113411")]


def test_crlf_split_across_feeds_is_one_line_end() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    # Were the LF taken as a second line end, "a" would be dispatched alone here.
    assert decoder.feed(b"\ndata: b\r\n\r\n") == [ServerSentEvent(data="a\nb")]


def test_lone_cr_then_data_is_two_lines() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"data: b\r\r") == [ServerSentEvent(data="a\nb")]


@pytest.mark.parametrize(
    "stream",
    [
        b"event: add\r\ndata: 1\r\n\r\nid: 9\rdata: x\r\rdata: \xc3\xa9t\xc3\xa9\n\n",
        b"\xef\xbb\xbfdata: bom\n\nretry: 300\ndata: r\n\n",
        b": c\n\ndata: a\ndata: b\n\n",
    ],
    ids=["mixed-eol", "bom-and-retry", "comment"],
)
def test_feeding_byte_by_byte_gives_the_same_events(stream: bytes) -> None:
    assert decode_bytewise(stream) == decode(stream)
    assert decode(stream)


def test_one_leading_bom_is_stripped() -> None:
    assert decode(b"\xef\xbb\xbfdata: x\n\n") == [ServerSentEvent(data="x")]


def test_bom_split_across_feeds_is_stripped() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"\xef") == []
    assert decoder.feed(b"\xbb") == []
    assert decoder.feed(b"\xbfdata: x\n\n") == [ServerSentEvent(data="x")]


def test_only_the_first_bom_is_stripped() -> None:
    # The second BOM becomes part of the field name "\ufeffdata", an unknown field.
    assert decode(b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n") == []


def test_bom_later_in_the_stream_is_data() -> None:
    assert decode(b"data: a\n\n\xef\xbb\xbfdata: b\n\n") == [ServerSentEvent(data="a")]


def test_last_event_id_persists_across_events() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b"id: 7\ndata: a\n\ndata: b\n\n")
    assert [e.id for e in events] == ["7", "7"]
    assert decoder.last_event_id == "7"


# The web platform tests' eventsource folder, with the reconnections an EventSource makes: each connection is
# a new decoder that starts from the last one's `last_event_id`.


def reconnect(previous: SSEDecoder) -> SSEDecoder:
    previous.end()
    return SSEDecoder(last_event_id=previous.last_event_id)


def test_wpt_format_field_id() -> None:
    # resources/last-event-id: without Last-Event-ID, an id, a retry and "hello"; with it, the id back as data.
    first = SSEDecoder()
    assert first.feed("id: …\nretry: 200\ndata: hello\n\n".encode()) == [
        ServerSentEvent(data="hello", id="…", retry=200)
    ]
    second = reconnect(first)
    assert second.last_event_id == "…"  # what the reconnection sends
    assert second.feed(f"data: {second.last_event_id}\n\n".encode()) == [ServerSentEvent(data="…", id="…")]


def test_wpt_format_field_id_2() -> None:
    # As format-field-id, reconnecting twice: the id persists through a connection that sets none.
    decoder = SSEDecoder()
    assert [e.id for e in decoder.feed("id: …\nretry: 200\ndata: hello\n\n".encode())] == ["…"]
    for _ in range(2):
        decoder = reconnect(decoder)
        assert decoder.feed(f"data: {decoder.last_event_id}\n\n".encode()) == [ServerSentEvent(data="…", id="…")]


def test_wpt_format_data_before_final_empty_line() -> None:
    # The id of a block that never ended is not the id a reconnection sends: the second event is "test1" again,
    # with no id.
    message = b"retry:1000\ndata:test1\n\nid:test\ndata:test2"
    first = SSEDecoder()
    assert first.feed(message) == [ServerSentEvent(data="test1", retry=1000)]
    assert first.end() is True  # the unfinished block was dropped
    assert first.last_event_id == ""
    assert first.retry == 1000
    second = reconnect(first)
    assert second.feed(message) == [ServerSentEvent(data="test1", id="", retry=1000)]


def test_an_id_only_block_sets_the_reconnection_id_without_an_event() -> None:
    decoder = SSEDecoder(last_event_id="3")
    assert decoder.feed(b"data: a\n\n") == [ServerSentEvent(data="a", id="3")]
    assert decoder.feed(b"id: 4\n\n") == []
    assert decoder.last_event_id == "4"
    assert decoder.feed(b"id\n\n") == []  # an empty id resets it
    assert decoder.last_event_id == ""


@pytest.mark.parametrize(
    ("tail", "dropped"),
    [
        (b"", False),
        (b"data: b", True),
        (b"data: b\n", True),
        (b"event: x\n", True),
        (b"id: 9\n", True),
        (b": hb\n", False),
    ],
    ids=["nothing", "partial-line", "unfinished-block", "event-only", "id-only", "comment"],
)
def test_end_says_whether_an_unfinished_block_was_dropped(tail: bytes, dropped: bool) -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"id: 1\ndata: a\n\n" + tail) == [ServerSentEvent(data="a", id="1")]
    assert decoder.end() is dropped
    assert decoder.last_event_id == "1"
    assert decoder.end() is False


@EOLS
def test_comments_can_be_observed(eol: str) -> None:
    seen: list[str] = []
    decoder = SSEDecoder(on_comment=seen.append)
    stream = eol.join([": heartbeat", ":no space", ":", "data: x", "", ""]).encode()
    assert decoder.feed(stream) == [ServerSentEvent(data="x")]
    assert seen == ["heartbeat", "no space", ""]


def test_id_containing_nul_is_ignored() -> None:
    events = decode(b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n")
    assert [e.id for e in events] == ["1", "1"]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"retry: 1500", 1500),
        (b"retry: 15a0", None),
        (b"retry: -1", None),
        (b"retry:", None),
        ("retry: \u0661\u0662".encode(), None),
    ],
    ids=["digits", "letter", "negative", "empty", "non-ascii-digits"],
)
def test_retry_only_when_all_ascii_digits(line: bytes, expected: int | None) -> None:
    decoder = SSEDecoder()
    [event] = decoder.feed(line + b"\ndata: x\n\n")
    assert event.retry == expected
    assert decoder.retry == expected


def test_block_without_data_is_not_dispatched_and_resets_event_type() -> None:
    assert decode(b"event: ping\n\ndata: x\n\n") == [ServerSentEvent(event="message", data="x")]


def test_retry_without_data_sets_the_reconnection_time_only() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"retry: 250\n\n") == []
    assert decoder.retry == 250


@pytest.mark.parametrize("stream", [b"data: a", b"data: a\n", b"data: a\r\n"], ids=["no-eol", "lf", "crlf"])
def test_unterminated_event_at_end_of_stream_is_discarded(stream: bytes) -> None:
    assert decode(stream) == []


def test_empty_event_field_means_message() -> None:
    assert decode(b"event\ndata: x\n\n") == [ServerSentEvent(event="message", data="x")]


def test_unknown_fields_are_ignored() -> None:
    assert decode(b"foo: bar\ndata: x\n\n") == [ServerSentEvent(data="x")]


def test_invalid_utf8_is_replaced() -> None:
    assert decode(b"data: \xff\xfeok\xe2\x82\n\n") == [ServerSentEvent(data="\ufffd\ufffdok\ufffd")]


def test_utf8_character_split_across_feeds_is_kept_whole() -> None:
    decoder = SSEDecoder()
    euro = "€".encode()
    assert decoder.feed(b"data: " + euro[:1]) == []
    assert decoder.feed(euro[1:2]) == []
    assert decoder.feed(euro[2:] + b"\n\n") == [ServerSentEvent(data="€")]


def test_event_json() -> None:
    assert ServerSentEvent(data='{"a": [1]}').json() == {"a": [1]}


def test_encode_event_exact_bytes() -> None:
    assert encode_event("a\nb", event="x", id="1", retry=5) == b"event: x\nid: 1\nretry: 5\ndata: a\ndata: b\n\n"


def test_encode_event_plain_data() -> None:
    assert encode_event("[DONE]") == b"data: [DONE]\n\n"


def test_encode_comment_exact_bytes() -> None:
    assert encode_comment("heartbeat") == b": heartbeat\n\n"
    assert encode_comment("two\nlines") == b": two\n: lines\n\n"


@pytest.mark.parametrize(
    "kwargs",
    [{"event": "a\nb"}, {"id": "1\r2"}, {"id": "1\x002"}, {"retry": -1}],
    ids=["event-eol", "id-eol", "id-nul", "retry"],
)
def test_encode_event_rejects_what_cannot_round_trip(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"cannot contain|non-negative"):
        encode_event("x", **kwargs)  # type: ignore[arg-type]


_line_text = st.text(st.characters(blacklist_characters="\r\n\x00", blacklist_categories=("Cs",)))
_events = st.lists(
    st.tuples(
        st.lists(_line_text, min_size=1, max_size=4).map("\n".join),
        st.none() | _line_text.filter(bool),
        st.none() | _line_text,
        st.none() | st.integers(0, 10**9),
    ),
    max_size=8,
)


@given(events=_events, cuts=st.lists(st.integers(0, 10**6), max_size=6), eol=st.sampled_from(["\n", "\r", "\r\n"]))
def test_encode_then_decode_round_trips_whatever_the_splits_and_line_ends(
    events: list[tuple[str, str | None, str | None, int | None]], cuts: list[int], eol: str
) -> None:
    stream = b"".join(encode_event(data, event=name, id=id_, retry=retry) for data, name, id_, retry in events)
    stream = stream.replace(b"\n", eol.encode())
    points = sorted({c % (len(stream) + 1) for c in cuts})
    pieces = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    decoder = SSEDecoder()
    decoded = [event for piece in pieces for event in decoder.feed(piece)]
    last_id = ""
    expected = []
    for data, name, id_, retry in events:
        last_id = id_ if id_ is not None else last_id
        expected.append(ServerSentEvent(event=name or "message", data=data, id=last_id, retry=retry))
    assert decoded == expected


def test_a_line_fed_a_byte_at_a_time_is_held_in_memory_proportional_to_its_length() -> None:
    decoder = SSEDecoder()
    size = 100_000
    with peak_allocated() as peak:
        line = b"data: " + b"x" * size
        for i in range(len(line)):
            decoder.feed(line[i : i + 1])
    assert peak() < 3 * size  # a list of pieces held about 90 bytes per byte here
    [event] = decoder.feed(b"\n\n")
    assert len(event.data) == size


@pytest.mark.parametrize(
    ("pieces", "what"),
    [
        ([b"data: " + b"x" * 1100], "a line longer than 1,000 bytes"),
        ([b"data: " + b"x" * 600, b"x" * 600], "a line longer than 1,000 bytes"),
        ([b"data: " + b"x" * 600 + b"\n", b"data: " + b"x" * 600 + b"\n"], "an event's data longer than 1,000 bytes"),
    ],
)
def test_a_line_or_an_event_past_the_maximum_is_a_clear_error(pieces: list[bytes], what: str) -> None:
    decoder = SSEDecoder(max_size=1000)
    *first, last = pieces
    for piece in first:
        decoder.feed(piece)
    with pytest.raises(StreamError, match=f"^{what}"):
        decoder.feed(last)


@pytest.mark.fuzz
@given(stream=st.binary(max_size=400), cuts=st.lists(st.integers(0, 400), max_size=8))
def test_any_bytes_in_any_pieces_decode_without_error_and_alike(stream: bytes, cuts: list[int]) -> None:
    whole = SSEDecoder().feed(stream)
    decoder = SSEDecoder()
    edges = [0, *sorted(c % (len(stream) + 1) for c in cuts), len(stream)]
    pieces = [event for a, b in itertools.pairwise(edges) for event in decoder.feed(stream[a:b])]
    assert pieces == whole
