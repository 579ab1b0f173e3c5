"""The Claude Agent SDK's `SessionStore` on sessiontree: `SessionTreeStore(location)`.

One line in an SDK program::

    options = ClaudeAgentOptions(session_store=SessionTreeStore("~/agents/claude"))

Sessions are kept in Claude Code's own layout under the store's root (an agent dir, or
a PostgreSQL database's root): `<root>/projects/<project_key>/<session_id>.jsonl`, a
subagent's transcript (`subpath`) at `<root>/projects/<project_key>/<session_id>/
<subpath>.jsonl`, one entry a line, as the SDK gave it (serialized as JavaScript's
`JSON.stringify` would). So `CLAUDE_CONFIG_DIR=<root> claude --resume` and
`sessiontree --agent claude --store <root> list/show/search/usage/serve` read them.

What a write gets:
- one writer per session across processes (and hosts, on PostgreSQL): the session's
  writer lock is taken around every batch (waiting while another writer holds it);
- `uuid` is the idempotency key: an entry whose `uuid` the transcript already holds
  (a retried batch, a batch sent twice) is not written again; entries without one are
  always appended;
- whole lines only: a batch is one write of complete lines, then a durable flush
  (fsync; a synchronous commit on PostgreSQL); a write that fails leaves no partial
  line (the file writer cuts what it wrote), and a file another program left ending
  in a partial line gets our lines after a newline;
- what another program appended is seen: the uuids are read again from the end this
  process last knew, and from the start when the file was replaced or shrank.

Summaries (`list_session_summaries`) are the SDK's own `fold_session_summary` over the
transcript, folded again only over what was appended since the last call (kept per
process), stamped with the transcript's modification time: nothing is written besides
the transcript, which stays exactly Claude Code's file.

Names: a `project_key`, `session_id` or `subpath` component that is not a safe file
name (empty, `.`, `..`, a `/` or NUL inside, a leading `.`, too long) raises ValueError
before any path is made; an entry that is not a JSON object with a string `type`, or
holds a value JSON cannot, raises TypeError and nothing of its batch is written.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import orjson

from sessiontree.integrations._common import (
    check_name,
    missing_extra,
    open_location,
    wait_for_lock,
)

try:
    from claude_agent_sdk import SessionStore, fold_session_summary
    from claude_agent_sdk.types import (
        SessionKey,
        SessionListSubkeysKey,
        SessionStoreEntry,
        SessionStoreListEntry,
        SessionSummaryEntry,
    )
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra(__name__, "claude-agent-sdk", "the Claude Agent SDK") from exc

from sessiontree.errors import SessionTreeError
from sessiontree.format import loads_object, serialize_entry_bytes
from sessiontree.storage import (
    SessionStorage,
    WriterLock,
    directory_tree,
    read_chunks,
    read_range,
    verify_lock,
)
from sessiontree.store import Store

__all__ = ["SessionTreeStore"]

_IDLE_S = 0.1
"""How long a writer lock is kept after a batch for the next one (the SDK sends a batch
about every 100 ms during a turn): taking it costs more than the write of a batch."""


@dataclass(slots=True)
class _Known:
    """What this process knows of one transcript: how far it has read it (`size`
    bytes of the file whose identity is `ino`), the uuids in it, whether it ends on a
    line boundary, and the summary folded so far (main transcripts)."""

    ino: int = 0
    size: int = 0
    uuids: set[str] = field(default_factory=set)
    whole: bool = True
    summary: SessionSummaryEntry | None = None
    summary_size: int = 0


def _lines(data: bytes) -> Iterator[dict[str, Any]]:
    """The JSON objects of the lines (malformed lines and other values skipped)."""
    for raw in data.split(b"\n"):
        try:
            obj = orjson.loads(raw)  # the common case, without a call in between
        except orjson.JSONDecodeError:
            if not raw.strip():
                continue
            obj = loads_object(raw)  # what orjson refuses and JavaScript reads
        if type(obj) is dict:
            yield obj


def _encode(entries: list[SessionStoreEntry]) -> list[tuple[str | None, bytes]]:
    """Each entry's uuid (None: none) and line, every entry checked first."""
    out: list[tuple[str | None, bytes]] = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
            raise TypeError("a session store entry is a JSON object with a string 'type'")
        uuid = entry.get("uuid")
        out.append((uuid if isinstance(uuid, str) else None, serialize_entry_bytes(entry)))
    return out


class SessionTreeStore(SessionStore):
    """A Claude Agent SDK `SessionStore` (every optional method) on a sessiontree store.

    `location`: an agent dir (a path or `file:` URL), a `postgresql://` URL (its root,
    the default agent dir, holds `projects/`), or None for the default store, as
    `sessiontree --store` takes it. `store`: a `sessiontree.Store` of your own
    instead (not closed by `close()`).
    """

    def __init__(
        self, location: str | os.PathLike[str] | None = None, *, store: Store | None = None
    ) -> None:
        if store is not None and location is not None:
            raise ValueError("give a location or a store, not both")
        self._owns_store = store is None
        self._store = store if store is not None else open_location(location)
        self.root = self._store.agent_dir
        """The directory that holds `projects/` (Claude Code's config dir layout)."""
        self._storage: SessionStorage = self._store.storage
        self._known: dict[str, _Known] = {}
        self._mutex = threading.Lock()
        self._path_locks: dict[str, threading.Lock] = {}
        # Writer locks kept between batches, each released once idle for _IDLE_S.
        self._held: dict[str, tuple[WriterLock, threading.Timer]] = {}

    def close(self) -> None:
        """Release the writer locks still held, and the store (its database
        connections) when it is this object's."""
        for path in list(self._held):
            with self._path_lock(path):
                self._let_go(path)
        if self._owns_store:
            self._store.close()

    def __repr__(self) -> str:
        return f"SessionTreeStore({self._store.location!r})"

    # ------------------------------------------------------------------ paths

    def _project_dir(self, project_key: object) -> str:
        return os.path.join(self.root, "projects", check_name(project_key, "project_key"))

    def _session_dir(self, key: SessionListSubkeysKey | SessionKey) -> str:
        sid = check_name(key["session_id"], "session_id", suffix=".jsonl")
        return os.path.join(self._project_dir(key["project_key"]), sid)

    def path_of(self, key: SessionKey) -> str:
        """The transcript's path (raises ValueError for a name that is not safe)."""
        subpath = key.get("subpath")
        base = self._session_dir(key)
        if not subpath:
            return base + ".jsonl"
        if not isinstance(subpath, str):
            raise ValueError("subpath must be a string")
        parts = subpath.split("/")
        for i, part in enumerate(parts):
            check_name(part, "subpath component", suffix=".jsonl" if i == len(parts) - 1 else "")
        return os.path.join(base, *parts[:-1], parts[-1] + ".jsonl")

    def _path_lock(self, path: str) -> threading.Lock:
        with self._mutex:
            lock = self._path_locks.get(path)
            if lock is None:
                lock = self._path_locks[path] = threading.Lock()
            return lock

    # ------------------------------------------------------------------ writing

    def _take(self, path: str) -> WriterLock | None:
        """The session's writer lock: the one kept from the last batch while it is still
        ours, else taken (waiting while another writer holds it). Under the path lock."""
        held = self._held.pop(path, None)
        if held is not None:
            lock, timer = held
            timer.cancel()
            try:
                verify_lock(lock)
                return lock
            except SessionTreeError:
                lock.release()
        return wait_for_lock(self._storage, path)

    def _keep(self, path: str, lock: WriterLock | None) -> None:
        """Keep the lock for the next batch; let go of it once idle for `_IDLE_S`."""
        if lock is None:
            return
        timer = threading.Timer(_IDLE_S, self._idle, (path, lock))
        timer.daemon = True
        self._held[path] = (lock, timer)
        timer.start()

    def _idle(self, path: str, lock: WriterLock) -> None:
        with self._path_lock(path):
            held = self._held.get(path)
            if held is not None and held[0] is lock:
                self._let_go(path)

    def _let_go(self, path: str) -> None:
        held = self._held.pop(path, None)
        if held is not None:
            held[1].cancel()
            held[0].release()

    def _catch_up(self, path: str) -> _Known:
        """What this process knows of `path`, brought up to the file as it is now."""
        known = self._known.get(path)
        try:
            st = self._storage.stat(path)
        except FileNotFoundError:
            known = self._known[path] = _Known()
            return known
        if known is None or st.ino != known.ino or st.size < known.size:
            known = self._known[path] = _Known(ino=st.ino)
        if st.size > known.size:
            data = read_range(self._storage, path, known.size, st.size - known.size)
            for obj in _lines(data):
                uuid = obj.get("uuid")
                if isinstance(uuid, str):
                    known.uuids.add(uuid)
            known.size += len(data)
            if data:
                known.whole = data.endswith(b"\n")
        return known

    def _append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        path = self.path_of(key)
        encoded = _encode(entries)
        if not encoded:
            return
        with self._path_lock(path):
            if path not in self._held:
                self._storage.ensure_dir(os.path.dirname(path))
            lock = self._take(path)
            try:
                known = self._catch_up(path)
                batch: list[bytes] = [] if known.whole else [b""]
                fresh: set[str] = set()
                for uuid, line in encoded:
                    if uuid is not None:
                        if uuid in known.uuids or uuid in fresh:
                            continue
                        fresh.add(uuid)
                    batch.append(line)
                if len(batch) == (0 if known.whole else 1):
                    return
                data = b"\n".join(batch) + b"\n"
                writer = self._storage.open_writer(path, "a")
                try:
                    write_bytes = getattr(writer, "write_bytes", None)
                    if write_bytes is not None:
                        write_bytes(data)
                    else:
                        writer.write_line(data.decode("utf-8"))
                    writer.fsync()
                finally:
                    writer.close()
                st = self._storage.stat(path)
                known.uuids |= fresh
                known.whole = True
                if st.ino == known.ino or known.size == 0:
                    known.ino = st.ino
                    known.size += len(data)
            except BaseException:
                if lock is not None:
                    lock.release()
                raise
            self._keep(path, lock)

    async def append(self, key: SessionKey, entries: list[SessionStoreEntry]) -> None:
        """Append a batch (whole lines, durable, entries with a known uuid skipped)."""
        if not entries:
            self.path_of(key)  # a bad key is refused even with nothing to write
            return
        await asyncio.to_thread(self._append, key, entries)

    # ------------------------------------------------------------------ reading

    def _read(self, path: str) -> bytes | None:
        try:
            return b"".join(read_chunks(self._storage, path))
        except (FileNotFoundError, IsADirectoryError):
            return None

    def _load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        data = self._read(self.path_of(key))
        if data is None:
            return None
        return cast("list[SessionStoreEntry]", list(_lines(data)))

    async def load(self, key: SessionKey) -> list[SessionStoreEntry] | None:
        """Every entry of the transcript in file order; None when it was never written."""
        return await asyncio.to_thread(self._load, key)

    def _list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        out: list[SessionStoreListEntry] = []
        for path in self._storage.list_files(self._project_dir(project_key), "*.jsonl"):
            try:
                st = self._storage.stat(path)
            except FileNotFoundError:
                continue
            out.append({"session_id": os.path.basename(path)[:-6], "mtime": int(st.mtime_ms)})
        return out

    async def list_sessions(self, project_key: str) -> list[SessionStoreListEntry]:
        """The project's main transcripts with their modification times (epoch ms)."""
        return await asyncio.to_thread(self._list_sessions, project_key)

    def _summary(self, project_key: str, session_id: str, path: str) -> SessionSummaryEntry | None:
        key: SessionKey = {"project_key": project_key, "session_id": session_id}
        with self._path_lock(path):
            try:
                st = self._storage.stat(path)
            except FileNotFoundError:
                return None
            known = self._known.get(path)
            if known is None or known.ino != st.ino or st.size < known.summary_size:
                known = self._known[path] = _Known(ino=st.ino)
            if known.summary is None or st.size > known.summary_size:
                data = read_range(
                    self._storage, path, known.summary_size, st.size - known.summary_size
                )
                cut = data.rfind(b"\n") + 1  # whole lines only; the rest next time
                new = cast("list[SessionStoreEntry]", list(_lines(data[:cut])))
                known.summary = fold_session_summary(known.summary, key, new)
                known.summary_size += cut
            summary = dict(known.summary)
            summary["mtime"] = int(st.mtime_ms)
            return cast("SessionSummaryEntry", summary)

    def _list_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        out: list[SessionSummaryEntry] = []
        for path in self._storage.list_files(self._project_dir(project_key), "*.jsonl"):
            summary = self._summary(project_key, os.path.basename(path)[:-6], path)
            if summary is not None:
                out.append(summary)
        return out

    async def list_session_summaries(self, project_key: str) -> list[SessionSummaryEntry]:
        """The SDK's summary of every main transcript of the project."""
        return await asyncio.to_thread(self._list_summaries, project_key)

    def _walk(self, directory: str, prefix: str) -> Iterator[str]:
        for path in self._storage.list_files(directory, "*.jsonl"):
            yield prefix + os.path.basename(path)[:-6]
        for sub in directory_tree(self._storage, "list_subkeys").list_dirs(directory):
            yield from self._walk(sub, prefix + os.path.basename(sub) + "/")

    async def list_subkeys(self, key: SessionListSubkeysKey) -> list[str]:
        """Every subpath with a transcript under the session."""
        directory = self._session_dir(key)
        return await asyncio.to_thread(lambda: sorted(self._walk(directory, "")))

    # ------------------------------------------------------------------ deleting

    def _delete(self, key: SessionKey) -> None:
        path = self.path_of(key)
        with self._path_lock(path):
            lock = self._take(path) if self._storage.exists(path) else None
            try:
                try:
                    self._storage.unlink(path)
                except FileNotFoundError:
                    pass
                self._known.pop(path, None)
                if not key.get("subpath"):
                    directory = self._session_dir(key)
                    for sub in [p for p in self._held if p.startswith(directory + os.sep)]:
                        with self._path_lock(sub):
                            self._let_go(sub)
                    directory_tree(self._storage, "delete").remove_tree(directory)
                    for known in [p for p in self._known if p.startswith(directory + os.sep)]:
                        self._known.pop(known, None)
            finally:
                if lock is not None:
                    lock.release()

    async def delete(self, key: SessionKey) -> None:
        """Delete a transcript; a main one takes its subagents' with it."""
        await asyncio.to_thread(self._delete, key)
