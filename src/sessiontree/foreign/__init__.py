"""Other agents' sessions: Claude Code, Codex, OpenCode, Gemini CLI and Copilot CLI
sessions read as v3 session trees.

* `read_claude_session(path)`, `read_codex_session(path)`, `read_gemini_session(path)`,
  `read_copilot_session(path)`, `read_opencode_export(path)` (and, through a
  `ForeignStore`, OpenCode's database and JSON files): one session as a
  `ForeignSession`, whose `manager` is an in-memory `SessionManager`;
  `detect_file(path)` says whose session a file is;
* `ForeignStore`: where an agent keeps its sessions, listed from the ends of each file
  (on this host, or Claude Code's layout in a database: `ForeignStore.on_storage`);
  `ForeignStorage`: such a store, read-only, through the `SessionStorage` protocol;
* `import_session`: a copy in this agent's store (`find_imports`: earlier ones).
"""

from __future__ import annotations

from sessiontree.foreign._model import ForeignSession, ForeignSubsession, NotAForeignSessionError
from sessiontree.foreign._records import Damaged
from sessiontree.foreign.agents import detect_file
from sessiontree.foreign.claude import read_claude_session
from sessiontree.foreign.codex import read_codex_session
from sessiontree.foreign.copilot import read_copilot_session
from sessiontree.foreign.gemini import read_gemini_session
from sessiontree.foreign.importer import (
    AlreadyImportedError,
    EarlierImport,
    ImportedSession,
    find_imports,
    import_session,
)
from sessiontree.foreign.opencode import read_opencode_export
from sessiontree.foreign.storage import ForeignStorage
from sessiontree.foreign.store import ForeignStore, detect_agent

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
    "detect_file",
    "find_imports",
    "import_session",
    "read_claude_session",
    "read_codex_session",
    "read_copilot_session",
    "read_gemini_session",
    "read_opencode_export",
]
