"""Keeping a store sound: finding, migrating and deleting session files, the consistency
checker and repair, blob garbage collection, moving a file store into a database and
back."""

from __future__ import annotations

from sessiontree.maintenance._check import (
    Finding,
    check_session,
    conflict_siblings,
    repair_session,
    scan_session,
)
from sessiontree.maintenance._files import (
    DeletePlan,
    artifacts_dir,
    delete_session,
    file_version,
    migrate_session_file,
    plan_delete,
    session_files,
)
from sessiontree.maintenance._gc import (
    DEFAULT_MIN_AGE_SECONDS,
    BlobFile,
    GcReport,
    collect_garbage,
    list_blobs,
    list_store_blobs,
    storage_blob_store,
)
from sessiontree.maintenance._transfers import (
    STORE_ENV,
    TransferReport,
    close_store,
    export_files,
    file_store_dir,
    import_files,
    open_store,
    redact_url,
)

__all__ = [
    "DEFAULT_MIN_AGE_SECONDS",
    "STORE_ENV",
    "BlobFile",
    "DeletePlan",
    "Finding",
    "GcReport",
    "TransferReport",
    "artifacts_dir",
    "check_session",
    "close_store",
    "collect_garbage",
    "conflict_siblings",
    "delete_session",
    "export_files",
    "file_store_dir",
    "file_version",
    "import_files",
    "list_blobs",
    "list_store_blobs",
    "migrate_session_file",
    "open_store",
    "plan_delete",
    "redact_url",
    "repair_session",
    "scan_session",
    "session_files",
    "storage_blob_store",
]
