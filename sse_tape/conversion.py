"""Converting a cassette: into the other encoding (TOML ⇄ MessagePack, losslessly) and, if asked, into
another API (dialect), each stream decoded and encoded again as that API would send it.

What `sse-tape convert` does, for a library user:

    from sse_tape.conversion import convert

    convert("chat.toml", "responses.msgpack", into="openai-responses")

`translated` is the translation alone, of a cassette in memory; `why_not_of` tells a stream that is not
the dialect it is said to be.
"""

from __future__ import annotations

import os
from dataclasses import replace

from ._exceptions import ConfigError, SSETapeError
from .cassette import Cassette, Interaction
from .dialects import Protocol, detect, generation, get
from .dialects.events import Start
from .translation import lost_in_translation, translate

__all__ = ["convert", "translated", "why_not_of"]


def convert(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    into: Protocol | str | None = None,
    origin: Protocol | str | None = None,
    lossy: bool = False,
) -> Cassette:
    """Write the cassette at `source` to `target`, in the encoding `target`'s suffix names (.toml or .msgpack),
    and return it as written.

    Lossless: every chunk keeps its exact bytes and timing. With `into` (a dialect, or its name), every
    interaction is first translated into that dialect (see `translated`; `origin` and `lossy` are for that),
    and an interaction that cannot be stops the conversion before anything is written.
    """
    cassette = Cassette.load(source)
    if into is not None:
        to = get(into) if isinstance(into, str) else into
        cassette.interactions = translated(cassette, to, _named(origin), lossy=lossy)
    cassette.save(target)
    return cassette


def _named(dialect: Protocol | str | None) -> Protocol | None:
    """The dialect given, or named; None for none (or an empty name)."""
    if isinstance(dialect, str):
        return get(dialect) if dialect else None
    return dialect


def translated(
    cassette: Cassette, into: Protocol, origin: Protocol | None = None, *, lossy: bool = False
) -> list[Interaction]:
    """Each interaction of `cassette` as `into`'s API would have served it: its stream decoded and encoded
    again, each new event at the time of the original one, its request's path and body rewritten.

    `origin` is the dialect the streams are read as (by default, each one's own, told from its path or its
    events); a stream that is not `origin`'s is refused (see `why_not_of`). An interaction with what `into`
    has no words for (tool calls in the completions API, say) is refused too, unless `lossy`: then that is
    left out. A refusal is an `SSETapeError` naming the cassette and the interaction; the cassette is left
    as it was.
    """
    source = cassette.path if cassette.path is not None else cassette.name
    result = []
    for n, interaction in enumerate(cassette.interactions, 1):
        request = interaction.request
        if origin is not None and (why := why_not_of(interaction, origin)):
            raise SSETapeError(f"{source} #{n} ({request.method} {request.path}): {why}; nothing written")
        try:
            there = translate(interaction, into, origin)
        except ConfigError as exc:  # say which interaction of which file, as the other refusals do
            raise ConfigError(f"{source} #{n} {exc}") from None
        lost = [] if lossy else lost_in_translation(interaction, there, into, origin)
        if lost:
            raise SSETapeError(
                f"{source} #{n} ({request.method} {request.path}): {into.name} cannot carry its "
                f"{', '.join(lost[:-1]) + ' and ' if lost[1:] else ''}{lost[-1]}; nothing written "
                "(--lossy leaves that out)"
            )
        result.append(there)
    return result


def why_not_of(interaction: Interaction, dialect: Protocol) -> str | None:
    """Why `interaction`'s stream is not `dialect`'s, in words; None when it may be.

    A dialect's decoder skips the events it does not know, so a stream read as another API's translates into an
    empty one: naming the wrong API would write it without a word, for `check` to find later. An error
    response, a JSON answer and a stream malformed beyond reading are left for the translation to judge.
    """
    response = interaction.response
    events = response.events()
    if response.status >= 400 or not events:
        return None  # an error body is rewritten whatever its API; a JSON answer is read as `dialect`'s or refused
    # What the events look like, whatever the path says: the path is what the named dialect speaks over.
    looks = detect(replace(interaction, request=replace(interaction.request, path="")))
    if looks is not None and looks is not dialect:
        return f"its stream is not {dialect.name}: it looks like {looks.name}"
    try:  # a decoder that makes its own Start has read nothing when that Start is blank
        read = [event for event in generation(dialect, "convert").decode(sse for _, sse in events) if event != Start()]
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError):
        return None  # malformed: translating it says so, in its words
    if not read:
        return f"its stream is not {dialect.name}: none of its {len(events)} events reads as one"
    return None
