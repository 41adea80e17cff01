"""A recording in the shape a request asks for: one JSON answer or a stream, with usage or without.

Clients ask for a stream with `"stream": true` (Gemini's clients with
`:streamGenerateContent` in the path) and for one JSON answer without it,
and for a chat stream's usage chunk with `stream_options.include_usage`; a
cassette holds whichever was recorded.
Between the matcher and the plan, replay gives the recording the shape the
request asks for (`asked`, then `reshape`):

- a recorded stream answers a request for no stream with the dialect's JSON
  answer built from its events, sent when the stream ended (a server that
  does not stream answers when generation is over), with its usage: the
  stream's, else an estimate (`estimated_usage`), as the APIs' plain answers
  always report it;
- a recorded JSON answer answers a request for a stream cut into
  token-sized pieces, framed as the dialect streams, spread evenly over the
  time the answer took;
- a recorded stream with a usage chunk answers a request that did not ask
  for usage without that chunk, every other byte as recorded;
- a recorded stream answers a request for a stream in another framing
  (Gemini's JSON array without `alt=sse`, its SSE with it) with the same
  messages in that framing, each due when it was recorded (`framing.reframe`).

A stream whose request never said `"stream": true` came from an API that
streams whatever it is asked, and goes out as it is; so does anything in no
dialect sse-tape speaks, and any error response.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from . import _json
from .cassette import Chunk, End, Headers, Interaction, Request, Response
from .dialects import Generation as Dialect
from .dialects import detect
from .dialects.events import Error, Event, ReasoningDelta, RefusalDelta, Start, TextDelta, ToolCallDelta, Usage
from .framing import SSE, Framing, blocks_of, reframe
from .matching import asks_for_stream, framing_of
from .plan import Plan

__all__ = [
    "AS_RECORDED",
    "Recorded",
    "Shape",
    "as_json",
    "as_stream",
    "asked",
    "collapse",
    "estimated_usage",
    "pieces",
    "reshape",
    "spread",
    "without_usage",
]

# What a dialect raises on a stream or answer it cannot read.
_UNREADABLE = (TypeError, ValueError, AttributeError, KeyError, OverflowError)

# Headers that describe the body as it was sent, not the answer: they are set anew for the other shape.
_BODY_HEADERS = ("content-type", "content-length", "transfer-encoding", "cache-control", "x-accel-buffering")

# A token-sized piece of text: a word with the space before it, or a run of punctuation.
_PIECE = re.compile(r"\s*[\w']{1,12}|\s*[^\w\s]|\s+")


@dataclass(frozen=True, slots=True)
class Shape:
    """What a request asks of a recording's answer."""

    stream: bool | None
    """A stream (True), one JSON answer (False), or the recording's own shape (None)."""
    usage: bool = True
    """Whether a stream reports usage."""
    framing: Framing | None = None
    """The framing a stream goes out in, when not the one it was recorded (or made) in."""


#: The recording's answer as it was recorded: what a request asks that reshaping leaves alone.
AS_RECORDED = Shape(None)


@functools.lru_cache(maxsize=64)
def _shape(stream: bool | None, usage: bool, framing: Framing | None) -> Shape:
    """The `Shape` of these parts, made once: replay asks for one on every request, and the same few come each
    time (a framing a dialect made anew for each request would only pass through the cache)."""
    return Shape(stream, usage, framing)


@dataclass(frozen=True, slots=True)
class Recorded:
    """What shapes a recorded answer can take, found once per recording (replay asks on every request)."""

    dialect: Dialect | None
    """The API it speaks (by its path, else by its events); None: it goes out as it is."""
    successful: bool
    """Whether its status is a success (2xx): an error answer has no shape to change."""
    streamed: bool
    """Whether it is a stream (see `framing_of`)."""
    framing: Framing | None
    """How its stream frames its messages; None when it is no stream."""
    asked_for_stream: bool
    """Whether its request said it wanted a stream (a stream that never was asked for stays one)."""

    @classmethod
    def of(cls, interaction: Interaction) -> Recorded:
        framing = framing_of(interaction)
        streamed = framing is not None
        return cls(
            _dialect(interaction),
            200 <= interaction.response.status < 300,
            streamed,
            framing,
            streamed and asks_for_stream(interaction.request) is True,
        )

    def asked(self, request: Request) -> Shape:
        """The shape `request` asks of this answer."""
        dialect, body = self.dialect, request.json()
        if dialect is None or not isinstance(body, dict) or not self.successful:
            return AS_RECORDED
        stream, streamed = dialect.wants_stream(body, request.path), self.streamed
        convert = stream != streamed and (not streamed or self.asked_for_stream)
        made = SSE if convert else self.framing  # how the stream that goes out is framed, unless reframed
        framing = dialect.stream_framing(request) if stream and made is not None else None
        return _shape(
            stream if convert else None,
            dialect.reports_usage(body) if stream else True,
            framing if framing is not made else None,
        )


def asked(interaction: Interaction, request: Request) -> Shape:
    """The shape `request` asks of the answer `interaction` recorded (see `Recorded`, to ask again and again)."""
    return Recorded.of(interaction).asked(request)


def reshape(interaction: Interaction, shape: Shape) -> tuple[Response, str | None]:
    """The recorded answer in `shape`, and how it was changed (`as JSON`, `as a stream`, `without usage`,
    `as json-array`)."""
    response = interaction.response
    dialect = _dialect(interaction)
    if dialect is None:
        return response, None
    try:
        if shape.stream is False:
            return as_json(interaction, dialect), "as JSON"
        changed = []
        source = framing_of(interaction)
        if shape.stream is True:
            streamed = as_stream(interaction, dialect, usage=shape.usage)
            if streamed is None:
                return response, None
            response, source = streamed, SSE
            changed.append("as a stream")
        elif not shape.usage and source is SSE and (cut := without_usage(response, dialect)) is not None:
            response = cut
            changed.append("without usage")
        if shape.framing is not None and source is not None:
            response = reframe(response, source, shape.framing)
            changed.append(f"as {shape.framing.name}")
        return response, ", ".join(changed) or None
    except _UNREADABLE:
        pass  # a recording its dialect cannot read goes out as it is
    return response, None


def pieces(text: str) -> list[str]:
    """Text cut into token-sized pieces, as a model would stream it; joined, they give the text back."""
    return _PIECE.findall(text)


def spread(events: Iterable[Event]) -> list[Event]:
    """The events with each text and each call's arguments cut into token-sized pieces.

    Text whose tokens' log probabilities are known is cut at its tokens, each
    piece with its own.
    """
    out: list[Event] = []
    for event in events:
        if isinstance(event, TextDelta) and event.logprobs is not None:
            if event.logprobs and "".join(lp.token for lp in event.logprobs) == event.text:
                out += [TextDelta(lp.token, (lp,)) for lp in event.logprobs]
            else:
                out.append(event)  # tokens that do not add up to the text: it stays whole, with them
        elif isinstance(event, TextDelta):
            out += [TextDelta(piece) for piece in pieces(event.text)]
        elif isinstance(event, ReasoningDelta | RefusalDelta):
            out += [type(event)(piece) for piece in pieces(event.text)]
        elif isinstance(event, ToolCallDelta):
            out += [ToolCallDelta(event.index, piece) for piece in pieces(event.arguments)]
        else:
            out.append(event)
    return out


def as_json(interaction: Interaction, dialect: Dialect, framing: Framing | None = None) -> Response:
    """A recorded stream as the answer to a request that asks for no stream.

    The body is the dialect's non-streaming answer (`Dialect.stream_json`),
    sent at the time the stream ended; a stream that ended in an error becomes the dialect's error
    response, with the status that API sends that error with (`Dialect.error_status`: 500 for a server
    error, 503 or Anthropic's 529 for an overloaded model). A stream that did not end whole (the upstream
    reset, the client left) gives no body and ends as it did. The stream's messages are read in `framing`
    (by default, as it was recorded: see `framing_of`). Raises ValueError for a stream that holds no answer
    the dialect reads.
    """
    response = interaction.response
    t = response.end_time
    if response.end is not End.COMPLETE:
        return replace(response, headers=_merged((), response.headers), chunks=(), duration=t)
    framing = framing or framing_of(interaction) or SSE
    sent = [event for _, event in framing.events(response.chunks)]
    events = dialect.decode(sent)
    if not events:
        raise ValueError("the stream holds no answer this dialect reads")
    error = next((e for e in events if isinstance(e, Error)), None)
    if error is not None:
        status = dialect.error_status(error.type, error.code)
        status, headers, body = dialect.http_error(status, error.message, type=error.type, code=error.code)
    else:
        status, headers = 200, (("content-type", "application/json"),)
        usage = (
            None if any(isinstance(e, Usage) for e in events) else estimated_usage(dialect, interaction.request, events)
        )
        body = _json.dumps(dialect.stream_json(sent, usage)).encode()
    return Response(status, _merged(headers, response.headers), (Chunk(t, body),), End.COMPLETE, None)


def estimated_usage(dialect: Dialect, request: Request, events: Sequence[Event]) -> Usage:
    """The token counts of an answer whose stream reported none, as near as they can be told without the
    model's tokenizer: a token for each delta the stream sent (servers send about one a chunk); for the
    prompt, a token for each four characters of its text, or of a chat's messages and tools with four more
    for each message (its role and the template around it)."""
    prompt = dialect.request_prompt(request.json(), request.path)
    if prompt.text is not None:  # a prompt continued as it is (the completions API)
        characters, overhead = len(prompt.text), 0
    else:
        said = [
            str(m.get("content") or "") + (_json.dumps(m["tool_calls"]) if m.get("tool_calls") else "")
            for m in prompt.messages
        ]
        characters = sum(map(len, said)) + (len(_json.dumps(prompt.tools)) if prompt.tools else 0)
        overhead = 4 * len(prompt.messages)
    said_by_model = [
        e.arguments if isinstance(e, ToolCallDelta) else e.text
        for e in events
        if isinstance(e, TextDelta | ReasoningDelta | RefusalDelta | ToolCallDelta)
    ]
    output = sum(bool(text) for text in said_by_model)
    reasoning = sum(isinstance(e, ReasoningDelta) and bool(e.text) for e in events)
    return Usage(max(1, -(-characters // 4) + overhead), output, reasoning or None)


def collapse(plan: Plan, interaction: Interaction, dialect: Dialect) -> Plan:
    """A stream's plan, paced and faulted, as the one JSON answer it adds up to, due when the stream would end.

    An error injected into the stream makes the answer the API's error response (500 for the default
    server error), a disconnect makes it no answer; a plan something else replaced (a status, no body,
    no answer at all) stays as it is.
    """
    if plan.replaced or plan.hang:
        return plan
    chunks = tuple(Chunk(t, data) for t, data in plan.timeline())
    stream = Response(plan.status, tuple(plan.headers), chunks, plan.end, plan.end_at)
    try:
        answer = as_json(replace(interaction, response=stream), dialect, plan.framing)
    except _UNREADABLE:
        return plan  # a stream the faults made unreadable goes out as it is
    return Plan(answer.status, list(answer.headers), [(c.t, c.data) for c in answer.chunks], answer.end, plan.end_at)


def as_stream(interaction: Interaction, dialect: Dialect, *, usage: bool = True) -> Response | None:
    """A recorded JSON answer as the stream that answers a request asking for one; None if it is no answer.

    One event per token-sized piece, evenly over the time the answer took,
    the last when it arrived; without `usage`, no usage is reported.
    """
    response = interaction.response
    try:
        answer = _json.parse(response.body, max_depth=None)
    except ValueError:
        return None
    events = spread(dialect.decode_json(answer))
    if not events:
        return None
    if not usage:
        events = [e for e in events if not isinstance(e, Usage)]
    encoder = dialect.encoder(answer)
    framed = [(i, frame) for i, event in enumerate(events) for frame in encoder.feed(event)]
    framed += [(len(events) - 1, frame) for frame in encoder.close()]
    t = response.end_time
    chunks = tuple(Chunk(round(t * (i + 1) / len(events), 6), frame) for i, frame in framed)
    start = next((e for e in events if isinstance(e, Start)), Start())
    return Response(200, _merged(dialect.response_headers(start), response.headers), chunks, End.COMPLETE, None)


def without_usage(response: Response, dialect: Dialect) -> Response | None:
    """The recorded stream without the events that only report usage; None if it has none.

    Every other byte stays as it was recorded, at its recorded time.
    """
    blocks = [b for b in blocks_of(response.body) if b.event is not None]
    if not any(b.event is not None and dialect.carries_usage(b.event) for b in blocks):
        return None  # nothing to cut, told without decoding the stream

    decoded = dialect.decode_indexed([b.event for b in blocks if b.event is not None])
    carries: dict[int, set[bool]] = {}
    for i, event in decoded:
        carries.setdefault(i, set()).add(isinstance(event, Usage))
    cuts = [(blocks[i].start, blocks[i].end) for i, kinds in carries.items() if kinds == {True}]
    if not cuts:
        return None
    chunks, at = [], 0
    for chunk in response.chunks:
        kept = b"".join(chunk.data[a - at : b - at] for a, b in _outside(at, at + len(chunk.data), cuts))
        if kept:
            chunks.append(Chunk(chunk.t, kept))
        at += len(chunk.data)
    return replace(response, chunks=tuple(chunks))


def _outside(start: int, end: int, cuts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of [start, end) outside every cut."""
    parts, here = [], start
    for cut_start, cut_end in sorted(cuts):
        if cut_end <= here or cut_start >= end:
            continue
        if cut_start > here:
            parts.append((here, cut_start))
        here = max(here, cut_end)
    if here < end:
        parts.append((here, end))
    return parts


def _dialect(interaction: Interaction) -> Dialect | None:
    found = detect(interaction)  # by its path (when the API speaks the request), else by its stream
    return found if isinstance(found, Dialect) else None  # only an LLM API's answer takes another shape


def _merged(new: Headers, recorded: Headers) -> Headers:
    """The new shape's headers, then the recorded ones that neither describe the old body nor clash."""
    names = {name.lower() for name, _ in new}
    return (*new, *((k, v) for k, v in recorded if k.lower() not in names and k.lower() not in _BODY_HEADERS))
