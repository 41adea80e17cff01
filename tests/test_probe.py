"""The gateway probe itself: reading, lining answers up, its report, the command and the fixture.

What real gateways do to streams (nginx, LiteLLM's proxy, sse-tape's own
proxy, and scripted misbehaving ones) is in tests/test_probe_gateways.py and
tests/test_probe_litellm.py; here the probe is pointed at its own upstream,
which must come out clean, and its comparison is given answers as bytes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from gateways import chat_stream

from sse_tape import Cassette, Chunk, Interaction, Request, Response
from sse_tape.dialects import dialect_for
from sse_tape.framing import SSE
from sse_tape.probe import DEFAULT_FAULTS, Ending, InteractionReport, Piece, Probe, Reading, fidelity, probe_in_thread
from sse_tape.probe.comparison import blocks, compare
from sse_tape.probe.faults import judge

CHAT = "/v1/chat/completions"


def reading(*reads: tuple[float, bytes], status: int = 200) -> Reading:
    return Reading(
        status, (("content-type", "text/event-stream"),), tuple(Piece(t, d) for t, d in reads), Ending.COMPLETE
    )


SENT = reading((0.0, b"data: a\n\n"), (0.1, b"data: b\n\n"), (0.2, b"data: c\n\n"), (0.3, b"data: d\n\n"))


def test_an_event_left_out_is_lost_and_one_put_in_is_added() -> None:
    got = reading((0.0, b"data: a\n\n"), (0.1, b"data: b\n\n"), (0.3, b"data: d\n\ndata: x\n\n"))
    c = compare(blocks(SENT, SSE), blocks(got, SSE))
    assert (c.lost, c.added, c.reordered, c.changed) == ([2], [3], [], [])


def test_events_that_come_a_second_time_are_said_to_come_again() -> None:
    got = reading((0.0, b"data: a\n\ndata: b\n\n"), (0.2, b"data: a\n\ndata: b\n\ndata: c\n\ndata: d\n\n"))
    c = compare(blocks(SENT, SSE), blocks(got, SSE))
    assert (c.lost, c.added, c.repeated) == ([], [0, 1], [0, 1])


def test_events_swapped_are_reordered_not_lost() -> None:
    got = reading((0.0, b"data: a\n\ndata: c\n\n"), (0.3, b"data: b\n\ndata: d\n\n"))
    c = compare(blocks(SENT, SSE), blocks(got, SSE))
    assert (c.lost, c.added) == ([], [])
    assert c.reordered in ([1], [2])


def test_line_ends_and_spacing_are_harmless_and_a_new_payload_is_a_change() -> None:
    got = reading((0.0, b"data: a\r\n\r\n"), (0.1, b"data:b\n\n"), (0.2, b"data: C\n\n"), (0.3, b"data: d\n\n"))
    c = compare(blocks(SENT, SSE), blocks(got, SSE))
    assert (c.line_endings, c.respelled, c.changed, c.lost, c.added) == ([0], [1], [(2, 2)], [], [])


def test_events_that_come_together_late_are_one_run() -> None:
    got = reading((0.35, b"data: a\n\ndata: b\n\ndata: c\n\ndata: d\n\n"))
    c = compare(blocks(SENT, SSE), blocks(got, SSE))
    assert c.runs() == (4, pytest.approx(0.3))
    assert c.latencies() == pytest.approx([0.35, 0.25, 0.15, 0.05])


def test_events_written_anew_and_held_together_are_still_timed() -> None:
    # A gateway that rewrites every event (LiteLLM's proxy does) and holds them: each changed event stands for
    # the one sent in its place, so the hold shows.
    got = reading((0.35, b"data: A\n\ndata: B\n\ndata: C\n\ndata: D\n\n"))
    c = compare(blocks(SENT, SSE), blocks(got, SSE))
    assert c.changed == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert c.runs() == (4, pytest.approx(0.3))
    assert max(c.latencies()) == pytest.approx(0.35)


@pytest.mark.parametrize(
    ("content_type", "problem"), [("text/event-stream; charset=utf-8", False), ("text/plain", True)]
)
def test_a_charset_added_to_the_content_type_is_harmless_and_another_type_is_not(
    content_type: str, problem: bool
) -> None:
    got = Reading(200, (("Content-Type", content_type),), SENT.pieces, Ending.COMPLETE)
    report = InteractionReport(
        "chat #1", Request("POST", CHAT), SENT, got, compare(blocks(SENT, SSE), blocks(got, SSE)), 1, 1.0
    )
    [finding] = [f for f in report.findings if f.kind == "headers"]
    assert finding.harmless is not problem


def test_an_answer_that_is_no_stream_is_compared_by_what_its_json_means() -> None:
    sent = reading((0.0, b'{"text": "hello"}'))
    respaced, changed = reading((0.0, b'{"text":"hello"}')), reading((0.0, b'{"text": "bye"}'))
    assert compare(blocks(sent, None), blocks(respaced, None)).respelled == [0]
    assert compare(blocks(sent, None), blocks(changed, None)).changed == [(0, 0)]
    assert compare(blocks(sent, None), blocks(reading(), None)).lost == [0]


def test_a_heartbeat_written_without_its_space_is_the_same_heartbeat() -> None:
    sent = reading((0.0, b": heartbeat\n\n"), (1.0, b"data: a\n\n"))
    got = reading((0.0, b":heartbeat\n\n"), (1.0, b"data: a\n\n"))
    c = compare(blocks(sent, SSE), blocks(got, SSE))
    assert (c.comments, c.lost, c.added) == ((1, 1), [], [])


def test_a_gateway_that_goes_silent_half_way_is_a_cut_not_unreachable() -> None:
    got = Reading(200, SENT.headers, SENT.pieces[:2], Ending.SILENT, "nothing came for 30 s")
    report = InteractionReport(
        "chat #1", Request("POST", CHAT), SENT, got, compare(blocks(SENT, SSE), blocks(got, SSE)), 1, 1.0
    )
    assert {f.kind for f in report.findings} == {"cut", "lost"}


@pytest.mark.parametrize(
    ("through", "verdict"),
    [
        # The error frame swapped for a `[DONE]` of the gateway's own, the stream ended whole: hidden.
        (b"data: a\n\ndata: b\n\ndata: [DONE]\n\n", "hidden"),
        # The error frame turned into an event of the gateway's own: the client still sees an error.
        (b'data: a\n\ndata: b\n\ndata: {"error": "upstream failed"}\n\n', "rewritten"),
        (b'data: a\n\ndata: b\n\nevent: error\ndata: {"error": {"message": "x"}}\n\ndata: [DONE]\n\n', "passed"),
    ],
)
def test_an_error_frame_a_gateway_swaps_for_a_clean_end_is_hidden(through: bytes, verdict: str) -> None:
    sent = reading((0.0, b'data: a\n\ndata: b\n\nevent: error\ndata: {"error": {"message": "x"}}\n\ndata: [DONE]\n\n'))
    got = reading((0.0, through))
    c = compare(blocks(sent, SSE), blocks(got, SSE))
    done = dialect_for(CHAT).is_terminal
    assert judge("error:at=50%", "chat #1", sent, got, c, 1, 1.0, done).verdict == verdict


async def test_a_request_the_gateway_makes_of_its_own_is_not_a_retry() -> None:
    async with Probe([Cassette([chat_stream(2, 0.01)])]) as probe:
        probe.upstream.pin(probe.upstream.recordings[0])
        async with httpx.AsyncClient(base_url=probe.url) as client:
            await client.get("/health")
            await client.post(CHAT, json={"model": "renamed", "stream": True})
        assert [r.path for r in probe.upstream.received] == ["/health", CHAT]
        assert [r.path for r in probe.upstream.probed()] == [CHAT]


async def test_a_recorded_mcp_session_is_replayed_as_recorded_whatever_session_it_names() -> None:
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 1}}}
    answer = {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "2"}]}}
    request = Request(
        "POST",
        "/mcp",
        headers=(("content-type", "application/json"), ("mcp-session-id", "recorded-session")),
        body=json.dumps(call).encode(),
    )
    response = Response(
        200, (("content-type", "text/event-stream"),), (Chunk(0.01, f"data: {json.dumps(answer)}\n\n".encode()),)
    )
    async with Probe([Cassette([Interaction(request, response)])], faults=(), tolerance=1.0) as probe:
        report = await probe.direct()
    assert report.clean, str(report)
    assert report.interactions[0].straight.status == 200


async def test_the_upstream_probed_straight_is_clean_and_every_default_fault_passes() -> None:
    cassette = Cassette([chat_stream(6, 0.05)])
    async with Probe([cassette], tolerance=1.0) as probe:
        report = await probe.direct()
    assert report.clean, str(report)
    [interaction] = report.interactions
    assert len(interaction.comparison.sent_events) == 7
    assert interaction.upstream_requests == 1
    assert [f.verdict for f in report.faults] == ["passed"] * len(DEFAULT_FAULTS)
    # Each fault really acted: the straight answers differ from the recording as each fault says.
    error, cut, stall, limited = (f.straight for f in report.faults)
    assert b"event: error" in error.body
    assert cut.ending is Ending.CUT
    assert b": heartbeat" in stall.body
    assert (limited.status, limited.header("retry-after")) == (429, "2")


def test_the_probe_runs_for_synchronous_code_with_its_upstream_in_a_thread() -> None:
    with probe_in_thread(Probe([Cassette([chat_stream(3, 0.02)])], faults=(), tolerance=1.0)) as probe:
        assert probe.url.startswith("http://127.0.0.1:")
        report = probe.through(probe.url)
    report.assert_clean()
    assert report.through == report.upstream


async def test_fidelity_times_every_gap_of_every_stream() -> None:
    interaction = chat_stream(5, 0.05)
    async with Probe([Cassette([interaction])]) as probe:
        probe.upstream.pin(probe.upstream.recordings[0])
        measured = await fidelity(probe.url, interaction, streams=4)
    assert (measured.completed, measured.streams) == (4, 4)
    assert len(measured.gap_errors) == 4 * 5  # 6 events: 5 gaps a stream
    assert len(measured.first_late) == 4


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sse_tape", "probe", *args], capture_output=True, text=True, timeout=120
    )


def test_the_command_prints_json_draws_the_picture_and_exits_0_when_clean(tmp_path: Path) -> None:
    path = tmp_path / "chat.toml"
    Cassette([chat_stream(4, 0.02)]).save(path)
    page = tmp_path / "probe.html"
    done = run_cli(
        str(path), "--port", "0", "--fault", "error:at=50%", "--tolerance", "1s", "--json", "--html", str(page)
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["clean"] is True
    assert report["interactions"][0]["events"] == {"straight": 5, "through": 5}
    assert [f["verdict"] for f in report["faults"]] == ["passed"]
    assert page.read_text().count("<svg") == 2  # the interaction and the fault


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--tolerance", "soon"], "'soon' is not a duration"),
        (["--fault", "nonsense"], "nonsense"),
        (["--header", "no colon"], "give it as 'Name: value'"),
        (["--through", "http://127.0.0.1:1", "--no-faults"], "cannot reach the gateway"),
        (["--through", "ftp://example", "--no-faults"], "not an http:// or https:// URL"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2(tmp_path: Path, args: list[str], said: str) -> None:
    path = tmp_path / "chat.toml"
    Cassette([chat_stream(2, 0.01)]).save(path)
    done = run_cli(str(path), "--port", "0", *args)
    assert done.returncode == 2
    assert said in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2  # the upstream's line, then the error's


def test_the_fixture_probes_a_gateway_in_one_line(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    Cassette([chat_stream(3, 0.02)]).save(pytester.path / "cassettes" / "chat.toml")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.sse_tape_probe("chat", faults=["disconnect:after=50%"], tolerance=1.0)
        def test_the_upstream_is_its_own_clean_gateway(sse_tape_probe):
            sse_tape_probe.through(sse_tape_probe.url).assert_clean()

        @pytest.mark.sse_tape_probe("chat", faults=[], tolerance=1.0)
        def test_a_gateway_that_is_not_there_fails(sse_tape_probe):
            with pytest.raises(Exception, match="cannot reach the gateway"):
                sse_tape_probe.through("http://127.0.0.1:1")
        """
    )
    result = pytester.runpytest_subprocess("-p", "sse_tape.pytest_plugin", "--strict-markers")
    result.assert_outcomes(passed=2)
