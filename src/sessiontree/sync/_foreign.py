"""Other agents' sessions through a hub, read-only: this machine's Claude Code, Codex,
Gemini CLI, Copilot CLI and OpenCode files mirrored byte for byte into the hub
(`push_foreign`), and the other machines' written where this one reads them as stores
(`pull_foreign`), never into an agent's own dir (the agent would take them as its own).

**Sent.** Each file under a store's session dirs goes to `foreign/<machine>/<agent>/
<path under the store's home>`. A file whose identity (device, inode, size, mtime) is
the one remembered is not read. A `.jsonl` log that only grew (same inode, larger, its
last bytes before the old end unchanged) sends its new bytes, appended to the hub copy
once that copy is checked to be the size remembered; anything else (a JSON document
rewritten in place, a new file) is read whole and replaces the hub copy atomically. An
OpenCode database's session goes as the document the archive makes of it (one read
transaction: one committed state), sent when the database says it changed. Each hub
file written is named in this machine's journal (`{"log", "size", "mtimeNs"}`), so the
other machines find what changed without listing the hub.

**Received.** For every other machine, its journal is read from where this machine
stopped; each file it names is checked (`parse_foreign_log`) and brought into the view:
its new bytes appended when the view's copy and the hub's are still the ones
remembered, else written whole. An OpenCode document is also written as OpenCode's JSON
files, which its reader reads. The view keeps each file's modification time as on its
machine (the listings sort by it).

Here: what both sides share (the counts, the stores a push reads, the journal's path);
`_foreign_push` and `_foreign_pull` do them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["ForeignCounts", "ForeignSource", "journal_path"]


class ForeignSource(Protocol):
    """A store of another agent on this machine, as `find_stores` gives it."""

    @property
    def agent(self) -> str: ...
    @property
    def home(self) -> str: ...
    @property
    def archive_roots(self) -> tuple[str, ...]: ...
    @property
    def machine(self) -> str | None: ...


@dataclass(slots=True)
class ForeignCounts:
    """What one push or pull of other agents' files did."""

    files_sent: int = 0
    bytes_sent: int = 0
    files_received: int = 0
    bytes_received: int = 0
    files_read: int = 0
    """Files read (local ones by a push, hub ones by a pull), wholly or in part."""
    bytes_read: int = 0
    notes: list[str] = field(default_factory=list)
    """What was passed over, and why (a name refused, a symlink, a file that changed)."""


def journal_path(hub_root: str, machine: str) -> str:
    return os.path.join(hub_root, "machines", machine, "journal.jsonl")
