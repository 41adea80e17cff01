from __future__ import annotations

import gc
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgpack
import pytest
from allocations import peak_allocated
from appending import append_many
from hatchling.builders.wheel import WheelBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sse_tape.cassette
from sse_tape import (
    Cassette,
    CassetteError,
    CassetteFormatError,
    CassetteNotFoundError,
    Chunk,
    End,
    Interaction,
    Matcher,
    MatchOn,
    Request,
    Response,
    append_interactions,
    bundled_cassettes,
)
from sse_tape.cassette import Injection, find_cassettes, toml
from sse_tape.cassette import cache as toml_cache
from sse_tape.cassette.spools import SpoolWriter

FIXTURES = Path(__file__).parent / "fixtures"


def awkward_interaction() -> Interaction:
    return Interaction(
        Request(
            "POST",
            "/v1/chat/completions",
            query="api-version=2024-10-21&x=%20",
            headers=(("content-type", "application/json"), ("x-dup", "1"), ("x-dup", "2")),
            body=b'{"messages": [{"role": "user", "content": "it\'s \\"quoted\\" \\\\ back\\nslash"}]}',
        ),
        Response(
            status=200,
            headers=(("content-type", "text/event-stream"), ("set-cookie", "a=1"), ("set-cookie", "b=2")),
            chunks=(
                Chunk(0.25, b'data: {"x": "\xc3\xa9"}\n\n'),
                Chunk(0.5, b"event: e\r\ndata: crlf\r\n\r\n"),
                Chunk(0.75, b"data: lone cr\r\r"),
                Chunk(1.0, b"\xff\xfe not utf-8 \x00"),
                Chunk(1.25, b"data: '''triple'''\n\n"),
            ),
            end=End.TIMEOUT,
            duration=21.5,
        ),
        recorded_at="2026-11-22T05:00:00+00:00",
        injected=(
            Injection("latency:delay=10ms", "each write 0.01 s later, jitter 0 s"),
            Injection('error:at=1,message=it\'s "out"', "openai-chat error after event 1"),
        ),
    )


@pytest.mark.parametrize("suffix", [".toml", ".msgpack"])
def test_save_then_load_keeps_every_byte_and_offset(tmp_path: Path, suffix: str) -> None:
    cassette = Cassette([awkward_interaction(), awkward_interaction()])
    path = cassette.save(tmp_path / f"c{suffix}")
    assert Cassette.load(path).interactions == cassette.interactions


def test_toml_shows_json_events_as_they_are_on_the_wire(tmp_path: Path) -> None:
    chunk = b'data: {"choices":[{"delta":{"content":"it\'s \\"ok\\""}}]}\n\n'
    path = Cassette([Interaction(Request("POST", "/v1/x"), Response(chunks=(Chunk(0.1, chunk),)))]).save(
        tmp_path / "c.toml"
    )
    # A reviewer reads the event line exactly as the server sent it, with no escaping.
    assert chunk.decode().splitlines()[0] in path.read_text()


def test_the_faults_a_recorded_client_got_are_noted_after_the_response(tmp_path: Path) -> None:
    note = Injection("disconnect:after=3", "closed at byte 96 (0.153 s)")
    interaction = Interaction(
        Request("GET", "/events"), Response(chunks=(Chunk(0.1, b"data: 1\n\n"),)), injected=(note,)
    )
    path = Cassette([interaction]).save(tmp_path / "c.toml")
    text = path.read_text()
    assert '[[interactions.injected]]\nfault = "disconnect:after=3"\nwhat = "closed at byte 96 (0.153 s)"\n' in text
    assert text.index("[[interactions.injected]]") > text.index("[[interactions.response.chunks]]")
    assert Cassette.load(path).interactions == [interaction]
    assert "injected" not in Cassette([replace(interaction, injected=())]).save(tmp_path / "d.toml").read_text()


def test_non_utf8_chunks_are_stored_as_base64_in_toml(tmp_path: Path) -> None:
    path = Cassette([Interaction(Request("GET", "/"), Response(chunks=(Chunk(0.0, b"\xff\xfe"),)))]).save(
        tmp_path / "c.toml"
    )
    assert 'base64 = "//4="' in path.read_text()


_CONTROLS = "".join(map(chr, [*range(0x09), *range(0x0A, 0x20), 0x7F]))


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    chunks=st.lists(
        st.tuples(st.floats(0, 1e5, allow_nan=False), st.text(max_size=60) | st.binary(max_size=30)), max_size=6
    ),
    body=st.text(max_size=60),
    # Any text a header value can hold: a control character but tab is refused at load (HTTP forbids it, and a
    # line break would split the header on the wire).
    header=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=_CONTROLS), max_size=20),
)
def test_toml_round_trips_any_text_or_bytes(
    tmp_path: Path, chunks: list[tuple[float, str | bytes]], body: str, header: str
) -> None:
    interaction = Interaction(
        Request("POST", "/p", headers=(("x-h", header),), body=body.encode("utf-8", "surrogatepass")),
        Response(
            chunks=tuple(Chunk(t, d if isinstance(d, bytes) else d.encode("utf-8", "surrogatepass")) for t, d in chunks)
        ),
    )
    path = Cassette([interaction]).save(tmp_path / "h.toml")
    assert Cassette.load(path).interactions == [interaction]


@pytest.mark.parametrize("path", bundled_cassettes(), ids=lambda p: p.name)
def test_convert_round_trips_bundled_cassettes_byte_exact(tmp_path: Path, path: Path) -> None:
    original = Cassette.load(path)
    packed = original.save(tmp_path / "c.msgpack")
    back = Cassette.load(packed).save(tmp_path / "c.toml")
    assert back.read_bytes() == path.read_bytes()
    repacked = Cassette.load(back).save(tmp_path / "again.msgpack")
    assert repacked.read_bytes() == packed.read_bytes()
    assert Cassette.load(repacked).interactions == original.interactions


def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    target = tmp_path / "c.toml"
    Cassette([awkward_interaction()]).save(target)
    os.chmod(target, 0o640)
    Cassette([awkward_interaction()] * 2).save(target)
    assert [p.name for p in tmp_path.iterdir()] == ["c.toml"]
    assert target.stat().st_mode & 0o777 == 0o640
    assert len(Cassette.load(target)) == 2


def test_missing_cassette(tmp_path: Path) -> None:
    with pytest.raises(CassetteNotFoundError, match="no such cassette") as info:
        Cassette.load(tmp_path / "nope.toml")
    assert isinstance(info.value, FileNotFoundError)


def test_unknown_suffix(tmp_path: Path) -> None:
    (tmp_path / "c.json").write_text("{}")
    with pytest.raises(CassetteError, match=r"unknown cassette type '\.json': use \.toml or \.msgpack"):
        Cassette.load(tmp_path / "c.json")


def test_truncated_toml_names_the_file_and_the_problem(tmp_path: Path) -> None:
    source = bundled_cassettes()[0].read_bytes()
    target = tmp_path / "cut.toml"
    target.write_bytes(source[: len(source) // 2])
    with pytest.raises(CassetteFormatError, match=r"cut\.toml: truncated or corrupt TOML") as info:
        Cassette.load(target)
    assert isinstance(info.value, ValueError)


def test_truncated_msgpack(tmp_path: Path) -> None:
    packed = Cassette.load(bundled_cassettes()[0]).save(tmp_path / "c.msgpack").read_bytes()
    (tmp_path / "cut.msgpack").write_bytes(packed[:-10])
    with pytest.raises(CassetteFormatError, match=r"cut\.msgpack: truncated or corrupt MessagePack"):
        Cassette.load(tmp_path / "cut.msgpack")


def test_binary_garbage_as_toml(tmp_path: Path) -> None:
    (tmp_path / "g.toml").write_bytes(b"\x00\xff\x13garbage")
    with pytest.raises(CassetteFormatError, match="not a TOML file: invalid UTF-8 at byte 1"):
        Cassette.load(tmp_path / "g.toml")


def test_foreign_toml_is_not_a_cassette(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    with pytest.raises(CassetteFormatError, match=r"pyproject\.toml: not an sse-tape cassette \(no format_version\)"):
        Cassette.load(tmp_path / "pyproject.toml")


def test_newer_format_asks_to_upgrade() -> None:
    with pytest.raises(CassetteFormatError, match=r"cassette format 99, this one reads up to 1\): upgrade sse-tape"):
        Cassette.load(FIXTURES / "format-99.toml")


def test_the_cassette_package_exports_what_the_rest_of_sse_tape_imports_from_it() -> None:
    assert sse_tape.cassette.__all__ == [
        "FORMAT_VERSION",
        "REDACTED",
        "Cassette",
        "Chunk",
        "End",
        "Headers",
        "Injection",
        "Interaction",
        "Recording",
        "Request",
        "Response",
        "append_interactions",
        "bundled_cassettes",
        "check_cassette_path",
        "find_cassettes",
        "storable_headers",
    ]
    assert all(hasattr(sse_tape.cassette, name) for name in sse_tape.cassette.__all__)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'format_version = 1\n[[interactions]]\nrequest = {method = "GET"}\nresponse = {status = 200}\n',
            r"interaction 1: request\.path is missing",
        ),
        (
            'format_version = 1\n[[interactions]]\nrequest = {method = "GET", path = "/"}\nresponse = {status = "ok"}\n',
            r"interaction 1: response\.status must be an integer",
        ),
        (
            'format_version = 1\n[[interactions]]\nrequest = {method = "GET", path = "/"}\n'
            'response = {status = 200, end = "exploded"}\n',
            r"response\.end 'exploded' is not one of complete, upstream-reset",
        ),
        (
            'format_version = 1\n[[interactions]]\nrequest = {method = "GET", path = "/"}\n'
            "response = {status = 200, chunks = [{t = -1, text = 'x'}]}\n",
            r"interaction 1: chunk 1: t must be a number of seconds >= 0",
        ),
        (
            'format_version = 1\n[[interactions]]\nrequest = {method = "GET", path = "/"}\n'
            "response = {status = 200, chunks = [{t = -0.5, text = 'x'}]}\n",
            r"interaction 1: chunk 1: t must be a number of seconds >= 0",
        ),
        (
            'format_version = 1\n[[interactions]]\nrequest = {method = "GET", path = "/"}\n'
            "response = {status = 200, chunks = [{t = 1, base64 = '!!'}]}\n",
            r"chunk 1: base64 is not valid base64",
        ),
        (
            'format_version = 1\n[[interactions]]\nrequest = {method = "GET", path = "/"}\n'
            "response = {status = 200, chunks = [{t = nan, text = 'x'}]}\n",
            r"interaction 1: chunk 1\.t must be a finite number",
        ),
        (
            'format_version = 1\n[[interactions]]\nrequest = {method = "GET", path = "/"}\n'
            "response = {status = 200, chunks = [{t = inf, text = 'x'}]}\n",
            r"interaction 1: chunk 1\.t must be a finite number",
        ),
        (
            'format_version = 1\n[[interactions]]\nrequest = {method = "GET", path = "/"}\nresponse = {status = 1000}\n',
            r"interaction 1: response.status 1000 is not an HTTP status",
        ),
        (
            'format_version = 1\n[[interactions]]\nrequest = {method = "GET", path = "/"}\n'
            "response = {status = 200, duration = inf}\n",
            r"interaction 1: response.duration must be a finite number",
        ),
        (
            'format_version = 1\n[[interactions]]\nrequest = {method = "GET", path = "/"}\nresponse = {status = 200}\n'
            'injected = "error:3"\n',
            r"interaction 1: injected must be a list",
        ),
        (
            'format_version = 1\n[[interactions]]\nrequest = {method = "GET", path = "/"}\nresponse = {status = 200}\n'
            'injected = [{fault = "error:3"}]\n',
            r"interaction 1: injected 1\.what is missing",
        ),
        ('format_version = 1\nspools = "1-abcdef"\n', r"spools must be a list of strings"),
    ],
    ids=[
        "missing-path",
        "status-type",
        "bad-end",
        "negative-t",
        "negative-float-t",
        "bad-base64",
        "nan-t",
        "inf-t",
        "status-1000",
        "inf-duration",
        "injected-not-a-list",
        "injected-without-what",
        "spools-not-a-list",
    ],
)
def test_malformed_interactions_say_where(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "bad.toml").write_text(text)
    with pytest.raises(CassetteFormatError, match=message):
        Cassette.load(tmp_path / "bad.toml")


@pytest.mark.parametrize(
    ("chunk", "message"),
    [
        ({"t": -1.5, "bytes": b"x"}, "interaction 1: chunk 1: t must be a number of seconds >= 0"),
        ({"t": 1e300, "bytes": b"x"}, "interaction 1: chunk 1.t must be a number of seconds under a year"),
        ({"t": 0.5, "bytes": "x"}, "interaction 1: chunk 1: bytes must be bytes"),
        ({"t": 0.5, "text": b"x"}, "interaction 1: chunk 1: text must be a string"),
    ],
)
def test_chunks_shaped_as_sse_tape_writes_them_are_checked_all_the_same(
    tmp_path: Path, chunk: dict[str, Any], message: str
) -> None:
    request, response = {"method": "GET", "path": "/"}, {"status": 200, "chunks": [chunk]}
    path = tmp_path / "c.msgpack"
    path.write_bytes(msgpack.packb({"format_version": 1, "interactions": [{"request": request, "response": response}]}))
    with pytest.raises(CassetteFormatError, match=re.escape(message)):
        Cassette.load(path)


@pytest.mark.parametrize("enabled", [True, False], ids=["collector-on", "collector-off"])
def test_a_load_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path, enabled: bool) -> None:
    good = Cassette([awkward_interaction()]).save(tmp_path / "good.toml")
    (tmp_path / "bad.msgpack").write_bytes(msgpack.packb({"format_version": 1, "interactions": [{}]}))
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        Cassette.load(good)
        assert gc.isenabled() is enabled
        with pytest.raises(CassetteFormatError):
            Cassette.load(tmp_path / "bad.msgpack")
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


def test_response_events_carry_the_offset_of_the_chunk_that_completed_them() -> None:
    response = Response(chunks=(Chunk(0.1, b"data: a"), Chunk(0.2, b"\n\ndata: b\n\n"), Chunk(0.3, b": hb\n\n")))
    assert [(t, e.data) for t, e in response.events()] == [(0.2, "a"), (0.2, "b")]


def test_bundled_cassettes_cover_every_seed_system_and_an_eventsource_feed() -> None:
    names = {p.stem for p in bundled_cassettes()}
    seeds = {"openai-chat", "openai-completions", "openai-responses", "lmstudio-chat", "router-chat"}
    assert names == {
        *seeds,
        "anthropic-messages",
        "gemini",
        "ollama-chat",
        "ollama-generate",
        "bedrock-converse",
        "bedrock-invoke",
        "events",
    }


def test_bundled_cassettes_ship_in_the_wheel(tmp_path: Path) -> None:
    root = Path(__file__).parent.parent
    wheel = next(WheelBuilder(str(root)).build(directory=str(tmp_path), versions=["standard"]))
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"sse_tape/_bundled/{p.name}" for p in bundled_cassettes()} <= set(names)


@pytest.mark.parametrize("suffix", [".toml", ".msgpack"])
def test_concurrent_appenders_lose_no_interaction(tmp_path: Path, suffix: str) -> None:
    path = str(tmp_path / f"shared{suffix}")
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=append_many, args=(path, w, 25)) for w in range(3)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(60)
        assert writer.exitcode == 0
    paths = [i.request.path for i in Cassette.load(path)]
    assert sorted(paths) == sorted(f"/w{w}/{n}" for w in range(3) for n in range(25))
    for w in range(3):  # each writer's interactions stay in the order it wrote them
        mine = [p for p in paths if p.startswith(f"/w{w}/")]
        assert mine == [f"/w{w}/{n}" for n in range(25)]


def test_append_leaves_an_unreadable_cassette_alone(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("not = [toml")
    with pytest.raises(CassetteFormatError):
        append_interactions(path, [awkward_interaction()])
    assert path.read_text() == "not = [toml"


def test_a_header_name_that_is_not_text_is_refused(tmp_path: Path) -> None:
    doc = {
        "format_version": 1,
        "interactions": [
            {"request": {"method": "GET", "path": "/", "headers": {b"x": "y"}}, "response": {"status": 200}}
        ],
    }
    (tmp_path / "c.msgpack").write_bytes(msgpack.packb(doc, use_bin_type=True))
    with pytest.raises(CassetteFormatError, match=r"interaction 1: request.headers: header name b'x' is not text"):
        Cassette.load(tmp_path / "c.msgpack")


def test_saving_where_no_file_can_be_written_is_a_cassette_error(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(CassetteError, match=r"afile/c.toml: cannot write: "):
        Cassette([awkward_interaction()]).save(tmp_path / "afile" / "c.toml")
    with pytest.raises(CassetteError, match=r"afile/c.toml: cannot write beside it: "):  # asked before anything
        append_interactions(tmp_path / "afile" / "c.toml", [awkward_interaction()])


# --- appends and spools ----------------------------------------------------------------------------


def _spooled(cassette: Path, *streams: tuple[Interaction, bool]) -> SpoolWriter:
    """A spool beside `cassette` holding each interaction, ended or (False) cut off before its end."""
    spool = SpoolWriter(cassette)
    for n, (interaction, ended) in enumerate(streams, 1):
        _spool(spool, n, interaction, ended=ended)
    return spool


def _spool(
    spool: SpoolWriter, n: int, interaction: Interaction, *, ended: bool = True, replaces: Sequence[Interaction] = ()
) -> None:
    """Write `interaction` to `spool` as its stream `n`, noted as taking the place of those in `replaces`."""
    request, response = interaction.request, interaction.response
    headers = list(request.headers)
    spool.start(n, interaction.recorded_at or "", request.method, request.path, request.query, headers, request.body)
    spool.head(n, response.status, list(response.headers))
    for chunk in response.chunks:
        spool.chunk(n, chunk.t, chunk.data)
    for note in interaction.injected:
        spool.fault(n, note.fault, note.what)
    for old in replaces:
        spool.replaces(n, old.fingerprint())
    if ended:
        spool.end(n, str(response.end), response.end_time)


def test_an_append_keeps_the_files_bytes_and_adds_the_new_tables(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    cassette = Cassette([awkward_interaction()], path)
    cassette.save()
    before = path.read_bytes()
    cassette.append([awkward_interaction()])
    after = path.read_bytes()
    assert after.startswith(before)
    assert after[len(before) :].startswith(b"\n[[interactions]]\n")
    assert Cassette.load(path).interactions == [awkward_interaction()] * 2


@pytest.mark.parametrize("suffix", [".toml", ".msgpack"])
def test_an_append_writes_at_the_files_end_in_place(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"c{suffix}"
    cassette = Cassette([awkward_interaction()] * 20, path)  # more than a MessagePack fixarray counts
    cassette.save()
    before, inode = path.read_bytes(), path.stat().st_ino
    cassette.append([awkward_interaction()])
    after = path.read_bytes()
    assert path.stat().st_ino == inode  # the same file, not a copy renamed over it
    if suffix == ".msgpack":  # and the array's count, in its header's place
        at = before.index(b"\xacinteractions") + 13
        assert (before[at : at + 5], after[at : at + 5]) == (b"\xdd\x00\x00\x00\x14", b"\xdd\x00\x00\x00\x15")
        before, after = before[:at] + before[at + 5 :], after[:at] + after[at + 5 :]
    assert after.startswith(before)
    assert Cassette.load(path).interactions == [awkward_interaction()] * 21
    assert not list(tmp_path.glob("*.spool"))  # the spool that noted the write is gone


def test_a_messagepack_file_whose_header_cannot_count_more_is_written_anew_once(tmp_path: Path) -> None:
    path = tmp_path / "c.msgpack"
    doc = {"format_version": 1, "interactions": []}
    path.write_bytes(msgpack.packb(doc))  # as another writer makes it: a fixarray, which counts 15 at most
    for n in range(1, 18):
        inode = path.stat().st_ino
        append_interactions(path, [awkward_interaction()])
        assert (path.stat().st_ino == inode) is (n != 16)  # written anew once, with a header that counts more
    assert Cassette.load(path).interactions == [awkward_interaction()] * 17


_CRASH_IN_THE_MIDDLE = """
import resource, signal, sys
from pathlib import Path
from sse_tape import Cassette
from sse_tape.cassette.spools import SpoolWriter
sys.path.insert(0, {tests!r})
from test_cassette import _spool, awkward_interaction
path = Path({path!r})
cassette = Cassette.load(path)
spool = SpoolWriter(path)
_spool(spool, 1, awkward_interaction())
# The file may grow by 100 bytes: the write of the new interaction gets that far, and the process is killed
# (Python ignores SIGXFSZ; the kernel's default ends the process).
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size + 100, resource.RLIM_INFINITY))
cassette.append([awkward_interaction()], spool=spool.path)
"""


@pytest.mark.parametrize("suffix", [".toml", ".msgpack"])
def test_a_crash_in_the_middle_of_an_append_leaves_the_file_as_it_was_and_loses_nothing(
    tmp_path: Path, suffix: str
) -> None:
    path = tmp_path / f"c{suffix}"
    old = replace(awkward_interaction(), recorded_at="old")
    Cassette([old] * 3, path).save()
    before = path.read_bytes()
    code = _CRASH_IN_THE_MIDDLE.format(tests=str(Path(__file__).parent), path=str(path))
    crashed = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert crashed.returncode == -signal.SIGXFSZ, crashed.stderr
    assert path.read_bytes().startswith(before)
    assert len(path.read_bytes()) == len(before) + 100  # a write cut short
    # The file as it was, and the stream from the spool: nothing lost, nothing twice.
    assert Cassette.load(path).interactions == [old] * 3 + [awkward_interaction()]
    append_interactions(path, [old])  # the next write cuts the rest off, and takes the spool in
    assert Cassette.load(path).interactions == [old] * 3 + [awkward_interaction(), old]
    assert not list(tmp_path.glob("*.spool"))


@pytest.mark.parametrize("suffix", [".toml", ".msgpack"])
def test_an_append_after_another_writer_reads_the_file_again(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"c{suffix}"
    mine = Cassette([], path)
    mine.save()
    append_interactions(path, [awkward_interaction()])  # someone else
    mine.append([awkward_interaction()])
    assert len(Cassette.load(path)) == len(mine) == 2


def test_a_hand_written_inline_interactions_array_is_appended_to_by_rewriting(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("format_version = 1\ninteractions = []\n")
    append_interactions(path, [awkward_interaction()])
    assert Cassette.load(path).interactions == [awkward_interaction()]


def test_a_killed_sessions_spool_is_read_with_its_cassette_until_the_next_write_takes_it_in(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    note = Injection("disconnect:after=0", "closed at byte 0 (0.000 s)")
    first = Interaction(Request("GET", "/1"), Response(chunks=(Chunk(0.1, b"data: 1\n\n"),)), "t", (note,))
    cut = Interaction(Request("GET", "/2"), Response(chunks=(Chunk(0.2, b"data: 2\n\n"),)), "t")
    spool = _spooled(path, (first, True), (cut, False))
    with pytest.raises(CassetteNotFoundError):
        Cassette.load(path)  # a running recorder holds the spool: it will append what it holds itself
    spool.close(remove=False)  # as a killed process does
    assert find_cassettes([tmp_path]) == [path]  # a cassette only the spool holds so far is found
    loaded = Cassette.load(path)
    assert loaded.interactions == [
        first,
        Interaction(cut.request, replace(cut.response, end=End.INTERRUPTED, duration=0.2), "t"),
    ]
    loaded.save()
    assert not spool.path.exists()
    assert len(Cassette.load(path)) == 2


def test_a_spool_cut_off_in_the_middle_of_a_record_keeps_what_came_before(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    one = Interaction(Request("GET", "/1"), Response(chunks=(Chunk(0.1, b"data: 1\n\n"),)), "t")
    spool = _spooled(path, (one, True), (one, True))
    spool.close(remove=False)
    raw = spool.path.read_bytes()
    spool.path.write_bytes(raw[:-3])  # the last record, the second stream's end, half written
    assert [i.response.end for i in Cassette.load(path)] == [End.COMPLETE, End.INTERRUPTED]


def test_a_spool_whose_removal_a_crash_cut_short_is_not_read_twice(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    one = Interaction(Request("GET", "/1"), Response(chunks=(Chunk(0.1, b"data: 1\n\n"),)), "t")
    spool = _spooled(path, (one, True))
    kept = spool.path.read_bytes()
    Cassette(path=path).append([one], spool=spool.path)  # a session's end: the cassette notes the spool, it goes
    spool.close(remove=False)
    spool.path.write_bytes(kept)  # as if the process had died between the two
    assert f'spool = "{spool.id}"' in path.read_text()
    assert len(Cassette.load(path)) == 1
    Cassette.load(path).append([])
    assert not spool.path.exists()
    assert len(Cassette.load(path)) == 1


@pytest.mark.parametrize("suffix", [".toml", ".msgpack"])
def test_a_save_names_the_spools_it_removes_so_that_one_a_crash_leaves_is_not_read_twice(
    tmp_path: Path, suffix: str
) -> None:
    # A save writes no interaction's spool note: a spool a crash had left, which the old file noted, was
    # then noted nowhere, and a crash before the save removed it again had it read twice.
    path = tmp_path / f"c{suffix}"
    one = Interaction(Request("GET", "/1"), Response(chunks=(Chunk(0.1, b"data: 1\n\n"),)), "t")
    spool = _spooled(path, (one, True))
    kept = spool.path.read_bytes()
    Cassette(path=path).append([one], spool=spool.path)
    spool.close(remove=False)
    spool.path.write_bytes(kept)  # a crash before its removal
    Cassette.load(path).save()  # a save takes it in
    spool.path.write_bytes(kept)  # and a crash before it removed it
    assert Cassette.load(path).interactions == [one]
    Cassette.load(path).append([])
    assert not spool.path.exists()
    assert Cassette.load(path).interactions == [one]


def test_a_killed_sessions_whole_answer_takes_the_place_of_every_copy_cut_short_wherever_each_is(
    tmp_path: Path,
) -> None:
    # Two copies cut short in the file, a third in another killed session's spool: the whole answer goes in
    # the first one's place, the others go, and the file written anew keeps what stays of it as it was.
    path = tmp_path / "c.toml"
    asked = Request("POST", "/v1/chat/completions", body=b"{}")
    cut = [
        Interaction(asked, Response(chunks=(Chunk(t, b"data: 1\n\n"),), end=End.CLIENT_GONE, duration=t), "t")
        for t in (0.1, 0.2, 0.3)
    ]
    other = Interaction(Request("GET", "/other"), Response(chunks=(Chunk(0.1, b"data: x\n\n"),)), "t")
    whole = Interaction(asked, Response(chunks=(Chunk(0.1, b"data: 1\n\n"), Chunk(0.2, b"data: [DONE]\n\n"))), "t")
    Cassette([cut[0], cut[1], other], path).save()
    spools = [_spooled(path, (cut[2], True)), SpoolWriter(path)]
    _spool(spools[1], 1, whole, replaces=cut[::-1])  # the first one's last, as a recorder writes them
    kept = []
    for spool in spools:
        spool.close(remove=False)
        kept.append(spool.path.read_bytes())
    assert Cassette.load(path).interactions == [whole, other]
    Cassette.load(path).append([])  # takes them in
    assert not any(spool.path.exists() for spool in spools)
    assert Cassette.load(path).interactions == [whole, other]
    for spool, raw in zip(spools, kept, strict=True):
        spool.path.write_bytes(raw)  # as if a crash had come before their removal
    assert Cassette.load(path).interactions == [whole, other]


def test_saving_under_another_name_leaves_the_spools_to_their_own_cassette(tmp_path: Path) -> None:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    one = Interaction(Request("GET", "/1"), Response(chunks=(Chunk(0.1, b"data: 1\n\n"),)), "t")
    Cassette([one], a).save()
    spool = _spooled(a, (replace(one, request=Request("GET", "/2")), True))
    spool.close(remove=False)
    copy = Cassette.load(a)
    copy.save(b)
    copy.append([replace(one, request=Request("GET", "/3"))])
    assert [i.request.path for i in Cassette.load(b)] == ["/1", "/2", "/3"]
    assert [i.request.path for i in Cassette.load(a)] == ["/1", "/2"]  # a keeps its spool
    assert spool.path.exists()
    Cassette.load(a).save(tmp_path / "." / "a.toml")  # the same file, spelled another way
    assert not spool.path.exists()
    assert [i.request.path for i in Cassette.load(a)] == ["/1", "/2"]


def test_another_cassettes_spools_are_not_taken_for_this_ones(tmp_path: Path) -> None:
    one = Interaction(Request("GET", "/v2"), Response(chunks=(Chunk(0.1, b"data: 1\n\n"),)), "t")
    other = tmp_path / "chat.toml.v2.toml"
    _spooled(other, (one, True)).close(remove=False)
    Cassette([], tmp_path / "chat.toml").save()
    assert Cassette.load(tmp_path / "chat.toml").interactions == []
    assert [i.request.path for i in Cassette.load(other)] == ["/v2"]


# --- files made to break a loader (issue 9): each gives one clear error, quickly and in little memory ----

_HEAD = 'format_version = 1\n\n[[interactions]]\n[interactions.request]\nmethod = "POST"\npath = "/p"\n'
_RESPONSE = "[interactions.response]\nstatus = 200\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("format_version = 1\nx = " + "[" * 500 + "]" * 500 + "\n", "values nest deeper than 32 levels"),
        ("format_version = 1\r\nx = [\r\n" + "1, [" * 40 + "]" * 40 + "\r\n]\r\n", "values nest deeper than 32 levels"),
        ("format_version = 1\n\x0c\nx = " + "[" * 40 + "]" * 40 + "\n", "values nest deeper than 32 levels"),
        ("format_version = 1\n" + ".".join(["a"] * 16_000) + " = 1\n", "keys nest deeper than 32 levels"),
        ("format_version = " + "9" * 5000 + "\n", "not a cassette TOML can hold"),
        (_HEAD + _RESPONSE + "duration = " + "9" * 400 + "\n", "response.duration must be a number of seconds under a year"),
        (_HEAD + _RESPONSE + "[[interactions.response.chunks]]\nt = " + "9" * 400 + '\ntext = "x"\n', "t must be a number of seconds under a year"),
        (_HEAD + _RESPONSE + '[interactions.response.headers]\n"x-a" = "1\\r\\nset-cookie: stolen"\n', "c.toml: interaction 1: response.headers: x-a has the control character '\\r' in its value, which HTTP forbids in a header (a line break would split it)"),
        (_HEAD + _RESPONSE + '[interactions.response.headers]\n"x-a" = "1\\u0001"\n', "response.headers: x-a has the control character '\\x01' in its value"),
        (_HEAD + _RESPONSE + '[interactions.response.headers]\n"x-a" = ["ok", "1\\u007f"]\n', "response.headers: x-a has the control character '\\x7f' in its value"),
        (_HEAD + _RESPONSE + '[interactions.response.headers]\n"x-a" = "\\u001b[31m"\n', "response.headers: x-a has the control character '\\x1b' in its value"),
        (_HEAD + '[interactions.request.headers]\n"x-a" = "\\u0000"\n' + _RESPONSE, "request.headers: x-a has the control character '\\x00' in its value"),
        (_HEAD + _RESPONSE + '[interactions.response.headers]\n"x\\u0000y" = "1"\n', "header name 'x\\x00y' is not a valid HTTP header name"),
        (_HEAD + _RESPONSE + '[interactions.response.headers]\n"x a" = "1"\n', "header name 'x a' is not a valid HTTP header name"),
        (_HEAD + _RESPONSE + '[interactions.response.headers]\n"x:a" = "1"\n', "header name 'x:a' is not a valid HTTP header name"),
        (_HEAD + _RESPONSE + '[interactions.response.headers]\n"" = "1"\n', "header name '' is not a valid HTTP header name"),
        (_HEAD + "[interactions.response]\nstatus = 101\n", "response.status 101 is not an HTTP status a response can end with"),
        (_HEAD + "[interactions.response]\nstatus = 204\n[[interactions.response.chunks]]\nt = 0\ntext = 'x'\n", "a 204 response has no body, but chunks are recorded"),
        (_HEAD.replace('"POST"', '"HEAD"') + _RESPONSE + "[[interactions.response.chunks]]\nt = 0\ntext = 'x'\n", "the answer to a HEAD request has no body"),
    ],
)  # fmt: skip
def test_a_file_made_to_break_the_loader_is_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    peak = _peak_memory_while(lambda: pytest.raises(CassetteFormatError, match=re.escape(message)), path)
    assert peak < 64 * 2**20


def _peak_memory_while(expecting: Any, path: Path) -> int:
    with peak_allocated() as peak, expecting():
        Cassette.load(path)
    return peak()


def test_a_request_body_nested_a_thousand_deep_loads_and_is_compared_as_bytes(tmp_path: Path) -> None:
    body = b"[" * 1000 + b"]" * 1000
    path = Cassette(
        [Interaction(Request("POST", "/p", body=body), Response(chunks=(Chunk(0.0, b"data: x\n\n"),)))]
    ).save(tmp_path / "c.toml")
    matcher = Matcher([Cassette.load(path)])
    assert matcher.find(Request("POST", "/p", body=body)).index == 1


def test_brackets_in_a_multi_line_string_after_an_escaped_quote_are_no_nesting(tmp_path: Path) -> None:
    # The nesting check took the escaped quote and the two after it for the string's end, and the brackets
    # after them for values nested 40 deep. (The comment keeps the file from the reader of what sse-tape
    # writes, which runs no such check.)
    text = '"""x' + "[" * 40
    path = tmp_path / "c.toml"
    path.write_text('format_version = 1\n# by hand\ndescription = """\n\\"""x' + "[" * 40 + '"""\n', encoding="utf-8")
    assert Cassette.load(path).description == text


_VALID = {suffix: Cassette([awkward_interaction()]) for suffix in (".toml", ".msgpack")}


@pytest.mark.fuzz
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), suffix=st.sampled_from([".toml", ".msgpack"]))
def test_any_bytes_load_as_a_cassette_or_one_clear_error(tmp_path: Path, data: st.DataObject, suffix: str) -> None:
    path = tmp_path / f"c{suffix}"
    valid = _VALID[suffix].save(path).read_bytes()
    # Random bytes, or a real cassette with a few bytes changed, cut or put in.
    raw = data.draw(
        st.binary(max_size=300)
        | st.builds(
            lambda at, junk, cut: valid[:at] + junk + valid[at + cut :],
            st.integers(0, len(valid)),
            st.binary(max_size=8),
            st.integers(0, 8),
        )
    )
    path.write_bytes(raw)
    try:
        loaded = Cassette.load(path)
    except CassetteError as exc:
        message = str(exc)
    else:
        assert all(isinstance(i, Interaction) for i in loaded)
        return
    assert message.startswith(str(path))
    assert "\n" not in message


@pytest.mark.parametrize("suffix", [".toml", ".msgpack"])
def test_settings_travel_with_the_cassette(tmp_path: Path, suffix: str) -> None:
    cassette = Cassette(
        [],
        tmp_path / f"c{suffix}",
        description="Answers any prompt.",
        match_on=(MatchOn.METHOD, MatchOn.PATH),
        ignore_body_fields=("user", "metadata.trace_id"),
    )
    cassette.append([Interaction(Request("GET", "/a"), Response(chunks=(Chunk(0.0, b"data: 1\n\n"),)))])
    cassette.append([Interaction(Request("GET", "/b"), Response())])  # an append keeps them
    loaded = Cassette.load(tmp_path / f"c{suffix}")
    assert (loaded.description, loaded.match_on, loaded.ignore_body_fields) == (
        "Answers any prompt.",
        (MatchOn.METHOD, MatchOn.PATH),
        ("user", "metadata.trace_id"),
    )
    assert len(loaded) == 2
    again = loaded.save(tmp_path / f"again{suffix}")
    assert Cassette.load(again).match_on == (MatchOn.METHOD, MatchOn.PATH)


def test_settings_are_written_for_people_to_read(tmp_path: Path) -> None:
    Cassette([], description="Greetings, for the demo.", match_on=(MatchOn.METHOD, MatchOn.PATH)).save(
        tmp_path / "c.toml"
    )
    assert (tmp_path / "c.toml").read_text() == (
        'format_version = 1\ndescription = "Greetings, for the demo."\nmatch = ["method", "path"]\ninteractions = []\n'
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ("match = []", r"match \[\]: give a list of matcher names"),
        ('match = ["method", ""]', r"match \['method', ''\]: give a list of matcher names"),
        ('match = "method"', r"match must be a list of strings"),
        ("ignore_body_fields = [1]", r"ignore_body_fields must be a list of strings"),
        ("description = 3", r"the cassette\.description must be a string"),
    ],
    ids=["no-matcher", "empty-name", "not-a-list", "not-strings", "description"],
)
def test_bad_settings_are_one_clear_error(tmp_path: Path, settings: str, message: str) -> None:
    (tmp_path / "bad.toml").write_text(f"format_version = 1\n{settings}\n")
    with pytest.raises(CassetteFormatError, match=rf"bad\.toml: {message}"):
        Cassette.load(tmp_path / "bad.toml")


def test_bundled_cassettes_say_they_answer_any_prompt(bundled: dict[str, Cassette]) -> None:
    for cassette in bundled.values():
        assert cassette.match_on == (MatchOn.METHOD, MatchOn.PATH)
        assert cassette.description is not None
        assert "Answers any prompt" in cassette.description


# --- the parsed-TOML cache: big cassettes are parsed once per content ---------------------------------


def chat_interaction(n: int) -> Interaction:
    chunks = [
        Chunk(0.1 + i / 100, f'data: {{"choices":[{{"delta":{{"content":" word{i}"}}}}]}}\n\n'.encode())
        for i in range(40)
    ]
    request = Request("POST", "/v1/chat/completions", body=f'{{"n": {n}}}'.encode())
    return Interaction(request, Response(chunks=(*chunks, Chunk(0.6, b"data: [DONE]\n\n"))))


def big_cassette(chats: int = 5) -> Cassette:
    """A TOML cassette big enough to be cached, with every kind of text and bytes in it."""
    return Cassette([awkward_interaction(), *map(chat_interaction, range(chats))], description="big")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own cache: the folder its entries go to."""
    monkeypatch.setenv("SSE_TAPE_TOML_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.msgpack"))


def typed(value: Any) -> Any:
    """A document with each value's type beside it (1, 1.0 and True are equal in Python; -0.0 and 0.0 too),
    and each table's keys in order."""
    if isinstance(value, dict):
        return [(k, typed(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [typed(v) for v in value]
    return type(value).__name__, repr(value)


def cached(raw: bytes) -> Any:
    """The document the cache holds for a file of these bytes, as `tomllib` gives it."""
    return toml.expand(toml_cache.get(toml_cache.key(raw)))


def test_a_big_toml_cassette_is_parsed_once_then_read_from_the_cache(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cassette = big_cassette()
    path = cassette.save(tmp_path / "big.toml")
    assert path.stat().st_size >= toml_cache.MIN_SIZE
    assert Cassette.load(path).interactions == cassette.interactions
    assert len(entries(cache)) == 1

    def parse(text: str) -> Any:
        raise AssertionError("parsed again")

    monkeypatch.setattr(tomllib, "loads", parse)
    again = Cassette.load(path)
    assert again.interactions == cassette.interactions
    assert again.description == "big"


def test_the_cache_is_kept_in_sse_tapes_cache_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSE_TAPE_TOML_CACHE")
    monkeypatch.setenv("SSE_TAPE_CACHE", str(tmp_path / "sse-tape"))
    path = big_cassette().save(tmp_path / "big.toml")
    Cassette.load(path)
    assert len(entries(tmp_path / "sse-tape" / "parsed-toml")) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.toml", "sse-tape"]  # nothing beside the cassette


def test_a_small_cassette_is_parsed_each_time_and_never_cached(tmp_path: Path, cache: Path) -> None:
    path = Cassette([awkward_interaction()]).save(tmp_path / "small.toml")
    Cassette.load(path)
    assert not cache.exists()


def test_a_changed_cassette_is_parsed_again(tmp_path: Path, cache: Path) -> None:
    path = big_cassette().save(tmp_path / "big.toml")
    Cassette.load(path)
    path.write_text(path.read_text().replace("t = 0.25", "t = 0.75", 1))  # edited by hand
    assert Cassette.load(path).interactions[0].response.chunks[0].t == 0.75
    bigger = big_cassette(6)
    bigger.save(path)
    assert Cassette.load(path).interactions == bigger.interactions
    assert len(entries(cache)) == 3


def test_an_entry_is_whole_when_msgpack_was_imported_afresh(
    tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pytester's in-process runs drop the modules a run imported: msgpack imported again makes new Python
    # classes (its ExtType) while its compiled packer, which cannot be loaded twice, keeps the old ones. An
    # entry must not depend on which: a column of chunks packed as a MessagePack extension became a plain
    # array, read back as chunks that are no tables.
    for name in [m for m in sys.modules if m == "msgpack" or m.startswith("msgpack.")]:
        monkeypatch.delitem(sys.modules, name)
    cassette = big_cassette()
    path = cassette.save(tmp_path / "big.toml")
    assert Cassette.load(path).interactions == cassette.interactions  # parsed; the entry written
    assert Cassette.load(path).interactions == cassette.interactions  # read from the entry
    assert typed(cached(path.read_bytes())) == typed(tomllib.loads(path.read_text()))


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],
        lambda data: data.replace(b" word17", b" WORD17", 1),  # unpacks, but is not what was parsed
        lambda data: b"",
        lambda data: os.urandom(len(data)),
    ],
    ids=["truncated", "one-word-changed", "empty", "random-bytes"],
)
def test_a_damaged_cache_entry_is_ignored_and_written_anew(tmp_path: Path, cache: Path, damage: Any) -> None:
    cassette = big_cassette()
    path = cassette.save(tmp_path / "big.toml")
    Cassette.load(path)
    [entry] = entries(cache)
    entry.write_bytes(damage(entry.read_bytes()))
    assert Cassette.load(path).interactions == cassette.interactions
    assert typed(cached(path.read_bytes())) == typed(tomllib.loads(path.read_text()))


def test_an_entry_under_another_cassettes_name_is_ignored(tmp_path: Path, cache: Path) -> None:
    one, other = big_cassette(5), big_cassette(6)
    one_path, other_path = one.save(tmp_path / "one.toml"), other.save(tmp_path / "other.toml")
    Cassette.load(one_path)
    [entry] = entries(cache)
    entry.rename(cache / f"{toml_cache.key(other_path.read_bytes())}.msgpack")
    assert Cassette.load(other_path).interactions == other.interactions


@pytest.mark.parametrize("where", ["off", "under-a-file"])
def test_a_cache_turned_off_or_that_cannot_be_written_is_no_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("SSE_TAPE_TOML_CACHE", "" if where == "off" else str(tmp_path / "a-file"))
    cassette = big_cassette()
    path = cassette.save(tmp_path / "big.toml")
    assert Cassette.load(path).interactions == Cassette.load(path).interactions == cassette.interactions
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "big.toml"]


# Every kind of TOML value, and strings written every way TOML allows.
HAND_WRITTEN = "\n".join(
    [
        "format_version = 1",
        "ints = [0, -1, 9_223_372_036_854_775_807, -9_223_372_036_854_775_808, 0xff, 0o17, 0b101]",
        "floats = [0.1, -0.0, 1e-300, 5e+22, inf, -inf, nan, 1_000.5]",
        "bools = [true, false]",
        'mixed = [1, 1.0, true, "1", [1], {a = 1}]',
        r'basic = "tab\there \u00e9 \U0001F600 \\ \" \r\n \u0000 \u001f \u007f"',
        r"literal = 'C:\no\escapes'",
        'multi = """',
        "line one \\",
        "    joined",
        r"CR:\r LF:",
        'end"""',
        "multi_literal = '''",
        "'quoted' \"twice\" \\n stays",
        "'''",
        "empty_list = []",
        "empty_table = {}",
        '"quoted key" = { "inner.dotted" = 1, nested = { deep = [[1, 2], ["a"]] } }',
        'dotted.key.here = "x"',
        "[table]",
        "x = 1",
        "[[aot]]",
        "y = 2",
        "[[aot]]",
        "[aot.sub]",
        "z = 3",
        "",
    ]
)


@pytest.mark.parametrize(
    "raw",
    [
        *(p.read_bytes() for p in bundled_cassettes()),
        HAND_WRITTEN.encode(),
        HAND_WRITTEN.replace("\n", "\r\n").encode(),  # CRLF line ends, which tomllib reads as LF in multi-line strings
    ],
    ids=[*(p.name for p in bundled_cassettes()), "every-toml-value", "every-toml-value-crlf"],
)
def test_the_cache_gives_back_what_tomllib_parsed_value_for_value(cache: Path, raw: bytes) -> None:
    doc = tomllib.loads(raw.decode())
    toml_cache.put(toml_cache.key(raw), doc)
    assert typed(cached(raw)) == typed(doc)


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    chunks=st.lists(st.tuples(st.floats(0, 1e5), st.text(max_size=60) | st.binary(max_size=30)), max_size=6),
    body=st.text(max_size=60),
    header=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x00"), max_size=20),
)
def test_the_cache_gives_back_what_tomllib_parsed_for_any_interaction(
    tmp_path: Path, cache: Path, chunks: list[tuple[float, str | bytes]], body: str, header: str
) -> None:
    interaction = Interaction(
        Request("POST", "/p", headers=(("x-h", header),), body=body.encode("utf-8", "surrogatepass")),
        Response(
            chunks=tuple(Chunk(t, d if isinstance(d, bytes) else d.encode("utf-8", "surrogatepass")) for t, d in chunks)
        ),
    )
    raw = Cassette([interaction]).save(tmp_path / "h.toml").read_bytes()
    doc = tomllib.loads(raw.decode())
    toml_cache.put(toml_cache.key(raw), doc)
    assert typed(cached(raw)) == typed(doc)


def test_chunks_as_sse_tape_writes_them_are_cached_as_columns_and_other_tables_as_they_are(cache: Path) -> None:
    chats = "\n".join(
        f'[[interactions]]\nrequest = {{method = "GET", path = "/{n}"}}\nresponse = {{status = 200, chunks = {chunks}}}'
        for n, chunks in enumerate(
            [
                "[{t = 0.5, text = 'data: x'}, {t = 1.5, text = 'data: y'}]",  # as sse-tape writes them
                "[{text = 'data: x', t = 0.5}]",  # the keys the other way round
                "[{t = 1, text = 'data: x'}]",  # an integer time
                "[{t = 0.5, text = 'data: x', note = 'n'}]",  # another key
                "[{t = 0.5, base64 = 'eA=='}]",
                "[{t = 0.5, text = 'x'}, 'not a table']",
                "[]",
            ]
        )
    )
    raw = f"format_version = 1\n{chats}\n".encode()
    doc = tomllib.loads(raw.decode())
    toml_cache.put(toml_cache.key(raw), doc)
    entry = toml_cache.get(toml_cache.key(raw))
    kept = [item["response"]["chunks"] for item in entry["interactions"]]
    assert kept[0] == toml.TextTables([0.5, 1.5], [b"data: x", b"data: y"])
    assert [type(chunks) for chunks in kept[1:]] == [list] * 6
    assert typed(toml.expand(entry)) == typed(doc)


@pytest.mark.parametrize("t", ["-0.5", "nan", "inf", "-inf", "1e300", "31536000.0"])
def test_a_chunk_time_out_of_range_is_refused_alike_when_its_cassette_is_cached(
    tmp_path: Path, cache: Path, t: str
) -> None:
    path = big_cassette().save(tmp_path / "big.toml")
    path.write_text(path.read_text().replace("t = 0.11\n", f"t = {t}\n", 1))  # interaction 2's second chunk
    messages = []
    for _ in range(2):  # parsed, then from the cache
        with pytest.raises(CassetteFormatError) as info:
            Cassette.load(path)
        messages.append(str(info.value))
    assert type(toml_cache.get(toml_cache.key(path.read_bytes()))["interactions"][1]["response"]["chunks"]) is (
        toml.TextTables
    )
    assert messages[0] == messages[1]
    assert "interaction 2: chunk 2" in messages[0]


def test_a_cached_cassette_with_inline_interactions_is_appended_to(tmp_path: Path, cache: Path) -> None:
    chunks = ", ".join(f"{{t = {n / 10}, text = 'data: {n}'}}" for n in range(1, 300))
    path = tmp_path / "c.toml"
    path.write_text(
        f'format_version = 1\ninteractions = [{{request = {{method = "GET", path = "/"}}, '
        f"response = {{status = 200, chunks = [{chunks}]}}}}]\n"
    )
    assert path.stat().st_size >= toml_cache.MIN_SIZE
    first = Cassette.load(path)
    append_interactions(path, [awkward_interaction()])
    assert Cassette.load(path).interactions == [*first.interactions, awkward_interaction()]


def test_dates_and_times_are_not_cached_but_parsed_each_time(cache: Path) -> None:
    raw = b"format_version = 1\nwhen = 2026-11-24T05:00:00Z\nday = 2026-11-24\nat = 05:00:00\n"
    toml_cache.put(toml_cache.key(raw), tomllib.loads(raw.decode()))
    assert toml_cache.get(toml_cache.key(raw)) is None


def test_the_least_recently_used_entries_go_when_the_cache_is_full(tmp_path: Path) -> None:
    now = time.time()
    for name, age in [("a.msgpack", 300), ("b.msgpack", 100), ("c.msgpack", 200), (".d.tmp", 7200), (".e.tmp", 10)]:
        (tmp_path / name).write_bytes(b"x" * 1000)
        os.utime(tmp_path / name, (now - age, now - age))
    toml_cache.prune(tmp_path, 2000)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".e.tmp", "b.msgpack", "c.msgpack"]


def _load_big(path: str) -> None:
    assert Cassette.load(path).interactions == big_cassette().interactions


def test_loads_racing_on_an_empty_cache_all_read_the_cassette(tmp_path: Path, cache: Path) -> None:
    path = big_cassette().save(tmp_path / "big.toml")
    context = multiprocessing.get_context("spawn")
    loaders = [context.Process(target=_load_big, args=(str(path),)) for _ in range(4)]
    for loader in loaders:
        loader.start()
    for loader in loaders:
        loader.join(60)
        assert loader.exitcode == 0
    assert len(entries(cache)) == 1
    assert not list(cache.glob("*.tmp"))
