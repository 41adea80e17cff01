from __future__ import annotations

import json

import pytest

from sse_tape import Cassette, Chunk, ConfigError, Interaction, Matcher, MatchOn, NoMatchError, Request, Response


def post(path: str, body: object, query: str = "") -> Request:
    return Request("POST", path, query=query, body=json.dumps(body).encode())


def recording(path: str, body: object, tag: str) -> Interaction:
    return Interaction(post(path, body), Response(chunks=(Chunk(0.0, tag.encode()),)))


def tag(matcher: Matcher, request: Request) -> str:
    return matcher.find(request).interaction.response.body.decode()


CHAT = "/v1/chat/completions"
HELLO = {"model": "m", "messages": [{"role": "user", "content": "Hello!"}], "stream": True}
TOOLS = {**HELLO, "tools": [{"type": "function", "function": {"name": "get_weather"}}], "tool_choice": "auto"}


@pytest.fixture
def cassette() -> Cassette:
    return Cassette([recording(CHAT, HELLO, "hello"), recording(CHAT, TOOLS, "tools")])


def test_body_is_compared_as_data_not_text(cassette: Cassette) -> None:
    reordered = b'{ "stream" : true,\n "messages": [{"content": "Hello!", "role": "user"}], "model": "m"}'
    assert tag(Matcher([cassette]), Request("POST", CHAT, body=reordered)) == "hello"


def test_ignored_body_fields_do_not_count(cassette: Cassette) -> None:
    matcher = Matcher([cassette], ignore_body_fields=["model", "messages.*.content"])
    other = {**HELLO, "model": "gpt-x", "messages": [{"role": "user", "content": "Bonjour"}]}
    assert tag(matcher, post(CHAT, other)) == "hello"
    with pytest.raises(NoMatchError):
        Matcher([cassette], ignore_body_fields=["model"]).find(post(CHAT, other))


def test_repeated_identical_requests_get_recordings_in_order_then_start_over() -> None:
    cassette = Cassette([recording(CHAT, HELLO, "first"), recording(CHAT, HELLO, "second")])
    matcher = Matcher([cassette])
    assert [tag(matcher, post(CHAT, HELLO)) for _ in range(5)] == ["first", "second", "first", "second", "first"]


def test_method_and_path_matching_prefers_the_most_alike_body(cassette: Cassette) -> None:
    matcher = Matcher([cassette], match_on=["method", "path"])
    asked_with_tools = {
        "model": "x",
        "messages": [{"role": "user", "content": "Rain in Oslo?"}],
        "tools": [],
        "stream": True,
    }
    asked_plain = {"model": "x", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    assert tag(matcher, post(CHAT, asked_with_tools)) == "tools"
    assert tag(matcher, post(CHAT, asked_plain)) == "hello"


def test_query_is_ignored_unless_asked_for() -> None:
    cassette = Cassette([Interaction(post("/q", {}, query="a=1&b=2"), Response())])
    assert Matcher([cassette]).find(post("/q", {}, query="zzz"))
    assert Matcher([cassette], match_on=["method", "path", "query"]).find(post("/q", {}, query="b=2&a=1"))
    with pytest.raises(NoMatchError, match="query is 'a=2', recorded 'a=1&b=2'"):
        Matcher([cassette], match_on=["path", "query"]).find(post("/q", {}, query="a=2"))


def test_non_json_bodies_compare_as_bytes() -> None:
    cassette = Cassette([Interaction(Request("POST", "/raw", body=b"a=1"), Response())])
    assert Matcher([cassette]).find(Request("POST", "/raw", body=b"a=1"))
    with pytest.raises(NoMatchError):
        Matcher([cassette]).find(Request("POST", "/raw", body=b"a=2"))


def test_miss_names_the_closest_recording_and_the_body_difference(cassette: Cassette) -> None:
    asked = {**HELLO, "messages": [{"role": "user", "content": "Hi"}]}
    with pytest.raises(NoMatchError) as info:
        Matcher([cassette]).find(post(CHAT, asked))
    message = str(info.value)
    assert message.startswith("no recorded interaction matches POST /v1/chat/completions; closest: ")
    first = message.split("closest: ")[1].split(" | ")[0]
    assert first == '<memory> #1 (POST /v1/chat/completions): body.messages[0].content is "Hi", recorded "Hello!"'
    assert "body.tools is absent, recorded" in message


def test_miss_on_a_typo_in_the_path_names_the_nearest_path() -> None:
    cassette = Cassette(
        [recording("/api/v1/chat", {}, "lms"), recording("/v1/responses", {}, "r"), recording(CHAT, {}, "c")]
    )
    with pytest.raises(
        NoMatchError, match=r"closest: <memory> #3 \(POST /v1/chat/completions\): path is '/v1/chat/completion'"
    ):
        Matcher([cassette]).find(post("/v1/chat/completion", {}))


def test_miss_with_nothing_loaded() -> None:
    with pytest.raises(NoMatchError, match=r"\(no interactions are loaded\)"):
        Matcher([]).find(post("/x", {}))


def test_unknown_match_part_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="choose from method, path, query, body"):
        Matcher([], match_on=["method", "headers"])


def test_match_on_accepts_enum_members() -> None:
    assert Matcher([], match_on=[MatchOn.PATH]).match_on == (MatchOn.PATH,)


def test_without_repeats_each_recording_answers_once_even_across_groups() -> None:
    # With method,path matching, which recordings tie as most alike depends on the request.
    cassette = Cassette([recording(CHAT, {"m": "x"}, "A"), recording(CHAT, {"m": "y"}, "B")])
    matcher = Matcher([cassette], match_on=["method", "path"], allow_repeats=False)
    assert tag(matcher, post(CHAT, {"m": "x"})) == "A"
    assert tag(matcher, post(CHAT, {"m": "z"})) == "B"  # A has answered; B has not
    with pytest.raises(
        NoMatchError, match="the 2 recordings matching POST /v1/chat/completions have been played already"
    ):
        matcher.find(post(CHAT, {"m": "x"}))
