"""Request bodies: bounded before they are parsed, decompressed under the limit, and every hostile body, encoding
or header answered in the API's own error shape, never a 500. On real sockets."""

from __future__ import annotations

import gzip
import json
import signal
import socket
import statistics
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import processes
import pytest
from waits import SAFETY_NET

from sse_tape import Cassette, Chunk, ConfigError, Interaction, MockServer, Request, Response, serve
from sse_tape.dialects import dialect_for
from sse_tape.faults import parse_fault

CHAT = "/v1/chat/completions"
ASKED = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say hello"}]}
ANSWER = b'{"id": "chatcmpl-1", "object": "chat.completion", "choices": []}'


def _cassette() -> Cassette:
    request = Request("POST", CHAT, headers=(("content-type", "application/json"),), body=json.dumps(ASKED).encode())
    response = Response(headers=(("content-type", "application/json"),), chunks=(Chunk(0.0, ANSWER),))
    return Cassette([Interaction(request, response)])


@pytest.fixture
def server() -> Iterator[MockServer]:
    """A server of one chat recording, matched on method, path and body, with a 1 MiB body limit."""
    with serve(_cassette(), pace="instant", match_on="method,path,body", max_body="1MiB") as running:
        yield running


@pytest.fixture
def roomy() -> Iterator[MockServer]:
    """The same recording served with the default body limit."""
    with serve(_cassette(), pace="instant", match_on="method,path,body") as running:
        yield running


def _raw(server: MockServer, head: bytes, body: bytes = b"", path: bytes = CHAT.encode()) -> tuple[int, bytes]:
    """Send a request as these bytes (`head`: its header lines); its status and body."""
    return _raw_at(server.port, head, body, path)


def _raw_at(port: int, head: bytes, body: bytes = b"", path: bytes = CHAT.encode()) -> tuple[int, bytes]:
    """`_raw`, to the server on `port`."""
    request = b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + head + b"\r\n" + body
    # The timeout is a net for a server that never answers: a megabyte of JSON, parsed on a busy machine, may
    # take most of it.
    with socket.create_connection(("127.0.0.1", port), timeout=SAFETY_NET) as sock:
        sock.sendall(request)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head_part, _, rest = reply.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head_part.lower():
        rest = _unchunked(rest)
    return int(head_part.split()[1]), rest


def _unchunked(data: bytes) -> bytes:
    out = b""
    while data:
        size, _, data = data.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out, data = out + data[:n], data[n + 2 :]
    return out


def _sized(body: bytes, *headers: bytes) -> bytes:
    return b"Content-Length: %d\r\n" % len(body) + b"".join(h + b"\r\n" for h in headers)


def _api_error(path: str, status: int, message: str, code: str) -> object:
    """The error body the API of `path` sends, as its dialect shapes it."""
    return json.loads(dialect_for(path).http_error(status, f"sse-tape: {message}", code=code)[2])


def _gzip_bomb(expanded: int) -> bytes:
    """gzip of `expanded` zero bytes, made a megabyte at a time."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1024**2)
    return b"".join(packer.compress(zeros) for _ in range(expanded // len(zeros))) + packer.flush()


# --- the size limit ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [CHAT, "/v1/messages"], ids=["openai", "anthropic"])
def test_a_body_over_the_limit_is_a_413_in_the_apis_own_shape(server: MockServer, path: str) -> None:
    body = b'{"x": "' + b"a" * 1024**2 + b'"}'
    status, answer = _raw(server, _sized(body, b"Content-Type: application/json"), body, path.encode())
    assert status == 413
    message = "the request body is larger than 1,048,576 bytes (see --max-body)"
    assert json.loads(answer) == _api_error(path, 413, message, "body_too_large")


def test_a_chunked_body_with_no_length_is_counted_as_it_comes(server: MockServer) -> None:
    def pieces() -> Iterator[bytes]:
        for _ in range(40):
            yield b"a" * 65536

    got = httpx.post(server.url + CHAT, content=pieces())
    assert got.status_code == 413
    assert got.json()["error"]["code"] == "body_too_large"


def test_a_body_within_a_raised_limit_is_answered() -> None:
    big = {**ASKED, "padding": "a" * 2 * 1024**2}
    with serve(_cassette(), pace="instant", max_body="4MiB") as server:
        assert httpx.post(server.url + CHAT, json=big).status_code == 404  # read whole, and not recorded


@pytest.mark.parametrize("word", ["0", "lots", "-1MB"])
def test_a_bad_limit_is_one_clear_error(word: str) -> None:
    with pytest.raises(ConfigError, match=r"max body|is not a size"), serve(max_body=word):
        pass


# --- compressed bodies ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "pack"),
    [
        (b"gzip", gzip.compress),
        (b"x-gzip", gzip.compress),
        (b"deflate", zlib.compress),
        (b"deflate", lambda data: zlib.compress(data, wbits=-zlib.MAX_WBITS)),  # raw deflate, as some clients send
        (b"gzip", lambda data: gzip.compress(data[:10]) + gzip.compress(data[10:])),  # two members
        (b"identity", lambda data: data),
    ],
    ids=["gzip", "x-gzip", "deflate", "raw-deflate", "gzip-members", "identity"],
)
def test_a_compressed_body_matches_the_recording_of_its_plain_body(server: MockServer, encoding: bytes, pack) -> None:  # type: ignore[no-untyped-def]
    body = pack(json.dumps(ASKED).encode())
    status, answer = _raw(
        server, _sized(body, b"Content-Type: application/json", b"Content-Encoding: " + encoding), body
    )
    assert (status, answer) == (200, ANSWER)


def _peak_kib(pid: int) -> int:
    """The most memory process `pid` has held at once (its VmHWM), in KiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0])


def test_a_gzip_bomb_is_refused_at_the_limit_without_being_expanded(tmp_path: Path) -> None:
    # The server in a process of its own, so that its peak memory is its own (this one's may be past already).
    _cassette().save(tmp_path / "chat.toml")
    process, url = processes.start(["serve", str(tmp_path / "chat.toml"), "--max-body", "1MiB", "-q"])
    try:
        bomb = _gzip_bomb(512 * 1024**2)  # half a gigabyte of zeros in about half a megabyte
        before = _peak_kib(process.pid)
        status, answer = _raw_at(int(url.rsplit(":", 1)[1]), _sized(bomb, b"Content-Encoding: gzip"), bomb)
        grew = _peak_kib(process.pid) - before
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert status == 413
    assert json.loads(answer)["error"]["message"] == (
        "sse-tape: the request body decompressed is larger than 1,048,576 bytes (see --max-body)"
    )
    # Expanded whole, or to aiohttp's own 64 MiB limit as before, it would grow by more than 64 MiB.
    assert grew < 32 * 1024, f"the server's peak memory grew by {grew} KiB"


@pytest.mark.parametrize(
    ("encoding", "body", "why"),
    [
        (b"gzip", json.dumps(ASKED).encode(), "it is not gzip data"),
        (b"deflate", json.dumps(ASKED).encode(), "it is not deflate data"),
        (b"deflate", b"\x78\x9c garbage that is not deflate", "it is not deflate data"),
        (b"gzip", gzip.compress(json.dumps(ASKED).encode())[:-12], "ends too soon"),
        (b"deflate", zlib.compress(b"{}") + b"more", "there are bytes after its end"),
        (b"gzip", gzip.compress(b"{}") + b"more", "it is not gzip data"),
    ],
    ids=["plain-as-gzip", "plain-as-deflate", "deflate-garbage", "truncated-gzip", "deflate-trailer", "gzip-trailer"],
)
def test_a_body_that_is_not_what_its_encoding_says_is_a_400(
    server: MockServer, encoding: bytes, body: bytes, why: str
) -> None:
    status, answer = _raw(server, _sized(body, b"Content-Encoding: " + encoding), body)
    assert status == 400
    error = json.loads(answer)["error"]
    assert error["code"] == "bad_encoding"
    assert error["message"].startswith(f"sse-tape: the request body says Content-Encoding {encoding.decode()}")
    assert why in error["message"]


@pytest.mark.parametrize("encoding", [b"br", b"zstd", b"compress", b"gzip, gzip", b"\xff\xfe"])
def test_an_encoding_sse_tape_cannot_read_is_a_415(server: MockServer, encoding: bytes) -> None:
    status, answer = _raw(server, _sized(b"{}", b"Content-Encoding: " + encoding), b"{}")
    assert status == 415
    assert "is not supported: send gzip, deflate or no encoding" in json.loads(answer)["error"]["message"]


# --- JSON limits ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (json.dumps({f"k{n}": n for n in range(200_000)}).encode(), "JSON holds more than 100,000 keys and values"),
        (json.dumps(list(range(150_000))).encode(), "JSON holds more than 100,000 keys and values"),
        # Under 200,000 bytes and 64 brackets, yet more than 100,000 values: no count by size alone passes it.
        (b"[" + b"[]," * 63 + b"0," * 99_889 + b"0]", "JSON holds more than 100,000 keys and values"),
        (b'{"a":' * 65 + b"1" + b"}" * 65, "JSON nested more than 64 deep"),
    ],
    ids=["200000-keys", "150000-items", "100000-values-in-200000-bytes", "65-deep"],
)
def test_json_too_large_to_walk_is_a_413(roomy: MockServer, body: bytes, said: str) -> None:
    status, answer = _raw(roomy, _sized(body, b"Content-Type: application/json"), body)
    assert status == 413
    assert json.loads(answer)["error"]["message"] == f"sse-tape: the request body's {said}"


def test_json_as_deep_and_as_large_as_allowed_is_answered(roomy: MockServer) -> None:
    deep = {**ASKED, "extra": json.loads('{"a":' * 62 + "1" + "}" * 62)}
    wide = {**ASKED, "extra": {f"k{n}": '[{:,\\"' for n in range(49_000)}}  # strings full of JSON's marks
    for body in (deep, wide):
        data = json.dumps(body).encode()
        assert _raw(roomy, _sized(data, b"Content-Type: application/json"), data)[0] == 404  # a miss, no 413


# --- headers -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "status", "said"),
    [
        (b"X-SSE-Tape-Fault: error:message=\xff\xfe", 400, "message holds a byte that is not UTF-8"),
        (b"X-SSE-Tape-Fault: refusal:message=a\x01b", 400, None),  # aiohttp's own 400: not HTTP
        (b"X-SSE-Tape-Fault: stat\xffus", 400, "unknown fault"),
        (b"X-SSE-Tape-Fault: status:code=600", 400, "code '600' is not an HTTP status with a body"),
        (b"X-SSE-Tape-Fault: status:code=599,retry_after=86401", 400, "retry_after '86401' is out of bounds"),
        (b"X-SSE-Tape-Fault: status:code=599,retry_after=86400", 599, "injected by sse-tape: status 599"),
        (b"X-Anything: \xff\xfe\x80", 200, None),
        (b"Content-Type: \xff/\xfe", 200, None),
    ],
    ids=[
        "fault-not-utf8",
        "fault-control",
        "fault-name-not-utf8",
        "status-600",
        "retry-after-over",
        "status-599",
        "other-not-utf8",
        "content-type-not-utf8",
    ],
)
def test_hostile_header_bytes_get_an_answer_never_a_500(
    server: MockServer, header: bytes, status: int, said: str | None
) -> None:
    body = json.dumps(ASKED).encode()
    got, answer = _raw(server, _sized(body, header), body)
    assert got == status
    if said is not None:
        assert said in json.loads(answer)["error"]["message"]


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("refusal:message=a\x01b", "message holds a control character"),
        ("error:message=a\nb", "message holds a control character"),
        ("unknown-tool:name=\udcff", "name holds a byte that is not UTF-8"),
    ],
    ids=["control", "newline", "surrogate-escape"],
)
def test_fault_text_that_could_not_go_into_an_answer_is_refused_naming_the_key(spec: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        parse_fault(spec)


# --- a large body holds up no one ----------------------------------------------------------------------


def _latencies(url: str, stop: threading.Event, count: int | None = None) -> list[float]:
    """Times of replayed requests sent one after another, until `stop` is set (or `count` are done)."""
    took = []
    with httpx.Client(timeout=60) as client:
        while not stop.is_set() and (count is None or len(took) < count):
            started = time.perf_counter()
            got = client.post(url + CHAT, json=ASKED)
            took.append(time.perf_counter() - started)
            assert got.status_code == 200
    return took


def _p99(took: list[float]) -> float:
    return statistics.quantiles(took, n=100, method="inclusive")[98] if len(took) >= 2 else took[0]


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["one-string", "many-strings"])
def test_a_63_mb_body_does_not_hold_up_other_clients(tmp_path, shape: str) -> None:  # type: ignore[no-untyped-def]
    # The server in a process of its own, so that only its own work is measured; a second client's replays
    # before, then while it reads, parses and answers a 63 MB body. Parsed on the event loop (the bug), the body
    # held every other client for as long as it took; the same server's own figures are the yardstick.
    cassette = tmp_path / "chat.toml"
    _cassette().save(cassette)
    process, url = processes.start(["serve", str(cassette), "--pace", "instant", "--max-body", "64MiB", "-q"])
    try:
        if shape == "one-string":
            big = json.dumps({**ASKED, "padding": "a" * 63_000_000}).encode()
        else:
            big = json.dumps({**ASKED, "documents": ["a" * 63_000] * 1000}).encode()
        quiet = _latencies(url, threading.Event(), count=200)
        stop = threading.Event()
        during: list[float] = []

        def measure() -> None:
            during.extend(_latencies(url, stop))

        second = threading.Thread(target=measure)
        second.start()
        try:
            started = time.perf_counter()
            answer = httpx.post(url + CHAT, content=big, headers={"content-type": "application/json"}, timeout=120)
            took = time.perf_counter() - started
        finally:
            stop.set()
            second.join()
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert answer.status_code == 404  # read, parsed and compared whole: not a recorded body
    assert len(during) >= 20, "the second client's requests did not overlap the large one"
    # Held up, a second client's requests would wait about as long as the large one takes.
    assert _p99(during) < max(took / 5, 10 * _p99(quiet)), (_p99(quiet), _p99(during), max(during), took)
