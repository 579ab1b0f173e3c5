"""What every view says of an open session: the title it is shown by and its count of
messages (`docs/cli.md`, "One summary of a session", gives the rules).

`list` reads these from the listing row; the row of another agent's file is computed
here, from the session as it is read, so that `list`, `show`, `tree`, the exports and
the web pages say the same of every session.
"""

from __future__ import annotations

from sessiontree.format import (
    SHORT_TITLE_CHARS,
    Entry,
    clean_title,
    content_text,
    is_typed_prompt,
    shown_title,
)
from sessiontree.session._manager import SessionManager

__all__ = ["file_size", "message_count", "session_shown_title", "title_parts"]


def message_count(sm: SessionManager) -> int:
    """The session's messages: every message entry of the file, on every branch (a
    prompt, a reply, a tool result, ...), as pi's own listing counts them."""
    return len(sm.get_tree_shape().of_kind("message"))


def file_size(sm: SessionManager) -> int | None:
    """The bytes of the session's file(s) as its storage states them (for another
    agent's session: its transcript's, not the view's); None for a session in memory or
    a file that cannot be read."""
    path = sm.get_session_file()
    if path is None:
        return None
    try:
        return sm._storage.stat(path).size
    except (OSError, ValueError):
        return None


def title_parts(sm: SessionManager) -> tuple[str | None, str | None]:
    """(title, first prompt) as a listing row keeps them (`SessionInfo.title`,
    `first_message`): the name, else the last compaction's short summary; the first
    user message that is a typed prompt (`format.is_typed_prompt`), else the first user
    message with text. The prompt is looked for only when the title is blank. Reads only
    the entries it looks at (from the end for the summary, from the start for the
    message)."""
    title: str | None = sm.get_session_name()
    shape = sm.get_tree_shape()
    if not title:
        compactions = shape.of_kind("compaction")
        compactions.reverse()
        last = shape.first(compactions, lambda e: _short_summary(e) is not None)
        title = _short_summary(last) if last is not None else None
    if clean_title(title):
        return title, None
    messages = shape.of_kind("message")
    found = shape.first(messages, lambda e: is_typed_prompt(_user_text(e)))
    if found is None:
        found = shape.first(messages, lambda e: _user_text(e) is not None)
    return title, _user_text(found) if found is not None else None


def session_shown_title(sm: SessionManager, width: int | None = SHORT_TITLE_CHARS) -> str:
    """The title the session is shown by everywhere (`format.shown_title` of
    `title_parts`); shortened to `width` (None: whole)."""
    title, first = title_parts(sm)
    return shown_title(title, first, sm.get_session_id(), width)


def _short_summary(entry: Entry) -> str | None:
    short = entry.get("shortSummary")
    return short if isinstance(short, str) and short.strip() else None


def _user_text(entry: Entry) -> str | None:
    message = entry.get("message")
    if isinstance(message, dict) and message.get("role") == "user":
        return content_text(message.get("content")) or None
    return None
