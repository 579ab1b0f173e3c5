"""Where a restore may write: a path inside a store, in the session dirs of its agent,
and, without `--to`, in that agent's own layout at a home it keeps on this machine
(a manifest's home and path are not trusted)."""

from __future__ import annotations

import os
import re

from sessiontree._util.env import (
    NATIVE_AGENTS,
    agent_dir_env,
    claude_config_dirs,
    codex_home,
    copilot_home,
    gemini_home,
    native_agent_dir,
    opencode_home,
)
from sessiontree.archive._model import ArchivedFile
from sessiontree.archive._sessions import PI_FORMAT


def safe_rel(rel: str) -> bool:
    parts = rel.split("/")
    return (
        bool(rel)
        and not os.path.isabs(rel)
        and "\0" not in rel
        and all(p not in ("", ".", "..") for p in parts)
    )


_SESSION_DIRS = {
    "claude": ("projects",),
    "codex": ("sessions", "archived_sessions"),
    "opencode": ("storage", "export"),
    "gemini": ("tmp",),
    "copilot": ("session-state",),
    **{agent: ("sessions", "blobs") for agent in ("xcsh", "omp", "pi")},
}
"""The dirs under each agent's home that an archive keeps (`find_stores`' roots)."""


def agent_file(agent: str, rel: str) -> bool:
    """Whether `rel` is where `agent` keeps session files under its home: a restore
    (without `--to`) writes at the home a manifest names, and a crafted archive must not
    write `~/.config/autostart/x.desktop` or `~/.bashrc.d/x` through it."""
    parts = rel.split("/")
    if parts[0] not in _SESSION_DIRS.get(agent, ()) or len(parts) < 2:
        return False
    return agent != "gemini" or (len(parts) >= 4 and parts[2] == "chats")


_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_NAME = r"[^/.][^/]*"  # one path component, not hidden
_PI_FILES = (
    rf"sessions/--[^/]*--/\d{{4}}-\d{{2}}-\d{{2}}T\d{{2}}-\d{{2}}-\d{{2}}-\d{{3}}Z_{_NAME}\.jsonl"
    # a session's artifacts dir: its subagent sessions and the tool output kept beside it
    rf"|sessions/--[^/]*--/\d{{4}}-\d{{2}}-\d{{2}}T[^/]*Z_[^/]+/(?:{_NAME}/)*{_NAME}"
    r"|blobs/[0-9a-f]{64}(?:\.[A-Za-z0-9][A-Za-z0-9._-]*)?"
)
_SESSION_FILES = {
    "claude": re.compile(
        rf"projects/{_NAME}/(?:{_UUID}|agent-{_NAME})\.jsonl"
        rf"|projects/{_NAME}/{_UUID}/subagents/(?:{_NAME}/)*agent-{_NAME}\.(?:jsonl|meta\.json)"
    ),
    "codex": re.compile(
        rf"sessions/\d{{4}}/\d{{2}}/\d{{2}}/rollout-{_NAME}\.jsonl"
        rf"|archived_sessions/rollout-{_NAME}\.jsonl"
    ),
    "gemini": re.compile(
        rf"tmp/{_NAME}/chats/session-{_NAME}\.jsonl?|tmp/{_NAME}/chats/{_NAME}/{_NAME}\.jsonl"
    ),
    "opencode": re.compile(
        rf"storage/session/{_NAME}/ses_{_NAME}\.json"
        rf"|storage/message/ses_{_NAME}/msg_{_NAME}\.json"
        rf"|storage/part/msg_{_NAME}/prt_{_NAME}\.json"
        rf"|export/opencode(?:-[A-Za-z0-9._-]+)?\.db/ses_{_NAME}\.json"
    ),
    "copilot": re.compile(rf"session-state/{_NAME}/events\.jsonl|session-state/{_NAME}\.jsonl"),
    **{agent: re.compile(_PI_FILES) for agent in ("xcsh", "omp", "pi")},
}
"""Each agent's own session-file layout under its home: what a restore without `--to`
may write (a crafted manifest's `~/projects/<repo>/conftest.py` is none of them)."""


def _local_homes(agent: str) -> set[str]:
    """Where `agent` keeps its store on this machine (for this user): the only homes a
    restore without `--to` writes to, whatever a manifest says its home was."""
    homes: list[str] = []
    if agent in PI_FORMAT:
        homes = [native_agent_dir(a) for a in NATIVE_AGENTS]
        homes.append(agent_dir_env() or "")
    elif agent == "claude":
        homes = claude_config_dirs()
    else:
        one = {
            "codex": codex_home,
            "opencode": opencode_home,
            "gemini": gemini_home,
            "copilot": copilot_home,
        }.get(agent)
        homes = [one()] if one is not None else []
    return {os.path.normpath(os.path.abspath(h)) for h in homes if h}


def restore_refusal(file: ArchivedFile) -> str | None:
    """Why a restore without `--to` must not write `file` where its manifest says (None:
    it may): a manifest's home and path are not trusted."""
    pattern = _SESSION_FILES.get(file.agent)
    if pattern is None or pattern.fullmatch(file.rel) is None:
        return (
            f"{file.manifest}: names {file.agent}:{file.rel!r}, not a session file of that "
            "agent's layout; refused (restore it --to another dir to look at it)"
        )
    if file.home not in _local_homes(file.agent):
        return (
            f"{file.manifest}: names the home {file.home!r}, where {file.agent} keeps no "
            "store on this machine; refused (restore it --to another dir)"
        )
    return None
