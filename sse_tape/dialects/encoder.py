"""`Encoder`: how a dialect frames neutral events one at a time, the base of every dialect's encoder."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..sse import ServerSentEvent
from .events import Error, Event, Finish, ToolCallDelta, ToolCallEnd, ToolCallStart

__all__ = ["Decoder", "Encoder", "WholeCall", "WholeCalls"]


class Decoder(Protocol):
    """What an encoder needs of its dialect (a `Generation`): reading the stream it continues."""

    def decode(self, events: Iterable[ServerSentEvent]) -> list[Event]:
        """The neutral events a recorded stream of this API carries."""
        ...


class Encoder(ABC):
    """Frames neutral events one at a time, as one API's server sends them.

    `feed` takes the next event, in the order `events` sets down, and returns
    the frames it makes at once: nothing waits for a later event, so a token
    reaches the wire when it is generated. `close` ends a stream that had no
    error and returns its terminal frames. An `Error` ends the stream itself:
    its frames include the terminal ones, and nothing is framed after it.
    """

    def __init__(self, dialect: Decoder) -> None:
        self.dialect = dialect
        self.fed = False
        """Whether any event has been fed."""
        self.ended = False
        """Whether the stream is over: closed, or ended by an error."""
        self.frames: list[bytes] = []
        """The frames of the event being framed: `_event` and `_end` add to them."""

    def feed(self, event: Event) -> list[bytes]:
        """The frames for the next event."""
        if self.ended:
            return []
        self.fed = True
        self.frames = []
        self._event(event)
        if isinstance(event, Error):
            self.ended = True
        return self.frames

    def close(self) -> list[bytes]:
        """The frames that end the stream (none if an error has ended it already)."""
        if self.ended:
            return []
        self.ended = True
        self.frames = []
        self._end()
        return self.frames

    def resume(self, sent: Sequence[ServerSentEvent]) -> None:
        """Continue a stream the client already has: `sent` are its events, from this API's server.

        The neutral events `sent` carries set this encoder's state (their
        frames are not sent again), then `_sync` takes what only the wire
        tells (sequence numbers, blocks already closed), so the next frames
        continue that stream as its own server would.
        """
        for event in self.dialect.decode(sent):
            self.feed(event)
        self._sync(sent)

    @abstractmethod
    def _event(self, event: Event) -> None:
        """Add the frames for one event to `frames`."""

    @abstractmethod
    def _end(self) -> None:
        """Add the terminal frames of a stream that ends without an error to `frames`."""

    def _sync(self, sent: Sequence[ServerSentEvent]) -> None:
        """Take from the wire what the neutral events do not carry; nothing by default."""
        return


@dataclass(slots=True)
class WholeCall:
    """A tool call gathered whole (see `WholeCalls`): its id, its name and all its arguments."""

    id: str
    name: str
    arguments: str = ""


class WholeCalls:
    """Gathers each tool call from its start, deltas and end, for an encoder whose API sends a call whole, at
    once (Gemini's, Ollama's): `feed` gives the calls an event completes, a call's end its call, the finish
    every call still open (a call left open when generation finishes ends with it). An error completes none:
    a call not yet whole is never sent."""

    def __init__(self) -> None:
        self.open: dict[int, WholeCall] = {}

    def feed(self, event: Event) -> list[WholeCall]:
        """The calls `event` completes, in order; none for an event that completes none."""
        if isinstance(event, ToolCallStart):
            self.open[event.index] = WholeCall(event.id, event.name)
        elif isinstance(event, ToolCallDelta) and event.index in self.open:
            self.open[event.index].arguments += event.arguments
        elif isinstance(event, ToolCallEnd) and event.index in self.open:
            return [self.open.pop(event.index)]
        elif isinstance(event, Finish):
            done, self.open = list(self.open.values()), {}
            return done
        return []
