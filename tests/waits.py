"""Waiting for what the tests cannot await (a count a server keeps, an entry in its journal, bytes on a socket):
a condition checked until it holds.

The timeout is a safety net, generous on purpose: it turns a hang into a failure that says what never came. It
says nothing of how soon anything should happen; a busy machine may take long.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

SAFETY_NET = 60.0
"""Seconds before a wait gives up."""

_POLL = 0.01


def until(condition: Callable[[], T], what: str = "the condition") -> T:
    """Check `condition()` until it gives something true, and return that; fail, naming `what`, after the net."""
    deadline = time.monotonic() + SAFETY_NET
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {SAFETY_NET:g} s for {what}, which never came")
        time.sleep(_POLL)
    return result


async def auntil(condition: Callable[[], T], what: str = "the condition") -> T:
    """`until` in a coroutine: the event loop runs on while it waits."""
    try:
        async with asyncio.timeout(SAFETY_NET):
            while not (result := condition()):  # noqa: ASYNC110 (what is awaited signals nothing)
                await asyncio.sleep(_POLL)
    except TimeoutError:
        raise AssertionError(f"waited {SAFETY_NET:g} s for {what}, which never came") from None
    return result
