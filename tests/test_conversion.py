"""sse_tape.conversion, called as a library: what `sse-tape convert` does, on real cassettes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sse_tape import Cassette, ConfigError, SSETapeError, bundled_cassettes
from sse_tape.checking import check_interactions
from sse_tape.conversion import convert, translated, why_not_of
from sse_tape.dialects import get

BUNDLED = {p.stem: p for p in bundled_cassettes()}


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_a_change_of_encoding_keeps_every_byte(tmp_path: Path, name: str) -> None:
    packed = convert(BUNDLED[name], tmp_path / f"{name}.msgpack")
    assert (packed.path, len(packed)) == (tmp_path / f"{name}.msgpack", len(Cassette.load(BUNDLED[name])))
    convert(tmp_path / f"{name}.msgpack", tmp_path / f"{name}.toml")
    assert (tmp_path / f"{name}.toml").read_bytes() == BUNDLED[name].read_bytes()


def test_a_translation_keeps_each_events_time_and_rewrites_the_request(tmp_path: Path) -> None:
    source = Cassette.load(BUNDLED["openai-chat"])
    written = convert(BUNDLED["openai-chat"], tmp_path / "r.toml", into="openai-responses")
    assert [i.request.path for i in written] == ["/v1/responses"] * len(source)
    assert Cassette.load(tmp_path / "r.toml").interactions == written.interactions
    assert [r.dialect for r in check_interactions(written) if r.ok] == ["openai-responses"] * len(source)
    first, was = written.interactions[0].response, source.interactions[0].response
    assert {t for t, _ in first.events()} <= {t for t, _ in was.events()}  # each at an original event's time
    types = [event.json()["type"] for _, event in first.events() if event.data != "[DONE]"]
    assert (types[0], types[-1]) == ("response.created", "response.completed")


def test_what_the_target_cannot_carry_stops_the_conversion_and_nothing_is_written(tmp_path: Path) -> None:
    with pytest.raises(SSETapeError) as refused:
        convert(BUNDLED["openai-chat"], tmp_path / "c.toml", into="openai-completions")
    assert str(refused.value) == (
        f"{BUNDLED['openai-chat']} #2 (POST /v1/chat/completions): openai-completions cannot carry its "
        "tool calls (get_weather); nothing written (--lossy leaves that out)"
    )
    assert not (tmp_path / "c.toml").exists()
    lossy = convert(BUNDLED["openai-chat"], tmp_path / "c.toml", into=get("openai-completions"), lossy=True)
    assert len(lossy) == 3
    assert all(result.ok for result in check_interactions(Cassette.load(tmp_path / "c.toml")))


def test_translated_leaves_the_cassette_as_it_was() -> None:
    cassette = Cassette.load(BUNDLED["anthropic-messages"])
    before = list(cassette.interactions)
    into = translated(cassette, get("openai-chat"), lossy=True)
    assert cassette.interactions == before
    assert [i.request.path for i in into] == ["/v1/chat/completions"] * len(before)
    with pytest.raises(SSETapeError, match=r"#\d+ \(POST /v1/messages\): openai-completions cannot carry its "):
        translated(cassette, get("openai-completions"))


def test_a_stream_that_is_not_the_named_dialect_is_told_in_words() -> None:
    chat = Cassette.load(BUNDLED["openai-chat"]).interactions[0]
    feed = Cassette.load(BUNDLED["events"]).interactions[0]
    assert why_not_of(chat, get("gemini")) == "its stream is not gemini: it looks like openai-chat"
    assert why_not_of(feed, get("openai-chat")) == "its stream is not openai-chat: none of its 5 events reads as one"
    assert why_not_of(chat, get("openai-chat")) is None
    error = replace(chat, response=replace(chat.response, status=429))
    assert why_not_of(error, get("gemini")) is None  # an error body is rewritten whatever its API


def test_a_stream_whose_dialect_cannot_be_told_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as refused:
        convert(BUNDLED["events"], tmp_path / "out.toml", into="openai-chat")
    assert str(refused.value) == f"{BUNDLED['events']} #1 GET /events: cannot tell its dialect: name it with --dialect"
    assert not (tmp_path / "out.toml").exists()


def test_a_named_dialect_reads_streams_whose_paths_do_not_tell(tmp_path: Path) -> None:
    bundled = Cassette.load(BUNDLED["anthropic-messages"])
    moved = [replace(i, request=replace(i.request, path="/gateway/generate")) for i in bundled]
    source = Cassette(moved).save(tmp_path / "moved.toml")
    written = convert(source, tmp_path / "chat.toml", into="openai-chat", origin="anthropic-messages", lossy=True)
    assert all(result.ok for result in check_interactions(written))
    with pytest.raises(
        SSETapeError, match="its stream is not gemini: it looks like anthropic-messages; nothing written"
    ):
        convert(source, tmp_path / "g.toml", into="openai-chat", origin="gemini")
    assert not (tmp_path / "g.toml").exists()
