"""The tests' own servers (the upstream stand-in, the browser tests' page server) in a thread of their own, for
tests that are not coroutines. sse-tape's servers have their public ways for that (`serve`, `recording`); these
stand-ins do not lean on sse-tape's internals, so that a fault there cannot hide behind them."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import TypeVar

S = TypeVar("S", bound=AbstractAsyncContextManager[object])


@contextmanager
def in_a_thread(server: S) -> Iterator[S]:
    """Enter `server` in a thread with an event loop of its own; exit it there when the block ends."""
    entered: Future[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = Future()

    async def main() -> None:
        stop = asyncio.Event()
        async with server:
            entered.set_result((asyncio.get_running_loop(), stop))
            await stop.wait()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:
            if entered.done():
                raise
            entered.set_exception(exc)  # it never started: the test says why

    thread = threading.Thread(target=run, name=f"test-{type(server).__name__}", daemon=True)
    thread.start()
    loop, stop = entered.result()
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join()
