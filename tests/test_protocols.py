"""A protocol added from outside the package, through the entry point: recorded, replayed by its own matcher,
and faulted in its own words, against real sockets on loopback."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from aiohttp import web
from installed import installed_protocol
from upstream import on_loopback

from sse_tape import Cassette, arecording, aserve
from sse_tape.cassette import Request
from sse_tape.dialects import DIALECTS, Protocol, detect
from sse_tape.matching import MATCHERS
from sse_tape.sse import ServerSentEvent, SSEDecoder

# A toy SSE protocol, as a package of its own would ship it: POST /toy/stream with a topic and a request id,
# answered with `tick` events then `event: bye`; an error is `event: trouble`, then `bye`. Its matcher
# compares what is asked, not the id each request carries.
TOY = '''
import json

from sse_tape.dialects.protocol import Protocol
from sse_tape.sse import encode_event


def same_ask(request, recorded):
    """The request's JSON body, but for its `request_id`."""
    asked, kept = request.json() or {}, recorded.json() or {}
    asked, kept = ({k: v for k, v in body.items() if k != "request_id"} for body in (asked, kept))
    if asked == kept:
        return None
    return "; ".join(f"ask {k} is {asked.get(k)!r}, recorded {kept.get(k)!r}" for k in sorted(asked.keys() | kept.keys()) if asked.get(k) != kept.get(k))


class Toy(Protocol):
    """Ticks about a topic, then `event: bye`."""

    name = "toy-stream"
    path = "/toy/stream"
    matchers = {"toy-ask": same_ask}

    def is_terminal(self, event):
        return event.event in ("bye", "trouble")

    def error_frames(self, error, before=(), sent=()):
        trouble = json.dumps({"trouble": error.message, "after": len(sent)})
        return [encode_event(trouble, event="trouble"), encode_event("{}", event="bye")]
'''


def tick(n: int, topic: str) -> bytes:
    return f'event: tick\ndata: {{"n": {n}, "topic": "{topic}"}}\n\n'.encode()


BYE = b"event: bye\ndata: {}\n\n"


def stream_of(topic: str) -> bytes:
    """What the toy upstream sends for a topic."""
    return b"".join(tick(n, topic) for n in range(1, 5)) + BYE


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[Protocol]:
    """The toy protocol, installed in a directory on sys.path as pip leaves a package."""
    with installed_protocol(tmp_path / "site", "toy_stream", TOY, "toy-stream = toy_stream:Toy"):
        yield DIALECTS["toy-stream"]


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    """The toy's own server on a free loopback port: its stream, in one write per event."""

    async def stream(request: web.Request) -> web.StreamResponse:
        asked = await request.json()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for n in range(1, 5):
            await response.write(tick(n, asked["topic"]))
        await response.write(BYE)
        await response.write_eof()
        return response

    async with on_loopback("/toy/stream", stream) as url:
        yield url


async def ask(client: httpx.AsyncClient, url: str, topic: str, request_id: str) -> httpx.Response:
    return await client.post(f"{url}/toy/stream", json={"request_id": request_id, "topic": topic})


async def events(client: httpx.AsyncClient, url: str, topic: str, fault: str) -> tuple[list[ServerSentEvent], bool]:
    """The events a client reads of a faulted stream, and whether it ended cleanly."""
    got = b""
    try:
        async with client.stream(
            "POST", f"{url}/toy/stream", json={"request_id": "r-9", "topic": topic}, headers={"X-SSE-Tape-Fault": fault}
        ) as response:
            async for chunk in response.aiter_bytes():
                got += chunk
    except (httpx.RemoteProtocolError, httpx.ReadError):  # closed, or reset, before the stream's end
        return SSEDecoder().feed(got), False
    return SSEDecoder().feed(got), True


def trouble(event: ServerSentEvent) -> dict[str, object]:
    assert event.event == "trouble"
    parsed: dict[str, object] = json.loads(event.data)
    return parsed


async def test_a_protocol_from_outside_is_recorded_replayed_by_its_own_matcher_and_faulted(
    toy: Protocol, upstream: str, tmp_path: Path
) -> None:
    assert "toy-ask" in MATCHERS  # named beside the built-in matchers, through the dialect registry
    cassette = tmp_path / "toy.toml"
    async with httpx.AsyncClient() as client:
        async with arecording(cassette, upstream) as recorder:
            recorded = await ask(client, recorder.url, "weather", "r-1")
        assert (recorded.status_code, recorded.content) == (200, stream_of("weather"))
        kept = Cassette.load(cassette)
        [interaction] = kept.interactions
        assert detect(interaction) is toy
        assert interaction.response.body == stream_of("weather")

        async with aserve(cassette, pace="instant") as strict:  # the body as a whole: the id differs
            missed = await ask(client, strict.url, "weather", "r-2")
            assert missed.status_code == 404
            assert missed.json()["error"]["message"].endswith('body.request_id is "r-2", recorded "r-1"')
        kept.match_on = ("method", "path", "toy-ask")  # the cassette names the toy's matcher
        kept.save(cassette)
        async with aserve(cassette, pace="instant") as replay:
            # Another request id: the same ask, by the toy's own matcher.
            again = await ask(client, replay.url, "weather", "r-2")
            assert (again.status_code, again.content) == (200, stream_of("weather"))
            missed = await ask(client, replay.url, "tides", "r-3")
            assert missed.status_code == 404
            assert missed.json()["error"]["message"].endswith(
                "closest: toy.toml #1 (POST /toy/stream): ask topic is 'tides', recorded 'weather'"
            )
            # Its own error frame, after the event the fault names, then its own end.
            got, clean = await events(client, replay.url, "weather", "error:at=2,message=overheated")
            assert clean
            assert [e.event for e in got] == ["tick", "tick", "trouble", "bye"]
            assert trouble(got[2]) == {"trouble": "overheated", "after": 2}
            got, clean = await events(client, replay.url, "weather", "disconnect:after=3,mode=reset")
            assert ([e.event for e in got], clean) == (["tick"] * 3, False)

        async with aserve(upstream=upstream, on_miss="forward", pace="instant") as forwarder:
            got, clean = await events(client, forwarder.url, "snow", "error:at=1,message=frozen")
            assert clean
            assert [e.event for e in got] == ["tick", "trouble", "bye"]
            assert json.loads(got[0].data) == {"n": 1, "topic": "snow"}
            assert trouble(got[1]) == {"trouble": "frozen", "after": 1}
            got, clean = await events(client, forwarder.url, "snow", "disconnect:after=2,mode=reset")
            assert ([e.event for e in got], clean) == (["tick"] * 2, False)


def test_a_protocols_responder_is_lent_only_the_requests_that_may_concern_it() -> None:
    # The server asks each protocol's responder first whether a request may be its feature's (`concerns`), and
    # lends it no other: a chat request concerns neither A2A's replies, MCP's sessions nor the Responses API's
    # background mode.
    responders = {type(r).__name__: r for d in DIALECTS.values() for r in d.responders()}
    chat = Request("POST", "/v1/chat/completions", body=b'{"model": "m", "messages": [], "stream": true}')
    a2a = Request("POST", "/", body=b'{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {}}')
    started = Request("POST", "/v1/responses", body=b'{"model": "m", "input": "hi", "background": true}')
    retrieved = Request("GET", "/v1/responses/resp_1")
    replies, background, sessions = responders["Replies"], responders["Background"], responders["Sessions"]
    assert not replies.concerns(chat)
    assert not sessions.concerns(chat)
    assert sessions.concerns(Request("POST", "/mcp", body=b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'))
    assert sessions.concerns(Request("GET", "/anywhere", headers=[("Mcp-Session-Id", "s1")]))
    assert not background.concerns(chat)
    assert replies.concerns(a2a)
    assert not background.concerns(a2a)
    assert background.concerns(started)
    assert background.concerns(retrieved)
    assert not background.concerns(Request("POST", "/v1/responses", body=b'{"model": "m", "input": "hi"}'))
