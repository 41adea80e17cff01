"""The `sse_tape` fixture's async twin, registered by the plugin when pytest-asyncio is there.

`async_sse_tape` runs the mock server in the test's own event loop (no
thread), for async tests with `openai.AsyncOpenAI` or any asyncio client.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from .fixtures import check_test, per_test
from .tape import SSETape, open_tape

__all__ = ["async_sse_tape"]


@pytest_asyncio.fixture
async def async_sse_tape(request: pytest.FixtureRequest, _sse_tape_variant: object) -> AsyncIterator[SSETape]:
    """Like `sse_tape`, with the server in the test's event loop."""
    if not inspect.iscoroutinefunction(request.function):
        # Its server would wait for a loop that the test never gives back: the client would hang.
        pytest.fail("sse-tape: async_sse_tape serves async tests; a test that is not async takes sse_tape", False)
    tape = open_tape(request, "function", threaded=False)
    async with tape.server:
        with per_test(request, tape, "async_sse_tape"):
            yield tape
        await tape.recorded()
    check_test(request, {"async_sse_tape": tape}, own=True)
