"""Two-way sync of stores between machines through a hub (a shared directory or a
PostgreSQL database): pi-format sessions merged entry by entry, other agents' sessions
carried read-only. docs/sync.md says what a user runs; docs/architecture.md the layout.
"""

from __future__ import annotations

from sessiontree.sync._foreign import ForeignCounts, ForeignSource, journal_path
from sessiontree.sync._foreign_paths import FOREIGN_SYNCED
from sessiontree.sync._foreign_pull import pull_foreign
from sessiontree.sync._foreign_push import push_foreign
from sessiontree.sync._foreign_view import machine_views
from sessiontree.sync._lines import LEAF_MARKER
from sessiontree.sync._model import (
    HubError,
    MachineNameTakenError,
    MachineStatus,
    NotAHubError,
    SyncBusyError,
    SyncReport,
    SyncStateError,
)
from sessiontree.sync._names import (
    SYNCED_AGENTS,
    HubNameError,
    check_machine_name,
    default_machine_name,
    is_session_file_name,
)
from sessiontree.sync._round import sync, sync_status

__all__ = [
    "FOREIGN_SYNCED",
    "LEAF_MARKER",
    "SYNCED_AGENTS",
    "ForeignCounts",
    "ForeignSource",
    "HubError",
    "HubNameError",
    "MachineNameTakenError",
    "MachineStatus",
    "NotAHubError",
    "SyncBusyError",
    "SyncReport",
    "SyncStateError",
    "check_machine_name",
    "default_machine_name",
    "is_session_file_name",
    "journal_path",
    "machine_views",
    "pull_foreign",
    "push_foreign",
    "sync",
    "sync_status",
]
