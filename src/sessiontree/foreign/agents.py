"""Where OpenCode, Gemini CLI and Copilot CLI keep their sessions, and how one is found.

* **OpenCode**: its data dir, `$XDG_DATA_HOME/opencode` (default
  `~/.local/share/opencode`): the database `opencode.db` (another release channel's
  is `opencode-<channel>.db`), each session named `<db>/<session id>`; and the JSON
  files of OpenCode before 1.2, `storage/session/<project>/<session id>.json` (a
  session also in the database is listed once, from the database, which OpenCode
  filled from those files).
* **Gemini CLI**: `$GEMINI_CLI_HOME/.gemini` (default `~/.gemini`),
  `tmp/<project>/chats/session-*.jsonl` (and the older `.json`; when a session has
  both, Gemini CLI resumed the `.json` into the `.jsonl`: that one is listed).
  Subagents' files (`chats/<parent id>/`) are read with their session.
* **Copilot CLI**: `$COPILOT_HOME` (default `~/.copilot`),
  `session-state/<session id>/events.jsonl`.

A `Backend` gives `ForeignStore` what differs: the roots, the sessions found in
them (`Located`: a path and the identity that changes when the session changes,
for the listing cache and the content index), a listing scan and a reader.
`detect_file` says whose session a single file is, by its first bytes.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sessiontree._util.env import copilot_home, gemini_home, opencode_home
from sessiontree._util.fs import open_read
from sessiontree.errors import SessionTreeError
from sessiontree.foreign._content import str_field
from sessiontree.foreign._model import ForeignSession, NotAForeignSessionError, Source
from sessiontree.foreign.copilot import is_copilot_event, read_copilot_session, scan_copilot
from sessiontree.foreign.gemini import is_gemini_document, read_gemini_session, scan_gemini
from sessiontree.foreign.listing import ForeignMeta
from sessiontree.foreign.opencode import (
    CHILD_DEPTH,
    OpenCodeSession,
    convert_opencode,
    is_default_title,
    load_opencode_export,
    load_opencode_json,
    read_opencode_export,
    read_opencode_json,
    storage_dir_of,
)
from sessiontree.foreign.opencode_db import (
    DatabaseError,
    DbListing,
    DbSession,
    describe_db_sessions,
    epoch_ms,
    is_opencode_db,
    list_db_sessions,
    load_db_session,
    session_bytes,
    split_db_path,
)
from sessiontree.format import loads_object
from sessiontree.listing import stat_identity

__all__ = ["BACKENDS", "Backend", "Located", "detect_file", "detect_store"]

log = logging.getLogger("sessiontree")

Identity = tuple[int, int, int, int]
"""What a listing is cached under (`listing.stat_identity` for one file; for a
session that is not one file, what changes with it: a database session's message
count, last update, the database's inode and its part count)."""
_HEAD = 64 * 1024


@dataclass(frozen=True, slots=True)
class Located:
    """A session of a store: its path and what changes when it does."""

    path: str
    identity: Identity
    size: int
    """Its bytes; -1 when only a scan knows (a database session)."""
    mtime_ns: int
    ino: int


def _located(path: str, st: os.stat_result) -> Located:
    identity = stat_identity(st)
    return Located(path, identity, st.st_size, st.st_mtime_ns, st.st_ino)


def _stat(path: str) -> os.stat_result | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st if os.path.isfile(path) else None


def _names(directory: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(directory) if not n.startswith("."))
    except OSError:
        return []


class Backend:
    """What `ForeignStore` needs of one agent (see the module doc)."""

    agent: Source
    name: str
    child_depth = 0
    """How many levels of child sessions `read` gives with a session (a child deeper
    below a listed session is listed on its own)."""

    def default_home(self) -> str:
        raise NotImplementedError

    def roots(self, home: str) -> tuple[str, ...]:
        raise NotImplementedError

    def locate(self, roots: tuple[str, ...]) -> Iterator[Located]:
        raise NotImplementedError

    def locate_path(self, path: str) -> Located | None:
        """The session at `path` (None: not a session of this agent's layout)."""
        st = _stat(path)
        return _located(path, st) if st is not None and self.is_session_name(path) else None

    def is_session_name(self, path: str) -> bool:
        raise NotImplementedError

    def sessions_in(self, directory: str) -> list[str]:
        """Session paths directly in `directory` (a real dir, or a database file)."""
        paths = [os.path.join(directory, n) for n in _names(directory)]
        return [p for p in paths if self.is_session_name(p) and os.path.isfile(p)]

    def stem(self, path: str) -> str:
        """The name a session is found by besides its id (a file name without suffix)."""
        name = os.path.basename(path)
        for suffix in (".jsonl", ".json"):
            if name.endswith(suffix):
                return name[: -len(suffix)]
        return name

    def scan(self, located: Located) -> tuple[ForeignMeta, int]:
        """Listing metadata and the session's size in bytes."""
        raise NotImplementedError

    def scan_many(self, items: list[Located]) -> dict[str, tuple[ForeignMeta, int] | BaseException]:
        """`scan` of each item (what went wrong, for one that cannot be read)."""
        found: dict[str, tuple[ForeignMeta, int] | BaseException] = {}
        for item in items:
            try:
                found[item.path] = self.scan(item)
            except (OSError, SessionTreeError) as exc:
                found[item.path] = exc
        return found

    def read(self, path: str, *, subagents: bool = True) -> ForeignSession:
        raise NotImplementedError

    def size(self, path: str) -> int:
        """The bytes of a session whose `Located.size` is -1."""
        return -1


# ---------------------------------------------------------------------------- OpenCode


_DB_NAME = re.compile(r"^opencode(-[A-Za-z0-9._-]+)?\.db$")


def _opencode_meta(session: OpenCodeSession, listed: bool) -> ForeignMeta:
    info = session.info
    roles: dict[str, int] = {}
    prompt: str | None = None
    count = 0
    last: int | None = None
    for message, parts in session.messages:
        role = message.get("role")
        if isinstance(role, str):
            roles[role] = roles.get(role, 0) + 1
        time = message.get("time")
        if isinstance(time, dict) and epoch_ms(time.get("created")):
            last = max(last or 0, epoch_ms(time["created"]))
        if role == "assistant":
            count += sum(1 for p in parts if p.get("type") in ("step-start", "tool")) or 1
        elif role == "user":
            texts = [
                p["text"]
                for p in parts
                if p.get("type") == "text"
                and isinstance(p.get("text"), str)
                and not p.get("synthetic")
                and not p.get("ignored")
            ]
            if texts:
                count += 1
                prompt = prompt or " ".join(" ".join(texts).split()) or None
    title = str_field(info, "title")
    title = None if title is None or is_default_title(title) else title
    time = info.get("time")
    created = time.get("created") if isinstance(time, dict) else None
    updated = time.get("updated") if isinstance(time, dict) else None
    return ForeignMeta(
        id=str_field(info, "id") or "",
        cwd=str_field(info, "directory") or "",
        title=title,
        title_source="auto" if title else None,
        created_ms=epoch_ms(created) or None,
        first_message=prompt,
        message_count=count,
        exact_count=True,
        last_activity_ms=max(last or 0, epoch_ms(updated)) or None,
        parent=str_field(info, "parentID"),
        listed=listed,
    )


class OpenCodeBackend(Backend):
    agent: Source = "opencode"
    name = "OpenCode"
    child_depth = CHILD_DEPTH

    def default_home(self) -> str:
        return opencode_home()

    def roots(self, home: str) -> tuple[str, ...]:
        return (home,)

    def databases(self, home: str) -> list[str]:
        return [
            os.path.join(home, n)
            for n in _names(home)
            if _DB_NAME.match(n) and os.path.isfile(os.path.join(home, n))
        ]

    def locate(self, roots: tuple[str, ...]) -> Iterator[Located]:
        for home in roots:
            in_database: set[str] = set()
            for database in self.databases(home):
                try:
                    ino = os.stat(database).st_ino
                    sessions = list_db_sessions(database, warn=True)
                except (DatabaseError, OSError) as exc:
                    log.warning("%s", _problem(database, exc))
                    continue
                for row in sessions:
                    in_database.add(row.id)
                    yield _db_located(database, row, ino)
            session_root = os.path.join(home, "storage", "session")
            for project in _names(session_root):
                directory = os.path.join(session_root, project)
                for name in _names(directory):
                    if name.endswith(".json") and name[: -len(".json")] not in in_database:
                        found = self._json_located(os.path.join(directory, name))
                        if found is not None:
                            yield found

    def _json_located(self, path: str) -> Located | None:
        st = _stat(path)
        storage = storage_dir_of(path)
        if st is None or storage is None:
            return None
        session_id = os.path.basename(path)[: -len(".json")]
        try:
            messages = os.stat(os.path.join(storage, "message", session_id)).st_mtime_ns
        except OSError:
            messages = 0
        mtime = max(st.st_mtime_ns, messages)
        return Located(path, (st.st_size, mtime, st.st_ino, 0), -1, mtime, st.st_ino)

    def locate_path(self, path: str) -> Located | None:
        split = split_db_path(path)
        if split is not None:
            database, session_id = split
            try:
                rows = list_db_sessions(database, session_id)
                ino = os.stat(database).st_ino
            except (DatabaseError, OSError):
                return None
            if not rows:
                return None
            return _db_located(database, rows[0], ino)
        if path.endswith(".json") and storage_dir_of(path) is not None:
            return self._json_located(path)
        return None

    def is_session_name(self, path: str) -> bool:
        return split_db_path(path) is not None or (
            path.endswith(".json") and storage_dir_of(path) is not None
        )

    def sessions_in(self, directory: str) -> list[str]:
        if os.path.isfile(directory) and is_opencode_db(directory):
            try:
                return [os.path.join(directory, r.id) for r in list_db_sessions(directory)]
            except DatabaseError as exc:
                log.warning("%s", exc)
                return []
        return super().sessions_in(directory)

    def scan(self, located: Located) -> tuple[ForeignMeta, int]:
        split = split_db_path(located.path)
        if split is None:
            if storage_dir_of(located.path) is not None:
                session = load_opencode_json(located.path, children=False)
            else:
                session = load_opencode_export(located.path)
            listed = not str_field(session.info, "parentID")  # a parent it can name
            return _opencode_meta(session, listed), session.size
        database, session_id = split
        described = describe_db_sessions(database, [session_id])
        if session_id not in described:
            raise FileNotFoundError(2, "No such OpenCode session", located.path)
        return _db_meta(*described[session_id])

    def scan_many(self, items: list[Located]) -> dict[str, tuple[ForeignMeta, int] | BaseException]:
        """Each database's sessions in one read of it; the JSON files one by one."""
        by_database: dict[str, list[str]] = {}
        rest: list[Located] = []
        for item in items:
            split = split_db_path(item.path)
            if split is None:
                rest.append(item)
            else:
                by_database.setdefault(split[0], []).append(split[1])
        found = super().scan_many(rest)
        for database, session_ids in by_database.items():
            try:
                described = describe_db_sessions(database, session_ids)
            except (OSError, SessionTreeError) as exc:
                for session_id in session_ids:
                    found[os.path.join(database, session_id)] = exc
                continue
            for session_id in session_ids:
                path = os.path.join(database, session_id)
                if session_id in described:
                    found[path] = _db_meta(*described[session_id])
                else:
                    found[path] = FileNotFoundError(2, "No such OpenCode session", path)
        return found

    def read(self, path: str, *, subagents: bool = True) -> ForeignSession:
        split = split_db_path(path)
        if split is not None:
            database, session_id = split
            return convert_opencode(
                load_db_session(database, session_id, children=subagents), subagents=subagents
            )
        if path.endswith(".json") and storage_dir_of(path) is not None:
            try:
                return read_opencode_json(path, subagents=subagents)
            except NotAForeignSessionError:
                pass
        return read_opencode_export(path)

    def size(self, path: str) -> int:
        split = split_db_path(path)
        if split is not None:
            return session_bytes(*split)
        if storage_dir_of(path) is not None:
            return load_opencode_json(path, children=False).size
        return -1


def _db_meta(row: DbSession, described: DbListing) -> tuple[ForeignMeta, int]:
    users = described.roles.get("user", 0)
    assistants = described.roles.get("assistant", 0)
    title = None if is_default_title(row.title) or not row.title else row.title
    meta = ForeignMeta(
        id=row.id,
        cwd=row.directory,
        title=title,
        title_source="auto" if title else None,
        created_ms=row.created_ms or None,
        first_message=described.first_prompt,
        message_count=users + assistants,
        # Tool results (parts) are not counted here: `show` counts them.
        exact_count=not described.tool_calls,
        last_activity_ms=max(row.updated_ms, described.last_ms or 0) or None,
        parent=row.parent_id,
        listed=row.parent_id is None,
    )
    return meta, described.size


def _db_located(database: str, row: DbSession, ino: int) -> Located:
    mtime = row.updated_ms * 1_000_000
    # The parts' count and the sum of their updates, one number (a part updated in place).
    parts = (row.parts * 1_000_003 + row.parts_updated) & 0x7FFF_FFFF_FFFF_FFFF
    identity = (row.messages, mtime, ino, parts)
    return Located(os.path.join(database, row.id), identity, -1, mtime, ino)


def _problem(path: str, exc: BaseException) -> str:
    if isinstance(exc, DatabaseError):
        return str(exc)
    if isinstance(exc, OSError):
        return f"{exc.filename or path}: {exc.strerror or exc}"
    return f"{path}: {exc}"


# ---------------------------------------------------------------------------- Gemini CLI


class GeminiBackend(Backend):
    agent: Source = "gemini"
    name = "Gemini CLI"

    def default_home(self) -> str:
        return gemini_home()

    def roots(self, home: str) -> tuple[str, ...]:
        return (os.path.join(home, "tmp"),)

    def locate(self, roots: tuple[str, ...]) -> Iterator[Located]:
        for root in roots:
            for project in _names(root):
                chats = os.path.join(root, project, "chats")
                names = _names(chats)
                present = set(names)
                for name in names:
                    if name.endswith(".json") and name + "l" in present:
                        continue  # resumed into the .jsonl beside it
                    path = os.path.join(chats, name)
                    if self.is_session_name(path):
                        st = _stat(path)
                        if st is not None:
                            yield _located(path, st)

    def is_session_name(self, path: str) -> bool:
        return path.endswith((".jsonl", ".json"))

    def scan(self, located: Located) -> tuple[ForeignMeta, int]:
        return scan_gemini(located.path, located.size), located.size

    def read(self, path: str, *, subagents: bool = True) -> ForeignSession:
        return read_gemini_session(path, subagents=subagents)


# ---------------------------------------------------------------------------- Copilot CLI


class CopilotBackend(Backend):
    agent: Source = "copilot"
    name = "Copilot CLI"

    def default_home(self) -> str:
        return copilot_home()

    def roots(self, home: str) -> tuple[str, ...]:
        return (os.path.join(home, "session-state"),)

    def locate(self, roots: tuple[str, ...]) -> Iterator[Located]:
        for root in roots:
            for name in _names(root):
                path = os.path.join(root, name, "events.jsonl")
                st = _stat(path)
                if st is not None:
                    yield _located(path, st)

    def is_session_name(self, path: str) -> bool:
        return os.path.basename(path) == "events.jsonl" or path.endswith(".jsonl")

    def stem(self, path: str) -> str:
        if os.path.basename(path) == "events.jsonl":
            return os.path.basename(os.path.dirname(path))
        return super().stem(path)

    def scan(self, located: Located) -> tuple[ForeignMeta, int]:
        return scan_copilot(located.path, located.size), located.size

    def read(self, path: str, *, subagents: bool = True) -> ForeignSession:
        return read_copilot_session(path, subagents=subagents)


BACKENDS: dict[str, Backend] = {
    "opencode": OpenCodeBackend(),
    "gemini": GeminiBackend(),
    "copilot": CopilotBackend(),
}


# ---------------------------------------------------------------------------- detection


def detect_store(path: str) -> Source | None:
    """Whether `path` is an OpenCode data dir (or database), a Gemini CLI or a Copilot
    CLI home."""
    if os.path.isfile(path) and is_opencode_db(path):
        return "opencode"
    if os.path.isdir(os.path.join(path, "session-state")):
        return "copilot"
    if OpenCodeBackend().databases(path) or os.path.isdir(os.path.join(path, "storage", "session")):
        return "opencode"
    tmp = os.path.join(path, "tmp")
    if any(os.path.isdir(os.path.join(tmp, p, "chats")) for p in _names(tmp)):
        return "gemini"
    return None


_EXPORT_HEAD = re.compile(rb'^\s*\{\s*"info"\s*:\s*\{')
_OPENCODE_INFO = re.compile(rb'^\s*\{\s*"id"\s*:\s*"ses')


def _lines(head: bytes) -> list[dict[str, Any]]:
    values = []
    for raw in head.split(b"\n")[:20]:
        line = raw.strip()
        if not line:
            continue
        value = loads_object(line)
        if value is not None:
            values.append(value)
    return values


def detect_file(path: str) -> Source | None:
    """Whose session the file at `path` is, from its first bytes (None: a session of
    ours, or nothing known). A `<opencode.db>/<session id>` path is OpenCode's."""
    if split_db_path(path) is not None:
        return "opencode"
    try:
        with open_read(path) as f:
            head = f.read(_HEAD)
    except OSError:
        return None
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    if head.startswith(b"SQLite format 3\x00"):
        return "opencode"
    if is_gemini_document(head):
        return "gemini"
    if _EXPORT_HEAD.match(head) or (
        _OPENCODE_INFO.match(head) and path.endswith(".json") and storage_dir_of(path) is not None
    ):
        return "opencode"
    first_line = _lines(head.split(b"\n", 1)[0])
    if first_line and first_line[0].get("type") in ("session", "title"):
        return None  # a v3 session (or one of oh-my-pi's, its title slot first)
    values = _lines(head)
    if not values:
        return None
    first = values[0]
    if isinstance(first.get("info"), dict) and isinstance(first.get("messages"), list):
        return "opencode"
    if any(
        v.get("type") == "gemini"
        or (isinstance(v.get("sessionId"), str) and isinstance(v.get("projectHash"), str))
        for v in values
    ):
        return "gemini"  # its metadata line, or (that line damaged) its model's messages
    if any(is_copilot_event(v) for v in values[:3]):
        return "copilot"
    if any(isinstance(v.get("payload"), dict) for v in values) or (
        "payload" not in first and "id" in first and "type" not in first and "timestamp" in first
    ):
        return "codex"
    if any(
        isinstance(v.get("sessionId"), str) or v.get("type") in ("user", "assistant", "summary")
        for v in values
    ):
        return "claude"
    return None
