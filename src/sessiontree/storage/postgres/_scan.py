"""The session metadata that every write keeps in a file's row, folded from its lines."""

from __future__ import annotations

from typing import Any, Final

from sessiontree.format import (
    content_text,
    entry_name,
    head_kind,
    head_title_source,
    loads_line,
    parse_iso_ms,
)

_BOM: Final = b"\xef\xbb\xbf"


# meta_state: what the lines so far make of the file, as the loader reads it.
_AWAITING_HEADER: Final = 0
_SESSION: Final = 1
_NOT_A_SESSION: Final = 2


class _Scan:
    """Session metadata folded from complete lines, with the loader's rules."""

    __slots__ = (
        "activity",
        "created",
        "cwd",
        "first_message",
        "header_id",
        "header_title",
        "line_no",
        "messages",
        "name",
        "name_set",
        "parent_session",
        "short_summary",
        "slot",
        "slot_source",
        "slot_title",
        "state",
        "title_source",
    )

    def __init__(self, state: int = _AWAITING_HEADER, line_no: int = 0) -> None:
        self.state = state
        self.line_no = line_no
        self.header_id: str | None = None
        self.cwd: str | None = None
        self.header_title: str | None = None
        self.title_source: str | None = None
        self.parent_session: str | None = None
        self.created: str | None = None
        self.slot = False
        self.slot_title: str | None = None
        self.slot_source: str | None = None
        self.name: str | None = None  # the latest session_info name / title_change title
        self.name_set = False  # whether the lines fed set (or cleared) `name`
        self.short_summary: str | None = None  # the latest compaction shortSummary
        self.messages = 0
        self.first_message: str | None = None
        self.activity: int | None = None

    def feed(self, raw: bytes) -> str | None:
        """Fold one line (without its newline); returns its message text, if any."""
        self.line_no += 1
        if self.state == _NOT_A_SESSION:
            return None
        if self.line_no == 1 and raw.startswith(_BOM):
            raw = raw[3:]
        if not raw or raw.isspace():
            return None
        try:
            value = loads_line(raw)
        except (ValueError, UnicodeError, RecursionError):
            return None
        if not isinstance(value, dict):
            return None
        if self.state == _AWAITING_HEADER:
            self._header(value)
            return None
        kind = value.get("type")
        if kind != "message":
            name = entry_name(value)
            if name is not None:  # the latest name entry decides; a blank one clears
                self.name, self.name_set = name, True
            elif kind == "compaction":
                short = value.get("shortSummary")
                if isinstance(short, str):
                    self.short_summary = short
            return None
        self.messages += 1
        message = value.get("message")
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return None
        stamp = message.get("timestamp")
        if isinstance(stamp, (int, float)) and not isinstance(stamp, bool):
            at: int | None = int(stamp)
        else:
            at = parse_iso_ms(value.get("timestamp"))
        if at is not None and (self.activity is None or at > self.activity):
            self.activity = at
        text = content_text(message.get("content"))
        if text and self.first_message is None and message.get("role") == "user":
            self.first_message = text
        return text or None

    def _header(self, value: dict[str, Any]) -> None:
        kind = head_kind(value, self.line_no == 1)
        if kind == "slot":
            self.slot = True
            self.slot_title = value.get("title")
            source = value.get("source")
            self.slot_source = self.title_source = source if isinstance(source, str) else None
            return
        if kind == "invalid":
            self.state = _NOT_A_SESSION
            return
        self.state = _SESSION

        def text(key: str) -> str | None:
            item = value.get(key)
            return item if isinstance(item, str) else None

        self.header_id = text("id")
        self.cwd = text("cwd")
        self.parent_session = text("parentSession")
        self.created = text("timestamp")
        self.header_title = text("title")
        self.title_source = head_title_source(self.slot, self.slot_source, value.get("titleSource"))


def _meta_params(scan: _Scan) -> dict[str, Any]:
    return {
        "state": scan.state,
        "hid": scan.header_id,
        "cwd": scan.cwd,
        "slot": scan.slot,
        "stitle": scan.slot_title,
        "htitle": scan.header_title,
        "tsrc": scan.title_source,
        "name": scan.name,
        "short": scan.short_summary,
        "psess": scan.parent_session,
        "created": scan.created,
        "first": scan.first_message,
        "act": scan.activity,
    }
