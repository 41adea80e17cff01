"""One recording, both shapes: the openai SDK's plain and streaming calls get the same answer from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from clients import openai_client
from upstream import Upstream

from sse_tape import Cassette, Chunk, Interaction, Request, Response, ServeOptions, recording, serve
from sse_tape.dialects import DIALECTS
from sse_tape.dialects.events import (
    Finish,
    ReasoningDelta,
    Start,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from sse_tape.journal import Matched
from sse_tape.server import run_in_thread
from sse_tape.shape import asked, estimated_usage, reshape, without_usage

HELLO = "Hi there! How can I help you today?"
BUNDLED_CHAT = [("openai-chat", 1), ("openai-chat", 2), ("openai-chat", 3), ("router-chat", 1), ("router-chat", 2), ("router-chat", 3)]  # fmt: skip
BUNDLED_RESPONSES = [("openai-responses", 1), ("openai-responses", 2), ("openai-responses", 3)]


def kwargs_of(interaction: Interaction) -> dict[str, Any]:
    """The recorded request's body as SDK keywords, without the fields that choose the shape."""
    body = json.loads(interaction.request.body)
    return {k: v for k, v in body.items() if k not in ("stream", "stream_options")}


def prefix_of(interaction: Interaction, ending: str) -> str:
    return interaction.request.path.removesuffix(ending)


def chat_from_stream(chunks: Any) -> dict[str, Any]:
    """What a streaming chat call assembles, as the openai SDK's chunks carry it."""
    got: dict[str, Any] = {"content": "", "refusal": "", "calls": {}, "finish": None, "usage": None}
    for chunk in chunks:
        if chunk.usage is not None:
            got["usage"] = chunk.usage.model_dump()
        for choice in chunk.choices:
            got["content"] += choice.delta.content or ""
            got["refusal"] += choice.delta.refusal or ""
            for call in choice.delta.tool_calls or []:
                entry = got["calls"].setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += call.id or ""
                entry["name"] += (call.function.name if call.function else None) or ""
                entry["arguments"] += (call.function.arguments if call.function else None) or ""
            got["finish"] = choice.finish_reason or got["finish"]
    got["calls"] = list(got["calls"].values())
    return got


def chat_from_completion(completion: Any) -> dict[str, Any]:
    message = completion.choices[0].message
    calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls or []]
    return {
        "content": message.content or "",
        "refusal": message.refusal or "",
        "calls": calls,
        "finish": completion.choices[0].finish_reason,
        "usage": completion.usage.model_dump() if completion.usage is not None else None,
    }


@pytest.mark.parametrize(("name", "n"), BUNDLED_CHAT, ids=lambda v: str(v))
def test_a_plain_chat_call_gets_what_the_stream_assembles(bundled: dict[str, Cassette], name: str, n: int) -> None:
    interaction = bundled[name].interactions[n - 1]
    body = json.loads(interaction.request.body)
    with serve(Cassette([interaction]), pace="instant", match_on="method,path") as server:
        client = openai_client(server.url + prefix_of(interaction, "/chat/completions"))
        streamed = chat_from_stream(
            client.chat.completions.create(
                **kwargs_of(interaction),
                stream=True,
                **({"stream_options": body["stream_options"]} if "stream_options" in body else {}),
            )
        )
        whole = client.chat.completions.create(**kwargs_of(interaction))
        converted = [e.converted for e in server.journal if isinstance(e, Matched)]
    assert chat_from_completion(whole) == streamed
    assert streamed["content"] or streamed["calls"] or streamed["refusal"]
    assert converted == [None, "as JSON"]
    assert whole.object == "chat.completion"
    assert whole.model == json.loads(next(e for _, e in interaction.response.events()).data)["model"]


def test_logprobs_come_whole_in_a_plain_chat_call(bundled: dict[str, Cassette]) -> None:
    refusal = bundled["router-chat"].interactions[1]  # asked with logprobs: they are the refusal's
    with serve(Cassette([refusal]), pace="instant", match_on="method,path") as server:
        client = openai_client(server.url + prefix_of(refusal, "/chat/completions"))
        tokens = [
            t.token
            for chunk in client.chat.completions.create(**kwargs_of(refusal), stream=True)
            for choice in chunk.choices
            if choice.logprobs and choice.logprobs.refusal
            for t in choice.logprobs.refusal
        ]
        whole = client.chat.completions.create(**kwargs_of(refusal))
    assert whole.choices[0].logprobs is not None
    assert [t.token for t in whole.choices[0].logprobs.refusal or []] == tokens != []
    assert "".join(tokens) == whole.choices[0].message.refusal


@pytest.mark.parametrize("n", [1, 2])
def test_a_plain_completions_call_gets_what_the_stream_assembles(bundled: dict[str, Cassette], n: int) -> None:
    interaction = bundled["openai-completions"].interactions[n - 1]
    with serve(Cassette([interaction]), pace="instant", match_on="method,path") as server:
        client = openai_client(server.url + "/v1")
        text, finish, tokens, offsets = "", None, [], []
        for chunk in client.completions.create(**kwargs_of(interaction), stream=True):
            for choice in chunk.choices:
                text += choice.text
                finish = choice.finish_reason or finish
                tokens += choice.logprobs.tokens or [] if choice.logprobs else []
                offsets += choice.logprobs.text_offset or [] if choice.logprobs else []
        whole = client.completions.create(**kwargs_of(interaction))
    assert (whole.object, whole.choices[0].text, whole.choices[0].finish_reason) == ("text_completion", text, finish)
    logprobs = whole.choices[0].logprobs
    assert (logprobs.tokens, logprobs.text_offset) == (tokens, offsets) if logprobs else tokens == []
    assert text


@pytest.mark.parametrize(("name", "n"), BUNDLED_RESPONSES, ids=lambda v: str(v))
def test_a_plain_responses_call_gets_the_final_response(bundled: dict[str, Cassette], name: str, n: int) -> None:
    interaction = bundled[name].interactions[n - 1]
    with serve(Cassette([interaction]), pace="instant", match_on="method,path") as server:
        client = openai_client(server.url + "/v1")
        events = list(client.responses.create(**kwargs_of(interaction), stream=True))
        whole = client.responses.create(**kwargs_of(interaction))
    final = next(e.response for e in events if e.type == "response.completed")
    calls = [(o.call_id, o.name, o.arguments) for o in whole.output if o.type == "function_call"]
    assert calls == [(o.call_id, o.name, o.arguments) for o in final.output if o.type == "function_call"]
    assert (
        whole.output_text
        == final.output_text
        == "".join(e.delta for e in events if e.type == "response.output_text.delta")
    )
    assert whole.usage == final.usage is not None
    assert whole.status == "completed"
    assert whole.output_text or calls


@pytest.mark.parametrize("n", [1, 2])
def test_a_plain_lmstudio_call_gets_the_result_chat_end_carries(bundled: dict[str, Cassette], n: int) -> None:
    interaction = bundled["lmstudio-chat"].interactions[n - 1]
    body = {k: v for k, v in json.loads(interaction.request.body).items() if k != "stream"}
    with serve(Cassette([interaction]), pace="instant", match_on="method,path") as server:
        got = httpx.post(server.url + "/api/v1/chat", json=body)
    chat_end = [json.loads(e.data) for _, e in interaction.response.events()][-1]
    assert (got.status_code, got.headers["content-type"]) == (200, "application/json")
    assert got.json() == chat_end["result"]


def test_a_plain_call_waits_for_the_recorded_end_then_gets_the_whole_answer(bundled: dict[str, Cassette]) -> None:
    hello = bundled["openai-chat"].interactions[0]
    lines: list[str] = []
    with serve(Cassette([hello]), match_on="method,path", log=lines.append) as server:
        got = httpx.post(server.url + "/v1/chat/completions", json=kwargs_of(hello))
    # Sent once, whole: the headers came with the body, at the end of the recorded stream.
    assert got.elapsed.total_seconds() >= hello.response.end_time
    assert got.json()["choices"][0]["message"]["content"] == "Hi there! How can I help you today?"
    assert lines[0].endswith(" as JSON")


def test_a_stream_that_failed_is_an_error_response_for_a_plain_call(bundled: dict[str, Cassette]) -> None:
    hello = bundled["openai-chat"].interactions[0]
    events = [
        b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}\n\n',
        b'event: error\ndata: {"error":{"message":"the model crashed","type":"server_error","code":null}}\n\n',
        b"data: [DONE]\n\n",
    ]
    chunks = tuple(Chunk(0.01 * i, e) for i, e in enumerate(events))
    broken = Interaction(hello.request, Response(200, hello.response.headers, chunks))
    with serve(Cassette([broken]), pace="instant", match_on="method,path") as server:
        client = openai_client(server.url + "/v1")
        with pytest.raises(openai.InternalServerError, match="the model crashed"):
            client.chat.completions.create(model="m", messages=[])


def record_plain(llama_server: str, cassette: Path, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """Record one non-streamed answer of the real llama-cpp-python server; returns it."""
    with recording(cassette, llama_server) as recorder:
        got = httpx.post(recorder.url + path, json=body, timeout=60)
    assert got.status_code == 200
    assert got.headers["content-type"].startswith("application/json")
    answer: dict[str, Any] = got.json()
    return answer


def test_a_streaming_chat_call_gets_a_recorded_plain_answer_as_a_stream(llama_server: str, tmp_path: Path) -> None:
    cassette = tmp_path / "plain.toml"
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 24}
    answer = record_plain(llama_server, cassette, "/v1/chat/completions", body)
    with serve(cassette, pace="instant") as server:
        client = openai_client(server.url + "/v1")
        chunks = list(client.chat.completions.create(**body, stream=True))
        again = client.chat.completions.create(**body)
        converted = [e.converted for e in server.journal if isinstance(e, Matched)]
    streamed = chat_from_stream(chunks)
    message = answer["choices"][0]["message"]
    assert streamed["content"] == message["content"] != ""
    assert streamed["finish"] == answer["choices"][0]["finish_reason"]
    assert streamed["usage"] is None  # the request did not ask for usage
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1  # token by token
    assert again.choices[0].message.content == message["content"]  # and a plain call gets it as recorded
    assert converted == ["as a stream", None]


def test_a_streaming_completions_call_with_usage_gets_a_recorded_plain_answer_as_a_stream(
    llama_server: str, tmp_path: Path
) -> None:
    cassette = tmp_path / "plain.toml"
    body = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 16}
    answer = record_plain(llama_server, cassette, "/v1/completions", body)
    with serve(cassette, pace="instant") as server:
        client = openai_client(server.url + "/v1")
        chunks = list(client.completions.create(**body, stream=True, stream_options={"include_usage": True}))
    text = "".join(choice.text for chunk in chunks for choice in chunk.choices)
    assert text == answer["choices"][0]["text"] != ""
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.model_dump(exclude_none=True) == answer["usage"]


def test_a_recorded_plain_answer_streams_over_the_time_it_took() -> None:
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "one two three"}, "finish_reason": "stop"}
        ],
    }
    plain = Interaction(
        Request("POST", "/v1/chat/completions", body=b'{"model": "m", "messages": []}'),
        Response(200, (("content-type", "application/json"),), (Chunk(0.8, json.dumps(answer).encode()),)),
    )
    streamed, how = reshape(plain, asked(plain, Request("POST", "/v1/chat/completions", body=b'{"stream": true}')))
    assert how == "as a stream"
    # Start, three pieces, the finish: one every 0.16 s, the last (with [DONE]) when the answer came.
    assert [c.t for c in streamed.chunks] == [0.16, 0.32, 0.48, 0.64, 0.8, 0.8]
    with serve(Cassette([plain]), pace="instant") as server:
        got = httpx.post(server.url + "/v1/chat/completions", json={"model": "m", "messages": [], "stream": True})
    texts = [
        json.loads(line[6:])["choices"][0]["delta"].get("content")
        for line in got.text.splitlines()
        if line.startswith("data: {")
    ]
    assert [t for t in texts if t] == ["one", " two", " three"]
    assert got.headers["content-type"] == "text/event-stream"
    assert got.text.endswith("data: [DONE]\n\n")


def test_a_recording_in_the_shape_asked_for_wins(bundled: dict[str, Cassette]) -> None:
    hello = bundled["openai-chat"].interactions[0]
    body = b'{"id":"plain","object":"chat.completion","created":1,"model":"local-model","choices":[{"index":0,"message":{"role":"assistant","content":"recorded plain"},"finish_reason":"stop"}]}'
    plain_request = Request(hello.request.method, hello.request.path, body=json.dumps(kwargs_of(hello)).encode())
    plain = Interaction(plain_request, Response(200, (("content-type", "application/json"),), (Chunk(0.1, body),)))
    with serve(Cassette([hello, plain]), pace="instant") as server:
        client = openai_client(server.url + "/v1")
        kwargs = kwargs_of(hello)
        whole = client.chat.completions.create(**kwargs)
        # The stream as recorded: with the usage it was recorded with.
        asked = client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True})
        streamed = chat_from_stream(asked)
        converted = [e.converted for e in server.journal if isinstance(e, Matched)]
    assert whole.choices[0].message.content == "recorded plain"
    assert streamed["content"] == "Hi there! How can I help you today?"
    assert converted == [None, None]


def test_a_stream_from_an_api_that_always_streams_is_not_reshaped() -> None:
    events = Interaction(
        Request("POST", "/v1/chat/completions", body=b'{"model": "m", "messages": []}'),
        Response(
            200,
            (("content-type", "text/event-stream"),),
            (
                Chunk(
                    0.0,
                    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n',
                ),
                Chunk(0.0, b"data: [DONE]\n\n"),
            ),
        ),
    )
    with serve(Cassette([events]), pace="instant") as server:
        got = httpx.post(server.url + "/v1/chat/completions", json={"model": "m", "messages": []})
    assert got.headers["content-type"] == "text/event-stream"
    assert got.content == events.response.body


def test_a_usage_chunk_goes_only_to_a_request_that_asks_for_usage(tmp_path: Path) -> None:
    cassette = tmp_path / "usage.toml"
    body = {"model": "up", "messages": [{"role": "user", "content": "Say hi"}], "stream": True}
    with run_in_thread(Upstream()) as upstream, recording(cassette, upstream.url) as recorder:
        recorded = httpx.post(
            recorder.url + "/v1/chat/completions?gap=0", json={**body, "stream_options": {"include_usage": True}}
        ).content
    assert b'"choices": []' in recorded  # as OpenAI sends it: a chunk with usage and no choices
    with serve(cassette, pace="instant") as server:
        client = openai_client(server.url + "/v1")
        with_usage = list(client.chat.completions.create(**body, stream_options={"include_usage": True}))
        without = list(client.chat.completions.create(**body))
        plain = httpx.post(server.url + "/v1/chat/completions", json=body).content
        converted = [e.converted for e in server.journal if isinstance(e, Matched)]
    assert [c.usage.total_tokens for c in with_usage if not c.choices and c.usage is not None] == [14]
    assert all(c.choices for c in without)  # `chunk.choices[0]` is safe for a client that did not ask for usage
    assert [c.model_dump() for c in without] == [c.model_dump() for c in with_usage if c.choices]
    [usage_event] = [e for e in recorded.split(b"\n\n") if b'"choices": []' in e]
    assert plain == recorded.replace(usage_event + b"\n\n", b"")  # every other byte as recorded
    assert converted == [None, "without usage", "without usage"]


def chat_stream(
    *deltas: dict[str, Any], request: bytes = b'{"model": "m", "messages": [], "stream": true}'
) -> Interaction:
    """A recorded chat stream of these deltas (the last one finishes it), 10 ms apart."""
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    frames = [
        {**head, "choices": [{"index": 0, "delta": d, "finish_reason": "stop" if n == len(deltas) - 1 else None}]}
        for n, d in enumerate(deltas)
    ]
    chunks = [Chunk(0.01 * n, b"data: " + json.dumps(f).encode() + b"\n\n") for n, f in enumerate(frames)]
    chunks.append(Chunk(0.01 * len(frames), b"data: [DONE]\n\n"))
    return Interaction(
        Request("POST", "/v1/chat/completions", body=request),
        Response(200, (("content-type", "text/event-stream"),), tuple(chunks)),
    )


def test_a_recorded_retry_replays_in_order_whatever_shape_is_asked() -> None:
    limited = Response(
        429, (("content-type", "application/json"),), (Chunk(0.0, b'{"error": {"message": "slow down"}}'),)
    )
    answer = chat_stream({"role": "assistant", "content": "Hi"})
    retry = Interaction(answer.request, limited)
    for stream in (True, False):
        with serve(Cassette([retry, answer]), pace="instant") as server:
            body = {"model": "m", "messages": [], "stream": stream}
            statuses = [httpx.post(server.url + "/v1/chat/completions", json=body).status_code for _ in range(4)]
        assert statuses == [429, 200, 429, 200]


def test_a_fault_in_the_stream_is_what_the_plain_call_gets(bundled: dict[str, Cassette]) -> None:
    hello = Cassette([bundled["openai-chat"].interactions[0]])
    with serve(hello, pace="instant", match_on="method,path") as server:
        client = openai_client(server.url + "/v1")
        ask = {"model": "local-model", "messages": [{"role": "user", "content": "Hello!"}]}
        with pytest.raises(openai.InternalServerError, match="model crashed"):
            client.chat.completions.create(**ask, extra_headers={"X-SSE-Tape-Fault": "error:3,message=model crashed"})
        with pytest.raises(openai.APIConnectionError):
            client.chat.completions.create(**ask, extra_headers={"X-SSE-Tape-Fault": "disconnect:3"})
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(**ask, extra_headers={"X-SSE-Tape-Fault": "status:429"})
        assert client.chat.completions.create(**ask).choices[0].message.content == HELLO


def test_a_plain_answer_comes_when_the_paced_stream_would_have_ended(bundled: dict[str, Cassette]) -> None:
    hello = Cassette([bundled["openai-chat"].interactions[0]])  # 13 events
    with serve(hello, pace="tps:10", match_on="method,path") as server:
        got = httpx.post(server.url + "/v1/chat/completions", json={"model": "m", "messages": []})
    assert got.status_code == 200
    assert got.elapsed.total_seconds() >= 1.2  # the 13th event is due at 1.2 s at ten a second


@pytest.mark.parametrize(
    "interaction",
    [
        chat_stream(),  # only [DONE]
        Interaction(
            chat_stream().request,
            Response(200, (("content-type", "text/event-stream"),), (Chunk(0.0, b"data: hello\n\n"),)),
        ),
        Interaction(
            chat_stream().request,
            Response(
                200,
                (("content-type", "text/event-stream"),),
                (
                    Chunk(
                        0.0,
                        b'data: {"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"A"}},{"index":1,"delta":{"content":"B"}}]}\n\n',
                    ),
                ),
            ),
        ),
    ],
    ids=["no-answer", "not-json", "two-choices"],
)
def test_a_stream_with_no_answer_of_one_choice_goes_out_as_recorded(interaction: Interaction) -> None:
    with serve(Cassette([interaction]), pace="instant") as server:
        got = httpx.post(server.url + "/v1/chat/completions", json={"model": "m", "messages": []})
    assert got.content == interaction.response.body


def test_numbers_no_api_sends_do_not_break_a_conversion() -> None:
    head = b'data: {"id":"c","object":"chat.completion.chunk","created":1e999,"model":"m",'
    stream = Interaction(
        chat_stream().request,
        Response(
            200,
            (("content-type", "text/event-stream"),),
            (Chunk(0.0, head + b'"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}\n\n'),),
        ),
    )
    with serve(Cassette([stream]), pace="instant") as server:
        got = httpx.post(server.url + "/v1/chat/completions", json={"model": "m", "messages": []})
    assert (got.status_code, got.json()["created"], got.json()["choices"][0]["message"]["content"]) == (200, 0, "Hi")


TOOL_F: list[Any] = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}]


def test_a_recorded_responses_answer_streams_with_its_own_ids_and_items() -> None:
    answer = {
        "id": "resp_abc",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "gpt-x",
        "output": [
            {"type": "reasoning", "id": "rs_abc", "summary": [{"type": "summary_text", "text": "Thinking."}]},
            {
                "type": "message",
                "id": "msg_abc",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}],
            },
            {
                "type": "function_call",
                "id": "fc_abc",
                "call_id": "call_abc",
                "name": "f",
                "arguments": "{}",
                "status": "completed",
            },
        ],
        "usage": {"input_tokens": 5, "output_tokens": 20, "total_tokens": 25},
    }
    plain = Interaction(
        Request("POST", "/v1/responses", body=json.dumps({"model": "gpt-x", "input": "q", "tools": TOOL_F}).encode()),
        Response(200, (("content-type", "application/json"),), (Chunk(0.2, json.dumps(answer).encode()),)),
    )
    with serve(Cassette([plain]), pace="instant") as server:
        client = openai_client(server.url + "/v1")
        events = list(client.responses.create(model="gpt-x", input="q", tools=TOOL_F, stream=True))
    done = [e.item.id for e in events if e.type == "response.output_item.done"]
    final = next(e.response for e in events if e.type == "response.completed")
    assert done == ["rs_abc", "msg_abc", "fc_abc"]
    assert final.to_dict() == answer  # the recorded Response whole: the summary, the ids, the usage
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Let me look."


def test_a_recorder_that_only_replays_answers_a_plain_call_from_a_stream(
    bundled: dict[str, Cassette], tmp_path: Path
) -> None:
    interaction = bundled["openai-chat"].interactions[0]
    cassette = tmp_path / "chat.toml"
    Cassette([interaction]).save(cassette)
    plain = {k: v for k, v in interaction.request.json().items() if k not in ("stream", "stream_options")}
    # Nothing is recorded in mode none, so replay may reshape as serve does; the upstream is never reached.
    with recording(cassette, "http://127.0.0.1:9", mode="none", options=ServeOptions.build(pace="instant")) as recorder:
        got = httpx.post(recorder.url + "/v1/chat/completions", json=plain, timeout=30)
    assert got.status_code == 200, got.text
    assert got.json()["object"] == "chat.completion"


def test_a_recorded_answer_larger_than_a_requests_limit_is_still_read_as_json(tmp_path: Path) -> None:
    # A request's body may hold 100,000 keys and values; a recorded answer is held to no such count (an embeddings
    # answer holds a number a dimension, a chat answer with logprobs an entry a token): this one, with 150,000
    # numbers beside its message, still streams to a streaming call.
    body = {"model": "m", "messages": [{"role": "user", "content": "Say hi"}]}
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi there"}, "finish_reason": "stop"}],
        "filler": [0] * 150_000,
    }
    request = Request("POST", "/v1/chat/completions", headers=(("content-type", "application/json"),))
    interaction = Interaction(
        request.with_json(request.path, json.dumps(body).encode(), body),
        Response(200, (("content-type", "application/json"),), (Chunk(0.0, json.dumps(answer).encode()),)),
    )
    Cassette([interaction], None).save(tmp_path / "large.toml")
    with serve(tmp_path / "large.toml", pace="instant") as server:
        chunks = list(openai_client(server.url + "/v1").chat.completions.create(**body, stream=True))
    assert chat_from_stream(chunks)["content"] == "Hi there"


def test_a_plain_answer_from_a_stream_recorded_without_usage_reports_an_estimate(
    bundled: dict[str, Cassette],
) -> None:
    # A chat stream recorded without stream_options.include_usage has no usage; the API's plain answer always
    # does, and clients read it (pydantic-ai, LangChain): sse-tape tells it as near as it can.
    recorded = bundled["openai-chat"].interactions[0]
    cut = without_usage(recorded.response, DIALECTS["openai-chat"])
    assert cut is not None
    body = json.dumps({**kwargs_of(recorded), "stream": True}).encode()
    unasked = Interaction(Request("POST", recorded.request.path, body=body), cut)
    with serve(Cassette([unasked]), pace="instant") as server:
        plain = openai_client(server.url + "/v1").chat.completions.create(**kwargs_of(recorded))
    assert plain.usage is not None
    # "Hello!" and a message's four: 6 tokens; one token for each of the 10 chunks of text.
    assert (plain.usage.prompt_tokens, plain.usage.completion_tokens, plain.usage.total_tokens) == (6, 10, 16)


def test_a_plain_answer_from_a_stream_with_usage_reports_the_streams(bundled: dict[str, Cassette]) -> None:
    recorded = bundled["openai-chat"].interactions[0]
    with serve(Cassette([recorded]), pace="instant") as server:
        plain = openai_client(server.url + "/v1").chat.completions.create(**kwargs_of(recorded))
    assert plain.usage is not None
    assert (plain.usage.prompt_tokens, plain.usage.completion_tokens, plain.usage.total_tokens) == (10, 10, 20)


def test_the_estimate_counts_a_calls_arguments_and_reasoning_and_a_plain_prompt() -> None:
    chat, completions = DIALECTS["openai-chat"], DIALECTS["openai-completions"]
    asked_chat = Request(
        "POST", "/v1/chat/completions", body=b'{"messages": [{"role": "user", "content": "Weather?"}]}'
    )
    events = [
        Start(),
        ReasoningDelta("Look"),
        ReasoningDelta(" it up."),
        ToolCallStart(0, "c1", "get_weather"),
        ToolCallDelta(0, '{"city"'),
        ToolCallDelta(0, ': "Tokyo"}'),
        ToolCallEnd(0),
        Finish("tool_calls"),
    ]
    asked_text = Request("POST", "/v1/completions", body=b'{"prompt": "Once upon a time"}')
    assert estimated_usage(chat, asked_chat, events) == Usage(2 + 4, 4, 2)
    assert estimated_usage(completions, asked_text, [Start(), TextDelta("there"), TextDelta(""), Finish()]) == Usage(
        4, 1
    )
