"""The plugin's command-line options and ini settings, read once per session into `Settings`."""

from __future__ import annotations

import random
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from .._exceptions import ConfigError
from ..faults import Fault, load_profile, parse_fault
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
_RECORD_MODES = ("none", "once", "new_episodes", "all", "rewrite")


def pytest_addoption(parser: pytest.Parser) -> None:
    """The `--sse-tape-*` options and the `sse_tape_*` ini settings."""
    group = parser.getgroup("sse-tape", "sse-tape: recorded SSE streams as a live endpoint")
    group.addoption(
        "--sse-tape-record",
        choices=_RECORD_MODES,
        default=None,
        help="Record from the upstream: once (cassettes that do not exist yet), new_episodes (requests no "
        "recording answers), all (every request, added to the cassette), rewrite (each test's cassette made "
        "anew), none (replay only; the default).",
    )
    group.addoption("--sse-tape-upstream", metavar="URL", help="The server to record from (or ini sse_tape_upstream).")
    group.addoption(
        "--sse-tape-model",
        metavar="MODEL",
        help="A local model (.gguf or model package) answers what no recording does.",
    )
    group.addoption(
        "--sse-tape-fault",
        action="append",
        default=[],
        metavar="SPEC",
        help="A fault on every sse_tape test, such as 'error:5' or 'disconnect:50%%,mode=reset' (repeatable).",
    )
    group.addoption(
        "--sse-tape-profile", action="append", default=[], metavar="NAME", help="A fault profile on every test."
    )
    group.addoption("--sse-tape-seed", type=int, metavar="N", help="Seed of every random choice (default: random).")
    group.addoption(
        "--sse-tape-gauntlet",
        action="store_true",
        help="Run each sse_tape test once more under each fault of the gauntlet, and report what it survived.",
    )
    group.addoption(
        "--sse-tape-gauntlet-report", metavar="FILE", help="Run the gauntlet, and write its results there as JSON."
    )
    parser.addini(
        "sse_tape_cassette_dir",
        "Folder of the sse_tape cassettes, relative to the ini file (default: cassettes/ beside each test file).",
    )
    parser.addini("sse_tape_upstream", "The server --sse-tape-record records from.")
    parser.addini("sse_tape_allow_unused", "Let recordings go unplayed without failing the test.", type="bool")
    parser.addini(
        "sse_tape_gauntlet", "The gauntlet's faults, one 'name = spec' a line (default: the standard set).", "linelist"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """What the command line and the ini file say, read once per session."""

    record: str
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


#: Where a session keeps its `Settings` (`config.stash`).
SETTINGS = pytest.StashKey[Settings]()


def read_settings(config: pytest.Config) -> Settings:
    """The session's settings, from its command line and ini file; raises `pytest.UsageError` naming a mistake."""
    option = config.option
    record = option.sse_tape_record or "none"
    upstream = option.sse_tape_upstream or config.getini("sse_tape_upstream") or None
    if upstream is not None and not upstream.startswith(("http://", "https://")):
        shown = Redaction().url(upstream)  # a key in its query is not printed
        raise pytest.UsageError(f"sse-tape upstream {shown!r}: give a base URL, such as http://127.0.0.1:8000")
    base = config.inipath.parent if config.inipath is not None else config.rootpath
    folder = config.getini("sse_tape_cassette_dir") or _pyproject_cassette_dir(config.rootpath)
    gauntlet = dict(GAUNTLET)
    if lines := config.getini("sse_tape_gauntlet"):
        gauntlet = {}
        for line in lines:
            name, eq, spec = (part.strip() for part in line.partition("="))
            if not eq or not _NAME.fullmatch(name) or not spec:
                raise pytest.UsageError(f"sse_tape_gauntlet: write each line as 'name = fault spec', not {line!r}")
            gauntlet[name] = spec
    report = option.sse_tape_gauntlet_report
    run_gauntlet = bool(option.sse_tape_gauntlet or report)
    if run_gauntlet and record != "none":
        raise pytest.UsageError("--sse-tape-gauntlet replays what is recorded: record first, then run the gauntlet")
    seed = option.sse_tape_seed
    if seed is None:  # pytest-xdist's workers take the controller's (xdist.pytest_configure_node)
        seed = getattr(config, "workerinput", {}).get("sse_tape_seed")
    if seed is None:
        seed = random.SystemRandom().randrange(100_000)
    return Settings(
        record=record,
        upstream=upstream,
        model=option.sse_tape_model,
        faults=tuple(option.sse_tape_fault),
        profiles=tuple(option.sse_tape_profile),
        seed=seed,
        gauntlet=gauntlet,
        run_gauntlet=run_gauntlet,
        gauntlet_report=Path(report) if report else None,
        cassette_dir=base / folder if folder else None,
        allow_unused=bool(config.getini("sse_tape_allow_unused")),
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


def no_upstream(record: str, marker: str | None) -> str:
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
