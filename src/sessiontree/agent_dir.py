"""What a session has in the agent dir besides itself: its blob store, terminal
breadcrumbs, and the registry of session dirs outside the store; and whose store it is.

- Whose: pi's store (an agent dir named `.pi/agent`: `~/.pi/agent`, what `--agent pi`
  names) gets entries written as pi writes them, images inline (pi reads no blob
  refs); every other store as oh-my-pi writes them (`writes_pi_form`).

- `terminal-sessions/<terminal id>`: two lines, the cwd and the session file, so
  the next `continue_recent` in this terminal resumes it. Names are bytes on
  disk (`os.fsencode`), so a project dir whose name is not UTF-8 works too.
- `external-session-dirs`: one absolute directory per line, each holding sessions
  whose images live in the agent's `blobs/` (so `gc` must read them before it
  deletes anything). Several processes append to it at once: every update is one
  `O_APPEND` write of one whole line, so no update is lost, and readers drop
  duplicates and an unterminated last line (a write in progress).

Both are best effort for the caller (a failure is logged, never raised) and are
written without following symlinks.
"""

from __future__ import annotations

import logging
import os

from ._fs import atomic_write, ensure_private_dir, open_regular, write_all
from .blobs import BlobStore, BlobStoreLike
from .paths import EXTERNAL_SESSION_DIRS, get_agent_dir, get_terminal_id
from .storage.base import BlobBackedStorage, HostFilesystem

__all__ = [
    "agent_dir_of",
    "blob_store_for",
    "breadcrumb_path",
    "is_pi_agent_dir",
    "read_breadcrumb",
    "read_registry",
    "register_session_dir",
    "registered_session_dirs",
    "write_breadcrumb",
    "writes_pi_form",
]

log = logging.getLogger("sessiontree")


def breadcrumb_path() -> str | None:
    """This terminal's breadcrumb file, None without a terminal."""
    terminal = get_terminal_id()
    if terminal is None:
        return None
    return os.path.join(get_agent_dir(), "terminal-sessions", terminal)


def write_breadcrumb(cwd: str, session_file: str) -> None:
    """Remember this terminal's session (best effort: never fails the caller)."""
    path = breadcrumb_path()
    if path is None:
        return
    try:
        data = os.fsencode(cwd) + b"\n" + os.fsencode(os.path.abspath(session_file)) + b"\n"
        ensure_private_dir(os.path.dirname(path))
        atomic_write(path, [data])
    except (OSError, ValueError) as exc:
        log.debug("could not write terminal breadcrumb %s: %s", path, exc)


def read_breadcrumb(cwd: str) -> str | None:
    """This terminal's last session file, if its cwd matches and it lies in the store."""
    path = breadcrumb_path()
    if path is None:
        return None
    try:
        fd = open_regular(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 16384)
    except OSError:
        return None
    finally:
        os.close(fd)
    lines = data.split(b"\n")
    if len(lines) < 2 or lines[0] != os.fsencode(cwd):
        return None
    target = os.fsdecode(lines[1])
    if not target.endswith(".jsonl") or "\x00" in target or not os.path.isabs(target):
        return None
    # A breadcrumb is a file anyone could have edited: follow it only into our store.
    sessions_root = os.path.realpath(os.path.join(get_agent_dir(), "sessions"))
    real = os.path.realpath(target)
    if os.path.commonpath([real, sessions_root]) != sessions_root:
        log.warning(
            "ignoring terminal breadcrumb %s: %s is outside %s", path, target, sessions_root
        )
        return None
    return target if os.path.isfile(target) else None


def _read_registry(registry: str) -> bytes:
    try:
        fd = open_regular(registry, os.O_RDONLY)
    except FileNotFoundError:
        return b""
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _parse_registry(data: bytes) -> tuple[list[str], bytes]:
    """(absolute dirs, first recorded first, without duplicates; the unterminated rest)."""
    lines = data.split(b"\n")
    torn = lines.pop()  # b"" when the data ends with a newline
    seen: dict[str, None] = {}
    for line in lines:
        directory = os.fsdecode(line)
        if directory and os.path.isabs(directory) and "\0" not in directory:
            seen.setdefault(directory, None)
    return list(seen), torn


def read_registry(agent_dir: str | None = None) -> tuple[list[str], bytes]:
    """The recorded outside session dirs and an unterminated last line (b"" if none).

    An unterminated last line is a path still being written or cut by a crash: it
    is not a dir of the list, and a reader that must not miss a dir (gc) should
    treat it as unreadable. OSError when the registry exists but cannot be read.
    """
    registry = os.path.join(agent_dir or get_agent_dir(), EXTERNAL_SESSION_DIRS)
    return _parse_registry(_read_registry(registry))


def registered_session_dirs(agent_dir: str | None = None) -> list[str]:
    """The recorded outside session dirs, first-recorded first, without duplicates.

    An unterminated last line is skipped: it may be a path still being written,
    and a cut path could name another directory. Relative paths are ignored.
    OSError when the registry exists but cannot be read.
    """
    return read_registry(agent_dir)[0]


def register_session_dir(session_file: str, agent_dir: str | None = None) -> None:
    """Record the dir of a session outside `<agent>/sessions` that uses the agent's blobs.

    Best effort; a dir already recorded is not written again.
    """
    agent = agent_dir or get_agent_dir()
    directory = os.path.realpath(os.path.dirname(os.path.abspath(session_file)))
    sessions = os.path.realpath(os.path.join(agent, "sessions"))
    if os.path.commonpath([directory, sessions]) == sessions:
        return
    registry = os.path.join(agent, EXTERNAL_SESSION_DIRS)
    try:
        current = _read_registry(registry)
        if directory not in _parse_registry(current)[0]:
            ensure_private_dir(agent)
            # A crash may have left half a line: start ours on a line of its own.
            line = os.fsencode(directory) + b"\n"
            if current and not current.endswith(b"\n"):
                line = b"\n" + line
            fd = open_regular(registry, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                # One write of whole lines: concurrent appenders never interleave.
                write_all(fd, line)
            finally:
                os.close(fd)
    except (OSError, ValueError) as exc:
        log.warning("could not record session dir %s in %s: %s", directory, registry, exc)


def agent_dir_of(session_path: str, agent_dir: str | None = None) -> str | None:
    """The agent dir holding `session_path` (a session file or dir) under its
    `sessions/`, if there is one.

    The nearest ancestor named `sessions` counts when its parent is the agent dir in
    effect (`agent_dir`, default the configured one) or holds a `blobs/` dir: a
    project's own `sessions/` folder is not an agent dir.
    """
    current = os.path.abspath(session_path)
    configured = os.path.abspath(agent_dir if agent_dir is not None else get_agent_dir())
    while True:
        parent = os.path.dirname(current)
        if os.path.basename(current) == "sessions":
            if parent == configured or os.path.isdir(os.path.join(parent, "blobs")):
                return parent
        if parent == current:
            return None
        current = parent


def blob_store_for(
    session_path: str | None, storage: object = None, agent_dir: str | None = None
) -> BlobStoreLike:
    """The one rule for where a session's images live.

    The storage's own blob store when it has one (PostgreSQL's table); else the
    `blobs/` of the agent dir that holds the session under `sessions/`; else the
    agent dir in effect: `agent_dir` when a caller works on one it was given (an
    import, a store transfer), else the configured one (`$PI_CODING_AGENT_DIR`,
    else `~/.xcsh/agent`).
    """
    if isinstance(storage, BlobBackedStorage):
        own = storage.blob_store()
        if own is not None:
            return own
    agent = agent_dir_of(session_path, agent_dir) if session_path else None
    if agent is None:
        agent = agent_dir if agent_dir is not None else get_agent_dir()
    return BlobStore(os.path.join(agent, "blobs"))


def is_pi_agent_dir(path: str) -> bool:
    """Whether `path` is pi's agent dir: one named `.pi/agent` (`~/.pi/agent`, the
    store `--agent pi` names, for any home)."""
    parent, name = os.path.split(os.path.normpath(os.path.abspath(path)))
    return name == "agent" and os.path.basename(parent) == ".pi"


def writes_pi_form(
    session_path: str | None, storage: object = None, agent_dir: str | None = None
) -> bool:
    """The one rule for how a session's entries are written: True in pi's store.

    pi (0.73) reads no blob refs and applies none of oh-my-pi's persistence
    transforms, so in its store entries are written as pi writes them: the entry's
    JSON, images inline. A session is in pi's store when it lies under the `sessions/`
    of pi's agent dir (pi makes no `blobs/` there, so `agent_dir_of` would not see
    it), else when the agent dir `blob_store_for` picks is pi's (the one holding the
    session, else the one in effect). A database store is nobody's agent dir (False).
    """
    if storage is not None and not isinstance(storage, HostFilesystem):
        return False
    if session_path:
        current = os.path.abspath(session_path)
        while True:
            parent = os.path.dirname(current)
            if os.path.basename(current) == "sessions" and is_pi_agent_dir(parent):
                return True
            if parent == current:
                break
            current = parent
    agent = agent_dir_of(session_path, agent_dir) if session_path else None
    if agent is None:
        agent = agent_dir if agent_dir is not None else get_agent_dir()
    return is_pi_agent_dir(agent)
