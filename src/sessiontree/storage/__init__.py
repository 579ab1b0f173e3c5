"""Where the bytes live: the storage Protocols and capabilities, the file and memory
backends (PostgreSQL in `sessiontree.storage.postgres`), the blob store, writer locks,
live pins."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessiontree._util.lazy import lazy_exports, lazy_table

if TYPE_CHECKING:  # what mypy sees; at run time each name is imported on first use
    from sessiontree.storage._base import (
        AtomicWrites,
        BlobBackedStorage,
        ChunkedReads,
        DeferredSync,
        DirectoryTree,
        HostFilesystem,
        LockingStorage,
        MissingCapabilityError,
        PinnedFile,
        PinnedReads,
        RootedStorage,
        SessionIndexStorage,
        SessionMeta,
        SessionStorage,
        SessionStorageWriter,
        StorageStat,
        WriterLock,
        directory_tree,
        is_stored_file,
        read_chunks,
        read_range,
        read_range_chunks,
        replace_checked,
        sync_dir,
        write_new,
        write_whole,
    )
    from sessiontree.storage._blobs import (
        BLOB_REF_PREFIX,
        BlobPins,
        BlobPutResult,
        BlobStatus,
        BlobStore,
        BlobStoreLike,
        CollectableBlobStore,
        MemoryBlobStore,
        VerifiableBlobStore,
        blob_extension_for_mime_type,
        check_hash,
        find_blob_refs,
        is_blob_extension,
        is_blob_ref,
        parse_blob_ref,
        same_blob_store,
    )
    from sessiontree.storage._file import (
        FilePin,
        FileSessionStorage,
        default_storage,
        ensure_private_dir,
        fsync_directory,
    )
    from sessiontree.storage._handover import (
        Handover,
        OldInode,
        PublishLock,
        hand_over,
        publish_lock_name,
    )
    from sessiontree.storage._locks import (
        FileLock,
        acquire_session_lock,
        is_locked,
        lock_path_for,
        verify_lock,
    )
    from sessiontree.storage._memory import MemorySessionStorage
    from sessiontree.storage._open import close_storage, file_store_dir, open_storage, redact_url
    from sessiontree.storage._pins import LIVE_DIR, pin_error, read_pins, save_unsaved
    from sessiontree.storage.postgres import PostgresSessionStorage

_WHERE = lazy_table(
    {
        "postgres": "PostgresSessionStorage",
        "_base": (
            "AtomicWrites BlobBackedStorage ChunkedReads DeferredSync DirectoryTree "
            "HostFilesystem LockingStorage MissingCapabilityError PinnedFile PinnedReads "
            "RootedStorage SessionIndexStorage SessionMeta SessionStorage SessionStorageWriter "
            "StorageStat WriterLock directory_tree is_stored_file read_chunks read_range "
            "read_range_chunks replace_checked sync_dir write_new write_whole"
        ),
        "_blobs": (
            "BLOB_REF_PREFIX BlobPins BlobPutResult BlobStatus BlobStore BlobStoreLike "
            "CollectableBlobStore MemoryBlobStore VerifiableBlobStore "
            "blob_extension_for_mime_type check_hash find_blob_refs is_blob_extension "
            "is_blob_ref parse_blob_ref same_blob_store"
        ),
        "_file": "FilePin FileSessionStorage default_storage ensure_private_dir fsync_directory",
        "_handover": "Handover OldInode PublishLock hand_over publish_lock_name",
        "_locks": "FileLock acquire_session_lock is_locked lock_path_for verify_lock",
        "_memory": "MemorySessionStorage",
        "_open": "close_storage file_store_dir open_storage redact_url",
        "_pins": "LIVE_DIR pin_error read_pins save_unsaved",
    }
)
"""Each name and the module (of this package, by its short name) it is imported from."""

if not TYPE_CHECKING:  # a module `__getattr__` would make type checkers accept any name
    __getattr__ = lazy_exports(__name__, _WHERE)

__all__ = [
    "BLOB_REF_PREFIX",
    "LIVE_DIR",
    "AtomicWrites",
    "BlobBackedStorage",
    "BlobPins",
    "BlobPutResult",
    "BlobStatus",
    "BlobStore",
    "BlobStoreLike",
    "ChunkedReads",
    "CollectableBlobStore",
    "DeferredSync",
    "DirectoryTree",
    "FileLock",
    "FilePin",
    "FileSessionStorage",
    "Handover",
    "HostFilesystem",
    "LockingStorage",
    "MemoryBlobStore",
    "MemorySessionStorage",
    "MissingCapabilityError",
    "OldInode",
    "PinnedFile",
    "PinnedReads",
    "PostgresSessionStorage",
    "PublishLock",
    "RootedStorage",
    "SessionIndexStorage",
    "SessionMeta",
    "SessionStorage",
    "SessionStorageWriter",
    "StorageStat",
    "VerifiableBlobStore",
    "WriterLock",
    "acquire_session_lock",
    "blob_extension_for_mime_type",
    "check_hash",
    "close_storage",
    "default_storage",
    "directory_tree",
    "ensure_private_dir",
    "file_store_dir",
    "find_blob_refs",
    "fsync_directory",
    "hand_over",
    "is_blob_extension",
    "is_blob_ref",
    "is_locked",
    "is_stored_file",
    "lock_path_for",
    "open_storage",
    "parse_blob_ref",
    "pin_error",
    "publish_lock_name",
    "read_chunks",
    "read_pins",
    "read_range",
    "read_range_chunks",
    "redact_url",
    "replace_checked",
    "same_blob_store",
    "save_unsaved",
    "sync_dir",
    "verify_lock",
    "write_new",
    "write_whole",
]
