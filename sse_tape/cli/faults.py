"""`sse-tape faults`: the faults serve and record can inject, their keys, and the shipped profiles."""

from __future__ import annotations

import click

from ..faults import FAULTS, PROFILES, Stage

__all__ = ["list_faults"]


@click.command("faults")
def list_faults() -> None:
    """List the faults serve can inject, their keys, and the shipped profiles."""
    width = max(map(len, FAULTS)) + 1
    for name, kind in FAULTS.items():
        click.echo(f"{name:<{width}} {kind.help}")
        if kind.keys:
            main = f"; {name}:VALUE sets {kind.main}" if kind.main else ""
            click.echo(f"{'':<{width}} keys: {', '.join(key.describe() for key in kind.keys)}{main}")
    click.echo("\nevery fault also takes p=<probability, default 1>, times=<count> and path=<path ending>")
    click.echo("positions: 5 (after 5 events), 50% (of the events), 200b (a byte), 1.5s (a time)")
    click.echo("durations: 20ms, 1.5s, 2m or 1h")
    misbehaviours = [name for name, kind in FAULTS.items() if kind.stage is Stage.ANSWER]
    click.echo(
        "\n"
        + click.wrap_text(
            f"the misbehaviours ({', '.join(misbehaviours)}) rewrite the model's answer in the stream's "
            "own API; a dialect with no words for one leaves the stream alone, and the journal says so",
            width=110,
        )
        + "\n\n"
        + click.wrap_text(
            "with serve --model, and on what record (or serve --on-miss forward) forwards, faults apply to streams "
            "as they come, except split, the misbehaviours and those at a % position, which need the whole stream "
            "in advance, and bad-chunk and slow-close (left alone, and the journal says so); an answer that is not "
            "a stream takes only status, ttfb, hang, empty and session-expired. record keeps the upstream's answer whole, with a "
            "note of each fault its client got (serve --recorded-faults replays what that client got); status, hang, empty and session-expired answer in the upstream's place, and "
            "nothing is recorded",
            width=110,
        )
    )
    click.echo("\nprofiles (--profile):")
    for name, specs in PROFILES.items():
        click.echo(f"  {name}: {'  '.join(specs)}")
