"""Connections in bounds: a deadline for every request head, for idleness and for a client that takes nothing
of its answer; a limit on how many are open at once, which idle and stalled connections give way to; and a
connection whose client has hung up closed even while the server has stopped reading it. And the socket they
come to when the server listens on every address (`dual_stack_socket`)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import weakref
from collections.abc import Callable
from typing import cast

__all__ = ["ConnectionGuard", "dual_stack_socket"]

#: How often the connections being answered whose reading aiohttp has paused are checked for a client gone.
_SWEEP = 1.0


class ConnectionGuard:
    """Keeps a server's connections in bounds.

    Wraps the server's protocol factory. A connection must deliver a whole
    request head within `request_timeout` of its first byte (or of opening,
    or, for a head begun while the answer before it played, of that answer's
    end), and may sit idle between requests for `keep_alive`; past either it
    is closed. The bytes of a body that its request's answer did not wait
    for, coming after it, are no next request (aiohttp drains them, for
    `request_timeout` at most). A head whose first bytes come in one read
    with the end of the body before it counts from its next bytes: until
    then, the connection is as an idle one. While a request is being answered
    there is no deadline: streams last as long as they last, as long as the
    client takes what it is sent.
    One that takes nothing of it for `send_timeout` (its socket's buffer full,
    and not one byte of it read since) is cut off (`stalled` counts them), so
    that a client that never reads holds nothing for longer.

    Beyond `max_connections`, a new connection takes the place of the one
    that gave way longest ago: a connection idle between requests (not one
    still taking in the body of a request answered without it, a 408's, whose
    client a close would meet with a reset), or one whose client has stopped
    reading its answer (`evicted` counts them); when
    there is none, it gets a 503 and is closed at once, so the descriptors it
    took are freed before the process runs out of them. Clients that never
    read cannot keep the others out.

    aiohttp stops reading a connection whose client sends request after
    request without waiting for the answers (HTTP pipelining); the system
    then tells the server nothing when that client hangs up, until its answer
    is written to again (which a paced stream may not do for minutes). Every
    `_SWEEP` seconds, the connections being answered and not read are asked
    whether their client reset them (what hanging up on an answer one has
    not read does), and closed if so.
    """

    def __init__(
        self,
        factory: Callable[[], asyncio.Protocol],
        *,
        request_timeout: float,
        keep_alive: float,
        max_connections: int,
        send_timeout: float,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.factory = factory
        self.request_timeout = request_timeout
        self.keep_alive = keep_alive
        self.max_connections = max_connections
        self.send_timeout = send_timeout
        self.log = log
        self.open: dict[asyncio.BaseTransport, _Guarded] = {}
        self.refused = 0
        """Connections turned away because too many were open."""
        self.stalled = 0
        """Connections cut off because their client took nothing of its answer for `send_timeout`."""
        self.evicted = 0
        """Idle or stalled connections closed to make room for a new one."""
        self._busy: set[_Guarded] = set()  # the connections whose request is being answered
        self._yielding: dict[_Guarded, None] = {}  # those that may give way to a new one, longest first
        self._cut: weakref.WeakSet[asyncio.BaseTransport] = weakref.WeakSet()  # clients cut off as stalled
        self._sweeper: asyncio.TimerHandle | None = None

    def __call__(self) -> asyncio.Protocol:
        return _Guarded(self)

    def begin(self, transport: asyncio.BaseTransport | None, body_read: Callable[[], bool]) -> float | None:
        """A request on this connection is being answered (until `end`): when it arrived (the last bytes it came
        in before its answer began), on the event loop's clock; None when that is not known (a request sent
        behind another, whose bytes came while that one was answered). `body_read` says whether all of the
        request's body has come: bytes that come after it are the next request's."""
        guarded = self.open.get(transport) if transport is not None else None
        if guarded is None:
            return None
        arrived, guarded.arrived = guarded.arrived, None
        guarded.body_read = body_read
        guarded.set_busy(True)
        return arrived

    def end(self, transport: asyncio.BaseTransport | None) -> None:
        """The answer to the request on this connection is over."""
        guarded = self.open.get(transport) if transport is not None else None
        if guarded is not None:
            guarded.set_busy(False)

    @property
    def idle_or_stalled(self) -> int:
        """How many open connections a new one may take the place of: idle between requests, or whose client
        has stopped reading its answer."""
        return len(self._yielding)

    def cut_off(self, transport: asyncio.BaseTransport | None) -> bool:
        """Whether this connection was closed because its client took nothing of its answer (for
        `send_timeout`, or when it gave way to a new connection): the client did not hang up."""
        return transport is not None and transport in self._cut

    def close(self) -> None:
        """The server stops: no more sweeps."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None

    def _admit(self) -> bool:
        """Whether a new connection may open: there is room, or one that may give way made some."""
        if len(self.open) < self.max_connections:
            return True
        if not self._yielding:
            return False
        oldest = next(iter(self._yielding))
        self.evicted += 1
        if self.log is not None and self.evicted == 1:
            self.log(
                f"{self.max_connections} connections open: closing idle ones, and those whose clients read "
                "nothing, to make room for new ones"
            )
        oldest.cut(stalled=oldest.paused_at is not None)
        return True

    def _swept(self, guarded: _Guarded) -> None:
        """A connection is being answered: sweep the answered ones from now on."""
        self._busy.add(guarded)
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(_SWEEP, self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        for guarded in [g for g in self._busy if g.gone()]:
            guarded.cut(stalled=False)  # as if the system had said so: the client is gone
        if self._busy:
            self._sweeper = asyncio.get_running_loop().call_later(_SWEEP, self._sweep)

    def _note_stalled(self, transport: asyncio.BaseTransport) -> None:
        self._cut.add(transport)


_TOO_MANY = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 27\r\nconnection: close\r\n\r\nsse-tape: too many clients\n"


class _Guarded(asyncio.Protocol):
    """One connection: the real protocol inside, and the deadlines it is held to.

    One timer serves the deadlines of heads and idleness. It is set to fire by
    the deadline, and by one request timeout or keep-alive (the shorter) from
    when it is set, so that it fires in time for any later deadline too; when
    it fires before the deadline it sets itself again. A connection answering
    request after request moves its deadline on each and sets no timer.

    Another timer runs while the socket's buffer is full (writing paused): at
    each `send_timeout`, a buffer that has not shrunk since means the client
    read nothing meanwhile.
    """

    __slots__ = (
        "arrived",
        "body_read",
        "deadline",
        "guard",
        "heard",
        "idle",
        "inner",
        "loop",
        "paused_at",
        "stall_timer",
        "timer",
        "transport",
        "unsent",
    )  # one for every open connection

    def __init__(self, guard: ConnectionGuard) -> None:
        self.guard = guard
        self.loop = asyncio.get_running_loop()  # made by the listener, on its loop
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.deadline: float | None = None
        """When the connection is closed, on the event loop's clock; None while a request is being answered."""
        self.idle = False
        self.paused_at: float | None = None
        """When writing was paused (the socket's buffer full), on the event loop's clock; None: it is not."""
        self.unsent = 0  # what the buffer held when the stall timer was last set
        self.stall_timer: asyncio.TimerHandle | None = None
        self.arrived: float | None = None
        """When bytes last came while no request was being answered (see `ConnectionGuard.begin`)."""
        self.body_read: Callable[[], bool] | None = None
        """Whether the body of the request being answered has all come (see `ConnectionGuard.begin`); after its
        answer, while that body is still coming."""
        self.heard = False
        """The next request's head began while a request was being answered."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream's transport (uvloop's is one too, though not of asyncio's class).
        self.transport = transport = cast(asyncio.Transport, transport)
        guard = self.guard
        if not guard._admit():
            guard.refused += 1
            if guard.log is not None and guard.refused == 1:
                guard.log(f"{guard.max_connections} connections open: turning more away with 503 until some close")
            transport.write(_TOO_MANY)
            transport.close()
            return
        guard.open[transport] = self
        self.inner = guard.factory()
        self.inner.connection_made(transport)
        self._close_at(self.loop.time() + guard.request_timeout)

    def data_received(self, data: bytes) -> None:
        inner = self.inner
        if inner is None:
            return
        if self.deadline is not None:  # no request is being answered: these bytes are (part of) the next one
            self.arrived = now = self.loop.time()
            if self.body_read is not None:  # or of the body of one answered without it, which aiohttp drains
                inner.data_received(data)
                if self.body_read():  # bytes past its end, in the same read, leave the next head idle
                    self.body_read = None
                    self._yield()
                return
            if self.idle:  # the first bytes of the next request: its head has the request deadline
                self.idle = False
                self._yield()
                self._close_at(now + self.guard.request_timeout)
        elif self.body_read is not None and self.body_read():  # past the answered request's body: the next head
            self.heard = True
        inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self.timer, self.stall_timer):
            if timer is not None:
                timer.cancel()
        guard = self.guard
        guard._busy.discard(self)
        guard._yielding.pop(self, None)
        if self.inner is not None and self.transport is not None:
            guard.open.pop(self.transport, None)
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.inner is None:
            return
        self.inner.pause_writing()
        loop = asyncio.get_running_loop()
        self.paused_at = loop.time()
        self._yield()
        self._watch_stall(loop)

    def resume_writing(self) -> None:
        if self.inner is None:
            return
        self.paused_at = None
        if self.stall_timer is not None:
            self.stall_timer.cancel()
            self.stall_timer = None
        self._yield()
        self.inner.resume_writing()

    def set_busy(self, busy: bool) -> None:
        if busy:
            self.deadline = None  # a timer set already finds none when it fires, and lapses
            # Not idle, though no bytes came since the last answer: a request sent behind it (pipelined), read
            # then, is answered now, and the bytes of one more meanwhile start no deadline.
            self.idle = False
            self.guard._swept(self)
        else:
            self.guard._busy.discard(self)
            if self.body_read is not None and self.body_read():
                self.body_read = None  # kept while the body is still coming: an answer need not wait for it
            # A head begun while the answer played has the request deadline from the answer's end; a connection
            # that said nothing meanwhile is idle.
            heard, self.heard = self.heard, False
            self.idle = not heard
            timeout = self.guard.request_timeout if heard else self.guard.keep_alive
            self._close_at(self.loop.time() + timeout)
        self._yield()

    def gone(self) -> bool:
        """Whether the client is known to have hung up on a connection that is not being read (the system has
        an error pending on its socket: the client reset it)."""
        transport = self.transport
        if transport is None or transport.is_closing() or transport.is_reading():
            return False  # one being read hears of it at once
        sock = transport.get_extra_info("socket")
        try:
            return sock is not None and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0
        except OSError:
            return True

    def cut(self, *, stalled: bool) -> None:
        """Close the connection now, whatever is still unsent; `stalled`: because its client takes nothing."""
        transport = self.transport
        if transport is None:
            return
        if stalled:
            self.guard._note_stalled(transport)
        self.guard._yielding.pop(self, None)
        self.guard._busy.discard(self)
        if self.inner is not None:
            self.guard.open.pop(transport, None)  # room for another at once: the socket closes in a moment
        transport.abort()

    def _yield(self) -> None:
        """Note whether this connection may give way to a new one: idle (and not still taking in the body of the
        request answered last, which a close would meet with a reset that can cost its client the answer), or
        its client reads nothing."""
        if not ((self.idle and self.body_read is None) or self.paused_at is not None):
            self.guard._yielding.pop(self, None)
        elif self not in self.guard._yielding and self.inner is not None:
            self.guard._yielding[self] = None

    def _watch_stall(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self.transport is not None
        self.unsent = self.transport.get_write_buffer_size()
        self.stall_timer = loop.call_later(self.guard.send_timeout, self._stall_check)

    def _stall_check(self) -> None:
        self.stall_timer = None
        transport = self.transport
        if self.paused_at is None or transport is None or self.inner is None:
            return
        if transport.get_write_buffer_size() < self.unsent:  # the client read some meanwhile
            self._watch_stall(asyncio.get_running_loop())
            return
        guard = self.guard
        guard.stalled += 1
        if guard.log is not None and guard.stalled == 1:
            guard.log(
                f"a client took nothing of its answer for {guard.send_timeout:g} s: cutting such clients off "
                "(--send-timeout)"
            )
        self.cut(stalled=True)

    def _close_at(self, deadline: float) -> None:
        """Close the connection at `deadline` (on the event loop's clock), unless a request is being answered
        by then."""
        self.deadline = deadline
        if self.timer is not None and self.timer.when() > deadline:
            self.timer.cancel()  # it would fire too late (never so while the step below holds)
            self.timer = None
        if self.timer is None:
            self._set_timer(self.loop)

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
        elif self.transport.get_write_buffer_size():
            # What the last answer left unsent waits on a client that has not read it since: closing would
            # wait for it too, holding the descriptor.
            self.cut(stalled=False)
        else:
            self.transport.close()  # a head that never finished, or a connection left idle


def dual_stack_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket | None:
    """For `host` `::` (every address), a TCP socket bound to `port` that takes IPv4 connections besides IPv6
    ones (IPV6_V6ONLY off; asyncio would listen on IPv6 alone); None for any other host. With `reuse_port`,
    other processes may bind the same port (`serve --workers`)."""
    try:
        if ipaddress.ip_address(host.strip("[]")) != ipaddress.IPv6Address("::"):
            return None
    except ValueError:  # a name
        return None
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", port))
    except OSError:
        sock.close()
        raise
    return sock
