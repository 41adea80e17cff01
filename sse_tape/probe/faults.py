"""How a gateway passes on the faults an upstream has: each one put in the stream upstream, read straight and
through the gateway, and judged: `passed` as it is, `rewritten`, `retried` or `hidden`.

A fault is hidden when the client can no longer tell it happened (an error
frame turned into a clean end, a cut stream ended as if whole, a 429 turned
into a 200, heartbeats swallowed); rewritten when the client sees it
otherwise (a 502 for a cut, a 429 without its `Retry-After`); retried when
the upstream got the request again. A retry of an answer that had not begun
(a 429) is a gateway's choice, and said as harmless; a retry after the
first bytes sends the client what it already had again.
"""

from __future__ import annotations

from collections.abc import Callable

from ..faults import parse_fault
from ..sse import ServerSentEvent
from .comparison import Comparison
from .reading import Ending, Reading
from .report import FaultReport, Verdict, added_lines, plural

__all__ = ["DEFAULT_FAULTS", "judge"]

DEFAULT_FAULTS = (
    "error:at=50%",
    "disconnect:after=50%",
    "stall:at=50%,for=3s,heartbeat=1s",
    "status:code=429,retry_after=2",
)
"""The faults a probe puts in a stream unless told otherwise: a mid-stream error frame, a cut, a stall with
heartbeats, a 429 with `Retry-After`."""


def _ok(reading: Reading) -> bool:
    """Whether an answer looks whole and well to its client: a 2xx that ended as HTTP says."""
    return reading.status is not None and 200 <= reading.status < 300 and reading.ending is Ending.COMPLETE


def _differences(straight: Reading, through: Reading, c: Comparison) -> list[str]:
    said = []
    if through.status != straight.status:
        said.append(f"answered {through.status} where the upstream answered {straight.status}")
    if through.ending is not straight.ending:
        said.append(f"the answer ended {through.ending}, not {straight.ending}")
    if c.lost:
        said.append(f"{len(c.lost)} of {plural(len(c.sent_events), 'event')} never came")
    said += added_lines(c)
    if c.changed:
        said.append(f"{plural(len(c.changed), 'event')} came changed")
    if c.reordered:
        said.append(f"{plural(len(c.reordered), 'event')} came out of order")
    before, after = straight.header("retry-after"), through.header("retry-after")
    if before != after:
        said.append(
            f"Retry-After {before} became {after}"
            if before and after
            else f"Retry-After {before or 'none'} became {after or 'none'}"
        )
    return said


def judge(
    fault: str,
    name: str,
    straight: Reading,
    through: Reading,
    comparison: Comparison,
    upstream_requests: int,
    tolerance: float,
    terminal: Callable[[ServerSentEvent], bool] = lambda event: False,
) -> FaultReport:
    """How the gateway passed on `fault`, from the faulted answer read straight and through it;
    `upstream_requests` is how many requests for it reached the upstream through the gateway, and `terminal`
    tells the frames that end a stream in its API (`[DONE]`), which a gateway that hides a fault writes."""
    kind = parse_fault(fault).name
    c = comparison

    def report(verdict: Verdict, detail: str, *, harmless: bool = False) -> FaultReport:
        return FaultReport(fault, name, verdict, detail, straight, through, c, harmless=harmless)

    differs = _differences(straight, through, c)
    if upstream_requests == 0:
        got = "; ".join(differs) or "the answer the upstream would have sent"
        return report(
            Verdict.HIDDEN,
            f"the upstream got no request: the gateway answered on its own (a cache); the client got: {got}",
        )
    if upstream_requests > 1:
        begun = straight.first_byte is not None and straight.status is not None and straight.status < 300
        got = "; ".join(differs) or "the answer the upstream sent"
        when = "after the first bytes" if begun else "before any byte"
        return report(
            Verdict.RETRIED,
            f"the upstream got {upstream_requests} requests ({when}); the client got: {got}",
            harmless=not begun,
        )
    if kind == "stall":
        sent, came = c.comments
        late = c.latencies(events=False)
        if through.ending is not Ending.COMPLETE and straight.ending is Ending.COMPLETE:
            return report(Verdict.REWRITTEN, f"the answer ended {through.ending} during the stall ({through.detail})")
        if sent and not came:
            return report(Verdict.HIDDEN, f"none of the {sent} heartbeats came")
        if came < sent:
            return report(Verdict.REWRITTEN, f"{sent - came} of {sent} heartbeats never came")
        if late and max(late) > tolerance:
            return report(Verdict.REWRITTEN, f"the heartbeats came up to {max(late) * 1000:.0f} ms late")
    if not differs:
        late = c.latencies()
        if late and max(late) > tolerance:  # passed, but held back (the interaction's `buffered` says how)
            return report(Verdict.PASSED, f"as the upstream sent it, held back up to {max(late) * 1000:.0f} ms")
        return report(Verdict.PASSED, "as the upstream sent it")
    sent_events, got_events = c.sent_events, c.got_events
    # The stream ended cleanly where it should have ended otherwise: in a cut, or with its last events (the
    # error frame and what follows it), the gateway adding at most a stream's end of its own (`[DONE]`).
    ended_early = bool(c.lost) and all(
        i in c.lost or (b.event is not None and terminal(b.event))
        for i, b in enumerate(sent_events)
        if i >= min(c.lost)
    )
    written = [got_events[j] for j in c.added] + [got_events[j] for _, j in c.changed]
    only_an_end = all(b.event is not None and terminal(b.event) for b in written)
    if _ok(through) and (not _ok(straight) or ended_early) and only_an_end:
        shown = {
            "error": "the error frame never came and the stream ended cleanly",
            "disconnect": "the cut stream ended cleanly, as if whole",
        }.get(kind, f"the client got a whole {through.status} answer")
        return report(Verdict.HIDDEN, shown)
    if _ok(through) and through.status != straight.status:
        return report(Verdict.HIDDEN, f"the client got a whole {through.status} answer")
    return report(Verdict.REWRITTEN, "; ".join(differs))
