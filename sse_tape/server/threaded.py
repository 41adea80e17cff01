"""Running an async server in a thread of its own, for synchronous code (`serve`, `recording`, the pytest
plugin)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["run_in_thread"]

ServerT = TypeVar("ServerT", bound=contextlib.AbstractAsyncContextManager[Any])


@contextlib.contextmanager
def run_in_thread(server: ServerT) -> Iterator[ServerT]:
    """Enter `server` (any async context manager) in a background thread with its own event loop.

    It runs until the block ends; then it is exited in that thread, which ends.
    """
    ready: Future[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = Future()

    async def main() -> None:
        stop = asyncio.Event()
        async with server:
            ready.set_result((asyncio.get_running_loop(), stop))
            await stop.wait()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                raise

    thread = threading.Thread(target=run, name=f"sse-tape-{type(server).__name__}", daemon=True)
    thread.start()
    loop, stop = ready.result()
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join()
