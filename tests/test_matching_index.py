"""The index beyond the built-in parts: phases, and a protocol's own matcher.

A request of a rule that keys no body (`method,path`) finds its recordings by its phase. Most tests here drive
one generated library of LLM recordings on one path through two matchers: one as it runs, the other with the
phase index out of the way (a threshold past any library's size, so that every request is compared with every
recording its key finds, as before there was one). They must choose the very same recordings, take the same
turns and explain the same misses, with repeats allowed and not, and with recordings added mid-run. MCP's
`jsonrpc` matcher is keyed by the JSON-RPC method and params it compares, and A2A's `a2a` by what a request asks
without the ids its client mints: a generated A2A library finds the same recordings by key as the same
comparison does when it is installed from outside as a matcher that says nothing of what it compares (no key).
How many recordings a hit is compared with does not grow with the library's size: a protocol's matcher installed
through the entry point, as any package adds one, counts the recordings it is asked about.
"""

from __future__ import annotations

import importlib
import json
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from installed import installed_protocol

from sse_tape import Cassette, Chunk, End, Interaction, Matcher, NoMatchError, Request, Response
from sse_tape.dialects import DIALECTS
from sse_tape.matching import finder

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
LOOSE = ["method", "path"]

_WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
_TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "choices": [choice]}).encode()


def _text(tag: str) -> Response:
    frames = [_chunk({"role": "assistant", "content": tag}), _chunk({}, "stop"), b"data: [DONE]"]
    return Response(200, (("content-type", "text/event-stream"),), tuple(Chunk(0.0, f + b"\n\n") for f in frames))


def _calls(tag: str, name: str) -> Response:
    call = {"index": 0, "id": f"call_{tag}", "type": "function", "function": {"name": name, "arguments": "{}"}}
    frames = [_chunk({"role": "assistant", "tool_calls": [call]}), _chunk({}, "tool_calls"), b"data: [DONE]"]
    return Response(200, (("content-type", "text/event-stream"),), tuple(Chunk(0.0, f + b"\n\n") for f in frames))


def _json(tag: str) -> Response:
    message = {"role": "assistant", "content": tag}
    answer = {"id": "c", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}
    return Response(200, (("content-type", "application/json"),), (Chunk(0.0, json.dumps(answer).encode()),))


def _limited() -> Response:
    error = {"error": {"type": "rate_limit_error", "message": "slow down"}}
    return Response(429, (("content-type", "application/json"),), (Chunk(0.0, json.dumps(error).encode()),))


def _conversation(n: int, after: bool) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    messages.append({"role": "user", "content": f"Question {n}"})
    if after:
        call = {"id": f"call_{n}", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{n}", "content": "18C"})
    return messages


def _body(n: int, *, after: bool = False, tools: list[Any] | None = None, **more: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": _conversation(n, after), "stream": True}
    if tools is not None:
        body["tools"] = tools
    return body | more


def _post(body: dict[str, Any], last_id: str | None = None, path: str = CHAT) -> Request:
    headers = (("content-type", "application/json"),) + ((("last-event-id", last_id),) if last_id else ())
    return Request("POST", path, headers=headers, body=json.dumps(body).encode())


def _library(conversations: int, seed: int) -> tuple[list[Interaction], list[Request]]:
    """Recordings of many conversations on one path, in every phase, some recorded more than once, some of an
    error or a JSON answer, some of reconnections; and requests for each, and for what none recorded."""
    pick = random.Random(seed)
    recorded: list[Interaction] = []
    asked: list[Request] = []
    for n in range(conversations):
        plain, offered = _body(n), _body(n, tools=[_WEATHER])
        after = _body(n, after=True, tools=[_WEATHER])
        forced = offered | {"tool_choice": "required"}
        recorded.append(Interaction(_post(plain), _text(f"plain {n}")))
        recorded.append(Interaction(_post(offered), _calls(f"{n}", "get_weather")))
        if pick.random() < 0.7:
            recorded.append(Interaction(_post(after), _text(f"after {n}")))
        if pick.random() < 0.3:  # recorded again: repeats take turns
            recorded.append(Interaction(_post(plain), _text(f"plain {n} again")))
        if pick.random() < 0.4:  # a 429 then an answer in the other shape (reshaped), of one phase
            recorded.append(Interaction(_post(after), _limited()))
            recorded.append(Interaction(_post(after | {"stream": False}), _json(f"after {n} as JSON")))
        if pick.random() < 0.2:  # a reconnection, recorded
            recorded.append(Interaction(_post(plain, last_id="2"), _text(f"plain {n} from 2")))
        if pick.random() < 0.2:  # a model that ignored tool_choice: its answer fits no request of its phase
            recorded.append(Interaction(_post(forced), _text(f"forced {n} ignored")))
        if pick.random() < 0.2:  # cut short on the recording side: a recorder fetches it again
            cut = replace(_text(f"plain {n} cut"), end=End.INTERRUPTED)
            recorded.append(Interaction(_post(plain), cut))
        asked += [_post(plain), _post(offered), _post(after), _post(plain, last_id="2"), _post(plain, last_id="7")]
        asked += [
            _post(offered | {"tool_choice": "none"}),  # no recording of its phase fits: a miss or a lesser phase
            _post(forced),
            _post(_body(n, tools=[_TIME], tool_choice="required")),  # nothing recorded calls get_time: a miss
            _post(_body(n, tools=[_WEATHER, _TIME])),  # other tools: the closest phase that fits
            _post(after | {"tool_choice": "auto"}),
            _post(after | {"stream": False}),
            _post(plain | {"temperature": 0.5}),  # the same phase, another setting: the most alike body
            _post(_body(n + conversations)),  # a conversation never recorded: the nearest one
        ]
    pick.shuffle(asked)
    return recorded, asked


def _answers(matcher: Matcher, requests: list[Request]) -> Iterator[str]:
    """What the matcher answers each request with: a recording, or the miss's message."""
    for request in requests:
        fresh = Request(request.method, request.path, request.query, request.headers, request.body)
        try:
            found = matcher.find(fresh)
            yield f"{found}: {found.interaction.response.body.decode()}"
        except NoMatchError as miss:
            yield f"miss: {miss}"


@contextmanager
def _unindexed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Within it, matchers compare every request with every recording its key finds: the phase index out of the
    way (past a threshold no library reaches)."""
    with monkeypatch.context() as patched:
        patched.setattr(finder, "FEW", 10**9)
        yield


def _compare(
    monkeypatch: pytest.MonkeyPatch,
    interactions: list[Interaction],
    asked: list[Request],
    *,
    split: bool = False,
    **options: Any,
) -> list[str]:
    """What the two matchers answer, asserted the same; with `split`, the recordings go in two cassettes (their
    halves, interleaved) matched alike but for a field the second ignores: two groups of the index."""
    cassettes = [Cassette(interactions, match_on=LOOSE)]
    if split:
        cassettes = [
            Cassette(interactions[::2], match_on=LOOSE),
            Cassette(interactions[1::2], match_on=LOOSE, ignore_body_fields=("temperature",)),
        ]
    indexed, compared = Matcher(cassettes, **options), Matcher(cassettes, **options)
    got = list(_answers(indexed, asked))
    with _unindexed(monkeypatch):
        expected = list(_answers(compared, asked))
    assert got == expected
    return got


SETTINGS = {
    "replay": {},
    "no repeats": {"allow_repeats": False},
    "a recorder's": {"reshape": False, "resume": False, "refetch": True},
    "two cassettes": {"split": True},
}


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("setting", SETTINGS)
def test_the_index_of_phases_chooses_what_comparing_every_recording_chooses(
    monkeypatch: pytest.MonkeyPatch, seed: int, setting: str
) -> None:
    recorded, asked = _library(40, seed)
    got = _compare(monkeypatch, recorded, asked * 3, **SETTINGS[setting])
    allow_repeats = SETTINGS[setting].get("allow_repeats", True)
    # The library has what the index must get right: hits of every kind, turns, misses.
    for kind in ("again", "from 2", "JSON"):
        assert any(kind in g for g in got), kind
    assert any(g.startswith("miss: no recorded interaction") for g in got)
    if not allow_repeats:
        assert any("played already" in g for g in got)


def test_recordings_added_mid_run_are_found_by_their_phase_from_the_next_request_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorded, asked = _library(40, 3)
    later = [Interaction(_post(_body(n + 40)), _text(f"new {n}")) for n in range(40)]
    later += [Interaction(_post(_body(n)), _text(f"plain {n} added")) for n in range(40)]  # a repeat, added
    later += [Interaction(_post(_body(n, tools=[_WEATHER, _TIME])), _calls(f"t{n}", "get_time")) for n in range(40)]
    cassette = Cassette(recorded, match_on=LOOSE)
    indexed, compared = Matcher([cassette]), Matcher([cassette])
    got: list[str] = []
    expected: list[str] = []
    for step in range(4):
        got += _answers(indexed, asked[step::4])
        with _unindexed(monkeypatch):
            expected += _answers(compared, asked[step::4])
        for n, interaction in enumerate(later[step::4]):
            for matcher in (indexed, compared):
                matcher.add(interaction, cassette, len(recorded) + step * 100 + n + 1)
    assert got == expected
    # What was added answers its own phase: a conversation never recorded before, tools never offered before.
    assert b"new 5" in indexed.find(_post(_body(45))).interaction.response.body
    assert b"get_time" in indexed.find(_post(_body(3, tools=[_WEATHER, _TIME]))).interaction.response.body


def _turn(n: int, previous: int | None, tools: bool, said: int | None = None) -> Interaction:
    """A Responses API request saying `turn {said}` (n's by default) continuing the response of another
    (`previous_response_id`), answered in JSON."""
    asked: dict[str, Any] = {"model": "m", "input": f"turn {n if said is None else said}"}
    if previous is not None:
        asked["previous_response_id"] = f"resp_{previous}"
    if tools:
        asked["tools"] = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    message = {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed"}
    message["content"] = [{"type": "output_text", "text": f"ok {n}", "annotations": []}]
    answer = {"id": f"resp_{n}", "object": "response", "status": "completed", "model": "m", "output": [message]}
    headers = (("content-type", "application/json"),)
    return Interaction(
        Request("POST", RESPONSES, headers=headers, body=json.dumps(asked).encode()),
        Response(200, headers, (Chunk(0.0, json.dumps(answer).encode()),)),
    )


def test_continuations_are_found_by_the_phase_they_continue(monkeypatch: pytest.MonkeyPatch) -> None:
    # Turns whose phase is that of the conversation they continue: the same text in another conversation is
    # another phase. Some continue a response recorded later than them, some one a recorder adds mid-run.
    chains = [_turn(n, n - 1 if n % 5 else None, tools=n % 3 == 0) for n in range(200)]
    same_words = [_turn(1000 + n, None, tools=n % 3 == 0, said=n) for n in range(200)]  # continuing nothing
    asked = [t.request for t in chains + same_words] * 2
    random.Random(4).shuffle(asked)
    _compare(monkeypatch, chains[::2] + same_words + chains[1::2], asked)
    cassette = Cassette(chains[::4] + same_words + chains[1::4], match_on=LOOSE)
    indexed, compared = Matcher([cassette]), Matcher([cassette])
    got, expected = list(_answers(indexed, asked[:100])), []
    with _unindexed(monkeypatch):
        expected += _answers(compared, asked[:100])
    for n, turn in enumerate(chains[2::4] + chains[3::4]):  # a recorder's, mid-run
        for matcher in (indexed, compared):
            matcher.add(turn, cassette, 1000 + n)
    got += _answers(indexed, asked)
    with _unindexed(monkeypatch):
        expected += _answers(compared, asked)
    assert got == expected
    assert sum("ok" in answer for answer in got) > len(got) / 2


# A protocol's matcher, as a package of its own would ship it: any request agrees with any recording, and each
# recording it is asked about is noted. Named first in a rule, it is asked about every recording that `find`
# compares before the rule's other matchers decide: how many those are is how much a request costs.
def bringing(name: str, matcher: str) -> str:
    """The source of a protocol class `name` with no stream of its own that brings the matcher `matcher` (a
    function defined before it), to install from outside as a package would (`installed_protocol`)."""
    return f'''

class {name}(Protocol):
    """No stream of its own: it brings the `{matcher}` matcher."""

    name = "{name.lower()}"
    path = "/{name.lower()}"
    matchers = {{"{matcher}": {matcher}}}

    def is_terminal(self, event):
        return True

    def error_frames(self, error, before=(), sent=()):
        return []
'''


COUNTING = '''
from sse_tape.dialects.protocol import Protocol

ASKED = []


def asked(request, recorded):
    """Any request agrees; the recording it was compared with is noted in `ASKED`."""
    ASKED.append(recorded)
    return None

''' + bringing("Counting", "asked")


@pytest.fixture
def asked(tmp_path: Path) -> Iterator[list[Request]]:
    """The recordings the `asked` matcher is asked about, in order: the counting protocol installed in a
    directory on sys.path as pip leaves a package."""
    with installed_protocol(tmp_path / "site", "counting_matcher", COUNTING, "counting = counting_matcher:Counting"):
        noted: list[Request] = importlib.import_module("counting_matcher").ASKED
        yield noted
        sys.modules.pop("counting_matcher", None)
        DIALECTS.refresh()


def _most_compared(matcher: Matcher, requests: list[Request], asked: list[Request]) -> int:
    """The most recordings `find` compared any one of `requests` with (fresh copies: a server parses each), as
    the `asked` matcher counts them."""
    most = 0
    for r in requests:
        asked.clear()
        matcher.find(Request(r.method, r.path, r.query, r.headers, r.body))
        most = max(most, len(asked))
    return most


def test_an_exact_phase_hit_is_compared_with_as_many_recordings_whatever_the_conversations_on_its_path(
    asked: list[Request],
) -> None:
    # A library 80 times larger, all of it on one path and matched by method and path: a hit is compared with
    # the recordings of its very phase alone, as many in both (compared with every recording, it was compared
    # with 80 times as many). Reconnections too, with an id no recording was made with: those made without one
    # resume.
    def loaded(size: int) -> tuple[Matcher, list[Request]]:
        recorded = [Interaction(_post(_body(n)), _text(str(n))) for n in range(size)]
        recorded.append(Interaction(_post(_body(0), last_id="2"), _text("0 from 2")))
        cassette = Cassette(recorded, match_on=["asked", *LOOSE])
        sent = [_post(_body(n), last_id="7" if i % 2 else None) for i, n in enumerate(range(0, size, size // 32))]
        return Matcher([cassette]), sent

    small, large = loaded(64), loaded(64 * 80)
    assert large[0].find(_post(_body(5000))).interaction.response.body.count(b"5000") == 1
    assert [b"Question 5000" in recorded.body for recorded in asked] == [True]  # the one that answers
    assert _most_compared(*small, asked) == _most_compared(*large, asked) == 1


def test_a_request_sent_as_recorded_still_differs_in_its_method_and_query() -> None:
    # Its body and path are compared as the recording's are, with no copy made; what else the rule compares is
    # compared still.
    sent = _post(_body(1))
    cassette = Cassette([Interaction(Request("POST", CHAT, "a=1", sent.headers, sent.body), _text("hit"))])
    matcher = Matcher([cassette], match_on=["method", "path", "query", "body"])
    assert b"hit" in matcher.find(Request("POST", CHAT, "a=1", sent.headers, sent.body)).interaction.response.body
    with pytest.raises(NoMatchError, match="query is 'a=2', recorded 'a=1'"):
        matcher.find(Request("POST", CHAT, "a=2", sent.headers, sent.body))
    with pytest.raises(NoMatchError, match="method is 'PUT', recorded 'POST'"):
        matcher.find(Request("PUT", CHAT, "a=1", sent.headers, sent.body))


# --- MCP's `jsonrpc` matcher: keyed by the JSON-RPC method and params it compares -----------------------------


def _rpc(id_: int | None, name: str, **meta: Any) -> bytes:
    params: dict[str, Any] = {"name": name, "arguments": {"city": name}}
    if meta:
        params["_meta"] = meta
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": "tools/call", "params": params}
    if id_ is not None:
        body["id"] = id_
    return json.dumps(body).encode()


def _mcp(body: bytes, said: str) -> Interaction:
    headers = (("content-type", "application/json"),)
    return Interaction(
        Request("POST", "/mcp", headers=headers, body=body), Response(200, headers, (Chunk(0.0, said.encode()),))
    )


def _said(matcher: Matcher, body: bytes) -> str:
    return matcher.find(
        Request("POST", "/mcp", headers=(("content-type", "application/json"),), body=body)
    ).interaction.response.body.decode()


def test_jsonrpc_requests_are_found_by_method_and_params_whatever_their_ids() -> None:
    recorded = [_mcp(_rpc(n, f"tool{n}"), f"call {n}") for n in range(100)]
    recorded.append(_mcp(_rpc(None, "tool7"), "notified 7"))  # a notification: another request than a call
    recorded.append(
        _mcp(
            json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "<redacted>"}}).encode(),
            "redacted",
        )
    )
    recorded.append(_mcp(b"not json", "raw"))
    matcher = Matcher([Cassette(recorded)], match_on=["method", "path", "jsonrpc"])
    assert _said(matcher, _rpc(9000, "tool42", progressToken=7, traceparent="00-aa-bb-01")) == "call 42"
    assert _said(matcher, _rpc(None, "tool7")) == "notified 7"
    assert _said(matcher, _rpc(3, "tool7")) == "call 7"
    secret = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "sk-live-1"}}
    assert _said(matcher, json.dumps(secret).encode()) == "redacted"
    assert _said(matcher, b"not json") == "raw"
    with pytest.raises(NoMatchError, match=r"params\.name is \"tool100\", recorded \"tool"):
        _said(matcher, _rpc(1, "tool100"))


def test_a_jsonrpc_hit_is_compared_with_as_many_recordings_whatever_the_calls_recorded(
    asked: list[Request],
) -> None:
    # Found by its key, a call is compared with the recordings of its method and params alone, as many in a
    # library 80 times larger (with every call compared, it was compared with 80 times as many).
    def loaded(size: int) -> tuple[Matcher, list[Request]]:
        cassette = Cassette([_mcp(_rpc(n, f"tool{n}"), str(n)) for n in range(size)])
        matcher = Matcher([cassette], match_on=["asked", "method", "path", "jsonrpc"])
        return matcher, [cassette.interactions[n].request for n in range(0, size, size // 32)]

    small, large = loaded(64), loaded(64 * 80)
    assert _said(large[0], _rpc(1, "tool5000")) == "5000"
    assert [recorded.json()["params"]["name"] for recorded in asked] == ["tool5000"]
    assert _most_compared(*small, asked) == _most_compared(*large, asked) == 1


# --- A2A's `a2a` matcher: keyed by what a request asks, never the ids its client mints --------------------------


def _a2a_body(n: int, text: str, form: str, fresh: int, **more: Any) -> tuple[str, str, bytes]:
    """Method, path and body of an A2A request sending message `text` in one of A2A's forms (1.0's and 0.3's
    JSON-RPC and REST bindings, a subscription again by either version, REST's `:subscribe`), its ids minted
    anew from `fresh` as each client's are."""
    ids = f"{fresh}-{n}"
    if form == "1.0":
        message = {"messageId": f"m-{ids}", "role": "ROLE_USER", "parts": [{"text": text}], **more}
        body: Any = {"jsonrpc": "2.0", "id": ids, "method": "SendStreamingMessage", "params": {"message": message}}
        return "POST", "/a2a", json.dumps(body).encode()
    if form == "0.3":
        parts = [{"kind": "text", "text": text}]
        message = {"kind": "message", "messageId": f"m-{ids}", "role": "user", "parts": parts}
        if fresh % 2:
            message["contextId"] = f"c-{ids}"  # a client may name its context, or leave it out
        body = {"jsonrpc": "2.0", "id": fresh, "method": "message/stream", "params": {"message": message | more}}
        return "POST", "/a2a", json.dumps(body).encode()
    if form == "rest":
        message = {"messageId": f"m-{ids}", "role": "ROLE_USER", "parts": [{"text": text}], **more}
        return "POST", "/message:stream", json.dumps({"message": message}).encode()
    if form == "rest 0.3":
        message = {"message_id": f"m-{ids}", "role": "ROLE_USER", "content": [{"text": text}], **more}
        return "POST", "/v1/message:stream", json.dumps({"request": message}).encode()
    if form == "resubscribe":
        body = {"jsonrpc": "2.0", "id": ids, "method": "tasks/resubscribe", "params": {"id": f"task-{text}"}}
        return "POST", "/a2a", json.dumps(body).encode()
    return "GET", f"/tasks/task-{text}:subscribe", b""


_A2A_FORMS = ("1.0", "0.3", "rest", "rest 0.3", "resubscribe", "subscribe")


def _a2a_request(method: str, path: str, body: bytes, last_id: str | None = None) -> Request:
    headers = (("content-type", "application/json"),) + ((("last-event-id", last_id),) if last_id else ())
    return Request(method, path, headers=headers, body=body)


def _a2a_answer(said: str, status: int = 200) -> Response:
    result = {"jsonrpc": "2.0", "id": "1", "result": {"message": {"role": "ROLE_AGENT", "parts": [{"text": said}]}}}
    chunk = Chunk(0.0, b"data: " + json.dumps(result).encode() + b"\n\n")
    return Response(status, (("content-type", "text/event-stream"),), (chunk,))


def _a2a_library(messages: int, seed: int) -> tuple[list[Interaction], list[Request]]:
    """Recordings of many A2A messages in every form, some recorded more than once, some with a redacted part
    (which agrees with any), some of a reconnection, a few bodies that are not JSON; and requests for each with
    ids of their own, and for what none recorded."""
    pick = random.Random(seed)
    recorded: list[Interaction] = []
    asked: list[Request] = []
    for n in range(messages):
        form = _A2A_FORMS[n % len(_A2A_FORMS)]
        text = f"say {n}"
        recorded.append(Interaction(_a2a_request(*_a2a_body(n, text, form, 0)), _a2a_answer(f"{form} {n}")))
        if pick.random() < 0.3:  # recorded again: repeats take turns
            again = _a2a_body(n, text, form, 1)
            recorded.append(Interaction(_a2a_request(*again), _a2a_answer(f"{form} {n} again")))
        if pick.random() < 0.2:  # a reconnection, recorded
            resumed = _a2a_request(*_a2a_body(n, text, form, 2), last_id="3")
            recorded.append(Interaction(resumed, _a2a_answer(f"{form} {n} from 3")))
        if pick.random() < 0.2:  # the message's metadata redacted: it agrees with any
            secret = _a2a_body(n, text, form, 3, metadata={"key": "<redacted>"})
            recorded.append(Interaction(_a2a_request(*secret), _a2a_answer(f"{form} {n} redacted")))
        if pick.random() < 0.2:  # an error, then an answer
            recorded.append(Interaction(_a2a_request(*_a2a_body(n, text, form, 4)), _a2a_answer("busy", 429)))
        if pick.random() < 0.1:
            recorded.append(Interaction(_a2a_request("POST", "/a2a", f"not json {n}".encode()), _a2a_answer("raw")))
        for fresh in (10, 11):
            asked.append(_a2a_request(*_a2a_body(n, text, form, fresh)))
        asked += [
            _a2a_request(*_a2a_body(n, text, form, 12), last_id="3"),
            _a2a_request(*_a2a_body(n, text, form, 13), last_id="9"),
            _a2a_request(*_a2a_body(n, text, form, 14, metadata={"key": "sk-live-1"})),
            _a2a_request(*_a2a_body(n, text, form, 15, metadata={"key": "sk-live-1", "more": 1})),  # a miss
            _a2a_request(*_a2a_body(n, f"say {n + messages}", form, 16)),  # never recorded: a miss
            _a2a_request(*_a2a_body(n, text, _A2A_FORMS[(n + 1) % len(_A2A_FORMS)], 17)),  # another form's
            _a2a_request("POST", "/a2a", f"not json {n}".encode()),
        ]
    pick.shuffle(asked)
    return recorded, asked


# A2A's matcher as a package of its own could wrap it: the same comparison, saying nothing of what it compares, so
# that the index has no key for it and asks it of every recording the rule's other matchers leave.
WHOLE = '''
from sse_tape.dialects.a2a import a2a
from sse_tape.dialects.protocol import Protocol


def a2a_whole(request, recorded):
    """A2A's `a2a`, with no key: asked of each recording."""
    return a2a(request, recorded)

''' + bringing("Whole", "a2a_whole")


@pytest.fixture
def whole(tmp_path: Path) -> Iterator[None]:
    """The `a2a_whole` matcher, installed in a directory on sys.path as pip leaves a package."""
    with installed_protocol(tmp_path / "site", "whole_matcher", WHOLE, "whole = whole_matcher:Whole"):
        yield


@pytest.mark.usefixtures("whole")
@pytest.mark.parametrize("messages", [8, 60])
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("setting", SETTINGS)
def test_a2a_finds_by_key_what_comparing_every_recording_finds(messages: int, seed: int, setting: str) -> None:
    # 8 messages: fewer recordings than a group of built-in parts is compared whole at (`index.FEW`); 60: more.
    recorded, asked = _a2a_library(messages, seed)
    options = dict(SETTINGS[setting])
    split = options.pop("split", False)
    found = {}
    for rule in ("a2a", "a2a_whole"):
        cassettes = [Cassette(recorded, match_on=["method", "path", rule])]
        if split:
            cassettes = [
                Cassette(recorded[::2], match_on=["method", "path", rule]),
                Cassette(
                    recorded[1::2], match_on=["method", "path", rule], ignore_body_fields=("params.message.metadata",)
                ),
            ]
        found[rule] = list(_answers(Matcher(cassettes, **options), asked))
    got = found["a2a"]
    assert got == found["a2a_whole"]
    kinds = ("again", "from 3", "redacted", "raw", "busy") if messages > 8 else ()
    for kind in ("rest 0.3", "subscribe", *kinds):  # every form; in the larger library, every kind of hit
        assert any(kind in g for g in got), kind
    assert any(g.startswith("miss: no recorded interaction") for g in got)


def test_an_a2a_hit_is_compared_with_as_many_recordings_whatever_the_messages_recorded(
    asked: list[Request],
) -> None:
    # Found by its key, a message sent with ids of its own is compared with the recordings of what it asks alone,
    # as many in a library 80 times larger (with every message compared, it was compared with 80 times as many).
    def loaded(size: int) -> tuple[Matcher, list[Request]]:
        forms = ("1.0", "0.3", "rest")
        recorded = [
            Interaction(_a2a_request(*_a2a_body(n, f"say {n}", forms[n % 3], 0)), _a2a_answer(f"said {n}"))
            for n in range(size)
        ]
        matcher = Matcher([Cassette(recorded, match_on=["asked", "method", "path", "a2a"])])
        sent = [_a2a_request(*_a2a_body(n, f"say {n}", forms[n % 3], 1)) for n in range(0, size, size // 32)]
        return matcher, sent

    small, large = loaded(64), loaded(64 * 80)
    found = large[0].find(_a2a_request(*_a2a_body(5002, "say 5002", "0.3", 7)))
    assert b'"said 5002"' in found.interaction.response.body
    assert [b'"say 5002"' in recorded.body for recorded in asked] == [True]
    assert _most_compared(*small, asked) == _most_compared(*large, asked) == 1
