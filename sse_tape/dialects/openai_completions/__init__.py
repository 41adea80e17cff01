"""`openai-completions`: POST /v1/completions with `"stream": true`.

Unnamed `text_completion` chunks whose `choices[0].text` carries the new
text, with per-token `logprobs` (`tokens`, `text_offset`, `token_logprobs`,
`top_logprobs`) when asked for; a final chunk with `finish_reason`; a usage
chunk when `stream_options.include_usage` is set; `data: [DONE]`. Errors are
framed as in openai-chat. Reasoning, refusals and tool calls have no place
here and are dropped. Without `"stream": true` the answer is one
`text_completion` object.
"""

from .dialect import OpenAICompletions

__all__ = ["OpenAICompletions"]
