"""The figures `show`, the probe's report and the benchmarks sum timings up with."""

from __future__ import annotations

import math

import pytest

from sse_tape.stats import median, percentile


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        pytest.param([7.0], 0.99, 7.0, id="one value"),
        pytest.param([5.0, 1.0, 4.0, 2.0, 3.0], 0.5, 3.0, id="unsorted, the middle"),
        pytest.param([float(v) for v in range(1, 101)], 0.99, 99.0, id="p99 of 1..100, the rank nearest 98.01"),
        pytest.param([float(v) for v in range(1, 101)], 1.0, 100.0, id="p100, the greatest"),
        pytest.param([float(v) for v in range(1, 101)], 0.0, 1.0, id="p0, the least"),
        pytest.param([10.0, 20.0, 30.0, 40.0], 0.9, 40.0, id="never between two values"),
        pytest.param([1.0, 2.0, 3.0, 4.0], 0.5, 3.0, id="p50 of four, the upper middle"),
        pytest.param([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 0.5, 4.0, id="p50 of six, the upper middle too"),
    ],
)
def test_percentile_is_the_value_at_the_nearest_rank(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == expected


def test_no_values_have_no_percentile_and_no_median() -> None:
    assert math.isnan(percentile([], 0.5))
    assert math.isnan(median([]))


def test_median_of_an_even_count_lies_between_the_middle_two() -> None:
    assert median([1.0, 2.0, 3.0, 10.0]) == 2.5
