"""The plan: positions, and event boundaries kept right through every change a fault makes."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sse_tape import Cassette, ConfigError, Pacing, Response, SSEDecoder
from sse_tape.framing import blocks_of, event_ends
from sse_tape.plan import Plan
from sse_tape.position import Position, PositionUnit


def _streams(bundled: dict[str, Cassette]) -> list[Response]:
    return [i.response for c in bundled.values() for i in c if i.response.status == 200]


@pytest.mark.parametrize(
    ("text", "unit", "value"),
    [
        ("5", "events", 5),
        ("50%", "fraction", 0.5),
        ("200b", "bytes", 200),
        ("1.5s", "seconds", 1.5),
        ("300ms", "seconds", 0.3),
    ],
)
def test_positions(text: str, unit: str, value: float) -> None:
    assert Position.parse(text) == Position(PositionUnit(unit), value)


def test_a_position_prints_as_it_is_written() -> None:
    assert [str(Position.parse(t)) for t in ("5", "50%", "200b", "1.5s")] == ["5", "50%", "200b", "1.5s"]


def test_a_bad_position_says_how_to_write_one() -> None:
    with pytest.raises(ConfigError, match="'soon' is not a position: write 5 "):
        Position.parse("soon")


def test_event_positions_name_the_end_of_that_event(bundled: dict[str, Cassette]) -> None:
    plan = Pacing().plan(bundled["openai-chat"].interactions[0].response)
    events = plan.events
    assert plan.offset(Position.parse("0")) == events[0].start
    assert plan.offset(Position.parse("3")) == events[2].end
    assert plan.offset(Position.parse("100%")) == events[-1].end
    assert plan.offset(Position.parse("9999")) == len(plan.body)


# Each change a plan goes through (a resumption cuts and inserts; a misbehaving answer cuts and appends), as
# (name, function of a plan and two drawn numbers).
CHANGES = {
    "cut": lambda plan, a, b: plan.cut(a % (len(plan.body) + 1)),
    "cut before": lambda plan, a, b: plan.cut_before(a % (len(plan.body) + 1)),
    "insert": lambda plan, a, b: plan.insert(a % (len(plan.body) + 1), [(0.0, b": beat\n\n"), (0.1, b"data: 1\n\n")]),
    "append": lambda plan, a, b: plan.append(9.0, b"data: [DONE]\n\n" if a % 2 else b"data: cut sh"),
    "rewrite": lambda plan, a, b: plan.rewrite([(t, d.replace(b"\n", b"\r\n")) for t, d in plan.writes]),
}


@settings(max_examples=300)
@given(data=st.data())
def test_blocks_stay_those_of_the_body_through_any_changes(bundled: dict[str, Cassette], data: st.DataObject) -> None:
    plan = Pacing().plan(data.draw(st.sampled_from(_streams(bundled))))
    plan.blocks  # found now, then kept up to date by each change  # noqa: B018
    changes = data.draw(
        st.lists(st.tuples(st.sampled_from(sorted(CHANGES)), st.integers(0, 10**4), st.integers(0, 10**4)), max_size=6)
    )
    for name, a, b in changes:
        CHANGES[name](plan, a, b)
        assert plan.blocks == blocks_of(plan.body), name


def test_splitting_a_write_keeps_the_bytes_and_their_times(bundled: dict[str, Cassette]) -> None:
    plan = Pacing().plan(bundled["openai-chat"].interactions[0].response)
    body, writes = plan.body, list(plan.writes)
    at = plan.time_at(17)
    assert plan.body == body
    assert len(plan.writes) == len(writes) + 1
    assert at == writes[0][0]


@given(
    body=st.binary(max_size=300)
    | st.lists(
        st.sampled_from(
            [
                b"data: x",
                b"data",
                b"data:",
                b": c",
                b"event: e",
                b"datax: 1",
                b"\xef\xbb\xbfdata: b",
                b"\n",
                b"\r",
                b"\r\n",
                b"id: 1",
            ]
        ),
        max_size=20,
    ).map(b"".join)
)
@example(body=b"data: a\n\n\xef\xbb\xbfdata: b\n\n")  # a byte order mark counts at the very start only
def test_event_ends_are_where_blocks_of_finds_events(body: bytes) -> None:
    assert event_ends(body) == [b.end for b in blocks_of(body) if b.event is not None]
    assert len(event_ends(body)) == len(SSEDecoder().feed(body))


# A feed whose events carry ids, as EventSource streams do: a retry, an id-only block, an event without its own id.
FEED = [
    (0.0, b"retry: 1000\n\n"),
    (0.1, b"id: 1\ndata: one\n\n"),
    (0.2, b"id: 2\ndata: two\n\n"),
    (0.3, b"data: two and a half\n\n"),
    (0.4, b"id: 3\n\n"),
    (0.5, b"id: 4\ndata: four\n\n"),
]


def feed_plan() -> Plan:
    return Plan(200, [], list(FEED), end_at=0.6)


@pytest.mark.parametrize(
    ("last_id", "rest"),
    [
        ("1", [b"id: 2\ndata: two\n\n", b"data: two and a half\n\n", b"id: 3\n\n", b"id: 4\ndata: four\n\n"]),
        ("2", [b"data: two and a half\n\n", b"id: 3\n\n", b"id: 4\ndata: four\n\n"]),
        ("3", [b"id: 4\ndata: four\n\n"]),
        ("4", []),
    ],
)
def test_resume_after_goes_on_after_the_block_that_set_the_id(last_id: str, rest: list[bytes]) -> None:
    plan = feed_plan()
    assert plan.resume_after(last_id)
    assert [data for _, data in plan.writes] == [b"retry: 1000\n\n", *rest]  # the retry the client had is kept
    decoder = SSEDecoder(last_event_id=last_id)
    got = decoder.feed(plan.body)
    assert [e.data for e in got] == [e.data for e in SSEDecoder().feed(b"".join(rest))]
    assert [b.event.data for b in plan.events if b.event] == [e.data for e in got]  # its blocks follow the cut


def test_resume_after_counts_the_timing_from_the_resumed_event() -> None:
    plan = feed_plan()
    plan.resume_after("2")
    assert [round(t, 6) for t, _ in plan.writes] == [0.1, 0.1, 0.2, 0.3]
    assert round(plan.end_at, 6) == 0.4


@pytest.mark.parametrize("last_id", ["9", ""], ids=["unknown", "empty"])
def test_an_id_the_stream_never_set_leaves_it_whole(last_id: str) -> None:
    plan = feed_plan()
    assert not plan.resume_after(last_id)
    assert plan.writes == FEED


def test_advance_sends_what_was_due_at_once_and_the_rest_that_much_sooner() -> None:
    plan = feed_plan()
    plan.advance(0.25)
    assert [round(t, 6) for t, _ in plan.writes] == [0.0, 0.0, 0.0, 0.05, 0.15, 0.25]
    assert [data for _, data in plan.writes] == [data for _, data in FEED]
    assert round(plan.end_at, 6) == 0.35
