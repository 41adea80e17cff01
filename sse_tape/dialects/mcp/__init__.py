"""The Model Context Protocol over Streamable HTTP: `MCP`, its `jsonrpc` matcher and `ClientIds` responder."""

from __future__ import annotations

from .dialect import MCP, is_mcp_request
from .jsonrpc import ClientIds, jsonrpc

__all__ = ["MCP", "ClientIds", "is_mcp_request", "jsonrpc"]
