"""Keeping a store sound: finding, migrating and deleting session files, the consistency
checker and repair, blob garbage collection, moving a file store into a database and
back."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessiontree._util.lazy import lazy_exports, lazy_table

if TYPE_CHECKING:  # what mypy sees; at run time each name is imported on first use
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

_WHERE = lazy_table(
    {
        "_check": "Finding check_session conflict_siblings repair_session scan_session",
        "_files": (
            "DeletePlan MigrationResult artifacts_dir delete_session file_version "
            "migrate_session_file plan_delete session_files"
        ),
        "_gc": (
            "DEFAULT_MIN_AGE_SECONDS BlobFile GcReport collect_garbage list_blobs "
            "list_store_blobs storage_blob_store"
        ),
        "_transfers": "TransferReport export_files import_files",
    }
)
"""Each name and the module (of this package, by its short name) it is imported from."""

if not TYPE_CHECKING:  # a module `__getattr__` would make type checkers accept any name
    __getattr__ = lazy_exports(__name__, _WHERE)

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
