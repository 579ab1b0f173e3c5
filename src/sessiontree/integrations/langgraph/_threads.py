"""`SaverThreads`, the base of `SessionTreeSaver`: threads as sessions of the store.

A thread is found by its file name (`thread_file_key`), opened for reading (kept
while its file is unchanged, the least recently read let go past `_READERS`) or for
writing (its writer lock held until `close` or `release`), created in the
`/langgraph` project, listed from the store's listing, and appended to where its
checkpoints' entries hang. Copies a killed `copy_thread` left are removed here.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
import weakref
from typing import Any, Final

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol

from sessiontree.errors import InvalidStoreError, SessionTreeError
from sessiontree.format import session_file_name
from sessiontree.integrations.langgraph._thread_state import (
    LEAF_TYPE,
    PROJECT,
    THREAD_TYPE,
    WRITES_TYPE,
    ThreadState,
    add_writes,
    fold_entries,
    now_iso,
    thread_file_key,
    tip_of,
    writes_written,
)
from sessiontree.layout import get_default_session_dir
from sessiontree.storage import acquire_session_lock
from sessiontree.store import Store

__all__ = ["COPY_SUFFIX", "SaverThreads"]

_READERS: Final = 64
"""Threads a saver keeps open that it only reads (those it writes stay open)."""
COPY_SUFFIX: Final = ".copying"
"""The end of a `copy_thread` copy's name until it takes the target's (`<a thread's
file name>.<random>.copying`): no `*.jsonl`, so no listing shows it, nor any thread."""
_STALE_COPY_NS: Final = 10 * 60 * 10**9
"""A copy in progress this long unchanged, its writer's lock free, was left by a
process killed mid-copy: a saver opening the store (or `list_threads`) removes it."""


_SAVERS: Final[weakref.WeakSet[SaverThreads]] = weakref.WeakSet()


def _forked() -> None:
    """In a forked child, a saver's lock may be held by a thread the child does not
    have: each saver gets a new one (its threads' files are the storage's to refuse)."""
    for saver in list(_SAVERS):
        saver._lock = threading.RLock()


os.register_at_fork(after_in_child=_forked)


class SaverThreads(BaseCheckpointSaver[str]):
    """The saver's threads and their sessions (see the module doc); `SessionTreeSaver`
    is the class to use."""

    def __init__(
        self,
        location: str | os.PathLike[str] | None = None,
        *,
        serde: SerializerProtocol | None = None,
        store: Store | None = None,
        fsync: bool = False,
    ) -> None:
        super().__init__(serde=serde)
        self.fsync = fsync
        if store is not None and location is not None:
            raise InvalidStoreError("give a location or a store, not both")
        self.store = store if store is not None else Store(location)
        self._owns_store = store is None
        if self.store.read_only:
            raise InvalidStoreError(
                f"{self.store.location} is a {self.store.agent} store, which sessiontree only "
                "reads: checkpoints need an agent dir or a database"
            )
        self._dir = get_default_session_dir(PROJECT, self.store.agent_dir)
        self._lock = threading.RLock()
        self._threads: dict[str, ThreadState] = {}
        self._closed = False
        _SAVERS.add(self)
        self._remove_stale_copies()

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        """`<count, 12 digits>.<8 random hex digits>`: versions sort as strings, and a
        fork's versions never equal the original branch's (values are stored by version)."""
        if current is None:
            count = 0
        elif isinstance(current, int | float):
            count = int(current)
        else:
            count = int(str(current).split(".", 1)[0])
        return f"{count + 1:012d}.{secrets.token_hex(4)}"

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Flush every thread written, let go of their locks; close the store if it is
        the saver's own. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads, self._threads = list(self._threads.values()), {}
            errors: list[BaseException] = []
            for thread in threads:
                try:
                    if thread.early:
                        self._write_early(thread)
                    thread.manager.close()
                except BaseException as exc:  # close them all, raise the first
                    errors.append(exc)
            if self._owns_store:
                self.store.close()
            if errors:
                raise errors[0]

    def release(self, thread_id: str) -> None:
        """Flush a thread and let go of its writer lock (another saver may write it now)."""
        with self._lock:
            thread = self._threads.pop(thread_id, None)
            if thread is not None:
                try:
                    self._write_early(thread)
                finally:
                    thread.manager.close()

    def flush(self) -> None:
        """Make every write so far durable (fsync)."""
        with self._lock:
            for thread in self._threads.values():
                if thread.writable:
                    thread.manager.flush()

    # ------------------------------------------------------------------ finding threads

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the saver is closed")

    def _paths(self, thread_id: str) -> list[str]:
        storage = self.store.storage
        if not storage.exists(self._dir):
            return []
        return sorted(storage.list_files(self._dir, f"*_{thread_file_key(thread_id)}.jsonl"))

    def _stamp(self, path: str) -> tuple[int, int]:
        stat = self.store.storage.stat(path)
        return stat.size, stat.mtime_ns

    def _thread(self, thread_id: str, *, write: bool, create: bool = False) -> ThreadState | None:
        """The thread's state, read again when another writer changed its file; opened
        for writing (its lock taken) with `write`, created with `create`."""
        self._check_open()
        thread = self._threads.get(thread_id)
        if thread is not None:
            if thread.writable:
                return thread
            if not write:
                try:
                    if self._stamp(thread.path) == thread.stamp:
                        self._threads[thread_id] = self._threads.pop(thread_id)  # recent
                        return thread
                except FileNotFoundError:
                    pass
            thread.manager.close()
            del self._threads[thread_id]
        paths = self._paths(thread_id)
        if not paths:
            if not create:
                return None
            return self._create(thread_id)
        path = paths[0]  # (two savers that created it at once: the older file)
        if write:
            manager = self.store.session(path, breadcrumb=False)
        else:
            try:
                stamp = self._stamp(path)
                manager = self.store.session(path, read_only=True)
            except FileNotFoundError:
                return None
        thread = ThreadState(thread_id, path, manager, write)
        if not write:
            thread.stamp = stamp
            readers = [t for t in self._threads.values() if not t.writable]
            for old in readers[: max(0, len(readers) - _READERS + 1)]:
                del self._threads[old.thread_id]  # the least recently read first
                old.manager.close()
        entries = manager.get_entries()
        fold_entries(thread, entries)
        thread.tip = tip_of(entries)
        if write and not thread.root:
            manager.reset_leaf()
            thread.root = manager.append_custom_entry(THREAD_TYPE, {"thread_id": thread_id})
            thread.tip = thread.root
        self._threads[thread_id] = thread
        return thread

    def _create(self, thread_id: str) -> ThreadState:
        path = os.path.join(self._dir, session_file_name(now_iso(), thread_file_key(thread_id)))
        storage = self.store.storage
        storage.ensure_dir(self._dir)
        manager = self.store.session(path, breadcrumb=False)
        try:
            manager.move_to(PROJECT)  # the header's cwd (the file stays where it is)
            manager.set_session_name(thread_id, "langgraph")
            root = manager.append_custom_entry(THREAD_TYPE, {"thread_id": thread_id})
        except BaseException:
            manager.close()
            raise
        first = self._paths(thread_id)[0]
        if first != path:
            # Another saver created the thread at the same moment: the older file is the
            # thread's; ours (a header and the thread entry) goes, and theirs is opened
            # (its lock: SessionLockError while they write it).
            manager.close()
            self.store.delete(path, force=True)
            found = self._thread(thread_id, write=True)
            assert found is not None
            return found
        thread = ThreadState(thread_id, path, manager, True)
        thread.root = thread.tip = root
        self._threads[thread_id] = thread
        return thread

    def _remove_stale_copies(self) -> None:
        """Remove the copies `copy_thread` left in progress (its process killed before
        the rename), and the temp files of their atomic writes: those unchanged for 10
        minutes whose copy's writer lock is free. Never a session (`*.jsonl`), never a
        copy being written (its writer holds the lock while it writes, and renames it
        at once after); a failure leaves them."""
        storage = self.store.storage
        try:
            if not storage.exists(self._dir):
                return
            leftovers = storage.list_files(self._dir, f"*.jsonl.*{COPY_SUFFIX}")
            leftovers += storage.list_files(self._dir, f".*.jsonl.*{COPY_SUFFIX}.*.tmp")
            # what a rewrite killed at its swap leaves beside the copy: oh-my-pi's publish
            # lock file and the copy's second name (kept so no appended line is lost)
            leftovers += storage.list_files(self._dir, f".*.jsonl.*{COPY_SUFFIX}.lock")
            leftovers += storage.list_files(self._dir, f"*.jsonl.*{COPY_SUFFIX}.conflict-*")
        except (OSError, SessionTreeError):
            return
        for path in leftovers:
            name = os.path.basename(path)
            if not name.endswith(COPY_SUFFIX):  # the copy's temp, lock or second name
                name = name.lstrip(".").rsplit(COPY_SUFFIX, 1)[0] + COPY_SUFFIX
            try:
                if time.time_ns() - storage.stat(path).mtime_ns < _STALE_COPY_NS:
                    continue
                # SessionLockError: the copy's writer is alive.
                lock = acquire_session_lock(storage, os.path.join(self._dir, name))
            except (OSError, SessionTreeError):
                continue
            try:
                storage.unlink(path)
            except (OSError, SessionTreeError):
                pass
            finally:
                if lock is not None:
                    lock.release()

    def list_threads(self) -> list[str]:
        """Every thread of the store, newest first (from the store's listing of the
        `/langgraph` project: the sessions' names, checked against their file names);
        copies left in progress by a killed `copy_thread` are removed first."""
        self._check_open()
        self._remove_stale_copies()
        found: list[str] = []
        for info in self.store.list(PROJECT):
            name = info.title
            stem = os.path.basename(info.path)[: -len(".jsonl")]
            if name is not None and stem.endswith("_" + thread_file_key(name)):
                found.append(name)
                continue
            thread_id = self._thread_id_of(info.path)  # a name too long for the title
            if thread_id is not None:
                found.append(thread_id)
        return list(dict.fromkeys(found))

    def _thread_id_of(self, path: str) -> str | None:
        try:
            with self.store.session(path, read_only=True) as manager:
                for entry in manager.get_entries():
                    if entry.get("type") == "custom" and entry.get("customType") == THREAD_TYPE:
                        data = entry.get("data")
                        thread_id = data.get("thread_id") if isinstance(data, dict) else None
                        key = "_" + thread_file_key(str(thread_id)) + ".jsonl"
                        # Only the file the thread's name leads to is the thread's.
                        if isinstance(thread_id, str) and path.endswith(key):
                            return thread_id
                        return None
        except (OSError, ValueError):
            return None
        return None

    def session_path(self, thread_id: str) -> str | None:
        """The path of the thread's session (what `sessiontree show` takes), None when
        the thread has none."""
        with self._lock:
            paths = self._paths(thread_id)
            return paths[0] if paths else None

    def _drop(self, thread: ThreadState) -> None:
        """Forget a thread whose manager failed (its error was raised already)."""
        if self._threads.get(thread.thread_id) is thread:
            del self._threads[thread.thread_id]
        try:
            thread.manager.close()
        except Exception:  # the failure the caller is raising
            pass

    def _reopen(self, thread: ThreadState) -> None:
        """A write to the thread failed (a full disk): its manager will not write
        again, so the thread is opened again from its file (which has every entry but
        the failed one), keeping the writes held for checkpoints not written yet; when
        that fails too, it is read again on its next use."""
        self._drop(thread)
        try:
            fresh = self._thread(thread.thread_id, write=True)
        except Exception:  # the failure the caller is raising
            return
        if fresh is not None:
            fresh.early = thread.early
            for held in fresh.early.values():
                for data in held:
                    add_writes(fresh, None, data)

    # ------------------------------------------------------------------ appending

    def _append_writes(self, thread: ThreadState, parent: str, data: dict[str, Any]) -> None:
        thread.manager.branch(parent)
        writes_written(thread, thread.manager.append_custom_entry(WRITES_TYPE, data), data)

    def _write_early(self, thread: ThreadState) -> None:
        """Writes whose checkpoint never came: under the thread's root, not lost (the
        leaf led back to the newest checkpoint after them)."""
        if not thread.early:
            return
        for key in list(thread.early):
            for data in thread.early.pop(key):
                self._append_writes(thread, thread.root, data)
        self._lead_back(thread)

    def _lead_back(self, thread: ThreadState) -> None:
        """After writes off the newest checkpoint's path: one leaf entry under the
        thread's tip, so the file's last entry (the leaf every reader opens at) is on
        that path again. Not part of any context (a custom entry)."""
        manager = thread.manager
        if thread.tip and manager.get_leaf_id() != thread.tip:
            manager.branch(thread.tip)
            manager.append_custom_entry(LEAF_TYPE)
