"""`ollama-chat` and `ollama-generate`: Ollama's native API, POST /api/chat and POST /api/generate.

As Ollama's server streams them (written from its API documentation and the
official `ollama` Python client, which the tests run against them): newline-
delimited JSON (`application/x-ndjson`, `framing.NDJSON`), one object a line,
each with `model`, `created_at` and `done`. A chat line carries a `message`
(`role: assistant`, a piece of `content`, of `thinking`, or whole
`tool_calls`: `{"function": {"name", "arguments": {...}}}`, the arguments an
object and never in pieces); a generate line carries a piece of `response`
(or `thinking`). The last line has `"done": true`, the `done_reason` (`stop`,
`length`) and the stats: `total_duration`, `load_duration`,
`prompt_eval_duration` and `eval_duration` in nanoseconds,
`prompt_eval_count` and `eval_count` in tokens (and generate's `context`).
A request streams unless it says `"stream": false`, which gets that last
line whole, as one JSON object. An error before the stream is `{"error":
"..."}` with its status; during the stream, the line `{"error": "..."}`,
after which nothing comes. The model list is `GET /api/tags`.
"""

from .dialect import OllamaChat, OllamaGenerate

__all__ = ["OllamaChat", "OllamaGenerate"]
