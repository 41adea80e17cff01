"""Serving options: one parser for the words, whether they come from the command line or from Python."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sse_tape import ConfigError, MatchOn, MissPolicy, Pacing, ServeOptions, serve
from sse_tape.faults import parse_fault


def test_words_and_objects_build_the_same_options() -> None:
    by_words = ServeOptions.build(pace="x2", jitter="5ms", seed=3, match_on="method,path", faults=["error:5"])
    by_objects = ServeOptions.build(
        pace=Pacing.parse("x2", jitter="5ms", seed=3),
        seed=3,
        match_on=[MatchOn.METHOD, "path"],
        faults=[parse_fault("error:5")],
    )
    assert by_words == by_objects
    assert by_words.pace == Pacing.parse("x2", jitter="5ms", seed=3)


def test_profiles_come_before_the_faults_given() -> None:
    options = ServeOptions.build(profiles=["rate-limited"], faults=["empty"])
    assert [f.spec for f in options.faults] == ["status:code=429,retry_after=2,p=0.5", "empty"]


@pytest.mark.parametrize(
    ("flag", "word", "keyword", "message"),
    [
        ("--pace", "warp9", "pace", "unknown pace 'warp9': use recorded, instant, xK (x2, x0.5), a gap (20ms) or tps:N (tps:40)"),
        ("--fault", "stall:for=soon", "faults", "fault 'stall:for=soon': 'soon' is not a duration: write it like 20ms, 1.5s, 2m or 1h"),
        ("--jitter", "lots", "jitter", "jitter 'lots': write a duration (5ms) or a percentage (10%)"),
        ("--ignore-body-field", "metadata.", "ignore_body_fields", "ignored body field 'metadata.': write a dotted path such as user or metadata.trace_id"),
    ],
)  # fmt: skip
def test_the_command_line_and_python_refuse_a_bad_word_alike(flag: str, word: str, keyword: str, message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sse_tape", "serve", flag, word], capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stderr) == (2, f"Error: {message}\n")
    value: object = [word] if keyword in ("faults", "ignore_body_fields") else word
    with pytest.raises(ConfigError) as info:
        ServeOptions.build(**{keyword: value})  # type: ignore[arg-type]
    assert str(info.value) == message


def test_a_miss_policy_is_one_of_its_words() -> None:
    assert ServeOptions.build(on_miss="forward").on_miss is MissPolicy.FORWARD
    with pytest.raises(ConfigError, match="on miss 'synthesize': choose from error, forward, record"):
        ServeOptions.build(on_miss="synthesize")


def test_forwarding_needs_an_upstream() -> None:
    with (
        pytest.raises(ConfigError, match="on miss forward: give the upstream to send misses to"),
        serve(on_miss="forward"),
    ):
        pass


def test_options_or_words_not_both() -> None:
    with pytest.raises(TypeError, match="give options or keywords, not both"), serve(options=ServeOptions(), pace="x2"):
        pass
