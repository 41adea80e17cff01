"""`openai-responses`: POST /v1/responses with `"stream": true`.

Named events, each carrying its `type` and a `sequence_number` counting from
0: `response.created`, `response.in_progress`, then for each output item
`response.output_item.added`, its content (`response.content_part.added`,
`response.output_text.delta`..., `response.output_text.done`,
`response.content_part.done`; or `response.function_call_arguments.delta`...
and `.done`; or reasoning and refusal text), `response.output_item.done`, and
last `response.completed` (or `response.incomplete`) with the whole response
and its usage. A failure is `response.failed` with the error. The gateway in
the seeds then sends `data: [DONE]`; OpenAI"s own API does not, so a stream
without it is not faulted. Without `"stream": true` the answer is the
`Response` object that `response.completed` carries.
"""

from .dialect import OpenAIResponses

__all__ = ["OpenAIResponses"]
