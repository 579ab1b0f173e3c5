"""What a reader returns: the converted session and what it knows about its source."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from sessiontree.errors import SessionTreeError
from sessiontree.foreign._records import Damaged, iso
from sessiontree.format import Entry, ExtraUsage, new_header
from sessiontree.session import SessionManager

__all__ = ["ForeignSession", "ForeignSubsession", "NotAForeignSessionError", "Source"]

Source = Literal["claude", "codex", "opencode", "gemini", "copilot"]


class NotAForeignSessionError(SessionTreeError):
    """The file is not a session of the agent it was read as (nothing was read)."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"{path}: not a {what} session file")
        self.path = path


@dataclass(slots=True)
class ForeignSubsession:
    """A subagent's or sidechain's conversation, kept beside its session (an import
    writes it into the new session's artifacts dir, as oh-my-pi keeps its subagents)."""

    key: str
    """The agent id (Claude Code v2 subagent files, Codex threads) or the uuid of the
    sidechain's first line (sidechains written inline, Claude Code 1.x)."""
    manager: SessionManager
    name: str | None
    source_path: str
    tool_call_id: str | None = None
    """The tool call that started it, where the source says (or it can be matched)."""


@dataclass(slots=True)
class ForeignSession:
    """Another agent's session read as a v3 tree in an in-memory SessionManager."""

    source: Source
    source_id: str
    path: str
    cwd: str
    created_ms: int
    manager: SessionManager
    name: str | None = None
    name_source: str = "auto"
    parent_source_id: str | None = None
    """The source session this one was forked from (Claude Code `forkedFrom`, Codex
    `forked_from_id`); the import's `parentSession` names it."""
    subsessions: list[ForeignSubsession] = field(default_factory=list)
    damaged: list[Damaged] = field(default_factory=list)
    """Lines that were skipped because they are not JSON objects."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Known line kinds deliberately not converted, with their counts."""
    size: int = 0
    """Bytes of the source file that were read."""
    extra_usage_of: Callable[[], ExtraUsage] = field(default=ExtraUsage, repr=False, compare=False)
    """Finds `extra_usage` (once: a reader's work, done only when asked)."""

    @property
    def extra_usage(self) -> ExtraUsage:
        """What the source says of the session's usage that its entries (pi's format)
        do not hold: the usage report counts it (`storage.ForeignStorage.extra_usage`);
        no view or import of the session shows or writes it."""
        return self.extra_usage_of()

    def header(self, parent_session: str | None = None) -> Entry:
        """A v3 header for reading the session in place: the source's id and start time."""
        parent = parent_session if parent_session is not None else self.parent_source_id
        return new_header(
            self.cwd,
            parent or None,
            title=self.name or None,
            title_source=self.name_source if self.name else None,
            session_id=self.source_id,
            timestamp=iso(self.created_ms),
        )

    def import_record(self) -> dict[str, Any]:
        """The data of the `foreign_session_import` custom entry (oh-my-pi's four keys)."""
        return {
            "source": self.source,
            "sourceId": self.source_id,
            "sourcePath": self.path,
            "sourceCwd": self.cwd,
        }
