"""Other agents' sessions: Claude Code and Codex transcripts read as v3 session trees."""

from __future__ import annotations

from ._model import ForeignSession, ForeignSubsession, NotAForeignSessionError
from ._records import Damaged
from .claude import read_claude_session
from .codex import read_codex_session

__all__ = [
    "Damaged",
    "ForeignSession",
    "ForeignSubsession",
    "NotAForeignSessionError",
    "read_claude_session",
    "read_codex_session",
]
