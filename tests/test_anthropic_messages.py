"""anthropic-messages: its framing, its requests, and Anthropic's SDK as the client.

Its check rules, detection and error bodies are cases of test_dialects.py's
tests over every dialect.

The SDK (`anthropic`) is the oracle: it reads the bundled cassette, streams
translated from every other dialect and the faults injected into them, as it
reads the API itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anthropic
import pytest
from click.testing import CliRunner
from clients import anthropic_client, openai_client
from hypothesis import given
from hypothesis import strategies as st

from sse_tape import (
    Cassette,
    Chunk,
    Interaction,
    MatchOn,
    MockServer,
    Request,
    Response,
    ServerSentEvent,
    SSEDecoder,
    recording,
    serve,
)
from sse_tape.cli import cli
from sse_tape.dialects import DIALECTS, Answer, Generation, detect
from sse_tape.dialects.events import (
    Error,
    Finish,
    ReasoningDelta,
    ReasoningSignature,
    RefusalDelta,
    Start,
    TextDelta,
    ToolCallStart,
    Usage,
)
from sse_tape.framing import SSE
from sse_tape.matching import framing_of
from sse_tape.redaction import REDACTED
from sse_tape.translation import translate

MESSAGES = DIALECTS["anthropic-messages"]


def events_of(*frames: str | bytes) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    return [e for f in frames for e in decoder.feed(f.encode() if isinstance(f, str) else f)]


# --- check (each rule with its message: test_dialects.py's test_rules) ------------------------------------


_FIELDS = ("type", "index", "delta", "content_block", "message", "usage", "stop_reason", "text", "partial_json")
_LEAF = st.none() | st.booleans() | st.integers(-2, 3) | st.text(max_size=3) | st.sampled_from(["text", "tool_use"])
_ANY = st.recursive(
    _LEAF, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(_FIELDS), inner, max_size=4)
)
_KINDS = ("message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "error")


@st.composite
def _any_event(draw: Any) -> ServerSentEvent:
    obj = draw(st.dictionaries(st.sampled_from(_FIELDS[1:5]), _ANY, max_size=3)) | {
        "type": draw(st.sampled_from(_KINDS))
    }
    return ServerSentEvent(data=json.dumps(obj), event=obj["type"])


@pytest.mark.fuzz
@given(events=st.lists(_any_event(), max_size=8), body=_ANY)
def test_any_stream_of_its_events_is_read_without_a_crash(events: list[ServerSentEvent], body: Any) -> None:
    MESSAGES.check(events, Request("POST", "/v1/messages", body=json.dumps(body).encode()))
    MESSAGES.stream_json(events)
    MESSAGES.encoder().resume(events)
    MESSAGES.decode_json(body)
    MESSAGES.request_body(MESSAGES.prompt(body))


# --- framing ---------------------------------------------------------------------------------------------


def frames_of(events: list[Any]) -> list[ServerSentEvent]:
    return events_of(*MESSAGES.encode(events))


def test_an_error_mid_stream_is_the_error_event_alone_and_nothing_after_it() -> None:
    frames = MESSAGES.error_frames(Error("Overloaded", "overloaded_error"), [Start("msg_1", "m"), TextDelta("Hi")])
    assert frames == [
        b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    ]


def test_an_error_of_another_api_is_an_api_error_with_its_code_in_the_details() -> None:
    # OpenAI's server_error is Anthropic's api_error, and back; the code is where the SDK looks for one.
    (error,) = MESSAGES.error_frames(Error("boom", "server_error", "c7"), [Start("msg_1", "m")])
    assert json.loads(events_of(error)[0].data)["error"] == {
        "details": {"error_code": "c7"},
        "type": "api_error",
        "message": "boom",
    }
    assert MESSAGES.decode(events_of(error)) == [Error("boom", "server_error", "c7")]


def test_a_resumed_stream_goes_on_with_the_blocks_the_client_has(bundled: dict[str, Cassette]) -> None:
    sent = [e for _, e in bundled["anthropic-messages"].interactions[1].response.events()]
    in_text = next(n for n, e in enumerate(sent) if e.event == "content_block_delta" and '"text_delta"' in e.data) + 1
    encoder = MESSAGES.encoder()
    encoder.resume(sent[:in_text])
    assert [json.loads(e.data) for e in events_of(*encoder.feed(ToolCallStart(0, "toolu_9", "f")))] == [
        {"type": "content_block_stop", "index": 1},  # the text block open on the wire closes
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_9", "name": "f", "input": {}},
        },
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ""}},
    ]  # and no second ping


def test_thinking_is_a_signed_block_of_its_own() -> None:
    events = [
        Start("msg_1", "m"),
        ReasoningDelta("Hmm."),
        ReasoningSignature("EqQB"),
        ReasoningDelta("Again."),
        TextDelta("Hi"),
        Finish(),
        Usage(5, 9, 4),
    ]
    sse = frames_of(events)
    blocks = [json.loads(e.data)["content_block"]["type"] for e in sse if e.event == "content_block_start"]
    assert blocks == ["thinking", "thinking", "text"]  # a signature ends its block; reasoning after it opens another
    assert MESSAGES.decode(sse) == events
    assert MESSAGES.check(sse) == []


def test_a_refusal_is_the_stops_explanation_and_a_content_filter_its_reason() -> None:
    refused = frames_of(
        [
            Start("msg_1", "m"),
            TextDelta("Sure, "),
            RefusalDelta("I can't help"),
            RefusalDelta(" with that."),
            Finish(),
            Usage(5, 9),
        ]
    )
    stopped = json.loads(next(e.data for e in refused if e.event == "message_delta"))["delta"]
    assert stopped == {
        "stop_reason": "refusal",
        "stop_sequence": None,
        "stop_details": {"type": "refusal", "category": None, "explanation": "I can't help with that."},
    }
    assert MESSAGES.decode(refused)[2:4] == [RefusalDelta("I can't help with that."), Finish("content_filter")]
    filtered = frames_of([Start("msg_1", "m"), TextDelta("Sure"), Finish("content_filter")])
    assert (
        json.loads(next(e.data for e in filtered if e.event == "message_delta"))["delta"]["stop_details"]["explanation"]
        is None
    )
    assert Finish("content_filter") in MESSAGES.decode(filtered)


# --- requests --------------------------------------------------------------------------------------------


def test_a_request_in_other_words_and_back(bundled: dict[str, Cassette]) -> None:
    after = json.loads(bundled["anthropic-messages"].interactions[2].request.body)
    prompt = MESSAGES.prompt(
        {**after, "system": [{"type": "text", "text": "Be brief."}], "tool_choice": {"type": "any"}}
    )
    assert prompt.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What's the weather in Tokyo?"},
        {
            "role": "assistant",
            "content": "I'll check the current weather in Tokyo for you.",
            "tool_calls": [
                {
                    "id": "toolu_01A09q90qw90lq917835lq9",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Tokyo"}'},
                }
            ],
        },
        {"role": "tool", "content": "18°C, sunny", "tool_call_id": "toolu_01A09q90qw90lq917835lq9"},
    ]
    assert (prompt.max_tokens, prompt.tool_choice, [t["name"] for t in prompt.tools]) == (
        16000,
        "required",
        ["get_weather"],
    )
    again = MESSAGES.request_body(prompt)
    assert again["system"] == "Be brief."
    assert again["tool_choice"] == {"type": "any"}
    assert again["tools"] == after["tools"]
    assert again["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "I'll check the current weather in Tokyo for you."},
                {
                    "type": "tool_use",
                    "id": "toolu_01A09q90qw90lq917835lq9",
                    "name": "get_weather",
                    "input": {"city": "Tokyo"},
                },
            ],
        },  # the thinking block is not carried: only its server can check its signature
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "18°C, sunny"}
            ],
        },
    ]


def test_a_request_translated_from_chat_says_how_many_tokens_it_allows(bundled: dict[str, Cassette]) -> None:
    greeting = translate(bundled["openai-chat"].interactions[0], MESSAGES).request
    assert json.loads(greeting.body)["max_tokens"] == 16  # as the chat request said
    unbounded = Interaction(
        Request("POST", "/v1/chat/completions", body=b'{"model": "m", "messages": [], "stream": true}'),
        bundled["openai-chat"].interactions[0].response,
    )
    assert json.loads(translate(unbounded, MESSAGES).request.body) == {
        "model": "m",
        "max_tokens": 4096,
        "messages": [],
        "stream": True,
    }


THOUGHT = "The user wants the current weather in Tokyo. I have a get_weather tool that takes a city, so I'll call it with Tokyo."


# --- the SDK reads the bundled cassette ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(instant_server: MockServer) -> Iterator[anthropic.Anthropic]:
    with anthropic_client(instant_server.url) as client:
        yield client


def asked(bundled: dict[str, Cassette], n: int) -> dict[str, Any]:
    """A recorded request's body, less `stream` (the SDK sets it)."""
    return {
        k: v for k, v in json.loads(bundled["anthropic-messages"].interactions[n].request.body).items() if k != "stream"
    }


def fault(spec: str) -> dict[str, Any]:
    return {"extra_headers": {"X-SSE-Tape-Fault": spec}}


def test_the_sdk_streams_the_greeting(client: anthropic.Anthropic, bundled: dict[str, Cassette]) -> None:
    with client.messages.stream(**asked(bundled, 0)) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Hello! How can I help you today?"
    assert (final.id, final.stop_reason, final.usage.input_tokens, final.usage.output_tokens) == (
        "msg_01XFDUDYJgAACzvnptvVoYEL",
        "end_turn",
        10,
        12,
    )
    assert stream.request_id == "req_011CVNtP3Vv5u8QkqB2hDc1e"


def test_the_sdk_reassembles_the_thinking_and_the_tool_call(
    client: anthropic.Anthropic, bundled: dict[str, Cassette]
) -> None:
    with client.messages.stream(**asked(bundled, 1)) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    thinking, text, tool = final.content
    assert thinking.type == "thinking"
    assert (
        thinking.thinking
        == "The user wants the current weather in Tokyo. I have a get_weather tool that takes a city, so I'll call it with Tokyo."
    )
    assert thinking.signature.startswith("EqQBCkgIBxABGAIqQ")
    assert (text.type, text.text) == ("text", "I'll check the current weather in Tokyo for you.")
    assert (tool.type, tool.id, tool.name, tool.input) == (
        "tool_use",
        "toolu_01A09q90qw90lq917835lq9",
        "get_weather",
        {"city": "Tokyo"},
    )
    assert final.stop_reason == "tool_use"
    assert {"thinking", "signature", "text", "input_json"} <= set(kinds)
    raw = list(client.messages.create(**asked(bundled, 1), stream=True))
    pieces = [
        e.delta.partial_json for e in raw if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert pieces == ["", '{"city": ', '"Tokyo"}']


def test_the_sdk_gets_the_answer_after_the_tools_result_with_and_without_a_stream(
    client: anthropic.Anthropic, bundled: dict[str, Cassette]
) -> None:
    with client.messages.stream(**asked(bundled, 2)) as stream:
        assert stream.get_final_text() == "It's currently 18°C and sunny in Tokyo."
    plain = client.messages.create(**asked(bundled, 1))  # the recorded stream, as the API answers without one
    assert [block.type for block in plain.content] == ["thinking", "text", "tool_use"]
    assert plain.content[2].input == {"city": "Tokyo"}  # type: ignore[union-attr]
    assert (plain.usage.input_tokens, plain.usage.output_tokens, plain.usage.service_tier) == (412, 98, "standard")


def test_a_recorded_plain_answer_streams_as_the_api_streams_it(bundled: dict[str, Cassette]) -> None:
    streamed = bundled["anthropic-messages"].interactions[1]
    message = MESSAGES.stream_json([e for _, e in streamed.response.events()])
    plain = Interaction(
        replace(streamed.request, body=json.dumps({**asked(bundled, 1), "stream": False}).encode()),
        Response(200, (("content-type", "application/json"),), (Chunk(1.5, json.dumps(message).encode()),)),
    )
    with (
        serve(Cassette([plain]), match_on=["method", "path"], pace="instant") as server,
        anthropic_client(server.url) as sdk,
        sdk.messages.stream(**asked(bundled, 1)) as stream,
    ):
        kinds = {event.type for event in stream}
        final = stream.get_final_message()
    assert final.model_dump() == anthropic.types.Message.model_validate(message).model_dump()
    assert {"thinking", "signature", "text", "input_json"} <= kinds  # each piece streamed as the API sends it


def test_the_sdk_raises_its_own_error_on_the_recorded_overload(
    client: anthropic.Anthropic, bundled: dict[str, Cassette]
) -> None:
    got = []
    with pytest.raises(anthropic.APIStatusError) as raised, client.messages.stream(**asked(bundled, 3)) as stream:
        got += stream.text_stream
    assert "".join(got) == "Waves fold into foam—\nsalt wind"
    assert (raised.value.type, raised.value.api_message) == ("overloaded_error", "Overloaded")


# --- faults, in the API's own words ---------------------------------------------------------------------------


def test_the_sdk_raises_its_own_error_on_an_injected_one(
    client: anthropic.Anthropic, bundled: dict[str, Cassette]
) -> None:
    got = []
    spec = "error:at=5,type=overloaded_error,message=Overloaded"
    with (
        pytest.raises(anthropic.APIStatusError) as raised,
        client.messages.stream(**asked(bundled, 0), **fault(spec)) as stream,
    ):
        got += stream.text_stream
    assert "".join(got) == "Hello! How can I help you"
    assert (raised.value.type, raised.value.api_message) == ("overloaded_error", "Overloaded")
    with pytest.raises(anthropic.APIStatusError) as default:
        for _ in client.messages.create(**asked(bundled, 0), stream=True, **fault("error")):
            pass
    assert (default.value.type, default.value.api_message) == ("api_error", "injected by sse-tape")


@pytest.mark.parametrize(("status", "error"), [(429, anthropic.RateLimitError), (529, anthropic.OverloadedError)])
def test_the_sdk_retries_a_429_and_an_overload_as_its_policy_says(
    bundled: dict[str, Cassette], status: int, error: type[Exception]
) -> None:
    spec = f"status:code={status},retry_after=1,times=1"
    with (
        serve(pace="instant", faults=[spec]) as running,
        anthropic_client(running.url, max_retries=0) as once,
        pytest.raises(error) as raised,
    ):
        once.messages.create(**asked(bundled, 0))
    assert raised.value.type == ("rate_limit_error" if status == 429 else "overloaded_error")  # type: ignore[attr-defined]
    with serve(pace="instant", faults=[spec]) as running, anthropic_client(running.url, max_retries=2) as retrying:
        answer = retrying.messages.create(**asked(bundled, 0))
        now = running.control.snapshot()
        assert (now.requests, now.injected) == (2, {spec: 1})
    assert answer.content[0].text == "Hello! How can I help you today?"  # type: ignore[union-attr]


def test_the_sdk_does_not_retry_a_bad_request() -> None:
    spec = "status:code=400,message=max_tokens: Field required"
    with serve(pace="instant", faults=[spec]) as running, anthropic_client(running.url, max_retries=2) as client:
        with pytest.raises(anthropic.BadRequestError, match="max_tokens: Field required"):
            client.messages.create(model="m", max_tokens=9, messages=[{"role": "user", "content": "hi"}])
        assert running.control.snapshot().requests == 1


def test_tool_arguments_that_are_not_json_stop_the_sdks_stream(
    client: anthropic.Anthropic, bundled: dict[str, Cassette]
) -> None:
    with (
        pytest.raises(ValueError, match="Unable to parse tool parameter JSON"),
        client.messages.stream(**asked(bundled, 1), **fault("bad-args")) as stream,
    ):
        stream.until_done()
    with client.messages.stream(**asked(bundled, 1), **fault("bad-args:schema")) as stream:
        assert stream.get_final_message().content[-1].input == {"city": 12345}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("spec", "n", "expected"),
    [
        ("refusal:at=5,message=I can't help with that.", 0, ("refusal", "I can't help with that.")),
        ("content-filter:at=5", 0, ("refusal", None)),
        ("length", 1, ("max_tokens", None)),
        ("empty-answer", 0, ("end_turn", None)),
    ],
)
def test_misbehaviours_are_stops_the_sdk_knows(
    client: anthropic.Anthropic, bundled: dict[str, Cassette], spec: str, n: int, expected: tuple[str, Any]
) -> None:
    with client.messages.stream(**asked(bundled, n), **fault(spec)) as stream:
        final = stream.get_final_message()
    explanation = final.stop_details.explanation if final.stop_details is not None else None
    assert (final.stop_reason, explanation) == expected


def test_reasoning_only_keeps_the_signature(client: anthropic.Anthropic, bundled: dict[str, Cassette]) -> None:
    with client.messages.stream(**asked(bundled, 1), **fault("reasoning-only")) as stream:
        (thinking,) = stream.get_final_message().content
    assert thinking.type == "thinking"
    assert thinking.signature.startswith("EqQBCkgIBxABGAIqQ")


def test_a_second_call_with_the_first_calls_id(client: anthropic.Anthropic, bundled: dict[str, Cassette]) -> None:
    with client.messages.stream(**asked(bundled, 1), **fault("duplicate-tool-id")) as stream:
        calls = [b for b in stream.get_final_message().content if b.type == "tool_use"]
    assert [(c.id, c.input) for c in calls] == [("toolu_01A09q90qw90lq917835lq9", {"city": "Tokyo"})] * 2


def test_a_call_a_fault_adds_has_an_id_as_the_api_makes_one(
    client: anthropic.Anthropic, bundled: dict[str, Cassette]
) -> None:
    with client.messages.stream(**asked(bundled, 0), **fault("unknown-tool")) as stream:
        (call,) = stream.get_final_message().content
    assert (call.type, call.name) == ("tool_use", "sse_tape_unknown_tool")
    assert re.fullmatch(r"toolu_01[A-Za-z0-9]{22}", call.id)


# --- streams of every other API, translated, and this one's translated for theirs --------------------------------


def _translations(bundled: dict[str, Cassette]) -> Iterator[tuple[str, Interaction]]:
    for stem, cassette in bundled.items():
        for n, interaction in enumerate(cassette):
            if stem != "anthropic-messages" and interaction.response.status == 200:
                yield f"{stem}#{n}", interaction


def _phase_of(interaction: Interaction) -> dict[str, Any]:
    """The messages and tools of a recorded request, for the SDK to send again."""
    body = interaction.request.json()
    return {key: body[key] for key in ("messages", "tools", "tool_choice") if key in body}


def test_the_sdk_reads_every_bundled_stream_translated_into_this_api(bundled: dict[str, Cassette]) -> None:
    read = 0
    for where, interaction in _translations(bundled):
        source = detect(interaction)
        assert source is not None
        framing = framing_of(interaction) or SSE  # Bedrock's event stream, SSE for the others
        answer = Answer.of(source.decode(e for _, e in framing.events(interaction.response.chunks)))
        translated = translate(interaction, MESSAGES)
        prefix = translated.request.path.removesuffix(MESSAGES.path)  # a router's /proj_ABC123/my-endpoint
        with (
            serve(Cassette([translated]), match_on=["method", "path"], pace="instant") as server,
            anthropic_client(server.url + prefix) as sdk,
            # The conversation and tools of the recording's phase: a tool call answers only a request offering it.
            sdk.messages.stream(model="m", max_tokens=9, **_phase_of(translated)) as stream,
        ):
            if answer.error is not None:
                with pytest.raises(anthropic.APIStatusError, match=answer.error.message):
                    stream.until_done()
                continue
            final = stream.get_final_message()
        blocks = final.content
        assert "".join(b.text for b in blocks if b.type == "text") == answer.text, where
        assert "".join(b.thinking for b in blocks if b.type == "thinking") == answer.reasoning, where
        calls = [(c.name, json.loads(c.arguments)) for c in answer.client_calls()]
        assert [(b.name, b.input) for b in blocks if b.type == "tool_use"] == calls, where
        explanation = final.stop_details.explanation if final.stop_details is not None else None
        assert (explanation or "") == answer.refusal, where
        read += 1
    assert read >= 8


def test_the_openai_sdk_reads_the_thinking_and_the_call_translated_for_it(bundled: dict[str, Cassette]) -> None:
    tool_call = bundled["anthropic-messages"].interactions[1]
    chat = Cassette([translate(tool_call, DIALECTS["openai-chat"])])
    responses = Cassette([translate(tool_call, DIALECTS["openai-responses"])])
    with (
        serve(chat, responses, match_on=["method", "path"], pace="instant") as server,
        openai_client(server.url + "/v1") as sdk,
    ):
        offered = chat.interactions[0].request.json()["tools"]  # the call answers only a request offering its tool
        asked = [{"role": "user", "content": "?"}]
        with sdk.chat.completions.stream(model="m", messages=asked, tools=offered) as stream:
            message = stream.get_final_completion().choices[0].message
        tools = responses.interactions[0].request.json()["tools"]
        with sdk.responses.stream(model="m", input="?", tools=tools) as events:
            response = events.get_final_response()
    assert getattr(message, "reasoning_content", None) == THOUGHT
    assert message.content == "I'll check the current weather in Tokyo for you."
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []] == [
        ("toolu_01A09q90qw90lq917835lq9", "get_weather", '{"city": "Tokyo"}')
    ]
    assert [item.type for item in response.output] == ["reasoning", "message", "function_call"]


# --- recorded, and shown ----------------------------------------------------------------------------------


def test_recorded_through_the_proxy_as_the_api_sent_it_with_its_secrets_kept_out(
    bundled: dict[str, Cassette], tmp_path: Path
) -> None:
    sent = bundled["anthropic-messages"].interactions[1]
    headers = (*sent.response.headers, ("anthropic-organization-id", "org-SECRET-5"))
    api = Cassette([replace(sent, response=replace(sent.response, headers=headers))])  # stands in for the API
    with (
        serve(api, match_on=["method", "path"], pace="instant") as upstream,
        recording(tmp_path / "c.toml", upstream.url) as proxy,
        anthropic_client(proxy.url, api_key="sk-ant-SECRET-9") as sdk,
        sdk.messages.stream(**asked(bundled, 1)) as stream,
    ):
        live = stream.get_final_message()
    (recorded,) = Cassette.load(tmp_path / "c.toml").interactions
    assert recorded.response.body == sent.response.body
    # The SDK sends its key as `x-api-key` or, as this one does, `Authorization`.
    assert REDACTED in (recorded.request.header("x-api-key"), recorded.request.header("authorization"))
    assert recorded.response.header("anthropic-organization-id") == REDACTED
    assert "SECRET" not in (tmp_path / "c.toml").read_text()
    with (
        serve(tmp_path / "c.toml") as replay,
        anthropic_client(replay.url) as sdk,
        sdk.messages.stream(**asked(bundled, 1)) as stream,
    ):
        assert stream.get_final_message() == live


def test_show_puts_the_answer_together() -> None:
    shown = CliRunner().invoke(cli, ["show", "cassettes/anthropic-messages.toml"]).output.splitlines()
    assert "   asked (user): 18°C, sunny" in shown  # the tool's result the turn answers
    assert f"   reasoning: {THOUGHT}" in shown
    assert '   tool call: get_weather({"city": "Tokyo"}) [toolu_01A09q90qw90lq917835lq9]' in shown
    assert "   error: Overloaded (overloaded_error)" in shown


def test_check_live_tells_the_api_by_its_path(instant_server: MockServer, bundled: dict[str, Cassette]) -> None:
    url = instant_server.url + "/v1/messages"
    for n in (0, 3):  # the greeting, and the one overloaded mid-stream: an error event may end a stream
        body = bundled["anthropic-messages"].interactions[n].request.body.decode()
        result = CliRunner().invoke(cli, ["check", "--live", url, "-d", body])
        assert (result.exit_code, result.output.splitlines()) == (
            0,
            [f"{url} #1 POST /v1/messages (anthropic-messages): ok", "checked 1 interaction: 0 violations"],
        )


# What each other API cannot carry of the bundled cassette: convert refuses to leave it out unless told to.
LOST = {"lmstudio-chat": "tool calls (get_weather)", "openai-completions": "tool calls (get_weather) and reasoning"}


@pytest.mark.parametrize(
    "target", sorted(n for n, d in DIALECTS.items() if isinstance(d, Generation) and n != "anthropic-messages")
)
def test_convert_makes_the_bundled_cassette_a_clean_one_of_each_other_api(tmp_path: Path, target: str) -> None:
    out = tmp_path / "translated.toml"
    convert = ["convert", "cassettes/anthropic-messages.toml", str(out), "--to-dialect", target]
    if target in LOST:
        refused = CliRunner().invoke(cli, convert)
        assert refused.exit_code == 2
        assert f"#2 (POST /v1/messages): {target} cannot carry its {LOST[target]}; nothing written" in refused.output
        assert not out.exists()
        convert.append("--lossy")
    converted = CliRunner().invoke(cli, convert)
    assert converted.exit_code == 0, converted.output
    checked = CliRunner().invoke(cli, ["check", str(out)])
    assert (checked.exit_code, checked.output.splitlines()[-1]) == (0, "checked 4 interactions: 0 violations")


def test_the_sdk_asking_for_a_translated_greeting_gets_it_whatever_its_max_tokens(bundled: dict[str, Cassette]) -> None:
    # Translated from chat, the greeting says max_tokens 16 (its source did) and the tool call and the turn
    # after it 4096 (theirs said none). The same conversation must outweigh the same max_tokens.
    translated = Cassette([translate(i, MESSAGES) for i in bundled["openai-chat"].interactions])
    translated.match_on = (MatchOn.METHOD, MatchOn.PATH)
    with serve(translated, pace="instant") as server:
        message = anthropic_client(server.url).messages.create(
            model="local-model", max_tokens=4096, messages=[{"role": "user", "content": "Hello!"}]
        )
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "Hi there! How can I help you today?"


def test_the_sdk_raises_overloaded_for_a_plain_call_a_failed_stream_answers(client: anthropic.Anthropic) -> None:
    # The bytes are checked in test_dialects; here the anthropic SDK reads them as it reads Anthropic's.
    with pytest.raises(anthropic.OverloadedError) as raised:
        client.messages.create(model="claude-opus-4-7", max_tokens=1024, messages=[{"role": "user", "content": "Hi"}])
    assert raised.value.status_code == 529
    assert raised.value.body == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def test_the_sdk_lists_and_gets_the_recordings_models_in_anthropics_shape(client: anthropic.Anthropic) -> None:
    page = client.models.list()
    one = client.models.retrieve("claude-opus-4-7")
    with pytest.raises(anthropic.NotFoundError) as unknown:
        client.models.retrieve("local-model")  # an OpenAI recording's model: not one of this API's
    assert [(m.type, m.id, m.display_name) for m in page] == [
        ("model", "claude-sonnet-4-6", "Claude Sonnet 4.6"),
        ("model", "claude-opus-4-7", "Claude Opus 4.7"),
    ]
    assert (page.has_more, page.first_id, page.last_id) == (False, "claude-sonnet-4-6", "claude-opus-4-7")
    assert (one.id, one.display_name, one.created_at) == (
        "claude-opus-4-7",
        "Claude Opus 4.7",
        datetime(1970, 1, 1, tzinfo=UTC),
    )
    assert unknown.value.body == {
        "type": "error",
        "error": {
            "details": {"error_code": "model_not_found"},
            "type": "not_found_error",
            "message": "sse-tape: no model 'local-model' here: claude-sonnet-4-6, claude-opus-4-7",
        },
    }


def test_a_model_dated_in_its_id_was_made_that_day() -> None:
    dated = MESSAGES.model_json("claude-3-5-sonnet-20241022")
    assert dated == {
        "type": "model",
        "id": "claude-3-5-sonnet-20241022",
        "display_name": "Claude 3.5 Sonnet",
        "created_at": "2024-10-22T00:00:00Z",
    }
