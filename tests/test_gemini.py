"""The gemini dialect: its framing, its paths and requests, and the official google-genai SDK reading what
sse-tape serves in it (bundled, translated, faulted, retried). Its check rules, detection and error bodies are
cases of test_dialects.py's tests over every dialect."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import processes
import pytest
from clients import gemini_client
from google.genai import errors, types
from upstream import Upstream

from sse_tape import (
    Cassette,
    Chunk,
    Interaction,
    Request,
    Response,
    bundled_cassettes,
    recording,
    serve,
)
from sse_tape.dialects import DIALECTS, Answer, detect, for_path
from sse_tape.dialects.events import (
    Error,
    Event,
    Finish,
    Start,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from sse_tape.framing import SSE
from sse_tape.matching import framing_of
from sse_tape.server import run_in_thread
from sse_tape.sse import ServerSentEvent
from sse_tape.translation import translate

GEMINI = DIALECTS["gemini"]
PATH = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
MODEL = "gemini-2.5-flash"
GREETING = "Hello! How can I help you today?"


CALL = {"functionCall": {"name": "get_weather", "args": {"city": "Tokyo"}}}


# --- check (each rule with its message: test_dialects.py's test_rules) ------------------------------------


def test_the_bundled_cassette_keeps_the_contract(bundled: dict[str, Cassette]) -> None:
    for interaction in bundled["gemini"]:
        assert GEMINI.check([e for _, e in interaction.response.events()], interaction.request) == []


# --- framing -----------------------------------------------------------------------------------------------


BEFORE: list[Event] = [Start("r1", MODEL), TextDelta("Hi")]


def test_error_frames_end_the_stream_with_the_error_chunk() -> None:
    frames = GEMINI.error_frames(Error("The model is overloaded.", "overloaded_error"), BEFORE)
    assert frames == [
        b'data: {"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}\r\n\r\n'
    ]
    # A code that is a status is that status; another is an ErrorInfo reason, as the API gives its own.
    assert json.loads(GEMINI.error_frames(Error("slow", code="RESOURCE_EXHAUSTED"), BEFORE)[0][6:]) == {
        "error": {"code": 429, "message": "slow", "status": "RESOURCE_EXHAUSTED"}
    }
    assert json.loads(GEMINI.error_frames(Error("boom", code="c7"), BEFORE)[0][6:])["error"] == {
        "code": 500,
        "message": "boom",
        "status": "INTERNAL",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "c7",
                "domain": "generativelanguage.googleapis.com",
            }
        ],
    }


def test_the_last_chunk_waits_for_the_usage_that_follows_the_finish() -> None:
    encoder = GEMINI.encoder()
    assert [encoder.feed(e) for e in (Start("r1", MODEL), TextDelta("Hi"))][1] != []
    assert encoder.feed(Finish()) == []
    (last,) = encoder.feed(Usage(5, 12, reasoning_tokens=10))
    assert json.loads(last[6:]) == {
        "candidates": [{"content": {"parts": [{"text": ""}], "role": "model"}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {
            "promptTokenCount": 5,
            "candidatesTokenCount": 2,
            "totalTokenCount": 17,
            "thoughtsTokenCount": 10,
        },
        "modelVersion": MODEL,
        "responseId": "r1",
    }
    assert encoder.close() == []


def test_a_call_is_sent_whole_when_it_ends_and_never_when_cut_short() -> None:
    events: list[Event] = [Start("r1", MODEL), ToolCallStart(0, "", "f"), ToolCallDelta(0, '{"a":')]
    events.append(ToolCallDelta(0, " 1}"))
    frames = GEMINI.encode([*events, ToolCallEnd(0), Finish("tool_calls")])
    assert json.loads(frames[0][6:])["candidates"][0]["content"]["parts"] == [
        {"functionCall": {"name": "f", "args": {"a": 1}}}
    ]
    cut = GEMINI.encode([*events[:3], Finish("length")])  # the API sends a call whole or not at all
    assert [json.loads(f[6:])["candidates"][0]["finishReason"] for f in cut] == ["MAX_TOKENS"]


# --- paths and requests ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "stream", "model"),
    [
        (PATH, True, MODEL),
        ("/v1beta/models/gemini-2.5-flash:generateContent", False, MODEL),
        ("/v1/models/gemini-2.0-flash:streamGenerateContent", True, "gemini-2.0-flash"),
        ("/v1beta/tunedModels/my-tune:generateContent", False, "my-tune"),
        (
            "/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-pro:streamGenerateContent",
            True,
            "gemini-2.5-pro",
        ),
        ("/v1beta/models/openai/gpt-oss-20b:streamGenerateContent", True, "openai/gpt-oss-20b"),
    ],
)
def test_the_path_names_the_dialect_the_model_and_the_stream(path: str, stream: bool, model: str) -> None:
    assert for_path(path) is GEMINI
    assert GEMINI.wants_stream({"contents": []}, path) is stream
    assert GEMINI.request_prompt({"contents": []}, path).model == model


def test_a_request_as_a_prompt_and_back() -> None:
    body = {
        "contents": [
            {"parts": [{"text": "Weather in Tokyo?"}], "role": "user"},
            {"parts": [CALL], "role": "model"},
            {"parts": [{"functionResponse": {"name": "get_weather", "response": {"temp": 18}}}], "role": "user"},
        ],
        "systemInstruction": {"parts": [{"text": "Be brief."}], "role": "user"},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "get_weather",
                        "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}},
                    }
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}},
        "generationConfig": {
            "temperature": 0.5,
            "maxOutputTokens": 64,
            "stopSequences": ["END"],
            "thinking_config": {},
        },
    }
    prompt = GEMINI.prompt(body)
    assert prompt.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Tokyo?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Tokyo"}'},
                }
            ],
        },
        {"role": "tool", "content": '{"temp":18}', "tool_call_id": "call_0"},
    ]
    assert prompt.tools == [
        {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    ]
    assert (prompt.tool_choice, prompt.temperature, prompt.max_tokens, prompt.stop) == ("get_weather", 0.5, 64, ["END"])
    assert GEMINI.request_body(prompt) == {
        "contents": [
            {"role": "user", "parts": [{"text": "Weather in Tokyo?"}]},
            {
                "role": "model",
                "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Tokyo"}, "id": "call_0"}}],
            },
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "get_weather", "response": {"temp": 18}, "id": "call_0"}}],
            },
        ],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "get_weather",
                        "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}},
                    }
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}},
        "generationConfig": {"temperature": 0.5, "maxOutputTokens": 64, "stopSequences": ["END"]},
    }


def test_calls_without_ids_get_one_each_and_a_response_answers_the_last_call_of_its_name() -> None:
    body = {
        "contents": [
            {"role": "model", "parts": [CALL, CALL, {"functionCall": {"name": "get_time"}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"temp": 18}}}]},
        ]
    }
    assistant, tool = GEMINI.prompt(body).messages
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_0", "call_1", "call_2"]
    assert assistant["tool_calls"][2]["function"]["arguments"] == "{}"
    assert tool["tool_call_id"] == "call_1"


def test_translation_puts_the_model_in_the_path_and_asks_for_sse(bundled: dict[str, Cassette]) -> None:
    tools = bundled["openai-chat"].interactions[1]
    request = translate(tools, GEMINI).request
    assert (request.path, request.query) == ("/v1beta/models/local-model:streamGenerateContent", "alt=sse")
    assert json.loads(request.body) == {
        "contents": [{"role": "user", "parts": [{"text": "Weather in Tokyo?"}]}],
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "get_weather",
                        "description": "Get weather for a city",
                        "parametersJsonSchema": {
                            "type": "object",
                            "properties": {"city": {"type": "string"}},
                            "required": ["city"],
                        },
                    }
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
    }
    back = translate(bundled["gemini"].interactions[0], DIALECTS["openai-chat"]).request
    assert (back.path, back.query, json.loads(back.body)["model"]) == ("/v1/chat/completions", "", MODEL)


# --- the official SDK --------------------------------------------------------------------------------------


@dataclass
class Read:
    """What the SDK gave for a stream: its answer text, thoughts and function calls, and its chunks."""

    text: str = ""
    thoughts: str = ""
    calls: list[tuple[str | None, dict[str, Any] | None]] = field(default_factory=list)
    chunks: list[types.GenerateContentResponse] = field(default_factory=list)


def read(stream: Any, got: Read | None = None) -> Read:
    """What the SDK made of a stream; `got` keeps what came before an exception."""
    got = Read() if got is None else got
    for response in stream:
        got.chunks.append(response)
        content = response.candidates[0].content if response.candidates else None
        for part in (content.parts if content is not None else None) or []:
            if part.thought and part.text:
                got.thoughts += part.text
            elif part.text:
                got.text += part.text
            elif part.function_call is not None:
                got.calls.append((part.function_call.name, part.function_call.args))
    return got


WEATHER = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="get_weather",
            description="Get weather for a city",
            parameters=types.Schema(type=types.Type.OBJECT, properties={"city": types.Schema(type=types.Type.STRING)}),
        )
    ]
)
# The SDK would run a Python function itself; these tools are declarations only.
MANUAL = types.AutomaticFunctionCallingConfig(disable=True)
# What the bundled cassette's haiku, which fails mid-stream with 503 UNAVAILABLE, was asked with.
FAILING = types.GenerateContentConfig(
    temperature=1.2,
    safety_settings=[
        types.SafetySetting(
            category=types.HarmCategory.HARM_CATEGORY_DANGEROUS_CONTENT,
            threshold=types.HarmBlockThreshold.BLOCK_ONLY_HIGH,
        )
    ],
)


def test_the_sdk_streams_every_interaction_of_the_bundled_cassette(bundled: dict[str, Cassette]) -> None:
    with serve(bundled["gemini"], pace="instant") as server, gemini_client(server.url) as client:
        greeting = read(client.models.generate_content_stream(model=MODEL, contents="Hello!"))
        tools = types.GenerateContentConfig(tools=[WEATHER], automatic_function_calling=MANUAL)
        call = read(client.models.generate_content_stream(model=MODEL, contents="Weather in Tokyo?", config=tools))
        turn = [
            types.Content(role="user", parts=[types.Part(text="Weather in Tokyo?")]),
            types.Content(role="model", parts=[types.Part(function_call=call.chunks[0].function_calls[0])]),  # type: ignore[index]
            types.Content(
                role="user",
                parts=[types.Part.from_function_response(name="get_weather", response={"temperature_c": 18})],
            ),
        ]
        after = read(client.models.generate_content_stream(model=MODEL, contents=turn, config=tools))
        thinking = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(include_thoughts=True))
        thought = read(client.models.generate_content_stream(model=MODEL, contents="Even primes?", config=thinking))
        usage = thought.chunks[-1].usage_metadata
        haiku = ""
        with pytest.raises(errors.ServerError) as raised:  # noqa: PT012 (the chunks before it count)
            for response in client.models.generate_content_stream(model=MODEL, contents="A haiku", config=FAILING):
                haiku += response.text or ""
    assert (greeting.text, greeting.thoughts, greeting.calls) == (GREETING, "", [])
    assert greeting.chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP  # type: ignore[index]
    assert (call.text, call.calls) == ("", [("get_weather", {"city": "Tokyo"})])
    assert call.chunks[0].candidates[0].content.parts[0].thought_signature  # type: ignore[index, union-attr]
    assert after.text == "It's 18°C and sunny in Tokyo right now."
    assert thought.thoughts.startswith("**Examining even primes**\n\nI'm looking at")
    assert thought.text.endswith("2 is the only even prime number.")
    assert usage is not None
    assert (usage.prompt_token_count, usage.candidates_token_count, usage.thoughts_token_count) == (14, 40, 247)
    assert haiku == "Waves fold into foam,\nsalt wind carries the"
    assert (raised.value.code, raised.value.status) == (503, "UNAVAILABLE")
    assert raised.value.message == "The model is overloaded. Please try again later."


def test_the_sdk_gets_a_recorded_stream_as_one_answer_from_generate_content(bundled: dict[str, Cassette]) -> None:
    with serve(bundled["gemini"], pace="instant") as server, gemini_client(server.url) as client:
        answer = client.models.generate_content(model=MODEL, contents="Hello!")
        requests = [(r.path, r.query) for r in server.control.snapshot().received]
    assert requests == [("/v1beta/models/gemini-2.5-flash:generateContent", "")]
    assert answer.text == GREETING
    assert answer.response_id == "qGkzadPvL4u7nvgP1b3ZuAs"
    assert answer.usage_metadata is not None
    assert (answer.usage_metadata.prompt_token_count, answer.usage_metadata.total_token_count) == (2, 35)


def test_the_sdk_reads_every_other_bundled_cassette_translated_to_gemini(bundled: dict[str, Cassette]) -> None:
    read_count = 0
    for name, cassette in bundled.items():
        if name == "gemini":
            continue
        for interaction in cassette:
            source = detect(interaction)
            assert source is not None
            framing = framing_of(interaction) or SSE  # Bedrock's event stream, SSE for the others
            recorded = Answer.of(source.decode(e for _, e in framing.events(interaction.response.chunks)))
            translated = translate(interaction, GEMINI)
            model = GEMINI.request_prompt(translated.request.json(), translated.request.path).model
            prefix = translated.request.path.split("/v1beta/")[0]  # a router's /proj_ABC123/my-endpoint stays
            got, raised = Read(), None
            with (
                serve(Cassette([translated]), match_on=["method", "path"], pace="instant") as server,
                gemini_client(server.url + prefix) as client,
            ):
                try:
                    # The conversation and tools of the recording's phase: a call answers only a request
                    # offering its tool.
                    body = translated.request.json()
                    config = {"tools": body["tools"]} if "tools" in body else None
                    read(
                        client.models.generate_content_stream(model=model, contents=body["contents"], config=config),
                        got,
                    )
                except errors.APIError as exc:
                    raised = exc
            assert (raised is None) == (recorded.error is None), (name, interaction, raised)
            if raised is not None and recorded.error is not None:
                assert raised.message == recorded.error.message, (name, interaction)
            assert got.text == recorded.text + recorded.refusal, (name, interaction)
            assert got.thoughts == recorded.reasoning, (name, interaction)
            assert got.calls == [(c.name, json.loads(c.arguments)) for c in recorded.client_calls()], (
                name,
                interaction,
            )
            read_count += 1
    assert read_count >= 12


def test_the_sdk_raises_its_own_errors_on_an_error_injected_mid_stream(bundled: dict[str, Cassette]) -> None:
    greeting = Cassette([bundled["gemini"].interactions[0]], match_on=bundled["gemini"].match_on)
    got: list[str] = []
    faults = ["error:at=1,message=boom,times=1", "error:at=1,code=RESOURCE_EXHAUSTED,message=slow down"]
    with (  # noqa: PT012 (the chunks before the error count)
        serve(greeting, pace="instant", faults=faults[:1]) as server,
        gemini_client(server.url) as client,
        pytest.raises(errors.ServerError) as server_error,
    ):
        for response in client.models.generate_content_stream(model=MODEL, contents="Hello!"):
            got.append(response.text or "")
    with (
        serve(greeting, pace="instant", faults=faults[1:]) as server,
        gemini_client(server.url) as client,
        pytest.raises(errors.ClientError) as client_error,
    ):
        list(client.models.generate_content_stream(model=MODEL, contents="Hello!"))
    assert got == ["Hello"]  # the first event as recorded, then the error
    assert (server_error.value.code, server_error.value.status, server_error.value.message) == (500, "INTERNAL", "boom")
    assert (client_error.value.code, client_error.value.status) == (429, "RESOURCE_EXHAUSTED")


@pytest.mark.parametrize(("status", "word"), [(429, "RESOURCE_EXHAUSTED"), (503, "UNAVAILABLE")])
def test_the_sdk_retries_a_429_or_503_when_its_retry_policy_says_so(
    bundled: dict[str, Cassette], status: int, word: str
) -> None:
    greeting = Cassette([bundled["gemini"].interactions[0]], match_on=bundled["gemini"].match_on)
    fault = [f"status:code={status},times=1"]
    retry = types.HttpRetryOptions(attempts=3, initial_delay=0, max_delay=0, jitter=0)
    with serve(greeting, pace="instant", faults=fault) as server, gemini_client(server.url, retry=retry) as client:
        retried = read(client.models.generate_content_stream(model=MODEL, contents="Hello!"))
        assert server.control.snapshot().requests == 2
    # Without a retry policy (the SDK's default) it raises at once, with the status and its word.
    with serve(greeting, pace="instant", faults=fault) as server, gemini_client(server.url) as client:
        with pytest.raises(errors.APIError) as raised:
            list(client.models.generate_content_stream(model=MODEL, contents="Hello!"))
        assert server.control.snapshot().requests == 1
    assert retried.text == GREETING
    assert (raised.value.code, raised.value.status) == (status, word)
    assert isinstance(raised.value, errors.ClientError if status < 500 else errors.ServerError)


def test_the_sdk_does_not_retry_a_status_its_policy_does_not_name(bundled: dict[str, Cassette]) -> None:
    greeting = Cassette([bundled["gemini"].interactions[0]], match_on=bundled["gemini"].match_on)
    retry = types.HttpRetryOptions(attempts=3, initial_delay=0, max_delay=0, jitter=0)
    with serve(greeting, pace="instant", faults=["status:code=400,times=1"]) as server:
        with gemini_client(server.url, retry=retry) as client, pytest.raises(errors.ClientError) as raised:
            list(client.models.generate_content_stream(model=MODEL, contents="Hello!"))
        assert server.control.snapshot().requests == 1
    assert (raised.value.code, raised.value.status) == (400, "INVALID_ARGUMENT")


def test_a_recorded_json_answer_streams_to_the_sdk() -> None:
    body = GEMINI.response_json([Start("r9", MODEL), TextDelta("One whole answer, cut into pieces."), Finish()])
    recorded = Interaction(
        Request("POST", "/v1beta/models/gemini-2.5-flash:generateContent", body=b'{"contents": []}'),
        Response(200, (("content-type", "application/json"),), (Chunk(0.2, json.dumps(body).encode()),)),
    )
    with (
        serve(Cassette([recorded]), match_on=["method", "path"], pace="instant") as server,
        gemini_client(server.url) as client,
    ):
        got = read(client.models.generate_content_stream(model=MODEL, contents="?"))
    assert got.text == "One whole answer, cut into pieces."
    assert len(got.chunks) > 3


def test_show_says_what_each_gemini_request_asked() -> None:
    cassette = next(p for p in bundled_cassettes() if p.name == "gemini.toml")
    result = subprocess.run(
        [sys.executable, "-m", "sse_tape", "show", str(cassette)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert [line for line in result.stdout.splitlines() if line.startswith("   asked ")] == [
        "   asked (user): Hello!",
        "   asked (user): Weather in Tokyo?",
        '   asked (user): {"temperature_c": 18, "conditions": "sunny"}',  # the function's response the turn answers
        "   asked (user): Is there an even prime greater than 2? Think carefully.",
        "   asked (user): Write a haiku about the sea.",
    ]


def test_the_sdk_raises_its_own_errors_for_a_miss_and_for_a_stream_that_failed(bundled: dict[str, Cassette]) -> None:
    # The bytes are checked in test_dialects; here google-genai reads them as it reads Google's.
    with serve(Cassette()) as server, gemini_client(server.url) as client, pytest.raises(errors.ClientError) as missed:
        client.models.generate_content(model=MODEL, contents="hi")
    with (  # the haiku's stream failed: a plain call gets 503
        serve(bundled["gemini"], pace="instant") as server,
        gemini_client(server.url) as client,
        pytest.raises(errors.ServerError) as failed,
    ):
        client.models.generate_content(model=MODEL, contents="A haiku", config=FAILING)
    assert (missed.value.code, missed.value.status) == (404, "NOT_FOUND")
    assert missed.value.details["error"]["details"][0]["reason"] == "no_match"
    assert (failed.value.code, failed.value.status) == (503, "UNAVAILABLE")
    assert failed.value.message == "The model is overloaded. Please try again later."


# --- every version prefix: /v1/, /v1beta/, /v1alpha/ -------------------------------------------------------

# None: the SDK's own default (v1 in google-genai 1.x and later).
VERSIONS = ["v1", "v1beta", "v1alpha", None]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_sdk_replays_recordings_made_under_v1beta_under_every_version(
    bundled: dict[str, Cassette], version: str | None
) -> None:
    with serve(bundled["gemini"], pace="instant") as server, gemini_client(server.url, api_version=version) as client:
        streamed = read(client.models.generate_content_stream(model=MODEL, contents="Hello!"))
        tools = types.GenerateContentConfig(tools=[WEATHER], automatic_function_calling=MANUAL)
        call = client.models.generate_content(model=MODEL, contents="Weather in Tokyo?", config=tools)
        paths = [r.path for r in server.control.snapshot().received]
    prefix = f"/{version or 'v1'}/models/{MODEL}"
    assert paths == [f"{prefix}:streamGenerateContent", f"{prefix}:generateContent"]
    assert streamed.text == GREETING
    assert [(c.name, c.args) for c in call.function_calls or []] == [("get_weather", {"city": "Tokyo"})]


def test_same_call_path_puts_every_version_under_v1_and_keeps_the_rest() -> None:
    for version in ("v1", "v1beta", "v1alpha"):
        assert (
            GEMINI.same_call_path(f"/{version}/models/{MODEL}:generateContent") == f"/v1/models/{MODEL}:generateContent"
        )
        assert GEMINI.same_call_path(f"/proj/x/{version}/models/{MODEL}:generateContent") == (
            f"/proj/x/v1/models/{MODEL}:generateContent"
        )
    vertex = "/v1beta1/projects/p/locations/global/publishers/google/models/gemini-2.5-pro:streamGenerateContent"
    assert GEMINI.same_call_path(vertex) == vertex.replace("/v1beta1/", "/v1/")
    # A model whose name holds a version is the model's name; a path Gemini does not call is as it came.
    assert GEMINI.same_call_path("/v1beta/models/v1beta/models/m:generateContent") == (
        "/v1/models/v1beta/models/m:generateContent"
    )
    assert GEMINI.same_call_path("/v1beta/files") == "/v1beta/files"


@pytest.mark.parametrize("version", VERSIONS)
def test_the_sdk_lists_and_gets_the_gemini_recordings_models_under_every_version(
    bundled: dict[str, Cassette], version: str | None
) -> None:
    everything = list(bundled.values())  # the other APIs' recordings name models too: not Gemini's
    with serve(*everything, pace="instant") as server, gemini_client(server.url, api_version=version) as client:
        listed = list(client.models.list())
        one = client.models.get(model=MODEL)
        with pytest.raises(errors.ClientError) as unknown:
            client.models.get(model="gemini-9")
    assert [(m.name, m.display_name) for m in listed] == [(f"models/{MODEL}", MODEL)]
    assert one.name == f"models/{MODEL}"
    assert one.supported_actions == ["generateContent", "streamGenerateContent"]
    assert (unknown.value.code, unknown.value.status) == (404, "NOT_FOUND")
    assert unknown.value.message == f"sse-tape: no model 'gemini-9' here: {MODEL}"


def test_v1_models_without_a_google_key_is_still_openais_list(bundled: dict[str, Cassette]) -> None:
    with serve(*bundled.values(), pace="instant") as server:
        openai_list = httpx.get(server.url + "/v1/models").json()
        google_list = httpx.get(server.url + "/v1/models?key=k").json()
        missing = httpx.get(server.url + "/v1/models/gemini-9", headers={"x-goog-api-key": "k"})
    assert openai_list["object"] == "list"
    assert MODEL not in [m["id"] for m in openai_list["data"]]
    assert google_list == {"models": [GEMINI.model_json(MODEL)]}
    assert missing.status_code == 404
    assert missing.json()["error"]["status"] == "NOT_FOUND"


@pytest.mark.parametrize("version", ["v1", "v1beta", "v1alpha"])
def test_errors_before_the_stream_are_googles_under_every_version(bundled: dict[str, Cassette], version: str) -> None:
    url = f"/{version}/models/{MODEL}:streamGenerateContent?alt=sse"
    hello = {"contents": [{"role": "user", "parts": [{"text": "Hello!"}]}]}
    with (
        serve(bundled["gemini"], pace="instant", max_body="10KiB") as server,
        httpx.Client(base_url=server.url) as http,
    ):
        miss = http.post(url.replace(MODEL, "gemini-9"), json=hello)
        large = http.post(url, json={"contents": [{"parts": [{"text": "x" * 20_000}]}]})
        fault = http.post(url, json=hello, headers={"X-SSE-Tape-Fault": "status:code=429"})
        listed = http.get(f"/{version}/models/gemini-9", headers={"x-goog-api-key": "k"})
    for response, status, name in (
        (miss, 404, "NOT_FOUND"),
        (large, 413, "UNKNOWN"),
        (fault, 429, "RESOURCE_EXHAUSTED"),
        (listed, 404, "NOT_FOUND"),
    ):
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert (error["code"], error["status"]) == (status, name), response.text
        assert "type" not in error  # not OpenAI's shape


@pytest.mark.parametrize("version", VERSIONS)
def test_a_miss_under_every_version_raises_the_sdks_error_with_sse_tapes_message(version: str | None) -> None:
    with (
        serve(Cassette()) as server,
        gemini_client(server.url, api_version=version) as client,
        pytest.raises(errors.ClientError) as missed,
    ):
        client.models.generate_content(model=MODEL, contents="hi")
    assert (missed.value.code, missed.value.status) == (404, "NOT_FOUND")
    assert missed.value.message is not None
    assert missed.value.message.startswith(f"sse-tape: no recorded interaction matches POST /{version or 'v1'}/models/")


def test_a_recorder_forwards_the_path_as_sent_and_replays_it_under_every_version(tmp_path: Path) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "Hello!"}]}]}
    cassette = tmp_path / "gemini.toml"
    with run_in_thread(Upstream()) as up, recording(cassette, up.url + "/leaky") as server:
        first = httpx.post(f"{server.url}/v1/models/{MODEL}:streamGenerateContent?alt=sse", json=body)
        again = [
            httpx.post(f"{server.url}/{version}/models/{MODEL}:streamGenerateContent?alt=sse", json=body)
            for version in ("v1beta", "v1alpha")
        ]
    assert [r.text for r in (first, *again)] == ["data: ok\n\n"] * 3
    # Under new_episodes a recording answers once: v1beta's call is the one made under v1, v1alpha's goes on.
    sent = [f"/v1/models/{MODEL}:streamGenerateContent", f"/v1alpha/models/{MODEL}:streamGenerateContent"]
    assert up.seen_paths == [f"/leaky{path}?alt=sse" for path in sent]  # as the client sent them
    assert [i.request.path for i in Cassette.load(cassette).interactions] == sent


def test_the_sdk_with_its_default_version_and_only_a_base_url_works_against_sse_tape_serve() -> None:
    cassette = next(p for p in bundled_cassettes() if p.name == "gemini.toml")
    process, url = processes.start(["serve", str(cassette), "--pace", "instant", "--port", "0", "-q"])
    try:
        with gemini_client(url, api_version=None) as client:
            streamed = read(client.models.generate_content_stream(model=MODEL, contents="Hello!"))
            plain = client.models.generate_content(model=MODEL, contents="Hello!")
            listed = [m.name for m in client.models.list()]
            with pytest.raises(errors.ClientError) as missed:
                client.models.generate_content(model="gemini-9", contents="Hello!")
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert "Traceback" not in err
    assert (streamed.text, plain.text, listed) == (GREETING, GREETING, [f"models/{MODEL}"])
    assert (missed.value.code, missed.value.status) == (404, "NOT_FOUND")
    assert (missed.value.message or "").startswith("sse-tape: no recorded interaction matches POST /v1/models/gemini-9")


def test_the_sdks_plain_answer_keeps_the_streams_signature_finish_message_and_usage_details(
    bundled: dict[str, Cassette],
) -> None:
    # Gemini 3 clients must send a function call's thoughtSignature back: the answer made from the stream has it.
    recorded = json.loads(bundled["gemini"].interactions[1].response.body.decode().removeprefix("data: "))
    [part] = recorded["candidates"][0]["content"]["parts"]
    weather = types.FunctionDeclaration(
        name="get_weather",
        description="Get weather for a city",
        parameters=types.Schema(
            type=types.Type.OBJECT, properties={"city": types.Schema(type=types.Type.STRING)}, required=["city"]
        ),
    )
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[weather])])
    with serve(bundled["gemini"], pace="instant") as server, gemini_client(server.url) as client:
        answer = client.models.generate_content(model=MODEL, contents="Weather in Tokyo?", config=config)
        plain = server.url + PATH.replace(":streamGenerateContent", ":generateContent")
        raw = httpx.post(plain, content=bundled["gemini"].interactions[1].request.body).json()
    assert answer.candidates is not None
    [candidate] = answer.candidates
    assert candidate.content is not None
    assert candidate.content.parts is not None
    [call] = candidate.content.parts
    assert call.function_call is not None
    assert (call.function_call.name, call.function_call.args) == ("get_weather", {"city": "Tokyo"})
    assert call.thought_signature == base64.b64decode(part["thoughtSignature"])
    assert candidate.finish_reason == "STOP"
    # The SDK reads no finishMessage from the Gemini API (only from Vertex): the answer has it all the same.
    assert raw["candidates"][0]["finishMessage"] == "Model generated function call(s)."
    assert raw["candidates"][0]["content"]["parts"] == [part]
    usage = answer.usage_metadata
    assert usage is not None
    assert usage.prompt_tokens_details is not None
    assert [(d.modality, d.token_count) for d in usage.prompt_tokens_details] == [("TEXT", 48)]
    assert (usage.prompt_token_count, usage.candidates_token_count, usage.thoughts_token_count) == (48, 15, 71)
    assert usage.total_token_count == 134


def test_a_plain_answer_joins_the_streams_text_and_keeps_each_other_part_whole() -> None:
    def chunk(parts: list[dict[str, Any]], **more: Any) -> ServerSentEvent:
        body = {"candidates": [{"content": {"parts": parts, "role": "model"}, "index": 0, **more}]}
        return ServerSentEvent(data=json.dumps({**body, "modelVersion": MODEL, "responseId": "r1"}))

    tokens = {"chosenCandidates": [{"token": "It", "logProbability": -0.1}], "topCandidates": [{"candidates": []}]}
    more = {"chosenCandidates": [{"token": "'s", "logProbability": -0.2}], "topCandidates": [{"candidates": []}]}
    events = [
        chunk([{"text": "Think", "thought": True}]),
        chunk([{"text": "ing.", "thought": True}, {"text": "It"}], logprobsResult=tokens),
        chunk([{"text": "'s"}], logprobsResult=more),
        chunk([{"text": "", "thoughtSignature": "c2ln"}]),
        chunk([{**CALL, "thoughtSignature": "Y2FsbA=="}, CALL]),
        chunk([{"text": ""}], finishReason="STOP", finishMessage="Done."),
    ]
    answer = GEMINI.stream_json(events)
    assert answer["candidates"] == [
        {
            "content": {
                "parts": [
                    {"text": "Thinking.", "thought": True},
                    {"text": "It's", "thoughtSignature": "c2ln"},
                    {**CALL, "thoughtSignature": "Y2FsbA=="},
                    CALL,
                ],
                "role": "model",
            },
            "index": 0,
            "logprobsResult": {
                "chosenCandidates": tokens["chosenCandidates"] + more["chosenCandidates"],
                "topCandidates": [{"candidates": []}, {"candidates": []}],
            },
            "finishReason": "STOP",
            "finishMessage": "Done.",
        }
    ]
    assert (answer["modelVersion"], answer["responseId"]) == (MODEL, "r1")
    assert GEMINI.check_answer(answer) == []
