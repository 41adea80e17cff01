"""The bundled cassettes, served: `sse-tape check --live` finds nothing on any of their interactions, streamed
or plain, and every plain answer made from their streams reports its usage, as the real APIs' answers do."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from clients import openai_client
from framed import messages

from sse_tape import Cassette, Interaction, MockServer, bundled_cassettes, serve
from sse_tape.cli import cli
from sse_tape.dialects import Generation, for_path
from sse_tape.dialects.events import Error

# Headers that describe the recorded body, which a variant of the request does not have.
_BODY_HEADERS = ("content-length",)


def _variants(interaction: Interaction) -> Iterator[tuple[str, str, str, dict[str, Any] | None]]:
    """The requests to send for one recorded interaction, each as (shape, path, query, body): as recorded;
    for no stream, where the API answers either way; and without usage, where the API asks for it."""
    request = interaction.request
    body = request.json()
    yield "as recorded", request.path, request.query, body
    if ":streamGenerateContent" in request.path:  # Gemini: the path chooses the stream
        yield "plain", request.path.replace(":streamGenerateContent", ":generateContent"), "", body
    if request.path in ("/api/chat", "/api/generate") and isinstance(body, dict) and "stream" not in body:
        yield "plain", request.path, request.query, {**body, "stream": False}  # Ollama: a stream unless it is false
    for streams, plain in (("/converse-stream", "/converse"), ("/invoke-with-response-stream", "/invoke")):
        if request.path.endswith(streams):  # Bedrock: so does it
            yield "plain", request.path.removesuffix(streams) + plain, "", body
    if isinstance(body, dict) and body.get("stream") is True:
        yield "plain", request.path, request.query, {**body, "stream": False}
        if "stream_options" in body:
            yield "without usage", request.path, request.query, {k: v for k, v in body.items() if k != "stream_options"}


def _cases() -> Iterator[Any]:
    for path in bundled_cassettes():
        for n, interaction in enumerate(Cassette.load(path).interactions, 1):
            for shape, url_path, query, body in _variants(interaction):
                yield pytest.param(interaction, url_path, query, body, id=f"{path.stem}#{n}-{shape.replace(' ', '-')}")


@pytest.fixture(scope="module")
def server() -> Iterator[MockServer]:
    """The bundled cassettes, as `sse-tape serve` serves them with no paths, at instant pace."""
    with serve(pace="instant") as running:
        yield running


@pytest.mark.parametrize(("interaction", "path", "query", "body"), list(_cases()))
def test_check_live_finds_nothing_on_a_bundled_interaction(
    server: MockServer, interaction: Interaction, path: str, query: str, body: dict[str, Any] | None
) -> None:
    request = interaction.request
    args = ["check", "--live", server.url + path + (f"?{query}" if query else ""), "-X", request.method]
    for name, value in request.headers:
        if name.lower() not in _BODY_HEADERS:
            args += ["-H", f"{name}: {value}"]
    if body is not None:
        args += ["-d", json.dumps(body)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert result.output.endswith("checked 1 interaction: 0 violations\n")


def _plain_cases() -> Iterator[Any]:
    """The plain variants of the streams that hold an answer (not those that end in an error)."""
    for case in _cases():
        interaction = case.values[0]
        if not case.id.endswith("-plain"):
            continue
        dialect = for_path(interaction.request.path)
        assert isinstance(dialect, Generation)
        sent = messages(interaction)
        if not any(isinstance(e, Error) for e in dialect.decode(sent)):
            yield case


# Where each API's plain answer reports its usage, and the counts that must add up in it.
_USAGE = {
    "/chat/completions": ("usage", "prompt_tokens", "completion_tokens", "total_tokens"),
    "/v1/completions": ("usage", "prompt_tokens", "completion_tokens", "total_tokens"),
    "/v1/responses": ("usage", "input_tokens", "output_tokens", "total_tokens"),
    "/v1/messages": ("usage", "input_tokens", "output_tokens", None),
    ":generateContent": ("usageMetadata", "promptTokenCount", "candidatesTokenCount", "totalTokenCount"),
    "/api/v1/chat": ("stats", "input_tokens", "total_output_tokens", None),
    "/api/chat": ("", "prompt_eval_count", "eval_count", None),  # Ollama's stats are the answer's own fields
    "/api/generate": ("", "prompt_eval_count", "eval_count", None),
    "/converse": ("usage", "inputTokens", "outputTokens", "totalTokens"),
    "/invoke": ("usage", "input_tokens", "output_tokens", None),  # Bedrock's Claude: the Messages API's message
}


@pytest.mark.parametrize(("interaction", "path", "query", "body"), list(_plain_cases()))
def test_a_plain_answer_made_from_a_bundled_stream_reports_its_usage(
    server: MockServer, interaction: Interaction, path: str, query: str, body: dict[str, Any] | None
) -> None:
    headers = {k: v for k, v in interaction.request.headers if k.lower() not in _BODY_HEADERS}
    answer = httpx.post(server.url + path, headers=headers, json=body).json()
    [(field, prompt, output, total)] = [usage for ending, usage in _USAGE.items() if path.endswith(ending)]
    usage = answer[field] if field else answer
    assert usage[prompt] > 0
    assert usage[output] > 0
    if total is not None:
        thoughts = usage.get("thoughtsTokenCount", 0)  # Gemini counts the thoughts apart from the candidates
        assert usage[total] == usage[prompt] + usage[output] + thoughts


def test_the_openai_sdk_gets_the_chat_streams_usage_only_when_it_asks_and_always_in_a_plain_answer(
    server: MockServer,
) -> None:
    hello = [{"role": "user", "content": "Hello!"}]
    client = openai_client(server.url + "/v1")
    asked = list(
        client.chat.completions.create(
            model="local-model", messages=hello, stream=True, stream_options={"include_usage": True}
        )
    )
    unasked = list(client.chat.completions.create(model="local-model", messages=hello, stream=True))
    plain = client.chat.completions.create(model="local-model", messages=hello)
    models = client.models.list()
    last = asked[-1]
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (10, 10, 20)
    assert [c.usage for c in asked[:-1]] == [None] * (len(asked) - 1)
    assert [c.usage for c in unasked] == [None] * len(unasked)
    assert len(unasked) == len(asked) - 1
    assert plain.choices[0].message.content == "Hi there! How can I help you today?"
    assert plain.usage == last.usage
    assert all(m.object == "model" for m in models)  # OpenAI's clients get OpenAI's list at /v1/models


def test_the_openai_sdk_gets_the_completions_usage_when_it_asks(server: MockServer) -> None:
    client = openai_client(server.url + "/v1")
    kwargs: dict[str, Any] = {"model": "local-model", "prompt": "Once upon a time", "max_tokens": 32}
    asked = list(client.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}))
    plain = client.completions.create(**kwargs)
    usage = asked[-1].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (5, 32, 37)
    assert sum(bool(c.choices and c.choices[0].text) for c in asked) == usage.completion_tokens
    assert plain.usage == usage
