"""The messages of a recorded stream in whatever framing it was recorded in (SSE, NDJSON, a JSON array), for
tests that read streams of every dialect alike."""

from __future__ import annotations

from sse_tape import Interaction, ServerSentEvent
from sse_tape.framing import SSE
from sse_tape.matching import framing_of


def timed_messages(interaction: Interaction) -> list[tuple[float, ServerSentEvent]]:
    """Each message of the interaction's stream, with the time of the chunk that completed it."""
    return (framing_of(interaction) or SSE).events(interaction.response.chunks)


def messages(interaction: Interaction) -> list[ServerSentEvent]:
    """The messages of the interaction's stream (see `timed_messages`)."""
    return [message for _, message in timed_messages(interaction)]


def body_messages(interaction: Interaction, body: bytes) -> list[ServerSentEvent]:
    """The messages of `body`, an answer to the interaction's request, in the framing its stream was recorded in."""
    framing = framing_of(interaction) or SSE
    return [block.event for block in framing.blocks(body) if block.event is not None]
