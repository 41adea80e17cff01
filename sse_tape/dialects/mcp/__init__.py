"""The Model Context Protocol over Streamable HTTP: `MCP`, its `jsonrpc` matcher and `Sessions` responder."""

from __future__ import annotations

from .dialect import MCP, is_mcp_request
from .jsonrpc import jsonrpc
from .session import Sessions

__all__ = ["MCP", "Sessions", "is_mcp_request", "jsonrpc"]
