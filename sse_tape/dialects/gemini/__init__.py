"""`gemini`: POST …/models/{model}:streamGenerateContent?alt=sse, and :generateContent without a stream.

As Google"s Gemini API streams it (written from its API reference and the
parser of the official google-genai SDK; no network reaches Google here):
unnamed events, `data: ` and a whole `GenerateContentResponse` as JSON, CRLF
line ends, and no terminal frame. Each chunk holds one candidate whose
`content.parts` carry the chunk"s text, its thought summaries (`"thought":
true`, sent when the request sets `thinkingConfig.includeThoughts`) and
function calls, each whole (`functionCall` with a `name` and its `args` as an
object, never in pieces); the last has the `finishReason`. `usageMetadata`
(running counts, final on the last chunk), `modelVersion` and `responseId`
come with the chunks. The model is named in the path, and the path chooses
the stream: `:generateContent` answers with one `GenerateContentResponse`.
An error, before the stream or in it, is `{"error": {"code", "message",
"status"}}` (429 `RESOURCE_EXHAUSTED`, 503 `UNAVAILABLE`); in a stream it is
the last event. Without `alt=sse` the same chunks come as one JSON array,
written chunk by chunk (`framing.JSON_ARRAY`; an error is its last element).
"""

from .dialect import Gemini

__all__ = ["Gemini"]
