"""Picking a session to resume: the most recent one, the few newest for a picker (each
named from a 4 KB prefix of its file), and the session a resume argument names."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Literal

import orjson

from sessiontree.errors import AmbiguousSessionError
from sessiontree.format import file_session_id
from sessiontree.layout import is_safe_name, store_parts
from sessiontree.listing._listing import (
    EPOCH,
    SessionInfo,
    collect,
    list_all_sessions,
    local_dirs,
    session_info,
)
from sessiontree.listing._marks import UNTRUSTED, Stat, read_start_ns, stat_dir
from sessiontree.storage import SessionStorage, StorageStat, default_storage

# The scanner and its fold are imported where a file is read: the store imports this
# module, and a listing from the kept rows reads none (see `_listing`).
if TYPE_CHECKING:
    from sessiontree.format import MetaFold

__all__ = [
    "PREFIX_BYTES",
    "RecentSessionInfo",
    "ResolvedSessionMatch",
    "find_most_recent_session",
    "get_recent_sessions",
    "resolve_resumable_session",
]

PREFIX_BYTES = 4096
"""How much of each file the light lookups (recent sessions, most recent) read."""

NAME_WIDTH = 40
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class RecentSessionInfo:
    """Light metadata for a session picker (from a 4 KB prefix of the file)."""

    path: str
    mtime: datetime
    full_name: str
    """Title, else first user prompt, else the session id (first line, no control chars)."""
    name: str
    """`full_name` cut to 40 characters, "…" being the 40th when cut."""
    time_ago: str
    """"just now", "5m ago", "3h ago", "2d ago", else the local date ("2026-02-16")."""


@dataclass(frozen=True, slots=True)
class ResolvedSessionMatch:
    """A resume argument's session and where it was found."""

    session: SessionInfo
    scope: Literal["local", "global"]


# ---------------------------------------------------------------------------- light lookups


def _by_mtime(session_dir: str, storage: SessionStorage) -> list[Stat]:
    stats = stat_dir(os.path.abspath(session_dir), storage, read_start_ns())
    stats.sort(key=lambda s: (s[2], s[0]), reverse=True)
    return stats


def _prefix_fold(storage: SessionStorage, path: str) -> tuple[MetaFold, bytes] | None:
    from sessiontree.listing._scan import scan_chunks

    try:
        data = storage.read_text_prefix(path, PREFIX_BYTES).encode("utf-8", "surrogatepass")
    except (OSError, UnicodeError):
        return None
    _, _, final, _, _, _ = scan_chunks((data,), len(data), 0, None, None)
    return final, data


def find_most_recent_session(
    session_dir: str,
    storage: SessionStorage | None = None,
    *,
    skip: Callable[[str], bool] | None = None,
) -> str | None:
    """The newest (by mtime) session file in `session_dir` with a valid header, or None.

    `skip(path)` passes over candidates (continue_recent skips sessions that another
    live process is writing).
    """
    from sessiontree.format import SESSION

    storage = default_storage(storage)
    for path, *_ in _by_mtime(session_dir, storage):
        if skip is not None and skip(path):
            continue
        found = _prefix_fold(storage, path)
        if found is not None and found[0].state == SESSION:
            return path
    return None


def _clean_name(value: str | None) -> str:
    if not value:
        return ""
    first = value.replace("\r\n", "\n").split("\n", 1)[0]
    return _CONTROL.sub("", first).strip()


_ROLE_USER = re.compile(rb'"role"\s*:\s*"user"')
_TEXT_START = re.compile(rb'"(?:content|text)"\s*:\s*"')


def _fragment_user_text(data: bytes) -> str:
    """The start of a user prompt whose line the 4 KB prefix cut off."""
    role = _ROLE_USER.search(data)
    if role is None:
        return ""
    start = _TEXT_START.search(data, role.end())
    if start is None:
        return ""
    body = data[start.end() :]
    end = re.search(rb'(?<!\\)(?:\\\\)*"', body)
    if end is not None:
        body = body[: end.end() - 1]
    for cut in range(7):  # drop a partial escape sequence at the cut (a lone surrogate too)
        try:
            value = orjson.loads(b'"' + body[: len(body) - cut] + b'"')
        except orjson.JSONDecodeError:
            continue
        return value if isinstance(value, str) else ""
    return ""


def _time_ago(moment: datetime, now: float | None = None) -> str:
    seconds = (now if now is not None else time.time()) - moment.timestamp()
    minutes = int(seconds // 60)
    if minutes < 1:
        return "just now"
    if minutes < 60:
        return f"{minutes}m ago"
    hours = minutes // 60
    if hours < 24:
        return f"{hours}h ago"
    days = hours // 24
    if days < 7:
        return f"{days}d ago"
    return moment.astimezone().strftime("%Y-%m-%d")


def _short_name(full: str) -> str:
    return full if len(full) <= NAME_WIDTH else full[: NAME_WIDTH - 1] + "…"


def get_recent_sessions(
    session_dir: str, limit: int = 3, storage: SessionStorage | None = None
) -> list[RecentSessionInfo]:
    """The `limit` newest sessions in `session_dir`, named from a 4 KB prefix of each."""
    from sessiontree.format import SESSION

    storage = default_storage(storage)
    recent: list[RecentSessionInfo] = []
    if limit <= 0:
        return recent
    now = time.time()
    for path, _, mtime_ns, *_ in _by_mtime(session_dir, storage):
        found = _prefix_fold(storage, path)
        if found is None or found[0].state != SESSION:
            continue
        fold, data = found
        session_id = fold.header_id or ""
        full = (
            _clean_name(fold.title())
            or _clean_name(fold.first_message)
            or (
                _clean_name(_fragment_user_text(data[data.rfind(b"\n") + 1 :]))
                if fold.first_message is None
                else ""
            )
            or _clean_name(session_id)
            or session_id
        )
        mtime = EPOCH + timedelta(microseconds=mtime_ns // 1000)
        recent.append(
            RecentSessionInfo(path, mtime, full, _short_name(full), _time_ago(mtime, now))
        )
        if len(recent) >= limit:
            break
    return recent


# ---------------------------------------------------------------------------- resume


def _match_kind(info: SessionInfo, arg: str, asked: str) -> int:
    """3 = the id exactly as `asked` (pi 1.6's custom ids tell case apart), 2 = exact,
    1 = prefix, 0 = no match (case-insensitive, `arg` being `asked` lowercased)."""
    stem = os.path.basename(info.path)
    stem = stem[: -len(".jsonl")] if stem.endswith(".jsonl") else stem
    file_id = file_session_id(stem)
    if asked in (info.id, file_id):
        return 3
    session_id = info.id.lower()
    stem = stem.lower()
    file_id = file_id.lower() if file_id is not None else None
    if arg in (session_id, stem, file_id):
        return 2
    if session_id.startswith(arg) or stem.startswith(arg):
        return 1
    if file_id is not None and file_id.startswith(arg):
        return 1
    return 0


def _pick(sessions: list[SessionInfo], arg: str, asked: str) -> SessionInfo | None:
    same: list[SessionInfo] = []
    exact: list[SessionInfo] = []
    prefix: list[SessionInfo] = []
    for info in sessions:
        kind = _match_kind(info, arg, asked)
        if kind == 3:
            same.append(info)
        elif kind == 2:
            exact.append(info)
        elif kind == 1:
            prefix.append(info)
    if same:
        return same[0]  # newest of the files holding that exact id
    # pi tells case apart in prefixes too (`id.startsWith(arg)`): a prefix as spelled
    # wins over an id that differs in case (`build` is build-fix's start, not Build)
    spelled = [info for info in prefix if _starts_as_spelled(info, asked)]
    if exact and not spelled:
        return exact[0]
    prefix = spelled or prefix
    if len({info.id for info in prefix}) > 1:
        raise AmbiguousSessionError(arg, prefix)
    return prefix[0] if prefix else None


def _starts_as_spelled(info: SessionInfo, asked: str) -> bool:
    """Whether `asked`, case and all, starts the session's id, file name or its id."""
    stem = os.path.basename(info.path).removesuffix(".jsonl")
    names = (info.id, stem, file_session_id(stem) or "")
    return any(name.startswith(asked) for name in names)


def _direct_path(arg: str, cwd: str, storage: SessionStorage) -> tuple[str, StorageStat] | None:
    """`arg` as the path of an existing `.jsonl` file (relative to `cwd`), with its stat."""
    if not arg.endswith(".jsonl"):
        return None
    path = os.path.expanduser(arg)
    if not os.path.isabs(path):
        path = os.path.join(cwd, path)
    path = os.path.normpath(path)
    try:
        if not storage.exists(path):
            return None
        return path, storage.stat(path)
    except (OSError, ValueError):
        return None


def resolve_resumable_session(
    session_arg: str,
    cwd: str,
    session_dir: str | None = None,
    storage: SessionStorage | None = None,
    agent_dir: str | None = None,
) -> ResolvedSessionMatch | None:
    """Find the session a resume argument names.

    The argument is a path to an existing `.jsonl` session file, or a
    case-insensitive prefix of a session id, of a file name, or of the id part
    after the file name's last `_`. The cwd's sessions (or `session_dir`'s) are
    searched first, then every project (not when `session_dir` is given). An id as
    spelled beats all, then a prefix as spelled (pi tells case apart), then an id
    that differs in case, then other prefixes; several sessions matching a prefix in
    the same scope raise `AmbiguousSessionError`. Anything else that is not a plain name (path
    separators, `..`, control characters) matches nothing.
    """
    parts = store_parts(storage, agent_dir)
    storage = parts.storage
    if not isinstance(session_arg, str) or not session_arg or "\x00" in session_arg:
        return None
    dirs = local_dirs(cwd, parts, session_dir)
    found = _direct_path(session_arg, cwd, storage)
    if found is not None:
        direct, stat = found
        mtime_ns = stat.mtime_ns or int(stat.mtime_ms * 1e6)
        from sessiontree.listing._scan import rescan

        record = rescan(storage, (direct, stat.size, mtime_ns, stat.ino, UNTRUSTED), None)
        info = session_info(record, direct, storage) if record is not None else None
        if info is None:
            return None
        local = {os.path.abspath(d) for d in dirs}
        scope: Literal["local", "global"] = (
            "local" if os.path.dirname(direct) in local else "global"
        )
        return ResolvedSessionMatch(info, scope)
    if not is_safe_name(session_arg):
        return None
    asked = session_arg
    if asked.lower().endswith(".jsonl") and len(asked) > len(".jsonl"):
        asked = asked[: -len(".jsonl")]  # a file name given without its directory
    arg = asked.lower()
    match = _pick(collect(dirs, parts), arg, asked)
    if match is not None:
        return ResolvedSessionMatch(match, "local")
    if session_dir is not None:
        return None
    match = _pick(list_all_sessions(parts), arg, asked)
    return ResolvedSessionMatch(match, "global") if match is not None else None
