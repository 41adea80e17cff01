"""The figures that sum up a set of timings: a percentile and the median, as `show`, the probe's report and the
benchmarks print them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

__all__ = ["median", "percentile"]


def percentile(values: Sequence[float], q: float) -> float:
    """The value below which a share `q` of `values` lie: the one at the rank nearest to `q` of the way from the
    least to the greatest, the greater of two as near (so always a value that occurred: of an even count, p50 is
    the upper middle); NaN for none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.floor(q * (len(ordered) - 1) + 0.5))]


def median(values: Sequence[float]) -> float:
    """The median; NaN for none."""
    return statistics.median(values) if values else float("nan")
