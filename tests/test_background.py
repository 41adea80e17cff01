"""Background responses, as the Responses API keeps them, driven by the official openai SDK over loopback."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import httpx
import openai
import pytest
from clients import openai_client

from sse_tape import Cassette, Chunk, Interaction, MockServer, Pacing, Request, Response, SSEDecoder, serve
from sse_tape.dialects import DIALECTS, Generation
from sse_tape.dialects.openai_responses.background import BackgroundResponse

GREETING: dict[str, Any] = {"model": "claude-sonnet-4-20250514", "input": "Hello!"}
ANSWER = "Hello! How can I help you today?"


@pytest.fixture(scope="module")
def greeting(bundled: dict[str, Cassette]) -> Interaction:
    """The bundled Responses greeting as a recording of a background request: `"background": true` in its body."""
    recorded = bundled["openai-responses"].interactions[0]
    body = {**recorded.request.json(), "background": True}
    return replace(recorded, request=replace(recorded.request, body=json.dumps(body).encode()))


def recorded_events(interaction: Interaction) -> list[dict[str, Any]]:
    """The recorded stream's events as JSON objects (not the gateway's `[DONE]`)."""
    return [json.loads(sse.data) for _, sse in interaction.response.events() if sse.data != "[DONE]"]


def held(interaction: Interaction, seconds: float = 600.0) -> Interaction:
    """The interaction with its first two events (`response.created`, `.in_progress`) at once and the rest
    `seconds` later: a response in progress for as long as any test runs."""
    chunks = interaction.response.chunks
    moved = [Chunk(0.0, c.data) for c in chunks[:2]] + [Chunk(c.t + seconds, c.data) for c in chunks[2:]]
    return replace(interaction, response=replace(interaction.response, chunks=tuple(moved)))


@pytest.mark.parametrize(
    ("fault", "pace"),
    [("disconnect:after=5,path=/v1/responses", "recorded"), ("disconnect:after=40%,mode=reset,times=1", "instant")],
    ids=["closed-on-the-create-path", "reset-the-first-request"],
)
def test_the_sdk_resumes_a_background_stream_after_a_disconnect_and_gets_every_event_once(
    greeting: Interaction, fault: str, pace: str
) -> None:
    with serve(Cassette([greeting]), pace=pace, faults=[fault]) as server:
        client = openai_client(server.url + "/v1")
        before: list[Any] = []
        with (
            pytest.raises(openai.APIConnectionError),
            client.responses.create(**GREETING, background=True, stream=True) as stream,
        ):
            before.extend(stream)
        response_id, last = before[0].response.id, before[-1].sequence_number
        with client.responses.retrieve(response_id, stream=True, starting_after=last) as resumed:
            after = list(resumed)
        answered = [e.what for e in server.journal if e.kind == "answered"]
    assert 0 < len(before) < len(recorded_events(greeting))  # the fault cut the first stream short
    assert [e.to_dict() for e in before + after] == recorded_events(greeting)  # each event once, in order
    assert [e.sequence_number for e in before + after] == list(range(17))
    assert answered == [f"background response {response_id}, its events after {last}"]


def test_a_background_request_for_no_stream_is_queued_then_polled_to_its_recorded_end(greeting: Interaction) -> None:
    with serve(Cassette([greeting]), pace="x2") as server:
        client = openai_client(server.url + "/v1")
        created = client.responses.create(**GREETING, background=True)
        statuses = [created.status]
        deadline = time.monotonic() + 30  # a safety net: the recording ends after about half a second
        while statuses[-1] in ("queued", "in_progress") and time.monotonic() < deadline:
            time.sleep(0.05)
            retrieved = client.responses.retrieve(created.id)
            statuses.append(retrieved.status)
    assert (created.status, created.output) == ("queued", [])
    order = ["queued", "in_progress", "completed"]
    assert statuses == sorted(statuses, key=order.index)  # never back
    assert retrieved.status == "completed"
    assert retrieved.output_text == ANSWER
    assert retrieved.to_dict() == recorded_events(greeting)[-1]["response"]
    assert [e.kept for e in server.journal if e.kind == "matched"] == [f"in the background as {created.id}"]


def test_a_response_in_progress_is_cancelled_and_a_second_cancel_answers_the_same(greeting: Interaction) -> None:
    with serve(Cassette([held(greeting)])) as server:
        client = openai_client(server.url + "/v1")
        created = client.responses.create(**GREETING, background=True)
        in_progress = client.responses.retrieve(created.id)
        cancelled = client.responses.cancel(created.id)
        after = client.responses.retrieve(created.id)
        again = client.responses.cancel(created.id)
    assert (created.status, in_progress.status) == ("queued", "in_progress")
    assert cancelled.status == "cancelled"
    assert after.to_dict() == again.to_dict() == cancelled.to_dict()


def test_a_stream_asked_for_after_a_cancel_ends_with_what_was_due_before_it(greeting: Interaction) -> None:
    with serve(Cassette([held(greeting)])) as server:
        client = openai_client(server.url + "/v1")
        with client.responses.create(**GREETING, background=True, stream=True) as stream:
            first = next(iter(stream))
        client.responses.cancel(first.response.id)
        with client.responses.retrieve(first.response.id, stream=True) as again:
            events = [e.type for e in again]
    assert events == ["response.created", "response.in_progress"]  # then the stream ends: the rest never came


def test_cancelling_a_finished_response_is_refused_in_the_apis_words(instant_server: MockServer) -> None:
    # The bundled cassette matches on method and path: it answers background requests too.
    client = openai_client(instant_server.url + "/v1")
    created = client.responses.create(**GREETING, background=True)
    assert client.responses.retrieve(created.id).output_text == ANSWER
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.cancel(created.id)
    assert refused.value.status_code == 400
    assert refused.value.body == {
        "message": "Cannot cancel a completed response.",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    assert client.responses.retrieve(created.id).status == "completed"  # and it stays so


def test_a_response_created_with_no_stream_cannot_be_streamed(instant_server: MockServer) -> None:
    client = openai_client(instant_server.url + "/v1")
    created = client.responses.create(**GREETING, background=True)
    with pytest.raises(openai.BadRequestError, match="it was not created with stream=true"):
        client.responses.retrieve(created.id, stream=True)


def test_a_resumed_stream_after_its_last_event_has_no_event(instant_server: MockServer) -> None:
    client = openai_client(instant_server.url + "/v1")
    with client.responses.create(**GREETING, background=True, stream=True) as stream:
        events = list(stream)
    with client.responses.retrieve(events[0].response.id, stream=True, starting_after=16) as resumed:
        assert list(resumed) == []
    with client.responses.retrieve(events[0].response.id, stream=True) as whole:
        assert [e.to_dict() for e in whole] == [e.to_dict() for e in events]


def test_an_unknown_id_is_a_404_in_openais_shape(greeting: Interaction) -> None:
    with serve(Cassette([greeting]), pace="instant") as server:
        client = openai_client(server.url + "/v1")
        with pytest.raises(openai.NotFoundError, match="no background response 'resp_nope' in this session"):
            client.responses.retrieve("resp_nope")
        with pytest.raises(openai.NotFoundError) as cancel:
            client.responses.cancel("resp_nope")
        assert cancel.value.body["type"] == "invalid_request_error"  # type: ignore[index]
        misses = server.control.snapshot().misses
        assert [m.path for m in misses] == ["/v1/responses/resp_nope", "/v1/responses/resp_nope/cancel"]


def test_a_recorded_json_answer_and_the_retrievals_after_it_replay_as_recorded(greeting: Interaction) -> None:
    # What recording a background request for no stream keeps: the response queued, then each poll's answer.
    final = recorded_events(greeting)[-1]["response"]
    json_headers = (("content-type", "application/json"),)

    def answer(request: Request, body: dict[str, Any]) -> Interaction:
        return Interaction(request, Response(200, json_headers, (Chunk(0.01, json.dumps(body).encode()),)))

    created = Request("POST", "/v1/responses", body=json.dumps({**GREETING, "background": True}).encode())
    polled = Request("GET", f"/v1/responses/{final['id']}")
    queued = {**final, "status": "queued", "output": []}
    with serve(Cassette([answer(created, queued), answer(polled, queued), answer(polled, final)])) as server:
        client = openai_client(server.url + "/v1")
        made = client.responses.create(**GREETING, background=True)
        polls = [client.responses.retrieve(made.id).status, client.responses.retrieve(made.id).status]
        assert server.control.snapshot().kept == {"openai-responses:0": ()}  # no stream to keep: only recordings answer
        assert [e.kind for e in server.journal if e.kind in ("matched", "answered")] == ["matched"] * 3
    assert (made.status, polls) == ("queued", ["queued", "completed"])


def test_reset_forgets_the_background_responses(greeting: Interaction) -> None:
    with serve(Cassette([greeting]), pace="instant") as server:
        client = openai_client(server.url + "/v1")
        created = client.responses.create(**GREETING, background=True)
        assert client.responses.retrieve(created.id).status == "completed"
        httpx.post(server.url + "/__sse_tape__/reset", json={}).raise_for_status()
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(created.id)


def test_a_bad_starting_after_is_a_400(instant_server: MockServer) -> None:
    client = openai_client(instant_server.url + "/v1")
    with client.responses.create(**GREETING, background=True, stream=True) as stream:
        response_id = next(iter(stream)).response.id
    got = httpx.get(
        f"{instant_server.url}/v1/responses/{response_id}", params={"stream": "true", "starting_after": "x"}
    )
    assert got.status_code == 400
    assert got.json()["error"]["message"] == "sse-tape: starting_after 'x' is not a whole number"


def test_the_json_answers_take_the_faults_before_a_stream(greeting: Interaction) -> None:
    with serve(Cassette([greeting]), pace="instant") as server:
        client = openai_client(server.url + "/v1")
        created = client.responses.create(**GREETING, background=True)
        with pytest.raises(openai.InternalServerError):
            client.responses.retrieve(created.id, extra_headers={"X-SSE-Tape-Fault": "status:503"})
        retrieved = client.responses.retrieve(created.id, extra_headers={"X-SSE-Tape-Fault": "disconnect:after=2"})
        notes = [e.what for e in server.journal if e.kind == "fault"]
    assert retrieved.status == "completed"
    assert notes[-1] == "an answer that is not a stream: left alone"


@pytest.mark.parametrize("pace", ["recorded", "x2", "instant"])
def test_a_resumed_stream_sends_what_is_due_at_once_and_the_rest_when_due(greeting: Interaction, pace: str) -> None:
    paced = Pacing.parse(pace).plan(greeting.response)
    request = replace(greeting.request, body=json.dumps({**GREETING, "background": True, "stream": True}).encode())
    responses = DIALECTS["openai-responses"]
    assert isinstance(responses, Generation)
    kept = BackgroundResponse.of(request, paced, arrived=100.0, dialect=responses)
    assert kept is not None
    plan = kept.stream(100.75, after=4)  # three quarters of a second after the request arrived
    events = SSEDecoder().feed(plan.body)
    assert [json.loads(e.data)["sequence_number"] for e in events[:-1]] == list(range(5, 17))
    assert events[-1].data == "[DONE]"
    assert [t for t, _ in plan.writes] == [max(t - 0.75, 0.0) for t, _ in paced.writes[5:]]  # one event a write
    assert plan.end_at == max(paced.end_at - 0.75, 0.0)
