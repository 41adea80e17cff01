"""What a gateway did to one answer: the answer read straight from the upstream against the same answer read
through the gateway.

Both readings are cut into their blocks by the stream's framing (events,
and comments such as heartbeats); the blocks are lined up (`difflib`'s
longest matching runs) by what they mean, so that an event written with
other line ends or other spacing still lines up with its original, and what
does not line up is lost, added, reordered or changed. Each block lined up
with its original tells how much later it came through the gateway; the
reads that brought several blocks at once tell how the gateway coalesced
them, and whether it held them back (buffered).
"""

from __future__ import annotations

import bisect
import difflib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from ..framing import Framing
from ..framing.base import compact_json
from ..sse import ServerSentEvent
from .reading import Reading

__all__ = ["Block", "Comparison", "blocks", "compare", "events_per_read", "header_changes"]

# Headers that differ on every answer, whoever sends it.
_EVER_CHANGING = frozenset({"date"})


@dataclass(frozen=True, slots=True)
class Block:
    """One block of an answer as a client read it."""

    t: float
    """When the read that completed it came, in seconds since the request was sent."""
    raw: bytes
    event: ServerSentEvent | None
    """The message it carries; None for a comment (a heartbeat) or a block that carries none."""

    @property
    def key(self) -> tuple[object, ...]:
        """What it means, whatever the line ends or spacing it was written with."""
        if self.event is not None:
            e = self.event
            return ("event", e.event, e.data, e.id, e.retry)
        # A comment's text as a field's value is read: one space after the colon is not part of it.
        lines = (line.strip() for line in self.raw.splitlines())
        return (
            "other",
            b"\n".join(b":" + line[1:].removeprefix(b" ") if line[:1] == b":" else line for line in lines if line),
        )


def blocks(reading: Reading, framing: Framing | None) -> list[Block]:
    """The blocks of an answer, each at the time of the read that completed it; an answer that is no stream is
    one message, its body (so a body the gateway changed or emptied is an event changed or lost)."""
    body, times = reading.body, reading.times()
    if not body:
        return []
    ends = [end for end, _ in times]

    def when(end: int) -> float:
        return times[min(bisect.bisect_left(ends, end), len(times) - 1)][1]

    if framing is None:  # one message, what its JSON means (the bytes, when it is none)
        return [Block(when(len(body)), body, ServerSentEvent("body", compact_json(body.decode("utf-8", "replace"))))]
    return [Block(when(b.end), body[b.start : b.end], b.event) for b in framing.blocks(body)]


@dataclass(slots=True)
class Comparison:
    """How the blocks read through the gateway differ from those read straight from the upstream; indexes
    count events (blocks that carry a message) from 0, in each reading."""

    sent: list[Block]
    got: list[Block]
    pairs: list[tuple[int, int]]
    """Blocks lined up: (index in `sent`, index in `got`), of every block, events and comments."""
    lost: list[int]
    """Events sent that did not come (indexes among the events sent)."""
    added: list[int]
    """Events that came and were not sent there (indexes among the events that came): never sent, or `repeated`."""
    reordered: list[int]
    """Events sent that came, but elsewhere in the order."""
    changed: list[tuple[int, int]]
    """Events that came changed: (index sent, index got)."""
    line_endings: list[int]
    """Events that came with other line ends only (harmless): indexes sent."""
    respelled: list[int]
    """Events that came written otherwise, meaning the same (harmless: spacing, the order of fields)."""
    comments: tuple[int, int]
    """Comments (heartbeats) sent, and how many of them came."""
    repeated: list[int]
    """Of `added`, those that are events sent elsewhere in the stream, come again (a retry's, a duplicate)."""
    timed: list[tuple[int, int]]
    """The blocks that tell how late the gateway passed each on: those lined up (`pairs`), and the events that
    came changed, each with the one it stands for (a gateway that writes every event anew still holds them)."""

    @property
    def sent_events(self) -> list[Block]:
        """The blocks sent that carry a message."""
        return [b for b in self.sent if b.event is not None]

    @property
    def got_events(self) -> list[Block]:
        """The blocks that came that carry a message."""
        return [b for b in self.got if b.event is not None]

    def latencies(self, *, events: bool = True) -> list[float]:
        """How much later each block came through the gateway than straight (see `timed`), in seconds: of the
        events, or of the comments."""
        return [self.got[j].t - self.sent[i].t for i, j in self.timed if (self.sent[i].event is not None) is events]

    def runs(self) -> tuple[int, float]:
        """The largest run of events that came in one read through the gateway, and over how long they had
        come straight (0 when none came together)."""
        at_once: dict[float, list[int]] = {}
        for i, j in self.timed:
            if self.got[j].event is not None:
                at_once.setdefault(self.got[j].t, []).append(i)
        largest, span = 0, 0.0
        for together in at_once.values():
            if len(together) > 1:
                times = [self.sent[i].t for i in together]
                if len(together) > largest or (len(together) == largest and max(times) - min(times) > span):
                    largest, span = len(together), max(times) - min(times)
        return largest, span


def events_per_read(found: Sequence[Block]) -> tuple[float, int]:
    """Events per read that brought any, on average, and the most in one read."""
    counts = Counter(b.t for b in found if b.event is not None)
    if not counts:
        return 0.0, 0
    return sum(counts.values()) / len(counts), max(counts.values())


def compare(sent: Sequence[Block], got: Sequence[Block]) -> Comparison:
    """Line up the blocks that came through the gateway with those sent (read straight)."""
    matcher = difflib.SequenceMatcher(None, [b.key for b in sent], [b.key for b in got], autojunk=False)
    pairs: list[tuple[int, int]] = []
    lost_blocks: list[int] = []
    added_blocks: list[int] = []
    changed_blocks: list[tuple[int, int]] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            pairs += zip(range(i1, i2), range(j1, j2), strict=True)
            continue
        if op == "replace":
            both = min(i2 - i1, j2 - j1)
            changed_blocks += zip(range(i1, i1 + both), range(j1, j1 + both), strict=True)
            i1, j1 = i1 + both, j1 + both
        lost_blocks += range(i1, i2)
        added_blocks += range(j1, j2)
    # An event lost in one place and added in another, the same, was reordered.
    reordered_pairs = []
    for i in list(lost_blocks):
        j = next((j for j in added_blocks if got[j].key == sent[i].key), None)
        if j is not None:
            lost_blocks.remove(i)
            added_blocks.remove(j)
            reordered_pairs.append((i, j))
    pairs = sorted(pairs + reordered_pairs)

    sent_index = _event_indexes(sent)
    got_index = _event_indexes(got)
    line_endings: list[int] = []
    respelled: list[int] = []
    for i, j in pairs:
        if i in sent_index and sent[i].raw != got[j].raw:
            same_lines = _lines(sent[i].raw) == _lines(got[j].raw)
            (line_endings if same_lines else respelled).append(sent_index[i])
    # A changed block that is a comment on either side is a comment lost and another added.
    changed, changed_events = [], []
    for i, j in changed_blocks:
        if i in sent_index and j in got_index:
            changed.append((sent_index[i], got_index[j]))
            changed_events.append((i, j))
        else:
            lost_blocks.append(i)
            added_blocks.append(j)
    comments_sent = sum(1 for b in sent if b.event is None)
    comments_got = sum(1 for i, j in pairs if sent[i].event is None)
    sent_keys = {b.key for b in sent if b.event is not None}
    added = sorted(got_index[j] for j in added_blocks if j in got_index)
    got_events = [b for b in got if b.event is not None]
    return Comparison(
        sent=list(sent),
        got=list(got),
        pairs=pairs,
        lost=sorted(sent_index[i] for i in lost_blocks if i in sent_index),
        added=added,
        reordered=sorted(sent_index[i] for i, _ in reordered_pairs if i in sent_index),
        changed=sorted(changed),
        line_endings=line_endings,
        respelled=respelled,
        comments=(comments_sent, comments_got),
        repeated=[j for j in added if got_events[j].key in sent_keys],
        timed=sorted(pairs + changed_events),
    )


def _event_indexes(found: Sequence[Block]) -> dict[int, int]:
    """Each event block's index among the events, by its index among the blocks."""
    indexes, n = {}, 0
    for i, b in enumerate(found):
        if b.event is not None:
            indexes[i] = n
            n += 1
    return indexes


def _lines(raw: bytes) -> list[bytes]:
    return raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")


def header_changes(sent: Reading, got: Reading) -> tuple[list[str], list[str], list[str]]:
    """The headers the gateway added, removed and changed (`name: before -> after`), names in lower case; not
    those that differ on every answer (`Date`)."""

    def table(reading: Reading) -> dict[str, str]:
        found: dict[str, str] = {}
        for name, value in reading.headers:
            key = name.lower()
            if key not in _EVER_CHANGING:
                found[key] = f"{found[key]}, {value}" if key in found else value
        return found

    before, after = table(sent), table(got)
    added = [f"{name}: {after[name]}" for name in after if name not in before]
    removed = [f"{name}: {before[name]}" for name in before if name not in after]
    changed = [
        f"{name}: {before[name]} -> {after[name]}" for name in before if name in after and before[name] != after[name]
    ]
    return added, removed, changed
