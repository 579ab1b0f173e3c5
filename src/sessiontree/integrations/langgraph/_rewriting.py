"""`SaverRewriting`: threads deleted, rewritten without some checkpoints, copied.

`delete_thread` removes the thread's file; `delete_for_runs` and `prune` rewrite it
atomically without what they remove (what a kept checkpoint still needs moved into
it first); `copy_thread` writes the copy whole under a name no listing shows, then
gives it the target's.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from typing import Any

from sessiontree.format import session_file_name
from sessiontree.integrations.langgraph._reading import SaverReading
from sessiontree.integrations.langgraph._thread_state import (
    THREAD_TYPE,
    ThreadState,
    add_writes,
    fold_entries,
    is_leaf_marker,
    now_iso,
    thread_file_key,
    tip_of,
    version_key,
)
from sessiontree.integrations.langgraph._threads import COPY_SUFFIX

__all__ = ["SaverRewriting"]


class SaverRewriting(SaverReading):
    """Removing and copying threads (see the module doc)."""

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's session (every namespace, every write), as `sessiontree
        rm` does; another thread is not touched."""
        with self._lock:
            self._check_open()
            thread = self._threads.pop(thread_id, None)
            if thread is not None:
                thread.manager.close()
            for path in self._paths(thread_id):
                self.store.delete(path, force=True)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata `run_id` is one of `run_ids` (and their
        writes), in every thread: each thread's file rewritten without them."""
        wanted = set(run_ids)
        if not wanted:
            return
        with self._lock:
            self._check_open()
            for thread_id in self.list_threads():
                thread = self._thread(thread_id, write=False)
                if thread is None:
                    continue
                doomed = [
                    r
                    for r in thread.checkpoints.values()
                    if self._decode(r.data["metadata"]).get("run_id") in wanted
                ]
                if doomed:
                    thread = self._thread(thread_id, write=True)
                    assert thread is not None
                    self._remove(thread, {(r.ns, r.id) for r in doomed})

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`keep_latest`: keep each namespace's latest checkpoint of each thread (with its
        writes and every value it needs), rewriting the file without the rest;
        `delete`: delete the threads."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: keep_latest or delete")
        with self._lock:
            self._check_open()
            for thread_id in dict.fromkeys(thread_ids):
                if strategy == "delete":
                    self.delete_thread(thread_id)
                    continue
                if not self._paths(thread_id):
                    continue
                thread = self._thread(thread_id, write=True)
                assert thread is not None
                keep = {(ns, cid) for ns, cid in thread.latest.items()}
                self._remove(thread, {k for k in thread.checkpoints if k not in keep})

    def _remove(self, thread: ThreadState, doomed: set[tuple[str, str]]) -> None:
        """Rewrite the thread's file without the checkpoints `doomed`, their writes and
        the messages no kept checkpoint comes after; a value a kept checkpoint needs
        that only a removed one held is moved into the kept one first."""
        if not doomed:
            return
        manager = thread.manager
        entries = manager.get_entries()
        removed_ids: set[str] = set()
        for doomed_key in doomed:
            removed_ids.add(thread.checkpoints[doomed_key].entry)
            removed_ids.update(thread.write_entries.get(doomed_key, ()))
        # Values: walk the kept checkpoints in file order, each given what it needs.
        by_entry = {r.entry: r for r in thread.checkpoints.values()}
        available: set[tuple[str, str, str]] = set()
        replacements: dict[str, dict[str, Any]] = {}
        for entry in entries:
            found = by_entry.get(str(entry.get("id")))
            if found is None or found.entry in removed_ids:
                continue
            record = found
            own = dict(record.data.get("values") or {})
            changed = False
            for channel, stored in list(own.items()):
                key = (record.ns, channel, version_key(stored.get("v")))
                if (
                    stored.get("t") == "list+"
                    and (record.ns, channel, version_key(stored.get("base"))) not in available
                ):
                    own[channel] = self._flat(thread, key)
                    changed = True
                available.add(key)
            for channel, version in self._versions(record).items():
                key = (record.ns, channel, version_key(version))
                if key not in available and key in thread.values:
                    own[channel] = self._flat(thread, key)
                    available.add(key)
                    changed = True
            data = {**record.data, "values": own}
            if record.parent is not None and (record.ns, record.parent) in doomed:
                # Its parent goes: what a DeltaChannel rebuilds from the ancestors (their
                # writes back to a stored value) is kept in it.
                history = self._history_forms(thread, record, self._absent(thread, record))
                if history:
                    data["history"] = {**(record.data.get("history") or {}), **history}
                    changed = True
            if changed:
                replacements[record.entry] = {**entry, "data": data}
        # Messages: kept where a kept entry comes after them on their branch.
        parents = {str(e.get("id")): e.get("parentId") for e in entries}
        needed: set[str] = set()
        for entry in entries:
            entry_id = str(entry.get("id"))
            if entry.get("type") == "message" or entry_id in removed_ids:
                continue
            if is_leaf_marker(entry):
                continue  # it keeps no message (it goes, or follows its parent up)
            current: Any = parents.get(entry_id)
            while isinstance(current, str) and current not in needed:
                needed.add(current)
                current = parents.get(current)
        for entry in entries:
            entry_id = str(entry.get("id"))
            if entry.get("type") == "message" and entry_id not in needed:
                removed_ids.add(entry_id)
        # Leaf entries: only one that ends the rewritten file stays (what it points at
        # gone, it points at the nearest kept ancestor: `remove_entries`' rule).
        kept = [e for e in entries if str(e.get("id")) not in removed_ids]
        for entry in kept[:-1] if kept and is_leaf_marker(kept[-1]) else kept:
            if is_leaf_marker(entry):
                removed_ids.add(str(entry.get("id")))
        try:
            manager.remove_entries(removed_ids, replace=replacements)
        except BaseException:
            self._drop(thread)  # read again from the file (unchanged) on the next use
            raise
        # Read the rewritten file's entries again: positions and homes changed.
        fresh = ThreadState(thread.thread_id, thread.path, manager, thread.writable)
        rewritten = manager.get_entries()
        fold_entries(fresh, rewritten)
        fresh.tip = tip_of(rewritten)
        fresh.early = {k: v for k, v in thread.early.items() if k not in doomed}
        for held in fresh.early.values():
            for data in held:
                add_writes(fresh, None, data)
        self._threads[thread.thread_id] = fresh

    # ------------------------------------------------------------------ copying

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread (every namespace, checkpoint, write and message) to another
        thread id: a new session whose header names the source's file (a fork). The
        copy is written whole first, under a name no listing shows (`….copying`), and
        takes a name of the target's (a failure on the way: the copy goes, the target
        stays; a process killed on the way leaves that file alone, which a saver opening
        the store removes once it is 10 minutes old and its lock free); then the
        target's old session, if it has one, is deleted (`SessionLockError` while
        another saver writes it: the copy goes, the target stays). A thread copied onto
        itself is left as it is."""
        if source_thread_id == target_thread_id:
            return
        with self._lock:
            self._check_open()
            source = self._thread(source_thread_id, write=False)
            if source is None:
                return
            key = thread_file_key(target_thread_id)
            # Written under a name no listing shows (a process killed before the rename
            # leaves no session: the next saver removes the copy, see COPY_SUFFIX).
            in_progress = os.path.join(
                self._dir,
                f"{session_file_name(now_iso(), key)}.{secrets.token_hex(4)}{COPY_SUFFIX}",
            )
            copy = source.manager.persist_copy(
                self._dir,
                self.store.storage,
                breadcrumb=False,
                parent_session=source.path,
                agent_dir=self.store.agent_dir,
                path=in_progress,
            )
            written = copy.get_session_file()
            assert written is not None
            old = self._paths(target_thread_id)
            path = written
            try:
                # The copy names its thread before it takes the target's place (under
                # a name of the target's, newer than the old session's: until that
                # goes, the thread is the old one), so no step leaves a thread whose
                # file and name disagree, nor a copy no thread leads to.
                for entry in copy.get_entries():
                    if entry.get("type") == "custom" and entry.get("customType") == THREAD_TYPE:
                        renamed = {**entry, "data": {"thread_id": target_thread_id}}
                        copy.remove_entries((), replace={str(entry["id"]): renamed})
                        break
                copy.set_session_name(target_thread_id, "langgraph")
                copy.close()
                path = os.path.join(self._dir, session_file_name(now_iso(), key))
                while old and path <= old[-1]:  # (the old one made this millisecond)
                    path = os.path.join(self._dir, session_file_name(now_iso(), key))
                self.store.storage.rename(written, path)
            except BaseException:
                copy.close()
                try:
                    self.store.storage.unlink(written)
                except FileNotFoundError:
                    pass
                raise
            try:
                held = self._threads.pop(target_thread_id, None)
                if held is not None:
                    held.manager.close()
                for each in old:
                    self.store.delete(each, force=True)
            except BaseException:
                self.store.delete(path, force=True)
                raise
