"""The gateway probe against real gateways on loopback (issue 32): LiteLLM's proxy (`litellm[proxy]`) and
sse-tape's own `record`, each in front of the probe's upstream with the bundled OpenAI chat cassette, and
what the probe finds each one does (docs/probe.md says the same to users).

LiteLLM parses every chunk and writes it again, streams unbuffered, turns an
error frame and a cut into an error event of its own, drops heartbeats and
retries a 429; `record` passes everything as the upstream sent it, when it
records every request (`--record-mode all`), and answers a repeat from its
cassette otherwise. Each probe runs for seconds (a 3 s stall, a 429 LiteLLM
retries after `Retry-After`), and LiteLLM takes seconds to start: slow.
The tolerance is generous so that no finding depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from litellm_gateway import LiteLLM, litellm_proxy
from processes import recording_proxy

from sse_tape import Cassette, bundled_cassettes
from sse_tape.probe import Ending, FaultReport, Probe, ProbeReport, read

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TOLERANCE = 2.0
"""Seconds an event may come later through the gateway than straight before it counts as held back."""


def chat() -> Cassette:
    """The bundled OpenAI chat cassette: a greeting, a tool call, and the turn after the tool's result."""
    [path] = [p for p in bundled_cassettes() if p.name == "openai-chat.toml"]
    return Cassette.load(path)


def free_port() -> int:
    """A loopback port nothing listens on now, for an upstream the gateway must know before it starts."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def fault(report: ProbeReport, name: str) -> FaultReport:
    """The report on the fault called `name` (`error`, `disconnect`, `stall`, `status`)."""
    [found] = [f for f in report.faults if f.fault.split(":")[0] == name]
    return found


async def probe_litellm(gateway: LiteLLM, port: int) -> ProbeReport:
    async with Probe([chat()], port=port, tolerance=TOLERANCE, headers=gateway.headers) as probe:
        # LiteLLM's first request pays for its own setup (about a second): one before the probe keeps that
        # out of what the probe times.
        first = probe.upstream.recordings[0]
        probe.upstream.pin(first)
        await read(gateway.url, first.interaction.request, silence=60, headers=gateway.headers)
        probe.upstream.pin(None)
        return await probe.through(gateway.url)


@pytest.fixture(scope="module")
def litellm_report() -> Iterator[ProbeReport]:
    """The probe's report on LiteLLM's proxy in front of its upstream, with the default faults."""
    port = free_port()
    with litellm_proxy(f"http://127.0.0.1:{port}") as gateway:
        yield asyncio.run(probe_litellm(gateway, port))


def test_litellm_passes_every_event_in_order_and_unbuffered_but_writes_each_again(
    litellm_report: ProbeReport,
) -> None:
    for interaction in litellm_report.interactions:
        c = interaction.comparison
        assert len(c.got_events) == len(c.sent_events) > 2, interaction.name
        assert (c.lost, c.added, c.reordered) == ([], [], []), interaction.name
        kinds = {f.kind for f in interaction.findings}
        assert not kinds & {"status", "cut", "retried", "cached", "buffered", "delayed"}, interaction.lines()
        # Each event came about when it came straight: every one of them timed, the changed ones too.
        assert len(c.latencies()) == len(c.sent_events)
        assert interaction.latency[2] < TOLERANCE, interaction.lines()
        # Every chunk parsed and written anew (its own `created`, no `"finish_reason": null`); `[DONE]` kept.
        assert [sent for sent, _ in c.changed] == list(range(len(c.sent_events) - 1)), interaction.name
        assert c.got_events[-1].raw.strip() == c.sent_events[-1].raw.strip() == b"data: [DONE]"
        sent, got = (json.loads(events[1].raw.removeprefix(b"data: ")) for events in (c.sent_events, c.got_events))
        assert sent["id"] == got["id"]
        assert sent["created"] != got["created"]
        assert sent["choices"][0]["finish_reason"] is None
        assert "finish_reason" not in got["choices"][0]
    assert {f.kind for f in litellm_report.problems} == {
        "changed", "fault:error", "fault:disconnect", "fault:stall",
    }  # fmt: skip


def test_litellm_adds_a_charset_to_the_content_type_and_headers_of_its_own(litellm_report: ProbeReport) -> None:
    for interaction in litellm_report.interactions:
        through = interaction.through
        assert interaction.straight.header("content-type") == "text/event-stream"
        assert through.header("content-type") == "text/event-stream; charset=utf-8"
        assert through.header("x-accel-buffering") == "no"
        assert through.header("llm_provider-content-type") == "text/event-stream"  # the upstream's, renamed
        # The same media type with a parameter added: harmless, said with the other headers.
        [headers] = [f for f in interaction.findings if f.kind == "headers"]
        assert "changed content-type: text/event-stream -> text/event-stream; charset=utf-8" in headers.line
        assert headers.harmless


def test_litellm_sends_the_same_json_with_its_own_key_and_its_sdk_s_headers(litellm_report: ProbeReport) -> None:
    greeting, tool_call, after_tool = litellm_report.interactions
    for interaction in (greeting, tool_call):
        assert "rewrote the body, the same JSON" in interaction.request_changes
    # It leaves `"content": null` out of the assistant's tool-call turn.
    assert "changed the body's messages" in after_tool.request_changes
    for interaction in litellm_report.interactions:
        said = "; ".join(interaction.request_changes)
        assert re.search(r"changed headers .*authorization", said), said  # its config's dummy key, not the client's
        assert re.search(r"added headers .*user-agent.*x-stainless-", said), said
        [request] = [f for f in interaction.findings if f.kind == "request"]
        assert request.harmless


def test_litellm_turns_an_error_frame_into_a_data_event_of_its_own_and_ends_without_done(
    litellm_report: ProbeReport,
) -> None:
    error = fault(litellm_report, "error")
    assert error.verdict == "rewritten"
    assert b"event: error" in error.straight.body
    assert b"data: [DONE]" in error.straight.body
    assert (error.through.status, error.through.ending) == (200, Ending.COMPLETE)
    assert b"event: error" not in error.through.body
    assert b"[DONE]" not in error.through.body
    last = error.comparison.got_events[-1].raw
    assert last.startswith(b'data: {"error": {"message": "litellm.APIConnectionError')
    assert b"injected by sse-tape" in last


def test_litellm_turns_a_cut_into_an_error_event_and_a_clean_end(litellm_report: ProbeReport) -> None:
    cut = fault(litellm_report, "disconnect")
    assert cut.verdict == "rewritten"
    assert cut.straight.ending is Ending.CUT
    assert (cut.through.status, cut.through.ending) == (200, Ending.COMPLETE)
    assert len(cut.comparison.added) == 1
    assert cut.comparison.got_events[-1].raw.startswith(b'data: {"error": {"message": "litellm.APIConnectionError')


def test_litellm_drops_the_heartbeats_of_a_stall(litellm_report: ProbeReport) -> None:
    stall = fault(litellm_report, "stall")
    assert stall.verdict == "hidden"
    sent, came = stall.comparison.comments
    assert sent >= 1
    assert came == 0
    assert stall.through.ending is Ending.COMPLETE
    # What came before the 3 s stall came before it ended: nothing held back for the rest.
    events = stall.comparison.got_events
    assert len(events) == len(stall.comparison.sent_events)
    assert max(later.t - earlier.t for earlier, later in itertools.pairwise(events)) > 1.0


def test_litellm_retries_a_429_after_its_retry_after_then_answers_429_without_it(
    litellm_report: ProbeReport,
) -> None:
    limited = fault(litellm_report, "status")
    assert limited.verdict == "retried"
    assert limited.harmless
    requests = re.search(r"the upstream got (\d+) requests \(before any byte\)", limited.detail)
    assert requests is not None, limited.detail
    assert int(requests[1]) >= 2
    assert limited.straight.status == limited.through.status == 429
    assert limited.straight.header("retry-after") == "2"
    assert limited.through.header("retry-after") is None
    assert limited.through.header("llm_provider-retry-after") == "2"
    # It waited Retry-After's 2 s before a retry: the answer's head came no sooner.
    assert (limited.through.head_at or 0.0) >= 2.0
    assert b"RateLimitError" in limited.through.body


async def probe_record(tmp_path: Path, mode: str) -> ProbeReport:
    async with Probe([chat()], tolerance=TOLERANCE) as probe:
        with recording_proxy(probe.url, tmp_path / "recorded.toml", options=["--record-mode", mode]) as url:
            return await probe.through(url)


async def test_record_recording_every_request_passes_every_stream_and_fault_as_sent(tmp_path: Path) -> None:
    report = await probe_record(tmp_path, "all")
    assert report.clean, report.lines()
    for interaction in report.interactions:
        c = interaction.comparison
        assert (c.lost, c.added, c.reordered, c.changed, c.line_endings) == ([], [], [], [], [])
        assert interaction.through.body == interaction.straight.body
        assert interaction.request_changes == ["changed headers accept-encoding"]  # it asks its upstream for identity
    assert [(f.fault.split(":")[0], f.verdict) for f in report.faults] == [
        ("error", "passed"), ("disconnect", "passed"), ("stall", "passed"), ("status", "passed"),
    ]  # fmt: skip
    assert fault(report, "status").through.header("retry-after") == "2"


async def test_record_in_its_default_mode_answers_a_repeated_request_from_its_cassette(tmp_path: Path) -> None:
    # The probe sends the first interaction's request again for each fault; `new_episodes` replays what it
    # recorded of the first instead of forwarding it, so the client sees neither the error frame nor the 429.
    report = await probe_record(tmp_path, "new_episodes")
    error, limited = fault(report, "error"), fault(report, "status")
    assert b"event: error" in error.straight.body
    assert b"event: error" not in error.through.body
    assert error.through.body == report.interactions[0].straight.body
    assert (limited.straight.status, limited.through.status) == (429, 200)
    # Neither reached the upstream: said so.
    for each in (error, limited):
        assert each.verdict == "hidden"
        assert "the upstream got no request" in each.detail
    assert not report.clean
