"""`anthropic-messages`: Anthropic"s POST /v1/messages with `"stream": true`.

Named events whose data repeats the name in `type`: `message_start`, with
the message"s envelope (id, model, usage so far, no content); then each
content block in turn, indexed from 0: `content_block_start` with the block
(`text`, `thinking`, `tool_use`, ...), its `content_block_delta`s
(`text_delta`; `thinking_delta`s then one `signature_delta`;
`input_json_delta`s, pieces of a tool call"s JSON input) and
`content_block_stop`; a `ping` after the first block opens (and any number
more); `message_delta` with the `stop_reason` and the usage; last
`message_stop`. A failure mid-stream is an `error` event
(`{"type": "error", "error": {"type": "overloaded_error", ...}}`) and
nothing follows it. An error before the stream is the same object as a JSON
body (429 `rate_limit_error`, 529 `overloaded_error`, ...). Without
`"stream": true` the answer is the `Message` that the events build.

A refusal of the API"s streaming classifiers is a stop, not a text: its
`stop_reason` is `refusal`, with `stop_details.explanation`. The neutral
events" refusal text is that explanation, so it reaches the wire with the
`message_delta`.
"""

from .dialect import AnthropicMessages

__all__ = ["AnthropicMessages"]
