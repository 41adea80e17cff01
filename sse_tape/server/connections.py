"""Connections in bounds: a deadline for every request head and for idleness, and a limit on how many are
open at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["ConnectionGuard"]


class ConnectionGuard:
    """Keeps a server's connections in bounds: a deadline for every request head and for idleness,
    and a limit on how many are open at once.

    Wraps the server's protocol factory. A connection must deliver a whole
    request head within `request_timeout` of its first byte (or of opening),
    and may sit idle between requests for `keep_alive`; past either it is
    closed. While a request is being answered there is no deadline: streams
    last as long as they last. A connection beyond `max_connections` gets a
    503 and is closed at once, so the descriptors it took are freed before
    the process runs out of them.
    """

    def __init__(
        self,
        factory: Callable[[], asyncio.Protocol],
        *,
        request_timeout: float,
        keep_alive: float,
        max_connections: int,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.factory = factory
        self.request_timeout = request_timeout
        self.keep_alive = keep_alive
        self.max_connections = max_connections
        self.log = log
        self.open: dict[asyncio.BaseTransport, _Guarded] = {}
        self.refused = 0
        """Connections turned away because too many were open."""

    def __call__(self) -> asyncio.Protocol:
        return _Guarded(self)

    def busy(self, transport: asyncio.BaseTransport | None, busy: bool) -> None:
        """A request on this connection is being answered (True), or its answer is over (False)."""
        guarded = self.open.get(transport) if transport is not None else None
        if guarded is not None:
            guarded.set_busy(busy)


_TOO_MANY = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 27\r\nconnection: close\r\n\r\nsse-tape: too many clients\n"


class _Guarded(asyncio.Protocol):
    """One connection: the real protocol inside, and the deadline it is held to.

    One timer serves every deadline. It is set to fire by the deadline, and
    by one request timeout or keep-alive (the shorter) from when it is set,
    so that it fires in time for any later deadline too; when it fires
    before the deadline it sets itself again. A connection answering
    request after request moves its deadline on each and sets no timer.
    """

    def __init__(self, guard: ConnectionGuard) -> None:
        self.guard = guard
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.deadline: float | None = None
        """When the connection is closed, on the event loop's clock; None while a request is being answered."""
        self.idle = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        guard = self.guard
        if len(guard.open) >= guard.max_connections:
            guard.refused += 1
            if guard.log is not None and guard.refused == 1:
                guard.log(f"{guard.max_connections} connections open: turning more away with 503 until some close")
            transport.write(_TOO_MANY)
            transport.close()
            return
        guard.open[transport] = self
        self.inner = guard.factory()
        self.inner.connection_made(transport)
        self._close_in(guard.request_timeout)

    def data_received(self, data: bytes) -> None:
        if self.inner is None:
            return
        if self.idle:  # the first bytes of the next request: its head has the request deadline
            self.idle = False
            self._close_in(self.guard.request_timeout)
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.inner is not None and self.transport is not None:
            self.guard.open.pop(self.transport, None)
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def set_busy(self, busy: bool) -> None:
        if busy:
            self.deadline = None  # a timer set already finds none when it fires, and lapses
        else:
            self.idle = True
            self._close_in(self.guard.keep_alive)

    def _close_in(self, seconds: float) -> None:
        """Close the connection `seconds` from now, unless a request is being answered by then."""
        loop = asyncio.get_running_loop()
        self.deadline = loop.time() + seconds
        if self.timer is not None and self.timer.when() > self.deadline:
            self.timer.cancel()  # it would fire too late (never so while the step below holds)
            self.timer = None
        if self.timer is None:
            self._set_timer(loop)

    def _set_timer(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self.deadline is not None
        step = min(self.guard.request_timeout, self.guard.keep_alive)
        self.timer = loop.call_at(min(self.deadline, loop.time() + step), self._expire)

    def _expire(self) -> None:
        self.timer = None
        if self.deadline is None or self.transport is None:
            return  # a request is being answered: it sets a deadline again when it is over
        loop = asyncio.get_running_loop()
        if loop.time() < self.deadline:
            self._set_timer(loop)  # the deadline moved on since this timer was set
        else:
            self.transport.close()  # a head that never finished, or a connection left idle
