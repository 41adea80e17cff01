"""decode(encode(events)) == events for every dialect, over random event sequences; and every bundled
stream translated into each dialect and back; and every bundled
interaction, translated into each dialect that carries an answer's text, reasoning and tool calls and back,
keeps them.

Each strategy draws sequences a dialect can express: completions has no
tool calls, LM Studio sends a tool call's arguments whole and has no
logprobs or call ids, the Responses API reports usage only in its final
event, Anthropic's API has no creation time and always reports usage,
Gemini sends each function call whole with its arguments as an object and
has no creation time, Bedrock's Converse API has no response id, model or creation time in its stream, and so on.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from framed import messages
from hypothesis import given, settings
from hypothesis import strategies as st

from sse_tape import Cassette, Interaction, ServerSentEvent, SSEDecoder
from sse_tape.dialects import DIALECTS, Answer, Generation, detect
from sse_tape.dialects.events import (
    Error,
    Event,
    Finish,
    ModelLoadEnd,
    ModelLoadProgress,
    ModelLoadStart,
    PromptEnd,
    PromptProgress,
    PromptStart,
    ReasoningDelta,
    ReasoningSignature,
    RefusalDelta,
    Start,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from sse_tape.dialects.lmstudio_chat import arguments_text
from sse_tape.translation import translate

text = st.text(min_size=1, max_size=12)
maybe_count = st.none() | st.integers(1, 10**6)
finite = st.floats(allow_nan=False, allow_infinity=False)


def token_logprob(unique_top: bool) -> st.SearchStrategy[TokenLogprob]:
    top = st.lists(st.tuples(text, finite), max_size=3, unique_by=(lambda p: p[0]) if unique_top else None)
    return st.builds(TokenLogprob, text, finite, top.map(tuple))


def call_id(draw: Any, index: int) -> str:
    """An id for tool call `index` that no other call of the stream has: two with one id break `check`."""
    return f"{draw(text)}{index}"


def round_trips(name: str, events: list[Event]) -> None:
    dialect = DIALECTS[name]
    decoder = SSEDecoder()
    sse = [event for frame in dialect.encode(events) for event in decoder.feed(frame)]
    assert dialect.decode(sse) == events


def split_ending(
    draw: Any, ending: list[Event], error: st.SearchStrategy[Error], before_error: list[Event]
) -> list[Event]:
    """The normal ending, or an error in its place."""
    return [*before_error, draw(error)] if draw(st.booleans()) else ending


@st.composite
def openai_chat_events(draw: Any) -> list[Event]:
    events: list[Event] = [Start(draw(text), draw(st.text(max_size=8)), draw(st.integers(0, 2**40)))]
    logprobs = st.none() | st.lists(token_logprob(unique_top=False), max_size=2).map(tuple)
    deltas = st.one_of(
        st.builds(TextDelta, text, logprobs), st.builds(ReasoningDelta, text), st.builds(RefusalDelta, text)
    )
    events += draw(st.lists(deltas, max_size=6))
    calls = draw(st.integers(0, 2))
    for index in range(calls):
        events.append(ToolCallStart(index, call_id(draw, index), draw(text)))
        events += [ToolCallDelta(index, a) for a in draw(st.lists(text, max_size=3))]
    reason = "tool_calls" if calls else draw(st.sampled_from(["stop", "length", "content_filter"]))
    usage = draw(
        st.lists(st.builds(Usage, st.integers(0, 10**6), st.integers(0, 10**6), maybe_count, maybe_count), max_size=1)
    )
    ending: list[Event] = [*(ToolCallEnd(i) for i in range(calls)), Finish(reason), *usage]
    error = st.builds(Error, text, text, st.none() | text)
    return events + split_ending(draw, ending, error, [])


@st.composite
def openai_completions_events(draw: Any) -> list[Event]:
    events: list[Event] = [Start(draw(text), draw(st.text(max_size=8)), draw(st.integers(0, 2**40)))]
    logprobs = st.none() | st.lists(token_logprob(unique_top=True), min_size=1, max_size=2).map(tuple)
    events += draw(st.lists(st.builds(TextDelta, text, logprobs), max_size=6))
    usage = draw(
        st.lists(st.builds(Usage, st.integers(0, 10**6), st.integers(0, 10**6), maybe_count, maybe_count), max_size=1)
    )
    ending: list[Event] = [Finish(draw(st.sampled_from(["stop", "length", "content_filter"]))), *usage]
    if len(events) == 1:
        return events + ending  # no role frame here: the Start travels in the first chunk, which an error is not
    return events + split_ending(draw, ending, st.builds(Error, text, text, st.none() | text), [])


@st.composite
def openai_responses_events(draw: Any) -> list[Event]:
    events: list[Event] = [Start(draw(text), draw(st.text(max_size=8)), draw(st.integers(0, 2**40)))]
    logprobs = st.none() | st.lists(token_logprob(unique_top=False), min_size=1, max_size=2).map(tuple)
    deltas = st.one_of(
        st.builds(TextDelta, text, logprobs), st.builds(ReasoningDelta, text), st.builds(RefusalDelta, text)
    )
    events += draw(st.lists(deltas, max_size=6))
    calls = draw(st.integers(0, 2))
    for index in range(calls):
        events.append(ToolCallStart(index, call_id(draw, index), draw(text)))
        events += [ToolCallDelta(index, a) for a in draw(st.lists(text, max_size=3))]
        events.append(ToolCallEnd(index))
    reason = "tool_calls" if calls else draw(st.sampled_from(["stop", "length", "content_filter"]))
    if reason == "tool_calls" and draw(st.booleans()):
        reason = "length"  # cut short after its calls
    usage = draw(
        st.lists(st.builds(Usage, st.integers(0, 10**6), st.integers(0, 10**6), maybe_count, maybe_count), max_size=1)
    )
    code = st.none() | text.filter(lambda c: c != "server_error")
    return events + split_ending(
        draw, [Finish(reason), *usage], st.builds(Error, text, st.just("server_error"), code), []
    )


@st.composite
def lmstudio_chat_events(draw: Any) -> list[Event]:
    model = draw(st.text(max_size=8))
    events: list[Event] = [Start("", model, 0)]
    if draw(st.booleans()):
        events.append(ModelLoadStart(model))
        events += [ModelLoadProgress(p) for p in sorted(draw(st.lists(st.floats(0, 1), max_size=3)))]
        events.append(ModelLoadEnd(draw(st.floats(0, 100))))
    if draw(st.booleans()):
        events.append(PromptStart())
        events += [PromptProgress(p) for p in sorted(draw(st.lists(st.floats(0, 1), max_size=3)))]
        events.append(PromptEnd())
    deltas = st.one_of(st.builds(TextDelta, text), st.builds(ReasoningDelta, text))
    events += draw(st.lists(deltas, max_size=4))
    calls = draw(st.integers(0, 2))
    for index in range(calls):
        events.append(ToolCallStart(index, "", draw(text), server=True))  # LM Studio runs its tools itself
        if draw(st.booleans()):
            arguments = draw(st.dictionaries(text, st.integers() | text, max_size=2))
            events += [ToolCallDelta(index, arguments_text(arguments)), ToolCallEnd(index, output=draw(st.text()))]
        else:
            events.append(ToolCallEnd(index, error=draw(text)))
    after = draw(st.lists(deltas, max_size=3))
    events += after
    has_message = any(isinstance(e, TextDelta) for e in events)
    reason = "tool_calls" if calls and not has_message else "stop"
    usage = draw(st.lists(st.builds(Usage, st.integers(0, 10**6), st.integers(0, 10**6), maybe_count), max_size=1))
    return events + split_ending(draw, [Finish(reason), *usage], st.builds(Error, text, text, st.none() | text), [])


@st.composite
def anthropic_messages_events(draw: Any) -> list[Event]:
    events: list[Event] = [Start(draw(text), draw(st.text(max_size=8)), 0)]
    calls = 0
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["text", "thinking", "signed", "call"]))
        if kind == "text":
            events += draw(st.lists(st.builds(TextDelta, text), min_size=1, max_size=3))
        elif kind in ("thinking", "signed"):
            events += draw(st.lists(st.builds(ReasoningDelta, text), max_size=3))
            events += [ReasoningSignature(draw(text))] if kind == "signed" else []  # alone: thinking not shown
        else:
            events.append(ToolCallStart(calls, call_id(draw, calls), draw(text)))
            events += [ToolCallDelta(calls, a) for a in draw(st.lists(text, max_size=3))]
            events.append(ToolCallEnd(calls))
            calls += 1
    reason = (
        draw(st.sampled_from(["tool_calls", "length"]))
        if calls
        else draw(st.sampled_from(["stop", "length", "content_filter"]))
    )
    usage = draw(st.builds(Usage, st.integers(0, 10**6), st.integers(0, 10**6), maybe_count, maybe_count))
    kinds = st.sampled_from(["server_error", "overloaded_error", "rate_limit_error", "invalid_request_error"])
    return events + split_ending(draw, [Finish(reason), usage], st.builds(Error, text, kinds, st.none() | text), [])


# Error types as Gemini reads them back from its status (RESOURCE_EXHAUSTED is a rate_limit_error); a code in
# capitals could name a status (UNAVAILABLE), which becomes the status itself, so codes are drawn without.
GEMINI_ERROR_TYPES = [
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "rate_limit_error",
    "server_error",
    "overloaded_error",
    "timeout_error",
]


@st.composite
def gemini_events(draw: Any) -> list[Event]:
    events: list[Event] = [Start(draw(text), draw(st.text(max_size=8)), 0)]  # its chunks carry no creation time
    logprobs = st.none() | st.lists(token_logprob(unique_top=False), max_size=2).map(tuple)
    deltas = st.one_of(st.builds(TextDelta, text, logprobs), st.builds(ReasoningDelta, text))
    events += draw(st.lists(deltas, max_size=6))
    calls = draw(st.integers(0, 2))
    arguments = st.dictionaries(text, st.integers() | text, max_size=2).map(
        lambda args: json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    )
    for index in range(calls):  # each whole, its arguments one JSON object; an id or, as the API sends, none
        known = "" if draw(st.booleans()) else call_id(draw, index)
        events += [ToolCallStart(index, known, draw(text)), ToolCallDelta(index, draw(arguments)), ToolCallEnd(index)]
    reasons = ["tool_calls", "length", "content_filter"] if calls else ["stop", "length", "content_filter"]
    output = draw(st.integers(0, 10**6))
    usage = st.builds(Usage, st.integers(0, 10**6), st.just(output), st.none() | st.integers(0, output), maybe_count)
    ending: list[Event] = [Finish(draw(st.sampled_from(reasons))), *draw(st.lists(usage, max_size=1))]
    if len(events) == 1:
        return events + ending  # the Start travels in the first chunk, which an error is not
    codes = st.none() | text.filter(lambda c: not c.isupper())
    return events + split_ending(draw, ending, st.builds(Error, text, st.sampled_from(GEMINI_ERROR_TYPES), codes), [])


def ollama_events(chat: bool) -> st.SearchStrategy[list[Event]]:
    @st.composite
    def draw_events(draw: Any) -> list[Event]:
        # Its lines carry no id, and their time in whole seconds here (the fraction is the server's clock's).
        events: list[Event] = [Start("", draw(st.text(max_size=8)), draw(st.integers(0, 2**33)))]
        logprobs = st.none() | st.lists(token_logprob(unique_top=False), max_size=2).map(tuple)
        deltas = st.one_of(st.builds(TextDelta, text, logprobs), st.builds(ReasoningDelta, text))
        events += draw(st.lists(deltas, max_size=6))
        calls = draw(st.integers(0, 2)) if chat else 0  # generate has no tools
        arguments = st.dictionaries(text, st.integers() | text, max_size=2).map(
            lambda args: json.dumps(args, ensure_ascii=False, separators=(",", ":"))
        )
        for index in range(calls):  # each whole, its arguments one JSON object, with no id
            events += [ToolCallStart(index, "", draw(text)), ToolCallDelta(index, draw(arguments)), ToolCallEnd(index)]
        reasons = ["tool_calls", "length"] if calls else ["stop", "length"]
        # The last line always has its stats: a rate that nanoseconds keep to two places, a first token in ms.
        usage = st.builds(
            Usage,
            st.integers(0, 10**6),
            st.integers(1, 10**6),
            tokens_per_second=st.integers(1, 4000).map(lambda n: n / 4),
            first_token_seconds=st.integers(0, 10**5).map(lambda n: n / 1000),
        )
        ending: list[Event] = [Finish(draw(st.sampled_from(reasons))), draw(usage)]
        if len(events) == 1:
            return events + ending  # the Start travels in the first line, which an error is not
        return events + split_ending(draw, ending, st.builds(Error, text), [])

    return draw_events()


@st.composite
def bedrock_converse_events(draw: Any) -> list[Event]:
    events: list[Event] = [Start()]  # its stream names no response, model or time
    calls = 0
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["text", "reasoning", "signed", "call"]))
        if kind == "text":
            events += draw(st.lists(st.builds(TextDelta, text), min_size=1, max_size=3))
        elif kind in ("reasoning", "signed"):
            events += draw(st.lists(st.builds(ReasoningDelta, text), max_size=3))
            events += [ReasoningSignature(draw(text))] if kind == "signed" else []
        else:
            events.append(ToolCallStart(calls, call_id(draw, calls), draw(text)))
            events += [ToolCallDelta(calls, a) for a in draw(st.lists(text, max_size=3))]
            events.append(ToolCallEnd(calls))
            calls += 1
    reasons = ["tool_calls", "length"] if calls else ["stop", "length", "content_filter"]
    usage = st.builds(Usage, st.integers(0, 10**6), st.integers(0, 10**6), st.none(), maybe_count)
    ending: list[Event] = [Finish(draw(st.sampled_from(reasons))), *draw(st.lists(usage, max_size=1))]
    # Each neutral type is one exception, read back as that type; a code is no part of the exception.
    kinds = st.sampled_from(
        ["invalid_request_error", "rate_limit_error", "server_error", "api_error", "overloaded_error"]
    )
    return events + split_ending(draw, ending, st.builds(Error, text, kinds, st.none()), [])


@st.composite
def bedrock_invoke_events(draw: Any) -> list[Event]:
    """The Messages API's events, which Bedrock wraps in chunks; an error is an exception, which has no code."""
    events: list[Event] = draw(anthropic_messages_events())
    return [replace(e, code=None) if isinstance(e, Error) else e for e in events]


LLM_APIS = sorted(name for name, d in DIALECTS.items() if isinstance(d, Generation))
"""The dialects that generate text: the protocols without generation (AG-UI, ...) have no neutral events."""

STRATEGIES = {
    "openai-chat": openai_chat_events(),
    "openai-completions": openai_completions_events(),
    "openai-responses": openai_responses_events(),
    "lmstudio-chat": lmstudio_chat_events(),
    "anthropic-messages": anthropic_messages_events(),
    "gemini": gemini_events(),
    "ollama-chat": ollama_events(chat=True),
    "ollama-generate": ollama_events(chat=False),
    "bedrock-converse": bedrock_converse_events(),
    "bedrock-invoke": bedrock_invoke_events(),
}


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@settings(max_examples=200)
@given(data=st.data())
def test_decode_of_encode_round_trips(name: str, data: st.DataObject) -> None:
    round_trips(name, data.draw(STRATEGIES[name]))


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@settings(max_examples=50)
@given(data=st.data())
def test_every_encoded_stream_passes_its_own_check(name: str, data: st.DataObject) -> None:
    events = _json_arguments(data.draw(STRATEGIES[name]))
    decoder = SSEDecoder()
    sse = [event for frame in DIALECTS[name].encode(events) for event in decoder.feed(frame)]
    assert DIALECTS[name].check(sse) == []


def _json_arguments(events: list[Event]) -> list[Event]:
    """Each tool call with one JSON object as its arguments: random text is not JSON, and the checker says so."""
    out: list[Event] = []
    for event in events:
        if isinstance(event, ToolCallDelta):
            continue
        out.append(event)
        if isinstance(event, ToolCallStart):
            out.append(ToolCallDelta(event.index, json.dumps({"n": event.index})))
    return out


def _streamed(events: list[Event], arguments: bool) -> str:
    """What a client can show of `events`: the answer's text and refusal, and tool-call arguments when streamed."""
    parts = [e.text for e in events if isinstance(e, TextDelta | RefusalDelta)]
    if arguments:
        parts += [e.arguments for e in events if isinstance(e, ToolCallDelta)]
    return "".join(parts)


def _sse(frames: list[bytes]) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    return [event for frame in frames for event in decoder.feed(frame)]


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@settings(max_examples=100)
@given(data=st.data())
def test_the_streaming_encoder_sends_each_piece_of_the_answer_as_it_is_fed(name: str, data: st.DataObject) -> None:
    events = data.draw(STRATEGIES[name])
    dialect = DIALECTS[name]
    # These send a call's arguments whole, when it ends.
    arguments = name not in ("lmstudio-chat", "gemini", "ollama-chat", "ollama-generate")
    encoder = dialect.encoder()
    frames: list[bytes] = []
    for n, event in enumerate(events, 1):
        frames += encoder.feed(event)
        # Nothing is held back for later events: the client can already show all that was fed.
        assert _streamed(dialect.decode(_sse(frames)), arguments) == _streamed(events[:n], arguments)
    frames += encoder.close()
    assert frames == dialect.encode(events)
    assert encoder.close() == []  # a stream ends once


@pytest.mark.parametrize("name", sorted(STRATEGIES))
@settings(max_examples=50)
@given(data=st.data())
def test_two_streams_encoded_at_once_do_not_mix(name: str, data: st.DataObject) -> None:
    first, second = data.draw(STRATEGIES[name]), data.draw(STRATEGIES[name])
    dialect = DIALECTS[name]
    a, b = dialect.encoder(), dialect.encoder()
    got_a: list[bytes] = []
    got_b: list[bytes] = []
    for n in range(max(len(first), len(second))):
        if n < len(first):
            got_a += a.feed(first[n])
        if n < len(second):
            got_b += b.feed(second[n])
    assert (got_a + a.close(), got_b + b.close()) == (dialect.encode(first), dialect.encode(second))


# What of an answer each API has words for: completions has no refusal, reasoning or tool calls; LM Studio's
# message is all it shows (a refusal is text there), and its tool calls are the server's own, which no other
# API here runs; Gemini has no refusal, and sends a call's arguments as a JSON object, not as the text the
# model wrote ("call values": the arguments compared as JSON); Ollama's calls are whole too, and carry no id
# ("called": each call's name and arguments as JSON); its generate API has no tools.
CARRIES = {
    "openai-chat": ("text", "refusal", "reasoning", "calls"),
    "openai-completions": ("text",),
    "openai-responses": ("text", "refusal", "reasoning", "calls"),
    "lmstudio-chat": ("shown", "reasoning"),
    "anthropic-messages": ("text", "refusal", "reasoning", "calls"),
    "gemini": ("shown", "reasoning", "call values"),
    "ollama-chat": ("shown", "reasoning", "called"),
    "ollama-generate": ("shown", "reasoning"),
    "bedrock-converse": ("shown", "reasoning", "calls"),
    "bedrock-invoke": ("text", "refusal", "reasoning", "calls"),
}


def test_carries_names_every_dialect() -> None:
    assert set(CARRIES) == set(LLM_APIS) == set(STRATEGIES)


def _said(interaction: Interaction, parts: tuple[str, ...]) -> dict[str, Any]:
    dialect = detect(interaction)
    assert dialect is not None
    answer = Answer.of(dialect.decode(messages(interaction)))
    said: dict[str, Any] = {"text": answer.text, "refusal": answer.refusal, "reasoning": answer.reasoning}
    said["shown"] = answer.text + answer.refusal
    said["calls"] = [(c.id, c.name, c.arguments) for c in answer.client_calls()]
    said["call values"] = [(c.id, c.name, json.loads(c.arguments)) for c in answer.client_calls()]
    said["called"] = [(c.name, json.loads(c.arguments)) for c in answer.client_calls()]
    return {part: said[part] for part in parts}


def _without_new_ids(back: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """`back` with the ids of calls the source sent without one (Gemini's may have none) blanked: the APIs
    that need an id gave them one on the way, and Gemini keeps an id it is given."""
    for part in ("calls", "call values"):
        if part in back and len(back[part]) == len(source[part]):
            back[part] = [(c[0] if s[0] else s[0], *c[1:]) for c, s in zip(back[part], source[part], strict=True)]
    return back


@pytest.mark.parametrize("target", LLM_APIS)
def test_every_bundled_stream_translated_and_back_keeps_what_the_target_has_words_for(
    bundled: dict[str, Cassette], target: str
) -> None:
    for stem, cassette in bundled.items():
        for n, interaction in enumerate(cassette):
            if interaction.response.status != 200:
                continue
            source = detect(interaction)
            assert source is not None
            there = translate(interaction, DIALECTS[target])
            assert DIALECTS[target].check(messages(there), there.request) == [], (stem, n)
            back = translate(there, source)
            before = _said(interaction, CARRIES[target])
            assert _without_new_ids(_said(back, CARRIES[target]), before) == before, (stem, n)


# The dialects that carry all of an answer: completions has no reasoning or tool calls, LM Studio's tool calls are
# the server's own (those for the client become its MCP calls).
WHOLE_ANSWERS = ["openai-chat", "openai-responses", "gemini", "bedrock-converse", "bedrock-invoke"]


def _answer(interaction: Interaction) -> tuple[str, str, list[tuple[str, Any]]]:
    """What a client gets: the text (a refusal is text where an API has no refusal), reasoning, tool calls."""
    dialect = detect(interaction)
    assert dialect is not None
    answer = Answer.of(dialect.decode(messages(interaction)))
    calls = [(call.name, json.loads(call.arguments or "{}")) for call in answer.client_calls()]
    return answer.text + answer.refusal, answer.reasoning, calls


@pytest.mark.parametrize("target", WHOLE_ANSWERS)
def test_every_bundled_interaction_translated_and_back_keeps_its_answer(
    bundled: dict[str, Cassette], target: str
) -> None:
    for cassette in bundled.values():
        for interaction in cassette:
            source = detect(interaction)
            assert source is not None
            back = translate(translate(interaction, DIALECTS[target]), source)
            assert _answer(back) == _answer(interaction), (source.name, target, interaction.request.body[:60])
