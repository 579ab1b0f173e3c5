"""Builders for messages in the ecosystem's shape, and oracles, shared by tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import SHARED_FIXTURES
from sessiontree.format import loads_line


def assistant(text: str = "ok", **extra: object) -> dict[str, object]:
    """A minimal assistant message in the ecosystem's shape."""
    message: dict[str, object] = {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "usage": {
            "input": 100,
            "output": 20,
            "cacheRead": 5,
            "cacheWrite": 1,
            "cost": {"input": 0.1, "output": 0.2, "cacheRead": 0, "cacheWrite": 0, "total": 0.3},
        },
        "stopReason": "stop",
        "timestamp": 1760000000000,
    }
    message.update(extra)
    return message


def user(text: str = "hi") -> dict[str, object]:
    return {"role": "user", "content": text, "timestamp": 1760000000000}


def last_entry_id(data: bytes) -> str | None:
    """The leaf every reader takes from a session file's bytes: the id of the last line
    after the header that parses as a JSON object (None when that id is no string)."""
    found: str | None = None
    header = False
    for line in data.removeprefix(b"\xef\xbb\xbf").split(b"\n"):
        try:
            value = loads_line(line) if line.strip() else None
        except ValueError:
            continue
        if not isinstance(value, dict):
            continue
        if header:
            entry_id = value.get("id")
            found = entry_id if isinstance(entry_id, str) else None
        header = header or value.get("type") == "session"
    return found


def peer_context(peer: str, path: str | os.PathLike[str]) -> dict[str, Any]:
    """The context `peer` ("pi" or "omp") itself builds at a session file's leaf, as the
    oracles in `shared/peers` print it (skips when that peer is not installed)."""
    anchors = Path(os.environ.get("ANCHORS_DIR", "/tmp/anchors"))
    peers = SHARED_FIXTURES.parent / "peers"
    if peer == "pi":
        oracle = peers / "pi-oracle.mjs"
        runner = shutil.which("node")
        installed = anchors / "pi" / "node_modules" / "@mariozechner" / "pi-coding-agent"
    else:
        oracle = peers / "omp-oracle.ts"
        bun = anchors / "omp" / "node_modules" / ".bin" / "bun"
        runner = str(bun) if bun.exists() else None
        installed = anchors / "omp" / "node_modules" / "@oh-my-pi" / "pi-coding-agent"
    if not oracle.is_file() or not installed.is_dir() or runner is None:
        pytest.skip(f"{peer} is not installed ({installed}); see peers/setup.sh")
    done = subprocess.run(
        [runner, str(oracle), "context", os.fspath(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "ANCHORS_DIR": str(anchors)},
        check=True,
    )
    context: dict[str, Any] = json.loads(done.stdout)
    return context
