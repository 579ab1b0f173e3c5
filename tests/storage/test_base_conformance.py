"""One conformance suite for every `SessionStorage` backend.

Backends join by adding a factory to `STORAGE_FACTORIES`; the factory gets the
test's tmp_path (real-file backends use it, others may ignore it).
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat as stat_mod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC
from pathlib import Path

import pytest

from sessiontree import InvalidBlobRefError, SessionLockError, serialize_entry
from sessiontree.storage import (
    BlobBackedStorage,
    CollectableBlobStore,
    DeferredSync,
    FileSessionStorage,
    LockingStorage,
    MemorySessionStorage,
    SessionIndexStorage,
    SessionStorage,
    SessionStorageWriter,
    StorageStat,
    WriterLock,
    is_locked,
)
from tests.pg_support import pg_storage

# Each factory is a context manager: a backend with a server behind it gets a fresh
# database schema per test and drops it afterwards.
STORAGE_FACTORIES: dict[str, Callable[[Path], AbstractContextManager[SessionStorage]]] = {
    "file": lambda tmp: nullcontext(FileSessionStorage()),
    "memory": lambda tmp: nullcontext(MemorySessionStorage()),
    "postgres": lambda tmp: pg_storage(root=tmp),
}


@pytest.fixture(params=list(STORAGE_FACTORIES))
def backend(request: pytest.FixtureRequest) -> str:
    """The name of the backend under test."""
    return str(request.param)


@pytest.fixture
def storage(backend: str, tmp_path: Path) -> Iterator[SessionStorage]:
    with STORAGE_FACTORIES[backend](tmp_path) as opened:
        yield opened


@pytest.fixture
def root(storage: SessionStorage, tmp_path: Path) -> str:
    """An existing, empty directory in the backend under test."""
    directory = str(tmp_path / "store")
    storage.ensure_dir(directory)
    return directory


def _all_names(storage: SessionStorage, directory: str) -> list[str]:
    # "*" skips dotfiles, ".*" finds them: together, every file in the directory.
    paths = storage.list_files(directory, "*") + storage.list_files(directory, ".*")
    return sorted(os.path.basename(p) for p in paths)


# -- protocol and directories ------------------------------------------------------------------


def test_implements_protocol(storage: SessionStorage, root: str) -> None:
    assert isinstance(storage, SessionStorage)
    writer = storage.open_writer(os.path.join(root, "s.jsonl"))
    assert isinstance(writer, SessionStorageWriter)
    writer.close()


def test_ensure_dir_creates_parents_and_is_idempotent(storage: SessionStorage, root: str) -> None:
    nested = os.path.join(root, "a", "b", "c")
    storage.ensure_dir(nested)
    storage.ensure_dir(nested)
    assert storage.exists(nested)
    assert storage.exists(os.path.join(root, "a", "b"))
    assert storage.list_dirs(root) == [os.path.join(root, "a")]


def test_ensure_dir_over_a_file_fails(storage: SessionStorage, root: str) -> None:
    path = os.path.join(root, "f")
    storage.write_text(path, "x")
    with pytest.raises(OSError):
        storage.ensure_dir(path)
    with pytest.raises(OSError):
        storage.ensure_dir(os.path.join(path, "sub"))


def test_exists(storage: SessionStorage, root: str) -> None:
    path = os.path.join(root, "f.jsonl")
    assert not storage.exists(path)
    storage.write_text(path, "")
    assert storage.exists(path)
    assert storage.exists(root)


# -- whole-file reads and writes --------------------------------------------------------------


def test_write_text_round_trip_and_replace(storage: SessionStorage, root: str) -> None:
    path = os.path.join(root, "f.jsonl")
    text = 'line1\r\n{"é":"😀"}\n'
    storage.write_text(path, text)
    assert storage.read_text(path) == text  # no newline translation
    storage.write_text(path, "new")
    assert storage.read_text(path) == "new"
    assert _all_names(storage, root) == ["f.jsonl"]  # no temp file left behind


def test_write_text_into_missing_dir_fails(storage: SessionStorage, root: str) -> None:
    with pytest.raises(FileNotFoundError):
        storage.write_text(os.path.join(root, "missing", "f"), "x")


def test_read_text_missing_raises(storage: SessionStorage, root: str) -> None:
    with pytest.raises(FileNotFoundError):
        storage.read_text(os.path.join(root, "nope"))


def test_read_text_invalid_utf8_is_replaced(storage: SessionStorage, root: str) -> None:
    path = os.path.join(root, "bad")
    storage.write_atomic(path, [b"a\xffb"])
    assert storage.read_text(path) == "a\ufffdb"


@pytest.mark.parametrize(
    ("max_bytes", "expected"),
    [
        (0, ""),
        (2, "ab"),
        (3, "ab"),  # first byte of € (3 bytes) dropped
        (4, "ab"),
        (5, "ab€"),
        (6, "ab€"),  # first byte of 😀 (4 bytes) dropped
        (8, "ab€"),
        (9, "ab€😀"),
        (10, "ab€😀!"),
        (1000, "ab€😀!"),
    ],
)
def test_read_text_prefix_drops_cut_character(
    storage: SessionStorage, root: str, max_bytes: int, expected: str
) -> None:
    path = os.path.join(root, "p")
    storage.write_text(path, "ab€😀!")
    assert storage.read_text_prefix(path, max_bytes) == expected


def test_read_text_prefix_missing_raises(storage: SessionStorage, root: str) -> None:
    with pytest.raises(FileNotFoundError):
        storage.read_text_prefix(os.path.join(root, "nope"), 10)


def test_stat(storage: SessionStorage, root: str) -> None:
    path = os.path.join(root, "f")
    storage.write_text(path, "héllo")
    st = storage.stat(path)
    assert isinstance(st, StorageStat)
    assert st.size == 6
    assert st.mtime.tzinfo is not None and st.mtime.utcoffset() == UTC.utcoffset(None)
    assert st.mtime_ms == pytest.approx(st.mtime_ns / 1e6)
    assert abs(st.mtime.timestamp() * 1000 - st.mtime_ms) < 1
    with pytest.raises(FileNotFoundError):
        storage.stat(os.path.join(root, "nope"))


def test_stat_tracks_appends(storage: SessionStorage, root: str) -> None:
    path = os.path.join(root, "f")
    writer = storage.open_writer(path)
    writer.write_line("a\n")
    first = storage.stat(path)
    writer.write_line("bc\n")
    second = storage.stat(path)
    writer.close()
    assert (first.size, second.size) == (2, 5)
    assert second.mtime_ns >= first.mtime_ns
    assert second.ino == first.ino


# -- listing ----------------------------------------------------------------------------------


def test_list_files_one_level_with_pattern(storage: SessionStorage, root: str) -> None:
    for name in ("b.jsonl", "a.jsonl", "notes.txt", ".hidden.jsonl"):
        storage.write_text(os.path.join(root, name), "x")
    storage.ensure_dir(os.path.join(root, "dir.jsonl"))
    storage.ensure_dir(os.path.join(root, "sub"))
    storage.write_text(os.path.join(root, "sub", "deep.jsonl"), "x")
    assert storage.list_files(root, "*.jsonl") == [
        os.path.join(root, "a.jsonl"),
        os.path.join(root, "b.jsonl"),
    ]
    assert storage.list_files(root, "*.txt") == [os.path.join(root, "notes.txt")]
    assert storage.list_files(root, "*.JSONL") == []  # case-sensitive, like the filesystem
    assert storage.list_files(os.path.join(root, "missing"), "*") == []


def test_a_stored_file_is_named_by_its_listing_whatever_its_name(
    storage: SessionStorage, root: str
) -> None:
    from sessiontree.storage import is_stored_file

    odd = os.path.join(root, "a*b?[c].jsonl")  # glob metacharacters match only themselves
    storage.write_text(odd, "x")
    storage.write_text(os.path.join(root, "aXb?[c].jsonl"), "x")
    storage.ensure_dir(os.path.join(root, "dir"))
    assert is_stored_file(storage, odd)
    assert not is_stored_file(storage, os.path.join(root, "a*b?[c]"))
    assert not is_stored_file(storage, os.path.join(root, "dir"))  # a directory
    assert not is_stored_file(storage, os.path.join(root, "missing.jsonl"))


def test_list_dirs(storage: SessionStorage, root: str) -> None:
    storage.ensure_dir(os.path.join(root, "z"))
    storage.ensure_dir(os.path.join(root, "a", "inner"))
    storage.write_text(os.path.join(root, "file"), "x")
    assert storage.list_dirs(root) == [os.path.join(root, "a"), os.path.join(root, "z")]
    assert storage.list_dirs(os.path.join(root, "missing")) == []


# -- rename / unlink / remove_tree --------------------------------------------------------------


def test_rename_replaces_target(storage: SessionStorage, root: str) -> None:
    src, dst = os.path.join(root, "src"), os.path.join(root, "dst")
    storage.write_text(src, "new")
    storage.write_text(dst, "old")
    storage.rename(src, dst)
    assert storage.read_text(dst) == "new"
    assert not storage.exists(src)
    with pytest.raises(FileNotFoundError):
        storage.rename(src, dst)


def test_rename_directory(storage: SessionStorage, root: str) -> None:
    storage.ensure_dir(os.path.join(root, "d1", "sub"))
    storage.write_text(os.path.join(root, "d1", "sub", "f"), "x")
    storage.rename(os.path.join(root, "d1"), os.path.join(root, "d2"))
    assert storage.read_text(os.path.join(root, "d2", "sub", "f")) == "x"
    assert not storage.exists(os.path.join(root, "d1"))


def test_writer_follows_renamed_file(storage: SessionStorage, root: str) -> None:
    src, dst = os.path.join(root, "a"), os.path.join(root, "b")
    writer = storage.open_writer(src)
    writer.write_line("1\n")
    storage.rename(src, dst)
    writer.write_line("2\n")  # the descriptor follows the inode, not the name
    writer.close()
    assert storage.read_text(dst) == "1\n2\n"


def test_unlink(storage: SessionStorage, root: str) -> None:
    path = os.path.join(root, "f")
    storage.write_text(path, "x")
    storage.unlink(path)
    assert not storage.exists(path)
    with pytest.raises(FileNotFoundError):
        storage.unlink(path)


def test_remove_tree(storage: SessionStorage, root: str) -> None:
    top = os.path.join(root, "t")
    storage.ensure_dir(os.path.join(top, "x", "y"))
    storage.write_text(os.path.join(top, "x", "y", "f"), "x")
    storage.write_text(os.path.join(top, "g"), "x")
    storage.remove_tree(top)
    assert not storage.exists(top)
    assert not storage.exists(os.path.join(top, "x", "y", "f"))
    storage.remove_tree(top)  # missing is fine
    assert storage.exists(root)


# -- writer ------------------------------------------------------------------------------------


def test_writer_appends_lines_in_order(storage: SessionStorage, root: str) -> None:
    path = os.path.join(root, "s.jsonl")
    storage.write_text(path, "header\n")
    writer = storage.open_writer(path)
    lines = [f'{{"n":{i},"t":"é"}}\n' for i in range(100)]
    for line in lines:
        writer.write_line(line)
    writer.flush()
    writer.fsync()
    assert writer.get_error() is None
    writer.close()
    writer.close()  # idempotent
    assert storage.read_text(path) == "header\n" + "".join(lines)


def test_writer_write_bytes(storage: SessionStorage, root: str) -> None:
    path = os.path.join(root, "s.jsonl")
    writer = storage.open_writer(path)
    writer.write_line("a\n")
    writer.write_bytes('{"é":1}\n'.encode())  # type: ignore[attr-defined]
    writer.close()
    assert storage.read_text(path) == 'a\n{"é":1}\n'


def test_writer_w_truncates(storage: SessionStorage, root: str) -> None:
    path = os.path.join(root, "s.jsonl")
    storage.write_text(path, "old content\n")
    writer = storage.open_writer(path, "w")
    writer.write_line("new\n")
    writer.close()
    assert storage.read_text(path) == "new\n"


def test_writer_rejects_unknown_flags(storage: SessionStorage, root: str) -> None:
    with pytest.raises(ValueError):
        storage.open_writer(os.path.join(root, "s"), "r+")


def test_writer_in_missing_dir_fails(storage: SessionStorage, root: str) -> None:
    with pytest.raises(FileNotFoundError):
        storage.open_writer(os.path.join(root, "missing", "s.jsonl"))


def test_writer_after_close_errors(storage: SessionStorage, root: str) -> None:
    writer = storage.open_writer(os.path.join(root, "s.jsonl"))
    writer.close()
    with pytest.raises(ValueError):
        writer.write_line("x\n")
    with pytest.raises(ValueError):
        writer.flush()
    with pytest.raises(ValueError):
        writer.fsync()


# -- capabilities ------------------------------------------------------------------------------


def test_iter_chunks(storage: SessionStorage, root: str) -> None:
    path = os.path.join(root, "f")
    data = bytes(range(256)) * 40  # 10240 bytes
    storage.write_atomic(path, [data])
    chunks = list(storage.iter_chunks(path, chunk_size=4096))
    assert [len(c) for c in chunks] == [4096, 4096, 2048]
    assert b"".join(chunks) == data
    empty = os.path.join(root, "empty")
    storage.write_text(empty, "")
    assert list(storage.iter_chunks(empty)) == []


def test_iter_chunks_missing_raises_at_call(storage: SessionStorage, root: str) -> None:
    with pytest.raises(FileNotFoundError):
        storage.iter_chunks(os.path.join(root, "nope"))


@pytest.mark.parametrize(
    ("offset", "length", "expected"),
    [
        (0, 3, b"012"),
        (7, 10, b"789"),
        (10, 5, b""),
        (50, 5, b""),
        (-3, 10, b"789"),
        (-3, 2, b"78"),
        (-50, 2, b"01"),
        (2, 0, b""),
    ],
)
def test_read_bytes_range(
    storage: SessionStorage, root: str, offset: int, length: int, expected: bytes
) -> None:
    path = os.path.join(root, "f")
    storage.write_text(path, "0123456789")
    assert storage.read_bytes_range(path, offset, length) == expected


def test_read_bytes_range_missing_raises(storage: SessionStorage, root: str) -> None:
    with pytest.raises(FileNotFoundError):
        storage.read_bytes_range(os.path.join(root, "nope"), 0, 1)


def test_write_atomic_writes_all_chunks(storage: SessionStorage, root: str) -> None:
    path = os.path.join(root, "f")
    storage.write_atomic(path, (f"{i}\n".encode() for i in range(1000)))
    assert storage.read_text(path) == "".join(f"{i}\n" for i in range(1000))
    assert _all_names(storage, root) == ["f"]


def test_write_atomic_failure_leaves_old_content(storage: SessionStorage, root: str) -> None:
    path = os.path.join(root, "s.jsonl")
    storage.write_text(path, "old\n")
    before = storage.stat(path)

    def chunks() -> Iterator[bytes]:
        yield b"new line 1\n"
        yield b"new line 2\n"
        raise RuntimeError("serializer blew up")

    with pytest.raises(RuntimeError, match="blew up"):
        storage.write_atomic(path, chunks())
    assert storage.read_text(path) == "old\n"
    assert storage.stat(path).ino == before.ino
    assert _all_names(storage, root) == ["s.jsonl"]  # temp file removed


def test_write_atomic_creates_new_inode(storage: SessionStorage, root: str) -> None:
    path = os.path.join(root, "f")
    storage.write_text(path, "a")
    writer = storage.open_writer(path)
    storage.write_text(path, "b")
    writer.write_line("late\n")  # goes to the replaced inode, as on a real filesystem
    writer.close()
    assert storage.read_text(path) == "b"


def test_fsync_dir(storage: SessionStorage, root: str) -> None:
    storage.fsync_dir(root)
    with pytest.raises(FileNotFoundError):
        storage.fsync_dir(os.path.join(root, "missing"))


# -- optional capabilities ---------------------------------------------------------------------

# Which optional capability each backend declares: losing one is a test failure, and
# every declared one is checked below on that backend.
DECLARED_CAPABILITIES = {
    "file": {"lock", "deferred-sync"},
    "memory": {"lock", "blobs"},
    "postgres": {"lock", "blobs", "index"},
}


def _declared(storage: SessionStorage) -> set[str]:
    found = set()
    if isinstance(storage, LockingStorage):
        found.add("lock")
    if isinstance(storage, BlobBackedStorage):
        found.add("blobs")
    if isinstance(storage, SessionIndexStorage):
        found.add("index")
    if isinstance(storage, DeferredSync):
        found.add("deferred-sync")
    return found


def _with(capability: str) -> pytest.MarkDecorator:
    """Run a test on the backends that declare `capability` (none skipped: the others
    are not collected, and `test_declared_capabilities` holds each to its declaration)."""
    names = [b for b, caps in DECLARED_CAPABILITIES.items() if capability in caps]
    return pytest.mark.parametrize("backend", names, indirect=True)


def _require(storage: SessionStorage, capability: str) -> None:
    assert capability in _declared(storage), f"the backend lost the {capability!r} capability"


def test_declared_capabilities(backend: str, storage: SessionStorage) -> None:
    assert _declared(storage) == DECLARED_CAPABILITIES[backend]


@_with("deferred-sync")
def test_a_write_left_unsynced_replaces_the_file_whole(storage: SessionStorage, root: str) -> None:
    _require(storage, "deferred-sync")
    assert isinstance(storage, DeferredSync)
    path, other = os.path.join(root, "a.zst"), os.path.join(root, "b.zst")
    storage.write_text(path, "old")
    storage.write_atomic_unsynced(path, (b"new ", b"bytes"))
    storage.write_atomic_unsynced(other, (b"other",))
    storage.sync_files([path, other])
    assert (storage.read_text(path), storage.read_text(other)) == ("new bytes", "other")
    assert _all_names(storage, root) == ["a.zst", "b.zst"]  # no temp file left


@_with("lock")
def test_lock_excludes_a_second_writer(storage: SessionStorage, root: str) -> None:
    _require(storage, "lock")
    assert isinstance(storage, LockingStorage)
    path, other = os.path.join(root, "s.jsonl"), os.path.join(root, "t.jsonl")
    lock = storage.acquire_lock(path)
    assert isinstance(lock, WriterLock)
    assert lock.session_file == path
    with pytest.raises(SessionLockError) as info:
        storage.acquire_lock(path)
    assert info.value.path == path
    assert is_locked(storage, path)
    other_lock = storage.acquire_lock(other)  # locks are per session
    other_lock.release()
    lock.release()
    lock.release()  # idempotent
    assert not is_locked(storage, path)
    again = storage.acquire_lock(path)
    again.release()


@_with("blobs")
def test_blob_store_round_trip(storage: SessionStorage, root: str) -> None:
    _require(storage, "blobs")
    assert isinstance(storage, BlobBackedStorage)
    blobs = storage.blob_store()
    assert blobs is not None
    data = bytes(range(256)) * 10
    put = blobs.put(data, "image/png")
    assert put.hash == hashlib.sha256(data).hexdigest()
    assert put.ref == "blob:sha256:" + put.hash
    assert put.display_path == put.path + ".png"
    assert blobs.put(data).hash == put.hash  # stored once
    assert blobs.has(put.hash)
    assert blobs.get(put.hash) == data
    missing = "0" * 64
    assert not blobs.has(missing)
    assert blobs.get(missing) is None
    blobs.sync()
    for bad in ("../etc/passwd", "A" * 64, "0" * 63):
        with pytest.raises(InvalidBlobRefError):
            blobs.get(bad)
        with pytest.raises(InvalidBlobRefError):
            blobs.has(bad)


@_with("blobs")
def test_blob_store_is_collectable(storage: SessionStorage, root: str) -> None:
    """What `gc` needs of a storage's own blob store: inventory, mtimes, guarded delete."""
    _require(storage, "blobs")
    assert isinstance(storage, BlobBackedStorage)
    blobs = storage.blob_store()
    assert isinstance(blobs, CollectableBlobStore)
    assert blobs.list_hashes() == [] and blobs.list_info() == []
    first = blobs.put(b"first image", "image/png").hash
    second = blobs.put(b"second").hash
    assert blobs.list_hashes() == sorted([first, second])
    now = blobs.now()
    infos = {info.hash: info for info in blobs.list_info()}
    assert [i.hash for i in blobs.list_info()] == sorted([first, second])
    assert infos[first].size == len(b"first image") and infos[first].exts == ("png",)
    assert infos[second].exts == ()
    for digest in (first, second):
        mtime = blobs.mtime(digest)
        assert mtime is not None and abs(mtime - now) < 60 and mtime == infos[digest].mtime
    assert blobs.mtime("0" * 64) is None
    with pytest.raises(InvalidBlobRefError):
        blobs.mtime("../x")
    assert not blobs.delete(first, min_age_seconds=600)  # put just now: kept
    assert blobs.has(first)
    assert blobs.delete(first) and not blobs.has(first) and blobs.get(first) is None
    assert not blobs.delete(first)  # already gone
    assert blobs.list_hashes() == [second]
    assert blobs.put(b"first image").hash == first and blobs.has(first)  # back again


def _session_bytes() -> bytes:
    header = {
        "type": "session",
        "version": 3,
        "id": "abc",
        "timestamp": "2026-01-02T03:04:05.000Z",
        "cwd": "/proj",
        "title": "Named",
        "titleSource": "user",
        "parentSession": "p",
    }
    entries = [
        {
            "type": "model_change",
            "id": "00000001",
            "parentId": None,
            "timestamp": "2026-01-02T03:04:06.000Z",
            "model": "a/b",
        },
        {
            "type": "message",
            "id": "00000002",
            "parentId": "00000001",
            "timestamp": "2026-01-02T03:04:07.000Z",
            "message": {"role": "user", "content": "first question", "timestamp": 1767323047000},
        },
        {
            "type": "message",
            "id": "00000003",
            "parentId": "00000002",
            "timestamp": "2026-01-02T03:04:08.000Z",
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": "an"}, {"type": "text", "text": "answer"}],
            },
        },
    ]
    return b"".join(serialize_entry(e).encode() + b"\n" for e in [header, *entries])


@_with("index")
def test_session_index_tracks_writes(storage: SessionStorage, root: str) -> None:
    _require(storage, "index")
    assert isinstance(storage, SessionIndexStorage)
    path = os.path.join(root, "s.jsonl")
    storage.write_atomic(path, [_session_bytes()])
    storage.write_text(os.path.join(root, "notes.txt"), "not listed")
    storage.write_text(os.path.join(root, "broken.jsonl"), '{"type":"message"}\n')
    storage.ensure_dir(os.path.join(root, "sub"))
    storage.write_atomic(os.path.join(root, "sub", "deep.jsonl"), [_session_bytes()])
    metas = storage.list_session_meta(root)
    assert [m.path for m in metas] == [os.path.join(root, "broken.jsonl"), path]
    broken, meta = metas
    assert not broken.valid and broken.id is None and broken.message_count == 0
    st = storage.stat(path)
    assert (meta.size, meta.mtime_ns) == (st.size, st.mtime_ns)
    assert meta.valid and meta.line_count == 4
    assert (meta.id, meta.cwd, meta.title, meta.title_source, meta.parent_session) == (
        "abc",
        "/proj",
        "Named",
        "user",
        "p",
    )
    assert meta.created == "2026-01-02T03:04:05.000Z"
    assert (meta.message_count, meta.first_message) == (2, "first question")
    assert meta.last_activity_ms == 1767323048000  # the assistant's entry timestamp
    assert meta.all_messages_text is None
    writer = storage.open_writer(path)
    writer.write_line(
        serialize_entry(
            {
                "type": "message",
                "id": "00000004",
                "parentId": "00000003",
                "timestamp": "2026-01-02T03:05:00.000Z",
                "message": {"role": "user", "content": "second", "timestamp": 1767323100000},
            }
        )
        + "\n"
    )
    writer.close()
    (after,) = [m for m in storage.list_session_meta(root, with_text=True) if m.path == path]
    assert (after.message_count, after.line_count, after.first_message) == (3, 5, "first question")
    assert after.size == storage.stat(path).size
    assert after.last_activity_ms == 1767323100000
    assert after.all_messages_text == "first question an answer second"


@_with("index")
def test_session_index_header_written_by_a_writer(storage: SessionStorage, root: str) -> None:
    _require(storage, "index")
    assert isinstance(storage, SessionIndexStorage)
    path = os.path.join(root, "w.jsonl")
    writer = storage.open_writer(path)
    for line in _session_bytes().splitlines(keepends=True):
        writer.write_bytes(line)  # type: ignore[attr-defined]
    writer.close()
    (meta,) = storage.list_session_meta(root)
    assert (meta.valid, meta.id, meta.message_count, meta.line_count) == (True, "abc", 2, 4)
    storage.rename(path, os.path.join(root, "renamed.jsonl"))
    (moved,) = storage.list_session_meta(root)
    assert moved.path == os.path.join(root, "renamed.jsonl") and moved.id == "abc"
    truncating = storage.open_writer(moved.path, "w")
    truncating.write_line('{"type":"message"}\n')
    truncating.close()
    (reset,) = storage.list_session_meta(root)
    assert not reset.valid and reset.size == 19


# -- file backend only ------------------------------------------------------------------------


def _mode(path: str | Path) -> int:
    return stat_mod.S_IMODE(os.stat(path).st_mode)


def test_file_modes_are_private(tmp_path: Path) -> None:
    storage = FileSessionStorage()
    nested = tmp_path / "agent" / "sessions" / "--proj--"
    storage.ensure_dir(str(nested))
    for directory in (tmp_path / "agent", tmp_path / "agent" / "sessions", nested):
        assert _mode(directory) == 0o700
    text, atomic, appended = (str(nested / n) for n in ("t", "a", "w.jsonl"))
    storage.write_text(text, "x")
    storage.write_atomic(atomic, [b"x"])
    writer = storage.open_writer(appended)
    writer.write_line("x\n")
    writer.close()
    for path in (text, atomic, appended):
        assert _mode(path) == 0o600


def test_file_writer_rolls_back_failed_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = FileSessionStorage()
    path = str(tmp_path / "s.jsonl")
    writer = storage.open_writer(path)
    writer.write_line("first\n")
    real_write = os.write
    calls = 0

    def short_then_fail(fd: int, data: bytes) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            return real_write(fd, bytes(data)[:3])  # a short write...
        raise OSError(errno.ENOSPC, "No space left on device")  # ...then the disk is full

    monkeypatch.setattr(os, "write", short_then_fail)
    with pytest.raises(OSError, match="No space"):
        writer.write_line("second line\n")
    monkeypatch.setattr(os, "write", real_write)
    error = writer.get_error()
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC
    assert Path(path).read_bytes() == b"first\n"  # the partial bytes were rolled back
    with pytest.raises(OSError, match="No space"):
        writer.write_line("third\n")  # the stored error is re-raised
    with pytest.raises(OSError, match="No space"):
        writer.close()
    assert Path(path).read_bytes() == b"first\n"


def test_file_writer_loops_on_short_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = FileSessionStorage()
    path = str(tmp_path / "s.jsonl")
    writer = storage.open_writer(path)
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data)[:2]))
    writer.write_line("abcdefg\n")
    monkeypatch.setattr(os, "write", real_write)
    writer.close()
    assert Path(path).read_bytes() == b"abcdefg\n"


def test_file_fsync_is_real(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = FileSessionStorage()
    writer = storage.open_writer(str(tmp_path / "s.jsonl"))
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    writer.write_line("x\n")
    writer.fsync()
    writer.close()
    assert len(synced) == 1


def test_file_sync_files_syncs_each_file_and_each_dir_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unsynced writes cost no fsync; `sync_files` one per file and one per dir."""
    storage = FileSessionStorage()
    paths = [str(tmp_path / d / f"{n}.zst") for d in ("a", "b") for n in range(3)]
    for path in paths:
        storage.ensure_dir(os.path.dirname(path))
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    for path in paths:
        storage.write_atomic_unsynced(path, (b"x",))
    assert synced == []
    storage.sync_files(paths)
    assert len(synced) == len(paths) + 2


# -- memory backend only ----------------------------------------------------------------------


def test_memory_injected_write_error_is_stored() -> None:
    storage = MemorySessionStorage()
    storage.ensure_dir("/s")
    writer = storage.open_writer("/s/a.jsonl")
    writer.write_line("ok\n")
    storage.fail_writes(OSError(errno.EIO, "injected"))
    with pytest.raises(OSError, match="injected"):
        writer.write_line("lost\n")
    with pytest.raises(OSError, match="injected"):
        storage.write_text("/s/a.jsonl", "replacement")
    storage.fail_writes(None)
    assert isinstance(writer.get_error(), OSError)
    with pytest.raises(OSError, match="injected"):
        writer.close()
    assert storage.read_text("/s/a.jsonl") == "ok\n"


def test_memory_mtime_advances_on_every_write() -> None:
    storage = MemorySessionStorage()
    storage.ensure_dir("/s")
    writer = storage.open_writer("/s/a")
    seen = []
    for _ in range(50):
        writer.write_line("x\n")
        seen.append(storage.stat("/s/a").mtime_ns)
    writer.close()
    assert seen == sorted(set(seen))
