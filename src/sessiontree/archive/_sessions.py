"""Which archived files are sessions, which one a name or id asked for is, and the
files kept with it (subagents, a session dir, OpenCode's messages and parts)."""

from __future__ import annotations

import os
from collections.abc import Callable

from sessiontree.archive._model import ArchivedFile, ArchiveError
from sessiontree.format import file_session_id


def is_session(agent: str, rel: str) -> bool:
    parts = rel.split("/")
    name = parts[-1]
    if agent == "claude":
        return len(parts) == 3 and parts[0] == "projects" and name.endswith(".jsonl")
    if agent == "codex":
        return name.endswith(".jsonl")
    if agent == "gemini":
        return (
            len(parts) == 4
            and parts[2] == "chats"
            and name.startswith("session-")
            and name.endswith((".json", ".jsonl"))
        )
    if agent == "copilot":
        return len(parts) == 3 and name == "events.jsonl"
    if agent == "opencode":
        if len(parts) == 3 and parts[0] == "export":
            return name.endswith(".json")
        return len(parts) == 4 and parts[:2] == ["storage", "session"] and name.endswith(".json")
    return parts[0] == "sessions" and len(parts) == 3 and name.endswith(".jsonl")


def _matches(session: str, file: ArchivedFile) -> bool:
    full = os.path.join(file.home, file.rel)
    if session in (file.rel, full):
        return True
    if len(session) < 8:
        return False
    name = file.rel.rsplit("/", 1)[-1]
    if session in name:
        return True
    # A Gemini CLI file is named by the first 8 characters of its session id.
    return file.agent == "gemini" and session[:8] in name and len(session) >= 32


def companions(file: ArchivedFile, session: str, every: list[ArchivedFile]) -> list[ArchivedFile]:
    """The files kept with a session file: under a dir named as the file (Claude Code's
    `<id>/subagents/`), its session dir (Copilot CLI), a dir named by its id (Gemini
    CLI's subagents, `chats/<parent id>/`)."""
    stem = file.rel.rsplit(".", 1)[0] + "/"
    parent = file.rel.rsplit("/", 1)[0] + "/"
    # Gemini CLI: `chats/session-<time>-<first 8 of its id>.json[l]`, its subagents in
    # `chats/<its whole id>/`: found however the session was named (file name, path)
    short = file.rel.rsplit("-", 1)[-1].split(".", 1)[0] if file.agent == "gemini" else ""
    found = _opencode_storage(file, every)
    for other in every:
        if other is file or other.agent != file.agent or other.home != file.home:
            continue
        if other in found:
            continue
        if other.rel.startswith(stem):
            found.append(other)
        elif file.agent == "copilot" and other.rel.startswith(parent):
            found.append(other)
        elif (
            # a dir named by the id asked for; in a pi-format store only the file's own
            # dir (above) is its: a custom id may name any dir (`sessions`, `subagents`)
            file.agent not in PI_FORMAT
            and len(session) >= 8
            and f"/{session}/" in f"/{other.rel}"
            and not other.is_session
        ):
            found.append(other)
        elif (
            len(short) == 8
            and other.rel.startswith(parent)
            and other.rel[len(parent) :].split("/", 1)[0].startswith(short)
            and "/" in other.rel[len(parent) :]
            and not other.is_session
        ):
            found.append(other)
    return found


def _opencode_storage(file: ArchivedFile, every: list[ArchivedFile]) -> list[ArchivedFile]:
    """An OpenCode session of the older JSON layout (`storage/session/<project>/<id>.json`)
    is its messages (`storage/message/<id>/<message id>.json`), their parts
    (`storage/part/<message id>/`) and whatever else `storage/` keeps under its id."""
    parts = file.rel.split("/")
    if file.agent != "opencode" or parts[:2] != ["storage", "session"]:
        return []
    session_id = parts[-1].rsplit(".", 1)[0]
    mine = [f for f in every if f is not file and f.agent == file.agent and f.home == file.home]
    found = []
    for other in mine:
        o = other.rel.split("/")
        if len(o) >= 3 and o[0] == "storage" and o[1] != "session":
            if o[2] == session_id or o[2].rsplit(".", 1)[0] == session_id:
                found.append(other)
    messages = {
        f.rel.split("/")[3].rsplit(".", 1)[0]
        for f in found
        if f.rel.startswith(f"storage/message/{session_id}/") and f.rel.count("/") == 3
    }
    for other in mine:
        o = other.rel.split("/")
        if len(o) >= 4 and o[:2] == ["storage", "part"] and o[2] in messages:
            found.append(other)
    return found


def _names_exactly(session: str, file: ArchivedFile, *, fold: bool = False) -> bool:
    """Whether `session` is this file's path, name, or id (`fold`: case aside): in a
    pi-format store the whole id its name holds (pi 1.6's custom ids: `<time>_<id>.jsonl`)."""
    name = file.rel.rsplit("/", 1)[-1]
    stem = name.rsplit(".", 1)[0]
    file_id = file_session_id(stem) if file.agent in PI_FORMAT else None
    names = [file.rel, os.path.join(file.home, file.rel), name, stem, file_id or stem]
    if fold:
        return session.lower() in (n.lower() for n in names)
    return session in names


def _starts(session: str, file: ArchivedFile) -> bool:
    """Whether `session` (8 characters or more) starts a pi-format file's name or id:
    not any part of it (`login-bug` is not the custom id `fix-login-bug`)."""
    stem = file.rel.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return len(session) >= 8 and any(
        s is not None and s.startswith(session) for s in (stem, file_session_id(stem))
    )


def find_session(
    every: list[ArchivedFile], session: str, id_of: Callable[[ArchivedFile], str] | None = None
) -> ArchivedFile:
    """The archived session `session` names: its path, its file name, its id (`id_of`:
    the id `list` shows, read where its path does not say it), else the one whose id or
    file name it starts (ArchiveError: none, or several, each named with its id)."""
    sessions = [f for f in every if f.is_session]
    found = [f for f in sessions if _names_exactly(session, f)]
    if not found:
        found = [f for f in sessions if _names_exactly(session, f, fold=True)]
    if not found and id_of is not None:
        found = [f for f in sessions if id_of(f).lower() == session.lower()]
    if not found:
        found = [
            f
            for f in sessions
            if (_starts(session, f) if f.agent in PI_FORMAT else _matches(session, f))
            or (
                id_of is not None
                and len(session) >= _SHORTEST_PREFIX
                and id_of(f).lower().startswith(session.lower())
            )
        ]
    if not found:
        raise ArchiveError(f"no archived session matches {session!r}")
    if len(found) > 1:
        shown = 10
        names = "; ".join(
            f"{f.agent} {id_of(f)} ({f.rel})" if id_of is not None else f"{f.agent} {f.rel}"
            for f in found[:shown]
        )
        more = f"; and {len(found) - shown} more" if len(found) > shown else ""
        raise ArchiveError(
            f"{session!r} matches {len(found)} archived sessions: {names}{more}; give more of "
            "the id, or the file's path"
        )
    return found[0]


_SHORTEST_PREFIX = 4
"""An id prefix shorter than this is not looked up (`list` shows 8 characters)."""


PI_FORMAT = ("xcsh", "omp", "pi")
