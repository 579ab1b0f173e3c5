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
    MigrationResult,
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
from sessiontree.maintenance._transfers import TransferReport, export_files, import_files

__all__ = [
    "DEFAULT_MIN_AGE_SECONDS",
    "BlobFile",
    "DeletePlan",
    "Finding",
    "GcReport",
    "MigrationResult",
    "TransferReport",
    "artifacts_dir",
    "check_session",
    "collect_garbage",
    "conflict_siblings",
    "delete_session",
    "export_files",
    "file_version",
    "import_files",
    "list_blobs",
    "list_store_blobs",
    "migrate_session_file",
    "plan_delete",
    "repair_session",
    "scan_session",
    "session_files",
    "storage_blob_store",
]
