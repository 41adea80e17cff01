"""How a server is made and run: `build_server`, the one function that makes one from cassettes and options
(with what the miss policy puts behind replay, recording into a cassette or not), and what runs it: `serve`,
`aserve`, and the recording servers (`recording_server`, `recording`, `arecording`).

`aserve` runs a server in the current event loop, `serve` in a background thread for synchronous code."""

from __future__ import annotations

import contextlib
import gc
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

from .._exceptions import CassetteNotFoundError
from ..cassette import (
    Cassette,
    bundled_cassettes,
    check_cassette_path,
    find_cassettes,
)
from ..matching import CUT_SHORT
from ..options import OPTIONS, MissPolicy, RecordMode, ServeOptions, check_sources
from ..recorder import Recorder
from ..redaction import Redaction
from ..responder import Responder
from ..state import ReplayStore
from ..upstream import AiohttpUpstream, Upstream
from .app import Limits, MockServer
from .threaded import run_in_thread

__all__ = [
    "arecording",
    "aserve",
    "build_server",
    "collect_for_serving",
    "load_cassettes",
    "recording",
    "recording_server",
    "serve",
]

CassetteSource = Cassette | str | os.PathLike[str]


def load_cassettes(sources: Iterable[CassetteSource] = ()) -> list[Cassette]:
    """Cassettes from a mix of `Cassette` objects, files and folders; none given means the bundled ones."""
    sources = list(sources)
    if not sources:
        return [Cassette.load(p) for p in bundled_cassettes()]
    cassettes = [s for s in sources if isinstance(s, Cassette)]
    paths = find_cassettes(s for s in sources if not isinstance(s, Cassette))
    return cassettes + [Cassette.load(p) for p in paths]


def collect_for_serving() -> None:
    """Set the garbage collector for a process that does nothing but serve, once its cassettes are loaded.

    What is loaded by then lives as long as the server: frozen, no collection
    walks it again (a full one of a big cassette held every stream back). The
    young generation is collected after 10,000 new objects rather than 700:
    at a thousand paced streams the default made full collections of every
    open connection's objects, every stream waiting, and middle ones far more
    often (figures in docs/benchmarks-history.md).
    Not for a process that is also the user's (the pytest plugin, `serve()`).
    """
    gc.freeze()
    gc.set_threshold(10_000, *gc.get_threshold()[1:])


def build_server(
    cassettes: Iterable[Cassette] = (),
    options: ServeOptions | None = None,
    *,
    upstream: str | Upstream | None = None,
    model: Responder | None = None,
    models: Iterable[str] = (),
    record_into: str | os.PathLike[str] | None = None,
    mode: RecordMode | str = OPTIONS["record_mode"].default,
    redaction: Redaction | None = None,
    idle_timeout: float = OPTIONS["idle_timeout"].value,
    host: str = OPTIONS["host"].default,
    port: int = 0,
    log: Callable[[str], None] | None = None,
    limits: Limits | None = None,
    allow_remote_control: bool = False,
    allowed_hosts: Iterable[str] = (),
    cors_origins: Iterable[str] = (),
    state: ReplayStore | None = None,
) -> MockServer:
    """A server answering from `cassettes` as `options` say, with what the miss policy puts behind replay:
    the one function `sse-tape serve` and `record`, `serve`, `aserve`, the recording servers and the pytest
    plugin build their servers with.

    Behind replay, `options.on_miss` puts an `upstream` (a base URL such as
    `http://127.0.0.1:8000` or `https://api.example.com/v1`, or an `Upstream`)
    that misses are forwarded to (`forward`), or a `model` responder (such as
    `synth.Synthesizer`) that answers them (`synth`); `models` are listed at
    `/v1/models` besides those the recordings name. With `record_into`, what
    the upstream (or the model) answers is recorded into that cassette, and
    replayed by record `mode`: each recording replays once under
    `new_episodes` (as VCR.py does), and they repeat under the others; the
    cassettes given are replayed besides, as they are. `redaction` says what
    is kept out of the cassette, and `idle_timeout` how many seconds an
    upstream may send nothing.

    A miss policy without what it needs, or an upstream or model it would
    leave unused, is a `ConfigError` (see `options.check_sources`). What replay counts and keeps between
    requests is in `state` (a `MemoryStore` unless given: a `state_redis.RedisStore` shares it with other
    servers).
    """
    chosen = options or ServeOptions()
    policy = chosen.on_miss
    if record_into is not None and policy not in (MissPolicy.RECORD, MissPolicy.SYNTH):
        policy = MissPolicy.SYNTH if model is not None else MissPolicy.RECORD
    check_sources(policy, upstream=upstream is not None, model=model is not None, recording=record_into is not None)
    chosen_mode: RecordMode = OPTIONS["record_mode"].read(mode)
    if isinstance(upstream, str):
        upstream = AiohttpUpstream(upstream, idle_timeout=idle_timeout, redaction=redaction)
    where: dict[str, Any] = {
        "host": host,
        "port": port,
        "log": log,
        "limits": limits,
        "allow_remote_control": allow_remote_control,
        "allowed_hosts": tuple(allowed_hosts),
        "cors_origins": tuple(cors_origins),
        "state": state,
    }
    if record_into is None:
        return MockServer(cassettes, options=chosen, upstream=upstream, model=model, models=models, **where)
    path = check_cassette_path(record_into)
    if chosen_mode is RecordMode.REWRITE:
        path.unlink(missing_ok=True)
        chosen_mode = RecordMode.NEW_EPISODES
    # Read it now: a cassette that cannot be read must stop us before we record over it. It holds
    # what killed sessions left in their spools too: it exists if either does.
    try:
        existing: Cassette | None = Cassette.load(path)
    except CassetteNotFoundError:
        existing = None
    replay_only = chosen_mode is RecordMode.NONE or (chosen_mode is RecordMode.ONCE and existing is not None)
    if replay_only and existing is not None and log is not None:
        _say_cut_short(existing, chosen_mode, log)
    if chosen_mode is RecordMode.NEW_EPISODES and existing is not None and log is not None:
        _say_failed(existing, log)
    chosen = replace(
        chosen,
        on_miss=MissPolicy.ERROR if replay_only else policy,
        allow_repeats=chosen_mode is not RecordMode.NEW_EPISODES,
    )
    return MockServer(
        [*cassettes, *([existing] if existing is not None and chosen_mode is not RecordMode.ALL else [])],
        options=chosen,
        upstream=upstream,
        model=model,
        models=models,
        # What new_episodes records replays from the next request on; once and all record every request.
        recorder=Recorder(existing or Cassette(path=path), redaction, playable=chosen_mode is RecordMode.NEW_EPISODES),
        replay=chosen_mode is not RecordMode.ALL,
        **where,
    )


def recording_server(
    cassette: str | os.PathLike[str],
    upstream: str | None,
    *,
    mode: RecordMode | str = OPTIONS["record_mode"].default,
    options: ServeOptions | None = None,
    model: Responder | None = None,
    also: Iterable[Cassette] = (),
    **keywords: Any,
) -> MockServer:
    """A server that records into `cassette` what it forwards to `upstream` (or what `model` answers, in its
    place), and replays by `mode`; the cassettes `also` are replayed besides, as they are. The other keywords
    are `build_server`'s (`redaction`, `idle_timeout`, `host`, `port`, `log`, `limits`, ...)."""
    return build_server(also, options, upstream=upstream, model=model, record_into=cassette, mode=mode, **keywords)


def _say_cut_short(cassette: Cassette, mode: RecordMode, log: Callable[[str], None]) -> None:
    """A replay-only record mode replays a stream cut short as it was recorded: say so, and how to fetch it."""
    ends = Counter(str(i.response.end) for i in cassette.interactions if i.response.end in CUT_SHORT)
    _say_held(
        cassette,
        ends,
        ("stream", "cut short when recorded"),
        f"record mode {mode} replays {{them}} as recorded; record mode new_episodes fetches {{them}} again",
        log,
    )


def _say_failed(cassette: Cassette, log: Callable[[str], None]) -> None:
    """Record mode new_episodes replays what a request got when recorded, an error or nothing too: say so, and
    how to fetch those again."""
    failed = Counter(
        f"status {i.response.status}" if i.response.status >= 400 else "empty"
        for i in cassette.interactions
        if i.response.status >= 400 or not any(chunk.data for chunk in i.response.chunks)
    )
    advice = (
        "record mode new_episodes replays {them}; remove {them} from the cassette, or record with record mode "
        "rewrite, to fetch {them} again"
    )
    _say_held(cassette, failed, ("recording", "that answered an error or nothing"), advice, log)


def _say_held(
    cassette: Cassette, kinds: Counter[str], what: tuple[str, str], advice: str, log: Callable[[str], None]
) -> None:
    """Say how many of `what` (a noun, then what they are) the cassette holds, of each kind, and `advice` (its
    `{them}` the right pronoun); nothing when it holds none."""
    count = sum(kinds.values())
    if count:
        how = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        noun = what[0] + "s"[: count != 1]
        log(
            f"{cassette.name} holds {count} {noun} {what[1]} ({how}): "
            + advice.format(them="them" if count != 1 else "it")
        )


@contextlib.asynccontextmanager
async def arecording(
    cassette: str | os.PathLike[str], upstream: str | None, **keywords: Any
) -> AsyncIterator[MockServer]:
    """Run a recording server while the block runs; its keywords are `recording_server`'s."""
    async with recording_server(cassette, upstream, **keywords) as server:
        yield server


@contextlib.contextmanager
def recording(cassette: str | os.PathLike[str], upstream: str | None, **keywords: Any) -> Iterator[MockServer]:
    """Like `arecording`, for synchronous code: the server runs in a background thread."""
    with run_in_thread(recording_server(cassette, upstream, **keywords)) as server:
        yield server


def _server(
    cassettes: Iterable[CassetteSource],
    host: str,
    port: int,
    log: Callable[[str], None] | None,
    upstream: str | None,
    options: ServeOptions | None,
    words: dict[str, Any],
) -> MockServer:
    """The server `serve` and `aserve` run: options given, or built from the words."""
    if options is not None and words:
        raise TypeError(f"give options or keywords, not both (got {', '.join(words)})")
    chosen = options if options is not None else ServeOptions.build(**words)
    return build_server(load_cassettes(cassettes), chosen, upstream=upstream, host=host, port=port, log=log)


@contextlib.asynccontextmanager
async def aserve(
    *cassettes: CassetteSource,
    host: str = "127.0.0.1",
    port: int = 0,
    log: Callable[[str], None] | None = None,
    upstream: str | None = None,
    options: ServeOptions | None = None,
    **words: Any,
) -> AsyncIterator[MockServer]:
    """Serve cassettes (objects, files or folders; none: the bundled ones) while the block runs.

    `words` are `ServeOptions.build`'s keywords (or give `options`); with
    `on_miss="forward"`, misses go to `upstream`::

        async with aserve("recordings/", pace="instant", faults=["error:5"]) as server:
            client = AsyncOpenAI(base_url=server.url + "/v1", api_key="test")
    """
    async with _server(cassettes, host, port, log, upstream, options, words) as server:
        yield server


@contextlib.contextmanager
def serve(
    *cassettes: CassetteSource,
    host: str = "127.0.0.1",
    port: int = 0,
    log: Callable[[str], None] | None = None,
    upstream: str | None = None,
    options: ServeOptions | None = None,
    **words: Any,
) -> Iterator[MockServer]:
    """Like `aserve`, for synchronous code: the server runs in a background thread."""
    with run_in_thread(_server(cassettes, host, port, log, upstream, options, words)) as server:
        yield server
