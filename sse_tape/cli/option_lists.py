"""The click options of `serve`, `record` and `synth`, made from the table of options (`sse_tape.options`), and
what their words mean once parsed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ..options import OPTIONS, SAME, Group, Option, ServeOptions, parse_match
from .terminal import log

__all__ = ["Listening", "command_options", "model_options", "take_group", "take_serving_options"]


class _ShownBounds(click.IntRange):
    """An integer whose bounds `--help` shows, left to the option's own parser to check, so that a bad one gets
    the message it gets wherever it is given (the marker, `ServeOptions.build`)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return click.INT.convert(value, param, ctx)


def _click_type(option: Option, choices: tuple[str, ...] | None) -> Any:
    if choices is not None:
        return click.Choice([str(c) for c in choices])
    if option.kind is bool:
        return None
    if option.kind is Path:
        return click.Path(path_type=option.kind)
    if option.bounds is not None:
        low, high = option.bounds
        if option.parse is None and option.kind is not int:
            return click.FloatRange(low, high)
        whole = (None if low is None else int(low), None if high is None else int(high))
        return _ShownBounds(*whole) if option.parse is not None else click.IntRange(*whole)
    return option.kind


def _click_option(option: Option, command: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    flag = option.flag(command)
    assert flag is not None
    default = option.default if flag.default is SAME else flag.default
    if isinstance(default, str):  # a StrEnum member: its word
        default = str(default)
    shown = default is not None and option.kind is not bool and not option.multiple
    # No default given for one that has none: click (8.3 on) takes a default of None as a value, which a
    # required option then has.
    given = {} if default is None or option.multiple else {"default": default}
    return click.option(
        *flag.names,
        option.name,
        type=_click_type(option, flag.choices or option.choices),
        **given,
        show_default=shown,
        multiple=option.multiple,
        is_flag=option.kind is bool,
        required=option.required,
        metavar=option.metavar,
        help=flag.help or option.help,
    )


def command_options(command: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A decorator adding every option the table gives `command`, in the table's order."""

    def add(function: Callable[..., None]) -> Callable[..., None]:
        for option in reversed([o for o in OPTIONS.values() if o.flag(command) is not None]):
            function = _click_option(option, command)(function)
        return function

    return add


def model_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options of a command that runs a model (synth; serve and record have them among theirs)."""
    for option in reversed([o for o in OPTIONS.values() if o.group is Group.MODEL]):
        command = _click_option(option, "synth")(command)
    return command


def take_group(words: dict[str, Any], group: Group) -> dict[str, Any]:
    """Take the words of the options of `group` out of `words`: those of the command that has them."""
    return {name: words.pop(name) for name, option in OPTIONS.items() if option.group is group and name in words}


@dataclass(frozen=True, slots=True)
class Listening:
    """Where a server listens and how long it waits for its clients, from the words of the table's `listen`
    options."""

    host: str
    port: int
    log: Callable[[str], None] | None
    """Where each request is logged; None with --quiet."""
    request_timeout: float
    keep_alive: float
    send_timeout: float
    max_connections: int | None
    """None: what the descriptor limit leaves room for."""
    allow_remote_control: bool
    allowed_hosts: tuple[str, ...]
    cors_origins: tuple[str, ...]


def take_serving_options(words: dict[str, Any], **more: Any) -> tuple[ServeOptions, Listening]:
    """The serving options from a command's words (plus `more`), and where to listen; the words are taken out
    of `words`. A word that means nothing is a `ConfigError`, before any server is made."""
    answer = {**take_group(words, Group.ANSWER), **more}
    for name, value in answer.items():
        if OPTIONS[name].multiple and not value:  # a repeatable flag not given: the option's default
            answer[name] = OPTIONS[name].default
    if answer.get("match_on") is not None:  # its message names the flag the user wrote
        answer["match_on"] = parse_match(answer["match_on"], "--match")
    options = ServeOptions.build(**answer)
    listen = {name: OPTIONS[name].read(value) for name, value in take_group(words, Group.LISTEN).items()}
    listening = Listening(log=None if listen.pop("quiet") else log, **listen)
    return options, listening
