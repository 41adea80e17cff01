"""Translation: an interaction as another API would have served it, and what a client of it would lose.

`translate` decodes a recorded stream into neutral events with its
dialect's `Generation` contract and encodes them in the target's, keeping
the timing of the original events; `lost_in_translation` says, in words,
what the target has no words for. Both need LLM APIs on each side
(`dialects.generation` says so of a protocol that is not one).
"""

from __future__ import annotations

from dataclasses import replace

from . import _json
from ._exceptions import ConfigError
from .cassette import Chunk, Interaction, Response
from .dialects import Answer, Generation, Protocol, detect, generation
from .dialects.events import Start
from .framing import SSE, reframe
from .matching import framing_of, is_streamed
from .shape import as_stream

__all__ = ["lost_in_translation", "translate"]


def translate(interaction: Interaction, target: Protocol, source: Protocol | None = None) -> Interaction:
    """The interaction as `target`'s API would have served it.

    The response's events are decoded into neutral events and encoded again,
    each new frame at the time of the original event it came from; the
    request's path, query and body are rewritten for the target API. An
    error response before the stream becomes the target's error body.
    """
    found = source or detect(interaction)
    request, response = interaction.request, interaction.response
    if found is None:
        raise ConfigError(f"{request.method} {request.path}: cannot tell its dialect: name it with --dialect")
    source, target = generation(found, "translation"), generation(target, "translation")
    prompt = source.request_prompt(request.json(), request.path)
    prefix = request.path[: -len(source.path)] if request.path.endswith(source.path) else ""
    path = prefix + target.request_path(prompt)  # a router's /proj/x/v1/chat/completions keeps its /proj/x
    body = _json.dumps(target.request_body(prompt), compact=False).encode()
    headers = tuple((k, v) for k, v in request.headers if k.lower() != "content-length")
    query = _query(request.query, source, target)
    new_request = replace(request, path=path, query=query, body=body, headers=headers)
    kept = tuple((k, v) for k, v in response.headers if k.lower() not in ("content-length", "content-type"))
    if response.status >= 400:
        _, error_headers, error_body = target.http_error(response.status, _error_message(response.body))
        t = response.chunks[0].t if response.chunks else 0.0
        chunks: tuple[Chunk, ...] = (Chunk(t, error_body),)
        return replace(
            interaction, request=new_request, response=replace(response, headers=(*kept, *error_headers), chunks=chunks)
        )
    timed = _stream_of(interaction, source).events()
    try:
        pairs = source.decode_indexed([sse for _, sse in timed])
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        raise ConfigError(
            f"{request.method} {request.path}: cannot read its stream as {source.name} ({exc!r})"
        ) from None
    times = [timed[i][0] for i, _ in pairs]
    events = [event for _, event in pairs]
    chunks = _with_heartbeats([Chunk(times[k], frame) for k, frame in target.encode_indexed(events)], target)
    start = next((e for e in events if isinstance(e, Start)), Start())
    headers = target.response_headers(start)
    names = {name.lower() for name, _ in headers}
    headers = (*headers, *((k, v) for k, v in kept if k.lower() not in names))
    translated = replace(response, headers=headers, chunks=chunks)
    framing = target.stream_framing(new_request)
    if framing is not SSE:  # an API that streams in another framing (Bedrock's event stream) has it so recorded
        translated = reframe(translated, SSE, framing)
    return replace(interaction, request=new_request, response=translated)


def lost_in_translation(
    interaction: Interaction, translated: Interaction, target: Protocol, source: Protocol | None = None
) -> list[str]:
    """What a client of `interaction` got that a client of its translation into `target` does not, in words
    (`tool calls (get_weather)`, `reasoning`, `refusal`, `log probabilities`); [] when nothing is lost.

    `translate` leaves out what the target's API has no words for (the completions API has no tool calls,
    no other API runs LM Studio's server-side tools): this says what that was, so that a conversion need
    not lose it silently.
    """
    found = source or detect(interaction)
    if found is None or interaction.response.status >= 400:
        return []  # an error response becomes the target's error response: its message is kept
    source, target = generation(found, "translation"), generation(target, "translation")
    before = Answer.of(source.decode(sse for _, sse in _stream_of(interaction, source).events()))
    after = Answer.of(target.decode(sse for _, sse in _stream_of(translated, target).events()))
    lost = []
    for server, what in ((False, "tool calls"), (True, "tool calls the server ran")):
        had = [call.name for call in before.calls if call.server is server]
        kept = [call.name for call in after.calls if call.server is server]
        if len(kept) < len(had):
            lost.append(f"{what} ({', '.join(had)})")
    if before.reasoning and not after.reasoning:
        lost.append("reasoning")
    if before.refusal and before.refusal not in after.refusal + after.text:  # an API with no refusal shows it as text
        lost.append("refusal")
    if before.logprobs and not after.logprobs:
        lost.append("log probabilities")
    return lost


def _stream_of(interaction: Interaction, source: Generation) -> Response:
    """The interaction's response as `source` streams it: a JSON answer to a request for no stream becomes
    the stream that answers a request for one (replay gives a request for no stream the JSON back), and a
    stream framed otherwise (Gemini's JSON array) the same messages as SSE."""
    response = interaction.response
    framing = framing_of(interaction)
    if framing is not None and framing is not SSE:
        return reframe(response, framing, SSE)
    if is_streamed(interaction) or response.status >= 400 or response.events():  # events: a stream all the same
        return response
    try:
        streamed = as_stream(interaction, source)
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError):
        streamed = None
    if streamed is None:
        request = interaction.request
        raise ConfigError(f"{request.method} {request.path}: cannot read its JSON answer as {source.name}")
    return streamed


def _query(query: str, source: Generation, target: Generation) -> str:
    """The query string, without the source API's streaming parameters and with the target's (`alt=sse`)."""
    own = set(source.query.split("&")) - {""}
    kept = [p for p in query.split("&") if p and p not in own]
    return "&".join([*kept, *(p for p in target.query.split("&") if p and p not in kept)])


def _with_heartbeats(chunks: list[Chunk], dialect: Generation) -> tuple[Chunk, ...]:
    """The chunks, with the dialect's heartbeat comment wherever the stream is silent long enough."""
    if dialect.heartbeat is None:
        return tuple(chunks)
    interval, comment = dialect.heartbeat
    out: list[Chunk] = []
    last = 0.0
    for chunk in chunks:
        while chunk.t - last > interval:
            last = round(last + interval, 6)
            out.append(Chunk(last, comment))
        out.append(chunk)
        last = chunk.t
    return tuple(out)


def _error_message(body: bytes) -> str:
    try:
        obj = _json.parse(body, max_depth=None)
    except ValueError:
        return body.decode("utf-8", "replace")
    error = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(error, dict) and "message" in error:
        return str(error["message"])
    if isinstance(obj, dict) and isinstance(obj.get("message"), str):  # Bedrock's `{"message": ...}`
        return str(obj["message"])
    return str(error or obj)
