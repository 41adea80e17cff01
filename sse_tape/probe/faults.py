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

from ..faults import parse_fault
from .comparison import Comparison
from .reading import Ending, Reading
from .report import FaultReport, added_lines

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
        said.append(f"{len(c.lost)} of {len(c.sent_events)} events never came")
    said += added_lines(c)
    if c.changed:
        said.append(f"{len(c.changed)} events came changed")
    if c.reordered:
        said.append(f"{len(c.reordered)} events came out of order")
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
) -> FaultReport:
    """How the gateway passed on `fault`, from the faulted answer read straight and through it."""
    kind = parse_fault(fault).name
    c = comparison

    def report(verdict: str, detail: str, *, harmless: bool = False) -> FaultReport:
        return FaultReport(fault, name, verdict, detail, straight, through, c, harmless=harmless)

    differs = _differences(straight, through, c)
    if upstream_requests == 0:
        got = "; ".join(differs) or "the answer the upstream would have sent"
        return report(
            "hidden", f"the upstream got no request: the gateway answered on its own (a cache); the client got: {got}"
        )
    if upstream_requests > 1:
        begun = straight.first_byte is not None and straight.status is not None and straight.status < 300
        got = "; ".join(differs) or "the answer the upstream sent"
        when = "after the first bytes" if begun else "before any byte"
        return report(
            "retried",
            f"the upstream got {upstream_requests} requests ({when}); the client got: {got}",
            harmless=not begun,
        )
    if kind == "stall":
        sent, came = c.comments
        late = c.latencies(events=False)
        if through.ending is not Ending.COMPLETE and straight.ending is Ending.COMPLETE:
            return report("rewritten", f"the answer ended {through.ending} during the stall ({through.detail})")
        if sent and not came:
            return report("hidden", f"none of the {sent} heartbeats came")
        if came < sent:
            return report("rewritten", f"{sent - came} of {sent} heartbeats never came")
        if late and max(late) > tolerance:
            return report("rewritten", f"the heartbeats came up to {max(late) * 1000:.0f} ms late")
    if not differs:
        late = c.latencies()
        if late and max(late) > tolerance:  # passed, but held back (the interaction's `buffered` says how)
            return report("passed", f"as the upstream sent it, held back up to {max(late) * 1000:.0f} ms")
        return report("passed", "as the upstream sent it")
    sent_events = len(c.sent_events)
    # The stream ended cleanly where it should have ended otherwise: in a cut, or with its last events (the
    # error frame and what follows it).
    ended_early = bool(c.lost) and c.lost == list(range(sent_events - len(c.lost), sent_events))
    if _ok(through) and (not _ok(straight) or ended_early) and not c.added and not c.changed:
        shown = {
            "error": "the error frame never came and the stream ended cleanly",
            "disconnect": "the cut stream ended cleanly, as if whole",
        }.get(kind, f"the client got a whole {through.status} answer")
        return report("hidden", shown)
    if _ok(through) and through.status != straight.status:
        return report("hidden", f"the client got a whole {through.status} answer")
    return report("rewritten", "; ".join(differs))
