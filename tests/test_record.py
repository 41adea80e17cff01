"""The recording proxy and one-shot recording, against a real upstream of our own on loopback."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import itertools
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import zlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import openai
import pytest
from clients import never_reading, openai_client, unread
from httpx_sse import aconnect_sse
from planted import NEEDLES, PLANTED, one_line
from processes import descriptors, start
from upstream import Upstream, chat_chunk
from waits import SAFETY_NET, auntil, until

from sse_tape import (
    Cassette,
    CassetteError,
    Chunk,
    ConfigError,
    End,
    Interaction,
    MockServer,
    RecordMode,
    Request,
    Response,
    ServeOptions,
    SSEDecoder,
    arecording,
    aserve,
    bundled_cassettes,
    recording,
    recording_server,
    serve,
)
from sse_tape.cassette import Injection
from sse_tape.journal import Ended, FaultInjected, Matched, Received
from sse_tape.record import Forwarder
from sse_tape.redaction import REDACTED, Redaction, find_secrets
from sse_tape.server import FAULT_HEADER, Limits, run_in_thread
from sse_tape.upstream import parse_upstream

CHAT_1 = "/v1/chat/completions?events=1"
_MARKER = "%3Credacted%3E"  # the redaction marker, percent-encoded as a URL holds it
_FORM = "application/x-www-form-urlencoded"


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    async with Upstream() as up:
        yield up


@pytest.fixture
def threaded_upstream() -> Iterator[Upstream]:
    with run_in_thread(Upstream()) as up:
        yield up


async def read_all(client: httpx.AsyncClient, method: str, url: str, **kwargs: object) -> tuple[int, bytes]:
    async with client.stream(method, url, **kwargs) as response:  # type: ignore[arg-type]
        return response.status_code, b"".join([piece async for piece in response.aiter_raw()])


async def test_proxy_streams_each_chunk_through_before_the_upstream_finishes(
    upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.toml"
    async with arecording(cassette, upstream.url) as proxy, httpx.AsyncClient() as client:
        url = proxy.url + "/v1/chat/completions?events=6&gap=0.1"
        async with client.stream("POST", url, content=b'{"stream": true}') as response:
            pieces = response.aiter_raw()
            first = await pieces.__anext__()
            first_seen = asyncio.get_running_loop().time()
            rest = b"".join([piece async for piece in pieces])
    # The client had the first event while the upstream still had events to write: nothing was buffered.
    assert upstream.last_write is not None
    assert first_seen < upstream.last_write
    body = first + rest
    assert body == b"".join(chat_chunk(n) for n in range(6)) + b"data: [DONE]\n\n"
    [recorded] = Cassette.load(cassette).interactions
    assert recorded.response.body == body
    assert recorded.response.end is End.COMPLETE
    offsets = [c.t for c in recorded.response.chunks]
    assert offsets == sorted(offsets)
    assert len(recorded.response.chunks) >= 6  # one read per write, 100 ms apart
    assert recorded.request.path == "/v1/chat/completions"
    assert recorded.request.query == "events=6&gap=0.1"
    assert recorded.request.body == b'{"stream": true}'


async def test_writes_that_arrive_together_are_recorded_apart(upstream: Upstream, tmp_path: Path) -> None:
    cassette = tmp_path / "c.toml"
    async with arecording(cassette, upstream.url) as proxy, httpx.AsyncClient() as client:
        await read_all(client, "POST", proxy.url + "/v1/chat/completions?events=40&gap=0", content=b"{}")
    [recorded] = Cassette.load(cassette).interactions
    # Written back to back, so read together; each HTTP chunk the upstream wrote is still a chunk of its own.
    assert [c.data for c in recorded.response.chunks] == [chat_chunk(n) for n in range(40)] + [b"data: [DONE]\n\n"]


async def test_recording_replays_byte_for_byte(upstream: Upstream, tmp_path: Path) -> None:
    cassette = tmp_path / "c.msgpack"
    async with arecording(cassette, upstream.url) as proxy, httpx.AsyncClient() as client:
        live = await read_all(client, "POST", proxy.url + "/v1/chat/completions?events=3", content=b"{}")
    async with aserve(cassette, pace="instant") as server, httpx.AsyncClient() as client:
        replayed = await read_all(client, "POST", server.url + "/v1/chat/completions?events=3", content=b"{}")
    assert replayed == live


async def test_upstream_reset_is_passed_on_recorded_and_replayed(upstream: Upstream, tmp_path: Path) -> None:
    cassette = tmp_path / "c.toml"
    got = bytearray()

    async def read_into(url: str) -> None:
        async with httpx.AsyncClient() as client, client.stream("GET", url) as response:
            async for piece in response.aiter_raw():
                got.extend(piece)

    async with arecording(cassette, upstream.url) as proxy:
        with pytest.raises(httpx.ReadError):  # a reset, passed on as a reset
            await read_into(proxy.url + "/reset")
    [recorded] = Cassette.load(cassette).interactions
    assert recorded.response.end is End.UPSTREAM_RESET
    assert recorded.response.body == chat_chunk(0) + chat_chunk(1)
    assert got.startswith(chat_chunk(0))
    assert bytes(got) == recorded.response.body[: len(got)]
    got.clear()
    async with aserve(cassette) as server:
        with pytest.raises(httpx.ReadError):
            await read_into(server.url + "/reset")
    assert got.startswith(chat_chunk(0))


async def test_stall_past_the_idle_timeout_is_recorded_as_a_timeout(upstream: Upstream, tmp_path: Path) -> None:
    cassette = tmp_path / "c.toml"
    async with arecording(cassette, upstream.url, idle_timeout=0.3) as proxy, httpx.AsyncClient() as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await read_all(client, "GET", proxy.url + "/stall")
    [recorded] = Cassette.load(cassette).interactions
    assert recorded.response.end is End.TIMEOUT
    assert recorded.response.body == chat_chunk(0)
    assert recorded.response.duration is not None
    assert recorded.response.duration >= 0.3
    await auntil(lambda: upstream.disconnects, "the upstream's disconnect")  # the proxy gave up on the upstream too
    assert upstream.disconnects == 1


async def test_429_with_retry_after_is_recorded_and_replayed_to_the_sdk(upstream: Upstream, tmp_path: Path) -> None:
    cassette = tmp_path / "c.toml"
    async with arecording(cassette, upstream.url) as proxy:
        client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-test", max_retries=0)
        with pytest.raises(openai.RateLimitError, match="Rate limit reached") as live:
            await client.post("/limited", body={"x": 1}, cast_to=object)
        await client.close()
    [recorded] = Cassette.load(cassette).interactions
    assert recorded.response.status == 429
    assert recorded.response.header("retry-after") == "7"
    async with aserve(cassette) as server:
        client = openai.AsyncOpenAI(base_url=server.url, api_key="sk-test", max_retries=0)
        with pytest.raises(openai.RateLimitError, match="Rate limit reached") as replayed:
            await client.post("/limited", body={"x": 1}, cast_to=object)
        await client.close()
    assert replayed.value.response.headers["retry-after"] == live.value.response.headers["retry-after"] == "7"


async def test_non_utf8_chunks_are_recorded_losslessly(upstream: Upstream, tmp_path: Path) -> None:
    cassette = tmp_path / "c.toml"
    async with arecording(cassette, upstream.url) as proxy, httpx.AsyncClient() as client:
        _, live = await read_all(client, "GET", proxy.url + "/binary")
    assert live == b"data: \xff\xfe\x00\n\ndata: ok\n\n"
    assert "base64 = " in cassette.read_text()
    assert Cassette.load(cassette).interactions[0].response.body == live


async def test_client_hang_up_cancels_the_upstream_and_is_recorded(upstream: Upstream, tmp_path: Path) -> None:
    cassette = tmp_path / "c.toml"
    async with arecording(cassette, upstream.url) as proxy:
        async with httpx.AsyncClient() as client:
            url = proxy.url + "/v1/chat/completions?events=100&gap=0.05"
            async with client.stream("POST", url, content=b"{}") as response:
                await response.aiter_raw().__anext__()
        await auntil(lambda: upstream.disconnects, "the upstream's disconnect")
        assert upstream.disconnects == 1
        async with asyncio.timeout(SAFETY_NET):
            await proxy.control.idle()
    [recorded] = Cassette.load(cassette).interactions
    assert recorded.response.end is End.CLIENT_GONE
    assert 1 <= len(recorded.response.chunks) < 100


async def test_secrets_never_reach_the_cassette(upstream: Upstream, tmp_path: Path) -> None:
    cassette = tmp_path / "c.toml"
    redaction = Redaction.build(json_fields=["user"])
    async with arecording(cassette, upstream.url, redaction=redaction) as proxy, httpx.AsyncClient() as client:
        headers = {
            "Authorization": "Bearer sk-proj-BEARER-SECRET-1",
            "x-api-key": "KEY-SECRET-2",
            "x-goog-api-key": "KEY-SECRET-3",
            "Cookie": "sid=COOKIE-SECRET-4",
            "x-ratelimit-remaining-tokens": "1000",
        }
        headers["X-AuthToken"] = "CAMEL-SECRET-6"
        # What a hostile read found leaking with the defaults (issue 9): each must be redacted too.
        headers |= {
            "OpenAI-Organization": "org-LEAK-1",
            "OpenAI-Project": "proj_LEAK-2",
            "X-Authentication": "LEAK-3",
            "X-Signature": "LEAK-4",
            "X-Session-Id": "LEAK-5",
        }
        metadata = {"password": "LEAK-6", "token": "LEAK-7", "tags": [{"secret": "LEAK-8"}]}
        body = json.dumps(
            {
                "model": "m",
                "user": "alice@example.com",
                "stream": True,
                "max_tokens": 7,
                "api_key": "LEAK-9",
                "metadata": metadata,
            }
        )
        query = "events=2&api_key=QUERY-SECRET-5&accessToken=CAMEL-SECRET-7&sig=LEAK-10&X-Amz-Signature=LEAK-11&code=LEAK-12;apiKey=LEAK-13"
        await read_all(client, "POST", proxy.url + "/v1/chat/completions?" + query, headers=headers, content=body)
        await read_all(client, "GET", proxy.url + "/cookie")
    text = cassette.read_text()
    for secret in (
        "BEARER-SECRET",
        "KEY-SECRET",
        "COOKIE-SECRET",
        "QUERY-SECRET",
        "CAMEL-SECRET",
        "alice@example.com",
        "LEAK-",
        "ORG-SECRET",
    ):
        assert secret not in text
    assert json.loads(Cassette.load(cassette).interactions[0].request.body)["max_tokens"] == 7  # not a secret
    first, second = Cassette.load(cassette).interactions
    recorded = dict(first.request.headers)
    assert recorded["Authorization"] == recorded["x-api-key"] == recorded["x-goog-api-key"] == REDACTED
    assert recorded["Cookie"] == REDACTED
    assert recorded["x-ratelimit-remaining-tokens"] == "1000"
    marker = REDACTED.replace("<", "%3C").replace(">", "%3E")
    assert first.request.query == (
        f"events=2&api_key={marker}&accessToken={marker}&sig={marker}&X-Amz-Signature={marker}&code={marker};apiKey={marker}"
    )
    assert first.response.header("openai-organization") == REDACTED
    assert recorded["X-AuthToken"] == REDACTED
    assert json.loads(first.request.body)["user"] == REDACTED
    assert second.response.header("set-cookie") == REDACTED
    # The upstream itself got the real credentials.
    assert upstream.seen_headers[0]["Authorization"] == "Bearer sk-proj-BEARER-SECRET-1"


# Model output a client sends back with the conversation: never redacted, whatever it looks like.
_SIGNATURE = "EqQBCkgIBxABGAIqQK9xq3Fz+Wn1u2Qy7bR0ZP4dLk8sQ3JmT5vN0aXeY1cGhI2oE/fUiOpL9wAsDfGhJkLz=="
_REDACTED_THINKING = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnQ=="
_ENCRYPTED = "gAAAAABoISQ24Wj0Rq8dYQhY0KJv6e2_b1Vm-aN0sT3uFqWc8xL5pZ7gKdH4yRj6oX9nM2lE1tB0vC3iU8wA=="
_THOUGHT = "CiQB0e2Kb3+Jx5ZlYqP8vN1mT4rW7sH0dF2gC6aE9kL3uI5oQ=="


def test_every_shape_of_credential_in_every_place_stays_out_of_cassette_spool_and_log(
    threaded_upstream: Upstream, tmp_path: Path
) -> None:
    # Every shape of credential (tests/planted.py), whatever its name, in each place a request or a response
    # may hold one, and what the attack of issue 28 found written in clear: recorded by `sse-tape record`, and
    # the raw bytes of the spool (while recording), the cassette, the log and the journal hold none of them.
    secrets = [secret for secret, _ in PLANTED.values()]
    named = {  # credentials that only their names give away
        "query": {"jwt": "NAMEDQ1", "bearer": "NAMEDQ2", "pass": "NAMEDQ3"},
        "headers": {
            "X-Upstream-Bearer": "NAMEDH1",
            "X-Api-Pass": "NAMEDH2",
            "X-Access-Jwt": "NAMEDH3",
            "X-Private": "NAMEDH4",
            "X-Client-Cert": "NAMEDH5",
        },
        "body": {
            "api_key": ["NAMEDB1"],
            "password": {"v": "NAMEDB2"},
            "auth": {"bearer": "NAMEDB3"},
            "pin": "NAMEDB4",
            "pass": "NAMEDB5",
            "passphrase": "NAMEDB6",
            "jwt": "NAMEDB7",
        },
        "form": {"password": "NAMEDF1", "pin": "NAMEDF2", "passphrase": "NAMEDF3"},
    }
    threaded_upstream.leaky_headers = {
        **{f"X-Debug-{n}": one_line(secret) for n, secret in enumerate(secrets)},
        "X-Upstream-Bearer": "NAMEDR1",
        "X-Client-Cert": "NAMEDR2",
    }
    headers = {
        **{f"X-Debug-{n}": one_line(secret) for n, secret in enumerate(secrets)},
        **named["headers"],
        "X-Note": "ticket ACME-424242",  # the user's own shape, --secret-pattern
    }
    query = "&".join(
        [*(f"q{n}={quote(secret, safe='')}" for n, secret in enumerate(secrets)), urlencode(named["query"])]
    )
    path = "/leaky/" + "/".join(quote(one_line(secret), safe="") for secret in secrets) + "/end"
    turn = [
        {"type": "thinking", "thinking": "Tokyo, then.", "signature": _SIGNATURE},
        {"type": "redacted_thinking", "data": _REDACTED_THINKING},
        {"type": "text", "text": "Checking."},
    ]
    body = {
        "model": "m",
        "max_tokens": 7,
        "messages": [
            {"role": "assistant", "content": turn},
            {"role": "user", "content": [{"type": "text", "text": f"why does {s} fail?"} for s in secrets]},
        ],
        "deep": {"a": [{"b": [secret for secret in secrets]}]},
        "input": [{"type": "reasoning", "encrypted_content": _ENCRYPTED}],
        "contents": [{"role": "model", "parts": [{"text": "", "thoughtSignature": _THOUGHT}]}],
        "note": "ACME-424242",
        **named["body"],
    }
    not_utf8 = (
        b'{"note": "caf\xe9", "password": "NAMEDNU1", "text": "keys: '
        + " ".join(one_line(s) for s in secrets).encode()
        + b'"}'
    )
    form = urlencode({**named["form"], **{f"note{n}": secret for n, secret in enumerate(secrets)}})
    cassette = tmp_path / "c.toml"
    args = ["record", "--upstream", threaded_upstream.url, "-c", str(cassette), "--port", "0"]
    proxy, url = start([*args, "--secret-pattern", r"ACME-[0-9]{6}"])
    try:
        with httpx.Client(timeout=SAFETY_NET) as client:
            asked = [
                client.post(f"{url}{path}?{query}", headers=headers, json=body),
                client.post(f"{url}/leaky/bytes", headers={"content-type": "application/json"}, content=not_utf8),
                client.post(f"{url}/leaky/form", headers={"content-type": _FORM}, content=form),
            ]
            assert [got.status_code for got in asked] == [200, 200, 200], asked[0].text
            said = {"journal": client.get(url + "/__sse_tape__/journal").text}
        # Each stream is in the spool before its client has it.
        said |= {f"spool {p.name}": p.read_bytes() for p in tmp_path.iterdir() if p != cassette}
        assert len(said) == 2
    finally:
        proxy.send_signal(signal.SIGINT)
        out, err = proxy.communicate(timeout=SAFETY_NET)
    assert proxy.returncode == 0, err
    first, second, third = Cassette.load(cassette).interactions
    said |= {"stdout": out, "stderr": err, "cassette": cassette.read_bytes()}
    # What the cassette holds, decoded: a body that is not UTF-8 is base64 in its TOML.
    said["recorded"] = b"\n".join(
        f"{i.request.path}?{i.request.query} {i.request.headers} {i.response.headers}".encode()
        + i.request.body
        + i.response.body
        for i in (first, second, third)
    )
    needles = [*NEEDLES, *(v for place in ("query", "headers", "form") for v in named[place].values())]
    needles += ["NAMEDB", "NAMEDNU1", "NAMEDR1", "NAMEDR2", "ACME-424242"]
    for where, text in said.items():
        raw = text if isinstance(text, bytes) else text.encode()
        assert [needle for needle in needles if needle.encode() in raw] == [], where
    # The upstream had them all, as they were sent.
    assert threaded_upstream.seen_headers[0]["X-Debug-0"] == one_line(secrets[0])
    assert threaded_upstream.seen_headers[0]["X-Private"] == "NAMEDH4"
    # Model output the client sends back is kept whole, and so is what is no secret.
    kept = json.loads(first.request.body)
    assert kept["messages"][0]["content"] == turn
    assert kept["input"][0]["encrypted_content"] == _ENCRYPTED
    assert kept["contents"][0]["parts"][0]["thoughtSignature"] == _THOUGHT
    assert kept["max_tokens"] == 7
    assert kept["api_key"] == kept["password"] == kept["auth"] == kept["deep"]["a"][0]["b"][0] == REDACTED
    assert first.request.path == "/leaky/" + "/".join([_MARKER] * len(secrets)) + "/end"
    assert dict(first.request.headers)["X-Note"] == REDACTED
    assert first.response.header("x-debug-0") == first.response.header("x-client-cert") == REDACTED
    assert b"caf\xe9" in second.request.body  # the bytes that are not UTF-8 are kept as they came
    assert third.request.body.startswith(f"password={_MARKER}&pin={_MARKER}&passphrase={_MARKER}&note0=".encode())
    # What was recorded holds no secret for `check --secrets`, and replays to the very same requests.
    checked = run_cli_check(cassette)
    assert (checked.returncode, checked.stdout) == (0, "0 secrets found\n")
    with serve(cassette, pace="instant", match_on="method,path,query,body") as server, httpx.Client() as client:
        again = [
            client.post(f"{server.url}{path}?{query}", headers=headers, json=body),
            client.post(f"{server.url}/leaky/form", headers={"content-type": _FORM}, content=form),
        ]
    assert [(got.status_code, got.text) for got in again] == [(200, "data: ok\n\n")] * 2


def run_cli_check(*paths: Path, patterns: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """`sse-tape check --secrets PATHS`."""
    extra = [word for pattern in patterns for word in ("--secret-pattern", pattern)]
    command = [sys.executable, "-m", "sse_tape", "check", "--secrets", *extra, *map(str, paths)]
    return subprocess.run(command, capture_output=True, text=True, timeout=SAFETY_NET)


async def test_secrets_reach_neither_the_log_the_journal_nor_the_report(upstream: Upstream, tmp_path: Path) -> None:
    # What the cassette keeps out, everything else that tells of a request keeps out too: the log lines, the
    # --report file, the journal endpoint (which the pytest plugin's failure report prints) and the misses.
    cassette, report, lines = tmp_path / "c.toml", tmp_path / "report.jsonl", []
    options = ServeOptions.build(report=report, match_on=["method", "path", "query", "body"])
    said: dict[str, Any] = {}
    key = "AIzaSySECRETKEY1234567890"
    async with httpx.AsyncClient() as client:
        async with arecording(cassette, upstream.url, options=options, log=lines.append) as proxy:
            url = f"{proxy.url}/v1/chat/completions?events=1&key={key}"
            assert (await read_all(client, "POST", url, content=b"{}"))[0] == 200
            journal = await client.get(proxy.url + "/__sse_tape__/journal")
            said["proxy"] = journal.text
        async with arecording(tmp_path / "d.toml", "http://127.0.0.1:9", options=options, log=lines.append) as down:
            got = await client.post(f"{down.url}/v1/chat/completions?api_key=sk-DOWNSECRET1", content=b"{}")
            assert got.status_code == 502
            said["down"] = (await client.get(down.url + "/__sse_tape__/journal")).text
        async with aserve(cassette, options=options, log=lines.append) as server:
            url = f"{server.url}/v1/chat/completions?events=2&api_key=sk-QUERYSECRET2"
            got = await client.post(url, json={"password": "BODY-SECRET-3", "messages": []})
            assert got.status_code == 404
            said["miss"] = got.json()["error"]["message"]
            # A key in the path: the miss's explanation names the path too.
            got = await client.post(f"{server.url}/v1/keys/sk-proj-PATHSECRET4abcdefghijklmnop/chat", json={})
            assert got.status_code == 404
            said["path miss"] = got.json()["error"]["message"]
            said["serve"] = (await client.get(server.url + "/__sse_tape__/journal")).text
            said["misses"] = " ".join(miss.reason for miss in server.control.snapshot().misses)
    said["log"], said["report"] = "\n".join(lines), report.read_text()
    for where, text in said.items():
        for secret in (key, "DOWNSECRET", "QUERYSECRET", "BODY-SECRET", "PATHSECRET"):
            assert secret not in text, where
    marker = "%3Credacted%3E"
    assert f"-> 200 from {upstream.url}/v1/chat/completions?events=1&key={marker}" in said["log"]
    assert f"cannot reach http://127.0.0.1:9/v1/chat/completions?api_key={marker}" in said["log"]
    assert f'"query": "events=2&api_key={marker}"' in said["report"]
    # The miss still says how the request differs, secrets as the cassette would hold them.
    assert f"query is 'events=2&api_key={marker}', recorded 'events=1&key={marker}'" in said["misses"]
    assert 'body.password is "<redacted>", recorded absent' in said["misses"]
    assert said["miss"].removeprefix("sse-tape: ") in said["misses"]
    assert f"no recorded interaction matches POST /v1/keys/{marker}/chat" in said["path miss"]


async def test_a_secret_kept_in_the_cassette_is_said_in_the_log_too(upstream: Upstream, tmp_path: Path) -> None:
    # The user asked for it in the cassette (--keep-header applies to query parameters): hiding it in the
    # log alone would only make the log disagree with the cassette.
    lines: list[str] = []
    redaction = Redaction.build(keep_headers=["key"])
    async with (
        arecording(tmp_path / "c.toml", upstream.url, redaction=redaction, log=lines.append) as proxy,
        httpx.AsyncClient() as client,
    ):
        await read_all(
            client, "POST", proxy.url + "/v1/chat/completions?events=1&key=KEPT-1&token=GONE-2", content=b"{}"
        )
    assert "?events=1&key=KEPT-1&token=%3Credacted%3E" in "\n".join(lines)
    assert (
        Cassette.load(tmp_path / "c.toml").interactions[0].request.query == "events=1&key=KEPT-1&token=%3Credacted%3E"
    )


async def test_a_redacted_field_matches_any_value_on_replay(upstream: Upstream, tmp_path: Path) -> None:
    cassette = tmp_path / "c.toml"
    body = {"model": "m", "user": "alice", "stream": True}
    redaction = Redaction.build(json_fields=["user"])
    async with arecording(cassette, upstream.url, redaction=redaction) as proxy, httpx.AsyncClient() as client:
        await read_all(client, "POST", proxy.url + "/v1/chat/completions?events=1", json=body)
    async with aserve(cassette) as server, httpx.AsyncClient() as client:
        status, _ = await read_all(
            client, "POST", server.url + "/v1/chat/completions?events=1", json={**body, "user": "bob"}
        )
    assert status == 200


async def test_upstream_down_is_a_502_and_nothing_is_recorded(tmp_path: Path) -> None:
    cassette = tmp_path / "c.toml"
    async with arecording(cassette, "http://127.0.0.1:9") as proxy, httpx.AsyncClient() as client:
        got = await client.post(proxy.url + "/v1/chat/completions", json={})
    assert got.status_code == 502
    assert got.json()["error"]["message"].startswith("sse-tape: cannot reach http://127.0.0.1:9/v1/chat/completions")
    assert not cassette.exists()
    assert proxy.journal.counts["upstream-failed"] == 1


def _seed(cassette: Path, upstream: Upstream) -> None:
    """Record one interaction, `POST /v1/chat/completions?events=1` with body {}."""

    async def go() -> None:
        async with arecording(cassette, upstream.url) as proxy, httpx.AsyncClient() as client:
            await read_all(client, "POST", proxy.url + "/v1/chat/completions?events=1", content=b"{}")

    asyncio.run(go())


@pytest.mark.parametrize(
    ("mode", "hits", "statuses", "recorded"),
    [
        # The same request three times against a cassette holding it once.
        (RecordMode.NEW_EPISODES, 1, [200, 200, 200], 2),  # replayed, recorded, then what was recorded replayed
        (RecordMode.NONE, 0, [200, 200, 200], 1),  # replayed, again and again
        (RecordMode.ONCE, 0, [200, 200, 200], 1),  # the cassette exists: replay only
        (RecordMode.ALL, 3, [200, 200, 200], 4),  # always recorded
    ],
)
def test_record_modes_with_an_existing_cassette(
    threaded_upstream: Upstream, tmp_path: Path, mode: RecordMode, hits: int, statuses: list[int], recorded: int
) -> None:
    cassette = tmp_path / "c.toml"
    _seed(cassette, threaded_upstream)
    threaded_upstream.hits = 0
    with recording(cassette, threaded_upstream.url, mode=mode) as proxy:
        got = [httpx.post(proxy.url + "/v1/chat/completions?events=1", content=b"{}").status_code for _ in range(3)]
        miss = httpx.post(proxy.url + "/v1/chat/completions?events=2", content=b'{"other": 1}')
    assert got == statuses
    expected_miss = 404 if mode in (RecordMode.NONE, RecordMode.ONCE) else 200
    assert miss.status_code == expected_miss
    assert threaded_upstream.hits == hits + (expected_miss == 200)
    assert len(Cassette.load(cassette)) == recorded + (expected_miss == 200)


def test_once_records_everything_when_the_cassette_is_new(threaded_upstream: Upstream, tmp_path: Path) -> None:
    cassette = tmp_path / "new.toml"
    with recording(cassette, threaded_upstream.url, mode="once") as proxy:
        for _ in range(2):
            httpx.post(proxy.url + "/v1/chat/completions?events=1", content=b"{}")
    assert threaded_upstream.hits == 2
    assert len(Cassette.load(cassette)) == 2


def test_a_corrupt_cassette_stops_the_proxy_before_it_records(tmp_path: Path) -> None:
    cassette = tmp_path / "c.toml"
    cassette.write_text("format_version = 1\n[[interactions]\n")
    result = subprocess.run(
        [sys.executable, "-m", "sse_tape", "record", "--upstream", "http://127.0.0.1:9", "-c", str(cassette)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"Error: {cassette}: truncated or corrupt TOML")
    assert cassette.read_text() == "format_version = 1\n[[interactions]\n"


class Recorder:
    """`sse-tape record --upstream` in a subprocess, after the Python statements `setup`."""

    def __init__(self, upstream: Upstream, cassette: Path, *args: str, setup: str = "") -> None:
        command = ["record", "--upstream", upstream.url, "-c", str(cassette), "--port", "0", *args]
        self.proc, self.url = start(command, setup=setup)

    def complete(self, n: int) -> None:
        for i in range(n):  # different requests: an identical one would replay what was just recorded
            body = json.dumps({"n": i})
            assert httpx.post(self.url + "/v1/chat/completions?events=2&gap=0.01", content=body).status_code == 200

    def stop(self, sig: signal.Signals) -> str:
        self.proc.send_signal(sig)
        _, err = self.proc.communicate(timeout=30)
        return err


def _stream_in_flight(url: str) -> Iterator[bytes]:
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", url + "/v1/chat/completions?events=1000&gap=0.02", content=b"{}") as response,
    ):
        yield from response.iter_raw()


def test_sigint_saves_every_interaction_and_the_stream_in_flight(threaded_upstream: Upstream, tmp_path: Path) -> None:
    cassette = tmp_path / "c.toml"
    recorder = Recorder(threaded_upstream, cassette)
    recorder.complete(2)
    pieces = _stream_in_flight(recorder.url)
    received = next(pieces) + next(pieces) + next(pieces)
    err = recorder.stop(signal.SIGINT)
    assert recorder.proc.returncode == 0
    interactions = Cassette.load(cassette).interactions
    assert [i.response.end for i in interactions] == [End.COMPLETE, End.COMPLETE, End.INTERRUPTED]
    assert interactions[2].response.body.startswith(received)
    lines = err.splitlines()
    ended = [line for line in lines if " ended: " in line]
    for line in ended[:2]:
        assert line.startswith("sse-tape: POST /v1/chat/completions ended: 200, 3 events, ")
        assert line.endswith(" s, complete")
    # The stream cut off counts the events its client was sent, up to the bytes it was sent.
    sent = int(ended[2].split(" events, ")[1].split(" bytes")[0])
    events = len(SSEDecoder().feed(interactions[2].response.body[:sent]))
    assert events >= 3
    assert ended[2].startswith(f"sse-tape: POST /v1/chat/completions ended: 200, {events} events, {sent} bytes, ")
    assert ended[2].endswith(" s, interrupted")
    assert [line for line in lines if " recorded in the spool of " in line] == [
        f"sse-tape: POST /v1/chat/completions recorded in the spool of {cassette} as #{n} ({end})"
        for n, end in [(1, "complete"), (2, "complete"), (3, "interrupted")]
    ]
    assert lines[-1] == f"sse-tape: recorded 3 interactions to {cassette} (1 interrupted)"


def test_a_faulted_stream_stopped_by_sigint_counts_the_events_its_client_was_sent(
    threaded_upstream: Upstream, tmp_path: Path
) -> None:
    recorder = Recorder(threaded_upstream, tmp_path / "c.toml", "--fault", "ttfb:10ms")
    pieces = _stream_in_flight(recorder.url)
    received = next(pieces) + next(pieces) + next(pieces)
    [ended] = [line for line in recorder.stop(signal.SIGINT).splitlines() if " ended: " in line]
    sent = int(ended.split(" events, ")[1].split(" bytes")[0])
    assert sent >= len(received)
    [recorded] = Cassette.load(tmp_path / "c.toml").interactions
    events = len(SSEDecoder().feed(recorded.response.body[:sent]))  # ttfb leaves the stream's bytes as they are
    assert events >= 3
    assert ended.startswith(f"sse-tape: POST /v1/chat/completions ended: 200, {events} events, {sent} bytes, ")
    assert ended.endswith(" s, interrupted")


def test_sigkill_leaves_a_valid_cassette_with_every_completed_interaction(
    threaded_upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.toml"
    recorder = Recorder(threaded_upstream, cassette)
    recorder.complete(3)
    pieces = _stream_in_flight(recorder.url)
    received = next(pieces)
    recorder.stop(signal.SIGKILL)
    interactions = Cassette.load(cassette).interactions
    # The stream in flight is kept too, as far as the client got it at least.
    assert [i.response.end for i in interactions] == [End.COMPLETE] * 3 + [End.INTERRUPTED]
    assert interactions[3].response.body.startswith(received)


def test_one_shot_prints_the_stream_and_appends_it(threaded_upstream: Upstream, tmp_path: Path) -> None:
    cassette = tmp_path / "c.toml"
    (tmp_path / "body.json").write_text('{"model": "m", "stream": true}')
    command = [
        sys.executable,
        "-m",
        "sse_tape",
        "record",
        threaded_upstream.url + "/v1/chat/completions?events=3&gap=0.01",
        "-d",
        f"@{tmp_path / 'body.json'}",
        "-H",
        "Authorization: Bearer ONE-SHOT-SECRET",
        "-c",
        str(cassette),
    ]
    for n in (1, 2):
        result = subprocess.run(command, capture_output=True, timeout=60)
        assert result.returncode == 0, result.stderr
        sent = b"".join(chat_chunk(n) for n in range(3)) + b"data: [DONE]\n\n"
        assert result.stdout == sent
        # What a proxy's log says of a request: when its answer starts, when it ends, where it was saved.
        started, ended, saved = result.stderr.decode().splitlines()
        assert started == f"sse-tape: POST /v1/chat/completions -> 200 from {command[4]}"
        assert ended.startswith(f"sse-tape: POST /v1/chat/completions ended: 200, 4 events, {len(sent)} bytes, ")
        assert ended.endswith(" s, complete")
        assert saved == f"sse-tape: POST /v1/chat/completions appended to {cassette} as #{n} (complete)"
    interactions = Cassette.load(cassette).interactions
    assert len(interactions) == 2
    assert interactions[0].request.method == "POST"
    assert interactions[0].request.query == "events=3&gap=0.01"
    assert dict(interactions[0].request.headers)["content-type"] == "application/json"
    assert "ONE-SHOT-SECRET" not in cassette.read_text()
    assert threaded_upstream.seen_headers[0]["Authorization"] == "Bearer ONE-SHOT-SECRET"


def test_one_shot_interrupted_says_how_its_request_ended_and_keeps_what_arrived(
    threaded_upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.toml"
    url = threaded_upstream.url + "/v1/chat/completions?events=1000&gap=0.02"
    command = [sys.executable, "-m", "sse_tape", "record", url, "-d", "{}", "-c", str(cassette)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None
    process.stdout.read(len(chat_chunk(0)) * 2)  # two events have come: it is in the middle of the stream
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 130
    lines = err.decode().splitlines()
    assert lines[0] == f"sse-tape: POST /v1/chat/completions -> 200 from {url}"
    assert lines[1].startswith("sse-tape: POST /v1/chat/completions ended: 200, ")
    assert lines[1].endswith(" s, interrupted")
    assert lines[2:] == [
        f"sse-tape: POST /v1/chat/completions appended to {cassette} as #1 (interrupted)",
        f"sse-tape: interrupted: what arrived is saved in {cassette}",
    ]
    [kept] = Cassette.load(cassette).interactions
    events = len(SSEDecoder().feed(kept.response.body))
    assert lines[1].startswith(f"sse-tape: POST /v1/chat/completions ended: 200, {events} events, ")


async def test_every_request_a_recorder_answers_gets_its_ended_line_however_it_ends(
    upstream: Upstream, tmp_path: Path
) -> None:
    lines: list[str] = []
    chat = "/v1/chat/completions?events=3&gap=0.01"
    async with (
        arecording(tmp_path / "c.toml", upstream.url, log=lines.append) as proxy,
        httpx.AsyncClient(timeout=10) as client,
    ):
        url = proxy.url

        async def hang_up(path: str, after: int) -> None:
            """Read `after` events of the answer, then hang up."""
            decoder, seen = SSEDecoder(), 0
            async with client.stream("POST", url + path, content=b"{}") as response:
                async for piece in response.aiter_raw():
                    seen += len(decoder.feed(piece))
                    if seen >= after:
                        break

        await read_all(client, "POST", url + chat, content=b"{}")  # a stream, recorded
        await read_all(client, "POST", url + chat, content=b"{}")  # the same, replayed
        await read_all(client, "POST", url + "/limited", content=b"{}")  # an error answer, JSON
        await read_all(client, "GET", url + "/v1/models")  # the upstream's 404
        await read_all(client, "HEAD", url + "/leaky/head")
        await hang_up("/v1/chat/completions?events=100&gap=0.05", 1)  # hangs up in the middle
        await hang_up("/v1/chat/completions?events=2&gap=0.01&linger=0.3", 3)  # at [DONE], the upstream lingering
        with pytest.raises(httpx.TransportError):
            await read_all(client, "GET", url + "/reset")  # cut by the upstream
        faults = ["disconnect:after=1", "status:429", "error:at=1", "nonsense"]
        for n, fault in enumerate(faults):
            with contextlib.suppress(httpx.TransportError):  # a disconnect's
                await read_all(client, "POST", url + chat, content=f'{{"n": {n}}}', headers={FAULT_HEADER: fault})
        with contextlib.suppress(httpx.TransportError):  # a fault on a replay
            await read_all(client, "POST", url + chat, content=b"{}", headers={FAULT_HEADER: "disconnect:after=1"})
        with pytest.raises(httpx.ReadTimeout):
            await client.post(url + chat, content=b"{}", headers={FAULT_HEADER: "hang"}, timeout=0.5)
        received = 14

        def ended() -> list[Ended]:
            return [entry for entry in proxy.journal if isinstance(entry, Ended)]

        await auntil(lambda: len(ended()) == received, f"an ended entry for each of the {received} requests")
        assert sorted(entry.request for entry in ended()) == list(range(1, received + 1))
    async with (
        arecording(tmp_path / "d.toml", "http://127.0.0.1:9", log=lines.append) as down,
        httpx.AsyncClient() as client,
    ):
        assert (await client.post(down.url + chat, content=b"{}")).status_code == 502  # the upstream is down
        await auntil(lambda: any(isinstance(entry, Ended) for entry in down.journal), "its ended entry")
    assert len([line for line in lines if " ended: " in line]) == received + 1


def test_one_shot_sends_the_urls_user_and_password_and_keeps_them_out_of_the_cassette(
    threaded_upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.toml"
    url = threaded_upstream.url.replace("://", "://alice:PASSWORD-8@") + "/v1/chat/completions?events=1"
    result = subprocess.run(
        [sys.executable, "-m", "sse_tape", "record", url, "-d", "{}", "-c", str(cassette)], capture_output=True
    )
    assert result.returncode == 0, result.stderr
    assert (
        threaded_upstream.seen_headers[0]["Authorization"] == "Basic " + base64.b64encode(b"alice:PASSWORD-8").decode()
    )
    [interaction] = Cassette.load(cassette).interactions
    assert interaction.request.path == "/v1/chat/completions"
    assert "PASSWORD-8" not in cassette.read_text() + result.stderr.decode()
    assert base64.b64encode(b"alice:PASSWORD-8").decode() not in cassette.read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["http://127.0.0.1:9/x", "--upstream", "http://127.0.0.1:9"],
            "give a URL (one-shot mode), --upstream URL (proxy mode) or --model",
        ),
        ([], "give a URL (one-shot mode), --upstream URL (proxy mode) or --model"),
        (["--upstream", "http://127.0.0.1:9", "-d", "{}"], "-X, -d and -H are for one-shot mode"),
        (["http://127.0.0.1:9/x", "-H", "no colon"], "-H 'no colon': write a header as 'Name: value'"),
        (["http://127.0.0.1:9/x", "--idle-timeout", "soon"], "'soon' is not a duration"),
        (["http://127.0.0.1:9/x", "-d", "@/nonexistent/body.json"], "--data @/nonexistent/body.json: cannot read"),
        (["http://127.0.0.1:9/x"], "cannot reach http://127.0.0.1:9/x"),
        (["http://127.0.0.1:9/x", "--fault", "error:3"], "--fault and --profile are for proxy mode"),
        (["--upstream", "http://127.0.0.1:9", "--fault", "eror:3"], "fault 'eror:3': unknown fault 'eror'"),
    ],
)
def test_record_usage_errors_are_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sse_tape", "record", "-c", str(tmp_path / "c.toml"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"Error: {message}")
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "c.toml").exists()


def _chat_through(base_url: str, api_key: str) -> tuple[list[openai.types.chat.ChatCompletionChunk], str]:
    client = openai_client(base_url + "/v1", api_key=api_key, max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Say something."}],
            max_tokens=24,
            temperature=0,
            stream=True,
        )
    )
    return chunks, "".join(c.choices[0].delta.content or "" for c in chunks)


def test_openai_sdk_chat_through_the_proxy_from_llama_cpp_then_replayed(llama_server: str, tmp_path: Path) -> None:
    cassette = tmp_path / "llama.toml"
    with recording(cassette, llama_server) as proxy:
        live_chunks, live_text = _chat_through(proxy.url, "sk-llama-SECRET-77")
    assert len(live_text.split()) >= 10
    assert live_chunks[0].choices[0].delta.role == "assistant"
    assert live_chunks[-1].choices[0].finish_reason == "length"
    [recorded] = Cassette.load(cassette).interactions
    assert recorded.response.end is End.COMPLETE
    assert recorded.response.header("x-request-id")
    assert len(recorded.response.chunks) >= 24
    offsets = [c.t for c in recorded.response.chunks]
    assert offsets == sorted(offsets)
    assert "sk-llama-SECRET-77" not in cassette.read_text()
    with serve(cassette) as server:
        replayed_chunks, replayed_text = _chat_through(server.url, "sk-other")
    assert replayed_text == live_text
    # Same ids, same creation times, same everything: the SDK parsed the same bytes.
    assert [c.model_dump() for c in replayed_chunks] == [c.model_dump() for c in live_chunks]


def test_new_episodes_records_a_request_once_and_replays_it_when_it_comes_again(
    llama_server: str, tmp_path: Path
) -> None:
    cassette = tmp_path / "session.toml"
    with recording(cassette, llama_server, mode="new_episodes") as proxy:
        first_chunks, first = _chat_through(proxy.url, "sk-test")
        again_chunks, again = _chat_through(proxy.url, "sk-test")
    kinds = [type(e).__name__ for e in proxy.journal if not isinstance(e, Received | Ended)]
    assert sorted(kinds) == ["Forwarded", "Matched", "Recorded"]  # the save may end before or after the replay
    assert kinds.index("Forwarded") < kinds.index("Matched")
    assert len(Cassette.load(cassette)) == 1
    # The model was asked once: the second stream is the first one's bytes, ids and all.
    assert [c.model_dump() for c in again_chunks] == [c.model_dump() for c in first_chunks]
    assert first == again


def test_completions_and_raw_bytes_from_llama_cpp_are_replayed_exactly(llama_server: str, tmp_path: Path) -> None:
    cassette = tmp_path / "llama.msgpack"
    body = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 16, "logprobs": 2, "stream": True}
    with recording(cassette, llama_server) as proxy:
        client = openai_client(proxy.url + "/v1", api_key="sk-test", max_retries=0)
        sdk_text = "".join(c.choices[0].text for c in client.completions.create(**body))
        with httpx.stream("POST", proxy.url + "/v1/completions", json={**body, "seed": 7}) as live:
            live_bytes = b"".join(live.iter_raw())
    recorded = Cassette.load(cassette).interactions
    assert len(recorded) == 2
    assert recorded[1].response.body == live_bytes
    assert live_bytes.endswith(b"data: [DONE]\n\n")
    with serve(cassette) as server:
        client = openai_client(server.url + "/v1", api_key="sk-test", max_retries=0)
        assert "".join(c.choices[0].text for c in client.completions.create(**body)) == sdk_text
        with httpx.stream("POST", server.url + "/v1/completions", json={**body, "seed": 7}) as replayed:
            assert b"".join(replayed.iter_raw()) == live_bytes


def test_a_cassette_path_that_cannot_be_written_stops_the_recorder_before_any_request(
    threaded_upstream: Upstream, tmp_path: Path
) -> None:
    with pytest.raises(CassetteError, match=r"unknown cassette type '\.json'"):
        recording_server(tmp_path / "p.json", threaded_upstream.url)
    (tmp_path / "afile").write_text("x")
    for cassette, message in [
        (tmp_path / "c.json", f"Error: {tmp_path / 'c.json'}: unknown cassette type '.json': use .toml or .msgpack\n"),
        (tmp_path / "afile" / "c.toml", f"Error: {tmp_path / 'afile' / 'c.toml'}: cannot write beside it: "),
    ]:
        url = threaded_upstream.url + "/v1/chat/completions"
        result = subprocess.run(
            [sys.executable, "-m", "sse_tape", "record", url, "-d", "{}", "-c", str(cassette)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2
        assert result.stderr.startswith(message)
        assert result.stderr.count("\n") == 1
    # Both refused before the request (the second was sent, and refused only at the save).
    assert threaded_upstream.hits == 0


@pytest.mark.parametrize(
    ("upstream", "message"),
    [
        ("localhost:8000", "'localhost:8000': give an http:// or https:// URL with a host"),
        ("http://127.0.0.1:99999", "'http://127.0.0.1:99999': port 99999 is out of range"),
        ("http://127.0.0.1:8000/v1?key=x", "an upstream base URL takes no query or fragment"),
        ("ftp://127.0.0.1", "give an http:// or https:// URL with a host"),
    ],
)
def test_a_bad_upstream_url_is_one_line_and_exit_2(tmp_path: Path, upstream: str, message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sse_tape", "record", "--upstream", upstream, "-c", str(tmp_path / "c.toml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("Error: ")
    assert message in result.stderr
    assert result.stderr.count("\n") == 1


_URL_KEY = "AIzaSyURLSECRET1234567890"


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("refused", f"Error: cannot reach http://127.0.0.1:9/v1/x?alt=sse&key={_MARKER}: "),
        ("silent", f"/v1/x?alt=sse&key={_MARKER} in time"),
        ("check-refused", f"Error: cannot reach http://127.0.0.1:9/v1/x?alt=sse&key={_MARKER}: "),
        ("check-429", f"/limited?alt=sse&key={_MARKER} #1 POST /limited (openai-chat): ok"),
        ("upstream-query", f"Error: 'http://127.0.0.1:9/v1?alt=sse&key={_MARKER}': an upstream base URL"),
        ("kept", f"Error: cannot reach http://127.0.0.1:9/v1/x?alt=sse&key={_URL_KEY}&token={_MARKER}: "),
    ],
    ids=["refused", "silent", "check-refused", "check-429", "upstream-query", "kept"],
)
def test_a_key_in_the_url_is_never_printed(threaded_upstream: Upstream, tmp_path: Path, case: str, said: str) -> None:
    # Gemini takes its key in the query. Whatever goes wrong, what is printed shows the URL as the cassette
    # would hold it: the key redacted, unless the user keeps it (--keep-header).
    cassette = ["-c", str(tmp_path / "c.toml")]
    query = f"?alt=sse&key={_URL_KEY}"
    with socket.socket() as silent:  # accepts connections (its backlog does), and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        args = {
            "refused": ["record", f"http://127.0.0.1:9/v1/x{query}", *cassette],
            "silent": ["record", f"http://127.0.0.1:{port}/v1/x{query}", "--idle-timeout", "0.2s", *cassette],
            "check-refused": ["check", "--live", f"http://127.0.0.1:9/v1/x{query}"],
            "check-429": [
                "check",
                "--live",
                f"{threaded_upstream.url}/limited{query}",
                "-d",
                "{}",
                "--dialect",
                "openai-chat",
            ],
            "upstream-query": ["record", "--upstream", f"http://127.0.0.1:9/v1{query}", *cassette],
            "kept": ["record", f"http://127.0.0.1:9/v1/x{query}&token=GONE", "--keep-header", "key", *cassette],
        }[case]
        result = subprocess.run([sys.executable, "-m", "sse_tape", *args], capture_output=True, text=True, timeout=60)
    printed = result.stdout + result.stderr
    assert result.returncode == (0 if case == "check-429" else 2), printed
    assert said in printed
    if case != "kept":
        assert _URL_KEY not in printed
    assert "GONE" not in printed


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://host/v1/x?alt=sse&key=K1", f"https://host/v1/x?alt=sse&key={_MARKER}"),
        ("https://alice:PW@host:8443/v1", f"https://{_MARKER}@host:8443/v1"),
        ("https://TOKEN@host/v1", f"https://{_MARKER}@host/v1"),  # a token as the user name
        ("https://alice:P#W?@host/v1", f"https://{_MARKER}@host/v1"),  # a password not percent-encoded
        ("https://host/cb#access_token=T1&state=s", f"https://host/cb#access_token={_MARKER}&state=s"),
        ("https://host/a@b?q=1", "https://host/a@b?q=1"),  # an @ in the path is no user info
    ],
    ids=["query", "password", "token-as-user", "unencoded-password", "fragment", "at-in-path"],
)
def test_a_url_is_shown_with_its_secrets_redacted(url: str, shown: str) -> None:
    assert Redaction().url(url) == shown


def test_an_upstream_with_a_password_and_no_port_is_taken_and_its_errors_show_no_password() -> None:
    # The port was read from after the last colon: `PW@127.0.0.1` was no number, and the error said it.
    assert parse_upstream("http://alice:PW@127.0.0.1/v1") == "http://alice:PW@127.0.0.1/v1"
    with pytest.raises(ConfigError) as refused:
        parse_upstream("http://alice:PW@127.0.0.1:x/v1")
    assert str(refused.value) == f"'http://{_MARKER}@127.0.0.1:x/v1': the port is not a number"


def test_a_password_in_the_upstream_url_is_never_printed(tmp_path: Path) -> None:
    # `user:password@` in an upstream's URL is sent (as basic authentication), and shown nowhere: not in the
    # banner, the log, the journal, nor the 502 a client gets when the upstream is down.
    upstream = "http://alice:PASSWORD-6@127.0.0.1:9/v1"
    proxy, url = start(["record", "--upstream", upstream, "-c", str(tmp_path / "c.toml"), "--port", "0"])
    try:
        got = httpx.post(url + "/chat/completions?key=QUERY-7", content=b"{}", timeout=30)
        journal = httpx.get(url + "/__sse_tape__/journal").text
    finally:
        proxy.send_signal(signal.SIGINT)
        out, err = proxy.communicate(timeout=30)
    assert got.status_code == 502
    shown = f"http://{_MARKER}@127.0.0.1:9/v1/chat/completions?key={_MARKER}"
    assert got.json()["error"]["message"].startswith(f"sse-tape: cannot reach {shown}: ")
    assert f"sse-tape: POST /chat/completions -> 502 cannot reach {shown}: " in err
    for printed in (out, err, journal, got.text):
        assert "PASSWORD" not in printed
        assert "QUERY-7" not in printed


async def test_interactions_are_saved_in_the_order_they_ended(upstream: Upstream, tmp_path: Path) -> None:
    cassette = tmp_path / "c.toml"
    async with arecording(cassette, upstream.url) as proxy, httpx.AsyncClient() as client:
        for n in range(12):  # different bodies: an identical request would replay what was just recorded
            await read_all(client, "POST", proxy.url + f"/v1/chat/completions?events=1&n={n}", content=f'{{"n":{n}}}')
    assert [i.request.query for i in Cassette.load(cassette)] == [f"events=1&n={n}" for n in range(12)]


async def test_serve_forwards_misses_to_the_upstream_and_replays_the_rest(upstream: Upstream) -> None:
    chat = {"model": "local-model", "messages": [{"role": "user", "content": "Hello!"}], "stream": True}
    options = {"pace": "instant", "match_on": "method,path", "on_miss": "forward"}
    async with aserve(upstream=upstream.url, **options) as server, httpx.AsyncClient() as client:
        replayed = await read_all(client, "POST", server.url + "/v1/chat/completions", json=chat)
        forwarded = await read_all(client, "GET", server.url + "/binary")
    assert replayed[0] == 200
    assert forwarded == (200, b"data: \xff\xfe\x00\n\ndata: ok\n\n")
    assert upstream.hits == 1
    assert [type(e).__name__ for e in server.journal if not isinstance(e, Received | Ended)] == ["Matched", "Forwarded"]
    assert server.recorder is None  # forwarding records nothing


def test_upstream_is_for_forwarding_misses() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sse_tape", "serve", "--upstream", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (2, "Error: --upstream is for --on-miss forward\n")


async def test_a_client_that_reads_to_done_and_hangs_up_is_recorded_complete(
    upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.toml"
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with arecording(cassette, upstream.url) as proxy:
        http = httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0))
        client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-test", max_retries=0, http_client=http)
        for n in range(3):
            # The upstream ends its body 0.2 s after [DONE]; the SDK closes its connection at [DONE].
            query = {"events": 3, "gap": 0.01, "linger": 0.2}
            stream = await client.chat.completions.create(**chat, user=str(n), extra_query=query)
            assert [c.choices[0].delta.content async for c in stream] == [" w0", " w1", " w2"]
        await client.close()
    recorded = Cassette.load(cassette).interactions
    assert [i.response.end for i in recorded] == [End.COMPLETE] * 3
    assert all(i.response.body.endswith(b"data: [DONE]\n\n") for i in recorded)
    # The journal says so too: each ended complete, after the events the client read.
    assert [(e.end, e.events) for e in proxy.journal if isinstance(e, Ended)] == [(End.COMPLETE, 4)] * 3


def test_a_sigkill_right_after_a_stream_ends_keeps_it_whatever_the_cassettes_size(
    threaded_upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "big.toml"
    old = Interaction(Request("POST", "/v1/old"), Response(chunks=(Chunk(0.0, b"data: x\n\n"),)))
    Cassette([old] * 1000, cassette).save()
    for n in range(3):
        recorder = Recorder(threaded_upstream, cassette)
        url = recorder.url + "/v1/chat/completions?events=2&gap=0.01"
        got = httpx.post(url, content=json.dumps({"n": n}))
        recorder.proc.kill()  # the moment the client has the whole stream
        recorder.proc.communicate(timeout=30)
        interactions = Cassette.load(cassette).interactions
        assert len(interactions) == 1001 + n
        assert interactions[-1].response.end is End.COMPLETE
        assert interactions[-1].response.body == got.content


def _in_a_small_disk(tmp_path: Path, options: str, code: str) -> subprocess.CompletedProcess[str]:
    """Run Python `code` where `tmp_path/disk` is a tmpfs mounted with `options`, in a mount namespace of its own."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-r", "-m", "true"]).returncode:
        pytest.skip("needs unshare and user namespaces to mount a small disk")
    disk = tmp_path / "disk"
    disk.mkdir()
    tests = Path(__file__).parent
    # Into the folder after mounting: a working folder entered before would still be the one beneath.
    script = f'mount -t tmpfs -o {options} tmpfs {disk} && cd {disk} && exec {sys.executable} -c "$0"'
    command = ["unshare", "-r", "-m", "sh", "-c", script, f"import sys; sys.path.insert(0, {str(tests)!r})\n{code}"]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_a_read_only_folder_is_a_clear_error_before_anything_is_forwarded(tmp_path: Path) -> None:
    code = "from sse_tape.cli import main; main()"
    result = _in_a_small_disk(
        tmp_path,
        "size=64k,ro",
        f"import sys; sys.argv[1:] = ['record', '--upstream', 'http://127.0.0.1:9', '-c', 'c.toml']\n{code}",
    )
    assert (result.returncode, result.stderr) == (2, "Error: c.toml: cannot write beside it: Read-only file system\n")


def test_one_shot_record_into_a_read_only_folder_is_a_clear_error_before_the_request_is_sent(
    tmp_path: Path, threaded_upstream: Upstream
) -> None:
    code = "from sse_tape.cli import main; main()"
    url = threaded_upstream.url + "/v1/chat/completions?events=1"
    result = _in_a_small_disk(
        tmp_path, "size=64k,ro", f"import sys; sys.argv[1:] = ['record', {url!r}, '-d', '{{}}', '-c', 'c.toml']\n{code}"
    )
    assert (result.returncode, result.stderr) == (2, "Error: c.toml: cannot write beside it: Read-only file system\n")
    assert threaded_upstream.hits == 0  # it sent nothing it could not keep


def test_a_full_disk_is_said_once_and_what_was_saved_stays_readable(tmp_path: Path) -> None:
    code = """
import json, httpx
from sse_tape import Cassette
from sse_tape.journal import SaveFailed
from sse_tape import recording
from sse_tape.server import run_in_thread
from upstream import Upstream
with run_in_thread(Upstream()) as up:
    with recording("c.toml", up.url) as proxy:
        got = httpx.post(proxy.url + "/v1/chat/completions?events=2000&gap=0", content=b"{}", timeout=60)
    failed = [e.reason for e in proxy.journal if isinstance(e, SaveFailed)]
[kept] = Cassette.load("c.toml").interactions
print(json.dumps({"status": got.status_code, "sent": len(got.content), "failed": failed,
                  "end": str(kept.response.end), "kept": len(kept.response.body), "prefix": got.content.startswith(kept.response.body)}))
"""
    result = _in_a_small_disk(tmp_path, "size=64k", code)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["status"], report["sent"]) == (200, sum(len(chat_chunk(n)) for n in range(2000)) + 14)
    first, at_exit = report["failed"]  # the first failed write, then the append at exit
    assert "cannot write: No space left on device; it is kept in memory, and written when there is room" in first
    assert first.endswith(f"free space in {tmp_path / 'disk'}")
    assert at_exit.startswith("No space left on device; 1 stream not saved (the part of it that ")
    assert report["end"] == "interrupted"
    assert 0 < report["kept"] < report["sent"]
    assert report["prefix"]


async def test_a_control_character_in_an_upstreams_header_is_forwarded_and_recorded_as_one_http_allows(
    tmp_path: Path,
) -> None:
    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-A: a\x01b\x7fc\r\nContent-Length: 9\r\n\r\n"
        writer.write(head + b"data: x\n\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(upstream, "127.0.0.1", 0)
    cassette = tmp_path / "c.toml"
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    async with server, arecording(cassette, url) as proxy, httpx.AsyncClient() as client:
        forwarded = await client.post(proxy.url + "/v1/chat/completions", content=b"{}")
    # The client is sent what the cassette holds, which HTTP allows (it was a 500: aiohttp refuses to send it).
    assert (forwarded.status_code, forwarded.headers["x-a"], forwarded.content) == (200, "a%01b%7Fc", b"data: x\n\n")
    [recorded] = Cassette.load(cassette).interactions  # which refuses a control character in a header
    assert ("X-A", "a%01b%7Fc") in recorded.response.headers
    async with aserve(cassette, pace="instant") as server, httpx.AsyncClient() as client:
        replayed = await client.post(server.url + "/v1/chat/completions", content=b"{}")
    assert (replayed.status_code, replayed.headers["x-a"], replayed.content) == (200, "a%01b%7Fc", b"data: x\n\n")


@pytest.mark.parametrize("suffix", [".toml", ".msgpack"])
def test_a_cassette_bigger_than_the_free_space_is_appended_to(tmp_path: Path, suffix: str) -> None:
    # 1.2 MB of cassette on a 2 MB disk: no room for a second copy of it.
    code = f"""
import json, os, signal, httpx
from sse_tape import Cassette, Chunk, Interaction, Request, Response
from sse_tape.server import run_in_thread
from processes import start
from upstream import Upstream, chat_chunk
chunks = tuple(Chunk(n * 0.01, chat_chunk(n) + b"x" * 100) for n in range(100))
old = [Interaction(Request("POST", "/v1/old", body=b"%d" % n), Response(chunks=chunks)) for n in range(50)]
Cassette(old, None).save("c{suffix}")
size = os.path.getsize("c{suffix}")
free = os.statvfs(".").f_bavail * os.statvfs(".").f_frsize
with run_in_thread(Upstream()) as up:
    proc, url = start(["record", "--upstream", up.url, "-c", "c{suffix}", "--port", "0"])
    got = httpx.post(url + "/v1/chat/completions?events=3&gap=0", content=b"{{}}", timeout=60).content
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
kept = Cassette.load("c{suffix}").interactions
print(json.dumps({{"rc": proc.returncode, "err": err, "size": size, "free": free, "old": kept[:-1] == old,
                  "new": kept[-1].response.body == got, "files": sorted(os.listdir("."))}}))
"""
    result = _in_a_small_disk(tmp_path, "size=2m", code)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["size"] > report["free"]
    assert report["rc"] == 0, report["err"]
    assert (report["old"], report["new"], report["files"]) == (True, True, [f"c{suffix}"])


@pytest.mark.parametrize("room", [False, True], ids=["still-full-at-stop", "room-again"])
def test_a_disk_that_fills_mid_session_loses_no_stream_said_recorded(tmp_path: Path, room: bool) -> None:
    # A 2 MB disk that a file fills but for 120 KB: two or three streams of 300 events fit in the spool.
    code = f"""
import json, os, signal, httpx
from sse_tape import Cassette
from sse_tape.server import run_in_thread
from processes import start
from upstream import Upstream
with run_in_thread(Upstream()) as up:
    proc, url = start(["record", "--upstream", up.url, "-c", "c.toml", "--port", "0"])
    free = os.statvfs(".").f_bavail * os.statvfs(".").f_frsize
    with open("filler", "wb") as f:
        f.write(b"x" * (free - 120_000))
    got = []
    for n in range(12):
        body = json.dumps({{"n": n}})
        got.append(httpx.post(url + "/v1/chat/completions?events=300&gap=0", content=body, timeout=60).content)
    if {room}:  # room again: the next write takes what the spool could not
        os.remove("filler")
        got.append(httpx.post(url + "/v1/chat/completions?events=3&gap=0", content=b"{{}}", timeout=60).content)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
kept = [i.response.body for i in Cassette.load("c.toml").interactions]
print(json.dumps({{"rc": proc.returncode, "err": err, "got": [g.decode() for g in got],
                  "kept": [k.decode() for k in kept], "spools": [p for p in os.listdir(".") if p.endswith(".spool")]}}))
"""
    result = _in_a_small_disk(tmp_path, "size=2m", code)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    lines = report["err"].splitlines()
    got, kept = report["got"], report["kept"]
    said = [int(line.split(" as #")[1].split()[0]) for line in lines if " recorded in the spool of c.toml as #" in line]
    unsaved = [line for line in lines if line.startswith("sse-tape: could not save POST /v1/chat/completions (stream ")]
    assert all(got[n - 1] in kept for n in said)  # each stream said recorded is there, whole
    # Each stream the spool could not take is said once, with what to do, and not said recorded then.
    streams = [int(line.split("(stream ")[1].split(")")[0]) for line in unsaved]
    assert sorted(set(streams)) == streams
    assert 2 <= streams[0] <= 10
    assert all(line.endswith(f"free space in {tmp_path / 'disk'}") for line in unsaved)
    if room:  # retried at the next stream: each said recorded once in the spool, then the cassette written whole
        assert sorted(said) == list(range(1, 14))
        assert sorted(said[-len(streams) - 1 :]) == [*streams, 13]
        assert (report["rc"], kept, report["spools"]) == (0, got, [])
        return
    assert said == list(range(1, streams[0]))
    assert streams == list(range(streams[0], 13))
    assert report["rc"] == 2
    assert lines[-2] == f"sse-tape: recorded 12 interactions, not written to c.toml ({len(streams) + 1} save failures)"
    lost = 12 - len(said)
    assert lines[-1] == (
        f"Error: {lost} streams recorded in this session were not saved (No space left on device): free space in "
        f"{tmp_path / 'disk'} and record them again; what was saved is in {report['spools'][0]}, which loads with c.toml"
    )


async def test_a_stream_cut_short_is_recorded_until_a_retry_fetches_it_whole(
    upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.toml"
    url = "/v1/chat/completions?events=20&gap=0.02"
    async with arecording(cassette, upstream.url) as proxy:
        async with httpx.AsyncClient() as client, client.stream("POST", proxy.url + url, content=b"{}") as cut:
            await cut.aiter_raw().__anext__()  # and the client goes
        async with httpx.AsyncClient() as client:
            status, body = await read_all(client, "POST", proxy.url + url, content=b"{}")
    assert (status, upstream.hits) == (200, 2)  # the retry was not answered with the broken recording
    assert body.endswith(b"data: [DONE]\n\n")
    # The whole answer took the cut-off one's place: a replay gets the whole answer.
    [recorded] = Cassette.load(cassette).interactions
    assert (recorded.response.end, recorded.response.body) == (End.COMPLETE, body)
    assert proxy.recorder is not None
    assert proxy.recorder.summary() == f"recorded 1 interaction to {cassette} (1 in place of one cut short before)"


async def test_a_whole_answer_takes_the_place_only_of_the_very_same_request_cut_short(
    upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.toml"
    url = "/v1/chat/completions?events=20&gap=0.02"
    # Matching on method and path, the two requests agree; only the same request is the same stream.
    async with arecording(cassette, upstream.url, options=ServeOptions.build(match_on="method,path")) as proxy:
        async with httpx.AsyncClient() as client, client.stream("POST", proxy.url + url, content=b'{"n": 1}') as cut:
            await cut.aiter_raw().__anext__()  # and the client goes
        async with httpx.AsyncClient() as client:
            status, _ = await read_all(client, "POST", proxy.url + url, content=b'{"n": 2}')
    assert (status, upstream.hits) == (200, 2)
    recorded = [(i.request.body, i.response.end) for i in Cassette.load(cassette)]
    assert recorded == [(b'{"n": 1}', End.CLIENT_GONE), (b'{"n": 2}', End.COMPLETE)]


_RETRIED = "/v1/chat/completions?events=40&gap=0.05"


def _one_whole_then_one_cut_short(upstream: Upstream, cassette: Path, cut: str) -> bytes:
    """A session that records one whole stream into `cassette`, then `_RETRIED` cut short as `cut` says:
    returns what the client had of the second."""
    first = Recorder(upstream, cassette)
    first.complete(1)
    return _cut_short(first, cut)


def _cut_short(recorder: Recorder, cut: str) -> bytes:
    """Start the `_RETRIED` stream through `recorder`, and cut it short as `cut` says: returns what the client had."""
    with httpx.Client(timeout=30) as client, client.stream("POST", recorder.url + _RETRIED, content=b"{}") as response:
        pieces = response.iter_raw()
        received = next(pieces) + next(pieces)
        if cut != "client-gone":  # else the client hangs up, leaving this block
            recorder.stop(signal.SIGINT if cut == "sigint" else signal.SIGKILL)
    if cut == "client-gone":
        # The recorder learns of the hang-up at its next write to the client: stopped before then, the stream
        # would be one the stop cut (`interrupted`).
        _until_journal_says(recorder, "client-gone")
        recorder.stop(signal.SIGINT)
    return received


def _until_journal_says(recorder: Recorder, end: str, times: int = 1) -> None:
    """Wait until the recorder's journal says `times` streams ended so."""

    def noted() -> bool:
        entries = httpx.get(recorder.url + "/__sse_tape__/journal").json()["entries"]
        return sum(e["type"] == "ended" and e["end"] == end for e in entries) >= times

    until(noted, f"the recorder's note of {times} stream(s) that ended {end}")


def test_a_stop_that_writes_a_big_cassette_anew_says_so_when_it_starts_and_ends(
    threaded_upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "big.toml"
    chunks = tuple(Chunk(n * 0.01, chat_chunk(n)) for n in range(50))
    old = [Interaction(Request("POST", "/v1/old", body=b"%d" % n), Response(chunks=chunks)) for n in range(200)]
    cut = Response(chunks=chunks[:1], end=End.CLIENT_GONE, duration=0.1)
    query = "events=3&gap=0.01"
    Cassette([*old, Interaction(Request("POST", "/v1/chat/completions", query, body=b"{}"), cut)], cassette).save()
    size = cassette.stat().st_size
    assert size > 1_000_000
    recorder = Recorder(threaded_upstream, cassette)
    assert httpx.post(f"{recorder.url}/v1/chat/completions?{query}", content=b"{}").status_code == 200
    lines = recorder.stop(signal.SIGINT).splitlines()
    at = lines.index(
        f"sse-tape: writing {size / 1e6:.1f} MB cassette {cassette} anew (a whole answer replaces 1 stream cut short) ..."
    )
    assert re.fullmatch(rf"sse-tape: wrote {re.escape(str(cassette))} anew in \d+\.\d s", lines[at + 1])
    assert Cassette.load(cassette).interactions[-1].response.end is End.COMPLETE


@pytest.mark.parametrize(
    ("cut", "end"),
    [("sigint", End.INTERRUPTED), ("sigkill", End.INTERRUPTED), ("client-gone", End.CLIENT_GONE)],
    ids=["stopped", "killed", "client-gone"],
)
def test_the_next_session_fetches_a_stream_cut_short_again_and_the_whole_one_takes_its_place(
    threaded_upstream: Upstream, tmp_path: Path, cut: str, end: End
) -> None:
    cassette = tmp_path / "c.toml"
    received = _one_whole_then_one_cut_short(threaded_upstream, cassette, cut)
    before = Cassette.load(cassette).interactions  # killed: read from the spool the session left
    assert [i.response.end for i in before] == [End.COMPLETE, end]
    assert before[1].response.body.startswith(received)
    hits = threaded_upstream.hits

    second = Recorder(threaded_upstream, cassette)
    retried = httpx.post(second.url + _RETRIED, content=b"{}", timeout=30)
    lines = second.stop(signal.SIGINT).splitlines()
    assert threaded_upstream.hits == hits + 1  # fetched again, not replayed cut short
    assert retried.content == b"".join(chat_chunk(n) for n in range(40)) + b"data: [DONE]\n\n"
    after = Cassette.load(cassette).interactions
    assert after[0] == before[0]
    assert [(i.response.end, i.response.body) for i in after[1:]] == [(End.COMPLETE, retried.content)]
    assert not list(tmp_path.glob("*.spool"))  # a killed session's spool is taken in
    line = (
        f"sse-tape: POST /v1/chat/completions recorded in the spool of {cassette} as #2 "
        f"(complete, in place of one that ended {end})"
    )
    assert line in lines
    assert lines[-1] == f"sse-tape: recorded 1 interaction to {cassette} (1 in place of one cut short before)"
    with serve(cassette, pace="instant") as server:
        assert httpx.post(server.url + _RETRIED, content=b"{}").content == retried.content


def _whole_answer_then_killed(recorder: Recorder) -> bytes:
    """Retry `_RETRIED` through `recorder`, which fetches it whole, and kill the recorder the moment the client
    has it: returns the answer."""
    retried = httpx.post(recorder.url + _RETRIED, content=b"{}", timeout=30)
    assert retried.content.endswith(b"data: [DONE]\n\n")
    recorder.stop(signal.SIGKILL)
    return retried.content


@pytest.mark.parametrize("cut", ["sigint", "sigkill", "client-gone"], ids=["stopped", "killed", "client-gone"])
def test_a_whole_answer_takes_the_cut_ones_place_though_its_session_is_killed(
    threaded_upstream: Upstream, tmp_path: Path, cut: str
) -> None:
    # The replacement was made only when the session stopped: a killed session's spool was read as new
    # recordings, and the cassette held the cut answer and the whole one, the cut one played first.
    cassette = tmp_path / "c.toml"
    _one_whole_then_one_cut_short(threaded_upstream, cassette, cut)
    [complete, _] = Cassette.load(cassette).interactions
    whole = _whole_answer_then_killed(Recorder(threaded_upstream, cassette))
    assert list(tmp_path.glob("*.spool"))  # what the killed session recorded is in its spool alone
    assert [(i.response.end, i.response.body) for i in Cassette.load(cassette)] == [
        (End.COMPLETE, complete.response.body),
        (End.COMPLETE, whole),
    ]
    with serve(cassette, pace="instant") as server:
        assert httpx.post(server.url + _RETRIED, content=b"{}").content == whole
    # The next session's write takes the spools in: the file itself holds one copy, the whole one, in place.
    third = Recorder(threaded_upstream, cassette)
    new = httpx.post(third.url + "/v1/chat/completions?events=1", content=b'{"n": 9}').content
    third.stop(signal.SIGINT)
    assert not list(tmp_path.glob("*.spool"))
    after = Cassette.load(cassette).interactions
    assert [i.response.body for i in after] == [complete.response.body, whole, new]
    assert {i.response.end for i in after} == {End.COMPLETE}


def test_a_whole_answer_takes_the_place_of_one_its_own_killed_session_cut_short(
    threaded_upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.toml"
    recorder = Recorder(threaded_upstream, cassette)
    with httpx.Client(timeout=30) as client, client.stream("POST", recorder.url + _RETRIED, content=b"{}") as cut:
        next(cut.iter_raw())  # and the client goes
    _until_journal_says(recorder, "client-gone")
    whole = _whole_answer_then_killed(recorder)
    # Its spool holds both streams, the second noted as taking the first's place.
    assert [(i.response.end, i.response.body) for i in Cassette.load(cassette)] == [(End.COMPLETE, whole)]


@pytest.mark.parametrize("edit", ["moved", "changed"])
def test_a_killed_sessions_whole_answer_finds_the_cut_one_where_an_edit_put_it_and_loses_nothing(
    threaded_upstream: Upstream, tmp_path: Path, edit: str
) -> None:
    # The spool names the recording it replaces by its fingerprint, not its number: moved, it is found where
    # it is; changed (trimmed by hand, say), it is no longer the one that was cut, and both are kept.
    cassette = tmp_path / "c.toml"
    _one_whole_then_one_cut_short(threaded_upstream, cassette, "client-gone")
    whole = _whole_answer_then_killed(Recorder(threaded_upstream, cassette))
    [spool] = tmp_path.glob("*.spool")
    spool.rename(tmp_path / "aside")  # to edit the file alone
    edited = Cassette.load(cassette)
    [complete, cut] = edited.interactions
    if edit == "moved":
        extra = Interaction(Request("GET", "/v1/models"), Response(chunks=(Chunk(0.0, b"{}"),)))
        edited.interactions.insert(0, extra)
        expected = [extra.response.body, complete.response.body, whole]
    else:
        trimmed = replace(cut.response, chunks=cut.response.chunks[:1])
        edited.interactions[1] = replace(cut, response=trimmed)
        expected = [complete.response.body, trimmed.body, whole]
    edited.save()
    (tmp_path / "aside").rename(spool)
    assert [i.response.body for i in Cassette.load(cassette)] == expected


def _hang_up_on(recorder: Recorder, times: int) -> None:
    """Start the `_RETRIED` stream through `recorder` and hang up after its first piece, `times` times (a retry
    of a stream cut short is fetched again, and cut short again)."""
    for n in range(1, times + 1):
        with httpx.Client(timeout=30) as client, client.stream("POST", recorder.url + _RETRIED, content=b"{}") as r:
            next(r.iter_raw())
        _until_journal_says(recorder, "client-gone", n)


@pytest.mark.parametrize("stop", ["sigint", "sigkill"], ids=["stopped", "killed"])
def test_a_whole_answer_takes_the_place_of_every_copy_of_its_request_cut_short(
    threaded_upstream: Upstream, tmp_path: Path, stop: str
) -> None:
    # It took the place of the first only; the second copy, cut short, stayed: a second identical request
    # replayed the new whole answer, and a later replay gave that request the copy cut short.
    cassette = tmp_path / "c.toml"
    first = Recorder(threaded_upstream, cassette)
    first.complete(1)
    _hang_up_on(first, 2)
    first.stop(signal.SIGINT)
    [complete, *cut] = Cassette.load(cassette).interactions
    assert [i.response.end for i in cut] == [End.CLIENT_GONE] * 2
    hits = threaded_upstream.hits
    second = Recorder(threaded_upstream, cassette)
    answers = [httpx.post(second.url + _RETRIED, content=b"{}", timeout=30).content for _ in range(2)]
    lines = second.stop(signal.SIGINT if stop == "sigint" else signal.SIGKILL).splitlines()
    whole = b"".join(chat_chunk(n) for n in range(40)) + b"data: [DONE]\n\n"
    assert answers == [whole, whole]
    assert threaded_upstream.hits == hits + 1  # the second replayed what the first fetched
    assert [(i.response.end, i.response.body) for i in Cassette.load(cassette)] == [
        (End.COMPLETE, complete.response.body),
        (End.COMPLETE, whole),
    ]
    with serve(cassette, pace="instant") as server:
        assert [httpx.post(server.url + _RETRIED, content=b"{}").content for _ in range(3)] == [whole] * 3
    if stop == "sigint":
        assert (
            f"sse-tape: POST /v1/chat/completions recorded in the spool of {cassette} as #2 "
            "(complete, in place of 2 that ended client-gone)"
        ) in lines
        assert lines[-1] == (
            f"sse-tape: recorded 1 interaction to {cassette} (1 in place of 2 cut short before, 1 replayed)"
        )
    else:  # the next write takes the spool in, with the whole answer in place
        Recorder(threaded_upstream, cassette).stop(signal.SIGINT)
        assert not list(tmp_path.glob("*.spool"))
        assert [i.response.body for i in Cassette.load(cassette)] == [complete.response.body, whole]


@pytest.mark.parametrize("stop", ["sigint", "sigkill"], ids=["stopped", "killed"])
def test_a_retry_answered_whole_takes_the_place_of_every_try_its_session_cut_short(
    threaded_upstream: Upstream, tmp_path: Path, stop: str
) -> None:
    cassette = tmp_path / "c.toml"
    recorder = Recorder(threaded_upstream, cassette)
    _hang_up_on(recorder, 2)
    whole = httpx.post(recorder.url + _RETRIED, content=b"{}", timeout=30).content
    lines = recorder.stop(signal.SIGINT if stop == "sigint" else signal.SIGKILL).splitlines()
    assert [(i.response.end, i.response.body) for i in Cassette.load(cassette)] == [(End.COMPLETE, whole)]
    if stop == "sigint":
        assert lines[-1] == f"sse-tape: recorded 1 interaction to {cassette} (1 in place of 2 cut short before)"


def _crash_before_removing(n: int) -> str:
    """Setup for a `Recorder` that a SIGKILL stops right before it removes its `n`th spool: after its cassette
    is written, in place, and before the spools it took in are gone."""
    return f"""
import os, signal
_unlink, _spools = os.unlink, [0]
def _crashing(path, *args, **kwargs):
    if str(path).endswith(".spool"):
        _spools[0] += 1
        if _spools[0] == {n}:
            os.kill(os.getpid(), signal.SIGKILL)
    return _unlink(path, *args, **kwargs)
os.unlink = _crashing
"""


@pytest.mark.parametrize(
    ("retry", "crash"),
    [("stopped", 1), ("stopped", 2), ("killed", 1), ("killed", 2), ("killed", 3)],
    ids=["stopped-1", "stopped-2", "killed-1", "killed-2", "killed-3"],
)
def test_a_crash_before_the_spools_taken_in_are_removed_brings_back_no_stream_cut_short(
    threaded_upstream: Upstream, tmp_path: Path, retry: str, crash: int
) -> None:
    # A killed session's spool held one stream, cut short; the whole answer a retry fetched took its place,
    # and the write that put it there noted the retry's spool, not that one. A crash after the write and
    # before that spool was gone left it, unnoted, and the next load added the cut stream again.
    cassette = tmp_path / "c.toml"
    first = Recorder(threaded_upstream, cassette)
    first.complete(1)
    first.stop(signal.SIGINT)
    [complete] = Cassette.load(cassette).interactions
    _cut_short(Recorder(threaded_upstream, cassette), "sigkill")  # a spool that holds that stream alone
    expected = [complete.response.body]
    if retry == "stopped":  # its write crashes: the spool cut short, then its own
        retrying = Recorder(threaded_upstream, cassette, setup=_crash_before_removing(crash))
        expected.append(httpx.post(retrying.url + _RETRIED, content=b"{}", timeout=30).content)
        crashed = retrying
    else:  # killed: the write of the next session crashes, taking in the two spools, then its own
        expected.append(_whole_answer_then_killed(Recorder(threaded_upstream, cassette)))
        crashed = Recorder(threaded_upstream, cassette, setup=_crash_before_removing(crash))
        expected.append(httpx.post(crashed.url + "/v1/chat/completions?events=1", content=b'{"n": 9}').content)
    crashed.stop(signal.SIGINT)
    assert crashed.proc.returncode == -signal.SIGKILL  # between its write and the removal of spool `crash`
    assert list(tmp_path.glob("*.spool"))
    assert [(i.response.end, i.response.body) for i in Cassette.load(cassette)] == [
        (End.COMPLETE, body) for body in expected
    ]
    # The next write removes what the crash left, and the file holds the same.
    last = Recorder(threaded_upstream, cassette)
    last.stop(signal.SIGINT)
    assert not list(tmp_path.glob("*.spool"))
    assert [i.response.body for i in Cassette.load(cassette)] == expected


@pytest.mark.parametrize("mode", [RecordMode.NONE, RecordMode.ONCE])
def test_replay_only_record_modes_replay_a_stream_cut_short_as_it_was_recorded_and_say_so(
    threaded_upstream: Upstream, tmp_path: Path, mode: RecordMode
) -> None:
    cassette = tmp_path / "c.toml"
    request = Request("POST", "/v1/chat/completions", "", (), b"{}")
    head = (("content-type", "text/event-stream"),)
    cut = Response(200, head, (Chunk(0.0, chat_chunk(0)),), End.INTERRUPTED, 0.5)
    Cassette([Interaction(request, cut)], cassette).save()
    lines: list[str] = []
    options = ServeOptions.build(pace="instant")
    with (
        recording(cassette, threaded_upstream.url, mode=mode, log=lines.append, options=options) as proxy,
        httpx.Client() as client,
        client.stream("POST", proxy.url + "/v1/chat/completions", content=b"{}") as response,
    ):
        pieces = response.iter_raw()
        got = next(pieces)
        with pytest.raises(httpx.RemoteProtocolError):  # cut off as it was when recorded
            next(pieces)
    assert (got, threaded_upstream.hits) == (chat_chunk(0), 0)
    assert lines[0] == (
        f"c.toml holds 1 stream cut short when recorded (1 interrupted): record mode {mode} replays it as "
        "recorded; record mode new_episodes fetches it again"
    )


def test_new_episodes_says_at_start_which_recordings_answered_an_error_or_nothing(
    threaded_upstream: Upstream, tmp_path: Path
) -> None:
    # They replay as recorded (a request got them): the start says so, and how to fetch them again.
    cassette = tmp_path / "c.toml"
    head = (("content-type", "application/json"),)
    Cassette(
        [
            Interaction(Request("POST", "/v1/a", body=b"{}"), Response(500, head, (Chunk(0.0, b'{"error": {}}'),))),
            Interaction(Request("POST", "/v1/b", body=b"{}"), Response(200, head, ())),
            Interaction(Request("POST", "/v1/c", body=b"{}"), Response(200, head, (Chunk(0.0, b"{}"),))),
        ],
        cassette,
    ).save()
    lines: list[str] = []
    with recording(cassette, threaded_upstream.url, log=lines.append) as proxy:
        assert httpx.post(proxy.url + "/v1/a", content=b"{}").status_code == 500
    assert threaded_upstream.hits == 0
    assert lines[0] == (
        "c.toml holds 2 recordings that answered an error or nothing (1 empty, 1 status 500): record mode "
        "new_episodes replays them; remove them from the cassette, or record with record mode rewrite, to fetch "
        "them again"
    )


def test_check_secrets_finds_what_was_planted_and_exits_1(tmp_path: Path) -> None:
    clean = tmp_path / "clean.toml"
    Cassette(
        [Interaction(Request("POST", "/v1/chat/completions", headers=(("authorization", REDACTED),)), Response())]
    ).save(clean)
    planted = tmp_path / "planted.toml"
    body = b'{"messages": [{"role": "user", "content": "my key is sk-proj-abcdefghijklmnopqrstuvwx"}]}'
    leaky = Interaction(
        Request("POST", "/v1/chat/completions", query="api_key=abc", headers=(("x-api-key", "k123"),), body=body),
        Response(chunks=(Chunk(0.0, b'data: {"t": "eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4fw"}\n\n'),)),
    )
    # Every shape, in a streamed chunk of an answer, as a model would say it: JSON in an SSE event.
    streamed = [
        Interaction(
            Request("POST", "/v1/chat/completions"),
            Response(chunks=(Chunk(0.0, chat_chunk(0)), Chunk(0.1, f"data: {json.dumps({'t': secret})}\n\n".encode()))),
        )
        for secret, _ in PLANTED.values()
    ]
    github, google = PLANTED["a GitHub token"][0], PLANTED["a Google API key"][0]
    places = [  # one shape in each other place, whatever its name, and credentials the names give away
        Interaction(Request("GET", f"/v1/keys/{github}/x"), Response()),
        Interaction(Request("GET", "/v1/x", headers=(("X-Debug", PLANTED["an OpenAI API key"][0]),)), Response()),
        Interaction(Request("GET", "/v1/x", query=f"q={quote(PLANTED['a JWT'][0])}&jwt=abc"), Response()),
        Interaction(
            Request("POST", "/v1/x", headers=(("content-type", _FORM),), body=b"pin=1234&n=" + github.encode()),
            Response(),
        ),
        Interaction(Request("POST", "/v1/x", body=b'{"n": "\xff", "t": "' + google.encode() + b'"}'), Response()),
        Interaction(Request("GET", "/v1/x"), Response(headers=(("X-Request-Echo", PLANTED["a Slack token"][0]),))),
        Interaction(Request("POST", "/v1/x", body=b'{"auth": {"bearer": "x"}, "api_key": ["y"]}'), Response()),
        Interaction(Request("GET", "/v1/x", headers=(("X-Note", "ACME-424242"),)), Response()),
    ]
    Cassette([leaky, *streamed, *places]).save(planted)
    ok = run_cli_check(clean)
    assert (ok.returncode, ok.stdout) == (0, "0 secrets found\n")
    found = run_cli_check(tmp_path, patterns=(r"ACME-[0-9]{6}",))
    assert found.returncode == 1
    chat = "POST /v1/chat/completions"
    assert found.stdout.splitlines() == [
        f"{planted} #1 {chat}: request header x-api-key is not redacted",
        f"{planted} #1 {chat}: query parameter api_key is not redacted",
        f"{planted} #1 {chat}: request body holds an OpenAI API key",
        f"{planted} #1 {chat}: response body holds a JWT",
        *(f"{planted} #{n} {chat}: response body holds {kind}" for n, kind in enumerate(PLANTED, 2)),
        # The path is shown as a cassette would hold it: never the secret.
        f"{planted} #18 GET /v1/keys/{_MARKER}/x: request path holds a GitHub token",
        f"{planted} #19 GET /v1/x: request header X-Debug holds an OpenAI API key",
        f"{planted} #20 GET /v1/x: query parameter q holds a JWT",
        f"{planted} #20 GET /v1/x: query parameter jwt is not redacted",
        f"{planted} #21 POST /v1/x: request body field pin is not redacted",
        f"{planted} #21 POST /v1/x: request body field n holds a GitHub token",
        f"{planted} #22 POST /v1/x: request body holds a Google API key",
        f"{planted} #23 GET /v1/x: response header X-Request-Echo holds a Slack token",
        f"{planted} #24 POST /v1/x: request body field auth is not redacted",
        f"{planted} #24 POST /v1/x: request body field api_key is not redacted",
        f"{planted} #25 GET /v1/x: request header X-Note holds a match of --secret-pattern 'ACME-[0-9]{{6}}'",
        "31 secrets found",
    ]
    for needle in [*NEEDLES, "ACME-424242"]:  # one line each, never the secret
        assert needle not in found.stdout


def test_a_gemini_thought_signature_is_kept_as_no_secret() -> None:
    # The model's sealed reasoning, which the client sends back with the conversation: not a credential.
    body = b'{"contents": [{"role": "model", "parts": [{"text": "", "thoughtSignature": "c2lnbmVk"}]}]}'
    request = Request("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", "alt=sse", body=body)
    assert Redaction.build().request(request).body == body
    assert find_secrets(Interaction(request, Response())) == []


def test_an_anthropic_thinking_blocks_signature_is_kept_as_no_secret() -> None:
    # The API's seal on the model's reasoning, sent in the stream's signature_delta and sent back unchanged with
    # the conversation: model output, as Gemini's thoughtSignature is. A `signature` anywhere else is still kept out.
    thinking = {"type": "thinking", "thinking": "Tokyo, then.", "signature": "EqQBCkgIBxABGAIq"}
    turn = {"role": "assistant", "content": [thinking, {"type": "text", "text": "Checking."}]}
    body = json.dumps({"model": "claude-sonnet-4-6", "messages": [turn], "stream": True}).encode()
    request = Request("POST", "/v1/messages", body=body)
    assert Redaction.build().request(request).body == body
    assert find_secrets(Interaction(request, Response())) == []
    signed = json.dumps({"metadata": {"signature": "HMAC-LEAK"}, "messages": [turn]}).encode()
    kept_out = Redaction.build().request(Request("POST", "/v1/messages", body=signed)).body
    assert "HMAC-LEAK" not in kept_out.decode()
    assert json.loads(kept_out)["messages"][0]["content"][0]["signature"] == "EqQBCkgIBxABGAIq"
    assert find_secrets(Interaction(Request("POST", "/v1/messages", body=signed), Response())) == [
        "request body field signature is not redacted"
    ]


def test_a_credential_given_as_a_bare_word_of_a_query_or_a_form_is_redacted_and_found() -> None:
    key = PLANTED["a GitHub token"][0]
    assert Redaction().query(f"a=1&{key};b") == f"a=1&{_MARKER};b"
    form = Request("POST", "/x", headers=(("Content-Type", f"{_FORM}; charset=utf-8"),), body=f"a=1&{key}".encode())
    assert Redaction().request(form).body == f"a=1&{_MARKER}".encode()
    asked = Interaction(replace(form, query=key), Response())
    assert find_secrets(asked) == ["query holds a GitHub token", "request body holds a GitHub token"]


def test_a_response_body_is_the_recording_and_kept_as_it_came() -> None:
    # What the upstream streamed is what replay must give back: a key in it stays (check --secrets finds it);
    # the same key in a response header does not.
    key = PLANTED["an OpenAI API key"][0]
    response = Response(200, (("X-Echo", key),), (Chunk(0.0, f"data: {key}\n\n".encode()),))
    redacted = Redaction().response(response)
    assert (redacted.chunks, redacted.header("x-echo")) == (response.chunks, REDACTED)
    assert find_secrets(Interaction(Request("GET", "/"), redacted)) == ["response body holds an OpenAI API key"]


def test_the_bundled_cassettes_hold_no_secret() -> None:
    # The README's CI recipe, run on sse-tape's own cassettes.
    folder = str(bundled_cassettes()[0].parent)
    checked = subprocess.run(
        [sys.executable, "-m", "sse_tape", "check", "--secrets", folder], capture_output=True, text=True, timeout=60
    )
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, "0 secrets found\n", "")


@pytest.mark.parametrize("path", ["/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/%252e%252e/x", "/chat/..\\..\\x"])
async def test_the_proxy_never_sends_a_path_outside_the_upstreams_base(
    upstream: Upstream, tmp_path: Path, path: str
) -> None:
    async with arecording(tmp_path / "c.toml", upstream.url + "/v1") as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        answer = await reader.read()
        writer.close()
        await writer.wait_closed()
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert b"may not climb out of the upstream's base path" in answer
    assert upstream.hits == 0


async def test_a_header_value_that_is_not_ascii_goes_through_the_proxy(upstream: Upstream, tmp_path: Path) -> None:
    cassette = tmp_path / "c.toml"
    async with arecording(cassette, upstream.url) as proxy, httpx.AsyncClient() as client:
        headers = [("x-name", "Jürgen".encode()), ("x-latin", "J\xfcrgen".encode("latin-1"))]
        status, _ = await read_all(
            client, "POST", proxy.url + "/v1/chat/completions?events=1", content=b"{}", headers=headers
        )
    assert status == 200  # a 500 when httpx encoded the headers to the upstream as ASCII
    assert upstream.seen_headers[0]["x-name"] == "Jürgen"
    [recorded] = Cassette.load(cassette).interactions
    assert dict(recorded.request.headers)["x-name"] == "Jürgen"
    assert dict(recorded.request.headers)["x-latin"] == "Jürgen"  # not UTF-8 on the wire: read as Latin-1


def test_a_recorder_fetches_each_shape_from_the_upstream(llama_server: str, tmp_path: Path) -> None:
    # A replay would convert a recorded stream for a plain call; a recorder must keep the upstream's own answer.
    cassette = tmp_path / "shapes.toml"
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 8}
    with recording(cassette, llama_server) as recorder:
        client = openai_client(recorder.url + "/v1")
        list(client.chat.completions.create(**body, stream=True))
        plain = client.chat.completions.create(**body)
    streamed, answered = Cassette.load(cassette).interactions
    assert (streamed.response.header("content-type") or "").startswith("text/event-stream")
    assert answered.response.header("content-type") == "application/json"
    recorded = json.loads(answered.response.body)
    assert plain.choices[0].message.content == recorded["choices"][0]["message"]["content"]


# --- faults on what is forwarded: the client gets them, the cassette keeps the upstream's answer ---------------

UPSTREAM_BODY = b"".join(chat_chunk(n) for n in range(5)) + b"data: [DONE]\n\n"


async def read_into(got: bytearray, client: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> None:
    """Read a response's raw body into `got`, as far as it comes."""
    async with client.stream(method, url, **kwargs) as response:
        async for piece in response.aiter_raw():
            got += piece


async def chat_words(client: openai.AsyncOpenAI, words: list[str | None]) -> None:
    """Stream a chat answer through the SDK, its words into `words`, as far as they come."""
    stream = await client.chat.completions.create(
        model="up", messages=[{"role": "user", "content": "hi"}], stream=True, extra_query={"gap": "0.01"}
    )
    async for chunk in stream:
        words.append(chunk.choices[0].delta.content)


async def test_the_sdk_meets_an_error_injected_into_a_forwarded_stream_which_is_recorded_whole(
    upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.toml"
    spec = "error:at=2,message=the upstream went away"
    async with arecording(cassette, upstream.url, options=ServeOptions.build(faults=[spec])) as proxy:
        client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-test", max_retries=0)
        words: list[str | None] = []
        with pytest.raises(openai.APIError, match="the upstream went away"):
            await chat_words(client, words)
        await client.close()
        await auntil(lambda: proxy.journal.counts["recorded"])
    assert words == [" w0", " w1"]
    [interaction] = Cassette.load(cassette).interactions
    assert interaction.response.body == UPSTREAM_BODY  # all five words and [DONE], as the upstream sent them
    assert interaction.response.end is End.COMPLETE
    assert interaction.injected == (Injection(spec, "openai-chat error after event 2"),)
    [entry] = [e for e in proxy.journal if isinstance(e, FaultInjected)]
    assert (entry.fault, entry.what) == (spec, "openai-chat error after event 2")


@pytest.mark.parametrize(("mode", "error"), [("close", httpx.RemoteProtocolError), ("reset", httpx.ReadError)])
async def test_a_disconnect_cuts_the_clients_copy_and_the_upstream_is_read_to_its_end(
    upstream: Upstream, tmp_path: Path, mode: str, error: type[Exception]
) -> None:
    cassette = tmp_path / "c.toml"
    got = bytearray()
    async with arecording(cassette, upstream.url) as proxy, httpx.AsyncClient() as client:
        headers = {"X-SSE-Tape-Fault": f"disconnect:after=2,mode={mode}"}  # a request's own fault acts too
        with pytest.raises(error):
            await read_into(got, client, "POST", proxy.url + "/v1/chat/completions", content=b"{}", headers=headers)
        await auntil(lambda: proxy.journal.counts["recorded"])
    assert bytes(got) == chat_chunk(0) + chat_chunk(1)
    [interaction] = Cassette.load(cassette).interactions
    assert interaction.response.body == UPSTREAM_BODY
    assert interaction.response.end is End.COMPLETE
    [note] = interaction.injected
    assert note.fault == f"disconnect:after=2,mode={mode}"
    assert note.what.startswith(f"{'reset' if mode == 'reset' else 'closed'} at byte {len(got)} (")
    assert upstream.disconnects == 0
    # The fault header is said to sse-tape: the upstream never sees it, and the cassette does not keep it.
    assert all("x-sse-tape-fault" not in {k.lower() for k in seen} for seen in upstream.seen_headers)
    assert interaction.request.header("X-SSE-Tape-Fault") is None


async def test_faults_that_hold_the_clients_copy_back_hold_nothing_back_from_the_recording(
    upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.toml"
    options = ServeOptions.build(faults=["ttfb:100ms", "stall:at=1,for=3600s"])
    got = bytearray()
    async with arecording(cassette, upstream.url, options=options) as proxy, httpx.AsyncClient() as client:
        url = proxy.url + "/v1/chat/completions?gap=0"
        async with client.stream("POST", url, content=b"{}") as response:
            pieces = response.aiter_raw()
            while len(got) < len(chat_chunk(0)):
                got += await pieces.__anext__()
            await auntil(lambda: upstream.last_write is not None)
        # The client leaves an hour before the stall would let it have the rest.
        await auntil(lambda: proxy.journal.counts["recorded"])
    assert bytes(got) == chat_chunk(0)
    [interaction] = Cassette.load(cassette).interactions
    assert interaction.response.body == UPSTREAM_BODY
    assert interaction.response.end is End.COMPLETE
    assert interaction.response.end_time < 3600  # each chunk when the upstream sent it, not when the client had it
    assert {n.fault for n in interaction.injected} == {"ttfb:100ms", "stall:at=1,for=3600s"}


async def test_a_status_fault_answers_in_the_upstreams_place_and_nothing_is_recorded(
    upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.toml"
    options = ServeOptions.build(faults=["status:code=429,retry_after=3,times=1"])
    async with arecording(cassette, upstream.url, options=options) as proxy:
        client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-test", max_retries=0)
        words: list[str | None] = []
        with pytest.raises(openai.RateLimitError) as limited:
            await chat_words(client, words)
        assert upstream.hits == 0
        await chat_words(client, words)
        await client.close()
        await auntil(lambda: proxy.journal.counts["recorded"])
    assert limited.value.response.headers["retry-after"] == "3"
    assert words == [f" w{n}" for n in range(5)]
    assert upstream.hits == 1
    [interaction] = Cassette.load(cassette).interactions  # the second request's, with nothing injected
    assert interaction.injected == ()
    notes = [e.what for e in proxy.journal if isinstance(e, FaultInjected)]
    assert notes == ["answered 429 before the stream; not forwarded, nothing recorded"]


async def test_an_answer_that_is_not_a_stream_passes_as_it_came_and_a_whole_stream_fault_acts_once_it_ends(
    upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.toml"
    options = ServeOptions.build(faults=["error:at=0", "split:50%"])
    async with arecording(cassette, upstream.url, options=options) as proxy, httpx.AsyncClient() as client:
        limited = await client.post(proxy.url + "/limited", content=b"{}")
        _, body = await read_all(client, "POST", proxy.url + "/v1/chat/completions?gap=0", content=b'{"n": 2}')
        await auntil(lambda: proxy.journal.counts["recorded"] == 2)
    assert limited.status_code == 429
    assert limited.json()["error"]["message"] == "Rate limit reached"
    first, second = Cassette.load(cassette).interactions
    assert [(n.fault, n.what) for n in first.injected] == [
        ("error:at=0", "an answer that is not a stream: left alone"),
        ("split:50%", "an answer that is not a stream: left alone"),
    ]
    assert [(e.event, e.data) for e in SSEDecoder().feed(body)][1:] == [  # the role frame, then the error
        ("error", '{"error":{"message":"injected by sse-tape","type":"server_error","code":null}}'),
        ("message", "[DONE]"),
    ]
    # The split had the whole stream the error made once the upstream's answer ended, and cut it in two.
    assert [(n.fault, n.what.split(" at byte ")[0]) for n in second.injected] == [
        ("error:at=0", "openai-chat error after event 0"),
        ("split:50%", "two writes, split"),
    ]


async def test_an_upstream_reset_under_faults_is_passed_on_and_recorded(upstream: Upstream, tmp_path: Path) -> None:
    cassette = tmp_path / "c.toml"
    got = bytearray()
    async with arecording(cassette, upstream.url, options=ServeOptions.build(faults=["eol:crlf"])) as proxy:
        async with httpx.AsyncClient() as client:
            with pytest.raises(httpx.ReadError):
                await read_into(got, client, "GET", proxy.url + "/reset")
        await auntil(lambda: proxy.journal.counts["recorded"])
    assert bytes(got) == (chat_chunk(0) + chat_chunk(1)).replace(b"\n", b"\r\n")
    [interaction] = Cassette.load(cassette).interactions
    assert interaction.response.end is End.UPSTREAM_RESET
    assert interaction.response.body == chat_chunk(0) + chat_chunk(1)


async def test_a_client_that_leaves_a_faulted_stream_leaves_the_upstream_to_the_recorder_alone(
    upstream: Upstream, tmp_path: Path
) -> None:
    # Recording, the upstream is read to its end after the client went; only forwarding, it stops with it.
    options = ServeOptions.build(faults=["latency:delay=50ms"])
    url = "/v1/chat/completions?events=40&gap=0.01"
    async with arecording(tmp_path / "c.toml", upstream.url, options=options) as proxy:
        async with httpx.AsyncClient() as client, client.stream("POST", proxy.url + url, content=b"{}") as response:
            await response.aiter_raw().__anext__()
        await auntil(lambda: proxy.journal.counts["recorded"])
    [interaction] = Cassette.load(tmp_path / "c.toml").interactions
    assert interaction.response.end is End.COMPLETE
    assert interaction.response.body.endswith(b"data: [DONE]\n\n")
    assert upstream.disconnects == 0
    forwarding = aserve(Cassette(), upstream=upstream.url, on_miss="forward", faults=["latency:delay=50ms"])
    async with forwarding as forwarder:
        async with httpx.AsyncClient() as client, client.stream("POST", forwarder.url + url, content=b"{}") as response:
            await response.aiter_raw().__anext__()
        await auntil(lambda: upstream.disconnects)


async def test_an_endless_stream_is_read_on_for_the_recording_only_so_long(upstream: Upstream, tmp_path: Path) -> None:
    options = ServeOptions.build(faults=["latency:delay=1ms"])
    async with arecording(tmp_path / "c.toml", upstream.url, options=options) as proxy:
        [forwarder] = [r for r in proxy.responders if isinstance(r, Forwarder)]
        forwarder.read_on = 0.2
        async with httpx.AsyncClient() as client, client.stream("GET", proxy.url + "/stall") as response:
            await response.aiter_raw().__anext__()
        await auntil(lambda: proxy.journal.counts["recorded"])
        await auntil(lambda: upstream.disconnects)
    [interaction] = Cassette.load(tmp_path / "c.toml").interactions
    assert interaction.response.end is End.INTERRUPTED
    assert interaction.response.body == chat_chunk(0)


async def test_a_faulted_recording_replays_what_the_upstream_sent_or_with_recorded_faults_what_its_client_got(
    upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.msgpack"
    url = "/v1/chat/completions?gap=0.01"
    options = ServeOptions.build(faults=["drop:at=1", "error:at=3,message=cut", "latency:delay=1ms,times=1"])
    async with arecording(cassette, upstream.url, options=options) as proxy, httpx.AsyncClient() as client:
        _, live = await read_all(client, "POST", proxy.url + url, content=b"{}")
        await auntil(lambda: proxy.journal.counts["recorded"])
    assert [e.data for e in SSEDecoder().feed(live)][:2] == [json.dumps(json.loads(chat_chunk(n)[6:])) for n in (0, 2)]
    async with aserve(cassette, pace="instant") as server, httpx.AsyncClient() as client:
        assert await read_all(client, "POST", server.url + url, content=b"{}") == (200, UPSTREAM_BODY)
        assert not [e for e in server.journal if isinstance(e, FaultInjected)]
    async with aserve(cassette, pace="instant", recorded_faults=True) as server, httpx.AsyncClient() as client:
        assert await read_all(client, "POST", server.url + url, content=b"{}") == (200, live)
        # A fault the request asks for itself, and the recording notes, acts once.
        again = await read_all(
            client, "POST", server.url + url, content=b"{}", headers={"X-SSE-Tape-Fault": "drop:at=1"}
        )
        assert again == (200, live)
        injected = [e.fault for e in server.journal if isinstance(e, FaultInjected)]
    assert injected == ["drop:at=1", "error:at=3,message=cut", "latency:delay=1ms,times=1"] * 2


def test_record_with_faults_from_the_command_line_keeps_the_notes_of_a_killed_session(
    threaded_upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.toml"
    recorder = Recorder(threaded_upstream, cassette, "--fault", "drop:at=1", "--fault", "split:at=10b")
    assert recorder.proc.stderr is not None
    assert recorder.proc.stderr.readline() == (
        "sse-tape: fault 'split:at=10b' needs the whole stream: forwarded streams under it reach the client "
        "once they end\n"
    )
    body = httpx.post(recorder.url + "/v1/chat/completions?events=3&gap=0.01", content=b"{}").content
    assert body == chat_chunk(0) + chat_chunk(2) + b"data: [DONE]\n\n"
    while " recorded in the spool of " not in (line := recorder.proc.stderr.readline()):
        assert line, "the recorder ended before it recorded"
    recorder.stop(signal.SIGKILL)
    [interaction] = Cassette.load(cassette).interactions  # from the spool the killed session left
    assert interaction.response.body == b"".join(chat_chunk(n) for n in range(3)) + b"data: [DONE]\n\n"
    dropped = len(chat_chunk(0))
    sent = len(chat_chunk(0) + chat_chunk(2) + b"data: [DONE]\n\n")
    assert interaction.injected == (
        Injection("drop:at=1", f"dropped the event at byte {dropped}"),
        Injection("split:at=10b", f"two writes, split at byte 10 of {sent}"),
    )


# --- reconnections: recorded as their own interactions, replayed by their Last-Event-ID ----------------------------


async def read_feed(url: str, last_id: str | None = None) -> tuple[list[str], bool]:
    """One connection to an event feed, as an EventSource makes it: the ids it got, and whether it broke off."""
    ids: list[str] = []
    async with httpx.AsyncClient() as client:
        try:
            async with aconnect_sse(client, "GET", url, headers={"Last-Event-ID": last_id} if last_id else {}) as feed:
                async for event in feed.aiter_sse():
                    ids.append(event.id)
        except (httpx.RemoteProtocolError, httpx.ReadError):
            return ids, True
    return ids, False


async def follow_feed(url: str) -> list[list[str]]:
    """Read a feed as an EventSource does, reconnecting after each break with the last id it had, until it ends:
    the ids of each connection."""
    connections: list[list[str]] = []
    last: str | None = None
    while len(connections) < 10:
        ids, broke = await read_feed(url, last)
        connections.append(ids)
        last = ids[-1] if ids else last
        if not broke:
            return connections
    raise AssertionError(f"the feed broke off ten times: {connections}")


def matched(server: MockServer) -> list[tuple[str, str | None]]:
    return [(e.recording, e.resumed) for e in server.journal if isinstance(e, Matched)]


async def test_a_reconnection_is_recorded_as_its_own_interaction_and_replayed_by_its_last_event_id(
    upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "feed.toml"
    options = ServeOptions.build(faults=["disconnect:after=2,times=1"])
    async with arecording(cassette, upstream.url, options=options) as proxy:
        # Cut off after two events, the client reconnects after the second, and the upstream resumes there.
        assert await follow_feed(proxy.url + "/feed") == [["1", "2"], ["3", "4", "5"]]
        await auntil(lambda: proxy.journal.counts["recorded"] == 2)
    assert [h.get("Last-Event-ID") for h in upstream.seen_headers] == [None, "2"]
    interactions = Cassette.load(cassette).interactions
    [whole] = [i for i in interactions if i.request.header("Last-Event-ID") is None]
    [again] = [i for i in interactions if i.request.header("Last-Event-ID") == "2"]
    assert [e.id for _, e in whole.response.events()] == ["1", "2", "3", "4", "5"]
    assert [e.id for _, e in again.response.events()] == ["3", "4", "5"]
    assert [n.fault for n in whole.injected] == ["disconnect:after=2,times=1"]
    assert again.injected == ()
    at = {i.request.header("Last-Event-ID"): n for n, i in enumerate(interactions, 1)}
    async with aserve(cassette, pace="instant") as server:
        # The reconnection as recorded; one after an id no reconnection was recorded with resumes the whole
        # stream; a first connection gets the whole stream, never a reconnection's.
        assert await read_feed(server.url + "/feed", "2") == (["3", "4", "5"], False)
        assert await read_feed(server.url + "/feed", "4") == (["5"], False)
        assert await read_feed(server.url + "/feed") == (["1", "2", "3", "4", "5"], False)
        assert matched(server) == [
            (f"feed.toml #{at['2']} (GET /feed)", "as recorded after event id '2'"),
            (f"feed.toml #{at[None]} (GET /feed)", "after event id '4'"),
            (f"feed.toml #{at[None]} (GET /feed)", None),
        ]
    async with aserve(cassette, pace="instant", recorded_faults=True) as server:
        # What the recording's client lived through, again: cut off after two, reconnected, every event once.
        assert await follow_feed(server.url + "/feed") == [["1", "2"], ["3", "4", "5"]]
        assert [resumed for _, resumed in matched(server)] == [None, "as recorded after event id '2'"]


async def test_a_recorder_sends_a_reconnection_it_has_not_recorded_to_the_upstream(
    upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "feed.toml"
    async with arecording(cassette, upstream.url, mode="once") as proxy:
        assert await read_feed(proxy.url + "/feed") == (["1", "2", "3", "4", "5"], False)
        assert await read_feed(proxy.url + "/feed", "3") == (["4", "5"], False)
    assert upstream.hits == 2
    async with arecording(cassette, upstream.url, mode="once") as proxy:  # the cassette exists: replay only
        assert await read_feed(proxy.url + "/feed", "3") == (["4", "5"], False)
        assert await read_feed(proxy.url + "/feed", "1") == (["2", "3", "4", "5"], False)  # resumed on replay
        assert [resumed for _, resumed in matched(proxy)] == ["as recorded after event id '3'", "after event id '1'"]
    assert upstream.hits == 2


async def test_a_feeds_reconnection_with_an_unknown_id_says_in_the_log_what_was_done(
    upstream: Upstream, tmp_path: Path
) -> None:
    # Replayed (the bundled feed, as `sse-tape serve` gives it): the whole feed, and the log says why.
    [events] = [path for path in bundled_cassettes() if path.stem == "events"]
    lines: list[str] = []
    async with aserve(events, pace="instant", log=lines.append) as server:
        assert await read_feed(server.url + "/events", "no-such-id") == await read_feed(server.url + "/events")
        await auntil(lambda: any(" ended: " in line for line in lines), "the ended line")
    assert (
        lines[0] == "GET /events -> 200 events.toml #1 (GET /events), resumed from the start: no event id 'no-such-id'"
    )
    # Through a recorder: forwarded with its id, which the upstream resumes as it does (ours: after 99, nothing).
    lines.clear()
    async with arecording(tmp_path / "feed.toml", upstream.url, log=lines.append) as proxy:
        assert await read_feed(proxy.url + "/feed", "99") == ([], False)
        await auntil(lambda: proxy.journal.counts["recorded"] == 1)
    assert lines[0] == (
        f"GET /feed -> 200 from {upstream.url}/feed, a reconnection after event id '99': the upstream resumes it"
    )
    assert lines[1].startswith("GET /feed ended: 200, 0 events, ")


@pytest.mark.parametrize(
    ("encoding", "pack"), [("gzip", gzip.compress), ("deflate", zlib.compress)], ids=["gzip", "deflate"]
)
async def test_a_compressed_request_is_forwarded_and_recorded_as_its_plain_body(
    upstream: Upstream, tmp_path: Path, encoding: str, pack: Any
) -> None:
    # The proxy reads the body (under its limit) to match and record it: what it forwards is that plain body,
    # without the Content-Encoding it no longer has; the cassette keeps it so, and a plain request replays it.
    cassette = tmp_path / "c.toml"
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
    headers = {"content-type": "application/json", "content-encoding": encoding}
    async with arecording(cassette, upstream.url) as proxy, httpx.AsyncClient() as client:
        status, _ = await read_all(client, "POST", proxy.url + CHAT_1, content=pack(body), headers=headers)
    assert status == 200
    assert upstream.seen_bodies == [body]
    assert "Content-Encoding" not in upstream.seen_headers[0]
    recorded = Cassette.load(cassette).interactions[0].request
    assert (recorded.body, recorded.header("content-encoding")) == (body, None)
    async with aserve(cassette, match_on="method,path,body") as server, httpx.AsyncClient() as client:
        assert (await read_all(client, "POST", server.url + CHAT_1, content=body))[0] == 200


async def test_a_body_of_200_000_keys_is_refused_before_it_is_walked_or_forwarded(
    upstream: Upstream, tmp_path: Path
) -> None:
    cassette = tmp_path / "c.toml"
    body = json.dumps({"model": "m", **{f"k{n}": n for n in range(200_000)}}).encode()
    async with arecording(cassette, upstream.url) as proxy, httpx.AsyncClient() as client:
        got = await client.post(proxy.url + CHAT_1, content=body, headers={"content-type": "application/json"})
        again = await client.post(proxy.url + CHAT_1, json={"model": "m"})
    assert got.status_code == 413
    assert got.json()["error"] == {
        "message": "sse-tape: the request body's JSON holds more than 100,000 keys and values",
        "type": "invalid_request_error",
        "param": None,
        "code": "body_too_large",
    }
    assert again.status_code == 200
    assert upstream.hits == 1  # the second request only
    assert len(Cassette.load(cassette).interactions) == 1


async def test_a_large_body_is_redacted_and_recorded_whole(upstream: Upstream, tmp_path: Path) -> None:
    # Large enough that its secrets are found in a thread: the cassette holds it redacted all the same.
    cassette = tmp_path / "c.toml"
    body = {"model": "m", "api_key": "sk-proj-SECRET-IN-A-LARGE-BODY", **{f"k{n}": n for n in range(20_000)}}
    async with arecording(cassette, upstream.url) as proxy, httpx.AsyncClient() as client:
        status, _ = await read_all(client, "POST", proxy.url + CHAT_1, json=body)
    assert status == 200
    assert json.loads(upstream.seen_bodies[0])["api_key"] == "sk-proj-SECRET-IN-A-LARGE-BODY"
    assert b"SECRET-IN-A-LARGE-BODY" not in cassette.read_bytes()
    recorded = Cassette.load(cassette).interactions[0].request.json()
    assert recorded == {**body, "api_key": REDACTED}


async def test_a_client_that_reads_nothing_is_cut_off_and_the_upstreams_answer_still_recorded_whole(
    upstream: Upstream, tmp_path: Path
) -> None:
    # 150 events of 64 KB over 6 s, to a client that reads none of them: once the system's buffers are full (a few
    # MB) and the client has taken nothing for the send timeout, the server cuts it off, and reads the upstream
    # on to its end for the cassette (it was recorded client-gone, cut short where the client stopped).
    cassette = tmp_path / "c.toml"
    path = "/v1/chat/completions?events=150&gap=0.04&pad=65536"
    async with arecording(cassette, upstream.url, limits=Limits(send_timeout=0.5)) as proxy:
        sock = await unread(
            proxy.port, f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{{}}".encode()
        )
        await auntil(lambda: proxy.stats()["stalled_connections"] == 1, "the client cut off")
        async with asyncio.timeout(SAFETY_NET):
            await proxy.control.idle()
        sock.close()
    [interaction] = Cassette.load(cassette).interactions
    assert interaction.response.end is End.COMPLETE
    assert interaction.response.body == b"".join(chat_chunk(n, pad=65536) for n in range(150)) + b"data: [DONE]\n\n"


def test_clients_that_never_read_cannot_keep_a_reading_client_out_of_a_recorder(
    threaded_upstream: Upstream, tmp_path: Path
) -> None:
    # A thousand clients (as many as the descriptors allow) each have a request forwarded and recorded, and read
    # nothing of the answer, against a recorder that takes 100 connections and keeps them alive ten minutes:
    # the first hundred keep them, idle, until a new client takes the place of one. A reading client, on a new
    # connection each time, is answered throughout (before, turned away with 503s until the keep-alive ran out).
    count = min(1000, descriptors(1400) - 300)
    cassette = tmp_path / "c.toml"
    args = ["record", "--upstream", threaded_upstream.url, "-c", str(cassette), "--port", "0", "-q"]
    process, url = start([*args, "--max-connections", "100", "--keep-alive", "600s"])
    port = int(url.rsplit(":", 1)[1])
    flood: list[socket.socket] = []
    try:
        for n in range(count):
            body = json.dumps({"flood": n}).encode()
            head = (
                f"POST /v1/chat/completions?events=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            flood += never_reading(port, head.encode() + body, 1)
        asked = itertools.count()

        def answered() -> bool:
            with httpx.Client(timeout=SAFETY_NET) as client:  # a connection of its own
                got = client.post(url + "/v1/chat/completions?events=1", json={"reader": next(asked)})
            return (got.status_code, got.content) == (200, chat_chunk(0) + b"data: [DONE]\n\n")

        until(answered, "a first answer")
        assert all(answered() for _ in range(20))
    finally:
        for sock in flood:
            sock.close()
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=SAFETY_NET)
    assert "Traceback" not in err
    assert len(Cassette.load(cassette).interactions) >= 21
