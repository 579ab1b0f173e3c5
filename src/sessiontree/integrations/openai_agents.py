"""The OpenAI Agents SDK's `Session` on sessiontree: `SessionTreeSession(session_id)`.

One line in an Agents SDK program::

    session = SessionTreeSession("conversation_123")   # was SQLiteSession(...)
    result = await Runner.run(agent, "Hello", session=session)

A session is a v3 session file (or its PostgreSQL twin) named `<session_id>.jsonl` in
the project dir of `cwd` (default: the current directory), its header's id the
`session_id`. Each item becomes the entry pi and oh-my-pi read as the same thing: a
user message; an assistant output message as a text block; a `function_call` as a
`toolCall` block; a `function_call_output` as a `toolResult`; reasoning as thinking;
anything else (system and developer messages, built-in tool calls...) as a custom entry
(`openai-agents.item`). The item itself is kept verbatim in its entry (the message
entry's `openaiAgentsItem` field, the custom entry's `data`), so `get_items` returns
exactly what was added, in order.

Nothing is deleted: `pop_item` moves the leaf back to the popped item's parent (the
item stays in the file, on a branch), `clear_session` starts a new root; each writes
a marker (a custom entry `openai-agents.marker`) so the move is in the file, as pi
reads a leaf. Branches as `AdvancedSQLiteSession` has them are branches of the tree:
`create_branch_from_turn`, `switch_to_branch`, `list_branches`, `get_conversation_turns`;
`store_run_usage(result)` records a run's usage, `get_turn_usage` reads it per turn.

Several `SessionTreeSession` objects of one session id, in one process or several (on
PostgreSQL, on several hosts), all read and write it, as the SDK's `SQLiteSession`
allows: a call takes the session's writer lock, waiting (up to 30 s) while another
object's call holds it, and reads what the others wrote before it. The lock is kept
after a call for the next one until the object has been idle for 0.1 s (reading the
session again costs more than a call), or until another object of this process asks
for it; a call that finds it held only to read reads the session as stored.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from sessiontree.integrations._common import (
    LOCK_PATIENCE_S,
    check_name,
    missing_extra,
    open_location,
    wait_for_lock,
)

try:
    from agents.memory import SessionABC, SessionSettings
    from agents.memory.session_settings import resolve_session_limit
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra(__name__, "openai-agents", "the OpenAI Agents SDK") from exc

from sessiontree.errors import SessionLockError
from sessiontree.format import Entry, loads_line, new_header, serialize_entry_bytes
from sessiontree.integrations._items import item_to_pi_message
from sessiontree.layout import get_default_session_dir
from sessiontree.session import SessionManager
from sessiontree.store import Store

if TYPE_CHECKING:
    from agents.items import TResponseInputItem
    from agents.result import RunResult

__all__ = ["ITEM_FIELD", "ITEM_TYPE", "MARKER_TYPE", "SessionTreeSession"]

ITEM_FIELD = "openaiAgentsItem"
"""The field of a message entry that holds the item it was made from."""
ITEM_TYPE = "openai-agents.item"
"""The custom type of an item that is no pi message (its `data` is the item)."""
MARKER_TYPE = "openai-agents.marker"
"""The custom type of a leaf move (`data.op`: pop, clear, branch, switch) or of a
run's usage (`op`: usage)."""
MAIN = "main"

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_WRITES: Any = object()

_IDLE_S = 0.1
"""How long an object keeps the session's writer lock after a call, for its next one:
the Runner makes several calls a turn, and taking the lock again means reading the
session again (another writer may have written meanwhile)."""

_HOLDERS: dict[tuple[str, str], SessionTreeSession] = {}
"""The object of this process holding each session's lock between calls (by store
location and path): another object of the session asks it to let go at once rather
than wait out its idle time."""
_HOLDERS_MUTEX = threading.Lock()


def _item_of(entry: Entry) -> dict[str, Any] | None:
    kind = entry.get("type")
    if kind == "message":
        item = entry.get(ITEM_FIELD)
    elif kind == "custom" and entry.get("customType") == ITEM_TYPE:
        item = entry.get("data")
    else:
        return None
    return item if isinstance(item, dict) else None


def _copy(item: dict[str, Any]) -> dict[str, Any]:
    """A copy of a stored item for the caller (who may change it: the session must not)."""
    return cast("dict[str, Any]", loads_line(serialize_entry_bytes(item)))


def _marker(entry: Entry) -> dict[str, Any] | None:
    if entry.get("type") == "custom" and entry.get("customType") == MARKER_TYPE:
        data = entry.get("data")
        return data if isinstance(data, dict) else None
    return None


def _landed(manager: SessionManager, before: str | None, lines: list[bytes]) -> int:
    """How many of a batch's items a failed call landed: the items between `before`
    (the leaf the batch started from) and the leaf, when they are the batch's first
    ones; else 0 (the session moved on: the batch is added whole)."""
    got: list[bytes] = []
    entry_id = manager.get_leaf_id()
    while entry_id != before:
        entry = manager.get_entry(entry_id) if entry_id is not None else None
        item = _item_of(entry) if entry is not None else None
        if entry is None or item is None or len(got) == len(lines):
            return 0
        got.append(serialize_entry_bytes(item))
        entry_id = entry.get("parentId")
    got.reverse()
    return len(got) if got == lines[: len(got)] else 0


def _is_user_turn(item: dict[str, Any]) -> bool:
    return item.get("role") == "user" and item.get("type") in (None, "message")


class SessionTreeSession(SessionABC):
    """An OpenAI Agents SDK session kept as a session tree.

    `location`: an agent dir (a path or `file:` URL), a `postgresql://` URL or None
    (the default store), as `sessiontree --store` takes it; `store`: a
    `sessiontree.Store` of your own instead. `cwd`: the project the session belongs
    to (default: the current directory). `session_settings`: as the SDK's sessions
    take them (`limit`: the default of `get_items`). `durable=False`: no fsync per
    write (see `durable`). Other objects of the same session id, here or in other
    processes, read and write it too (see the module doc).

    ValueError for a `session_id` that is not a safe file name.
    """

    def __init__(
        self,
        session_id: str,
        location: str | os.PathLike[str] | None = None,
        *,
        cwd: str | os.PathLike[str] | None = None,
        store: Store | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        durable: bool = True,
    ) -> None:
        if store is not None and location is not None:
            raise ValueError("give a location or a store, not both")
        self.session_id = check_name(session_id, "session_id", suffix=".jsonl")
        self.session_settings = (
            SessionSettings(**session_settings)
            if isinstance(session_settings, dict)
            else session_settings or SessionSettings()
        )
        self.durable = durable
        """Whether each write ends with a durable flush (fsync; a synchronous commit on
        PostgreSQL). False: written to the OS (or committed asynchronously) at once,
        made durable when this object lets go of the session (idle, or `close()`); a
        crash of the process loses nothing, one of the host may lose the last writes
        (SQLite's `synchronous=NORMAL`)."""
        self._owns_store = store is None
        self._store = store if store is not None else open_location(location)
        self.cwd = os.path.abspath(os.fspath(cwd)) if cwd is not None else os.getcwd()
        self.path = os.path.join(
            get_default_session_dir(self.cwd, self._store.agent_dir), self.session_id + ".jsonl"
        )
        """The session file (a key under the database's root on PostgreSQL)."""
        self._manager: SessionManager | None = None
        """The session, while this object holds its writer lock (between calls: until
        idle for _IDLE_S); None otherwise, and read again at the next call."""
        self._mutex = threading.Lock()
        self._last_call = 0.0
        self._idle_timer: threading.Timer | None = None
        self._tool_names: dict[str, str] = {}
        self._closed = False
        # A batch whose add_items failed: its lines, and the leaf before it.
        self._pending: tuple[list[bytes], str | None] | None = None

    def __repr__(self) -> str:
        return f"SessionTreeSession({self.session_id!r}, {self._store.location!r})"

    # ------------------------------------------------------------------ the manager

    def _open(self, patience: float = LOCK_PATIENCE_S) -> SessionManager:
        """The session with its writer lock (see `_take`), read again unless this object
        held the lock since its last call."""
        if self._closed:
            raise RuntimeError("SessionTreeSession is closed")
        manager = self._manager
        if manager is not None:
            return manager
        storage = self._store.storage
        if not storage.exists(self.path):
            # Its header, written once under the session's lock (two processes may
            # start the same new session at once).
            storage.ensure_dir(os.path.dirname(self.path))
            lock = wait_for_lock(storage, self.path)
            try:
                header = new_header(self.cwd, session_id=self.session_id)
                writer = storage.open_writer(self.path, "a")
                try:
                    if storage.stat(self.path).size == 0:
                        writer.write_line(serialize_entry_bytes(header).decode("utf-8") + "\n")
                        writer.fsync()
                finally:
                    writer.close()
            finally:
                if lock is not None:
                    lock.release()
        manager = self._take(patience)
        for entry in manager.get_entries():
            item = _item_of(entry)
            if item is not None and item.get("type") == "function_call":
                self._tool_names[str(item.get("call_id"))] = str(item.get("name") or "")
        self._manager = manager
        with _HOLDERS_MUTEX:
            _HOLDERS[self._key()] = self
        return manager

    def _key(self) -> tuple[str, str]:
        return (self._store.location, self.path)

    def _take(self, patience: float) -> SessionManager:
        """The session read with its writer lock taken, waiting up to `patience` seconds
        while another writer holds it (an object of this process is asked to let go;
        with no patience, nothing is asked); SessionLockError after that."""
        deadline = time.monotonic() + patience
        delay = 0.001
        while True:
            try:
                return self._store.session(self.path, breadcrumb=False, lazy=False)
            except SessionLockError:
                if patience <= 0 or time.monotonic() > deadline:
                    raise
                with _HOLDERS_MUTEX:
                    holder = _HOLDERS.get(self._key())
                if holder is not None and holder is not self and holder._let_go_if_idle():
                    continue
                time.sleep(delay)
                delay = min(delay * 2, 0.05)

    def _let_go_if_idle(self) -> bool:
        """Release the session's lock unless a call of this object is running (then it
        is released once the call is over and idle); whether it was released."""
        if not self._mutex.acquire(blocking=False):
            return False
        try:
            if self._manager is None:
                return False
            self._drop_manager()
            return True
        finally:
            self._mutex.release()

    def _arm_idle(self) -> None:
        """After a call: release the lock once the object has been idle for _IDLE_S
        (one timer at a time, re-armed for what is left while calls go on)."""
        self._last_call = time.monotonic()
        if self._manager is not None and self._idle_timer is None:
            self._start_idle_timer(_IDLE_S)

    def _start_idle_timer(self, delay: float) -> None:
        timer = threading.Timer(delay, self._idle)
        timer.daemon = True
        self._idle_timer = timer
        timer.start()

    def _idle(self) -> None:
        with self._mutex:
            self._idle_timer = None
            if self._manager is None:
                return
            left = self._last_call + _IDLE_S - time.monotonic()
            if left > 0:
                self._start_idle_timer(left)
                return
            self._drop_manager()

    async def _run(
        self, fn: Callable[[SessionManager], _T], empty: Any = _WRITES, *, read: bool = False
    ) -> _T:
        """`fn(manager)` in a worker thread; a call given `empty` on a session that was
        never written is `empty`, and creates nothing. A `read` while another object
        (another process) writes the session reads it as stored, without its lock."""

        def locked() -> _T:
            with self._mutex:
                if self._closed:
                    raise RuntimeError("SessionTreeSession is closed")
                if (
                    empty is not _WRITES
                    and self._manager is None
                    and not self._store.storage.exists(self.path)
                ):
                    return cast("_T", empty)
                try:
                    if read and self._manager is None:
                        try:
                            manager = self._open(patience=0)
                        except SessionLockError:
                            with self._store.session(
                                self.path, read_only=True, breadcrumb=False, lazy=False
                            ) as reader:
                                return fn(reader)
                    else:
                        manager = self._open()
                    return fn(manager)
                finally:
                    self._arm_idle()

        return await asyncio.to_thread(locked)

    def close(self) -> None:
        """Flush and release the session (its writer lock) and the store, if ours."""
        with self._mutex:
            self._closed = True
            timer, self._idle_timer = self._idle_timer, None
            if timer is not None:
                timer.cancel()
            manager, self._manager = self._manager, None
            self._forget()
            try:
                if manager is not None:
                    manager.close()
            finally:
                if self._owns_store:
                    self._store.close()

    def _forget(self) -> None:
        with _HOLDERS_MUTEX:
            if _HOLDERS.get(self._key()) is self:
                del _HOLDERS[self._key()]

    # ------------------------------------------------------------------ the protocol

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The items on the current branch, oldest first; the latest `limit` when given
        (default: `session_settings.limit`)."""
        wanted = resolve_session_limit(limit, self.session_settings)

        def read(manager: SessionManager) -> list[TResponseInputItem]:
            if wanted is None or wanted < 0:
                items = [_copy(i) for e in manager.get_branch() if (i := _item_of(e)) is not None]
                return cast("list[TResponseInputItem]", items)
            out: list[dict[str, Any]] = []
            entry_id = manager.get_leaf_id()
            while entry_id is not None and len(out) < wanted:
                entry = manager.get_entry(entry_id)
                if entry is None:
                    break
                item = _item_of(entry)
                if item is not None:
                    out.append(_copy(item))
                entry_id = entry.get("parentId")
            out.reverse()
            return cast("list[TResponseInputItem]", out)

        return await self._run(read, [], read=True)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items on the current branch (checked first: nothing is written
        when one is not a JSON object), then a durable flush.

        A call that fails part way (the database went away, the disk is full) leaves
        what it wrote; the same batch added again lands only the rest, so that it is in
        the session once (the session is read again from storage after a failure)."""
        if self._closed:
            raise RuntimeError("SessionTreeSession is closed")
        if not items:
            return
        lines: list[bytes] = []
        stored: list[dict[str, Any]] = []
        for item in items:
            if not isinstance(item, dict):
                raise TypeError(f"a session item is a dict, not {type(item).__name__}")
            lines.append(serialize_entry_bytes(item))  # TypeError for what JSON cannot hold
            # The item as storage holds it (what every other process reads), and not
            # the caller's dict, which the caller may change after this call.
            stored.append(cast("dict[str, Any]", loads_line(lines[-1])))

        def write(manager: SessionManager) -> None:
            start = 0
            pending = self._pending
            if pending is not None and pending[0] == lines:
                start = _landed(manager, pending[1], lines)
            # Every item converted before any is written: one the conversion refuses
            # fails the batch with nothing of it written.
            tool_names = dict(self._tool_names)
            messages = [item_to_pi_message(item, tool_names) for item in stored[start:]]
            if pending is None or pending[0] != lines:
                self._pending = (lines, manager.get_leaf_id())
            self._tool_names = tool_names
            try:
                for item, message in zip(stored[start:], messages, strict=True):
                    if message is not None:
                        manager.append_message(message, extra={ITEM_FIELD: item})
                    else:
                        manager.append_custom_entry(ITEM_TYPE, item)
                if self.durable:
                    manager.flush()
            except BaseException:
                self._drop_manager()  # read again from storage at the next call
                raise
            self._pending = None

        await self._run(write)

    def _drop_manager(self) -> None:
        """Close the session (flushed, its lock released); read again at the next call."""
        manager, self._manager = self._manager, None
        self._forget()
        if manager is not None:
            try:
                manager.close()
            except Exception as exc:
                # After a failed write (its error already raised to the caller), or an
                # idle release whose flush failed: the next call reads what is stored.
                log.warning("closing %s: %s", self.path, exc)

    def _move_leaf(self, manager: SessionManager, parent: str | None, data: dict[str, Any]) -> None:
        if parent is None:
            manager.reset_leaf()
        else:
            manager.branch(parent)
        manager.append_custom_entry(MARKER_TYPE, data)
        if self.durable:
            manager.flush()

    async def pop_item(self) -> TResponseInputItem | None:
        """The latest item of the current branch, the leaf moved back before it (the
        item stays in the file); None when the branch has none."""

        def pop(manager: SessionManager) -> TResponseInputItem | None:
            entry_id = manager.get_leaf_id()
            while entry_id is not None:
                entry = manager.get_entry(entry_id)
                if entry is None:
                    return None
                item = _item_of(entry)
                if item is not None:
                    self._move_leaf(manager, entry.get("parentId"), {"op": "pop", "item": entry_id})
                    return cast("TResponseInputItem", _copy(item))
                entry_id = entry.get("parentId")
            return None

        return await self._run(pop, None)

    async def clear_session(self) -> None:
        """Start a new root: the session reads as empty, every entry stays in the file."""
        await self._run(lambda m: self._move_leaf(m, None, {"op": "clear"}), None)

    # ------------------------------------------------------------------ branches

    @staticmethod
    def _branch_of_entries(manager: SessionManager) -> dict[str, str]:
        """Each entry's branch: the name of the nearest branch marker above it ("main")."""
        names: dict[str, str] = {}
        for entry in manager.get_entries():
            marker = _marker(entry)
            entry_id = str(entry.get("id"))
            if marker is not None and marker.get("op") == "branch":
                names[entry_id] = str(marker.get("branch"))
            else:
                names[entry_id] = names.get(str(entry.get("parentId")), MAIN)
        return names

    def _current_branch(self, manager: SessionManager) -> str:
        leaf = manager.get_leaf_id()
        return self._branch_of_entries(manager).get(str(leaf), MAIN) if leaf else MAIN

    def _heads(self, manager: SessionManager) -> dict[str, str]:
        """Each branch's head: its entry written last."""
        heads: dict[str, str] = {}
        for entry_id, name in self._branch_of_entries(manager).items():
            heads[name] = entry_id  # entries are in file order
        return heads

    def _turns(
        self, manager: SessionManager, leaf: str | None = None
    ) -> list[tuple[Entry, dict[str, Any]]]:
        return [
            (e, i)
            for e in manager.get_branch(leaf)
            if (i := _item_of(e)) is not None and _is_user_turn(i)
        ]

    async def get_current_branch(self) -> str:
        """The name of the branch the leaf is on (`main` until a branch is made)."""
        return await self._run(self._current_branch, MAIN, read=True)

    async def get_conversation_turns(self) -> list[dict[str, Any]]:
        """The user turns of the current branch: `turn` (from 1), `content`, `entry_id`."""

        def turns(manager: SessionManager) -> list[dict[str, Any]]:
            from sessiontree.integrations._items import text_of

            return [
                {"turn": n, "content": text_of(item.get("content")), "entry_id": entry["id"]}
                for n, (entry, item) in enumerate(self._turns(manager), 1)
            ]

        return await self._run(turns, [], read=True)

    async def create_branch_from_turn(
        self, turn_number: int, branch_name: str | None = None
    ) -> str:
        """A new branch holding the current branch's items before user turn
        `turn_number`, made the current one; its name (ValueError for a turn that does
        not exist or a name already used)."""
        if branch_name is not None and not branch_name.strip():
            raise ValueError("Branch name cannot be empty")

        def create(manager: SessionManager) -> str:
            turns = self._turns(manager)
            if not 1 <= turn_number <= len(turns):
                raise ValueError(f"Turn {turn_number} does not contain a user message")
            used = set(self._heads(manager)) | {MAIN}
            name = branch_name or f"branch_from_turn_{turn_number}_{int(time.time() * 1000)}"
            if name in used:
                raise ValueError(f"Branch '{name}' already exists")
            parent = turns[turn_number - 1][0].get("parentId")
            self._move_leaf(manager, parent, {"op": "branch", "branch": name})
            return name

        return await self._run(create)

    async def switch_to_branch(self, branch_id: str) -> None:
        """Make `branch_id` current (its latest entry the leaf); ValueError if unknown."""

        def switch(manager: SessionManager) -> None:
            head = self._heads(manager).get(branch_id)
            if head is None:
                raise ValueError(f"Branch '{branch_id}' does not exist")
            self._move_leaf(manager, head, {"op": "switch", "branch": branch_id})

        await self._run(switch)

    async def list_branches(self) -> list[dict[str, Any]]:
        """Every branch: `branch_id`, `message_count` (items), `user_turns`,
        `is_current`, `head` (its latest entry's id)."""

        def branches(manager: SessionManager) -> list[dict[str, Any]]:
            current = self._current_branch(manager)
            out = []
            for name, head in self._heads(manager).items():
                items = [i for e in manager.get_branch(head) if (i := _item_of(e)) is not None]
                out.append(
                    {
                        "branch_id": name,
                        "message_count": len(items),
                        "user_turns": sum(1 for i in items if _is_user_turn(i)),
                        "is_current": name == current,
                        "head": head,
                    }
                )
            return out

        return await self._run(
            branches,
            [
                {
                    "branch_id": MAIN,
                    "message_count": 0,
                    "user_turns": 0,
                    "is_current": True,
                    "head": None,
                }
            ],
            read=True,
        )

    # ------------------------------------------------------------------ usage

    async def store_run_usage(self, result: RunResult) -> None:
        """Record the run's usage (`result.context_wrapper.usage`) at the leaf."""
        usage = result.context_wrapper.usage
        data = {
            "op": "usage",
            "requests": usage.requests,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
            "cached_tokens": getattr(usage.input_tokens_details, "cached_tokens", 0) or 0,
            "reasoning_tokens": getattr(usage.output_tokens_details, "reasoning_tokens", 0) or 0,
        }

        def record(manager: SessionManager) -> None:
            manager.append_custom_entry(MARKER_TYPE, data)
            if self.durable:
                manager.flush()

        await self._run(record)

    async def get_turn_usage(
        self, user_turn_number: int | None = None
    ) -> list[dict[str, Any]] | dict[str, Any]:
        """The usage recorded on the current branch per user turn (`user_turn_number`,
        `requests`, `input_tokens`, `output_tokens`, `total_tokens`, ...); one turn's
        when `user_turn_number` is given ({} when none was recorded)."""

        def per_turn(manager: SessionManager) -> list[dict[str, Any]] | dict[str, Any]:
            turns: dict[int, dict[str, Any]] = {}
            turn = 0
            for entry in manager.get_branch():
                item = _item_of(entry)
                if item is not None and _is_user_turn(item):
                    turn += 1
                marker = _marker(entry)
                if marker is not None and marker.get("op") == "usage" and turn > 0:
                    row = turns.setdefault(turn, {"user_turn_number": turn})
                    for key, value in marker.items():
                        if key != "op" and isinstance(value, int):
                            row[key] = row.get(key, 0) + value
            if user_turn_number is not None:
                return turns.get(user_turn_number, {})
            return [turns[t] for t in sorted(turns)]

        return await self._run(per_turn, {} if user_turn_number is not None else [], read=True)
