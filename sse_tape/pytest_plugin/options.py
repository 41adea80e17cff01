"""The plugin's command-line options and ini settings, made from the table of options (`sse_tape.options`) and
read once per session into `Settings`."""

from __future__ import annotations

import random
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .._exceptions import ConfigError
from ..faults import Fault, load_profile, parse_fault
from ..options import OPTIONS, RecordMode
from ..redaction import Redaction

__all__ = [
    "GAUNTLET",
    "SETTINGS",
    "Settings",
    "check_faults",
    "no_upstream",
    "profile_faults",
    "pytest_addoption",
    "pytest_report_header",
    "read_settings",
]

#: The faults `--sse-tape-gauntlet` runs each test under, by name: each a failure a client should live
#: through. The ones that end a request act once (`times=1`), so that a client that retries recovers.
GAUNTLET: dict[str, str] = {
    "429": "status:code=429,retry_after=1,times=1",
    "500": "status:code=500,times=1",
    "error": "error:at=50%,times=1",
    "reset": "disconnect:after=50%,mode=reset,times=1",
    "stall": "stall:at=50%,for=1s,heartbeat=250ms",
    "fragment": "fragment:size=1",
    "crlf": "eol:crlf",
    "no-done": "drop:at=done",
}

_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def pytest_addoption(parser: pytest.Parser) -> None:
    """The `--sse-tape-*` options and the `sse_tape_*` ini settings, as the table of options says."""
    group = parser.getgroup("sse-tape", "sse-tape: recorded SSE streams as a live endpoint")
    for option in OPTIONS.values():
        if (flag := option.pytest) is None:
            continue
        shown = flag.shown_default or (str(flag.default) if flag.default not in (None, False) else None)
        words: dict[str, Any] = {
            "help": (flag.help or option.help) + (f" [default: {shown}]" if shown is not None else ""),
            "default": [] if option.multiple else flag.default,
        }
        if option.kind is bool:
            words["action"] = "store_true"
        else:
            words["metavar"] = option.metavar
            if option.multiple:
                words["action"] = "append"
            if option.choices is not None:
                words["choices"] = [str(c) for c in option.choices]
            if option.kind is int:
                words["type"] = int
        group.addoption(flag.name, **words)
    for option in OPTIONS.values():
        if (ini := option.ini) is not None:
            parser.addini(ini.name, ini.help or option.help, type=ini.type)  # type: ignore[arg-type]


def _flag(config: pytest.Config, name: str) -> Any:
    """What the plugin's command-line flag for option `name` says."""
    flag = OPTIONS[name].pytest
    assert flag is not None
    return config.getoption(flag.name)


def _ini(config: pytest.Config, name: str) -> Any:
    """What the ini setting for option `name` says."""
    ini = OPTIONS[name].ini
    assert ini is not None
    return config.getini(ini.name)


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """What the command line and the ini file say, read once per session."""

    record: RecordMode
    upstream: str | None
    model: str | None
    faults: tuple[str, ...]
    profiles: tuple[str, ...]
    seed: int
    gauntlet: dict[str, str]
    """The gauntlet's faults by name: the standard set, or the ini's."""
    run_gauntlet: bool
    gauntlet_report: Path | None
    cassette_dir: Path | None
    allow_unused: bool
    redaction: Redaction
    """What a recording keeps out: the defaults, and the shapes of `--sse-tape-secret-pattern` and the ini's."""


#: Where a session keeps its `Settings` (`config.stash`).
SETTINGS = pytest.StashKey[Settings]()


def read_settings(config: pytest.Config) -> Settings:
    """The session's settings, from its command line and ini file; raises `pytest.UsageError` naming a mistake."""
    record = RecordMode(_flag(config, "record_mode"))
    upstream = _flag(config, "upstream") or _ini(config, "upstream") or None
    if upstream is not None and not upstream.startswith(("http://", "https://")):
        shown = Redaction().url(upstream)  # a key in its query is not printed
        raise pytest.UsageError(f"sse-tape upstream {shown!r}: give a base URL, such as http://127.0.0.1:8000")
    base = config.inipath.parent if config.inipath is not None else config.rootpath
    folder = _ini(config, "cassette_dir") or _pyproject_cassette_dir(config.rootpath)
    gauntlet = dict(GAUNTLET)
    if lines := _ini(config, "gauntlet"):
        gauntlet = {}
        for line in lines:
            name, eq, spec = (part.strip() for part in line.partition("="))
            if not eq or not _NAME.fullmatch(name) or not spec:
                raise pytest.UsageError(f"sse_tape_gauntlet: write each line as 'name = fault spec', not {line!r}")
            gauntlet[name] = spec
    report = _flag(config, "gauntlet_report")
    run_gauntlet = bool(_flag(config, "run_gauntlet") or report)
    if run_gauntlet and record is not RecordMode.NONE:
        raise pytest.UsageError("--sse-tape-gauntlet replays what is recorded: record first, then run the gauntlet")
    try:
        redaction = Redaction.build(secret_patterns=[*_flag(config, "secret_pattern"), *_ini(config, "secret_pattern")])
    except ConfigError as exc:
        raise pytest.UsageError(f"sse-tape: {exc}") from None
    seed = _flag(config, "seed")
    if seed is None:  # pytest-xdist's workers take the controller's (xdist.pytest_configure_node)
        seed = getattr(config, "workerinput", {}).get("sse_tape_seed")
    if seed is None:
        seed = random.SystemRandom().randrange(100_000)
    return Settings(
        record=record,
        upstream=upstream,
        model=_flag(config, "model"),
        faults=tuple(_flag(config, "faults")),
        profiles=tuple(_flag(config, "profiles")),
        seed=seed,
        gauntlet=gauntlet,
        run_gauntlet=run_gauntlet,
        gauntlet_report=Path(report) if report else None,
        cassette_dir=base / folder if folder else None,
        allow_unused=bool(_ini(config, "allow_unused")),
        redaction=redaction,
    )


def _pyproject_cassette_dir(root: Path) -> str | None:
    """`cassette_dir` of `[tool.sse-tape]` in the project's pyproject.toml."""
    try:
        data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    value = data.get("tool", {}).get("sse-tape", {}).get("cassette_dir")
    return value if isinstance(value, str) and value else None


def check_faults(config: pytest.Config, settings: Settings) -> None:
    """Read every fault the command line names now: a bad one stops the run before any test."""
    try:
        for spec in [*settings.faults, *(settings.gauntlet.values() if settings.run_gauntlet else ())]:
            parse_fault(spec)
        profile_faults(config, settings.profiles)
    except ConfigError as exc:
        raise pytest.UsageError(f"sse-tape: {exc}") from None


def profile_faults(config: pytest.Config, names: Sequence[str]) -> list[Fault]:
    """The faults of the profiles `names`, the project's read from the rootdir's `sse-tape.toml` or
    `pyproject.toml` (as `cassette_dir` is), wherever pytest runs from."""
    return [fault for name in names for fault in load_profile(name, config.rootpath)]


def no_upstream(record: RecordMode, marker: str | None) -> str:
    """Why `--sse-tape-record=record` cannot record; `marker`: whose `model=` would answer, if a marker can."""
    model = "--sse-tape-model MODEL" + (f", or model= in {marker}" if marker is not None else "")
    return (
        f"--sse-tape-record={record} records from an upstream: give --sse-tape-upstream URL "
        f"(or the ini's sse_tape_upstream), or a model ({model})"
    )


def pytest_report_header(config: pytest.Config) -> str:
    """The seed that repeats the run, the record mode, and the faults every test runs under."""
    settings = config.stash[SETTINGS]
    words = [f"seed {settings.seed} (--sse-tape-seed={settings.seed} repeats it)", f"record mode {settings.record}"]
    if settings.faults or settings.profiles:
        words.append("faults " + ", ".join([*settings.profiles, *settings.faults]))
    if settings.run_gauntlet:
        words.append("gauntlet " + ", ".join(settings.gauntlet))
    return "sse-tape: " + "; ".join(words)
