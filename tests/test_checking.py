"""sse_tape.checking, called as a library: what `sse-tape check` works out, as data, from real cassettes."""

from __future__ import annotations

from dataclasses import replace

from sse_tape import Cassette, Chunk, Interaction, Request, Response, bundled_cassettes
from sse_tape.checking import (
    FRAMING_ONLY,
    ContractCheck,
    SecretFound,
    check_interaction,
    check_interactions,
    secrets_in,
)
from sse_tape.dialects import Violation, get

BUNDLED = {p.stem: p for p in bundled_cassettes()}


def test_every_bundled_interaction_keeps_its_apis_contract() -> None:
    results = [
        result for path in BUNDLED.values() for result in check_interactions(Cassette.load(path), source=path.stem)
    ]
    assert len(results) == 33
    assert [result for result in results if not result.ok] == []
    lmstudio = check_interactions(Cassette.load(BUNDLED["lmstudio-chat"]), source="lm.toml")[0]
    assert lmstudio == ContractCheck("lm.toml", 1, "POST", "/api/v1/chat", 200, "lmstudio-chat", (), None)


def test_a_chat_stream_without_its_role_frame_and_done_breaks_two_rules() -> None:
    chat = Cassette.load(BUNDLED["openai-chat"])
    first = chat.interactions[0]
    broken = replace(first, response=replace(first.response, chunks=first.response.chunks[1:-1]))
    results = check_interactions([broken, chat.interactions[1]], source="broken.toml")
    assert [(r.number, r.dialect, r.violations) for r in results] == [
        (
            1,
            "openai-chat",
            (Violation(1, "content delta before the role frame"), Violation(None, "no terminal frame (data: [DONE])")),
        ),
        (2, "openai-chat", ()),
    ]
    assert results[0].as_json() == {
        "source": "broken.toml",
        "interaction": 1,
        "method": "POST",
        "path": "/v1/chat/completions",
        "status": 200,
        "dialect": "openai-chat",
        "violations": [
            {"event": 1, "message": "content delta before the role frame"},
            {"event": None, "message": "no terminal frame (data: [DONE])"},
        ],
        "error": None,
    }


def test_a_stream_of_no_known_api_is_checked_for_its_framing() -> None:
    feed = Cassette.load(BUNDLED["events"]).interactions[0]
    assert check_interaction(feed).dialect == FRAMING_ONLY == "sse"
    assert check_interaction(feed).ok
    cut = replace(feed.response, chunks=(*feed.response.chunks, Chunk(3.0, b"id: 6\ndata: half")))
    assert check_interaction(replace(feed, response=cut), number=4).violations == (
        Violation(6, "the stream ends in the middle of a block"),
    )


def test_a_named_dialect_is_checked_in_place_of_the_one_the_path_tells() -> None:
    chat = Cassette.load(BUNDLED["openai-chat"]).interactions[0]
    result = check_interaction(chat, get("openai-completions"))
    assert result.dialect == "openai-completions"
    assert Violation(1, "object is 'chat.completion.chunk', not 'text_completion'") in result.violations


def test_an_interaction_whose_dialect_cannot_be_told_is_an_error_not_a_violation() -> None:
    chat = Cassette.load(BUNDLED["openai-chat"]).interactions[0]
    odd = replace(chat, request=replace(chat.request, path="/x"), response=replace(chat.response, chunks=()))
    result = check_interaction(odd, source="odd.toml", number=3)
    assert (result.number, result.path, result.dialect, result.violations) == (3, "/x", None, ())
    assert result.error == "cannot tell its dialect: name it with --dialect"
    assert not result.ok


def test_a_json_answer_is_checked_as_its_apis_answer() -> None:
    answer = b'{"object": "chat.completion", "choices": []}'
    plain = Interaction(
        Request("POST", "/v1/chat/completions", body=b'{"model": "m"}'),
        Response(200, (("content-type", "application/json"),), (Chunk(0.1, answer),)),
    )
    assert check_interaction(plain).violations == (Violation(None, "choices is missing or empty"),)


def test_a_stream_malformed_past_every_rule_is_a_violation_not_an_exception() -> None:
    data = b'data: {"object": "chat.completion.chunk", "choices": ["a"], "usage": {"completion_tokens": "many"}}\n\n'
    odd = Interaction(Request("POST", "/v1/chat/completions"), Response(chunks=(Chunk(0.0, data),)))
    result = check_interaction(odd)
    assert result.dialect == "openai-chat"
    assert result.violations
    assert result.error is None


def test_a_source_that_cannot_be_read_is_one_result_with_its_reason() -> None:
    unreadable = ContractCheck.unreadable("gone.toml", "no such cassette or folder")
    assert unreadable.as_json() == {
        "source": "gone.toml",
        "interaction": None,
        "method": None,
        "path": None,
        "status": None,
        "dialect": None,
        "violations": [],
        "error": "no such cassette or folder",
    }
    assert SecretFound.unreadable("gone.toml", "no such cassette or folder").as_json() == {
        "source": "gone.toml",
        "interaction": None,
        "method": None,
        "path": None,
        "secret": None,
        "error": "no such cassette or folder",
    }


def test_a_leaked_header_is_one_secret_and_a_key_in_a_prompt_another() -> None:
    key = "sk-proj-abcdefghijklmnopqrstuvwxyz123456"
    body = b'{"model": "m", "messages": [{"role": "user", "content": "why does Bearer ' + key.encode() + b' fail?"}]}'
    chat = Cassette.load(BUNDLED["openai-chat"]).interactions[0]
    leaked = replace(chat, request=replace(chat.request, headers=(("Authorization", f"Bearer {key}"),), body=body))
    found = secrets_in([chat, leaked], source="leak.toml")
    assert found == [
        SecretFound("leak.toml", 2, "POST", "/v1/chat/completions", "request header Authorization is not redacted"),
        SecretFound("leak.toml", 2, "POST", "/v1/chat/completions", "request body holds a bearer token"),
    ]


def test_the_bundled_cassettes_hold_no_secret() -> None:
    assert [found for path in BUNDLED.values() for found in secrets_in(Cassette.load(path))] == []
