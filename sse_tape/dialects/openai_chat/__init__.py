"""`openai-chat`: POST /v1/chat/completions with `"stream": true`.

As OpenAI, llama.cpp"s and llama-cpp-python"s servers and hosted routers
stream it: unnamed events of `chat.completion.chunk` JSON; a role frame
first; content, reasoning (`reasoning_content`), refusal and tool-call
deltas; a chunk with `finish_reason`; a usage chunk when
`stream_options.include_usage` is set; then `data: [DONE]`. A mid-stream
error is an `event: error` carrying `{"error": {...}}`, then `[DONE]`.
Without `"stream": true` the answer is one `chat.completion` object.
"""

from .dialect import OpenAIChat

__all__ = ["OpenAIChat"]
