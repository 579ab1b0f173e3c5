"""Other agents' sessions: Claude Code and Codex transcripts read as v3 session trees.

* `read_claude_session(path)`, `read_codex_session(path)`: one file as a
  `ForeignSession`, whose `manager` is an in-memory `SessionManager`;
* `ForeignStore`: where an agent keeps its sessions, listed from the ends of each file;
  `ForeignStorage`: such a store, read-only, through the `SessionStorage` protocol;
* `import_session`: a copy in this agent's store (`find_imports`: earlier ones).
"""

from __future__ import annotations

from ._model import ForeignSession, ForeignSubsession, NotAForeignSessionError
from ._records import Damaged
from .claude import read_claude_session
from .codex import read_codex_session
from .importer import (
    AlreadyImportedError,
    EarlierImport,
    ImportedSession,
    find_imports,
    import_session,
)
from .storage import ForeignStorage
from .store import ForeignStore, detect_agent

__all__ = [
    "AlreadyImportedError",
    "Damaged",
    "EarlierImport",
    "ForeignSession",
    "ForeignStorage",
    "ForeignStore",
    "ForeignSubsession",
    "ImportedSession",
    "NotAForeignSessionError",
    "detect_agent",
    "find_imports",
    "import_session",
    "read_claude_session",
    "read_codex_session",
]
