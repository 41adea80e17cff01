"""A recorded interaction as a person reads it: what was asked, the answer put together, and its timing.

`view` reads an interaction once: the request line and the prompt's last
message; the status; the stream's blocks, each at the time of the chunk
that completed it; the answer its dialect's decoder puts together (text,
reasoning, refusal, tool calls, finish, usage, error); and the timing (first
byte, first token, duration, tokens per second, the gaps between events and
the stalls). `lines` prints it for `sse-tape show`; `html_page` draws every
interaction as a timeline on one self-contained page for `show --html`;
`describe` says it in one line, as `record` and `synth` print what they kept.
"""

from __future__ import annotations

import bisect
import html
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from . import _json
from .cassette import Interaction
from .dialects import DIALECTS, Answer, Generation, Protocol, detect
from .dialects.events import ReasoningDelta, RefusalDelta, TextDelta, ToolCallDelta, ToolCallStart
from .framing import SSE, Framing
from .matching import framing_of
from .sse import ServerSentEvent
from .stats import percentile

__all__ = ["STALL", "Mark", "Timing", "View", "describe", "html_page", "lines", "view"]

STALL = 1.0
"""A gap between two events at least this long, in seconds, is a stall."""

# An `event` field line in a raw block: the wire named the event.
_EVENT_LINE = re.compile(rb"(?:^|\r\n|\r|\n)event(?::|\r|\n|$)")
_TOKENS = (TextDelta, ReasoningDelta, RefusalDelta, ToolCallStart, ToolCallDelta)


@dataclass(frozen=True, slots=True)
class Mark:
    """One block of a stream, at the time of the chunk that completed it."""

    t: float
    kind: str
    """`event` (it dispatched an event), `comment` (a heartbeat, say) or `other` (no data, or unfinished)."""
    text: str
    """The block as text, for people."""
    event: ServerSentEvent | None = None
    named: bool = False
    """Whether the wire had an `event:` line (else the event's name is the default, `message`)."""


@dataclass(frozen=True, slots=True)
class Timing:
    """When things happened, in seconds since the request was sent."""

    first_byte: float | None
    first_token: float | None
    last_token: float | None
    duration: float
    tokens: int
    """Output tokens: as the usage reports them, else the pieces the stream carried."""
    gaps: list[float]
    """Between consecutive events."""
    stalls: list[tuple[float, float]]
    """Where a gap of at least `STALL` began, and how long it was."""
    hidden: bool = False
    """Whether `tokens` count a reasoning the stream never showed: generated before the first token came."""

    @property
    def tokens_per_second(self) -> float | None:
        """Output tokens over the time they took: from the first token, or from the first byte when some of
        them were a hidden reasoning."""
        start = self.first_byte if self.hidden else self.first_token
        if start is None or self.last_token is None or self.last_token <= start:
            return None
        return self.tokens / (self.last_token - start)


@dataclass(slots=True)
class View:
    """An interaction, read for people."""

    number: int
    interaction: Interaction
    asked: str | None
    """The prompt's last message, as `role: text`."""
    dialect: Protocol | None
    marks: list[Mark]
    answer: Answer | None
    """What the stream (or the JSON answer) said, put together; None when no dialect reads it."""
    error: str | None
    """The error an error response carries."""
    timing: Timing
    notes: list[str] = field(default_factory=list)


def describe(interaction: Interaction) -> str:
    """One line about a recorded interaction: request, status, events, duration, how it ended."""
    req, resp = interaction.request, interaction.response
    framing = _framing(interaction)
    events = len(framing.event_ends(resp.body)) if framing is not None else 0
    return f"{req.method} {req.path} -> {resp.status}, {events} event{'s'[: events != 1]}, {resp.end_time:.2f} s, {resp.end}"


def view(number: int, interaction: Interaction) -> View:
    """Read one interaction for people."""
    request, response = interaction.request, interaction.response
    dialect = detect(interaction)
    marks = _marks(interaction)
    events = [m.event for m in marks if m.event is not None]
    event_times = [m.t for m in marks if m.event is not None]
    answer: Answer | None = None
    token_times: list[float] = []
    notes: list[str] = []
    error = _error_of(response.body) if response.status >= 400 else None
    if dialect is not None and not isinstance(dialect, Generation):
        if (summary := dialect.summary(interaction)) is not None:
            notes.append(summary)
        notes.append(f"{dialect.name} is an SSE protocol without generation: its answer is not put together")
    elif dialect is not None and error is None:
        try:
            if events:
                decoded = dialect.decode_indexed(events)
                answer = Answer.of(e for _, e in decoded)
                token_times = [event_times[i] for i, e in decoded if isinstance(e, _TOKENS)]
            elif response.body:
                parsed = dialect.decode_json(_json.parse(response.body, max_depth=None))
                answer = Answer.of(parsed) if parsed else None
                token_times = [response.chunks[-1].t] if parsed and response.chunks else []
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
            reason = _clip(f"{type(exc).__name__}: {exc}", 120)
            notes.append(f"the stream is not {dialect.name} as sse-tape reads it ({reason})")
    gaps = [b - a for a, b in itertools.pairwise(event_times)]
    timing = Timing(
        first_byte=response.chunks[0].t if response.chunks else None,
        first_token=token_times[0] if token_times else None,
        last_token=token_times[-1] if token_times else None,
        duration=response.end_time,
        tokens=answer.usage.output_tokens if answer is not None and answer.usage is not None else len(token_times),
        hidden=answer is not None and _hides_reasoning(answer),
        gaps=gaps,
        stalls=[(a, b - a) for a, b in itertools.pairwise(event_times) if b - a >= STALL],
    )
    return View(number, interaction, _asked(dialect, request.json()), dialect, marks, answer, error, timing, notes)


def lines(view: View, *, events: bool = False) -> list[str]:
    """What `sse-tape show` prints for an interaction; with `events`, every block of the stream too."""
    request, response = view.interaction.request, view.interaction.response
    query = f"?{request.query}" if request.query else ""
    out = [f"#{view.number} {request.method} {request.path}{query}"]
    if view.asked is not None:
        out.append(f"   asked {view.asked}")
    kind = response.header("content-type") or "no content-type"
    if (framing := _framing(view.interaction)) is not None and framing is not SSE:
        kind += f" ({framing.name})"  # a stream that is not SSE: Gemini's JSON array
    dialect = f", {view.dialect.name}" if view.dialect is not None else ""
    out.append(f"   -> {response.status} {kind}{dialect}, ended {response.end}")
    out += [f"   its client got it faulted: {note.fault}: {note.what}" for note in view.interaction.injected]
    if view.error is not None:
        out.append(f"   error: {view.error}")
    if view.answer is not None and isinstance(view.dialect, Generation):  # an answer is what a dialect read
        out += _answer_lines(view.answer, view.dialect)
    elif view.error is None and view.marks:
        unread = "" if view.dialect is not None else ", in no dialect sse-tape reads"
        out.append(f"   {sum(m.kind == 'event' for m in view.marks)} events{unread}")
    out += [f"   note: {note}" for note in view.notes]
    out += _timing_lines(view)
    if events:
        out += _event_lines(view.marks) if view.marks else [f"   body: {_clip(_text(response.body), 300)}"]
    return out


def _answer_lines(answer: Answer, dialect: Generation) -> list[str]:
    out = []
    for label, text in (("reasoning", answer.reasoning), ("answer", answer.text), ("refusal", answer.refusal)):
        if text:
            first, *rest = text.splitlines() or [""]
            out.append(f"   {label}: {first}")
            out += [f"   {' ' * len(label)}  {line}" for line in rest]
    for call in answer.calls:
        head = f"   tool call: {call.name}({call.arguments})"
        if call.server:
            result = f"failed: {call.error}" if call.error is not None else _clip(call.output or "", 120)
            out.append(f"{head}, run by the server -> {result}")
        else:
            out.append(head + (f" [{call.id}]" if call.id else ""))
    if answer.error is not None:  # named in the API's own words, as its stream named it (Gemini's status)
        out.append(f"   error: {answer.error.message} ({dialect.error_name(answer.error)})")
    if (finish := _finish_line(answer)) is not None:
        out.append(f"   {finish}")
    return out


def _hides_reasoning(answer: Answer) -> bool:
    """Whether the usage counts reasoning tokens the stream did not show."""
    return answer.usage is not None and bool(answer.usage.reasoning_tokens) and not answer.reasoning


def _finish_line(answer: Answer) -> str | None:
    parts = [f"finish: {answer.finish}"] if answer.finish else []
    if (usage := answer.usage) is not None:
        cached = f" ({usage.cached_tokens} cached)" if usage.cached_tokens else ""
        reasoning = f" ({usage.reasoning_tokens} reasoning)" if usage.reasoning_tokens else ""
        parts.append(f"usage: {usage.input_tokens} in{cached}, {usage.output_tokens} out{reasoning}")
    return "; ".join(parts) or None


def _timing_lines(view: View) -> list[str]:
    timing = view.timing
    parts = []
    if timing.first_byte is not None:
        parts.append(f"first byte {timing.first_byte:.3f} s")
    if timing.first_token is not None:
        parts.append(f"first token {timing.first_token:.3f} s")
    parts.append(f"ended {timing.duration:.3f} s")
    out = [f"   timing: {', '.join(parts)}"]
    count = sum(m.kind == "event" for m in view.marks)
    rate = timing.tokens_per_second
    sizes = [f"{count} event{'s'[: count != 1]}"] if view.marks else []
    sizes.append(f"{len(view.interaction.response.body)} bytes")
    if timing.tokens:
        sizes.append(f"{timing.tokens} tokens" + (f" at {rate:.1f} tokens/s" if rate is not None else ""))
    out.append(f"   {', '.join(sizes)}")
    if timing.gaps:
        ms = [g * 1000 for g in timing.gaps]
        gaps = f"gaps p50 {percentile(ms, 0.5):.0f} ms, p99 {percentile(ms, 0.99):.0f} ms, max {max(ms):.0f} ms"
        stalls = timing.stalls
        if stalls:
            at, length = max(stalls, key=lambda s: s[1])
            said = "1 stall:" if len(stalls) == 1 else f"{len(stalls)} stalls, the longest"
            gaps += f"; {said} {length:.1f} s from {at:.3f} s"
        else:
            gaps += "; no stalls"
        out.append(f"   {gaps}")
    return out


def _event_lines(marks: list[Mark]) -> list[str]:
    out = ["   events:"]
    for mark in marks:
        at = f"   {mark.t:8.3f} s  "
        if mark.event is None:
            out.append(at + _clip(mark.text.strip(), 200))
            continue
        field_lines = [f"event: {mark.event.event}"] if mark.named else []
        field_lines += [f"data: {line}" for line in mark.event.data.split("\n")]
        field_lines += [f"id: {mark.event.id}"] if mark.event.id else []
        out.append(at + field_lines[0])
        out += [" " * len(at) + line for line in field_lines[1:]]
    return out


def html_page(title: str, shown: list[tuple[str, View]]) -> str:
    """One self-contained page (no network needed to open it) with a timeline per interaction.

    Each block of a stream is a mark on a time axis (events and comments
    told apart, stalls shaded), beside what the stream said put together.
    `shown` pairs each interaction with the cassette it came from.
    """
    data = [_page_entry(source, s) for source, s in shown]
    # Inside <script>, `</script>` or `<!--` in recorded text would end or upset it: `<` only ever appears in
    # JSON strings, where \u003c reads the same.
    payload = _json.dumps(data).replace("<", "\\u003c")
    return _PAGE.format(title=html.escape(title), data=payload, style=_STYLE, script=_SCRIPT)


def _page_entry(source: str, view: View) -> dict[str, Any]:
    request, response = view.interaction.request, view.interaction.response
    answer = view.answer
    return {
        "source": source,
        "title": f"#{view.number} {request.method} {request.path}",
        "asked": view.asked,
        "status": f"{response.status} {response.header('content-type') or ''}".strip()
        + (f", {view.dialect.name}" if view.dialect else "")
        + f", ended {response.end}",
        "duration": view.timing.duration,
        "marks": [{"t": m.t, "kind": m.kind, "label": _clip(_mark_label(m), 300)} for m in view.marks],
        "stalls": view.timing.stalls,
        "text": answer.text if answer else "",
        "reasoning": answer.reasoning if answer else "",
        "refusal": answer.refusal if answer else "",
        "calls": [f"{c.name}({c.arguments})" for c in answer.calls] if answer else [],
        "error": view.error or (answer.error.message if answer and answer.error else None),
        "summary": [
            *([finish] if answer is not None and (finish := _finish_line(answer)) is not None else []),
            *(line.strip() for line in _timing_lines(view)),
        ],
    }


def _mark_label(mark: Mark) -> str:
    if mark.event is None:
        return f"{mark.t:.3f} s  {mark.text.strip()}"
    name = f"event: {mark.event.event}\n" if mark.named else ""
    return f"{mark.t:.3f} s  {name}data: {mark.event.data}"


def _framing(interaction: Interaction) -> Framing | None:
    """How the body frames a stream: SSE for an event stream or a body with no content type (it may hold
    events all the same), else the framing of its API's (see `framing_of`); None for no stream."""
    kind = (interaction.response.header("content-type") or "").split(";")[0].strip().lower()
    return SSE if kind in ("", "text/event-stream") else framing_of(interaction)


def _marks(interaction: Interaction) -> list[Mark]:
    """The stream's blocks (SSE blocks, a JSON array's elements), each at the time of the chunk holding its last
    byte; [] for a body that is no stream."""
    response = interaction.response
    body = response.body
    framing = _framing(interaction)
    if framing is None or not body:
        return []
    ends = list(itertools.accumulate(len(c.data) for c in response.chunks))
    marks = []
    for block in framing.blocks(body):
        raw = body[block.start : block.end]
        t = response.chunks[min(bisect.bisect_left(ends, block.end), len(ends) - 1)].t
        if block.event is not None:
            marks.append(Mark(t, "event", _text(raw), block.event, bool(_EVENT_LINE.search(raw))))
        else:
            marks.append(Mark(t, "comment" if raw.lstrip(b"\r\n").startswith(b":") else "other", _text(raw)))
    if not response.header("content-type") and not any(m.kind == "event" for m in marks):
        return []  # a body with no content type and no events is no stream
    return marks


def _asked(dialect: Protocol | None, body: Any) -> str | None:
    """The last turn of a request body, as `(role): text`: as its dialect reads it, or, for an API sse-tape does
    not know, as the first of the LLM APIs that finds one."""
    if isinstance(dialect, Generation):
        readers: list[Generation] = [dialect]
    elif dialect is None:
        readers = [d for d in DIALECTS.values() if isinstance(d, Generation)]
    else:
        return None  # a protocol without generation has no turns
    turn = next((found for reader in readers if (found := reader.last_turn(body)) is not None), None)
    if turn is None:
        return None
    role, text = turn
    return f"({role}): {_clip(text, 200)}"


def _error_of(body: bytes) -> str:
    try:
        obj = _json.parse(body, max_depth=None)
    except ValueError:
        return _clip(_text(body), 200)
    inner = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(inner, dict) and "message" in inner:
        return _clip(str(inner["message"]), 300)
    return _clip(_text(body), 200)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _clip(text: str, limit: int) -> str:
    text = text.replace("\r", "\\r")
    return text if len(text) <= limit else text[: limit - 3] + "..."


_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em; color: #1d1d1f; background: #fafafa; }
h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin: 0 0 .3em; font-family: ui-monospace, monospace; }
section.interaction { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 1em; margin: 1em 0; }
.source, .status, .summary { color: #555; margin: .2em 0; } .asked { margin: .2em 0 .6em; }
.row { display: flex; gap: 1.5em; align-items: flex-start; flex-wrap: wrap; }
svg.timeline { flex: 0 0 auto; background: #f4f6f8; border-radius: 4px; }
.mark.event { stroke: #2563eb; stroke-width: 1.5; } .mark.comment { stroke: #d97706; stroke-width: 1.5; }
.mark.other { stroke: #9ca3af; stroke-width: 1; } .mark:hover { stroke-width: 4; }
.stall { fill: #fca5a5; fill-opacity: .45; } .axis { stroke: #6b7280; } .tick { font-size: 10px; fill: #6b7280; }
.stall-label { font-size: 10px; fill: #b91c1c; }
.said { flex: 1 1 22em; min-width: 16em; }
pre { white-space: pre-wrap; word-break: break-word; margin: .3em 0; font: 13px/1.4 ui-monospace, monospace; }
pre.reasoning { color: #6b7280; } pre.refusal, pre.error { color: #b91c1c; }
.legend span { margin-right: 1em; } .legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
"""

_SCRIPT = """
(function () {
  const tape = JSON.parse(document.getElementById("tape-data").textContent);
  const main = document.getElementById("tape");
  const SVG = "http://www.w3.org/2000/svg";
  const W = 640, H = 70, PAD = 12;
  function el(tag, attrs, text) {
    const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function step(span) {
    const raw = span / 8, base = Math.pow(10, Math.floor(Math.log10(raw || 1)));
    for (const m of [1, 2, 5, 10]) if (base * m >= raw) return base * m;
    return base * 10;
  }
  tape.forEach(function (it, n) {
    const section = el("section", {"class": "interaction", "id": "interaction-" + (n + 1)});
    section.append(el("h2", {}, it.title));
    section.append(el("p", {"class": "source"}, it.source));
    if (it.asked) section.append(el("p", {"class": "asked"}, "asked " + it.asked));
    section.append(el("p", {"class": "status"}, it.status));
    const row = el("div", {"class": "row"});
    const span = it.marks.reduce((latest, m) => Math.max(latest, m.t), Math.max(it.duration, 0.001));
    const x = t => PAD + (W - 2 * PAD) * t / span;
    const svg = el("svg:svg", {"class": "timeline", "width": W, "height": H + 18, "viewBox": `0 0 ${W} ${H + 18}`});
    for (const [at, length] of it.stalls) {
      svg.append(el("svg:rect", {"class": "stall", "x": x(at), "y": 4, "width": Math.max(x(at + length) - x(at), 1), "height": H - 8}));
      svg.append(el("svg:text", {"class": "stall-label", "x": x(at) + 3, "y": 14}, `stall ${length.toFixed(1)} s`));
    }
    svg.append(el("svg:line", {"class": "axis", "x1": PAD, "x2": W - PAD, "y1": H - 4, "y2": H - 4}));
    const tick = step(span);
    for (let t = 0; t <= span + 1e-9; t += tick) {
      svg.append(el("svg:line", {"class": "axis", "x1": x(t), "x2": x(t), "y1": H - 4, "y2": H}));
      svg.append(el("svg:text", {"class": "tick", "x": x(t), "y": H + 12, "text-anchor": "middle"}, `${+t.toFixed(3)} s`));
    }
    for (const m of it.marks) {
      const top = m.kind === "event" ? 10 : 30;
      const line = el("svg:line", {"class": "mark " + m.kind, "x1": x(m.t), "x2": x(m.t), "y1": top, "y2": H - 6});
      line.append(el("svg:title", {}, m.label));
      svg.append(line);
    }
    row.append(svg);
    const said = el("div", {"class": "said"});
    if (it.reasoning) said.append(el("pre", {"class": "reasoning"}, it.reasoning));
    if (it.text) said.append(el("pre", {"class": "text"}, it.text));
    if (it.refusal) said.append(el("pre", {"class": "refusal"}, it.refusal));
    for (const call of it.calls) said.append(el("pre", {"class": "call"}, call));
    if (it.error) said.append(el("pre", {"class": "error"}, it.error));
    for (const line of it.summary) said.append(el("p", {"class": "summary"}, line));
    row.append(said);
    section.append(row);
    main.append(section);
  });
  document.body.setAttribute("data-rendered", String(tape.length));
})();
"""

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<h1>{title}</h1>
<p class="legend"><span><i style="background:#2563eb"></i>event</span><span><i style="background:#d97706"></i>comment
(heartbeat)</span><span><i style="background:#fca5a5"></i>stall</span> Hover a mark for its data.</p>
<main id="tape"></main>
<noscript>This page draws its timelines with JavaScript.</noscript>
<script type="application/json" id="tape-data">{data}</script>
<script>{script}</script>
</body>
</html>
"""
