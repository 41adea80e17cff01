from __future__ import annotations

import re

import pytest

from sse_tape import Chunk, ConfigError, PaceMode, Pacing, Response, encode_event

RESPONSE = Response(
    chunks=(
        Chunk(0.5, encode_event("a")),
        Chunk(0.6, encode_event("b") + encode_event("c")),
        Chunk(0.9, encode_event("d")),
    ),
    duration=2.0,
)


@pytest.mark.parametrize(
    ("spec", "offsets", "end"),
    [
        ("recorded", [0.5, 0.6, 0.9], 2.0),
        ("x2", [0.25, 0.3, 0.45], 1.0),
        ("x0.5", [1.0, 1.2, 1.8], 4.0),
        ("instant", [0.0, 0.0, 0.0], 0.0),
        # A fixed gap or rate paces the chunks; the 1.1 s of silence before the end is kept.
        ("20ms", [0.0, 0.02, 0.04], 1.14),
        ("1.5s", [0.0, 1.5, 3.0], 4.1),
        # Events before each chunk: 0, 1 (a), 3 (a, b, c).
        ("tps:10", [0.0, 0.1, 0.3], 1.4),
    ],
)
def test_schedules(spec: str, offsets: list[float], end: float) -> None:
    got, got_end = Pacing.parse(spec).schedule(RESPONSE)
    assert got == pytest.approx(offsets)
    assert got_end == pytest.approx(end)


def test_parse_modes() -> None:
    assert Pacing.parse("x4") == Pacing(PaceMode.SCALED, 4.0)
    assert Pacing.parse("tps:40") == Pacing(PaceMode.TPS, 40.0)
    assert Pacing.parse("250ms", jitter="10%", seed=7) == Pacing(PaceMode.GAP, 0.25, 0.1, True, 7)


@pytest.mark.parametrize("spec", ["fast", "x0", "x-1", "xnan", "xinf", "tps:0", "tps:inf", "tps:abc", "20 parsecs", ""])
def test_bad_pace_names_the_choices(spec: str) -> None:
    with pytest.raises(ConfigError, match=r"pace|number must be greater than 0"):
        Pacing.parse(spec)


@pytest.mark.parametrize("jitter", ["lots", "5", "-5ms", "x%", "nan%", "inf%", "-10%"])
def test_bad_jitter_is_named_in_its_error(jitter: str) -> None:
    # The pytest marker and `serve --jitter` print this line alone: it must say that the jitter is wrong.
    with pytest.raises(ConfigError, match=rf"^jitter {re.escape(repr(jitter))}: "):
        Pacing.parse("recorded", jitter=jitter)


def test_jitter_is_reproducible_per_seed_and_key() -> None:
    a = Pacing.parse("recorded", jitter="50ms", seed=1).schedule(RESPONSE, key="k")
    b = Pacing.parse("recorded", jitter="50ms", seed=1).schedule(RESPONSE, key="k")
    other_seed = Pacing.parse("recorded", jitter="50ms", seed=2).schedule(RESPONSE, key="k")
    other_key = Pacing.parse("recorded", jitter="50ms", seed=1).schedule(RESPONSE, key="k2")
    assert a == b
    assert a != other_seed
    assert a != other_key


def test_jitter_keeps_offsets_in_order_and_within_bounds() -> None:
    chunks = tuple(Chunk(i * 0.01, b"data: x\n\n") for i in range(200))
    offsets, _ = Pacing.parse("recorded", jitter="30ms", seed=3).schedule(Response(chunks=chunks), key="k")
    gaps = [b - a for a, b in zip([0.0, *offsets], offsets, strict=False)]
    assert all(g >= 0 for g in gaps)
    assert all(g <= 0.01 + 0.03 + 1e-9 for g in gaps)
    assert any(g == 0 for g in gaps)  # a gap of 10 ms moved by up to -30 ms is clamped at 0


def test_relative_jitter_scales_with_each_gap() -> None:
    response = Response(chunks=(Chunk(1.0, b"x"), Chunk(1.01, b"y")))
    offsets, _ = Pacing.parse("recorded", jitter="10%", seed=0).schedule(response, key="k")
    assert 0.9 <= offsets[0] <= 1.1
    assert 0.009 <= offsets[1] - offsets[0] <= 0.011
