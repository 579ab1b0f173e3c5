"""Two machines on one host for the sync tests: each a HOME of its own (its agent dirs
under it, its sync state in `~/.local/state`), sessions written the way pi writes them
(whole lines, appended), and a round run as that machine."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sessiontree.layout import StoreParts
from sessiontree.storage import FileSessionStorage
from sessiontree.sync import SyncReport, sync
from tests.helpers import assistant, user

PROJECT = "--home-u-proj--"
MACHINE_VARIABLES = (
    "PI_CODING_AGENT_DIR",
    "SESSIONTREE_STORE",
    "XDG_STATE_HOME",
    "XDG_DATA_HOME",
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
)


class Machine:
    """One machine: a HOME with the agent dirs of `agents` (each `~/.<agent>/agent`)."""

    def __init__(self, root: Path, name: str, agents: Sequence[str] = ("pi",)) -> None:
        self.name = name
        self.home = root / name
        for agent in agents:
            (self.agent_dir(agent) / "sessions").mkdir(parents=True)

    def agent_dir(self, agent: str = "pi") -> Path:
        return self.home / f".{agent}" / "agent"

    def session_path(self, sid: str, agent: str = "pi", project: str = PROJECT) -> Path:
        return (
            self.agent_dir(agent) / "sessions" / project / f"2026-12-01T10-00-00-000Z_{sid}.jsonl"
        )

    def files(self, agent: str = "pi") -> dict[str, bytes]:
        """Every session file of the agent's store (relative path -> bytes)."""
        root = self.agent_dir(agent) / "sessions"
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.jsonl"))}

    @contextmanager
    def env(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        """The process's environment as this machine's."""
        with monkeypatch.context() as patch:
            patch.setenv("HOME", str(self.home))
            for variable in MACHINE_VARIABLES:
                patch.delenv(variable, raising=False)
            yield

    def sync(
        self, hub: str | Path, monkeypatch: pytest.MonkeyPatch, agents: Sequence[str] = ("pi",)
    ) -> SyncReport:
        """One round as this machine, in this process."""
        parts = [(a, StoreParts(FileSessionStorage(), str(self.agent_dir(a)))) for a in agents]
        with self.env(monkeypatch):
            return sync(str(hub), parts, machine=self.name)

    def env_vars(self) -> dict[str, str]:
        """The environment of a subprocess run as this machine."""
        env = {k: v for k, v in os.environ.items() if k not in MACHINE_VARIABLES}
        env["HOME"] = str(self.home)
        return env


def hub_files(hub: str | Path) -> dict[str, tuple[int, int]]:
    """Every file of a hub (dir or database): path -> (size, mtime_ns)."""
    from sessiontree.sync._hub import opened_hub

    found: dict[str, tuple[int, int]] = {}
    with opened_hub(str(hub)) as place:

        def walk(rel: str) -> None:
            for name in place.list_files(rel, "*") + place.list_files(rel, ".*"):
                path = f"{rel}/{name}" if rel else name
                st = place.storage.stat(place.path(path))
                found[path] = (st.size, st.mtime_ns)
            for name in place.list_dirs(rel):
                walk(f"{rel}/{name}" if rel else name)

        walk("")
    return found


@contextmanager
def pg_hub() -> Iterator[str]:
    """A hub in a fresh schema of the test server (dropped afterwards)."""
    from tests.pg_support import fresh_schema

    with fresh_schema() as (url, schema):
        yield f"{url}{'&' if '?' in url else '?'}schema={schema}"


@contextmanager
def some_hub(kind: str, tmp_path: Path) -> Iterator[str]:
    """A hub of `kind`: "dir" (a temp dir) or "pg" (PostgreSQL)."""
    if kind == "dir":
        yield str(tmp_path / "hub")
    else:
        with pg_hub() as url:
            yield url


def line(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


def header(sid: str) -> bytes:
    return line(
        {
            "type": "session",
            "version": 3,
            "id": sid,
            "timestamp": "2026-12-01T10:00:00.000Z",
            "cwd": "/home/u/proj",
        }
    )


def message(entry_id: str, parent: str | None, text: str, role: str = "user") -> bytes:
    body = user(text) if role == "user" else assistant(text)
    return line(
        {
            "type": "message",
            "id": entry_id,
            "parentId": parent,
            "timestamp": "2026-12-01T10:00:01.000Z",
            "message": body,
        }
    )


def new_session(path: Path, sid: str, *entries: bytes, title: bytes = b"") -> None:
    """A session file as an agent writes it: [title slot] header entries."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(title + header(sid) + b"".join(entries))


def append(path: Path, *entries: bytes) -> None:
    """Lines appended as pi appends them (one write of whole lines)."""
    with open(path, "ab") as f:
        f.write(b"".join(entries))


def entries(data: bytes) -> list[dict[str, Any]]:
    """The entries of a session file (after the header; title slot left out)."""
    out = []
    for raw in data.splitlines():
        value = json.loads(raw)
        if value.get("type") not in ("session", "title"):
            out.append(value)
    return out


def entry_lines(data: bytes) -> dict[str, bytes]:
    """id -> line, of every entry; fails on an id seen twice."""
    found: dict[str, bytes] = {}
    for raw in data.splitlines(keepends=True):
        value = json.loads(raw)
        if value.get("type") in ("session", "title"):
            continue
        assert value["id"] not in found, f"id {value['id']} twice"
        found[value["id"]] = raw
    return found
