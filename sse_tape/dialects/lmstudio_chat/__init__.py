"""`lmstudio-chat`: LM Studio"s POST /api/v1/chat with `"stream": true`.

Named events whose data repeats the name in `type`: `chat.start`; optional
`model_load.start` / `.progress` / `.end`; `prompt_processing.start` /
`.progress` / `.end`; blocks of `reasoning.start` / `.delta` / `.end` and
`message.start` / `.delta` / `.end`; tool calls, which LM Studio runs itself
(tools of plugins and MCP servers), as `tool_call.start`,
`tool_call.arguments` (the whole arguments object at once) and
`tool_call.success` (with the tool"s output) or `tool_call.failure`; an
`error`; and always last `chat.end`, whose `result` aggregates the output and
the stats, also after an error. Without `"stream": true` the answer is that
result alone.
"""

from .codec import arguments_text
from .dialect import LMStudioChat

__all__ = ["LMStudioChat", "arguments_text"]
