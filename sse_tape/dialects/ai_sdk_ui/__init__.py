"""`ai-sdk-ui`: the Vercel AI SDK's UI message stream, as a chat route sends it to `useChat`.

A route answers with the `x-vercel-ai-ui-message-stream: v1` header and
unnamed SSE events, each one part as JSON (`data: {"type": "text-delta",
...}`, as the `ai` package's `JsonToSseTransformStream` writes them):
`start`, then steps (`start-step`, `finish-step`), text and reasoning parts
(`text-start`, `text-delta`..., `text-end` under one `id`), tool calls
(`tool-input-start`, `tool-input-delta`..., `tool-input-available`, then
`tool-output-available` or `tool-output-error`), sources, files and `data-*`
parts; `finish`, and last `data: [DONE]`. A failure is `{"type": "error",
"errorText": ...}`. It has no path of its own (each application names its
route), so a recording is known by its header or its first event. It is a
`Protocol`, not a `Generation`: replayed, faulted and checked.
See https://ai-sdk.dev/docs/ai-sdk-ui/stream-protocol.
"""

from .dialect import AISDKUI

__all__ = ["AISDKUI"]
