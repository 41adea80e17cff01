"""The one way into a running server from outside it: its `Control`.

A server's replay state, faults and journal belong to its event loop. The
control endpoints (`/__sse_tape__/`), the pytest plugin, tests and library
users reach them through `server.control` alone: it starts replay over, sets
and adds faults, sets the seed, takes a consistent snapshot, and waits until
the server is idle (`await control.idle()`, or `control.wait_idle()` from
another thread). Called from another thread than the server's, each
operation runs on the server's event loop and returns its result, so that
nothing outside the loop touches the state while a request is answered.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import functools
import resource
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from .._exceptions import ConfigError
from ..cassette import Recording, Request
from ..dialects import ProtocolResponder
from ..faults import Fault, Injector, parse_fault
from ..journal import Journal, Miss
from ..matching import Matcher
from ..state import ReplayStore

__all__ = ["MAX_FAULTS", "Control", "InFlight", "Snapshot"]

T = TypeVar("T")

#: The most faults a server holds at once: each request goes through every one of them.
MAX_FAULTS = 1000


class InFlight(Protocol):
    """What a recorder says of the streams it has yet to record to their end."""

    @property
    def in_flight(self) -> int:
        """Streams being recorded now."""
        ...


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a server holds at one moment, taken on its event loop in one step (`Control.snapshot`)."""

    requests: int
    """How many requests arrived since the start or the last reset."""
    received: tuple[Request, ...]
    """The last requests that arrived (1,000 by default), bodies and all, in order: of their bodies, the
    newest 64 MiB by default, the older ones kept without theirs (see `state.MemoryStore`)."""
    played: tuple[Recording, ...]
    """The recordings that answered, in order, one each time one answered (the last 1,000 by default)."""
    plays: Mapping[str, int]
    """How many times each recording answered, by its id (`Control.id_of`); one that never did is not there."""
    recordings: tuple[Recording, ...]
    """Every recording the server can answer with, in the order they were loaded or recorded."""
    unplayed: tuple[Recording, ...]
    """The recordings that never answered a request, in order."""
    misses: tuple[Miss, ...]
    """The last requests nothing answered (1,000 by default), each with why."""
    missed: int
    """How many requests nothing answered: `misses` are the last of them."""
    injected: Mapping[str, int]
    """How many times each fault, by its text, was applied."""
    faults: tuple[Fault, ...]
    """The faults set on the server, in order."""
    seed: int
    """What the faults' random choices are drawn from."""
    streams: int
    """Requests being answered right now."""
    recording: int
    """Streams the server's recorder has yet to record to their end (0 for a server that does not record)."""
    kept: Mapping[str, tuple[str, ...]]
    """What the protocols' responders keep, by the key of each: the keys of what it keeps (the Responses API's
    background responses by id; MCP's sessions by id, each stream a session kept under `"<session> <event id>"`,
    and, a moment, a `"<session> <event id>"` claimed before its stream is set)."""


class Control:
    """Starts a server's replay over, sets its faults and seed, snapshots it, and waits for it to be idle.

    Safe to call from any thread: from another thread than the server's
    event loop, an operation runs on that loop and its result comes back;
    on the loop, or while the loop does not run, it runs at once. A bad
    fault raises `ConfigError` in the caller, before anything changes.

    The server makes it, and tells it when its event loop starts (`attach`),
    when something in flight is over (`settle`), and when it stops (`detach`).
    """

    def __init__(
        self,
        *,
        state: ReplayStore,
        matcher: Matcher,
        injector: Injector,
        journal: Journal,
        streams: Callable[[], int],
        recorder: InFlight | None = None,
        protocols: Mapping[str, ProtocolResponder] | None = None,
    ) -> None:
        self._state = state
        self._matcher = matcher
        self._injector = injector
        self._journal = journal
        self._streams = streams
        self._recorder = recorder
        self._protocols = protocols or {}  # the protocols' responders, by the key of what each keeps
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: list[asyncio.Future[None]] = []  # those awaiting `idle()`, on the server's loop
        self._resident = 0  # the process's resident set after the last reset (a first one gives back what it can)

    @property
    def journal(self) -> Journal:
        """Every step of every request, newest last. It changes on the server's event loop: from another
        thread, read it once `wait_idle()` has returned."""
        return self._journal

    def id_of(self, recording: Recording) -> str:
        """The id the replay state knows one of the server's recordings by (see `state.recording_id`)."""
        return self._matcher.id_of(recording)

    # --- what anyone may call ----------------------------------------------------------------------------

    def reset(self, *, protocols: bool = True) -> None:
        """Start replay over: every recording unplayed, every count at zero, no misses, nothing received, no
        background response nor MCP session (nothing a protocol's responder keeps), the journal empty (the
        faults and the seed stay as they are). `protocols=False` starts over for the clients already there:
        what belongs to their connections goes on (`ProtocolResponder.lasting`: MCP's sessions), the rest is
        forgotten (the pytest plugin's shared scopes, before each test)."""
        self._call(functools.partial(self._reset, protocols))

    def set_faults(self, faults: Iterable[Fault | str]) -> None:
        """Replace the server's faults (`Fault`s or their texts, such as `"error:5"`), and start their `times=`
        and `p=` counts over. More than `MAX_FAULTS` is a `ConfigError`."""
        chosen = _parsed(faults)
        self._call(lambda: self._injector.set(chosen))

    def add_faults(self, faults: Iterable[Fault | str]) -> None:
        """Add faults after the server's, leaving the counts of those already set as they are. More than
        `MAX_FAULTS` in all is a `ConfigError`."""

        chosen = _parsed(faults)

        def add() -> None:
            _count(len(self._injector.faults) + len(chosen))
            self._injector.add(chosen)

        self._call(add)

    def set_seed(self, seed: int) -> None:
        """Draw the faults' random choices from `seed` from now on."""

        self._call(lambda: self._injector.reseed(seed))

    def snapshot(self) -> Snapshot:
        """What the server holds now, every part of it taken at the same moment."""
        return self._call(self._snapshot)

    def entries(self, limit: int | None = None, *, kind: str | None = None) -> list[Mapping[str, Any]]:
        """The last `limit` journal entries (all those kept, if None), as JSON objects (`journal.Entry.to_json`),
        oldest first, only those of `kind` (`FaultInjected.kind`) if given: of every server sharing the replay
        state's store where it is shared (`ReplayStore.shared`), else this one's."""

        def read() -> list[Mapping[str, Any]]:
            if not self._state.shared:
                kept = self._journal.last(limit)
                return [entry.to_json() for entry in kept if kind is None or entry.kind == kind]
            self._journal.flush()  # this server's own first
            shared = self._state.entries(limit)
            return shared if kind is None else [entry for entry in shared if entry.get("type") == kind]

        return self._call(read)

    async def idle(self) -> None:
        """Wait until no request is being answered and the recorder has nothing in flight, from any event loop
        (`asyncio.timeout` bounds it). A server that is not running is idle."""
        loop = self._loop
        if loop is None or not loop.is_running():
            return
        if _running_on(loop):
            await self._idle()
        else:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._idle(), loop))

    def wait_idle(self, timeout: float | None = None) -> bool:
        """`idle()` for code in another thread than the server's: whether the server became idle within
        `timeout` seconds (None: however long it takes). On the server's own event loop, `await idle()`."""
        loop = self._loop
        if loop is None or not loop.is_running():
            return not self._busy()
        if _running_on(loop):
            raise RuntimeError("wait_idle() would block the server's own event loop: await idle() there")
        try:
            waiting = asyncio.run_coroutine_threadsafe(self._idle(), loop)
        except RuntimeError:  # the loop closed meanwhile: the server has stopped
            return True
        try:
            waiting.result(timeout)
        except concurrent.futures.TimeoutError:
            waiting.cancel()
            return False
        return True

    # --- what the server calls -------------------------------------------------------------------------

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The server runs on `loop` from now on."""
        self._loop = loop

    def settle(self) -> None:
        """Something in flight is over (a request answered, a stream recorded): end the waits for `idle()`
        when nothing is left."""
        if self._waiters and not self._busy():
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def detach(self) -> None:
        """The server has stopped: whoever waits for it to be idle stops waiting."""
        self._loop = None
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    # --- on the server's loop ----------------------------------------------------------------------------

    def _busy(self) -> bool:
        return self._streams() > 0 or (self._recorder is not None and self._recorder.in_flight > 0)

    async def _idle(self) -> None:
        while self._busy() and self._loop is not None:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    def _reset(self, protocols: bool) -> None:
        state = self._state
        # What lasts stays through the store's reset, in the same step (another server never finds it gone); what
        # ends is told first to the responder that kept it.
        lasting = []
        for key, responder in self._protocols.items():
            if protocols or not responder.lasting:
                responder.forget(state.kept(key))
            else:
                lasting.append(key)
        if lasting:
            state.reset(keep=lasting)
        else:  # as a store written before `reset` took `keep` is asked too
            state.reset()
        self._journal.clear()
        # What the state and the journal held is freed to the allocator, which keeps it for the process: after
        # much traffic (a flood of misses, large bodies), hand it back to the system.
        resident = _resident()
        if resident is not None and resident - self._resident >= _GROWN:
            _give_back_memory()
            resident = _resident() or resident
        self._resident = resident or 0

    def _snapshot(self) -> Snapshot:
        state = self._state.snapshot()
        self._injector.refresh()  # the faults another server sharing the store set
        matcher = self._matcher
        recordings = tuple(matcher.recordings)
        return Snapshot(
            requests=state.requests,
            received=state.received,
            played=tuple(r for rid in state.answered if (r := matcher.recording(rid)) is not None),
            plays=state.plays,
            recordings=recordings,
            unplayed=tuple(r for r in recordings if not state.plays.get(matcher.id_of(r))),
            misses=state.misses,
            missed=state.missed,
            injected=state.injected,
            faults=tuple(self._injector.faults),
            seed=self._injector.seed,
            streams=self._streams(),
            recording=self._recorder.in_flight if self._recorder is not None else 0,
            kept=state.kept,
        )

    def _call(self, operation: Callable[[], T]) -> T:
        """Run `operation` on the server's event loop and return what it returns (at once, on that loop or
        while it does not run)."""
        loop = self._loop
        if loop is None or not loop.is_running() or _running_on(loop):
            return operation()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            if not done.set_running_or_notify_cancel():
                return
            try:
                done.set_result(operation())
            except Exception as exc:
                done.set_exception(exc)

        try:
            loop.call_soon_threadsafe(run)
        except RuntimeError:  # the loop closed meanwhile: nothing else touches the state now
            return operation()
        return done.result()


#: A reset after the process has grown this much since the last one hands the memory freed back to the system
#: (one after a few requests, as the pytest plugin makes before each test, does not take the time).
_GROWN = 8 * 2**20


def _resident() -> int | None:
    """The bytes of memory the process holds (its resident set), where the system says (Linux)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return None


def _give_back_memory() -> None:
    """Hand the memory the process has freed back to the system, where the C library can (glibc's
    `malloc_trim`; elsewhere, nothing)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


def _parsed(faults: Iterable[Fault | str]) -> list[Fault]:
    """`faults` as `Fault`s: too many are refused before any is read."""
    given = list(faults)
    _count(len(given))
    return [f if isinstance(f, Fault) else parse_fault(f) for f in given]


def _count(faults: int) -> None:
    if faults > MAX_FAULTS:
        raise ConfigError(f"{faults:,} faults: a server holds {MAX_FAULTS:,} at most")


def _running_on(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether this code runs on `loop`, in its thread."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
