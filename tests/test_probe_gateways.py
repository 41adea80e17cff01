"""The probe against real and scripted gateways on loopback: Debian's nginx with proxy buffering on and off
over either HTTP version to its upstream, and proxies of ours that each misbehave one known way
(tests/gateways.py), each reported as exactly what it does.

The stream under probe spreads its events over 2.4 s, and an event counts as held back only when it comes
a second later through the gateway than straight, so that no verdict depends on the machine's speed.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from gateways import (
    chat_stream,
    crlf_line_ends,
    drop_third_event,
    error_as_clean_end,
    nginx,
    retry_after_first_bytes,
    scripted,
)

from sse_tape import Cassette
from sse_tape.probe import Probe, ProbeReport

EVENTS = 8
GAP = 0.3
TOLERANCE = 1.0


def spread_chat() -> Cassette:
    """A chat completion streamed in `EVENTS` chunks `GAP` seconds apart, then `[DONE]`."""
    return Cassette([chat_stream(EVENTS, GAP)])


def problems(report: ProbeReport) -> list[str]:
    return [f.kind for f in report.problems]


@pytest.mark.parametrize(
    ("buffering", "http_version", "found"),
    [
        (True, "1.0", ["buffered", "fault:disconnect"]),
        (False, "1.0", ["fault:disconnect"]),
        (True, "1.1", []),
        (False, "1.1", []),
    ],
    ids=["buffering-on-http1.0", "buffering-off-http1.0", "buffering-on-http1.1", "buffering-off-http1.1"],
)
async def test_nginx_is_reported_buffering_and_hiding_a_cut_where_it_does(
    buffering: bool, http_version: str, found: list[str]
) -> None:
    # Over HTTP/1.0 (nginx's default to its upstream) a body ends when the connection does: nginx cannot tell
    # a cut from the end, and with proxy_buffering on it keeps the whole body until then. Over HTTP/1.1 it
    # passes each chunk of a chunked body on as it completes, buffering or not, and a cut stays a cut.
    async with Probe([spread_chat()], faults=("disconnect:after=50%",), tolerance=TOLERANCE) as probe:
        with nginx(urlsplit(probe.url).port or 80, buffering=buffering, http_version=http_version) as gateway:
            report = await probe.through(gateway)
    assert problems(report) == found, str(report)
    if "buffered" in found:
        [interaction] = report.interactions
        assert interaction.first_event_added is not None
        assert interaction.first_event_added > TOLERANCE
        assert "held events back" in report.problems[0].line
    if "fault:disconnect" in found:
        assert report.faults[0].verdict == "hidden"


async def test_a_proxy_that_drops_the_third_event_is_reported_as_losing_it() -> None:
    async with (
        Probe([spread_chat()], faults=(), tolerance=TOLERANCE) as probe,
        scripted(probe.url, drop_third_event) as gateway,
    ):
        report = await probe.through(gateway)
    assert problems(report) == ["lost"], str(report)
    assert report.interactions[0].comparison.lost == [2]
    assert report.problems[0].line == "1 event never came: #3"


async def test_a_proxy_that_rewrites_line_ends_to_crlf_is_harmless() -> None:
    async with (
        Probe([spread_chat()], faults=(), tolerance=TOLERANCE) as probe,
        scripted(probe.url, crlf_line_ends) as gateway,
    ):
        report = await probe.through(gateway)
    report.assert_clean()
    assert [f.kind for f in report.findings] == ["line-endings"]
    assert report.interactions[0].comparison.line_endings == list(range(EVENTS + 1))


async def test_a_proxy_that_ends_cleanly_in_place_of_an_error_frame_hides_the_error() -> None:
    async with (
        Probe([spread_chat()], faults=("error:at=50%",), tolerance=TOLERANCE) as probe,
        scripted(probe.url, error_as_clean_end) as gateway,
    ):
        report = await probe.through(gateway)
    assert problems(report) == ["fault:error"], str(report)
    [fault] = report.faults
    assert fault.verdict == "hidden"
    assert b"event: error" in fault.straight.body
    assert b"event: error" not in fault.through.body


async def test_a_proxy_that_retries_a_cut_stream_after_the_first_bytes_is_reported_as_retrying() -> None:
    async with (
        Probe([spread_chat()], faults=("disconnect:after=50%",), tolerance=TOLERANCE) as probe,
        scripted(probe.url, retry_after_first_bytes) as gateway,
    ):
        report = await probe.through(gateway)
    assert problems(report) == ["fault:disconnect"], str(report)
    [fault] = report.faults
    assert (fault.verdict, fault.harmless) == ("retried", False)
    assert "after the first bytes" in fault.detail
    # What the retry sent again is said as such: the events the first try had passed on, come again.
    assert fault.comparison.repeated
    assert fault.comparison.repeated == fault.comparison.added
    assert "came again" in fault.detail
