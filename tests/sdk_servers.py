"""The protocol SDKs' own servers, for the tests that record them: an ASGI app served by uvicorn on a free
loopback port (`on_loopback`), and the official `mcp` SDK's server with the tools the MCP tests call
(`mcp_tools`) and an event store for it to resume streams from (`Events`)."""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import uvicorn
from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from waits import until


@contextlib.contextmanager
def on_loopback(app: Any, what: str) -> Iterator[str]:
    """`app`, an ASGI application, served on a free loopback port in a thread while the block runs: its base URL.
    `what` names it in the error of a server that does not start."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    until(lambda: server.started, f"{what} to start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()


def mcp_tools(name: str = "recorded") -> MCPServer:
    """An `MCPServer` with a tool answered at once (`add`) and one that reports each step as progress (`count`);
    a test adds its own to it."""
    server = MCPServer(name)

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    async def count(n: int, ctx: Context) -> str:
        """Count to n, reporting each step as progress."""
        for i in range(n):
            await ctx.report_progress(i + 1, n, f"step {i + 1}")
        return f"counted {n}"

    return server


class Events(EventStore):
    """Every event in memory, each under an id of its own, as the SDK's example store keeps them."""

    def __init__(self) -> None:
        self.events: list[tuple[StreamId, EventId, types.JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: StreamId, message: types.JSONRPCMessage | None) -> EventId:
        event_id = uuid.uuid4().hex
        self.events.append((stream_id, event_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        at = next((n for n, (_, i, _) in enumerate(self.events) if i == last_event_id), None)
        if at is None:
            return None
        stream = self.events[at][0]
        for s, i, message in self.events[at + 1 :]:
            if s == stream and message is not None:
                await send_callback(EventMessage(message, i))
        return stream
