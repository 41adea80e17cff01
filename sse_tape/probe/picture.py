"""A probe's report as a picture: one self-contained HTML page (no script, no network), a timeline per
interaction and per fault, what was read straight above what came through the gateway on one time axis.

Each block is a mark at the time its read came: events dark, comments
(heartbeats) grey; a line joins each block to itself through the gateway,
so a line that leans is latency and a fan of lines into one point is
buffering; a block lost is red, one added orange, one changed blue.
"""

from __future__ import annotations

import html

from .comparison import Comparison
from .report import ProbeReport

__all__ = ["html_page"]

_WIDTH, _LEFT, _RIGHT = 960, 90, 20
_STRAIGHT_Y, _THROUGH_Y, _HEIGHT = 30, 110, 150

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
h2 { font-size: 16px; margin: 1.6em 0 .3em; }
.problem { color: #b00; } .harmless { color: #666; } .clean { color: #070; }
svg { background: #fafafa; border: 1px solid #ddd; }
text { font: 11px system-ui, sans-serif; fill: #555; }
ul { margin: .3em 0; }
"""


def _timeline(c: Comparison) -> str:
    times = [b.t for b in c.sent + c.got]
    end = max(times, default=0.0) or 1.0

    def x(t: float) -> float:
        return _LEFT + max(t, 0.0) / end * (_WIDTH - _LEFT - _RIGHT)

    parts = [
        f'<svg width="{_WIDTH}" height="{_HEIGHT}" role="img">',
        f'<text x="4" y="{_STRAIGHT_Y + 4}">straight</text>',
        f'<text x="4" y="{_THROUGH_Y + 4}">through</text>',
        f'<line x1="{_LEFT}" y1="{_HEIGHT - 18}" x2="{_WIDTH - _RIGHT}" y2="{_HEIGHT - 18}" stroke="#bbb"/>',
    ]
    for tick in range(5):
        t = end * tick / 4
        anchor = ("start", "middle", "middle", "middle", "end")[tick]
        parts.append(f'<text x="{x(t):.1f}" y="{_HEIGHT - 4}" text-anchor="{anchor}">{t * 1000:.0f} ms</text>')
    joined_sent = {i for i, _ in c.pairs}
    joined_got = {j for _, j in c.pairs}
    sent_events = [n for n, b in enumerate(c.sent) if b.event is not None]
    got_events = [n for n, b in enumerate(c.got) if b.event is not None]
    changed = {("sent", sent_events[i]) for i, _ in c.changed} | {("got", got_events[j]) for _, j in c.changed}
    for i, j in c.pairs:
        colour = "#bbb" if c.sent[i].event is None else "#6a8"
        parts.append(
            f'<line x1="{x(c.sent[i].t):.1f}" y1="{_STRAIGHT_Y + 8}" x2="{x(c.got[j].t):.1f}" y2="{_THROUGH_Y - 8}" '
            f'stroke="{colour}" stroke-width="1"/>'
        )
    for row, found, joined, y in (("sent", c.sent, joined_sent, _STRAIGHT_Y), ("got", c.got, joined_got, _THROUGH_Y)):
        for n, block in enumerate(found):
            if n in joined:
                colour = "#333" if block.event is not None else "#aaa"
            elif (row, n) in changed:
                colour = "#26c"
            else:
                colour = "#d22" if row == "sent" else "#e80"
            label = html.escape(block.raw[:200].decode("utf-8", "replace"))
            parts.append(
                f'<rect x="{x(block.t) - 1.5:.1f}" y="{y - 8}" width="3" height="16" fill="{colour}">'
                f"<title>{block.t * 1000:.1f} ms: {label}</title></rect>"
            )
    parts.append("</svg>")
    return "".join(parts)


def html_page(report: ProbeReport) -> str:
    """The report as one self-contained HTML page."""
    where = f"through {report.through}" if report.through else "straight"
    title = html.escape(f"sse-tape probe {where}")
    body = [f"<h1>{title}</h1>", f"<p>upstream {html.escape(report.upstream)}</p>"]
    problems = report.problems
    if problems:
        body.append(f'<p class="problem">{len(problems)} problem{"s" * (len(problems) != 1)} found</p>')
    else:
        body.append('<p class="clean">clean: streams passed unbuffered and unchanged</p>')
    sections = [(r.name, r.lines()[1:], r.comparison) for r in report.interactions]
    sections += [(f"{r.fault} in {r.name}", [f"{r.verdict}: {r.detail}"], r.comparison) for r in report.faults]
    for name, said, comparison in sections:
        body.append(f"<h2>{html.escape(name)}</h2>")
        body.append(_timeline(comparison))
        body.append("<ul>" + "".join(f"<li>{html.escape(line.strip())}</li>" for line in said) + "</ul>")
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{_STYLE}</style></head><body>{''.join(body)}</body></html>"
    )
