"""Gemini's `streamGenerateContent` without `alt=sse`: one JSON array, element by element, as Google answers it,
read as a client that follows the API's documentation reads it (httpx on loopback: google-genai always asks
for `alt=sse`), each element checked by the SDK's own `GenerateContentResponse`. Replayed from an SSE
recording, recorded from an upstream that answers the array, faulted in the array's own bytes, checked."""

from __future__ import annotations

import itertools
import json
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from clients import gemini_client
from google.genai import types
from processes import start
from upstream import GEMINI_CHUNKS, Upstream, gemini_array

from sse_tape import Cassette, bundled_cassettes, recording, serve
from sse_tape.checking import check_interaction
from sse_tape.dialects import DIALECTS, Answer
from sse_tape.server import run_in_thread
from sse_tape.show import lines, view
from sse_tape.translation import translate

MODEL = "gemini-2.5-flash"
STREAM = f"/v1beta/models/{MODEL}:streamGenerateContent"
HELLO = {"contents": [{"parts": [{"text": "Hello!"}], "role": "user"}]}
GREETING = "Hello! How can I help you today?"


def bundled_gemini() -> Cassette:
    return Cassette.load(next(p for p in bundled_cassettes() if p.name == "gemini.toml"))


@dataclass
class Array:
    """What a client reading the array as it comes made of an answer."""

    status: int
    content_type: str
    body: bytes = b""
    elements: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    """Each element, with when it was whole (seconds since the request was sent)."""
    closed: bool = False
    broken: str | None = None
    """Why the transfer or the JSON broke off, if it did."""

    def responses(self) -> list[types.GenerateContentResponse]:
        """The elements as the SDK's own type reads them (`error` elements left out)."""
        return [types.GenerateContentResponse.model_validate(e) for _, e in self.elements if "error" not in e]

    def text(self) -> str:
        return "".join(r.text or "" for r in self.responses())


def read_array(url: str, *, fault: str | None = None, body: Any = HELLO) -> Array:
    """POST `body` to `url` and read the answer as the API's documentation says: `[`, then JSON values
    separated by commas, each parsed as soon as it is whole, then `]`."""
    decoder, headers = json.JSONDecoder(), {"x-sse-tape-fault": fault} if fault else {}
    sent = time.monotonic()
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as response:
        got = Array(response.status_code, response.headers.get("content-type", ""))
        text, at, opened = "", 0, False
        try:
            for piece in response.iter_raw():
                got.body += piece
                text = got.body.decode("utf-8", "replace")
                while True:
                    while at < len(text) and text[at] in " \t\r\n" + ("," if opened else ""):
                        at += 1
                    if at == len(text) or got.closed:
                        break
                    if not opened:
                        if text[at] != "[":
                            break  # not an array: an error before the stream, read whole below
                        opened, at = True, at + 1
                    elif text[at] == "]":
                        got.closed, at = True, at + 1
                    else:
                        try:
                            value, at = decoder.raw_decode(text, at)
                        except json.JSONDecodeError:
                            break  # not whole yet (or broken: said at the end)
                        got.elements.append((time.monotonic() - sent, value))
        except httpx.HTTPError as exc:
            got.broken = str(exc)
        if opened and not got.closed and got.broken is None:
            got.broken = f"the JSON breaks off at byte {at}"
    return got


# --- replayed from an SSE recording -------------------------------------------------------------------------


def test_without_alt_sse_the_answer_is_one_json_array_each_element_due_when_its_event_was() -> None:
    interaction = bundled_gemini().interactions[0]
    recorded = [t for t, _ in interaction.response.events()]
    with serve(bundled_gemini()) as server:  # at the recorded pace
        got = read_array(server.url + STREAM)
    assert (got.status, got.content_type, got.closed, got.broken) == (
        200,
        "application/json; charset=UTF-8",
        True,
        None,
    )
    assert json.loads(got.body) == [e.json() for _, e in interaction.response.events()]
    assert got.text() == GREETING
    assert [r.candidates[0].finish_reason for r in got.responses()] == [None, types.FinishReason.STOP]  # type: ignore[index]
    # No element comes before the time its event was recorded at.
    assert all(at >= t for (at, _), t in zip(got.elements, recorded, strict=True))
    assert got.body.startswith(b'[{\n  "candidates": [')
    assert b"}\n,\r\n{\n" in got.body
    assert got.body.endswith(b"}\n]")


def test_a_tool_loop_reads_the_array_a_call_and_then_the_answer_after_its_result() -> None:
    tools = bundled_gemini().interactions[1].request.json()["tools"]
    ask = {"parts": [{"text": "What's the weather like in Tokyo?"}], "role": "user"}
    with serve(bundled_gemini(), pace="instant") as server:
        asked = read_array(server.url + STREAM, body={"contents": [ask], "tools": tools})
        [call] = [p.function_call for r in asked.responses() for p in r.candidates[0].content.parts if p.function_call]  # type: ignore[index, union-attr]
        assert (call.name, call.args) == ("get_weather", {"city": "Tokyo"})
        answered = {"parts": [{"functionResponse": {"name": call.name, "response": {"temperature_c": 18}}}], "role": "user"}  # fmt: skip
        called = {"parts": [{"functionCall": {"name": call.name, "args": call.args}}], "role": "model"}
        after = read_array(server.url + STREAM, body={"contents": [ask, called, answered], "tools": tools})
    assert (asked.closed, after.closed) == (True, True)
    assert after.text() == "It's 18°C and sunny in Tokyo right now."  # the answer recorded after the result


def test_alt_sse_still_streams_sse_and_generate_content_one_object(bundled: dict[str, Cassette]) -> None:
    with serve(bundled["gemini"], pace="instant") as server, gemini_client(server.url) as client:
        streamed = "".join(c.text or "" for c in client.models.generate_content_stream(model=MODEL, contents="Hello!"))
        plain = client.models.generate_content(model=MODEL, contents="Hello!")
        array = read_array(server.url + STREAM)
    assert (streamed, plain.text, array.text()) == (GREETING, GREETING, GREETING)


def test_a_status_fault_before_the_array_is_googles_error() -> None:
    with serve(bundled_gemini(), pace="instant") as server:
        got = read_array(server.url + STREAM, fault="status:code=429")
    assert (got.status, got.elements) == (429, [])
    error = json.loads(got.body)["error"]
    assert (error["code"], error["status"]) == (429, "RESOURCE_EXHAUSTED")


# What each fault makes of the bundled greeting's two elements, read as the array comes: how many whole elements,
# what the body is (a whole array; cut: no closing bracket; broken: a bad element, then the bracket), the text.
FAULTS: dict[str, tuple[int, str, str]] = {
    "disconnect:after=1": (1, "cut", "Hello"),
    "disconnect:after=200b": (0, "cut", ""),
    "error:at=1,type=overloaded_error,message=The model is overloaded.": (2, "whole", "Hello"),
    "fragment:size=5": (2, "whole", GREETING),
    "split:at=300b": (2, "whole", GREETING),
    "eol:crlf": (2, "whole", GREETING),
    "stall:at=1,for=0.2s,heartbeat=0.05s": (2, "whole", GREETING),
    "drop:at=0": (1, "whole", "! How can I help you today?"),
    "drop:at=1": (1, "whole", "Hello"),
    "duplicate:at=0": (3, "whole", "HelloHello! How can I help you today?"),
    "corrupt:at=1": (1, "broken", "Hello"),
    "empty-answer": (1, "whole", ""),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_acts_on_the_arrays_own_bytes(fault: str) -> None:
    with serve(bundled_gemini(), pace="instant") as server:
        got = read_array(server.url + STREAM, fault=fault)
    count, body, text = FAULTS[fault]
    assert (len(got.elements), got.text()) == (count, text), got.body
    assert got.closed == (body == "whole")
    if body == "whole":
        json.loads(got.body)  # every byte of it
    else:  # a cut array is a cut array; a broken element is no element, and the array goes on to its end
        assert got.body.rstrip().endswith(b"]") == (body == "broken")


def test_an_error_mid_stream_is_googles_error_object_as_the_last_element() -> None:
    with serve(bundled_gemini(), pace="instant") as server:
        got = read_array(server.url + STREAM, fault="error:at=1,type=overloaded_error,message=The model is overloaded.")
    assert got.elements[-1][1] == {
        "error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}
    }
    assert got.body.endswith(b'"UNAVAILABLE"\n  }\n}\n]')


# --- recorded from an upstream that answers the array ------------------------------------------------------


def test_a_recorded_array_streams_through_untouched_and_replays_in_either_framing(tmp_path: Path) -> None:
    cassette = tmp_path / "gemini.toml"
    with run_in_thread(Upstream()) as up, recording(cassette, up.url) as server:
        through = read_array(f"{server.url}{STREAM}?gap=0.2")
    assert through.body == b"".join(gemini_array(GEMINI_CHUNKS))  # byte for byte, as the upstream wrote it
    assert [e for _, e in through.elements] == GEMINI_CHUNKS
    # Each chunk reached the client as the upstream wrote it, not once the array was over.
    assert through.elements[1][0] - through.elements[0][0] >= 0.19
    (interaction,) = Cassette.load(cassette).interactions
    times = [c.t for c in interaction.response.chunks]
    assert [c.data for c in interaction.response.chunks] == gemini_array(GEMINI_CHUNKS)
    assert all(b - a >= 0.19 for a, b in itertools.pairwise(times))  # the upstream's gaps, `]` after the last
    assert check_interaction(interaction).violations == ()
    chat = translate(interaction, DIALECTS["openai-chat"])  # `sse-tape convert --to openai-chat`
    assert Answer.of(DIALECTS["openai-chat"].decode(e for _, e in chat.response.events())).text == GREETING  # type: ignore[attr-defined]
    shown = lines(view(1, interaction))
    assert "   -> 200 application/json; charset=UTF-8 (json-array), gemini, ended complete" in shown
    assert "   answer: Hello! How can I help you today?" in shown

    with serve(cassette, pace="instant") as replay, gemini_client(replay.url) as client:
        again = read_array(f"{replay.url}{STREAM}?gap=0.2")
        # The SDK asks with alt=sse: the recorded array's chunks as SSE, then as one JSON answer.
        streamed = [c.text for c in client.models.generate_content_stream(model=MODEL, contents="Hello!")]
        plain = client.models.generate_content(model=MODEL, contents="Hello!")
    assert again.body == through.body
    assert streamed == ["Hello", "! How can I help", " you today?"]
    assert (plain.text, plain.usage_metadata.total_token_count if plain.usage_metadata else None) == (GREETING, 11)


def test_check_says_a_recorded_array_was_cut_short(tmp_path: Path) -> None:
    cassette = tmp_path / "gemini.toml"
    with run_in_thread(Upstream()) as up, recording(cassette, up.url) as server:
        got = read_array(f"{server.url}{STREAM}?cut=1")
    assert (len(got.elements), got.closed) == (3, False)
    (interaction,) = Cassette.load(cassette).interactions
    found = [str(v) for v in check_interaction(interaction).violations]
    assert found == ["the array is cut short after 3 elements: no closing ]"]


@pytest.mark.parametrize(
    ("fault", "elements", "closed"), [("error:at=1", 2, True), ("disconnect:after=2", 2, False), ("drop:at=0", 2, True)]
)
def test_faults_act_on_a_forwarded_array_and_the_recording_keeps_it_whole(
    tmp_path: Path, fault: str, elements: int, closed: bool
) -> None:
    cassette = tmp_path / "gemini.toml"
    with run_in_thread(Upstream()) as up, recording(cassette, up.url) as server:
        got = read_array(f"{server.url}{STREAM}", fault=fault)
    assert (len(got.elements), got.closed) == (elements, closed)
    (interaction,) = Cassette.load(cassette).interactions
    assert [c.data for c in interaction.response.chunks] == gemini_array(GEMINI_CHUNKS)
    assert [i.fault for i in interaction.injected] == [fault]


def test_serve_model_answers_without_alt_sse_with_one_json_array_of_its_chunks(tiny_model_path: Path) -> None:
    process, url = start(["serve", "--model", str(tiny_model_path), "--port", "0", "--seed", "3"])
    try:
        got = read_array(
            f"{url}/v1beta/models/tiny:streamGenerateContent", body=HELLO | {"generationConfig": {"maxOutputTokens": 6}}
        )
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert (got.status, got.content_type, got.closed, got.broken) == (
        200,
        "application/json; charset=UTF-8",
        True,
        None,
    )
    responses = got.responses()
    assert len(responses) > 1
    assert responses[-1].candidates[0].finish_reason == types.FinishReason.MAX_TOKENS  # type: ignore[index]
