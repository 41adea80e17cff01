"""What a probe found: one report per interaction, one per fault, and a finding per thing the gateway did.

A `Finding` is one line a person reads (`lost: event #3 never came`); a
harmless one (line ends rewritten, events coalesced, headers added) is said
but does not fail the probe. `ProbeReport.clean` is what a test asserts and
what `sse-tape probe` exits on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ..cassette import Request
from ..stats import median, percentile
from .comparison import Comparison, events_per_read, header_changes
from .reading import Ending, Reading

__all__ = [
    "FaultReport",
    "Finding",
    "InteractionReport",
    "ProbeReport",
    "Verdict",
    "added_lines",
    "plural",
    "request_changes",
]

# Request headers the connection to the upstream sets, whoever forwards the request.
_PER_CONNECTION = frozenset({"host", "content-length", "connection", "transfer-encoding", "keep-alive"})


class Verdict(StrEnum):
    """How a gateway passed on a fault."""

    PASSED = "passed"
    """As the upstream sent it."""
    REWRITTEN = "rewritten"
    """Otherwise than the upstream sent it, the client still able to tell."""
    RETRIED = "retried"
    """The upstream got the request again."""
    HIDDEN = "hidden"
    """The client can no longer tell it happened."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the gateway did, in one line."""

    kind: str
    """What it is (`lost`, `buffered`, `headers`, `fault:error`...); see docs/probe.md."""
    line: str
    harmless: bool = False
    """Said, but no reason to fail: a change a client reads the same (line ends, coalescing, headers added)."""

    def __str__(self) -> str:
        return f"{self.kind}: {self.line}" + (" (harmless)" if self.harmless else "")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if abs(seconds) >= 0.01 else f"{seconds * 1000:.1f} ms"


def _numbers(indexes: list[int]) -> str:
    shown = ", ".join(f"#{i + 1}" for i in indexes[:10])
    return shown + (f" and {len(indexes) - 10} more" if len(indexes) > 10 else "")


def plural(n: int, word: str) -> str:
    """`1 event`, `2 events`."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def request_changes(straight: Request | None, through: Request | None) -> list[str]:
    """What the gateway changed in the request, as the upstream got it straight and through the gateway."""
    if straight is None or through is None:
        return []
    before = {k.lower(): v for k, v in straight.headers if k.lower() not in _PER_CONNECTION}
    after = {k.lower(): v for k, v in through.headers if k.lower() not in _PER_CONNECTION}
    said = []
    if added := sorted(set(after) - set(before)):
        said.append("added headers " + ", ".join(added))
    if removed := sorted(set(before) - set(after)):
        said.append("removed headers " + ", ".join(removed))
    if changed := sorted(k for k in before if k in after and before[k] != after[k]):
        said.append("changed headers " + ", ".join(changed))
    if (straight.method, straight.path, straight.query) != (through.method, through.path, through.query):
        said.append(f"sent it as {through.method} {through.path}" + (f"?{through.query}" if through.query else ""))
    if straight.body != through.body:
        a, b = straight.json(), through.json()
        if isinstance(a, dict) and isinstance(b, dict):
            fields = sorted({k for k in a.keys() | b.keys() if a.get(k) != b.get(k)})
            said.append("changed the body's " + ", ".join(fields) if fields else "rewrote the body, the same JSON")
        else:
            said.append(f"changed the body ({len(straight.body)} bytes -> {len(through.body)})")
    return said


def _media_types_differ(change: str) -> bool:
    """Whether a header change `content-type: before -> after` names another media type."""
    before, _, after = change.partition(": ")[2].partition(" -> ")
    return before.split(";")[0].strip().lower() != after.split(";")[0].strip().lower()


def added_lines(c: Comparison) -> list[str]:
    """What came that was not sent there, in words: events sent elsewhere come again, and events never sent."""
    again = c.repeated
    never = [j for j in c.added if j not in again]
    said = [f"{plural(len(again), 'event')} came again: {_numbers(again)}"] if again else []
    sent = "was" if len(never) == 1 else "were"
    return said + ([f"{plural(len(never), 'event')} came that {sent} never sent: {_numbers(never)}"] if never else [])


@dataclass(slots=True)
class InteractionReport:
    """One interaction read straight from the upstream and through the gateway, and what differed."""

    name: str
    """The recording, as `cassette.toml#2`."""
    request: Request
    straight: Reading
    through: Reading
    comparison: Comparison
    upstream_requests: int
    """How many requests reached the upstream while the gateway was read."""
    tolerance: float
    """How much later than straight an event may come through the gateway before it counts as held back."""
    request_changes: list[str] = field(default_factory=list)
    recorded_status: int | None = None
    """The status the recording says; a straight answer with another was not what the probe meant to send."""
    findings: list[Finding] = field(init=False)

    def __post_init__(self) -> None:
        self.findings = self._findings()

    @property
    def latency(self) -> tuple[float, float, float]:
        """How much later the events came through the gateway than straight, in seconds: p50, p99, max."""
        values = self.comparison.latencies()
        return median(values), percentile(values, 0.99), max(values, default=float("nan"))

    @property
    def first_byte_added(self) -> float | None:
        """How much later the body's first byte came through the gateway, in seconds."""
        a, b = self.straight.first_byte, self.through.first_byte
        return b - a if a is not None and b is not None else None

    @property
    def first_event_added(self) -> float | None:
        """How much later the first event came through the gateway, in seconds."""
        sent, got = self.comparison.sent_events, self.comparison.got_events
        return got[0].t - sent[0].t if sent and got else None

    def _findings(self) -> list[Finding]:
        straight, through, c = self.straight, self.through, self.comparison
        found: list[Finding] = []
        if self.recorded_status is not None and straight.status != self.recorded_status:
            line = f"the upstream answered {straight.status} where the recording says {self.recorded_status}"
            return [Finding("not-probed", f"{line}: nothing was compared")]
        if through.status is None:
            return [Finding("unreachable", f"no answer through the gateway: {through.detail or through.ending}")]
        if through.status != straight.status:
            found.append(Finding("status", f"answered {through.status} where the upstream answered {straight.status}"))
        if self.upstream_requests == 0:
            found.append(Finding("cached", "answered without asking the upstream"))
        elif self.upstream_requests > 1:
            found.append(Finding("retried", f"the upstream got {self.upstream_requests} requests for one"))
        if straight.ending is Ending.COMPLETE and through.ending is not Ending.COMPLETE:
            line = (
                f"the answer ended {through.ending} after {plural(len(c.got_events), 'event')} of {len(c.sent_events)}"
            )
            found.append(Finding("cut", f"{line}: {through.detail}" if through.detail else line))
        if c.lost:
            found.append(Finding("lost", f"{plural(len(c.lost), 'event')} never came: {_numbers(c.lost)}"))
        found += [Finding("added", line) for line in added_lines(c)]
        if c.reordered:
            found.append(
                Finding("reordered", f"{plural(len(c.reordered), 'event')} came out of order: {_numbers(c.reordered)}")
            )
        if c.changed:
            shown = [i for i, _ in c.changed]
            found.append(Finding("changed", f"{plural(len(shown), 'event')} came changed: {_numbers(shown)}"))
        if c.line_endings:
            line = f"{plural(len(c.line_endings), 'event')} came with other line ends"
            found.append(Finding("line-endings", f"{line}: {_numbers(c.line_endings)}", harmless=True))
        if c.respelled:
            line = f"{plural(len(c.respelled), 'event')} came written otherwise, meaning the same"
            found.append(Finding("respelled", f"{line}: {_numbers(c.respelled)}", harmless=True))
        sent_comments, got_comments = c.comments
        if got_comments < sent_comments:
            found.append(
                Finding(
                    "comments", f"{sent_comments - got_comments} of {sent_comments} comments never came", harmless=True
                )
            )
        if extra := sum(1 for b in c.got if b.event is None) - got_comments:
            line = f"{plural(extra, 'comment')} came that {'was' if extra == 1 else 'were'} never sent"
            found.append(Finding("comments", line, harmless=True))
        found += self._timing()
        added, removed, changed = header_changes(straight, through)
        # Another media type is a problem; the same with a parameter added (`; charset=utf-8`) is not.
        typed = [h for h in removed if h.startswith("content-type:")]
        typed += [h for h in changed if h.startswith("content-type:") and _media_types_differ(h)]
        if typed:
            found.append(Finding("headers", "Content-Type " + ("removed" if typed[0] in removed else typed[0][14:])))
        rest = [f"added {h}" for h in added] + [f"removed {h}" for h in removed if h not in typed]
        rest += [f"changed {h}" for h in changed if h not in typed]
        if rest:
            found.append(Finding("headers", "; ".join(rest), harmless=True))
        if self.request_changes:
            found.append(Finding("request", "; ".join(self.request_changes), harmless=True))
        return found

    def _timing(self) -> list[Finding]:
        c = self.comparison
        late = c.latencies()
        if not late:
            return []
        p50, _, most = self.latency
        found = []
        run, span = c.runs()
        if most > self.tolerance:
            if run > 1 and span > self.tolerance:
                line = f"held events back up to {_ms(most)}: {run} events sent over {_ms(span)} came in one read"
                found.append(Finding("buffered", line))
            else:
                found.append(Finding("delayed", f"events came {_ms(p50)} later (p50), up to {_ms(most)}"))
        _, straight_most = events_per_read(c.sent)
        _, through_most = events_per_read(c.got)
        if through_most > straight_most and not any(f.kind == "buffered" for f in found):
            line = f"up to {through_most} events came in one read (straight: {straight_most})"
            found.append(Finding("coalesced", line, harmless=True))
        return found

    def to_json(self) -> dict[str, Any]:
        """The report as JSON values: figures in milliseconds."""
        c = self.comparison
        p50, p99, most = self.latency

        def ms(value: float | None) -> float | None:
            return None if value is None or value != value else round(value * 1000, 3)

        return {
            "interaction": self.name,
            "method": self.request.method,
            "path": self.request.path,
            "status": {"straight": self.straight.status, "through": self.through.status},
            "ending": {"straight": str(self.straight.ending), "through": str(self.through.ending)},
            "events": {"straight": len(c.sent_events), "through": len(c.got_events)},
            "lost": c.lost,
            "added": c.added,
            "repeated": c.repeated,
            "reordered": c.reordered,
            "changed": [i for i, _ in c.changed],
            "line_endings": c.line_endings,
            "respelled": c.respelled,
            "comments": {"straight": c.comments[0], "through": sum(1 for b in c.got if b.event is None)},
            "added_latency_ms": {"p50": ms(p50), "p99": ms(p99), "max": ms(most)},
            "first_byte_added_ms": ms(self.first_byte_added),
            "first_event_added_ms": ms(self.first_event_added),
            "largest_run": {"events": c.runs()[0], "sent_over_ms": ms(c.runs()[1])},
            "events_per_read": {
                "straight": round(events_per_read(c.sent)[0], 3),
                "through": round(events_per_read(c.got)[0], 3),
                "straight_max": events_per_read(c.sent)[1],
                "through_max": events_per_read(c.got)[1],
            },
            "headers": dict(
                zip(("added", "removed", "changed"), header_changes(self.straight, self.through), strict=True)
            ),
            "upstream_requests": self.upstream_requests,
            "request_changes": self.request_changes,
            "findings": [{"kind": f.kind, "line": f.line, "harmless": f.harmless} for f in self.findings],
        }

    def lines(self) -> list[str]:
        """The report as a person reads it."""
        c = self.comparison
        p50, p99, most = self.latency
        head = f"{self.name}  {self.request.method} {self.request.path}  {self.straight.status}"
        if self.through.status != self.straight.status:
            head += f" -> {self.through.status}"
        said = [head, f"  events: {len(c.sent_events)} sent, {len(c.got_events)} came"]
        if c.latencies():
            said.append(f"  added latency per event: p50 {_ms(p50)}, p99 {_ms(p99)}, max {_ms(most)}")
            first = self.first_event_added
            byte = self.first_byte_added
            parts = [
                f"first byte {_ms(byte)}" if byte is not None else "",
                f"first event {_ms(first)}" if first is not None else "",
            ]
            said.append("  added before the " + ", ".join(p for p in parts if p))
            mean_straight, _ = events_per_read(c.sent)
            mean_through, _ = events_per_read(c.got)
            said.append(f"  events per read: {mean_through:.2f} through, {mean_straight:.2f} straight")
        said += [f"  {finding}" for finding in self.findings] or ["  passed as it came"]
        return said


@dataclass(slots=True)
class FaultReport:
    """How the gateway passed on one fault the upstream put in a stream."""

    fault: str
    """The fault, as its text (`error:at=50%`)."""
    name: str
    """The interaction it was put in."""
    verdict: Verdict
    detail: str
    straight: Reading
    through: Reading
    comparison: Comparison
    harmless: bool = False
    """Whether the verdict is no reason to fail (a retry of an answer that had not begun)."""

    @property
    def finding(self) -> Finding | None:
        """The finding it makes, unless the fault passed as it is."""
        if self.verdict is Verdict.PASSED:
            return None
        kind = self.fault.partition(":")[0]
        return Finding(f"fault:{kind}", f"{self.verdict}: {self.detail}", harmless=self.harmless)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON values."""
        return {
            "fault": self.fault,
            "interaction": self.name,
            "verdict": str(self.verdict),
            "detail": self.detail,
            "harmless": self.harmless,
            "status": {"straight": self.straight.status, "through": self.through.status},
            "ending": {"straight": str(self.straight.ending), "through": str(self.through.ending)},
        }

    def line(self) -> str:
        """The report in one line."""
        return f"{self.fault:<34} {self.verdict}: {self.detail}"


@dataclass(slots=True)
class ProbeReport:
    """Everything a probe found."""

    through: str | None
    """The gateway's URL; None for a probe of the upstream alone."""
    upstream: str
    interactions: list[InteractionReport]
    faults: list[FaultReport]
    tolerance: float
    note: str = ""
    """What the probe could not do (no stream to put the faults in)."""

    @property
    def findings(self) -> list[Finding]:
        """Every finding, the interactions' then the faults'."""
        found = [f for report in self.interactions for f in report.findings]
        return found + [f for report in self.faults if (f := report.finding) is not None]

    @property
    def problems(self) -> list[Finding]:
        """The findings that are not harmless."""
        return [f for f in self.findings if not f.harmless]

    @property
    def clean(self) -> bool:
        """Whether the gateway passed every stream and fault as the upstream sent it (harmless changes aside)."""
        return not self.problems

    def lines(self) -> list[str]:
        """The report as a person reads it."""
        where = f"through {self.through}" if self.through else "straight"
        said = [f"sse-tape probe {where} (upstream {self.upstream}, tolerance {_ms(self.tolerance)})", ""]
        for report in self.interactions:
            said += [*report.lines(), ""]
        if self.faults:
            said.append("faults put in the stream upstream:")
            said += [f"  {report.line()}" for report in self.faults]
            said.append("")
        if self.note:
            said += [self.note, ""]
        problems = self.problems
        if problems:
            said.append(f"{plural(len(problems), 'problem')} found:")
            said += [f"  {finding}" for finding in problems]
        else:
            harmless = len(self.findings)
            said.append(
                "clean: streams passed unbuffered and unchanged"
                + (f" ({plural(harmless, 'harmless change')})" if harmless else "")
            )
        return said

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def to_json(self) -> dict[str, Any]:
        """The report as JSON values."""
        return {
            "through": self.through,
            "upstream": self.upstream,
            "tolerance_ms": round(self.tolerance * 1000, 3),
            "note": self.note,
            "clean": self.clean,
            "interactions": [report.to_json() for report in self.interactions],
            "faults": [report.to_json() for report in self.faults],
            "problems": [str(f) for f in self.problems],
        }

    def dumps(self) -> str:
        """The report as a JSON document."""
        return json.dumps(self.to_json(), indent=2)

    def assert_clean(self) -> None:
        """Raise `AssertionError` with the report unless it is clean: a gateway's test in one line."""
        if not self.clean:
            raise AssertionError(str(self))
