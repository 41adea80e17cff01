"""`ag-ui`: the Agent-User Interaction Protocol's event stream, as an agent server sends it to its UI.

An agent run streams typed events as unnamed SSE events of JSON
(`data: {"type": "RUN_STARTED", ...}`, as `ag_ui.encoder.EventEncoder` writes
them): `RUN_STARTED`, then text messages (`TEXT_MESSAGE_START`,
`TEXT_MESSAGE_CONTENT`..., `TEXT_MESSAGE_END`), tool calls (`TOOL_CALL_START`,
`TOOL_CALL_ARGS`..., `TOOL_CALL_END`), state (`STATE_SNAPSHOT`,
`STATE_DELTA`), steps and the rest, and last `RUN_FINISHED` or `RUN_ERROR`.
It has no path of its own (each application mounts its agent where it
likes), so a recording is known by its first event. It generates nothing in
sse-tape's sense: it is a `Protocol`, replayed, faulted and checked.
See https://docs.ag-ui.com/concepts/events.
"""

from .dialect import AGUI

__all__ = ["AGUI"]
