"""A writer for `test_cassette`'s concurrent appenders, in a module of its own: a spawned process imports the
module its target lives in, and this one needs only the cassette, not the test module's pytest and hypothesis
(which, on a busy machine, took the writers most of their time)."""

from __future__ import annotations

from sse_tape.cassette import Chunk, Interaction, Request, Response, append_interactions


def append_many(path: str, writer: int, count: int) -> None:
    """Append `count` interactions to the cassette at `path`, one at a time, for `POST /w{writer}/{n}`."""
    for n in range(count):
        request = Request("POST", f"/w{writer}/{n}")
        append_interactions(path, [Interaction(request, Response(chunks=(Chunk(0.0, b"data: x\n\n"),)))])
