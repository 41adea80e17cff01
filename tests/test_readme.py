"""The README, to the letter: its requests are answered, its snippets run, its output is what is printed.

Each checked block follows a `<!-- readme-test: NAME -->` line in README.md.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from clients import openai_client
from test_cli import Running

from sse_tape import MockServer, SSEDecoder
from sse_tape.cli import cli

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
HELLO = "Hi there! How can I help you today?"


def block(name: str) -> str:
    found = re.search(rf"<!-- readme-test: {name} -->\n```[a-z]*\n(.*?)\n```", README, re.DOTALL)
    assert found is not None, f"README.md has no block marked readme-test: {name}"
    return found[1]


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_curl_request_gets_the_greeting_streamed(instant_server: MockServer) -> None:
    words = shlex.split(block("curl").replace("\\\n", " "))
    url, body = words[2], json.loads(words[words.index("-d") + 1])
    assert url == "http://127.0.0.1:8080/v1/chat/completions"
    got = httpx.post(url.replace("http://127.0.0.1:8080", instant_server.url), json=body)
    assert got.headers["content-type"] == "text/event-stream"
    data = [line[6:] for line in got.text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    assert "".join(json.loads(d)["choices"][0]["delta"].get("content") or "" for d in data[:-1]) == HELLO


def test_the_sdk_snippet_prints_the_greeting(instant_server: MockServer) -> None:
    code = block("sdk")
    assert "http://127.0.0.1:8080/v1" in code
    assert run_python(code.replace("http://127.0.0.1:8080", instant_server.url)) == HELLO + "\n"


def test_the_library_snippet_runs_as_it_is() -> None:
    out = run_python(block("library")).splitlines()
    assert out[0] == HELLO
    assert out[1].startswith(
        "(Recording(cassette='anthropic-messages.toml', index=1), Recording(cassette='anthropic-messages.toml', index=2), "
    )
    assert out[2] == "()"
    assert out[3] == "Hi there! How"  # five events (the role frame and four pieces of text), then the error
    assert out[4].startswith("the stream failed as asked: ")


def test_the_miss_message_is_the_one_printed() -> None:
    asked = re.search(r"the request\n`(\{.*?\})`\ngets that error", README)
    assert asked is not None
    server = Running("cassettes/openai-chat.toml", "--match", "method,path,body")
    try:
        assert httpx.post(server.url + "/v1/chat/completions", json=json.loads(asked[1])).status_code == 404
    finally:
        _, err = server.stop()
    assert block("miss") in err.splitlines()


def test_the_show_excerpt_is_what_show_prints() -> None:
    printed = CliRunner().invoke(cli, ["show", "cassettes/router-chat.toml"]).output
    assert block("show") + "\n" in printed


def test_the_bundled_cassettes_answer_what_the_readme_says(instant_server: MockServer) -> None:
    router = openai_client(instant_server.url + "/proj_ABC123/my-endpoint/v1")
    ask = {"model": "any", "messages": [{"role": "user", "content": "Hi"}]}
    plain = router.chat.completions.create(**ask)
    assert plain.usage is not None
    assert plain.choices[0].message.content == "The capital of France is Paris."
    assert router.chat.completions.create(**ask, logprobs=True).choices[0].message.refusal
    reasoning = router.chat.completions.create(**ask, reasoning_effort="high")
    assert reasoning.usage is not None
    assert reasoning.usage.completion_tokens_details is not None
    assert reasoning.usage.completion_tokens_details.reasoning_tokens == 612
    client = openai_client(instant_server.url + "/v1")
    story = client.completions.create(model="any", prompt="Hi", logprobs=2)
    assert story.choices[0].logprobs is not None
    assert story.choices[0].logprobs.tokens
    assert client.responses.create(model="any", input="Hi").output_text == "Hello! How can I help you today?"
    lmstudio = httpx.post(instant_server.url + "/api/v1/chat", json={"model": "any", "input": "Hi"}).json()
    assert [o["type"] for o in lmstudio["output"]] == ["reasoning", "tool_call", "message"]
    assert {m.id for m in client.models.list()} >= {"local-model", "llama-3.1-8b"}
    feed = SSEDecoder().feed(httpx.get(instant_server.url + "/events").content)
    assert [(e.id, e.event) for e in feed] == [
        ("1", "deploy"),
        ("2", "deploy"),
        ("3", "alert"),
        ("4", "deploy"),
        ("5", "deploy"),
    ]
    resumed = httpx.get(instant_server.url + "/events", headers={"Last-Event-ID": "3"}).content
    assert SSEDecoder().feed(resumed) == feed[3:]
    assert resumed.startswith(b"retry: 1000\n\n")


def test_the_pytest_example_passes_in_a_project_of_its_own(pytester: pytest.Pytester) -> None:
    # As its comment says: chat.toml is a copy of the bundled openai-chat.toml, all of it.
    chat = pytester.path / "tests" / "cassettes" / "chat.toml"
    chat.parent.mkdir(parents=True)
    shutil.copy(ROOT / "cassettes" / "openai-chat.toml", chat)
    (pytester.path / "tests" / "test_client.py").write_text(block("pytest"), encoding="utf-8")
    pytester.runpytest_subprocess("tests").assert_outcomes(passed=1)
