"""What Python allocated at its peak while a block ran, whether or not tracemalloc already traced the process.

Run with `PYTHONTRACEMALLOC` set (the way to make a machine slow for the tests), tracemalloc traces from the
start: `tracemalloc.start()` does nothing then, the peak is the whole process's, and `tracemalloc.stop()` would
end the tracing for every test after. `peak_allocated` counts from the block's start and leaves tracing as it
found it.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def peak_allocated() -> Iterator[Callable[[], int]]:
    """Trace allocations while the block runs; yields a function that gives the most bytes they held at once,
    over what was allocated when the block began: so far inside the block, in all once it has ended."""
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    ended: list[int] = []

    def peak() -> int:
        return ended[0] if ended else tracemalloc.get_traced_memory()[1] - before

    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        yield peak
    finally:
        ended.append(peak())
        if not tracing:
            tracemalloc.stop()
