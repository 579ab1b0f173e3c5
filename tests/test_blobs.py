"""BlobStore / MemoryBlobStore and the blob ref parser."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat as stat_mod
from collections.abc import Callable
from pathlib import Path

import pytest

from sessiontree.blobs import (
    BLOB_REF_PREFIX,
    BlobPutResult,
    BlobStore,
    BlobStoreLike,
    MemoryBlobStore,
    blob_extension_for_mime_type,
    is_blob_ref,
    parse_blob_ref,
)
from sessiontree.errors import InvalidBlobRefError

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
