"""BlobStore / MemoryBlobStore and the blob ref parser."""

from __future__ import annotations

import base64
import errno
import hashlib
import logging
import os
import shutil
import stat as stat_mod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sessiontree.errors import InvalidBlobRefError
from sessiontree.session import prepare_for_persist, resolve_blob_refs
from sessiontree.storage import (
    BLOB_REF_PREFIX,
    BlobPutResult,
    BlobStore,
    BlobStoreLike,
    CollectableBlobStore,
    MemoryBlobStore,
    VerifiableBlobStore,
    blob_extension_for_mime_type,
    is_blob_ref,
    parse_blob_ref,
)
from tests.pg_support import pg_storage, pg_url

BLOB_FACTORIES: dict[str, Callable[[Path], BlobStoreLike]] = {
    "file": lambda tmp: BlobStore(str(tmp / "agent" / "blobs")),
    "memory": lambda tmp: MemoryBlobStore(),
}

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
VALID = "ab" * 32

INVALID_HASHES = [
    "../../etc/passwd",
    "blob:sha256:../../etc/passwd",
    f"blob:sha256:{VALID}",  # a ref is not a hash
    VALID.upper(),
    "A" + VALID[1:],
    VALID[:63],
    VALID + "0",
    VALID[:63] + "g",
    VALID + "\n",
    "",
    f"{VALID[:32]}/{VALID[:31]}",
]


@pytest.fixture(params=list(BLOB_FACTORIES))
def blobs(request: pytest.FixtureRequest, tmp_path: Path) -> BlobStoreLike:
    return BLOB_FACTORIES[request.param](tmp_path)


def test_put_get_has(blobs: BlobStoreLike) -> None:
    result = blobs.put(PNG)
    digest = hashlib.sha256(PNG).hexdigest()
    assert isinstance(result, BlobPutResult)
    assert result.hash == digest
    assert result.ref == f"blob:sha256:{digest}"
    assert result.path.endswith(os.sep + digest)
    assert blobs.has(digest)
    assert blobs.get(digest) == PNG
    other = "cd" * 32
    assert not blobs.has(other)
    assert blobs.get(other) is None


def test_put_result_is_frozen(blobs: BlobStoreLike) -> None:
    result = blobs.put(b"x")
    with pytest.raises(AttributeError):
        result.hash = "y"  # type: ignore[misc]


def test_empty_blob(blobs: BlobStoreLike) -> None:
    result = blobs.put(b"")
    assert blobs.get(result.hash) == b""


@pytest.mark.parametrize("bad", INVALID_HASHES)
def test_invalid_hashes_are_rejected(blobs: BlobStoreLike, bad: str) -> None:
    with pytest.raises(InvalidBlobRefError):
        blobs.get(bad)
    with pytest.raises(InvalidBlobRefError):
        blobs.has(bad)
    assert parse_blob_ref(BLOB_REF_PREFIX + bad) is None


def test_non_string_hash_is_rejected(blobs: BlobStoreLike) -> None:
    with pytest.raises(InvalidBlobRefError):
        blobs.get(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):  # InvalidBlobRefError is also a ValueError
        blobs.has(b"ab" * 32)  # type: ignore[arg-type]


def test_parse_blob_ref() -> None:
    assert parse_blob_ref(f"blob:sha256:{VALID}") == VALID
    assert is_blob_ref(f"blob:sha256:{VALID}")
    for bad in (
        "blob:sha256:../../etc/passwd",
        f"blob:sha256:{VALID.upper()}",
        f"blob:sha256:{VALID[:63]}",
        f"blob:sha256:{VALID}0",
        f"blob:sha256:{VALID}\n",
        f"BLOB:sha256:{VALID}",
        f" blob:sha256:{VALID}",
        f"blob:sha1:{VALID}",
        VALID,
        "",
        None,
        123,
    ):
        assert parse_blob_ref(bad) is None, bad
        assert not is_blob_ref(bad)


def test_identical_content_stored_once(blobs: BlobStoreLike, tmp_path: Path) -> None:
    first = blobs.put(PNG)
    second = blobs.put(bytes(PNG))
    assert first == second
    if isinstance(blobs, BlobStore):
        assert os.listdir(blobs.dir) == [first.hash]
    else:
        assert isinstance(blobs, MemoryBlobStore) and len(blobs) == 1


def test_mime_type_sidecar(blobs: BlobStoreLike) -> None:
    result = blobs.put(PNG, "image/png")
    assert result.display_path == result.path + ".png"
    plain = blobs.put(b"plain", "text/plain")
    assert plain.display_path is None
    if isinstance(blobs, BlobStore):
        assert os.stat(result.display_path).st_ino == os.stat(result.path).st_ino
        assert not os.path.exists(plain.path + ".txt")
        blobs.put(PNG, "image/png")  # an existing sidecar is fine


@pytest.mark.parametrize(
    ("mime", "ext"),
    [
        ("image/png", "png"),
        ("IMAGE/JPEG", "jpg"),
        ("image/jpg", "jpg"),
        ("image/webp", "webp"),
        ("image/gif", "gif"),
        ("image/svg+xml", "svg"),
        ("image/avif", "avif"),
        ("image/x-icon; charset=binary", "x-icon"),
        ("image/", None),
        ("image/../../x", None),
        ("text/plain", None),
        ("", None),
        (None, None),
    ],
)
def test_blob_extension_for_mime_type(mime: str | None, ext: str | None) -> None:
    assert blob_extension_for_mime_type(mime) == ext


def test_file_blob_modes(tmp_path: Path) -> None:
    store = BlobStore(str(tmp_path / "agent" / "blobs"))
    result = store.put(PNG)
    assert stat_mod.S_IMODE(os.stat(store.dir).st_mode) == 0o700
    assert stat_mod.S_IMODE(os.stat(tmp_path / "agent").st_mode) == 0o700
    assert stat_mod.S_IMODE(os.stat(result.path).st_mode) == 0o600


def test_failed_put_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = BlobStore(str(tmp_path / "blobs"))
    store.put(b"warm-up")  # creates the directory
    real_write = os.write
    calls = 0

    def half_then_fail(fd: int, data: bytes) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            return real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_fail)
    with pytest.raises(OSError, match="No space"):
        store.put(PNG)
    monkeypatch.setattr(os, "write", real_write)
    digest = hashlib.sha256(PNG).hexdigest()
    assert not store.has(digest)
    assert os.listdir(store.dir) == [hashlib.sha256(b"warm-up").hexdigest()]


def test_put_repairs_a_short_blob(tmp_path: Path) -> None:
    store = BlobStore(str(tmp_path / "blobs"))
    digest = hashlib.sha256(PNG).hexdigest()
    os.makedirs(store.dir)
    Path(store.dir, digest).write_bytes(PNG[:10])  # left by a crashed non-atomic writer
    store.put(PNG)
    assert store.get(digest) == PNG


def test_sync_fsyncs_new_blobs_then_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = BlobStore(str(tmp_path / "blobs"))
    store.sync()  # nothing pending, no directory yet: a no-op
    store.put(b"one")
    store.put(b"two")
    store.put(b"one")
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    store.sync()
    assert len(synced) == 3  # two blobs + the directory
    synced.clear()
    store.sync()
    assert synced == []


def test_memory_blob_store_sync_is_noop() -> None:
    store = MemoryBlobStore()
    store.put(b"x")
    store.sync()


def test_put_recreates_a_removed_directory(tmp_path: Path) -> None:
    store = BlobStore(str(tmp_path / "blobs"))
    store.put(b"one")
    shutil.rmtree(store.dir)
    store.sync()  # the pending blob is gone: skipped, not an error
    result = store.put(b"two")
    assert store.get(result.hash) == b"two"


# -- damaged blobs: every store holds itself to its hashes ----------------------------------

Damage = Callable[[str, bytes], None]
"""Overwrite a stored blob's bytes behind the store's back (a disk fault, a bad copy)."""


@contextmanager
def _file_store(tmp: Path) -> Iterator[tuple[BlobStoreLike, Damage]]:
    store = BlobStore(str(tmp / "agent" / "blobs"))

    def damage(digest: str, data: bytes) -> None:
        with open(os.path.join(store.dir, digest), "r+b") as f:  # in place: same inode
            f.write(data)
            f.truncate()

    yield store, damage


@contextmanager
def _memory_store(tmp: Path) -> Iterator[tuple[BlobStoreLike, Damage]]:
    store = MemoryBlobStore()

    def damage(digest: str, data: bytes) -> None:
        store._blobs[digest] = data

    yield store, damage


@contextmanager
def _postgres_store(tmp: Path) -> Iterator[tuple[BlobStoreLike, Damage]]:
    import psycopg
    from psycopg import sql

    with pg_storage(root=tmp) as storage:
        store = storage.blob_store()

        def damage(digest: str, data: bytes) -> None:
            with psycopg.connect(pg_url(), autocommit=True) as conn:
                conn.execute(
                    sql.SQL("UPDATE {}.blobs SET data = %s WHERE hash = %s").format(
                        sql.Identifier(storage.schema)
                    ),
                    (data, digest),
                )

        yield store, damage


DAMAGEABLE = {"file": _file_store, "memory": _memory_store, "postgres": _postgres_store}
DAMAGES = {
    "same-size": lambda data: bytes(b ^ 0xFF for b in data[:5]) + data[5:],
    "truncated": lambda data: data[: len(data) // 2],
    "longer": lambda data: data + b"\0",
}


@pytest.fixture(params=list(DAMAGEABLE))
def damageable(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[BlobStoreLike, Damage]]:
    with DAMAGEABLE[request.param](tmp_path) as opened:
        yield opened


@pytest.mark.parametrize("how", list(DAMAGES))
def test_get_refuses_a_damaged_blob_and_names_it(
    damageable: tuple[BlobStoreLike, Damage], how: str, caplog: pytest.LogCaptureFixture
) -> None:
    store, damage = damageable
    digest = store.put(PNG, "image/png").hash
    damage(digest, DAMAGES[how](PNG))
    with caplog.at_level(logging.WARNING, logger="sessiontree"):
        assert store.get(digest) is None
    assert any(digest in r.getMessage() and "damaged" in r.getMessage() for r in caplog.records)
    assert store.has(digest)  # still there: `has` answers presence only
    assert isinstance(store, VerifiableBlobStore)
    assert store.verify(digest) == "damaged"


def test_verify_tells_an_intact_blob_from_a_missing_one(
    damageable: tuple[BlobStoreLike, Damage],
) -> None:
    store, _ = damageable
    digest = store.put(PNG).hash
    assert isinstance(store, VerifiableBlobStore)
    assert store.verify(digest) == "ok"
    assert store.verify("0" * 64) == "missing" and store.get("0" * 64) is None
    with pytest.raises(InvalidBlobRefError):
        store.verify("../x")


@pytest.mark.parametrize("how", list(DAMAGES))
def test_put_replaces_a_damaged_blob_with_the_good_bytes(
    damageable: tuple[BlobStoreLike, Damage], how: str
) -> None:
    store, damage = damageable
    digest = store.put(PNG, "image/png").hash
    damage(digest, DAMAGES[how](PNG))
    assert store.put(PNG, "image/png").hash == digest
    assert store.get(digest) == PNG
    assert isinstance(store, VerifiableBlobStore) and store.verify(digest) == "ok"
    if isinstance(store, CollectableBlobStore):
        [info] = store.list_info()
        assert info.size == len(PNG) and info.exts == ("png",)


def test_a_damaged_blob_stays_a_ref_through_load_and_rewrite(
    damageable: tuple[BlobStoreLike, Damage],
) -> None:
    store, damage = damageable
    image = {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"}
    entry = {"type": "message", "id": "a", "message": {"role": "user", "content": [image]}}
    stored = prepare_for_persist(entry, store)
    ref = stored["message"]["content"][0]["data"]
    digest = parse_blob_ref(ref)
    assert digest is not None
    damage(digest, DAMAGES["same-size"](PNG))
    loaded = resolve_blob_refs(stored, store)
    assert loaded["message"]["content"][0]["data"] == ref  # not the damaged bytes
    assert prepare_for_persist(loaded, store)["message"]["content"][0]["data"] == ref
    # Nothing was re-stored under a new hash.
    if isinstance(store, CollectableBlobStore):
        assert store.list_hashes() == [digest]
    else:
        assert isinstance(store, BlobStore)
        assert {name.split(".")[0] for name in os.listdir(store.dir)} == {digest}
    store.put(PNG)  # whoever still holds the image repairs it
    assert resolve_blob_refs(stored, store)["message"]["content"][0]["data"] == image["data"]


def test_a_failed_repair_leaves_the_old_file_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = BlobStore(str(tmp_path / "blobs"))
    digest = store.put(PNG).hash
    path = os.path.join(store.dir, digest)
    damaged = DAMAGES["same-size"](PNG)
    Path(path).write_bytes(damaged)

    def no_rename(src: str, dst: str) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(OSError, match="I/O error"):
        store.put(PNG)
    assert Path(path).read_bytes() == damaged  # never rewritten in place
    assert os.listdir(store.dir) == [digest]


def test_a_repair_renames_a_new_file_into_place_and_fixes_its_sidecars(tmp_path: Path) -> None:
    store = BlobStore(str(tmp_path / "blobs"))
    digest = store.put(PNG, "image/png").hash
    store.put(PNG, "image/webp")
    path = os.path.join(store.dir, digest)
    before = os.stat(path).st_ino
    with open(path, "r+b") as f:  # damages the hard-linked sidecars with it
        f.write(b"\0\0\0\0")
    assert Path(path + ".webp").read_bytes() != PNG
    store.put(PNG)  # no MIME type this time: every sidecar is repaired anyway
    assert os.stat(path).st_ino != before  # a new file renamed over the old one
    for name in (digest, f"{digest}.png", f"{digest}.webp"):
        assert Path(store.dir, name).read_bytes() == PNG
        assert os.stat(os.path.join(store.dir, name)).st_ino == os.stat(path).st_ino
    assert sorted(os.listdir(store.dir)) == sorted([digest, f"{digest}.png", f"{digest}.webp"])


def test_an_intact_re_put_does_not_rewrite_the_file(tmp_path: Path) -> None:
    store = BlobStore(str(tmp_path / "blobs"))
    digest = store.put(PNG, "image/png").hash
    path = os.path.join(store.dir, digest)
    before = os.stat(path).st_ino
    store.put(PNG, "image/png")
    assert os.stat(path).st_ino == before
    assert os.stat(path + ".png").st_ino == before


# -- the one blob-store rule (agent_dir.blob_store_for) -------------------------------------


def _dir_of(store: BlobStoreLike) -> str:
    assert isinstance(store, BlobStore)
    return store.dir


def test_the_blob_store_rule_in_order(agent_dir: Path, tmp_path: Path) -> None:
    from sessiontree.layout import blob_store_for
    from sessiontree.storage import MemorySessionStorage

    memory = MemorySessionStorage()
    # 1. The storage's own blob store.
    assert blob_store_for(str(tmp_path / "x.jsonl"), memory, str(agent_dir)) is memory.blob_store()
    # 2. The blobs/ of the agent dir holding the session under sessions/ (one that has
    #    blobs/, or the one in effect).
    other = tmp_path / "other"
    (other / "blobs").mkdir(parents=True)
    session = str(other / "sessions" / "--p--" / "s.jsonl")
    assert _dir_of(blob_store_for(session, None, str(agent_dir))) == str(other / "blobs")
    # A project's own sessions/ folder (no blobs/ beside it) is not an agent dir: 3.
    project = str(tmp_path / "project" / "sessions" / "s.jsonl")
    assert _dir_of(blob_store_for(project, None, str(agent_dir))) == str(agent_dir / "blobs")
    assert _dir_of(blob_store_for(None, None, str(agent_dir))) == str(agent_dir / "blobs")
    # 3. ... the agent dir in effect: the one the caller works on.
    given = tmp_path / "given"  # no blobs/ yet
    in_given = str(given / "sessions" / "--p--")
    assert _dir_of(blob_store_for(in_given, None, str(given))) == str(given / "blobs")
    assert _dir_of(blob_store_for(None, None, str(given))) == str(given / "blobs")
    assert _dir_of(blob_store_for(session, None, str(given))) == str(other / "blobs")


def test_an_in_memory_session_on_a_blob_backed_storage_uses_the_agent_dir_blobs_by_default(
    agent_dir: Path,
) -> None:
    from sessiontree import SessionManager
    from sessiontree.storage import MemorySessionStorage

    put = SessionManager.in_memory("/p").put_blob(b"image bytes" * 200)
    assert (agent_dir / "blobs" / put.hash).is_file()
    storage = MemorySessionStorage()  # given explicitly: its own store, as every manager on it
    given = SessionManager.in_memory("/p", storage).put_blob(b"other bytes" * 200)
    assert storage.blob_store().has(given.hash)


@pytest.mark.parametrize(
    "data", [b"\x89PNG\r\n\x1a\n" + b"fifo" * 100, b""], ids=["image", "empty"]
)
def test_a_fifo_under_a_blobs_name_is_never_blocked_on(tmp_path: Path, data: bytes) -> None:
    """Something that is not a file under a blob's name (a FIFO someone made there) is
    no blob (as `has` says): reading it, checking it or putting the good bytes returns at once (a FIFO
    opened for reading waits for a writer that never comes), and the put replaces it."""
    import threading

    store = BlobStore(str(tmp_path / "blobs"))
    store.put(b"make the dir")
    digest = hashlib.sha256(data).hexdigest()
    fifo = tmp_path / "blobs" / digest
    os.mkfifo(fifo)
    outcome: dict[str, object] = {}

    def use() -> None:
        outcome["get"] = store.get(digest)
        outcome["verify"] = store.verify(digest)
        outcome["put"] = store.put(data).hash

    worker = threading.Thread(target=use, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():  # let the stuck reader go before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(10)
        pytest.fail(f"blocked on the FIFO at {fifo}")
    assert outcome == {"get": None, "verify": "missing", "put": digest}
    assert stat_mod.S_ISREG(os.lstat(fifo).st_mode) and store.get(digest) == data
