"""The replay state of `serve --workers N`: held by the parent, asked by its workers (`WorkersStore`).

Forked workers share nothing they write, so each would count on its own: a
`status:429,times=1` would be one 429 per worker. With a `WorkersStore`, the
parent process holds the one state (a `MemoryStore`, with the faults and
seed last set and the journal's entries) and its workers ask it, each over a
socket pair of its own made before the fork (each message pickled, after its
length): the workers answer as one server. The parent answers on a thread of
its own, one message at a time, so that each operation is atomic across the
workers.

An operation whose answer replay needs (a request's number, which turn, a
claim, a snapshot) is a round trip; one that only tells (a request received,
a recording played, a fault applied, a miss, journal entries) is sent
without waiting for an answer, with the worker's next question or at the end
of its event loop's turn, all it told meanwhile in one write (what a
responder keeps goes at once). Before it answers any question, the parent
takes every message any worker sent until then: what one worker kept, the
next worker a client turns to finds. Whether another worker set new faults
comes back with each request's number, as `RedisStore` has it.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any, Final

from ._exceptions import StateError
from .cassette import Request
from .journal import Miss
from .state import FaultKey, MemoryStore, State

__all__ = ["WorkersStore"]

_ASKS: Final = frozenset(
    {"next_request", "requests", "next_turn", "plays", "claim", "count", "share_settings", "settings", "entries"}
    | {"snapshot", "reset", "kept_get", "kept_pop", "kept_keys", "kept_setdefault"}
)
#: What a worker tells at once, not at the end of its event loop's turn: what a responder keeps, which the next
#: worker a client turns to may ask for (a new MCP session, a background response).
_AT_ONCE: Final = frozenset({"kept_set"})
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
        self._held = _Held(keep_entries)
        pairs = [socket.socketpair() for _ in range(workers)]
        self._parent_ends = [parent for parent, _ in pairs]
        self._worker_ends = [worker for _, worker in pairs]
        self._connection: _Frames | None = None  # a worker's end, in that worker
        self._unsent: list[bytes] = []  # what a worker told, not sent yet (see `_tell`)
        self._sending = False  # whether they are to be sent at the end of the event loop's turn
        self._latest = self._taken = 0  # the settings' version as the parent last said it, and as this one has it

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
        number, self._latest = self._ask("next_request")
        return int(number)

    def requests(self) -> int:
        return int(self._ask("requests"))

    def add_received(self, request: Request) -> None:
        self._tell("add_received", request)

    def next_turn(self, key: str) -> int:
        return int(self._ask("next_turn", key))

    def played(self, recording_id: str) -> None:
        self._tell("played", recording_id)

    def plays(self, recording_id: str) -> int:
        return int(self._ask("plays", recording_id))

    def claim(self, recording_ids: Sequence[str]) -> str | None:
        claimed: str | None = self._ask("claim", list(recording_ids))
        return claimed

    def count(self, fault_key: FaultKey) -> int:
        return int(self._ask("count", fault_key))

    def restart_counts(self) -> None:
        self._tell("restart_counts")

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
        return _Kept(self._ask, self._tell, key)

    def add_entries(self, entries: Sequence[Mapping[str, Any]]) -> None:
        self._tell("add_entries", list(entries))

    def entries(self, limit: int | None) -> list[Mapping[str, Any]]:
        return list(self._ask("entries", limit))

    def snapshot(self) -> State:
        state: State = self._ask("snapshot")
        return state

    def reset(self) -> None:
        self._ask("reset")

    def _ask(self, operation: str, *args: Any) -> Any:
        """What the parent answers to `operation` (in the parent itself, until `in_worker`)."""
        connection = self._connection
        if connection is None:
            return getattr(self._held, operation)(*args)
        message = _message(operation, args, asked=True)
        if self._unsent:  # what it told since, first: one write
            message = b"".join((*self._unsent, message))
            self._unsent.clear()
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
        first, with all it told meanwhile in one write; what a responder keeps at once."""
        if self._connection is None:
            getattr(self._held, operation)(*args)
            return
        self._unsent.append(_message(operation, args, asked=False))
        if operation in _AT_ONCE:
            self._send_told()
        elif not self._sending:
            try:
                asyncio.get_running_loop().call_soon(self._send_told)
                self._sending = True
            except RuntimeError:  # not on an event loop: now
                self._send_told()

    def _send_told(self) -> None:
        """Send what was told and not sent yet (see `_tell`); where the parent is gone, the next question
        says so."""
        self._sending = False
        if self._unsent and self._connection is not None:
            told = b"".join(self._unsent)
            self._unsent.clear()
            with contextlib.suppress(OSError):
                self._connection.end.sendall(told)


class _Kept(MutableMapping[str, Any]):
    """What a responder keeps, held by the parent under `key`, asked and told as its store asks and tells: a
    value read is a copy, and a responder that changes one sets it again."""

    def __init__(self, ask: Callable[..., Any], tell: Callable[..., None], key: str) -> None:
        self._ask = ask
        self._tell = tell
        self._key = key

    def __getitem__(self, item: str) -> Any:
        found, value = self._ask("kept_get", self._key, item)
        if not found:
            raise KeyError(item)
        return value

    def __setitem__(self, item: str, value: Any) -> None:
        self._tell("kept_set", self._key, item, value)

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
        return len(self._ask("kept_keys", self._key))


class _Held:
    """What the parent holds for its workers, and its answer to each operation (named as `ReplayStore`'s,
    and `kept_*` for what responders keep)."""

    def __init__(self, keep_entries: int) -> None:
        self.store = MemoryStore()
        self.version = 0  # of the faults and seed set
        self.faults_and_seed: tuple[tuple[str, ...], int] | None = None
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
        only told (`asked`)."""
        try:
            if operation not in (_ASKS if asked else _TELLS):
                raise ValueError(f"no operation {operation!r}")
            return _framed((False, getattr(self, operation)(*args)))
        except Exception as exc:  # said, and the worker's request refused: the others go on
            say(f"the replay state failed: {operation}: {exc!r}")
            return _framed((True, f"{operation}: {exc!r}"))

    def next_request(self) -> tuple[int, int]:
        return self.store.next_request(), self.version

    def add_received(self, request: Request) -> None:
        self.store.add_received(request)

    def next_turn(self, key: str) -> int:
        return self.store.next_turn(key)

    def requests(self) -> int:
        return self.store.requests()

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
        self.version += 1
        return self.version

    def settings(self) -> tuple[tuple[tuple[str, ...], int] | None, int]:
        return self.faults_and_seed, self.version

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
        return self.store.snapshot()

    def reset(self) -> None:
        self.store.reset()
        self.journal.clear()
        self.reset_at = time.time()

    def kept_get(self, key: str, item: str) -> tuple[bool, Any]:
        kept = self.store.kept(key)
        return (True, kept[item]) if item in kept else (False, None)

    def kept_set(self, key: str, item: str, value: Any) -> None:
        self.store.kept(key)[item] = value

    def kept_setdefault(self, key: str, item: str, value: Any) -> Any:
        return self.store.kept(key).setdefault(item, value)

    def kept_pop(self, key: str, item: str) -> bool:
        return self.store.kept(key).pop(item, _GONE) is not _GONE

    def kept_keys(self, key: str) -> list[str]:
        return list(self.store.kept(key))


_GONE: Final = object()


def _message(operation: str, args: tuple[Any, ...], *, asked: bool) -> bytes:
    """A worker's message to its parent, framed; `StateError` where what it carries cannot be pickled (a
    responder that keeps a live object)."""
    try:
        return _framed((operation, args, asked))
    except Exception as exc:
        raise StateError(f"the replay state cannot keep what {operation} carries: {exc}") from None


def _framed(message: Any) -> bytes:
    """`message` as it goes over a socket pair: pickled, after its length (4 bytes)."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(4, "big") + data


class _Frames:
    """Messages over one end of a socket pair: each pickled, after its length (4 bytes)."""

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
            for operation, args, asked in self._complete():
                if asked:
                    self.asked = operation, args
                else:
                    self.told.append((operation, args))
        except Exception as exc:  # a message that cannot be read: that worker's end closes, the others go on
            say(f"the replay state failed: a worker's message cannot be read: {exc!r}")
            self.gone = True

    def _complete(self) -> Iterator[Any]:
        buffer = self._buffer
        while len(buffer) >= 4 and len(buffer) >= 4 + (size := int.from_bytes(buffer[:4], "big")):
            message = pickle.loads(buffer[4 : 4 + size])
            del buffer[: 4 + size]
            yield message
