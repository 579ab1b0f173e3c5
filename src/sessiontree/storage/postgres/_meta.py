"""The listing: a session's metadata from its row's columns alone (no content read).

Every write keeps the columns up to date (`_scan` folds the lines); listing a
directory of sessions is one query (`Statements.meta_dir`, `meta_tree`) and this
conversion per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from sessiontree.format import session_title
from sessiontree.storage._base import SessionMeta
from sessiontree.storage.postgres._scan import _SESSION

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def server_time(mtime_ns: int) -> datetime:
    """A time in ns from the server's clock as an aware datetime (microseconds)."""
    return _EPOCH + timedelta(microseconds=mtime_ns // 1000)


def session_meta(row: Sequence[Any], path: str, with_text: bool) -> SessionMeta:
    """The metadata in `row` (`_sql._META_COLUMNS`, then the text if `with_text`)."""
    mtime_ns = int(row[3])
    common: dict[str, Any] = {
        "path": path,
        "size": int(row[1]),
        "line_count": int(row[2]),
        "mtime": server_time(mtime_ns),
        "mtime_ns": mtime_ns,
        "ino": int(row[18]),
    }
    if row[4] != _SESSION:
        return SessionMeta(valid=False, **common)
    return SessionMeta(
        valid=True,
        id=row[5],
        cwd=row[6],
        title=session_title(*row[7:12]),
        title_source=row[12],
        parent_session=row[13],
        created=row[14],
        message_count=int(row[15]),
        first_message=row[16],
        last_activity_ms=int(row[17]) if row[17] is not None else None,
        all_messages_text=(row[19] or "") if with_text else None,
        **common,
    )
