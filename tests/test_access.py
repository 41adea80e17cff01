"""Who may drive a running sse-tape: a web page the user has open may not (issue 28).

A page can reach a server on loopback two ways: cross-origin (its `Origin` is its own site's), or after DNS
rebinding (its own name now points at 127.0.0.1: its `Host` is that name, and it reads what it is answered).
The control endpoints, the fault header and forwarding to an upstream (with the credentials of the
`--upstream` URL) refuse both, against `serve`, `record` and `serve --workers 2`, each a process of its own.
"""

from __future__ import annotations

import base64
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import processes
import pytest
from click.testing import CliRunner
from upstream import Upstream

from sse_tape import serve
from sse_tape.cli import cli
from sse_tape.journal import FaultInjected
from sse_tape.responder import NOTED_FAULTS
from sse_tape.server import run_in_thread
from sse_tape.server.control import MAX_FAULTS

CHAT = {"model": "local-model", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16}
FAULTS = "/__sse_tape__/faults"
EVIL = "https://evil.example"
FAULT = {"X-SSE-Tape-Fault": "status:418"}


@dataclass
class Running:
    """An sse-tape process, and the real upstream behind it when it records."""

    kind: str
    url: str
    port: int
    process: subprocess.Popen[str]
    upstream: Upstream | None = None


def start(args: list[str]) -> tuple[subprocess.Popen[str], str, int]:
    process, url = processes.start([*args, "--port", "0", "-q"])
    return process, url, int(url.rsplit(":", 1)[1])


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    _, err = process.communicate(timeout=30)
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with run_in_thread(Upstream()) as up:
        yield up


@pytest.fixture(scope="module", params=["serve", "record", "serve --workers 2"])
def running(
    request: pytest.FixtureRequest, upstream: Upstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Running]:
    kind = request.param
    if kind == "record":
        with_password = upstream.url.replace("http://", "http://user:s3cret@")
        cassette = tmp_path_factory.mktemp("access") / "tape.toml"
        args = ["record", "--upstream", with_password, "-c", str(cassette), "--record-mode", "all"]
    else:
        args = [*kind.split(), "--pace", "instant"]
    process, url, port = start(args)
    try:
        yield Running(kind, url, port, process, upstream if kind == "record" else None)
    finally:
        stop(process)


def chat(running: Running) -> str:
    return running.url + "/v1/chat/completions"


def forwarded(running: Running, before: int) -> int:
    return len(running.upstream.seen_headers) - before if running.upstream is not None else 0


# --- a page is refused -----------------------------------------------------------------------------------

REBOUND = ["evil.example", "localhost.evil.example", "127.0.0.1.nip.io", "evil", "0.0.0.0"]


@pytest.mark.parametrize("name", REBOUND)
def test_a_rebinding_host_is_refused_the_control_endpoints_and_the_fault_header(running: Running, name: str) -> None:
    host = {"Host": f"{name}:{running.port}"}
    for method in ("GET", "DELETE"):
        got = httpx.request(method, running.url + FAULTS, headers=host)
        assert got.status_code == 403
        assert "see --allow-host" in got.json()["error"]
    assert httpx.post(running.url + FAULTS, json={"faults": ["hang"]}, headers=host).status_code == 403
    assert httpx.post(running.url + "/__sse_tape__/reset", json={}, headers=host).status_code == 403
    assert httpx.get(running.url + "/__sse_tape__/journal", headers=host).status_code == 403
    got = httpx.post(chat(running), json=CHAT, headers={**host, **FAULT})
    assert got.status_code == 403
    assert "X-SSE-Tape-Fault refused: Host" in got.json()["error"]["message"]


def test_a_page_from_another_origin_is_refused_everything_but_the_replay_api(running: Running) -> None:
    evil = {"Origin": EVIL}
    assert httpx.get(running.url + FAULTS, headers=evil).status_code == 403
    got = httpx.post(running.url + FAULTS, json={"faults": ["hang"]}, headers=evil)
    assert (got.status_code, "access-control-allow-origin" in got.headers) == (403, False)
    assert "a page from https://evil.example (see --cors-origin)" in got.json()["error"]
    got = httpx.post(chat(running), json=CHAT, headers={**evil, **FAULT})
    assert got.status_code == 403
    # The origin of a page on this machine, another port: another site all the same.
    other = {"Origin": f"http://127.0.0.1:{running.port + 1}"}
    assert httpx.get(running.url + FAULTS, headers=other).status_code == 403
    assert httpx.get(running.url + FAULTS, headers={"Origin": "null"}).status_code == 403


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_a_form_post_is_refused(running: Running, content_type: str) -> None:
    # What a page's <form> or fetch(..., {mode: "no-cors"}) sends without asking first.
    body = '{"faults": ["hang"]}'
    got = httpx.post(running.url + FAULTS, content=body, headers={"Origin": EVIL, "Content-Type": content_type})
    assert got.status_code == 403
    got = httpx.post(running.url + FAULTS, content=body, headers={"Content-Type": content_type})
    assert got.status_code == 415  # not even from a client on this machine: a POST to them says it is JSON
    assert httpx.get(running.url + FAULTS).json()["faults"] == []


@pytest.mark.parametrize(
    ("path", "asked"),
    [(FAULTS, "content-type"), ("/__sse_tape__/reset", ""), ("/v1/chat/completions", "content-type, x-sse-tape-fault")],
    ids=["control", "control, no headers", "the fault header"],
)
def test_a_preflight_from_another_origin_is_refused(running: Running, path: str, asked: str) -> None:
    for origin in (EVIL, f"http://evil.example:{running.port}"):
        headers = {"Origin": origin, "Access-Control-Request-Method": "POST"}
        if asked:
            headers["Access-Control-Request-Headers"] = asked
        got = httpx.options(running.url + path, headers=headers)
        assert got.status_code == 403
        assert "access-control-allow-origin" not in got.headers


def test_the_recorder_forwards_no_page_of_another_origin_nor_a_rebound_one(running: Running) -> None:
    if running.upstream is None:
        pytest.skip("serve forwards nothing")
    before = len(running.upstream.seen_headers)
    for headers in (
        {"Origin": EVIL},
        {"Host": f"evil.example:{running.port}"},
        {"Host": f"evil.example:{running.port}", "Origin": f"http://evil.example:{running.port}"},
    ):
        got = httpx.post(chat(running), json=CHAT, headers=headers)
        assert got.status_code == 403
        assert got.json()["error"]["message"].startswith("sse-tape: not forwarded: ")
        form = httpx.post(chat(running), content="a=1", headers={**headers, "Content-Type": "text/plain"})
        assert form.status_code == 403
    preflight = {
        "Origin": EVIL,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization",
    }
    got = httpx.options(chat(running), headers=preflight)
    assert got.status_code == 204  # replay answers any page; forwarding still refuses it
    assert forwarded(running, before) == 0  # no request, so no credential and nothing in the cassette


# --- the user's own clients and pages are obeyed ---------------------------------------------------------


def test_loopback_hosts_and_the_servers_own_pages_are_obeyed(running: Running) -> None:
    port = running.port
    own = [
        {},
        {"Host": f"127.0.0.1:{port}"},
        {"Host": f"localhost:{port}"},
        {"Host": "localhost"},
        {"Host": f"LocalHost:{port}"},
        {"Host": f"127.9.8.7:{port}"},
        {"Host": f"[::1]:{port}"},
        {"Origin": f"http://127.0.0.1:{port}"},
        {"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}"},
    ]
    for headers in own:
        assert httpx.get(running.url + FAULTS, headers=headers).status_code == 200, headers
        json_post = httpx.post(running.url + FAULTS, json={"faults": []}, headers=headers)
        assert json_post.status_code == 200, headers
    preflight = {"Origin": f"http://localhost:{port}", "Access-Control-Request-Method": "DELETE"}
    got = httpx.options(running.url + FAULTS, headers=preflight)
    assert got.status_code == 204
    assert got.headers["access-control-allow-origin"] == f"http://localhost:{port}"
    # Another port of a loopback name is not this server's.
    assert httpx.get(running.url + FAULTS, headers={"Host": f"localhost:{port + 1}"}).status_code == 403
    if running.kind == "serve":  # a replayed answer with the fault applied
        got = httpx.post(chat(running), json=CHAT, headers={**FAULT, "Origin": f"http://127.0.0.1:{port}"})
        assert got.status_code == 418


def test_the_replay_api_still_answers_any_page_with_cors(running: Running) -> None:
    if running.kind == "record":
        pytest.skip("record forwards what replay does not answer")
    got = httpx.post(chat(running), json=CHAT, headers={"Origin": EVIL, "Host": f"evil.example:{running.port}"})
    assert got.status_code == 200
    assert got.headers["access-control-allow-origin"] == EVIL
    preflight = {
        "Origin": EVIL,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
    }
    got = httpx.options(chat(running), headers=preflight)
    assert (got.status_code, got.headers["access-control-allow-origin"]) == (204, EVIL)


def test_the_upstream_url_credentials_go_with_the_users_own_requests_and_a_clients_own_authorization_wins(
    running: Running,
) -> None:
    if running.upstream is None:
        pytest.skip("serve forwards nothing")
    seen = running.upstream.seen_headers
    basic = "Basic " + base64.b64encode(b"user:s3cret").decode()
    got = httpx.post(chat(running), json={**CHAT, "n": 1}, headers={"Origin": f"http://127.0.0.1:{running.port}"})
    assert got.status_code == 200
    assert seen[-1]["Authorization"] == basic
    got = httpx.post(chat(running), json={**CHAT, "n": 2}, headers={"Authorization": "Bearer sk-client-own"})
    assert got.status_code == 200  # a 502 before: aiohttp refused a header beside the URL's credentials
    assert seen[-1]["Authorization"] == "Bearer sk-client-own"


# --- what the user names -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["serve", "record"])
def test_allow_host_and_cors_origin_let_the_named_ones_in(kind: str, upstream: Upstream, tmp_path: Path) -> None:
    named = [
        "--allow-host",
        "tape.internal",
        "--allow-host",
        "other.internal:9",
        "--cors-origin",
        "https://app.example",
    ]
    if kind == "record":
        args = ["record", "--upstream", upstream.url, "-c", str(tmp_path / "t.toml"), "--record-mode", "all"]
    else:
        args = ["serve", "--pace", "instant"]
    process, url, port = start([*args, *named])
    try:
        assert httpx.get(url + FAULTS, headers={"Host": f"tape.internal:{port}"}).status_code == 200
        assert httpx.get(url + FAULTS, headers={"Host": "tape.internal:1234"}).status_code == 200  # any port
        assert httpx.get(url + FAULTS, headers={"Host": "other.internal:9"}).status_code == 200
        assert httpx.get(url + FAULTS, headers={"Host": f"other.internal:{port}"}).status_code == 403
        assert httpx.get(url + FAULTS, headers={"Host": f"tape.internal.evil:{port}"}).status_code == 403
        app = {"Origin": "https://app.example"}
        got = httpx.post(url + FAULTS, json={"faults": []}, headers=app)
        assert (got.status_code, got.headers["access-control-allow-origin"]) == (200, "https://app.example")
        preflight = {
            **app,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "x-sse-tape-fault",
        }
        got = httpx.options(url + "/v1/chat/completions", headers=preflight)
        assert (got.status_code, got.headers["access-control-allow-origin"]) == (204, "https://app.example")
        assert httpx.get(url + FAULTS, headers={"Origin": EVIL}).status_code == 403
        if kind == "record":  # forwarded, and readable by the named page
            got = httpx.post(url + "/v1/chat/completions", json=CHAT, headers=app)
            assert (got.status_code, got.headers["access-control-allow-origin"]) == (200, "https://app.example")
            got = httpx.post(url + "/v1/chat/completions", json={**CHAT, "n": 3})
            assert "access-control-allow-origin" not in got.headers
    finally:
        stop(process)
    process, url, _ = start(["serve", "--cors-origin", "*"])
    try:
        got = httpx.post(url + FAULTS, json={"faults": []}, headers={"Origin": EVIL})
        assert (got.status_code, got.headers["access-control-allow-origin"]) == (200, EVIL)
    finally:
        stop(process)


def test_allow_remote_control_does_not_lift_the_host_check() -> None:
    process, url, port = start(["serve", "--allow-remote-control"])
    try:
        assert httpx.get(url + FAULTS, headers={"Host": f"evil.example:{port}"}).status_code == 403
        assert httpx.get(url + FAULTS).status_code == 200
    finally:
        stop(process)


# --- bounds on what the control endpoints take ---------------------------------------------------------------


def test_a_control_body_over_a_mebibyte_is_a_413_and_over_a_thousand_faults_a_400() -> None:
    with serve(pace="instant") as server:
        control = server.url + FAULTS
        big = b'{"faults": ["' + b"x" * (1024**2) + b'"]}'
        got = httpx.post(control, content=big, headers={"content-type": "application/json"})
        assert (got.status_code, got.json()["error"]) == (
            413,
            "a control request's body may hold 1,048,576 bytes at most",
        )
        got = httpx.post(control, json={"faults": ["ttfb:0ms"] * (MAX_FAULTS + 1)})
        assert got.status_code == 400
        assert "1,001 faults: a server holds 1,000 at most" in got.json()["error"]
        assert httpx.post(control, json={"faults": ["ttfb:0ms"] * MAX_FAULTS}).status_code == 200
        with pytest.raises(ValueError, match="1,001 faults"):
            server.control.add_faults(["ttfb:0ms"])
        got = httpx.post(server.url + "/v1/chat/completions", json=CHAT)
        assert got.status_code == 200
        server.control.wait_idle(30)
        notes = [e for e in server.control.journal if isinstance(e, FaultInjected)]
        assert len(notes) == NOTED_FAULTS + 1  # a thousand faults acted: the log is not a thousand lines
        assert notes[-1].what.endswith(
            f"the faults after the first {NOTED_FAULTS} of a request are counted, not journaled"
        )
        assert server.control.snapshot().injected == {"ttfb:0ms": MAX_FAULTS}


# --- :: is every address --------------------------------------------------------------------------------


def _ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6(), reason="no IPv6 on this machine")
@pytest.mark.parametrize("args", [["serve"], ["serve", "--workers", "2"]], ids=["serve", "serve --workers 2"])
def test_listening_on_double_colon_takes_ipv4_and_ipv6(args: list[str]) -> None:
    process, url, port = start([*args, "--host", "::", "--pace", "instant"])
    try:
        assert url == f"http://[::]:{port}"
        for host in ("127.0.0.1", "[::1]"):
            assert httpx.post(f"http://{host}:{port}/v1/chat/completions", json=CHAT).status_code == 200
    finally:
        stop(process)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--allow-host", "http://tape.internal"], "--allow-host 'http://tape.internal': give a host name or address"),
        (["--allow-host", "a:b"], "--allow-host 'a:b': give a host name or address"),
        (
            ["--cors-origin", "app.example"],
            "--cors-origin 'app.example': give an origin (https://app.example:3000) or *",
        ),
    ],
)
def test_a_bad_allowed_host_or_origin_is_one_line(given: list[str], said: str) -> None:
    result = CliRunner().invoke(cli, ["serve", "--port", "0", *given])
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: {said}")
    assert len(result.output.splitlines()) == 1
