"""`GET /v1/models` and LM Studio's `GET /api/v1/models`: the models the recordings name."""

from __future__ import annotations

import httpx
import openai
import pytest
from clients import openai_client

from sse_tape import Cassette, Chunk, Interaction, MockServer, Request, Response, serve

BUNDLED_MODELS = [
    "claude-sonnet-4-6",
    "claude-opus-4-7",
    "openai/gpt-oss-20b",
    "llama3.2",
    "local-model",
    "claude-sonnet-4-20250514",
    "llama-3.1-8b",
]


def test_the_sdk_lists_the_cassettes_models(instant_server: MockServer) -> None:
    client = openai_client(instant_server.url + "/v1")
    assert [m.id for m in client.models.list()] == BUNDLED_MODELS
    assert client.models.retrieve("openai/gpt-oss-20b").owned_by == "openai"
    with pytest.raises(openai.NotFoundError, match="no model 'gpt-9' here"):
        client.models.retrieve("gpt-9")


def test_a_router_prefix_lists_them_too(instant_server: MockServer) -> None:
    client = openai_client(instant_server.url + "/proj_ABC123/my-endpoint/v1")
    assert [m.id for m in client.models.list()] == BUNDLED_MODELS


def test_lmstudio_lists_them_in_its_own_shape(instant_server: MockServer) -> None:
    got = httpx.get(instant_server.url + "/api/v1/models").json()
    assert [m["key"] for m in got["models"]] == BUNDLED_MODELS
    first = next(m for m in got["models"] if m["key"] == "openai/gpt-oss-20b")
    assert (first["type"], first["publisher"], first["loaded_instances"][0]["id"]) == (
        "llm",
        "openai",
        "openai/gpt-oss-20b",
    )


def test_a_recording_of_the_list_answers_it_first() -> None:
    listed = b'{"object": "list", "data": [{"id": "recorded", "object": "model", "created": 1, "owned_by": "me"}]}'
    recorded = Interaction(
        Request("GET", "/v1/models"), Response(200, (("content-type", "application/json"),), (Chunk(0.0, listed),))
    )
    with serve(Cassette([recorded]), pace="instant") as server:
        assert [m.id for m in openai_client(server.url + "/v1").models.list()] == ["recorded"]


def test_the_list_is_not_an_answer_to_anything_else(instant_server: MockServer) -> None:
    assert httpx.post(instant_server.url + "/v1/models").status_code == 404
    assert httpx.get(instant_server.url + "/v1/modelsx").status_code == 404


def test_lmstudio_answers_for_one_model_and_head_for_either(instant_server: MockServer) -> None:
    one = httpx.get(instant_server.url + "/api/v1/models/openai%2Fgpt-oss-20b")
    assert one.json()["key"] == "openai/gpt-oss-20b"
    assert httpx.get(instant_server.url + "/api/v1/models/nope").status_code == 404
    head = httpx.head(instant_server.url + "/v1/models")
    assert (head.status_code, head.content) == (200, b"")
