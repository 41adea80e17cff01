"""The replay state of `serve --workers N`: held by the parent, asked by its workers (`WorkersStore`).

Forked workers share nothing they write, so each would count on its own: a
`status:429,times=1` would be one 429 per worker. With a `WorkersStore`, the
parent process holds the one state (a `MemoryStore`, with the faults and
seed last set and the journal's entries) and its workers ask it, each over a
socket pair of its own made before the fork (each message pickled, after its
length): the workers answer as one server. The parent answers on a thread of
its own, one message at a time, so that each operation is atomic across the
workers.

A request's number, which every request takes, is no question to the
parent: the count sits in memory the parent and its workers share (mapped
before the fork), behind a lock they share, beside the version of the
faults and seed last set, the counts of the faults set on the server (the
first `_PLACES` of them) and the turns of groups of equal recordings (of
the first `_TURNS` groups the parent was asked about, each at a place it
gives once), so that a worker takes a number, learns whether another worker
set new faults (as `RedisStore` has it), counts a fault's requests for
`times=` and `p=`, and takes a group's next turn, without waiting for the
parent. A replayed stream asks the parent nothing, with faults set on the
server or without.

Another operation whose answer replay needs (a group's place, the first
time a worker meets it; a claim; the count of a fault a request header asks
for; a snapshot) is a round trip; one that only tells (a request received,
a recording played, a fault applied, a miss, journal entries) is sent
without waiting for an answer, with the worker's next question or at the
end of its event loop's turn: all it told meanwhile in one message, pickled
once (what a responder keeps goes at once). Before it answers any question,
the parent takes every message any worker sent until then: what one worker
kept, the next worker a client turns to finds.
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
import multiprocessing
import pickle
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, ItemsView, Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import replace
from typing import Any, Final

from ._exceptions import StateError
from .cassette import Request
from .journal import Miss
from .state import FaultKey, MemoryStore, State, forget

__all__ = ["WorkersStore"]

_ASKS: Final = frozenset(
    {"turn_place", "next_turn", "plays", "claim", "count", "share_settings", "settings", "entries", "snapshot", "reset"}
    | {"kept_get", "kept_pop", "kept_keys", "kept_setdefault", "kept_items", "kept_len", "kept_discard"}
)
_TELLS: Final = frozenset(
    {"add_received", "played", "restart_counts", "note_injected", "add_miss", "add_entries", "kept_set"}
)


class WorkersStore:
    """A `ReplayStore` for the `workers` processes forked from this one (see the module).

    Made in the parent before the fork, and the server built with it; then, in worker `n` (from 0),
    `in_worker(n)`, and in the parent, once every worker is forked, `hold()`. Until either, it is the parent's
    own: each operation acts on what it holds, in this process.
    """

    shared = True
    """Its workers share it: it keeps their journal entries too."""

    def __init__(self, workers: int, *, keep_entries: int = 10_000) -> None:
        self._counted = _Counted()
        self._held = _Held(self._counted, keep_entries)
        pairs = [socket.socketpair() for _ in range(workers)]
        self._parent_ends = [parent for parent, _ in pairs]
        self._worker_ends = [worker for _, worker in pairs]
        self._connection: _Frames | None = None  # a worker's end, in that worker
        self._unsent: list[tuple[str, tuple[Any, ...]]] = []  # what a worker told, not sent yet (see `_tell`)
        self._sending = False  # whether they are to be sent at the end of the event loop's turn
        self._latest = self._taken = 0  # the settings' version as last counted, and as this one has it
        self._turn_places: dict[str, int | None] = {}  # each group's place in `_Counted`, as the parent gave it
        self.asked = 0
        """How many questions this worker has asked its parent: its round trips (`bench/state_bench.py`)."""

    def in_worker(self, n: int) -> None:
        """Become worker `n`'s store: every operation asks the parent, over the worker's own end."""
        mine = self._worker_ends[n]
        for end in (*self._parent_ends, *self._worker_ends):
            if end is not mine:
                end.close()  # so that a worker gone is an end of file to the parent
        self._connection = _Frames(mine)
        self._parent_ends, self._worker_ends = [], []

    def hold(self, say: Callable[[str], None]) -> None:
        """In the parent, once every worker is forked: answer them, on a thread, until they all end (the parent
        asks nothing of it meanwhile). `say` gets a line for an operation that failed."""
        for connection in self._worker_ends:
            connection.close()
        answering = threading.Thread(
            target=self._held.answer, args=(self._parent_ends, say), name="sse-tape replay state", daemon=True
        )
        self._parent_ends, self._worker_ends = [], []
        answering.start()

    def next_request(self) -> int:
        number, self._latest = self._counted.next_request()  # no question to the parent (see the module)
        return number

    def requests(self) -> int:
        return self._counted.requests()

    def add_received(self, request: Request) -> None:
        # Its fields, not the request: a dataclass pickles slower than the tuple of its fields.
        self._tell("add_received", (request.method, request.path, request.query, request.headers, request.body))

    def next_turn(self, key: str) -> int:
        if key not in self._turn_places:  # the first time this process meets the group: where are its turns?
            self._turn_places[key] = self._ask("turn_place", key)
        place = self._turn_places[key]
        if place is None:  # past the first `_TURNS` groups: the parent counts its turns
            return int(self._ask("next_turn", key))
        return self._counted.next_turn(place)

    def played(self, recording_id: str) -> None:
        self._tell("played", recording_id)

    def plays(self, recording_id: str) -> int:
        return int(self._ask("plays", recording_id))

    def claim(self, recording_ids: Sequence[str]) -> str | None:
        claimed: str | None = self._ask("claim", list(recording_ids))
        return claimed

    def count(self, fault_key: FaultKey) -> int:
        if isinstance(fault_key, int) and 0 <= fault_key < _PLACES:
            return self._counted.count_placed(fault_key)  # no question to the parent (see the module)
        return int(self._ask("count", fault_key))

    def restart_counts(self) -> None:
        self._counted.restart_placed()
        self._tell("restart_counts")  # those past the first `_PLACES`, which the parent counts

    def note_injected(self, spec: str) -> None:
        self._tell("note_injected", spec)

    def share_settings(self, faults: Sequence[str], seed: int) -> None:
        self._taken = self._latest = int(self._ask("share_settings", tuple(faults), seed))

    def settings(self) -> tuple[tuple[str, ...], int] | None:
        if self._latest == self._taken:
            return None
        settings, self._latest = self._ask("settings")
        self._taken = self._latest
        return settings  # type: ignore[no-any-return]  # what the parent holds: (faults, seed) or None

    def add_miss(self, miss: Miss) -> None:
        self._tell("add_miss", miss)

    def kept(self, key: str) -> MutableMapping[str, Any]:
        return _Kept(self._ask, self._keep, key)

    def add_entries(self, entries: Sequence[Mapping[str, Any]]) -> None:
        self._tell("add_entries", list(entries))

    def entries(self, limit: int | None) -> list[Mapping[str, Any]]:
        return list(self._ask("entries", limit))

    def snapshot(self) -> State:
        state: State = self._ask("snapshot")
        return state

    def reset(self, keep: Collection[str] = ()) -> None:
        self._ask("reset", tuple(keep))

    def _ask(self, operation: str, *args: Any) -> Any:
        """What the parent answers to `operation` (in the parent itself, until `in_worker`), sent with all this
        worker told and has not sent yet, in one message."""
        connection = self._connection
        if connection is None:
            return getattr(self._held, operation)(*args)
        told, self._unsent = self._unsent, []
        self.asked += 1
        try:
            message = _framed((told, (operation, args)))
        except Exception as exc:
            raise StateError(f"the replay state cannot take what {operation} carries: {exc}") from None
        try:
            connection.end.sendall(message)
            failed, answer = connection.receive()
        except OSError:
            raise StateError("the parent process holding the replay state is gone") from None
        if failed:
            raise StateError(f"the replay state failed: {answer}")
        return answer

    def _tell(self, operation: str, *args: Any) -> None:
        """Send `operation` to the parent without waiting for its answer (in the parent itself, until
        `in_worker`): with the worker's next question, or at the end of its event loop's turn, whichever is
        first, with all it told meanwhile in one message."""
        if self._connection is None:
            getattr(self._held, operation)(*args)
            return
        self._unsent.append((operation, args))
        if not self._sending:
            try:
                asyncio.get_running_loop().call_soon(self._send_told)
                self._sending = True
            except RuntimeError:  # not on an event loop: now
                self._send_told()

    def _send_told(self) -> None:
        """Send what was told and not sent yet (see `_tell`); where the parent is gone, the next question
        says so."""
        self._sending = False
        told, self._unsent = self._unsent, []
        if told and self._connection is not None:
            with contextlib.suppress(OSError):
                self._connection.end.sendall(_framed((told, None)))

    def _keep(self, key: str, item: str, value: Any) -> None:
        """Keep `value` under `item` of what a responder keeps under `key`: at once, not at the end of the event
        loop's turn, for the next worker a client turns to may ask for it (a new MCP session, a background
        response); `StateError` where it cannot be pickled (a responder that keeps a live object)."""
        try:
            pickled = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise StateError(f"the replay state cannot keep {key}'s {item!r}: {exc}") from None
        self._tell("kept_set", key, item, pickled)
        self._send_told()


class _Kept(MutableMapping[str, Any]):
    """What a responder keeps, held by the parent under `key`, asked and told as its store asks and tells: a
    value read is a copy, and a responder that changes one sets it again. All it keeps is read in one question
    (`items()`), counted in one (`len`), and several deleted in one (`discard`)."""

    def __init__(self, ask: Callable[..., Any], keep: Callable[[str, str, Any], None], key: str) -> None:
        self._ask = ask
        self._keep = keep
        self._key = key

    def __getitem__(self, item: str) -> Any:
        found, value = self._ask("kept_get", self._key, item)
        if not found:
            raise KeyError(item)
        return value

    def __setitem__(self, item: str, value: Any) -> None:
        self._keep(self._key, item, value)

    def __delitem__(self, item: str) -> None:
        if not self._ask("kept_pop", self._key, item):
            raise KeyError(item)

    def setdefault(self, item: str, default: Any = None) -> Any:
        """The value kept under `item`; where there is none, `default`, kept there: one question to the parent,
        so that of workers setting one item at the same moment, one sets it and the others read it."""
        return self._ask("kept_setdefault", self._key, item, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ask("kept_keys", self._key))

    def __len__(self) -> int:
        return int(self._ask("kept_len", self._key))

    def items(self) -> ItemsView[str, Any]:
        """What it keeps, each key with its value, in one question to the parent: a copy."""
        return dict(self._ask("kept_items", self._key)).items()

    def discard(self, items: Iterable[str]) -> None:
        """Delete `items`, those not kept passed over, in one question to the parent (see `state.forget`)."""
        self._ask("kept_discard", self._key, list(items))


class _Counted:
    """The requests' count, the version of the faults and seed last set, the counts of the first `_PLACES`
    faults set on the server, and the turns of `_TURNS` groups of equal recordings, in memory the parent and its
    workers share (mapped before the fork: a write in one process is seen by all), behind a lock they share."""

    def __init__(self) -> None:
        self._memory = mmap.mmap(-1, (_HEAD + _PLACES + _TURNS) * 8)
        # The count, the version, each place's count, then each group's turns.
        self._values = memoryview(self._memory).cast("q")
        self._lock = multiprocessing.get_context("fork").Lock()

    def next_request(self) -> tuple[int, int]:
        """Count a request: its number, and the settings' version now."""
        values = self._values
        self._acquire()
        try:
            number = values[0] = values[0] + 1
            return number, values[1]
        finally:
            self._lock.release()

    def requests(self) -> int:
        """How many requests were counted since the start or the last reset."""
        return self._values[0]

    def version(self) -> int:
        """The settings' version now."""
        return self._values[1]

    def count_placed(self, place: int) -> int:
        """How many requests the server's fault at `place` (below `_PLACES`) has seen before this one, counting
        this one."""
        return self._taken(_HEAD + place)

    def next_turn(self, place: int) -> int:
        """How many requests the group of equal recordings at `place` (below `_TURNS`) has answered before this
        one, counting this one."""
        return self._taken(_HEAD + _PLACES + place)

    def placed(self) -> dict[FaultKey, int]:
        """The counts of the server's faults, by place, of those counted."""
        values = self._values
        return {place: seen for place in range(_PLACES) if (seen := values[_HEAD + place])}

    def restart_placed(self) -> None:
        """Start the counts of the server's faults over (new faults set)."""
        self._acquire()
        try:
            self._memory[_HEAD * 8 : (_HEAD + _PLACES) * 8] = bytes(_PLACES * 8)
        finally:
            self._lock.release()

    def restart(self) -> None:
        """Count the requests, the requests each of the server's faults has seen, and the groups' turns from 0
        again (a reset)."""
        self._acquire()
        try:
            self._values[0] = 0
            self._memory[_HEAD * 8 :] = bytes((_PLACES + _TURNS) * 8)
        finally:
            self._lock.release()

    def new_version(self) -> int:
        """Note that the faults and seed were set again: their new version (only the parent sets them)."""
        return self._taken(1) + 1

    def _taken(self, at: int) -> int:
        """The value at `at`, counted one more in the same step."""
        values = self._values
        self._acquire()
        try:
            value = values[at]
            values[at] = value + 1
            return value
        finally:
            self._lock.release()

    def _acquire(self) -> None:
        # Held for a few instructions: a lock held longer was taken by a worker killed meanwhile.
        if not self._lock.acquire(timeout=_LOCK_WAIT):
            raise StateError("the replay state's counts are locked by a worker gone")


#: How many values come first in `_Counted`'s memory: the requests' count and the settings' version.
_HEAD: Final = 2
#: How many of the faults set on the server have their counts in memory the workers share (see the module); the
#: parent counts those past them, each a round trip.
_PLACES: Final = 256
#: How many groups of equal recordings have their turns in memory the workers share; the parent counts those of
#: the groups past them, each a round trip.
_TURNS: Final = 4096

#: How long a worker waits for the counts' lock before it gives up on it (see `_Counted`).
_LOCK_WAIT: Final = 10.0


class _Held:
    """What the parent holds for its workers, and its answer to each operation (named as `ReplayStore`'s,
    and `kept_*` for what responders keep)."""

    def __init__(self, counted: _Counted, keep_entries: int) -> None:
        self.store = MemoryStore()
        self.counted = counted
        self.faults_and_seed: tuple[tuple[str, ...], int] | None = None
        self.turn_places: dict[str, int] = {}  # the groups whose turns are counted in `counted`, by their places
        self.journal: deque[Mapping[str, Any]] = deque(maxlen=keep_entries)
        self.reset_at = 0.0  # when the state was last reset (the time of journal entries, since the epoch)

    def answer(self, ends: list[socket.socket], say: Callable[[str], None]) -> None:
        """Answer the workers at `ends` until every worker has closed its end.

        Before it answers a question, it takes every message already sent on any end: what one worker told
        (a session it keeps, a play) is applied before another worker's question that came after it, as the
        client that turned from one to the other expects. A worker sends its messages in order and waits after
        a question, so an end holds what it told, then at most one question."""
        workers = [_Frames(end) for end in ends]
        with selectors.DefaultSelector() as selector:
            for frames in workers:
                selector.register(frames.end, selectors.EVENT_READ, frames)
            while workers:
                for key, _ in selector.select():
                    key.data.take(say)
                if any(frames.asked for frames in workers):
                    for frames in workers:
                        frames.take(say)
                for frames in workers:  # what they told first, then their questions
                    for operation, args in frames.told:
                        self._answer(operation, args, asked=False, say=say)
                    frames.told.clear()
                for frames in workers:
                    if frames.asked is not None and not frames.gone:
                        operation, args = frames.asked
                        frames.asked = None
                        try:
                            frames.end.sendall(self._answer(operation, args, asked=True, say=say))
                        except OSError:  # the worker ended meanwhile
                            frames.gone = True
                for frames in [frames for frames in workers if frames.gone]:
                    workers.remove(frames)
                    selector.unregister(frames.end)
                    frames.end.close()

    def _answer(self, operation: str, args: tuple[Any, ...], asked: bool, say: Callable[[str], None]) -> bytes:
        """The message answering an operation, `(failed, answer)` framed (see `_Frames`), whether it was asked or
        only told (`asked`: then nothing is framed)."""
        try:
            if operation not in (_ASKS if asked else _TELLS):
                raise ValueError(f"no operation {operation!r}")
            answer = getattr(self, operation)(*args)
            return _framed((False, answer)) if asked else b""
        except Exception as exc:  # said, and the worker's request refused: the others go on
            say(f"the replay state failed: {operation}: {exc!r}")
            return _framed((True, f"{operation}: {exc!r}"))

    def add_received(self, fields: tuple[str, str, str, Any, bytes]) -> None:
        self.store.add_received(Request(*fields))

    def turn_place(self, key: str) -> int | None:
        """Where the group `key`'s turns are counted in the memory the workers share (the same for all); None
        past the first `_TURNS` groups."""
        place = self.turn_places.get(key)
        if place is None and len(self.turn_places) < _TURNS:
            place = self.turn_places[key] = len(self.turn_places)
        return place

    def next_turn(self, key: str) -> int:
        return self.store.next_turn(key)

    def played(self, recording_id: str) -> None:
        self.store.played(recording_id)

    def plays(self, recording_id: str) -> int:
        return self.store.plays(recording_id)

    def claim(self, recording_ids: list[str]) -> str | None:
        return self.store.claim(recording_ids)

    def count(self, fault_key: FaultKey) -> int:
        return self.store.count(fault_key)

    def restart_counts(self) -> None:
        self.store.restart_counts()

    def note_injected(self, spec: str) -> None:
        self.store.note_injected(spec)

    def share_settings(self, faults: tuple[str, ...], seed: int) -> int:
        self.faults_and_seed = faults, seed
        return self.counted.new_version()

    def settings(self) -> tuple[tuple[tuple[str, ...], int] | None, int]:
        return self.faults_and_seed, self.counted.version()

    def add_miss(self, miss: Miss) -> None:
        self.store.add_miss(miss)

    def add_entries(self, entries: list[Mapping[str, Any]]) -> None:
        # A worker sends its entries a batch at a time: those made before a reset another worker was asked
        # for may come after it, and belong to what it forgot.
        self.journal.extend(entry for entry in entries if entry.get("time", 0) >= self.reset_at)

    def entries(self, limit: int | None) -> list[Mapping[str, Any]]:
        if limit is not None and limit <= 0:
            return []
        found = list(self.journal)[-limit:] if limit is not None else list(self.journal)
        return sorted(found, key=lambda entry: entry.get("time", 0))  # each worker's batches, in one order

    def snapshot(self) -> State:
        state = self.store.snapshot()
        return replace(state, requests=self.counted.requests(), counts={**self.counted.placed(), **state.counts})

    def reset(self, keep: Collection[str]) -> None:
        self.store.reset(keep)
        self.counted.restart()
        self.journal.clear()
        self.reset_at = time.time()

    def kept_get(self, key: str, item: str) -> tuple[bool, Any]:
        kept = self.store.kept(key)
        return (True, kept[item]) if item in kept else (False, None)

    def kept_set(self, key: str, item: str, pickled: bytes) -> None:
        self.store.kept(key)[item] = pickle.loads(pickled)

    def kept_setdefault(self, key: str, item: str, value: Any) -> Any:
        return self.store.kept(key).setdefault(item, value)

    def kept_pop(self, key: str, item: str) -> bool:
        return self.store.kept(key).pop(item, _GONE) is not _GONE

    def kept_keys(self, key: str) -> list[str]:
        return list(self.store.kept(key))

    def kept_items(self, key: str) -> list[tuple[str, Any]]:
        return list(self.store.kept(key).items())

    def kept_len(self, key: str) -> int:
        return len(self.store.kept(key))

    def kept_discard(self, key: str, items: list[str]) -> None:
        forget(self.store.kept(key), items)


_GONE: Final = object()


def _framed(message: Any) -> bytes:
    """`message` as it goes over a socket pair: pickled, after its length (4 bytes)."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(4, "big") + data


class _Frames:
    """Messages over one end of a socket pair: each pickled, after its length (4 bytes). A worker's message is
    what it told, `[(operation, args), ...]`, and its question, `(operation, args)` or None; the parent's is its
    answer, `(failed, answer)`."""

    def __init__(self, end: socket.socket) -> None:
        self.end = end
        self._buffer = bytearray()
        self.told: list[tuple[str, tuple[Any, ...]]] = []
        """In the parent: what the worker told, not applied yet, in order."""
        self.asked: tuple[str, tuple[Any, ...]] | None = None
        """In the parent: the worker's question not answered yet (it waits for its answer)."""
        self.gone = False
        """In the parent: whether the worker closed its end (or sent what cannot be read)."""

    def receive(self) -> Any:
        """In a worker: the next message, waiting for it; `OSError` where the other end is gone."""
        while True:
            for message in self._complete():
                return message
            data = self.end.recv(1 << 16)
            if not data:
                raise ConnectionResetError("the other end closed")
            self._buffer += data

    def take(self, say: Callable[[str], None]) -> None:
        """In the parent: read all the worker has sent so far, without waiting, into `told` and `asked`."""
        if self.gone:
            return
        try:
            while data := self.end.recv(1 << 16, socket.MSG_DONTWAIT):
                self._buffer += data
            self.gone = True  # an end of file: the worker ended
        except BlockingIOError:
            pass  # all it sent is read
        except OSError:
            self.gone = True
        try:
            for told, asked in self._complete():
                self.told += told
                if asked is not None:
                    self.asked = asked
        except Exception as exc:  # a message that cannot be read: that worker's end closes, the others go on
            say(f"the replay state failed: a worker's message cannot be read: {exc!r}")
            self.gone = True

    def _complete(self) -> Iterator[Any]:
        buffer = self._buffer
        while len(buffer) >= 4 and len(buffer) >= 4 + (size := int.from_bytes(buffer[:4], "big")):
            message = pickle.loads(buffer[4 : 4 + size])
            del buffer[: 4 + size]
            yield message
