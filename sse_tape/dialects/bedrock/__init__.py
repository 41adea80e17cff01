"""`bedrock-converse`: POST /model/{modelId}/converse-stream, and /converse without a stream.

As Amazon Bedrock's Converse API streams it (written from botocore's model of
`bedrock-runtime` and its event stream parser; no network reaches AWS here):
AWS's binary event stream (`framing.EVENT_STREAM`), each message named by its
`:event-type` with a JSON payload. `messageStart {role}`; for each content
block, in turn, `contentBlockStart` (a tool use's `toolUseId` and `name`; a
text or reasoning block has none and opens with its first delta), its
`contentBlockDelta`s (`text`, `reasoningContent` `text` or `signature`, a
tool use's `input` as JSON text in pieces) and `contentBlockStop`, each with
its `contentBlockIndex`; `messageStop {stopReason}`; then `metadata` with the
`usage` and the `metrics` (`latencyMs`). A failure mid-stream is an exception
message (`:message-type: exception`, `:exception-type: throttlingException`,
`{"message": ...}`), and nothing follows it. The model is named in the path,
and the path chooses the stream: `/converse` answers with one
`ConverseResponse`. An error before the stream is its status, `{"message":
...}` and the exception's name in the `x-amzn-ErrorType` header.

`bedrock-invoke`: POST /model/{modelId}/invoke-with-response-stream, and
/invoke without a stream, for Anthropic's models (`anthropic.claude-*`): the
same event stream, each message a `chunk` whose payload `{"bytes": ...}` is
the base64 of one of the Messages API's stream events, which the
`anthropic-messages` dialect reads and writes; Bedrock adds
`amazon-bedrock-invocationMetrics` to `message_stop`. Its exceptions and
errors are the Converse API's (and `modelTimeoutException`). `/invoke`
answers with the Messages API's message.
"""

from .dialect import BedrockConverse
from .invoke import BedrockInvoke

__all__ = ["BedrockConverse", "BedrockInvoke"]
