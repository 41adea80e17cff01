"""The pytest plugin, run as users run it: generated test modules in a pytester session, with real clients."""

from __future__ import annotations

import json
import re
import socket
from fnmatch import fnmatch
from pathlib import Path

import pytest
from upstream import Upstream, chat_chunk

from sse_tape import Cassette, bundled_cassettes
from sse_tape.server import run_in_thread

ROOT = Path(__file__).resolve().parent.parent

# One streamed greeting, as the bundled chat cassette has it: any prompt gets it.
GREETING = "Hi there! How can I help you today?"
INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
"""
# A short stream with characters of two and three bytes, so that a cut can fall inside one.
TINY = """format_version = 1
match = ["method", "path"]

[[interactions]]
[interactions.request]
method = "POST"
path = "/v1/chat/completions"
body = '{"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": true}'
[interactions.response]
status = 200
end = "complete"
[interactions.response.headers]
content-type = "text/event-stream"
[[interactions.response.chunks]]
t = 0.01
text = '''
data: {"choices":[{"delta":{"content":"Hé"}}]}

'''
[[interactions.response.chunks]]
t = 0.02
text = '''
data: {"choices":[{"delta":{"content":" ✓"}}]}

data: [DONE]

'''
"""
TINY_TEXT = "Hé ✓"


def greeting_cassette(path: Path) -> Path:
    """The bundled chat cassette's first interaction (a streamed greeting), alone, at `path`."""
    bundled = Cassette.load(next(p for p in bundled_cassettes() if p.stem == "openai-chat"))
    path.parent.mkdir(parents=True, exist_ok=True)
    Cassette(interactions=[bundled.interactions[0]], match_on=bundled.match_on).save(path)
    return path


STREAMING_TEST = """
import pytest
from openai import OpenAI

@pytest.mark.sse_tape("greeting")
def test_stream(sse_tape):
    with OpenAI(base_url=sse_tape.openai_url, api_key="test", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="local-model", messages=[{"role": "user", "content": "Hello!"}], stream=True
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert text == "Hi there! How can I help you today?"
"""


@pytest.fixture
def tester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester folder with an ini file and the greeting cassette in `cassettes/`.

    Its sessions run in processes of their own, as users run pytest, with this plugin and pytest-asyncio
    only: the other plugins installed here take seconds to import.
    """
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeini(INI + "addopts = -p sse_tape.pytest_plugin -p pytest_asyncio.plugin\n")
    greeting_cassette(pytester.path / "cassettes" / "greeting.toml")
    return pytester


def test_the_openai_sdk_streams_a_cassette_through_the_fixture(
    tester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As installed: the plugin comes through its pytest11 entry point, and --strict-markers knows its marker.
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    tester.makeini(INI)
    tester.makepyfile(
        test_chat=STREAMING_TEST
        + """
def test_what_the_fixture_saw(sse_tape):
    pass

@pytest.mark.sse_tape("greeting")
def test_requests_and_played(sse_tape):
    with OpenAI(base_url=sse_tape.openai_url, api_key="test") as client:
        reply = client.chat.completions.create(model="local-model", messages=[{"role": "user", "content": "Hello!"}])
        assert reply.choices[0].message.content == "Hi there! How can I help you today?"
        assert [r.path for r in sse_tape.requests] == ["/v1/chat/completions"]
        assert b'"Hello!"' in sse_tape.requests[0].body
        assert [str(r) for r in sse_tape.played] == ["greeting.toml #1 (POST /v1/chat/completions)"]
        assert sse_tape.url.startswith("http://127.0.0.1:") and sse_tape.openai_url == sse_tape.url + "/v1"
        assert [e.kind for e in sse_tape.journal][:2] == ["received", "matched"]
"""
    )
    result = tester.runpytest_subprocess("--strict-markers")
    # The unmarked test has no cassette of its own: it says where one is expected and how to record it.
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*no cassette *cassettes/test_chat/test_what_the_fixture_saw.toml: record it with --sse-tape-record=once*"]
    )
    result.stdout.fnmatch_lines(["sse-tape: seed *(--sse-tape-seed=* repeats it); record mode none"])


def test_an_unmatched_request_fails_the_test_with_the_closest_recordings(tester: pytest.Pytester) -> None:
    tester.makepyfile(
        """
import pytest
from openai import OpenAI, NotFoundError

@pytest.mark.sse_tape("greeting", match_on="method,path,body")
def test_swallows_the_404(sse_tape):
    with OpenAI(base_url=sse_tape.openai_url, api_key="test", max_retries=0) as client:
        try:
            client.chat.completions.create(model="local-model", messages=[{"role": "user", "content": "Bonjour"}])
        except NotFoundError:
            pass  # a client that hides the error: the test still fails, and says why
"""
    )
    result = tester.runpytest_subprocess()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "sse-tape: request 1 (POST /v1/chat/completions) matched no recording: no recorded interaction matches "
            "POST /v1/chat/completions; closest: greeting.toml #1 (POST /v1/chat/completions): "
            'body.messages[[]0[]].content is "Bonjour", recorded "Hello!"*',
            # What to do about it, in one line, as vcrpy and pytest_httpx say it.
            "to record what no recording answered, re-run with --sse-tape-record=new_episodes --sse-tape-upstream URL",
        ]
    )


def test_a_miss_in_a_failed_test_is_told_once_with_how_to_record_it(tester: pytest.Pytester) -> None:
    # An upstream in the ini file: the hint needs no URL. Replay does not reach it.
    tester.makeini(INI + "addopts = -p sse_tape.pytest_plugin\nsse_tape_upstream = http://127.0.0.1:9\n")
    greeting_cassette(tester.path / "cassettes" / "library" / "greeting.toml")
    tester.makepyfile(
        test_miss="""
import pytest
from openai import OpenAI

def ask(tape):
    with OpenAI(base_url=tape.openai_url, api_key="test", max_retries=0) as client:
        client.chat.completions.create(model="local-model", messages=[{"role": "user", "content": "Bonjour"}])

@pytest.mark.sse_tape("greeting", match_on="method,path,body")
def test_raises(sse_tape):
    ask(sse_tape)

# Its own cassette (test_miss/test_own.toml) is not there yet: once records it.
@pytest.mark.sse_tape("library/", match_on="method,path,body", allow_unused=True)
def test_own(sse_tape):
    ask(sse_tape)
"""
    )
    result = tester.runpytest_subprocess()
    result.assert_outcomes(failed=2)
    output = result.stdout.str()
    sections = re.findall(r"-+ sse-tape -+\n(.*?)\n(?:_{3,}|={3,})", output, re.DOTALL)
    assert len(sections) == 2
    for section, mode in zip(sections, ["new_episodes", "once"], strict=True):
        # The closest recording and how it differs, once; the journal's step points at it.
        assert section.count('body.messages[0].content is "Bonjour", recorded "Hello!"') == 1, section
        assert f"to record what no recording answered, re-run with --sse-tape-record={mode}\n" in section
        assert "-> 404: request 1 matched no recording (above)" in section


def test_recordings_never_played_fail_at_teardown_unless_allowed(tester: pytest.Pytester) -> None:
    tester.makepyfile(
        """
import pytest
from openai import OpenAI

@pytest.mark.sse_tape("greeting")
def test_plays_nothing(sse_tape):
    pass

@pytest.mark.sse_tape("greeting", allow_unused=True)
def test_may_play_nothing(sse_tape):
    assert [str(r) for r in sse_tape.unplayed()] == ["greeting.toml #1 (POST /v1/chat/completions)"]

def ask(tape):
    with OpenAI(base_url=tape.openai_url, api_key="test", max_retries=0) as client:
        return client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello!"}])

@pytest.mark.sse_tape("greeting", faults=["error:1,path=/v1/embeddings"])
def test_a_marked_fault_that_never_acts(sse_tape):
    ask(sse_tape)

@pytest.mark.sse_tape("greeting")
def test_an_added_fault_that_never_acts(sse_tape):
    sse_tape.add_faults("status:code=500,path=/v1/embeddings")
    ask(sse_tape)
"""
    )
    result = tester.runpytest_subprocess()
    result.assert_outcomes(passed=4, errors=3)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_plays_nothing*",
            "*1 recording never played: greeting.toml #1 (POST /v1/chat/completions)*allow_unused=True*",
            "*ERROR at teardown of test_a_marked_fault_that_never_acts*",
            "*fault 'error:1,path=/v1/embeddings' was never injected*",
            "*ERROR at teardown of test_an_added_fault_that_never_acts*",
            "*fault 'status:code=500,path=/v1/embeddings' was never injected*",
        ]
    )


def test_a_fault_from_the_command_line_fails_a_streaming_test_and_its_report_names_fault_and_seed(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(test_chat=STREAMING_TEST)
    tester.runpytest_subprocess().assert_outcomes(passed=1)
    result = tester.runpytest_subprocess("--sse-tape-fault", "error:3", "--sse-tape-seed", "4242")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "sse-tape: seed 4242 (--sse-tape-seed=4242 repeats it); record mode none; faults error:3",
            "*openai.APIError: injected by sse-tape*",
            "*- sse-tape -*",
            "seed 4242 (--sse-tape-seed=4242 repeats it); faults: error:3",
            "injected: error:3 x1",
        ]
    )


def test_a_bad_fault_on_the_command_line_stops_the_run_with_one_line(tester: pytest.Pytester) -> None:
    tester.makepyfile(test_chat=STREAMING_TEST)
    result = tester.runpytest_subprocess("--sse-tape-fault", "eror:3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*sse-tape: fault 'eror:3': unknown fault 'eror' (did you mean 'error'?); faults are status,*"]
    )
    result = tester.runpytest_subprocess("--sse-tape-record=once", "--sse-tape-upstream", "localhost:8000")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*sse-tape upstream 'localhost:8000': give a base URL, such as http://127.0.0.1:8000"])
    result = tester.runpytest_subprocess("--sse-tape-record=once", "--sse-tape-gauntlet")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--sse-tape-gauntlet replays what is recorded: record first, then run the gauntlet"])


NO_UPSTREAM = (
    "sse-tape: --sse-tape-record=once records from an upstream: give --sse-tape-upstream URL "
    "(or the ini's sse_tape_upstream), or a model (--sse-tape-model MODEL, or model= in {})"
)


@pytest.mark.parametrize("xdist", [(), ("-p", "xdist.plugin", "-n", "2")], ids=["alone", "xdist"])
def test_recording_with_nothing_to_record_from_stops_the_run_at_its_start(
    tester: pytest.Pytester, xdist: tuple[str, ...]
) -> None:
    tester.makepyfile(test_chat=STREAMING_TEST + "\n\ndef test_own(sse_tape):\n    pass\n")
    result = tester.runpytest_subprocess("--sse-tape-record=once", *xdist)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.lines == ["ERROR: " + NO_UPSTREAM.format("a test's marker"), ""]  # once, not per test
    assert "INTERNALERROR" not in result.stdout.str()


def test_recording_with_no_upstream_records_the_tests_a_model_answers_and_fails_the_others(
    tester: pytest.Pytester, tiny_model_path: Path
) -> None:
    tester.makepyfile(
        test_chat=STREAMING_TEST
        + f"""

@pytest.mark.sse_tape(model={str(tiny_model_path)!r})
def test_synthesized(sse_tape):
    with OpenAI(base_url=sse_tape.openai_url, api_key="test", max_retries=0) as client:
        client.chat.completions.create(model="tiny", messages=[{{"role": "user", "content": "Hi"}}], max_tokens=4)
"""
    )
    result = tester.runpytest_subprocess("--sse-tape-record=once")
    result.assert_outcomes(passed=1, errors=1)
    line = NO_UPSTREAM.format("the test's marker")
    assert result.stdout.lines.count(line) == 1  # its error, with no traceback
    assert len(Cassette.load(tester.path / "cassettes" / "test_chat" / "test_synthesized.toml").interactions) == 1


def test_a_mistake_in_a_marker_fails_its_test_alone_saying_it_once(tester: pytest.Pytester) -> None:
    tester.makepyfile(
        """
import pytest

@pytest.mark.sse_tape("greeting", fault=["error:5"])
def test_typo(sse_tape):
    pass

@pytest.mark.sse_tape("greeting", survives=["430"])
def test_unknown_promise(sse_tape):
    pass

@pytest.mark.sse_tape("greeting", split="evry")
def test_bad_split(sse_tape):
    pass

@pytest.mark.sse_tape("greeting", pace="x0")
def test_bad_pace(sse_tape):
    pass

@pytest.mark.sse_tape("greeting", allow_unused=True)
def test_fine(sse_tape):
    pass
"""
    )
    result = tester.runpytest_subprocess()
    result.assert_outcomes(passed=1, errors=4)
    output = "\n".join(result.outlines)
    for line in [
        "sse-tape: @pytest.mark.sse_tape got an unexpected keyword argument 'fault'; it takes cassette names, then *",
        "sse-tape: @pytest.mark.sse_tape: survives [[]'430']: the gauntlet's faults are 429, 500, error, reset, *",
        "sse-tape: @pytest.mark.sse_tape: split='evry': give 'every' or a number of offsets",
        "sse-tape: pace 'x0'*",
    ]:
        result.stdout.fnmatch_lines([line])
        assert sum(fnmatch(seen, line) for seen in output.splitlines()) == 1  # said once, not twice over
    assert "During handling of the above exception" not in output  # nor once more as the cause of that line


def test_a_cassette_name_cannot_leave_the_cassette_folder(tester: pytest.Pytester) -> None:
    tester.makepyfile(
        """
import pytest

@pytest.mark.sse_tape("../../etc/passwd")
def test_escape(sse_tape):
    pass
"""
    )
    result = tester.runpytest_subprocess()
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*cassette '../../etc/passwd' is outside the cassette folder*"])


def test_env_points_code_that_builds_its_own_client_at_the_mock(tester: pytest.Pytester) -> None:
    tester.makepyfile(
        """
import os
import pytest
from openai import OpenAI

@pytest.mark.sse_tape("greeting", env=True)
def test_own_client(sse_tape):
    assert os.environ["OPENAI_BASE_URL"] == sse_tape.openai_url
    with OpenAI() as client:
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello!"}])
    assert reply.choices[0].message.content == "Hi there! How can I help you today?"
"""
    )
    tester.runpytest_subprocess().assert_outcomes(passed=1)


def test_env_points_an_anthropic_client_at_the_mock_too(tester: pytest.Pytester) -> None:
    bundled = Cassette.load(next(p for p in bundled_cassettes() if p.stem == "anthropic-messages"))
    Cassette([bundled.interactions[0]], match_on=bundled.match_on).save(tester.path / "cassettes" / "claude.toml")
    tester.makepyfile(
        """
import os
import pytest
from anthropic import Anthropic

@pytest.mark.sse_tape("claude", env=True, faults=["fragment:size=3"])
def test_own_client(sse_tape):
    assert os.environ["ANTHROPIC_BASE_URL"] == sse_tape.url
    with Anthropic(max_retries=0) as client:
        hello = [{"role": "user", "content": "Hello!"}]
        with client.messages.stream(model="claude-sonnet-4-6", max_tokens=99, messages=hello) as stream:
            assert stream.get_final_text() == "Hello! How can I help you today?"
"""
    )
    tester.runpytest_subprocess().assert_outcomes(passed=1)


def test_the_gemini_sdk_streams_through_the_fixture_and_meets_its_faults(tester: pytest.Pytester) -> None:
    # Nothing in the plugin is an API's own: the Gemini API's path, stream and errors come as they are.
    gemini = Cassette.load(next(p for p in bundled_cassettes() if p.stem == "gemini"))
    Cassette([gemini.interactions[0]], match_on=gemini.match_on).save(tester.path / "cassettes" / "gemini.toml")
    tester.makepyfile(
        """
import httpx
import pytest
from google import genai
from google.genai import errors, types

def client(sse_tape):
    http = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))
    options = types.HttpOptions(base_url=sse_tape.url, api_version="v1beta", httpx_client=http)
    return genai.Client(api_key="test", http_options=options)

@pytest.mark.sse_tape("gemini")
def test_stream(sse_tape):
    with client(sse_tape) as gemini:
        text = "".join(c.text for c in gemini.models.generate_content_stream(model="gemini-2.5-flash", contents="Hi"))
    assert text == "Hello! How can I help you today?"
    assert sse_tape.requests[0].path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert sse_tape.requests[0].query == "alt=sse"

@pytest.mark.sse_tape("gemini", faults=["error:1,message=boom"])
def test_fault(sse_tape):
    got = []
    with client(sse_tape) as gemini, pytest.raises(errors.ServerError, match="boom"):
        for chunk in gemini.models.generate_content_stream(model="gemini-2.5-flash", contents="Hi"):
            got.append(chunk.text)
    assert got == ["Hello"]
"""
    )
    tester.runpytest_subprocess().assert_outcomes(passed=2)


def test_the_async_twin_serves_asyncopenai_in_the_tests_own_loop(tester: pytest.Pytester) -> None:
    tester.makepyfile(
        """
import asyncio
import pytest
from openai import AsyncOpenAI

@pytest.mark.asyncio
@pytest.mark.sse_tape("greeting", faults=["error:3"])
async def test_async(async_sse_tape):
    async with AsyncOpenAI(base_url=async_sse_tape.openai_url, api_key="test", max_retries=0) as client:
        stream = await client.chat.completions.create(
            model="local-model", messages=[{"role": "user", "content": "Hello!"}], stream=True
        )
        got = []
        with pytest.raises(Exception, match="injected by sse-tape"):
            async for chunk in stream:
                got.append(chunk.choices[0].delta.content or "")
        assert "".join(got) == "Hi there"
    await async_sse_tape.idle()  # the server notes the end a moment after the client has it
    assert [e.kind for e in async_sse_tape.journal][-3:] == ["fault", "matched", "ended"]

@pytest.mark.sse_tape("greeting")
def test_the_async_one_in_a_sync_test_fails_at_once(async_sse_tape):
    pass

@pytest.mark.sse_tape("greeting")
async def test_the_threaded_one_in_an_async_test(sse_tape):
    async with AsyncOpenAI(base_url=sse_tape.openai_url, api_key="test") as client:
        reply = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello!"}])
        assert reply.choices[0].message.content == "Hi there! How can I help you today?"
"""
    )
    result = tester.runpytest_subprocess("-o", "asyncio_mode=auto")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*sse-tape: async_sse_tape serves async tests; a test that is not async takes sse_tape"]
    )


def test_a_module_server_starts_over_before_each_test(tester: pytest.Pytester) -> None:
    greeting_cassette(tester.path / "cassettes" / "test_shared.toml")
    tester.makepyfile(
        test_shared="""
import pytest
from openai import OpenAI

def ask(tape):
    with OpenAI(base_url=tape.openai_url, api_key="test", max_retries=0) as client:
        return client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello!"}])

URLS = set()

def test_first(sse_tape_module):
    URLS.add(sse_tape_module.url)
    sse_tape_module.add_faults("status:429")
    with pytest.raises(Exception, match="429"):
        ask(sse_tape_module)
    assert len(sse_tape_module.played) == 1

def test_second(sse_tape_module):
    URLS.add(sse_tape_module.url)
    assert sse_tape_module.played == [] and sse_tape_module.requests == []
    assert ask(sse_tape_module).choices[0].message.content.startswith("Hi there")
    assert len(URLS) == 1

@pytest.mark.sse_tape(faults=["status:503"])
def test_its_own_faults(sse_tape_module):
    with pytest.raises(Exception, match="503"):
        ask(sse_tape_module)

@pytest.mark.sse_tape("other", pace="recorded")
def test_its_own_cassette(sse_tape_module):
    pass
"""
    )
    result = tester.runpytest_subprocess()
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(
        ["*sse-tape: a shared server serves as its scope's marker says: put cassettes, pace there (a test's own*"]
    )


def test_split_every_runs_one_case_per_offset_and_catches_a_naive_parser(tester: pytest.Pytester) -> None:
    (tester.path / "cassettes" / "tiny.toml").write_text(TINY, encoding="utf-8")
    size = len(Cassette.load(tester.path / "cassettes" / "tiny.toml").interactions[0].response.body)
    tester.makepyfile(
        f"""
import json
import httpx
import pytest
from httpx_sse import connect_sse
from openai import OpenAI

BODY = {{"model": "m", "messages": [{{"role": "user", "content": "Hi"}}], "stream": True}}

@pytest.fixture(scope="module")
def http():
    # One client for every case: making one costs more than a case does.
    with httpx.Client() as client:
        yield client

@pytest.mark.sse_tape("tiny", split="every")
def test_httpx_sse(sse_tape, http):
    with connect_sse(http, "POST", sse_tape.openai_url + "/chat/completions", json=BODY) as source:
        datas = [e.data for e in source.iter_sse()]
    text = "".join(json.loads(d)["choices"][0]["delta"]["content"] for d in datas if d != "[DONE]")
    assert text == {TINY_TEXT!r}

@pytest.mark.sse_tape("tiny", split="every")
def test_openai_sdk(sse_tape, http):
    client = OpenAI(base_url=sse_tape.openai_url, api_key="test", max_retries=0, http_client=http)
    stream = client.chat.completions.create(model="m", messages=[{{"role": "user", "content": "Hi"}}], stream=True)
    assert "".join(chunk.choices[0].delta.content for chunk in stream) == {TINY_TEXT!r}

@pytest.mark.sse_tape("tiny", split="every")
def test_naive(sse_tape, http):
    # Each read taken as whole events, and decoded on its own: what a parser written in a hurry does.
    parts = []
    with http.stream("POST", sse_tape.openai_url + "/chat/completions", json=BODY) as response:
        for read in response.iter_raw():
            for block in read.decode("utf-8").split("\\n\\n"):
                if block.startswith("data: {{"):
                    parts.append(json.loads(block[6:])["choices"][0]["delta"]["content"])
    assert "".join(parts) == {TINY_TEXT!r}
"""
    )
    result = tester.runpytest_subprocess("-v")
    outcomes: dict[str, dict[int, str]] = {"test_httpx_sse": {}, "test_openai_sdk": {}, "test_naive": {}}
    for line in result.outlines:
        if m := re.match(r"test_\w+\.py::(test_\w+)\[sse-tape@split=(\d+)\] (PASSED|FAILED)", line):
            outcomes[m[1]][int(m[2])] = m[3]
    offsets = list(range(1, size))  # a case for each byte offset inside the stream
    assert [sorted(cases) for cases in outcomes.values()] == [offsets] * 3
    assert set(outcomes["test_httpx_sse"].values()) == set(outcomes["test_openai_sdk"].values()) == {"PASSED"}
    naive = outcomes["test_naive"]
    assert set(naive.values()) == {"PASSED", "FAILED"}  # cut between events it copes; cut inside one it breaks
    # Among the cuts it breaks on, one inside the two-byte é, which a read decoded on its own cannot hold.
    inside_e = TINY.encode().split(b"\ntext = '''\n")[1].index("é".encode()) + 1
    assert naive[inside_e] == "FAILED"


def test_the_gauntlet_reports_each_test_under_each_fault_and_fails_only_on_promises(
    tester: pytest.Pytester, tmp_path: Path
) -> None:
    tester.makepyfile(
        test_chat=STREAMING_TEST.replace("max_retries=0", "max_retries=2")
        + """

@pytest.mark.sse_tape("greeting", survives=["429", "500", "crlf"])
def test_promises(sse_tape):
    with OpenAI(base_url=sse_tape.openai_url, api_key="test", max_retries=2) as client:
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello!"}], stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices).startswith("Hi there")
"""
    )
    report = tmp_path / "gauntlet.json"
    result = tester.runpytest_subprocess("--sse-tape-gauntlet", "--sse-tape-gauntlet-report", str(report))
    # Every promise is kept: the run passes, and what no test promised is only reported.
    assert result.ret == 0
    names = ["as-recorded", "429", "500", "error", "reset", "stall", "fragment", "crlf", "no-done"]
    result.stdout.fnmatch_lines(
        [
            "*sse-tape gauntlet (seed *)*",
            "test *" + "  ".join(names),
            "test_chat.py::test_stream * ok *ok*ok*x*x*ok*ok*ok*ok*",
            "test_chat.py::test_promises * ok *ok*ok*x*x*ok*ok*ok*ok*",
            "*test_chat.py::test_stream under error: *injected by sse-tape*",
        ]
    )
    document = json.loads(report.read_text())
    assert set(document["tests"]) == {"test_chat.py::test_stream", "test_chat.py::test_promises"}
    promises = document["tests"]["test_chat.py::test_promises"]
    assert list(promises) == names
    assert promises["429"] == {"survived": True, "promised": True, "reason": None}
    assert promises["reset"]["survived"] is False
    assert promises["reset"]["promised"] is False
    # A test that breaks a promise fails the run, and the table says FAIL.
    tester.makepyfile(test_chat=STREAMING_TEST.replace('"greeting"', '"greeting", survives=["error"]'))
    broken = tester.runpytest_subprocess("--sse-tape-gauntlet")
    assert broken.ret == pytest.ExitCode.TESTS_FAILED
    broken.stdout.fnmatch_lines(["test_chat.py::test_stream * ok *FAIL*"])


def test_under_xdist_the_workers_take_the_seed_and_the_controller_shows_the_gauntlet(
    tester: pytest.Pytester, tmp_path: Path
) -> None:
    tester.makepyfile(
        test_one=STREAMING_TEST,
        test_two=STREAMING_TEST.replace("def test_stream", "def test_other").replace(
            'assert text == "Hi there! How can I help you today?"', "assert False, text"
        ),
    )
    report = tmp_path / "gauntlet.json"
    gauntlet = ("--sse-tape-gauntlet-report", str(report), "--sse-tape-seed", "777")
    result = tester.runpytest_subprocess("-p", "xdist.plugin", "-n", "2", *gauntlet)
    result.stdout.fnmatch_lines(
        [
            "sse-tape: seed 777 *",
            "*seed 777 (--sse-tape-seed=777 repeats it); faults: none",  # a failure's section, from a worker
            "*sse-tape gauntlet (seed 777)*",
        ]
    )
    document = json.loads(report.read_text())
    assert document["seed"] == 777
    assert set(document["tests"]) == {"test_one.py::test_stream", "test_two.py::test_other"}
    assert len(document["tests"]["test_one.py::test_stream"]) == 9  # as recorded and the eight faults
    assert document["tests"]["test_two.py::test_other"]["as-recorded"]["survived"] is False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_record_once_from_a_real_upstream_then_replay_without_it(tester: pytest.Pytester, llama_server: str) -> None:
    pytester = tester
    pytester.makepyfile(
        test_recorded="""
import pytest
from openai import OpenAI

def test_tiny_model(sse_tape):
    with OpenAI(base_url=sse_tape.openai_url, api_key="test", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Say something"}], max_tokens=8, seed=1,
            temperature=0, stream=True,
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert text
        with open("answers.txt", "a", encoding="utf-8") as answers:
            answers.write(repr(text) + "\\n")
"""
    )
    cassette = pytester.path / "cassettes" / "test_recorded" / "test_tiny_model.toml"
    pytester.runpytest_subprocess("--sse-tape-record=once", "--sse-tape-upstream", llama_server).assert_outcomes(
        passed=1
    )
    recorded = Cassette.load(cassette)
    assert len(recorded.interactions) == 1
    assert recorded.interactions[0].request.path == "/v1/chat/completions"
    # Offline: no upstream at all (the default mode replays), then once with a dead one (the cassette exists).
    pytester.runpytest_subprocess().assert_outcomes(passed=1)
    dead = f"http://127.0.0.1:{free_port()}"
    pytester.runpytest_subprocess("--sse-tape-record=once", "--sse-tape-upstream", dead).assert_outcomes(passed=1)
    answers = (pytester.path / "answers.txt").read_text(encoding="utf-8").splitlines()
    assert len(answers) == 3
    assert len(set(answers)) == 1  # the model's answer, then the same twice from the tape
    assert len(Cassette.load(cassette).interactions) == 1
    # all adds what it records to the cassette (as VCR.py's mode does); rewrite makes it anew.
    record = ("--sse-tape-upstream", llama_server, "--sse-tape-record")
    pytester.runpytest_subprocess(*record, "all").assert_outcomes(passed=1)
    assert len(Cassette.load(cassette).interactions) == 2
    pytester.runpytest_subprocess(*record, "rewrite").assert_outcomes(passed=1)
    assert len(Cassette.load(cassette).interactions) == 1
    pytester.runpytest_subprocess().assert_outcomes(passed=1)


def test_a_model_in_the_marker_answers_what_no_recording_does(tester: pytest.Pytester, tiny_model_path: Path) -> None:
    tester.makepyfile(
        f"""
import pytest
from openai import OpenAI

@pytest.mark.sse_tape(model={str(tiny_model_path)!r})
def test_synthesized(sse_tape):
    with OpenAI(base_url=sse_tape.openai_url, api_key="test", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="tiny", messages=[{{"role": "user", "content": "Hi"}}], max_tokens=6, stream=True
        )
        chunks = list(stream)
    assert chunks[-1].choices[0].finish_reason == "length"
    assert [e.kind for e in sse_tape.journal if e.kind in ("missed", "synthesized")] == ["synthesized"]
"""
    )
    tester.runpytest_subprocess().assert_outcomes(passed=1)


def test_the_cassette_folder_comes_from_the_ini_file(tester: pytest.Pytester) -> None:
    greeting_cassette(tester.path / "recorded" / "test_elsewhere" / "test_default_name.toml")
    tester.makeini(INI + "addopts = -p sse_tape.pytest_plugin\nsse_tape_cassette_dir = recorded\n")
    tester.mkpydir("sub").joinpath("test_elsewhere.py").write_text(
        """
from openai import OpenAI

def test_default_name(sse_tape):
    with OpenAI(base_url=sse_tape.openai_url, api_key="test", max_retries=0) as client:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello!"}])
    assert [r.cassette for r in sse_tape.played] == ["test_default_name.toml"]
""",
        encoding="utf-8",
    )
    tester.runpytest_subprocess().assert_outcomes(passed=1)


def test_the_examples_in_docs_pytest_md_pass(tester: pytest.Pytester) -> None:
    docs = (ROOT / "docs" / "pytest.md").read_text(encoding="utf-8")
    examples = re.findall(r"<!-- docs-test: (\S+) -->\n```python\n(.*?)\n```", docs, re.DOTALL)
    assert [name for name, _ in examples] == ["test_chat.py", "test_agent.py", "test_async.py"]
    cassettes = tester.path / "tests" / "cassettes"
    cassettes.mkdir(parents=True)
    (cassettes / "chat.toml").write_bytes(next(p for p in bundled_cassettes() if p.stem == "openai-chat").read_bytes())
    greeting_cassette(cassettes / "test_chat" / "test_streams_the_answer.toml")
    for name, code in examples:
        (tester.path / "tests" / name).write_text(code, encoding="utf-8")
    tester.runpytest_subprocess("tests").assert_outcomes(passed=5)


CHAOS = """
import contextlib

import openai
import pytest

ASK = {"model": "up", "messages": [{"role": "user", "content": "hi"}], "stream": True, "extra_query": {"gap": "0.05"}}


def words(client, failure=None):
    got = []
    with pytest.raises(failure) if failure else contextlib.nullcontext():
        for chunk in client.chat.completions.create(**ASK):
            got.append(chunk.choices[0].delta.content)
    return got
"""


def test_recording_a_test_meets_its_faults_from_the_upstream_and_replays_either_way(tester: pytest.Pytester) -> None:
    tester.makepyfile(
        test_chaos=CHAOS
        + """

@pytest.mark.sse_tape(faults=["error:at=2,message=gone"])
def test_error(sse_tape):
    with openai.OpenAI(base_url=sse_tape.openai_url, api_key="test", max_retries=0) as client:
        assert words(client, openai.APIError) == [" w0", " w1"]


@pytest.mark.asyncio
@pytest.mark.sse_tape(faults=["disconnect:after=1"])
async def test_disconnect(async_sse_tape):
    async with openai.AsyncOpenAI(base_url=async_sse_tape.openai_url, api_key="test", max_retries=0) as client:
        got = []
        with pytest.raises(openai.APIConnectionError):
            async for chunk in await client.chat.completions.create(**ASK):
                got.append(chunk.choices[0].delta.content)
    assert got == [" w0"]
"""
    )
    with run_in_thread(Upstream()) as upstream:
        record = ("--sse-tape-record=once", "--sse-tape-upstream", upstream.url)
        tester.runpytest_subprocess(*record).assert_outcomes(passed=2)
        assert upstream.disconnects == 0  # each upstream read to its end, though its test's client was cut off
    whole = b"".join(chat_chunk(n) for n in range(5)) + b"data: [DONE]\n\n"
    for name, note in [("test_error", "error:at=2,message=gone"), ("test_disconnect", "disconnect:after=1")]:
        [interaction] = Cassette.load(tester.path / "cassettes" / "test_chaos" / f"{name}.toml").interactions
        assert interaction.response.body == whole
        assert [n.fault for n in interaction.injected] == [note]
    tester.runpytest_subprocess().assert_outcomes(passed=2)  # offline, the marker's faults act on the replays
    tester.makepyfile(
        test_again=CHAOS
        + """

@pytest.mark.sse_tape("test_chaos/test_error", recorded_faults=True)
def test_what_the_client_got(sse_tape):
    with openai.OpenAI(base_url=sse_tape.openai_url, api_key="test", max_retries=0) as client:
        assert words(client, openai.APIError) == [" w0", " w1"]


@pytest.mark.sse_tape("test_chaos/test_error")
def test_what_the_upstream_sent(sse_tape):
    with openai.OpenAI(base_url=sse_tape.openai_url, api_key="test", max_retries=0) as client:
        assert words(client) == [" w0", " w1", " w2", " w3", " w4"]
"""
    )
    tester.runpytest_subprocess("test_again.py").assert_outcomes(passed=2)


def test_a_test_that_names_only_folders_records_into_its_own_cassette_and_replays_it(tester: pytest.Pytester) -> None:
    # The folder is not there yet when the test first records: its name, `library/`, is still a folder's.
    tester.makepyfile(
        test_library=CHAOS
        + """

@pytest.mark.sse_tape("library/", allow_unused=True)
def test_asks(sse_tape):
    with openai.OpenAI(base_url=sse_tape.openai_url, api_key="test", max_retries=0) as client:
        assert words(client) == [" w0", " w1", " w2", " w3", " w4"]
"""
    )
    with run_in_thread(Upstream()) as upstream:
        record = ("--sse-tape-record=once", "--sse-tape-upstream", upstream.url)
        tester.runpytest_subprocess(*record).assert_outcomes(passed=1)
    own = tester.path / "cassettes" / "test_library" / "test_asks.toml"
    assert [i.request.path for i in Cassette.load(own).interactions] == ["/v1/chat/completions"]
    assert not (tester.path / "cassettes" / "library").exists()
    # Offline, with the folder there and holding a cassette for another path: the test's own cassette answers.
    library = tester.path / "cassettes" / "library" / "completions.toml"
    library.parent.mkdir()
    library.write_text(TINY.replace("/v1/chat/completions", "/v1/completions"), encoding="utf-8")
    tester.runpytest_subprocess().assert_outcomes(passed=1)


def test_a_tests_own_allow_unused_rules_its_faults_on_a_shared_server(tester: pytest.Pytester) -> None:
    greeting_cassette(tester.path / "cassettes" / "test_shared.toml")
    tester.makepyfile(
        test_shared="""
import pytest
from openai import OpenAI

pytestmark = pytest.mark.sse_tape(allow_unused=True)

def ask(tape):
    with OpenAI(base_url=tape.openai_url, api_key="test", max_retries=0) as client:
        return client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello!"}])

@pytest.mark.sse_tape(faults=["error:1,path=/v1/embeddings"])
def test_may_leave_its_fault(sse_tape_module):
    ask(sse_tape_module)

@pytest.mark.sse_tape(faults=["error:1,path=/v1/embeddings"], allow_unused=False)
def test_must_use_its_fault(sse_tape_module):
    ask(sse_tape_module)
"""
    )
    result = tester.runpytest_subprocess()
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*ERROR at teardown of test_must_use_its_fault*", "*fault 'error:1,path=/v1/embeddings' was never injected*"]
    )
    # And the other way round: the scope's marker asks for every fault to act, the test lets its own go.
    source = (tester.path / "test_shared.py").read_text(encoding="utf-8")
    source = source.replace("pytestmark = pytest.mark.sse_tape(allow_unused=True)", "")
    source = source.replace(
        'path=/v1/embeddings"])\ndef test_may', 'path=/v1/embeddings"], allow_unused=True)\ndef test_may'
    )
    (tester.path / "test_shared.py").write_text(source, encoding="utf-8")
    result = tester.runpytest_subprocess()
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_must_use_its_fault*"])


def test_a_shared_servers_miss_is_told_once_and_one_outside_any_test_at_the_scopes_end(
    tester: pytest.Pytester,
) -> None:
    greeting_cassette(tester.path / "cassettes" / "test_shared.toml")
    tester.makepyfile(
        test_shared="""
import httpx
import pytest

def ask(tape, path):
    return httpx.post(f"{tape.openai_url}/{path}", json={}).status_code

@pytest.fixture(scope="module")
def wider(sse_tape_module):  # set up before the test that asks for it begins, torn down after the last ends
    assert ask(sse_tape_module, "setup") == 404
    yield
    assert ask(sse_tape_module, "teardown") == 404

def test_misses(sse_tape_module):
    assert ask(sse_tape_module, "embeddings") == 404

def test_plays(wider, sse_tape_module):
    assert ask(sse_tape_module, "chat/completions") == 200
"""
    )
    result = tester.runpytest_subprocess()
    result.assert_outcomes(passed=2, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_misses*",
            "sse-tape: request 1 (POST /v1/embeddings) matched no recording: *",
            "*ERROR at teardown of test_plays*",
            "sse-tape (module scope): request * (POST /v1/setup), outside any test, matched no recording: *",
            "request * (POST /v1/teardown), outside any test, matched no recording: *",
        ]
    )
    # Told once in the errors (the short summary repeats each error, whole where CI is set).
    assert sum("(POST /v1/embeddings)" in line for line in result.stdout.lines if not line.startswith("ERROR ")) == 1


def test_past_the_misses_kept_a_test_says_how_many_more_and_one_outside_any_test_is_still_told(
    tester: pytest.Pytester,
) -> None:
    # The server keeps its last 1,000 misses and counts the rest: the test's problems end with the count of those
    # not kept, and a miss after the test (a wider fixture's teardown) is still told as the scope's.
    greeting_cassette(tester.path / "cassettes" / "test_flood.toml")
    tester.makepyfile(
        test_flood="""
import httpx
import pytest

@pytest.fixture(scope="module")
def wider(sse_tape_module):
    yield
    assert httpx.post(f"{sse_tape_module.openai_url}/teardown", json={}).status_code == 404

def test_floods(wider, sse_tape_module):
    with httpx.Client() as client:
        for n in range(1003):
            assert client.post(f"{sse_tape_module.openai_url}/nowhere/{n}", json={}).status_code == 404
"""
    )
    result = tester.runpytest_subprocess()
    result.assert_outcomes(passed=1, errors=1)  # at the test's teardown, the last of the module's: both told there
    # What the test's failure says, without pytest's summary of it (whole where CI is set, so the same again).
    output = result.stdout.str().partition("short test summary info")[0]
    assert "request 1 (POST /v1/nowhere/0)" not in output
    assert output.count("(POST /v1/nowhere/1002) matched no recording") == 1
    result.stdout.fnmatch_lines(
        [
            "sse-tape: request 4 (POST /v1/nowhere/3) matched no recording: *",
            "and 3 earlier requests matched no recording (not kept)",
            "sse-tape (module scope): request 1004 (POST /v1/teardown), outside any test, matched no recording: *",
        ]
    )


def test_a_test_using_both_shared_servers_starts_each_over_and_fails_on_a_miss_at_either(
    tester: pytest.Pytester,
) -> None:
    greeting_cassette(tester.path / "cassettes" / "test_both.toml")
    greeting_cassette(tester.path / "cassettes" / "session.toml")
    tester.makepyfile(
        test_both="""
import httpx
import pytest

def ask(tape, path="chat/completions"):
    return httpx.post(f"{tape.openai_url}/{path}", json={}).status_code

def test_misses_on_the_session(sse_tape_module, sse_tape_session):
    assert ask(sse_tape_session, "embeddings") == 404

def test_starts_both_over(sse_tape_module, sse_tape_session):
    assert sse_tape_module.requests == [] and sse_tape_session.requests == []
    assert ask(sse_tape_module) == 200 and ask(sse_tape_session) == 200

@pytest.mark.sse_tape(faults=["status:503"])
def test_its_fault_is_on_both(sse_tape_module, sse_tape_session):
    assert ask(sse_tape_module) == 503 and ask(sse_tape_session) == 503

@pytest.mark.sse_tape(faults=["status:503"])
def test_its_fault_must_act_on_each(sse_tape_module, sse_tape_session):
    assert ask(sse_tape_module) == 503

@pytest.mark.sse_tape(env=True)
def test_env_cannot_point_at_both(sse_tape_module, sse_tape_session):
    pass

def test_fails(sse_tape_module, sse_tape_session):
    ask(sse_tape_session, "embeddings")
    assert False
"""
    )
    result = tester.runpytest_subprocess()
    result.assert_outcomes(passed=4, failed=1, errors=3)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_env_cannot_point_at_both*",
            "sse-tape: env=True points the SDKs at one server, and this test uses 2 (sse_tape_module, "
            "sse_tape_session): *",
        ],
        consecutive=True,
    )
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_misses_on_the_session*",
            "sse-tape: sse_tape_session: request 1 (POST /v1/embeddings) matched no recording: *",
        ],
        consecutive=True,
    )
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_its_fault_must_act_on_each*",
            "sse-tape: sse_tape_session: fault 'status:503' was never injected",
        ],
        consecutive=True,
    )
    # A failed test's report has a section for each server, named by its fixture.
    result.stdout.fnmatch_lines(
        ["*_ test_fails _*", "*- sse-tape (sse_tape_module) -*", "*- sse-tape (sse_tape_session) -*"]
    )
    result.stdout.fnmatch_lines(["*- sse-tape (sse_tape_session) -*", "miss: request 1 (POST /v1/embeddings)*"])


def test_a_split_sweep_on_both_shared_servers_spans_the_longest_stream_of_either(tester: pytest.Pytester) -> None:
    (tester.path / "cassettes" / "test_split.toml").write_text(TINY, encoding="utf-8")
    longest = Cassette.load(greeting_cassette(tester.path / "cassettes" / "session.toml")).interactions[0]
    tester.makepyfile(
        test_split="""
import pytest

@pytest.mark.sse_tape(split=2)
def test_cut(sse_tape_module, sse_tape_session):
    pass
"""
    )
    result = tester.runpytest_subprocess("--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "test_split.py::test_cut[[]sse-tape@split=1[]]",
            f"test_split.py::test_cut[[]sse-tape@split={len(longest.response.body) - 1}[]]",
        ]
    )


def test_under_xdist_a_spread_session_used_beside_a_module_is_told_at_a_tests_teardown(
    tester: pytest.Pytester,
) -> None:
    greeting_cassette(tester.path / "cassettes" / "test_both.toml")
    greeting_cassette(tester.path / "cassettes" / "session.toml")
    # One test in each group: `--dist loadgroup` gives each worker one, so both scopes are spread for certain.
    tester.makepyfile(
        test_both="""
import pytest

@pytest.mark.xdist_group("a")
def test_a(sse_tape_module, sse_tape_session):
    pass

@pytest.mark.xdist_group("b")
def test_b(sse_tape_module, sse_tape_session):
    pass
"""
    )
    result = tester.runpytest_subprocess("-p", "xdist.plugin", "-n", "2", "--dist", "loadgroup")
    result.assert_outcomes(passed=2, errors=2)
    for scope in ("module", "session"):  # each told at the teardown of a test, the line right below its name
        # The node id may carry xdist's `@group` suffix or not (pytest-xdist 3.8 prints none): either is the test.
        told = rf"ERROR at teardown of test_[ab](@[ab])? _+\nsse-tape \({scope} scope\): 1 recording never played: "
        assert re.search(told, result.stdout.str()), scope
    assert "ERROR at teardown of test session" not in result.stdout.str()


def test_scopes_that_fail_at_one_teardown_say_so_in_their_lines_with_no_traceback(tester: pytest.Pytester) -> None:
    # The module's and the session's servers end after the last test, each with a recording never played:
    # pytest groups the two failures, and would print the group's traceback.
    greeting_cassette(tester.path / "cassettes" / "test_scopes.toml")
    greeting_cassette(tester.path / "cassettes" / "session.toml")
    tester.makepyfile(
        test_scopes="""
def test_module(sse_tape_module):
    pass

def test_session(sse_tape_session):
    pass
"""
    )
    result = tester.runpytest_subprocess()
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_session*",
            "sse-tape (module scope): 1 recording never played: test_scopes.toml #1 *"
            "(allow_unused=True in the marker lets them)",
            "sse-tape (session scope): 1 recording never played: session.toml #1 *"
            "(sse_tape_allow_unused = true in the ini file lets them)",
            "*short test summary*",
            "ERROR test_scopes.py::test_session - Failed: sse-tape (module scope)*",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_a_misspelt_cassette_name_is_told_the_name_it_is_close_to(tester: pytest.Pytester) -> None:
    (tester.path / "cassettes" / "openai").mkdir()
    tester.makepyfile(
        test_misspelt="""
import pytest

@pytest.mark.sse_tape("greting")
def test_file(sse_tape):
    pass

@pytest.mark.sse_tape("opena/")
def test_folder(sse_tape):
    pass

@pytest.mark.sse_tape("unheard-of")
def test_nothing_close(sse_tape):
    pass

def test_new_one(sse_tape):  # its own cassette, not yet recorded: no hint at a neighbour's
    pass
"""
    )
    (tester.path / "cassettes" / "test_misspelt").mkdir()
    greeting_cassette(tester.path / "cassettes" / "test_misspelt" / "test_new_two.toml")
    result = tester.runpytest_subprocess()
    result.assert_outcomes(errors=4)
    result.stdout.fnmatch_lines(
        [
            "sse-tape: no cassette *greting.toml (did you mean 'greeting'?): record it with --sse-tape-record=once*",
            "sse-tape: no cassette *opena (did you mean 'openai/'?): record it*",
            "sse-tape: no cassette *unheard-of.toml: record it*",
            "sse-tape: no cassette *test_misspelt/test_new_one.toml: record it*",
        ]
    )


def test_a_projects_profile_is_found_when_pytest_runs_from_a_subfolder(
    tester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tester.path / "pyproject.toml").write_text(
        '[tool.sse-tape.profiles.ci]\nfaults = ["status:code=503,times=1"]\n', encoding="utf-8"
    )
    (tester.path / "tests" / "cassettes").mkdir(parents=True)
    greeting_cassette(tester.path / "tests" / "cassettes" / "greeting.toml")
    (tester.path / "tests" / "test_profiled.py").write_text(
        """
import openai
import pytest

@pytest.mark.sse_tape("greeting", profiles=["ci"])
def test_marked(sse_tape):
    with openai.OpenAI(base_url=sse_tape.openai_url, api_key="test", max_retries=0) as client:
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Hello!"}])
""",
        encoding="utf-8",
    )
    monkeypatch.chdir(tester.path / "tests")  # as an IDE runs a test: from its folder
    tester.runpytest_subprocess().assert_outcomes(passed=1)
    result = tester.runpytest_subprocess("--sse-tape-profile", "ci")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["sse-tape: seed *; faults ci"])


def test_a_mistake_in_a_tests_own_marker_on_a_shared_server_fails_it_in_one_line(tester: pytest.Pytester) -> None:
    greeting_cassette(tester.path / "cassettes" / "test_shared.toml")
    tester.makepyfile(
        test_shared="""
import pytest

pytestmark = pytest.mark.sse_tape(allow_unused=True)

@pytest.mark.sse_tape(faults=["error:zz"])
def test_bad_fault(sse_tape_module):
    pass

@pytest.mark.sse_tape(profiles=["nope"])
def test_bad_profile(sse_tape_module):
    pass

@pytest.mark.sse_tape(fualts=["error:1"])
def test_typo(sse_tape_module):
    pass
"""
    )
    result = tester.runpytest_subprocess()
    result.assert_outcomes(errors=3)
    result.stdout.fnmatch_lines(
        [
            "sse-tape: fault 'error:zz': 'zz' is not a position*",
            "sse-tape: unknown profile 'nope': profiles are *",
            "sse-tape: @pytest.mark.sse_tape got an unexpected keyword argument 'fualts'*",
        ]
    )
    assert "Traceback" not in result.stdout.str()
    assert "ConfigError" not in result.stdout.str()


def test_under_xdist_a_scope_spread_over_workers_is_checked_whole_by_the_controller(tester: pytest.Pytester) -> None:
    # The module's and the session's cassette: the greeting at /v1/chat/completions and TINY at
    # /v1/completions, matched by path.
    greeting = Cassette.load(greeting_cassette(tester.path / "cassettes" / "greeting.toml"))
    (tester.path / "tiny.toml").write_text(TINY.replace("/v1/chat/completions", "/v1/completions"), encoding="utf-8")
    tiny = Cassette.load(tester.path / "tiny.toml")
    for name in ("test_spread", "session"):
        Cassette(interactions=[*greeting.interactions, *tiny.interactions], match_on=greeting.match_on).save(
            tester.path / "cassettes" / f"{name}.toml"
        )
    ask = """
import httpx
import pytest

def ask(tape, path):
    assert httpx.post(f"{tape.openai_url}/{path}", json={}).status_code == 200
"""

    # The module's marker asks for a fault that only the tiny request meets. Each file's tests are in two
    # groups, and `--dist loadgroup` gives each worker one group: a part of each scope, for certain (`load`
    # hands tests out as workers come free, which a busy machine may leave all to one).
    def tests(fixture: str) -> str:
        return f"""
@pytest.mark.xdist_group("a")
def test_tiny({fixture}):
    ask({fixture}, 'completions')
""" + "".join(
            f"""
@pytest.mark.xdist_group("{"ab"[n % 2]}")
def test_greeting_{n}({fixture}):
    ask({fixture}, 'chat/completions')
"""
            for n in range(8)
        )

    tester.makepyfile(
        test_spread=ask
        + 'pytestmark = pytest.mark.sse_tape(faults=["latency:delay=1ms,path=/v1/completions"])\n'
        + tests("sse_tape_module"),
        test_session=ask + tests("sse_tape_session"),
    )
    # Each worker has servers of its own and runs a part of each scope: the tiny recording plays, and the fault
    # acts, on one of them; the controller adds the parts up.
    result = tester.runpytest_subprocess("-p", "xdist.plugin", "-n", "2", "--dist", "loadgroup", "-v")
    result.assert_outcomes(passed=18)
    for worker in ("gw0", "gw1"):  # both workers ran tests of both scopes
        result.stdout.fnmatch_lines([f"[[]{worker}[]] *PASSED test_spread.py::*"])
        result.stdout.fnmatch_lines([f"[[]{worker}[]] *PASSED test_session.py::*"])
    # With no test playing the tiny recording, each scope says so once, at the teardown of its last test.
    for name in ("test_spread", "test_session"):
        source = (tester.path / f"{name}.py").read_text(encoding="utf-8")
        (tester.path / f"{name}.py").write_text(source.replace("def test_tiny", "def _tiny"), encoding="utf-8")
    module = [
        "*sse-tape (module scope): 1 recording never played: test_spread.toml #2 (POST /v1/completions) *",
        "fault 'latency:delay=1ms,path=/v1/completions' was never injected",
    ]
    session = "*sse-tape (session scope): 1 recording never played: session.toml #2 (POST /v1/completions) *"
    for dist in ("loadgroup", "loadfile"):  # spread, and the module on one worker, which tells its own
        result = tester.runpytest_subprocess("-p", "xdist.plugin", "-n", "2", "--dist", dist)
        result.assert_outcomes(passed=16, errors=2)
        result.stdout.fnmatch_lines(["*ERROR at teardown of test_greeting_*", *module])
        result.stdout.fnmatch_lines(["*ERROR at teardown of test_greeting_*", session])
        # Once in the errors (the short summary repeats each, whole where CI is set, else cut to the width).
        patterns = [pattern.removeprefix("*") for pattern in (module[0], session)]
        assert sum(fnmatch(line, pattern) for line in result.stdout.lines for pattern in patterns) == 2


def test_a_recording_keeps_out_the_shapes_the_command_line_and_the_ini_add(tester: pytest.Pytester) -> None:
    # The shapes a project adds (a ticket number of its own, an internal token) are redacted as the built-in
    # ones are, whatever the field's name; a bad one stops the run with one line.
    tester.makeini(
        INI + "addopts = -p sse_tape.pytest_plugin -p pytest_asyncio.plugin\n"
        "sse_tape_secret_patterns =\n    ACME-[0-9]{6}\n"
    )
    tester.makepyfile(
        test_shapes="""
import httpx
import pytest


@pytest.mark.sse_tape(allow_unused=True)
def test_asks(sse_tape):
    body = {"model": "up", "messages": [{"role": "user", "content": "ticket ACME-424242"}], "note": "int_tok_98765"}
    key = "sk-proj-" + "planted" * 5
    headers = {"X-Debug": key, "X-Internal": "int_tok_98765"}
    with httpx.stream("POST", sse_tape.url + "/v1/chat/completions?events=1", json=body, headers=headers) as got:
        assert got.status_code == 200
        got.read()
"""
    )
    with run_in_thread(Upstream()) as upstream:
        record = ("--sse-tape-record=once", "--sse-tape-upstream", upstream.url)
        tester.runpytest_subprocess(*record, "--sse-tape-secret-pattern", r"int_tok_\d+").assert_outcomes(passed=1)
        assert upstream.seen_headers[0]["X-Internal"] == "int_tok_98765"  # the upstream had it
    text = (tester.path / "cassettes" / "test_shapes" / "test_asks.toml").read_text()
    assert ("ACME-424242" in text, "int_tok_98765" in text, "planted" in text) == (False, False, False)
    assert "ticket" not in text  # the string that held one is replaced whole, so that it matches on replay
    tester.runpytest_subprocess().assert_outcomes(passed=1)  # offline: the redacted recording answers
    refused = tester.runpytest_subprocess("--sse-tape-secret-pattern", "(")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert "sse-tape: --secret-pattern '(' is no regular expression: " in refused.stderr.str()
