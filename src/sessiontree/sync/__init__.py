"""Two-way sync of stores between machines through a hub (a shared directory or a
PostgreSQL database): pi-format sessions merged entry by entry, other agents' sessions
carried read-only. docs/sync.md says what a user runs; docs/architecture.md the layout.
"""

from __future__ import annotations

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
    "LEAF_MARKER",
    "SYNCED_AGENTS",
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
    "sync",
    "sync_status",
]
