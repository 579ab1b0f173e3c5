"""A third-party storage with exactly the API contract's ten methods.

It supports every operation on one session (create, open with migration, append,
flush, rewrite, rename, fork, context, and listing one directory), with the
fallbacks `sessiontree.storage._base` documents; store-wide operations refuse with
`MissingCapabilityError`, naming what is missing. Such a storage has no writer lock.
"""

from __future__ import annotations

import posixpath
from datetime import UTC, datetime

import pytest

from sessiontree import (
    MissingCapabilityError,
    SessionManager,
    SessionStorage,
    SessionWriteConflictError,
    StorageStat,
)
from sessiontree.layout import StoreParts, store_parts
from sessiontree.maintenance import collect_garbage, delete_session
from sessiontree.storage import (
    AtomicWrites,
    ChunkedReads,
    DirectoryTree,
    HostFilesystem,
    LockingStorage,
    RootedStorage,
)
from tests.helpers import assistant, user


class _Writer:
    def __init__(self, store: MinimalStorage, path: str, flags: str) -> None:
        self._store, self._path = store, path
        if flags == "w" or path not in store.files:
            store.files[path] = ""

    def write_line(self, line: str) -> None:
        self._store.files[self._path] += line

    def flush(self) -> None:
        pass

    def fsync(self) -> None:
        pass

    def close(self) -> None:
        pass

    def get_error(self) -> BaseException | None:
        return None


class MinimalStorage:
    """Exactly `SessionStorage`: ten methods, nothing else."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}
        self.dirs: set[str] = {"/"}

    def ensure_dir(self, path: str) -> None:
        while path not in self.dirs:
            self.dirs.add(path)
            path = posixpath.dirname(path)

    def exists(self, path: str) -> bool:
        return path in self.files or path in self.dirs

    def write_text(self, path: str, content: str) -> None:
        if posixpath.dirname(path) not in self.dirs:
            raise FileNotFoundError(path)
        self.files[path] = content

    def stat(self, path: str) -> StorageStat:
        if path not in self.files:
            raise FileNotFoundError(path)
        now = datetime.now(UTC)
        return StorageStat(len(self.files[path].encode()), now, now.timestamp() * 1000)

    def list_files(self, dir: str, pattern: str) -> list[str]:
        import fnmatch

        return sorted(
            p
            for p in self.files
            if posixpath.dirname(p) == dir and fnmatch.fnmatch(posixpath.basename(p), pattern)
        )

    def read_text(self, path: str) -> str:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]

    def read_text_prefix(self, path: str, max_bytes: int) -> str:
        return self.read_text(path).encode()[:max_bytes].decode("utf-8", "ignore")

    def rename(self, path: str, new_path: str) -> None:
        self.files[new_path] = self.files.pop(path)

    def unlink(self, path: str) -> None:
        del self.files[path]

    def open_writer(self, path: str, flags: str = "a") -> _Writer:
        return _Writer(self, path, flags)


V1 = (
    '{"type":"session","id":"0cb0000000000001","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}\n'
    '{"type":"message","timestamp":"2026-01-01T00:00:01.000Z",'
    '"message":{"role":"user","content":"old","timestamp":1}}\n'
)


def test_it_is_exactly_the_contract() -> None:
    storage = MinimalStorage()
    assert isinstance(storage, SessionStorage)
    for capability in (
        ChunkedReads,
        AtomicWrites,
        DirectoryTree,
        LockingStorage,
        HostFilesystem,
        RootedStorage,
    ):
        assert not isinstance(storage, capability)
    assert StoreParts(storage, "/agent").root == "/agent"  # no root of its own: the agent dir's


def test_every_operation_on_one_session_works(agent_dir: object) -> None:
    storage = MinimalStorage()
    sm = SessionManager.create("/p", "/store/--p--", storage=storage)
    sm.append_message(user("q"))
    sm.append_message(assistant("a"))  # the first write
    for i in range(3):
        sm.append_message(user(f"more {i}"))
    sm.flush()
    assert sm.set_session_name("Named", "user")  # a rewrite
    first = sm.get_entries()[0]["id"]
    sm.branch(first)
    sm.append_message(assistant("on a branch"))
    assert next(m["content"] for m in sm.build_session_context().messages) == "q"
    result = sm.fork()
    assert result is not None
    old, new = result
    sm.close()
    for path in (old, new):
        with SessionManager.open(path, storage=storage, read_only=True) as again:
            assert again.get_session_name() == "Named"
            assert len(again.get_entries()) == 6
    listed = SessionManager.list("/p", session_dir="/store/--p--", storage=storage)
    assert {s.path for s in listed} == {old, new}
    # Opening an old file migrates it (rewriting it through write_text).
    storage.files["/store/--p--/v1.jsonl"] = V1
    with SessionManager.open("/store/--p--/v1.jsonl", storage=storage) as migrated:
        assert migrated.get_entries()[0]["parentId"] is None
    assert '"version":3' in storage.files["/store/--p--/v1.jsonl"]


def test_store_wide_operations_name_the_missing_capability(agent_dir: object) -> None:
    storage = MinimalStorage()
    sm = SessionManager.create("/p", "/store/sessions/--p--", storage=storage)
    sm.append_message(assistant("a"))
    path = sm.get_session_file() or ""
    with pytest.raises(MissingCapabilityError, match="move_to") as info:
        sm.move_to("/elsewhere")
    assert "DirectoryTree" in str(info.value)
    sm.close()
    with pytest.raises(MissingCapabilityError, match="DirectoryTree"):
        SessionManager.list_all(storage=storage, agent_dir="/store")
    with pytest.raises(MissingCapabilityError, match="rm"):
        delete_session(path, store_parts(storage, "/store"))
    with pytest.raises(MissingCapabilityError):
        collect_garbage(store_parts(storage, "/store"), delete=True)
    assert path in storage.files  # nothing was deleted


def test_it_has_no_writer_lock_but_the_guard_still_sees_a_second_writer(
    agent_dir: object,
) -> None:
    storage = MinimalStorage()
    sm = SessionManager.create("/p", "/store/--p--", storage=storage)
    sm.append_message(assistant("a"))
    second = SessionManager.open(sm.get_session_file() or "", storage=storage)  # not refused
    second.append_message(user("from the second writer"))
    second.close()
    with pytest.raises(SessionWriteConflictError) as info:
        sm.close()  # the size changed behind the first writer: its copy is saved
    assert info.value.saved_to in storage.files
