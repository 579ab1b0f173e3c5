"""The session metadata that every write keeps in a file's row, folded from its lines."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

from sessiontree.format import AWAITING_HEADER, NOT_A_SESSION, SESSION, MetaFold

# meta_state: what the lines so far make of the file, as the loader reads it.
_AWAITING_HEADER: Final = AWAITING_HEADER
_SESSION: Final = SESSION
_NOT_A_SESSION: Final = NOT_A_SESSION


class _Scan(MetaFold):
    """The metadata fold (`sessiontree.format.MetaFold`, the file listing's too) over a
    stored file's complete lines, one at a time, counting them."""

    __slots__ = ("line_no",)

    def __init__(self, state: int = _AWAITING_HEADER, line_no: int = 0) -> None:
        super().__init__(state)
        self.line_no = line_no

    def feed(self, raw: bytes) -> str | None:
        """Fold one line (without its newline); returns its message text, if any."""
        self.line_no += 1
        return self.fold_line(raw, self.line_no == 1)


_UNSTORABLE: Final = re.compile("[\x00\ud800-\udfff]")


def _pg_text(value: str | None) -> str | None:
    """`value` as a PostgreSQL text holds it: a NUL or a lone surrogate (JSON.parse
    accepts both, a text column neither) becomes U+FFFD."""
    if value is None or _UNSTORABLE.search(value) is None:
        return value
    return _UNSTORABLE.sub("\ufffd", value)


def _texts(texts: Iterable[str | None]) -> str | None:
    """The message texts of one write, as its `msg_text`."""
    return _pg_text(" ".join(t for t in texts if t)) or None


def _meta_params(scan: _Scan) -> dict[str, Any]:
    return {
        "state": scan.state,
        "hid": _pg_text(scan.header_id),
        "cwd": _pg_text(scan.cwd),
        "slot": scan.slot,
        "stitle": _pg_text(scan.slot_title),
        "htitle": _pg_text(scan.header_title),
        "tsrc": _pg_text(scan.title_source),
        "name": _pg_text(scan.name),
        "short": _pg_text(scan.short_summary),
        "psess": _pg_text(scan.parent_session),
        "created": _pg_text(scan.created),
        "first": _pg_text(scan.first_message),
        "act": scan.activity,
    }
