"""Serving options: one table of options, and one parser for the words, whether they come from the command line,
the pytest plugin or Python; one function that builds a server from them."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import click
import pytest

from sse_tape import (
    Cassette,
    Chunk,
    ConfigError,
    Interaction,
    MatchOn,
    MissPolicy,
    Pacing,
    RecordMode,
    Request,
    Response,
    ServeOptions,
    recording_server,
    serve,
)
from sse_tape.faults import parse_fault
from sse_tape.options import OPTIONS, Group
from sse_tape.pytest_plugin.marker import MARKER, PER_TEST, Marked
from sse_tape.server import Limits, MockServer, Replay, build_server


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


# --- the table: each option declared once, and shown and read wherever its row says ---------------------------


def _help(*command: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "sse_tape", *command, "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("command", ["serve", "record", "synth"])
def test_every_option_the_table_gives_a_command_is_in_its_help(command: str) -> None:
    shown = _help(command)
    rows = [o for o in OPTIONS.values() if (flag := o.flag(command)) is not None]
    if command == "synth":  # synth has options of its own beside the model's, which are the table's
        rows = [o for o in rows if o.group is Group.MODEL]
    assert rows
    for option in rows:
        flag = option.flag(command)
        assert flag is not None
        for name in flag.names:
            assert re.search(rf"(^|[ ,]){re.escape(name)}\b", shown, re.MULTILINE), (command, name)
        first_words = " ".join((flag.help or option.help).split()[:4])
        assert first_words in " ".join(shown.split()), (command, option.name)


def test_every_option_a_command_takes_is_in_the_table() -> None:
    from sse_tape.cli.record import record
    from sse_tape.cli.serve import serve as serve_command

    for command in (serve_command, record):
        assert command.name is not None
        options = {p.name for p in command.params if isinstance(p, click.Option)} - {"help"}
        assert options == {o.name for o in OPTIONS.values() if o.flag(command.name) is not None}


def test_the_markers_keywords_are_the_tables_with_its_defaults() -> None:
    keywords = [o for o in OPTIONS.values() if o.marker]
    assert [f.name for f in fields(Marked)] == ["cassettes", *(o.name for o in keywords)]
    assert Marked() == Marked(**{o.name: o.in_marker for o in keywords})
    assert Marked().pace == "instant"  # tests replay at once unless they say otherwise
    assert MARKER.startswith("sse_tape(*cassettes, " + ", ".join(f"{o.name}={o.in_marker!r}" for o in keywords))
    assert {o.name for o in keywords if o.per_test} == PER_TEST


@pytest.fixture
def plugin_only(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester folder whose sessions load this plugin alone, in processes of their own."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeini("[pytest]\naddopts = -p sse_tape.pytest_plugin\n")
    return pytester


def test_every_pytest_flag_and_ini_setting_of_the_table_is_in_pytest_help(plugin_only: pytest.Pytester) -> None:
    result = plugin_only.runpytest_subprocess("--help")
    assert result.ret == 0
    shown = result.stdout.str()
    flags = [o.pytest.name for o in OPTIONS.values() if o.pytest is not None]
    inis = [o.ini.name for o in OPTIONS.values() if o.ini is not None]
    assert flags
    assert inis
    for name in [*flags, *inis]:
        assert re.search(rf"^  {re.escape(name)}\b", shown, re.MULTILINE), name


def test_serve_options_build_takes_the_tables_answer_options_with_their_defaults() -> None:
    answers = {name for name, o in OPTIONS.items() if o.group is Group.ANSWER}
    assert set(inspect.signature(ServeOptions.build).parameters) == answers
    built = ServeOptions.build()
    assert built == ServeOptions()
    for field in fields(ServeOptions):
        assert getattr(built, field.name) == OPTIONS[field.name].value, field.name
    assert built.pace == Pacing.parse("recorded")
    assert Limits() == Limits(
        request_timeout=10.0, keep_alive=60.0, max_connections=Limits().max_connections, send_timeout=60.0
    )


def test_one_record_mode_enum_for_the_cli_and_the_plugin(plugin_only: pytest.Pytester) -> None:
    record = OPTIONS["record_mode"]
    assert record.choices == tuple(RecordMode)
    assert record.pytest is not None
    assert record.pytest.default is RecordMode.NONE
    assert f"[{'|'.join(RecordMode)}]" in " ".join(_help("record").split())
    result = plugin_only.runpytest_subprocess("--help")
    assert f"--sse-tape-record={{{','.join(RecordMode)}}}" in result.stdout.str()


BAD_MARKER_TEST = """
import pytest

@pytest.mark.sse_tape({keyword}={value!r})
def test_bad(sse_tape):
    pass
"""


@pytest.mark.parametrize(
    ("flag", "keyword", "value", "message"),
    [
        ("--miss-status", "miss_status", 600, "miss status 600 is not an HTTP error status (400-599)"),
        ("--pace", "pace", "warp9", "unknown pace 'warp9': use recorded, instant, xK (x2, x0.5), a gap (20ms) or tps:N (tps:40)"),
        ("--ignore-body-field", "ignore_body_fields", ["metadata."], "ignored body field 'metadata.': write a dotted path such as user or metadata.trace_id"),
    ],
)  # fmt: skip
def test_a_bad_value_gets_one_message_from_the_command_line_the_marker_and_python(
    plugin_only: pytest.Pytester, flag: str, keyword: str, value: object, message: str
) -> None:
    word = value[0] if isinstance(value, list) else value
    result = subprocess.run(
        [sys.executable, "-m", "sse_tape", "serve", flag, str(word)], capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stderr) == (2, f"Error: {message}\n")
    with pytest.raises(ConfigError) as info:
        ServeOptions.build(**{keyword: value})  # type: ignore[arg-type]
    assert str(info.value) == message
    plugin_only.makepyfile(BAD_MARKER_TEST.format(keyword=keyword, value=value))
    outcome = plugin_only.runpytest_subprocess()
    outcome.assert_outcomes(errors=1)
    assert f"sse-tape: {message}" in outcome.stdout.lines


# --- one function builds a server, and says each mistake in one set of words ----------------------------------


@pytest.mark.parametrize(
    ("args", "keywords", "message"),
    [
        (["--upstream", "http://127.0.0.1:9"], {"upstream": "http://127.0.0.1:9"}, "--upstream is for --on-miss forward"),
        (["--on-miss", "synth"], {"options": ServeOptions.build(on_miss="synth")}, "--model and --on-miss synth go together"),
        (["--on-miss", "forward"], {"options": ServeOptions.build(on_miss="forward")}, "on miss forward: give the upstream to send misses to"),
    ],
)  # fmt: skip
def test_serve_and_build_server_refuse_a_miss_policy_without_its_source_alike(
    args: list[str], keywords: dict[str, Any], message: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sse_tape", "serve", *args], capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stderr) == (2, f"Error: {message}\n")
    with pytest.raises(ConfigError) as info:
        build_server([], **keywords)
    assert str(info.value) == message


def test_a_model_needs_on_miss_synth_in_build_server_and_in_mock_server_alike() -> None:
    synth = ServeOptions.build(on_miss="synth")
    for make in (lambda: build_server([], synth), lambda: MockServer([], options=synth)):
        with pytest.raises(ConfigError, match=r"^--model and --on-miss synth go together$"):
            make()


def test_recording_takes_an_upstream_or_a_model_not_both(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^record from an upstream or a model: give one of them$"):
        build_server(record_into=tmp_path / "c.toml")
    with pytest.raises(ConfigError, match=r"^record from an upstream or a model: give one of them$"):
        recording_server(tmp_path / "c.toml", "http://127.0.0.1:9", model=Replay())
    assert not (tmp_path / "c.toml").exists()


def test_on_miss_record_needs_a_cassette_to_record_into() -> None:
    with pytest.raises(ConfigError, match=r"^on miss record: give the cassette to record into"):
        build_server(options=ServeOptions.build(on_miss="record"), upstream="http://127.0.0.1:9")


def test_record_mode_rewrite_makes_the_cassette_anew(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    old = Interaction(Request("POST", "/v1/old"), Response(chunks=(Chunk(0.0, b"data: x\n\n"),)))
    Cassette(interactions=[old]).save(path)
    kept = build_server(record_into=path, upstream="http://127.0.0.1:9", mode="new_episodes")
    assert len(kept.control.snapshot().recordings) == 1
    anew = build_server(record_into=path, upstream="http://127.0.0.1:9", mode=RecordMode.REWRITE)
    assert not path.exists()
    assert anew.control.snapshot().recordings == ()
    assert anew.options.on_miss is MissPolicy.RECORD
    assert anew.options.allow_repeats is False  # then as new_episodes: each recording replays once
