"""The metadata fold: what a session file's lines say about the session, for listings.

One pure fold (no I/O) reads a file's lines in order and keeps what a listing shows:
the header's id, cwd, time, title, title source and parent; oh-my-pi's title slot; the
latest name entry; the last compaction's short summary; the message count, the first
user prompt and the newest user/assistant message time. Both backends run it: the
file listing (`sessiontree.listing`, which saves a fold at the last complete line to
resume from when the file grows) and the PostgreSQL backend (which folds every write
into the file's row). So the two list a session alike, field by field.

The loader's rules: a blank, malformed or non-object line is skipped; a UTF-8 BOM
before the first line is ignored; the first line may be a title slot; the first other
object must be a session header, else the file is not a session and nothing after it
counts (`head_kind`). The title is decided by `session_title` (the rules in
`sessiontree.format._naming`).

A fold over part of a file is a delta its owner can merge: `messages` counts the
messages fed, `first_message` and `activity` are the first and newest of those,
`name_set` says whether a name entry was fed (PostgreSQL adds them to the stored row).

A user that shows no `activity` folds with a subclass whose `tracks_activity` is False
(the file listing: reading every message's time is 7% of a cold scan); every other
field is the same for both.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Final

from sessiontree.format._entries import content_text, parse_iso_ms
from sessiontree.format._jsonl import loads_line
from sessiontree.format._naming import entry_name, head_kind, head_title_source, session_title

__all__ = ["AWAITING_HEADER", "FOLD_FIELDS", "NOT_A_SESSION", "SESSION", "MetaFold"]

AWAITING_HEADER: Final = 0
"""No header yet: only blank or junk lines, perhaps a title slot."""
SESSION: Final = 1
"""The header was read: the file is a session."""
NOT_A_SESSION: Final = 2
"""The first object (after a title slot) is not a session header."""

FOLD_FIELDS: Final = (
    "state",
    "slot",
    "slot_title",
    "slot_source",
    "header_id",
    "cwd",
    "created",
    "header_title",
    "title_source",
    "parent_session",
    "name",
    "name_set",
    "short_summary",
    "messages",
    "first_message",
    "activity",
)
"""Every field of a fold, in the order `MetaFold.values` gives them."""

_BOM = b"\xef\xbb\xbf"
_TIME_LIMIT = 8_640_000_000_000_000
"""The largest time a JavaScript Date holds, in ms either side of the epoch."""
_UNPARSABLE = (ValueError, UnicodeError)  # what loads_line raises for a line that is not JSON

# The entry kinds the fold reads; any other line that starts with `{"type":"<kind>"`
# (as JSON.stringify writes every entry) is skipped without parsing unless it holds
# one of the markers, which covers nested or duplicate "type" keys, whitespace
# variants and \u-escaped type names.
_WANTED = frozenset({b"message", b"session_info", b"title_change", b"compaction"})
_MARKERS = (b'"message"', b'"session_info"', b'"title_change"', b'"compaction"', b"\\u")
_TYPE_PREFIX = b'{"type":"'
_MESSAGE_PREFIX = b'{"type":"message",'


def _text(value: dict[str, Any], key: str) -> str | None:
    item = value.get(key)
    return item if isinstance(item, str) else None


class MetaFold:
    """A session's listing metadata, folded from its lines (see the module docstring)."""

    __slots__ = FOLD_FIELDS

    tracks_activity: ClassVar[bool] = True
    """Whether `activity` is kept (else it stays None)."""

    def __init__(self, state: int = AWAITING_HEADER) -> None:
        self.state = state
        self.slot = False
        self.slot_title: str | None = None
        self.slot_source: str | None = None
        self.header_id: str | None = None
        self.cwd: str | None = None
        self.created: str | None = None
        """The header's `timestamp`, as written."""
        self.header_title: str | None = None
        self.title_source: str | None = None
        """ "user" or "auto": the slot's `source` when there is a slot, else the header's."""
        self.parent_session: str | None = None
        self.name: str | None = None
        """The latest session_info name / title_change title ("" when it cleared the name)."""
        self.name_set = False
        self.short_summary: str | None = None
        """The latest compaction's `shortSummary`."""
        self.messages = 0
        """Entries of type `message` (any role)."""
        self.first_message: str | None = None
        """The text of the first user message with text."""
        self.activity: int | None = None
        """The newest user/assistant message time, epoch ms: `message.timestamp`, else the
        entry's `timestamp`."""

    # -- saving (the listing cache keeps a fold to resume from)

    def values(self) -> list[Any]:
        """The fields, in `FOLD_FIELDS` order (JSON-serializable)."""
        return [
            self.state,
            self.slot,
            self.slot_title,
            self.slot_source,
            self.header_id,
            self.cwd,
            self.created,
            self.header_title,
            self.title_source,
            self.parent_session,
            self.name,
            self.name_set,
            self.short_summary,
            self.messages,
            self.first_message,
            self.activity,
        ]

    @classmethod
    def from_values(cls, values: object) -> MetaFold:
        """The fold `values()` gave; ValueError for anything else. (One assignment, not
        a loop: a fresh process loads thousands from the listing cache.)"""
        if type(values) is not list or len(values) != len(FOLD_FIELDS):
            raise ValueError("not a saved metadata fold")
        fold = cls.__new__(cls)
        (
            fold.state,
            fold.slot,
            fold.slot_title,
            fold.slot_source,
            fold.header_id,
            fold.cwd,
            fold.created,
            fold.header_title,
            fold.title_source,
            fold.parent_session,
            fold.name,
            fold.name_set,
            fold.short_summary,
            fold.messages,
            fold.first_message,
            fold.activity,
        ) = values
        if type(fold.state) is not int or type(fold.messages) is not int:
            raise ValueError("not a saved metadata fold")
        return fold

    def copy(self) -> MetaFold:
        fold = type(self).__new__(type(self))
        for name in FOLD_FIELDS:
            setattr(fold, name, getattr(self, name))
        return fold

    # -- what it says

    def title(self) -> str | None:
        """`SessionInfo.title` (`session_title`)."""
        return session_title(
            self.slot, self.slot_title, self.header_title, self.name, self.short_summary
        )

    # -- folding

    def fold_line(self, raw: bytes, first_line: bool) -> str | None:
        """Fold one line (without its newline; `first_line`: the file's physical first).
        Returns its message text (user or assistant), if any."""
        if self.state == NOT_A_SESSION:
            return None
        if first_line and raw.startswith(_BOM):
            raw = raw[3:]
        if not raw or raw.isspace():
            return None
        try:
            value = loads_line(raw)
        except _UNPARSABLE:
            return None
        if type(value) is not dict:
            return None
        if self.state == AWAITING_HEADER:
            self.fold_head(value, first_line)
            return None
        return self.fold_entry(value, True)

    def fold_head(self, value: dict[str, Any], first_line: bool) -> None:
        """Fold an object read before the header: the title slot, the header, or proof
        that the file is not a session."""
        kind = head_kind(value, first_line)
        if kind == "slot":
            self.slot = True
            self.slot_title = _text(value, "title")
            self.slot_source = self.title_source = _text(value, "source")
            return
        if kind == "invalid":
            self.state = NOT_A_SESSION
            return
        self.state = SESSION
        self.header_id = _text(value, "id")
        self.cwd = _text(value, "cwd")
        self.created = _text(value, "timestamp")
        self.header_title = _text(value, "title")
        self.title_source = head_title_source(self.slot, self.slot_source, value.get("titleSource"))
        self.parent_session = _text(value, "parentSession")

    def fold_entry(self, value: dict[str, Any], want_text: bool) -> str | None:
        """Fold one entry after the header. Returns a user/assistant message's text when
        `want_text` (else only while the first user message is still to come)."""
        kind = value.get("type")
        if kind != "message":
            name = entry_name(value)
            if name is not None:  # the latest name entry decides; a blank one clears
                self.name = name
                self.name_set = True
            elif kind == "compaction":
                short = value.get("shortSummary")
                if isinstance(short, str):
                    self.short_summary = short
            return None
        self.messages += 1
        if not want_text and self.first_message is not None and not self.tracks_activity:
            return None
        message = value.get("message")
        if type(message) is not dict:
            return None
        role = message.get("role")
        if role != "user" and role != "assistant":
            return None
        if self.tracks_activity:
            stamp = message.get("timestamp")
            if (
                type(stamp) is int or type(stamp) is float
            ) and -_TIME_LIMIT <= stamp <= _TIME_LIMIT:
                at: int | None = int(stamp)
            else:  # none, or no time (1e400 parses as inf; NaN compares false)
                at = parse_iso_ms(value.get("timestamp"))
            if at is not None and (self.activity is None or at > self.activity):
                self.activity = at
        if not want_text and self.first_message is not None:
            return None
        text = content_text(message.get("content"))
        if not text:
            return None
        if self.first_message is None and role == "user":
            self.first_message = text
        return text

    def fold_entries(self, lines: Iterable[bytes], texts: list[str] | None) -> None:
        """Fold complete lines after the header (`state` is SESSION), adding each
        message's text to `texts` when given: a listing's hot loop. A line of a kind the
        fold ignores is skipped unparsed (see `_WANTED`)."""
        message_prefix = _MESSAGE_PREFIX
        type_prefix = _TYPE_PREFIX
        wanted = _WANTED
        markers = _MARKERS
        fold_entry = self.fold_entry
        want = texts is not None
        # Only counting: no text wanted, the first prompt found, no times kept.
        counting = not want and self.first_message is not None and not self.tracks_activity
        count = 0
        value: Any
        for line in lines:
            if line.startswith(message_prefix):
                if counting:
                    try:
                        value = loads_line(line)
                    except _UNPARSABLE:
                        continue
                    if type(value) is dict:
                        if value.get("type") == "message":
                            count += 1
                        else:
                            fold_entry(value, want)
                    continue
            elif not line:
                continue
            elif (
                line.startswith(type_prefix)
                and line[9 : line.find(b'"', 9)] not in wanted
                and not any(m in line for m in markers)
            ):
                continue
            try:
                value = loads_line(line)
            except _UNPARSABLE:
                continue
            if type(value) is dict:
                text = fold_entry(value, want)
                if text is not None:
                    if texts is not None:
                        texts.append(text)
                    counting = (
                        not want and self.first_message is not None and not self.tracks_activity
                    )
        self.messages += count
