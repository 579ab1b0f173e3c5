"""What a sync round says it did (`SyncReport`), what a hub says of each machine
(`MachineStatus`), and the errors a sync raises."""

from __future__ import annotations

from dataclasses import dataclass, field

from sessiontree.errors import SessionTreeError
from sessiontree.sync._foreign import ForeignCounts

__all__ = [
    "HubError",
    "MachineNameTakenError",
    "MachineStatus",
    "NotAHubError",
    "SyncBusyError",
    "SyncReport",
    "SyncStateError",
]


class HubError(SessionTreeError):
    """The hub cannot be used (unreachable, full, read-only, damaged): the message names
    it. Raised before anything local is written, or between two sessions' writes (each
    session written is whole)."""


class NotAHubError(HubError):
    """The location holds something that is not a hub (a non-empty dir without
    `sessiontree-hub.json`), or a hub of a newer version."""


class MachineNameTakenError(HubError):
    """Another machine (another machine id) already syncs under this machine name."""


class SyncBusyError(SessionTreeError):
    """Another sync with the same hub is running on this machine."""


class SyncStateError(SessionTreeError):
    """This machine's sync state (its id) cannot be read or made."""


@dataclass(slots=True)
class SyncReport:
    """What one round did. Sent: this machine's lines put in the hub; received: other
    machines' lines written into this machine's session files."""

    machine: str
    hub: str
    """The hub's location, without a password."""
    sent_sessions: int = 0
    sent_lines: int = 0
    sent_bytes: int = 0
    sent_blobs: int = 0
    received_sessions: int = 0
    received_lines: int = 0
    received_bytes: int = 0
    received_blobs: int = 0
    created: list[str] = field(default_factory=list)
    """Local session files this round made (sessions first seen on another machine)."""
    merged: list[str] = field(default_factory=list)
    """Local session files this round appended other machines' entries to."""
    leaf_markers: list[str] = field(default_factory=list)
    """Local session files given a leaf marker (they had diverged; docs/sync.md)."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(what, why): files, lines and hub entries left alone this round."""
    bytes_read: int = 0
    """Bytes of local session files read (the cost of the round)."""
    other_sent: ForeignCounts = field(default_factory=ForeignCounts)
    """Other agents' files (read-only mirrors) this machine put in the hub."""
    other_received: ForeignCounts = field(default_factory=ForeignCounts)
    """Other machines' files of other agents brought into this machine's views."""
    elapsed: float = 0.0
    """Seconds the round took."""

    @property
    def changed(self) -> bool:
        """Whether the round moved anything either way."""
        return bool(
            self.sent_lines
            or self.received_lines
            or self.sent_blobs
            or self.created
            or self.other_sent.files_sent
            or self.other_received.files_received
        )

    def note(self, what: str, why: str) -> None:
        self.skipped.append((what, why))

    def to_json(self) -> dict[str, object]:
        """The report as `sync --json` prints it."""
        return {
            "machine": self.machine,
            "hub": self.hub,
            "sent": {
                "sessions": self.sent_sessions,
                "lines": self.sent_lines,
                "bytes": self.sent_bytes,
                "blobs": self.sent_blobs,
            },
            "received": {
                "sessions": self.received_sessions,
                "lines": self.received_lines,
                "bytes": self.received_bytes,
                "blobs": self.received_blobs,
            },
            "created": self.created,
            "merged": self.merged,
            "leafMarkers": self.leaf_markers,
            "skipped": [{"what": w, "why": y} for w, y in self.skipped],
            "otherAgents": {
                "sent": {
                    "files": self.other_sent.files_sent,
                    "bytes": self.other_sent.bytes_sent,
                },
                "received": {
                    "files": self.other_received.files_received,
                    "bytes": self.other_received.bytes_received,
                },
            },
            "bytesRead": self.bytes_read + self.other_sent.bytes_read,
            "seconds": round(self.elapsed, 3),
        }


@dataclass(frozen=True, slots=True)
class MachineStatus:
    """What a machine's last round that changed anything wrote to the hub."""

    machine: str
    last_round: str | None
    """ISO time of that round (the machine's clock), None if it never finished one."""
    sent_sessions: int = 0
    sent_lines: int = 0
    sent_bytes: int = 0
    received_sessions: int = 0
    received_lines: int = 0
    received_bytes: int = 0
    version: str | None = None
    """The sessiontree version that wrote it."""
    other_sent_files: int = 0
    """Other agents' files (read-only mirrors) it put in the hub, and their bytes."""
    other_sent_bytes: int = 0
    other_received_files: int = 0
    """Other machines' files of other agents it brought into its views."""
    other_received_bytes: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "machine": self.machine,
            "lastRound": self.last_round,
            "sent": {
                "sessions": self.sent_sessions,
                "lines": self.sent_lines,
                "bytes": self.sent_bytes,
                "otherFiles": self.other_sent_files,
                "otherBytes": self.other_sent_bytes,
            },
            "received": {
                "sessions": self.received_sessions,
                "lines": self.received_lines,
                "bytes": self.received_bytes,
                "otherFiles": self.other_received_files,
                "otherBytes": self.other_received_bytes,
            },
            "version": self.version,
        }
