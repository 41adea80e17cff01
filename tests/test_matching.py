from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar
from urllib.parse import quote

import pytest

from sse_tape import (
    REDACTED,
    Cassette,
    Chunk,
    ConfigError,
    Interaction,
    Matcher,
    MatchOn,
    NoMatchError,
    Request,
    Response,
    ServeOptions,
)
from sse_tape.dialects import DIALECTS, Protocol
from sse_tape.dialects.events import Error, Event
from sse_tape.dialects.protocol import RequestMatcher
from sse_tape.matching import MATCHERS, Matchers
from sse_tape.matching.matchers import BUILT_IN, body, method, path, query
from sse_tape.sse import ServerSentEvent


def post(path: str, body: object, query: str = "") -> Request:
    return Request("POST", path, query=query, body=json.dumps(body).encode())


def recording(path: str, body: object, tag: str, query: str = "") -> Interaction:
    return Interaction(post(path, body, query), Response(chunks=(Chunk(0.0, tag.encode()),)))


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
        "tools": [{"type": "function", "function": {"name": "get_weather"}}],
        "stream": True,
    }
    asked_plain = {"model": "x", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    assert tag(matcher, post(CHAT, asked_with_tools)) == "tools"
    assert tag(matcher, post(CHAT, asked_plain)) == "hello"
    assert tag(matcher, post(CHAT, {**asked_with_tools, "tools": []})) == "hello"  # an empty list offers none


def test_query_is_ignored_unless_asked_for() -> None:
    cassette = Cassette([recording("/q", {}, "ab", query="a=1&b=2")])
    assert tag(Matcher([cassette]), post("/q", {}, query="zzz")) == "ab"
    queried = Cassette([recording("/q", {}, "a3", query="a=3"), recording("/q", {}, "ab", query="a=1&b=2")])
    assert tag(Matcher([queried], match_on=["method", "path", "query"]), post("/q", {}, query="b=2&a=1")) == "ab"
    with pytest.raises(NoMatchError, match="query is 'a=2', recorded 'a=1&b=2'"):
        Matcher([cassette], match_on=["path", "query"]).find(post("/q", {}, query="a=2"))


def test_non_json_bodies_compare_as_bytes() -> None:
    raw = [Interaction(Request("POST", "/raw", body=body), Response()) for body in (b"a=3", b"a=1")]
    cassette = Cassette(raw)
    found = Matcher([cassette]).find(Request("POST", "/raw", body=b"a=1"))
    assert (found.index, found.interaction) == (2, raw[1])
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


def test_unknown_matcher_is_a_config_error_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        Matcher([], match_on=["method", "headers"])
    assert (
        str(info.value)
        == "match_on 'method,headers': choose from method, path, query, body, a2a, jsonrpc, or strict alone"
    )
    with pytest.raises(
        ConfigError, match=r"^match_on 'colour': choose from method, path, query, body, a2a, jsonrpc, or strict alone$"
    ):
        ServeOptions.build(match_on="colour")


def test_match_on_accepts_enum_members() -> None:
    assert Matcher([], match_on=[MatchOn.PATH]).match_on == (MatchOn.PATH,)


def test_a_cassette_naming_an_unknown_matcher_loads_and_is_refused_when_matched(tmp_path: Path) -> None:
    # Which matchers there are is matching's to say (the protocols bring theirs), when the cassette is
    # matched: a cassette that names one of a plug-in not installed here still loads, converts and shows.
    Cassette([recording(CHAT, HELLO, "hello")], match_on=("method", "headers")).save(tmp_path / "bad.toml")
    assert 'match = ["method", "headers"]' in (tmp_path / "bad.toml").read_text()
    cassette = Cassette.load(tmp_path / "bad.toml")
    assert cassette.match_on == ("method", "headers")
    message = "bad.toml: match 'method,headers': choose from method, path, query, body, a2a, jsonrpc, or strict alone"
    with pytest.raises(ConfigError) as info:
        Matcher([cassette])
    assert str(info.value) == message
    Matcher([cassette], match_on=["path"])  # the server's matchers take the place of the cassette's
    result = subprocess.run(
        [sys.executable, "-m", "sse_tape", "serve", str(tmp_path / "bad.toml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (2, f"Error: {message}\n")


def test_a_matcher_is_a_function_that_says_how_two_requests_differ() -> None:
    asked, recorded = (
        post("/a", {"q": 1, "n": [1, 2]}, query="x=1&y=2"),
        post("/b", {"q": 2, "n": [1, 2]}, query="y=2&x=1"),
    )
    assert method(asked, recorded) is None
    assert path(asked, recorded) == "path is '/a', recorded '/b'"
    assert query(asked, recorded) is None  # the same parameters, in another order
    assert body(asked, recorded) == "body.q is 1, recorded 2"
    assert method(Request("get", "/a"), Request("GET", "/a")) is None
    assert list(BUILT_IN) == list(MatchOn) == ["method", "path", "query", "body"]


def test_the_registry_names_the_built_in_matchers_then_those_the_protocols_bring() -> None:
    assert [name for name in MATCHERS][:4] == ["method", "path", "query", "body"]
    assert MATCHERS["body"] is body
    with pytest.raises(KeyError):
        MATCHERS["colour"]


def test_a_protocol_may_not_take_the_name_of_a_built_in_matcher() -> None:
    class Taker(Protocol):
        name = "taker"
        path = "/taker"
        matchers: ClassVar[Mapping[str, RequestMatcher]] = {"path": body}

        def is_terminal(self, event: ServerSentEvent) -> bool:
            return False

        def error_frames(
            self, error: Error, before: Sequence[Event] = (), sent: Sequence[ServerSentEvent] = ()
        ) -> list[bytes]:
            return []

    registry = Matchers(BUILT_IN, {"taker": Taker()})
    with pytest.raises(ConfigError, match="the matcher 'path' of the dialect taker is one of sse-tape's"):
        list(registry)
    assert registry["method"] is method  # built-in names never ask the protocols
    assert set(DIALECTS)  # the registry reads the dialects it is given, not only the built-in ones


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


def test_stream_and_stream_options_are_the_shape_asked_for_not_a_difference(cassette: Cassette) -> None:
    plain = {k: v for k, v in HELLO.items() if k != "stream"}
    usage = {**HELLO, "stream_options": {"include_usage": True}}
    matcher = Matcher([cassette])
    assert tag(matcher, post(CHAT, plain)) == "hello"
    assert tag(matcher, post(CHAT, {**HELLO, "stream": False})) == "hello"
    assert tag(matcher, post(CHAT, usage)) == "hello"


def test_comparing_bodies_leaves_the_parsed_bodies_of_requests_and_recordings_as_they_came() -> None:
    # A request's body is parsed once and read by matching, shaping and faults alike: the fields matching
    # leaves out (the shape asked for, the ignored ones) must stay in it for the others.
    asked = {**HELLO, "user": "b", "messages": [{"role": "user", "content": "Hello!", "name": "b"}]}
    recorded = {**HELLO, "user": "a", "messages": [{"role": "user", "content": "Hello!", "name": "a"}]}
    cassette = Cassette([recording(CHAT, recorded, "hello")])
    matcher = Matcher([cassette], ignore_body_fields=["user", "messages.*.name"])
    request = post(CHAT, asked)
    for _ in range(2):
        assert tag(matcher, request) == "hello"
    assert request.json() == asked
    assert cassette.interactions[0].request.json() == recorded


def test_a_recording_in_the_shape_asked_for_wins_a_tie() -> None:
    plain = {k: v for k, v in HELLO.items() if k != "stream"}
    as_json = Interaction(post(CHAT, plain), Response(headers=(("content-type", "application/json"),)))
    as_stream = Interaction(post(CHAT, HELLO), Response(headers=(("content-type", "text/event-stream"),)))
    matcher = Matcher([Cassette([as_json, as_stream])])
    for _ in range(2):  # no taking turns: the shape decides
        assert matcher.find(post(CHAT, HELLO)).index == 2
        assert matcher.find(post(CHAT, plain)).index == 1


def test_a_conversation_ending_with_a_tool_result_gets_the_recording_of_one() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    asked_tool = {**TOOLS, "messages": [{"role": "user", "content": "Weather in Tokyo?"}]}
    answered = {
        **asked_tool,
        "messages": [
            *asked_tool["messages"],
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
        ],
    }
    cassette = Cassette(
        [recording(CHAT, HELLO, "hello"), recording(CHAT, asked_tool, "call"), recording(CHAT, answered, "answer")]
    )
    matcher = Matcher([cassette], match_on=["method", "path"])
    other_call = {**call, "id": "call_9"}
    agent_turn = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "And in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [other_call]},
        {"role": "tool", "tool_call_id": "call_9", "content": "21 C"},
    ]
    assert tag(matcher, post(CHAT, {**TOOLS, "model": "x", "messages": agent_turn})) == "answer"
    assert tag(matcher, post(CHAT, {**TOOLS, "model": "x", "messages": agent_turn[:2]})) == "call"
    assert tag(matcher, post(CHAT, {"model": "x", "messages": agent_turn[:2], "stream": True})) == "hello"


def test_each_cassette_is_matched_as_it_says_unless_the_server_says_otherwise() -> None:
    loose = Cassette([recording("/loose", {"q": 1}, "loose")], match_on=(MatchOn.METHOD, MatchOn.PATH))
    strict = Cassette([recording("/strict", {"q": 1}, "strict")])
    ignoring = Cassette([recording("/ignoring", {"q": 1, "user": "a"}, "ignoring")], ignore_body_fields=("user",))
    matcher = Matcher([loose, strict, ignoring])
    assert tag(matcher, post("/loose", {"q": 2})) == "loose"
    with pytest.raises(NoMatchError, match=r"body\.q is 2, recorded 1"):
        matcher.find(post("/strict", {"q": 2}))
    assert tag(matcher, post("/ignoring", {"q": 1, "user": "b"})) == "ignoring"
    # Options given to the server apply to every cassette, in place of what they say.
    overriding = Matcher([loose, strict, ignoring], match_on=["method", "path", "body"], ignore_body_fields=[])
    with pytest.raises(NoMatchError):
        overriding.find(post("/loose", {"q": 2}))
    with pytest.raises(NoMatchError, match=r'body\.user is "b", recorded "a"'):
        overriding.find(post("/ignoring", {"q": 1, "user": "b"}))
    assert tag(Matcher([strict], match_on=["path"]), post("/strict", {"q": 2})) == "strict"


def reconnecting(last_id: str | None) -> Request:
    return Request("GET", "/feed", headers=(("Last-Event-ID", last_id),) if last_id is not None else ())


def test_a_reconnection_gets_its_own_recording_or_one_to_resume_and_a_first_connection_the_whole_stream() -> None:
    feed = Cassette(
        [
            Interaction(reconnecting("2"), Response(chunks=(Chunk(0.0, b"after 2"),))),
            Interaction(reconnecting(None), Response(chunks=(Chunk(0.0, b"whole"),))),
        ]
    )
    replaying = Matcher([feed])
    assert tag(replaying, reconnecting(None)) == "whole"
    assert tag(replaying, Request("GET", "/feed", headers=(("last-event-id", "2"),))) == "after 2"
    assert tag(replaying, reconnecting("4")) == "whole"  # to resume after event 4
    assert tag(replaying, reconnecting("")) == "whole"  # an empty id is no reconnection
    recording = Matcher([feed], resume=False)  # a recorder fetches a reconnection it has not recorded
    assert tag(recording, reconnecting("2")) == "after 2"
    with pytest.raises(NoMatchError) as miss:
        recording.find(reconnecting("4"))
    assert str(miss.value).endswith(
        "closest: <memory> #1 (GET /feed): Last-Event-ID is '4', recorded '2' "
        "| <memory> #2 (GET /feed): Last-Event-ID is '4', recorded absent"
    )


def test_a_path_that_only_chooses_the_shape_matches_and_a_miss_shows_the_paths_as_they_came() -> None:
    # Matchers compare Gemini's `:streamGenerateContent` as `:generateContent`; what a miss says is the real path.
    streamed = "/v1beta/models/g:streamGenerateContent"
    cassette = Cassette([recording(streamed, {"contents": []}, "g")])
    assert tag(Matcher([cassette]), post("/v1beta/models/g:generateContent", {"contents": []})) == "g"
    with pytest.raises(NoMatchError) as info:
        Matcher([cassette]).find(post("/v1beta/models/h:streamGenerateContent", {"contents": []}))
    assert str(info.value).endswith(f"path is '/v1beta/models/h:streamGenerateContent', recorded '{streamed}'")


def test_a_miss_shows_the_fields_compared_not_those_ignored() -> None:
    cassette = Cassette([recording(CHAT, {**HELLO, "user": "ann"}, "hello")])
    asked = {**HELLO, "user": "bob", "messages": [{"role": "user", "content": "Hi"}]}
    for redact in (None, lambda request: request):  # as a server has it (its secrets redacted) and as it came
        with pytest.raises(NoMatchError) as info:
            Matcher([cassette], ignore_body_fields=["user"], redact=redact).find(post(CHAT, asked))
        assert str(info.value).endswith('body.messages[0].content is "Hi", recorded "Hello!"')  # not body.user


def test_a_miss_with_a_long_path_shows_its_start_and_its_length() -> None:
    long = CHAT + "/" + "a" * 8000
    with pytest.raises(NoMatchError) as info:
        Matcher([Cassette([recording(CHAT, HELLO, "hello")])]).find(post(long, HELLO))
    message = str(info.value)
    assert message.startswith(f"no recorded interaction matches POST {long[:100]}... (8,021 characters); closest: ")
    assert f": path is {long[:100]!r}... (8,021 characters), recorded '{CHAT}';" in message
    assert len(message) < 1000


def test_a_miss_between_two_large_bodies_names_three_differences_and_counts_a_bounded_few_more() -> None:
    # 40,000 keys and as many values: as large as a body sse-tape parses (`--max-body`'s JSON limit) allows.
    recorded = {f"k{n}": n for n in range(40_000)}
    asked = {f"k{n}": -n for n in range(40_000)}
    with pytest.raises(NoMatchError) as info:
        Matcher([Cassette([recording(CHAT, recorded, "big")])]).find(post(CHAT, asked))
    assert str(info.value).endswith(
        "body.k1 is -1, recorded 1, body.k2 is -2, recorded 2, body.k3 is -3, recorded 3 and at least 97 more"
    )


def _explaining(matcher: Matcher, request: Request) -> float:
    """The least CPU time of a few explanations of `request`'s miss: the cost, with what else the machine does
    left out as far as it can be."""
    spent = []
    for _ in range(5):
        start = time.process_time()
        matcher.explain_miss(request)
        spent.append(time.process_time() - start)
    return min(spent)


def test_what_a_miss_costs_to_explain_does_not_grow_with_the_paths_length_or_the_cassettes_size() -> None:
    # A bound that only the bug breaks, not a time: the same miss with a path 400 times longer, and against a
    # cassette 80 times larger, costs about as much (before, 150 times and 80 times as much).
    def cassette(size: int) -> Cassette:
        return Cassette([recording(f"{CHAT}/{n}", {**HELLO, "n": n}, str(n)) for n in range(size)])

    small, large = Matcher([cassette(64)]), Matcher([cassette(64 * 80)])
    short = post(CHAT + "/x" * 10, HELLO)
    long = post(CHAT + "/x" * 4000, HELLO)
    for cheap, dear in (
        (lambda: _explaining(small, short), lambda: _explaining(small, long)),
        (lambda: _explaining(small, short), lambda: _explaining(large, short)),
    ):
        cheap(), dear()  # each path of the code run once before it is timed
        assert dear() < 10 * max(cheap(), 1e-4)


def test_strict_matching_makes_any_drift_a_miss_that_shows_it(cassette: Cassette) -> None:
    strict = Matcher([cassette], match_on=["strict"])
    assert tag(strict, post(CHAT, HELLO)) == "hello"
    with pytest.raises(NoMatchError, match=r"body.temperature is 0.5, recorded absent"):
        strict.find(post(CHAT, {**HELLO, "temperature": 0.5}))
    # The shape of answer asked for is part of the request: a plain call is not the streamed one recorded.
    with pytest.raises(NoMatchError, match=r"body.stream is false, recorded true"):
        strict.find(post(CHAT, {**HELLO, "stream": False}))
    assert tag(Matcher([cassette]), post(CHAT, {**HELLO, "stream": False})) == "hello"  # by default, reshaped
    # Ignored fields are still ignored; the query counts.
    loose = Matcher([cassette], match_on=["strict"], ignore_body_fields=["user"])
    assert tag(loose, post(CHAT, HELLO | {"user": "u"})) == "hello"
    with pytest.raises(NoMatchError, match="query is 'a=1', recorded ''"):
        strict.find(post(CHAT, HELLO, query="a=1"))
    with pytest.raises(ConfigError, match="or strict alone"):
        Matcher([cassette], match_on=["strict", "path"])


def test_a_cassette_and_the_command_line_can_ask_for_strict_matching(tmp_path: Path) -> None:
    Cassette([recording(CHAT, HELLO, "hello")], match_on=["strict"]).save(tmp_path / "chat.toml")
    assert 'match = ["strict"]' in (tmp_path / "chat.toml").read_text()
    assert ServeOptions.build(match_on="strict").match_on == ("strict",)
    loaded = Cassette.load(tmp_path / "chat.toml")
    with pytest.raises(NoMatchError, match=r"body\.stream is false, recorded true"):
        Matcher([loaded]).find(post(CHAT, {**HELLO, "stream": False}))


# --- the index: an exact hit costs the same whatever is loaded -------------------------------------------------


def _finding(matcher: Matcher, requests: list[Request]) -> float:
    """The least CPU time of a few rounds of finding each of `requests` (fresh copies: a server parses each)."""
    spent = []
    for _ in range(5):
        fresh = [Request(r.method, r.path, r.query, r.headers, r.body) for r in requests]
        start = time.process_time()
        for request in fresh:
            matcher.find(request)
        spent.append(time.process_time() - start)
    return min(spent)


def test_what_an_exact_hit_costs_does_not_grow_with_the_recordings_loaded() -> None:
    # A bound that only the bug breaks, not a time: against a cassette 80 times larger, a hit costs about as much
    # (compared with every recording, it cost about 80 times as much).
    def loaded(size: int) -> tuple[Matcher, list[Request]]:
        cassette = Cassette([recording(CHAT, {**HELLO, "n": n}, str(n)) for n in range(size)])
        return Matcher([cassette]), [cassette.interactions[n].request for n in range(0, size, size // 32)]

    small, large = loaded(64), loaded(64 * 80)
    assert tag(large[0], post(CHAT, {**HELLO, "n": 5000})) == "5000"
    _finding(*small), _finding(*large)  # each path of the code run once before it is timed
    assert _finding(*large) < 10 * max(_finding(*small), 1e-4)


def test_bodies_equal_as_data_match_however_their_numbers_are_written() -> None:
    recorded = {"model": "m", "temperature": 1.0, "messages": [{"role": "user", "content": "Hi", "n": [1, 2.5]}]}
    cassette = Cassette([recording(CHAT, {**recorded, "temperature": 0.5}, "other"), recording(CHAT, recorded, "hit")])
    asked = {"messages": [{"n": [1.0, 2.5], "content": "Hi", "role": "user"}], "temperature": 1, "model": "m"}
    assert tag(Matcher([cassette]), post(CHAT, asked)) == "hit"


def test_a_recording_redacted_where_it_is_compared_agrees_with_any_value_there() -> None:
    marker = quote(REDACTED, safe="")

    def answered(request: Request, said: str) -> Interaction:
        return Interaction(request, Response(chunks=(Chunk(0.0, said.encode()),)))

    body = json.dumps({"key": REDACTED, "n": 1}).encode()
    cassette = Cassette(
        [
            answered(Request("POST", f"/v1/keys/{marker}/use", query=f"a=1&token={marker}", body=body), "everywhere"),
            answered(Request("POST", "/form", body=f"user=u&password={marker}".encode()), "form"),
            answered(Request("POST", "/escaped", body=b'{"key": "\\u003credacted>"}'), "escaped"),
        ]
    )
    matcher = Matcher([cassette], match_on=["method", "path", "query", "body"])
    asked = Request("POST", "/v1/keys/sk-1/use", query="token=t&a=1", body=json.dumps({"n": 1, "key": "sk-9"}).encode())
    assert tag(matcher, asked) == "everywhere"
    assert tag(matcher, Request("POST", "/form", body=b"password=hunter2&user=u")) == "form"
    assert tag(matcher, Request("POST", "/escaped", body=b'{"key": "sk-9"}')) == "escaped"
    with pytest.raises(NoMatchError, match="query is 'a=2&token=t'"):
        matcher.find(Request("POST", "/v1/keys/sk-1/use", query="a=2&token=t", body=asked.body))


def test_a_protocols_own_matcher_still_decides_among_the_recordings_of_the_parts_it_keys() -> None:
    def call(id_: int, name: str) -> dict[str, object]:
        return {"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": name}}

    cassette = Cassette([recording("/mcp", call(1, "a"), "a"), recording("/mcp", call(2, "b"), "b")])
    matcher = Matcher([cassette], match_on=["method", "path", "jsonrpc"])
    assert [tag(matcher, post("/mcp", call(9, name))) for name in "bab"] == ["b", "a", "b"]
    with pytest.raises(NoMatchError, match=r"params\.name"):
        matcher.find(post("/mcp", call(9, "c")))


def test_recordings_of_cassettes_matched_differently_take_turns_in_the_order_loaded() -> None:
    loose = Cassette([recording(CHAT, HELLO, "loose")], match_on=(MatchOn.METHOD, MatchOn.PATH))
    exact = Cassette([recording(CHAT, HELLO, "exact")])
    ignoring = Cassette([recording(CHAT, HELLO, "ignoring")], ignore_body_fields=("user",))
    for cassettes in ([loose, exact, ignoring], [ignoring, exact, loose]):
        matcher = Matcher(cassettes)
        names = [tag(matcher, post(CHAT, HELLO)) for _ in range(4)]
        assert names == [*(c.interactions[0].response.body.decode() for c in cassettes), names[0]]


def test_a_recording_added_while_serving_answers_from_the_next_request_on(cassette: Cassette) -> None:
    matcher = Matcher([cassette])
    asked = {**HELLO, "messages": [{"role": "user", "content": "New"}]}
    with pytest.raises(NoMatchError):
        matcher.find(post(CHAT, asked))
    matcher.add(recording(CHAT, asked, "new"), cassette, 3)
    assert tag(matcher, post(CHAT, asked)) == "new"
    assert tag(matcher, post(CHAT, HELLO)) == "hello"


@pytest.mark.slow
def test_a_short_scale_benchmark_finds_every_request_and_serves_every_stream(tmp_path: Path) -> None:
    # bench/matching_scale_bench.py, briefly: it checks that each find is the recording asked for and that each
    # served stream is whole, and prints a line a size with its figures.
    bench = Path(__file__).parent.parent / "bench" / "matching_scale_bench.py"
    args = ["--sizes", "10,100", "--asked", "10", "--finds", "50", "--rounds", "1", "--server", "--streams", "20"]
    command = [sys.executable, str(bench), *args, "--folder", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    titles = [line.split(",")[0] for line in lines if "|" not in line]
    assert titles == ["body library (method", "loose library (method"]
    assert [line.split("|")[0].strip() for line in lines if "|" in line] == ["interactions", "10", "100"] * 4
    assert len(list((tmp_path / "loose" / "100").glob("*.msgpack"))) == 1
