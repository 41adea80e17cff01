"""`BedrockInvoke`, the `bedrock-invoke` dialect: Amazon Bedrock's `InvokeModelWithResponseStream` for
Anthropic's models, whose inner events are the `anthropic-messages` dialect's, each wrapped in a `chunk`."""

from __future__ import annotations

import base64
import binascii
import random
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import quote, unquote

from ... import _json
from ...cassette import Interaction, Request
from ...framing import EVENT_STREAM, Framing, by_content_type
from ...sse import ServerSentEvent, SSEDecoder, encode_event
from ..anthropic_messages import AnthropicMessages
from ..encoder import Encoder
from ..events import Error, Event, Usage
from ..generation import Generation, Prompt, whole
from ..protocol import Checker, Violation, to_json
from .codec import EXCEPTION_STATUS, BedrockErrors, exception_error, exception_of

__all__ = ["INVOKE_PATH", "BedrockInvoke", "InvokeEncoder", "unwrapped"]

_STREAM = "/invoke-with-response-stream"

INVOKE_PATH = re.compile(r"/model/(?P<model>[^/]+)/(?P<method>invoke-with-response-stream|invoke)$")
"""A path the API answers: the model, then the call (`invoke-with-response-stream`, or `invoke` for no stream)."""

_VERSION = "bedrock-2023-05-31"
"""The `anthropic_version` a request body for an Anthropic model on Bedrock names."""

_METRICS = "amazon-bedrock-invocationMetrics"
"""The field Bedrock adds to the last inner event (`message_stop`): the invocation's counts and latencies."""

_EXCEPTIONS = {**EXCEPTION_STATUS, "modelTimeoutException": 408}
"""The exceptions an `InvokeModelWithResponseStream` answer may end with (botocore's `ResponseStream`): the
Converse stream's, and a model's timeout."""

_DEFAULT_MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"

_MESSAGES = AnthropicMessages()
"""The Messages API's dialect, which reads and writes the events inside the chunks."""


def _inner(sse: ServerSentEvent) -> ServerSentEvent | None:
    """The model's own event a `chunk` carries, named by its `type`; None for another message, or a chunk
    that carries no base64 JSON object."""
    if sse.event != "chunk":
        return None
    try:
        obj = _json.parse(sse.data, max_depth=None)
        raw = obj.get("bytes") if isinstance(obj, dict) else None
        text = base64.b64decode(raw, validate=True).decode() if isinstance(raw, str) else None
        inner = _json.parse(text, max_depth=None) if text is not None else None
    except (ValueError, binascii.Error):
        return None
    if not isinstance(inner, dict):
        return None
    return ServerSentEvent(data=text or "", event=str(inner.get("type", "")))


def unwrapped(events: Sequence[ServerSentEvent]) -> tuple[list[ServerSentEvent], list[int]]:
    """The model's own events the `chunk`s of a stream carry, and the position of each one's chunk."""
    inner, at = [], []
    for i, sse in enumerate(events):
        found = _inner(sse)
        if found is not None:
            inner.append(found)
            at.append(i)
    return inner, at


def _chunk(inner: ServerSentEvent) -> bytes:
    """A `chunk` carrying a model's event as base64 (`framing.EVENT_STREAM` frames it as AWS does)."""
    return encode_event(to_json({"bytes": base64.b64encode(inner.data.encode()).decode()}), event="chunk")


class InvokeEncoder(Encoder):
    """bedrock-invoke's encoder: the Messages API's (without its pings, which Bedrock does not pass on), each
    event base64 in a `chunk`, the invocation's metrics on `message_stop`; an error is an exception message."""

    def __init__(self, dialect: Generation, answer: Any = None) -> None:
        super().__init__(dialect)
        self.inner = _MESSAGES.encoder(answer)
        """The Messages API's encoder, which makes the events the chunks carry."""
        self.usage: Usage | None = None
        """The usage fed, which the metrics on `message_stop` count."""

    def resume(self, sent: Sequence[ServerSentEvent]) -> None:
        """Continue a stream the client already has: the Messages encoder continues the events its chunks carry."""
        inner, _ = unwrapped(sent)
        self.inner.resume(inner)
        self.fed = self.fed or bool(sent)
        self.usage = next((e for e in reversed(_MESSAGES.decode(inner)) if isinstance(e, Usage)), self.usage)

    def _event(self, event: Event) -> None:
        if isinstance(event, Error):
            # Nothing closes: the exception ends the stream where it stands.
            self.frames.append(encode_event(to_json({"message": event.message}), event=exception_of(event)))
            return
        if isinstance(event, Usage):
            self.usage = event
        self.wrap(self.inner.feed(event))

    def _end(self) -> None:
        self.wrap(self.inner.close())

    def wrap(self, frames: list[bytes]) -> None:
        """The Messages encoder's frames, each event in a chunk (pings left out)."""
        decoder = SSEDecoder()
        for sse in (found for frame in frames for found in decoder.feed(frame)):
            if sse.event == "ping":
                continue
            if sse.event == "message_stop":
                obj = _json.parse(sse.data, max_depth=None)
                sse = replace(sse, data=to_json({**obj, _METRICS: _metrics(self.usage)}))
            self.frames.append(_chunk(sse))


def _metrics(usage: Usage | None) -> dict[str, Any]:
    """`amazon-bedrock-invocationMetrics`: the tokens, and the latencies, which neutral events carry only as the
    time to the first token."""
    usage = usage or Usage(0, 0)
    first = round((usage.first_token_seconds or 0.0) * 1000)
    return {
        "inputTokenCount": usage.input_tokens,
        "outputTokenCount": usage.output_tokens,
        "invocationLatency": first,
        "firstByteLatency": first,
    }


class BedrockInvoke(BedrockErrors):
    """Amazon Bedrock's `InvokeModelWithResponseStream` for Anthropic's models: AWS's event stream of `chunk`s,
    each the base64 of one of the Messages API's stream events; `invoke` answers with the Messages API's message."""

    name = "bedrock-invoke"
    answer = "a message object with content"
    path = "/model/{modelId}/invoke-with-response-stream"
    exceptions = _EXCEPTIONS

    def serves_path(self, path: str) -> bool:
        """A path that names the model and the call: `…/model/{modelId}/invoke-with-response-stream` or
        `…/invoke`."""
        return INVOKE_PATH.search(path.rstrip("/")) is not None

    def recorded_model(self, request: Request) -> str | None:
        """The model a call names in its path (`/model/{modelId}/invoke`), its escapes undone."""
        found = INVOKE_PATH.search(request.path.rstrip("/"))
        return unquote(found["model"]) if found is not None else None

    def recognises(self, interaction: Interaction) -> bool:
        response = interaction.response
        if by_content_type(response.header("content-type")) is not EVENT_STREAM:
            return False
        first = next((b.event for b in EVENT_STREAM.blocks(response.body[:4096]) if b.event is not None), None)
        inner = _inner(first) if first is not None else None
        return inner is not None and inner.event == "message_start"

    def last_turn(self, body: Any) -> tuple[str, str] | None:
        return _MESSAGES.last_turn(body)

    def is_terminal(self, event: ServerSentEvent) -> bool:
        inner = _inner(event)
        return event.event.endswith("Exception") or (inner is not None and _MESSAGES.is_terminal(inner))

    def new_call_id(self, rng: random.Random) -> str:
        return _MESSAGES.new_call_id(rng)

    def encoder(self, answer: Any = None) -> Encoder:
        return InvokeEncoder(self, answer)

    def decode_indexed(self, events: Sequence[ServerSentEvent]) -> list[tuple[int, Event]]:
        inner, at = unwrapped(events)
        out = [(at[i], event) for i, event in _MESSAGES.decode_indexed(inner)]
        out += [
            (i, exception_error(sse.event, _json_object(sse.data)))
            for i, sse in enumerate(events)
            if sse.event.endswith("Exception")
        ]
        return sorted(out, key=lambda found: found[0])

    def wants_stream(self, body: Any, path: str = "") -> bool:
        return path.rstrip("/").endswith(_STREAM)

    def stream_framing(self, request: Request) -> Framing:
        """AWS's event stream, every time: the API has no other."""
        return EVENT_STREAM

    def shapeless_path(self, path: str) -> str:
        return path.removesuffix(_STREAM) + "/invoke" if path.endswith(_STREAM) else path

    def response_json(self, events: Sequence[Event]) -> dict[str, Any]:
        return _MESSAGES.response_json(events)

    def stream_json(self, events: Sequence[ServerSentEvent], usage: Usage | None = None) -> dict[str, Any]:
        return _MESSAGES.stream_json(unwrapped(events)[0], usage)

    def decode_json(self, body: Any) -> list[Event]:
        return _MESSAGES.decode_json(body)

    def check(self, events: Sequence[ServerSentEvent], request: Request | None = None) -> list[Violation]:
        """The wire's rules (every message a `chunk` of base64 JSON or one of the stream's exceptions, nothing
        after an exception, the invocation's metrics on `message_stop`), then the Messages API's on the events
        the chunks carry."""
        c = Checker()
        inner: list[ServerSentEvent] = []
        at: list[int] = []
        ended: str | None = None
        for i, sse in enumerate(events):
            if ended is not None:
                c.add(i, f"{sse.event} after {ended}")
                continue
            if sse.event.endswith("Exception"):
                ended = sse.event
                if sse.event not in _EXCEPTIONS:
                    c.add(i, f"{sse.event} is not one of the stream's exceptions ({', '.join(_EXCEPTIONS)})")
                obj = _json_object(sse.data)
                if not isinstance(obj, dict) or not isinstance(obj.get("message"), str):
                    c.add(i, f"{sse.event} without a message")
                    obj = {}
                # The Messages rules see the exception as the stream's error event, which ends it.
                error = {"type": "error", "error": {"type": "api_error", "message": str(obj.get("message", ""))}}
                inner.append(ServerSentEvent(data=to_json(error), event="error"))
                at.append(i)
                continue
            found = _inner(sse)
            if sse.event != "chunk":
                c.add(i, f"unknown event {sse.event!r}, not a chunk")
            elif found is None:
                c.add(i, "chunk without bytes: the base64 of a JSON object")
            else:
                if found.event == "message_stop":
                    metrics = _json_object(found.data).get(_METRICS)
                    counts = (
                        [whole(metrics.get(k)) for k in ("inputTokenCount", "outputTokenCount")]
                        if isinstance(metrics, dict)
                        else [None]
                    )
                    if None in counts:
                        c.add(i, f"message_stop without {_METRICS} (inputTokenCount, outputTokenCount)")
                inner.append(found)
                at.append(i)
        moved = [
            Violation(at[v.event - 1] + 1 if v.event is not None else None, v.message)
            for v in _MESSAGES.check(inner, request)
        ]
        return c.violations + moved

    def prompt(self, body: Any) -> Prompt:
        return _MESSAGES.prompt(body)

    def request_prompt(self, body: Any, path: str) -> Prompt:
        found = INVOKE_PATH.search(path.rstrip("/"))
        return replace(self.prompt(body), model=unquote(found["model"]) if found else "")

    def request_body(self, prompt: Prompt) -> dict[str, Any]:
        """The Messages API's body, as Bedrock takes it: the model in the path, not the body, no `stream` (the
        path says), and the `anthropic_version` first."""
        body = _MESSAGES.request_body(prompt)
        return {"anthropic_version": _VERSION} | {k: v for k, v in body.items() if k not in ("model", "stream")}

    def request_path(self, prompt: Prompt) -> str:
        return f"/model/{quote(prompt.model or _DEFAULT_MODEL, safe='')}{_STREAM}"


def _json_object(text: str) -> dict[str, Any]:
    """`text` parsed, if it is a JSON object; else {}."""
    try:
        obj = _json.parse(text, max_depth=None)
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}
