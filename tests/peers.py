"""The TypeScript agents as oracles: one place that finds them and runs them.

Peers by name: `pi` (pi 0.73.1), `pi16` (pi 1.6.0, the newest pi) and `omp` (oh-my-pi
18.2.3). Each is driven by its oracle script, whose commands (`context FILE`, `tree FILE
--flat`, `run OPS OUTDIR`, `llm`, `usage`, `entries`, ...) print what the agent itself
computes. A test that needs a peer calls `oracle` or `peer_context`: when the peer is not
installed the test skips locally and fails under CI (`conftest.unavailable`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conftest import REPO_ROOT, unavailable

PEERS = ("pi", "pi16", "omp")
"""Every peer a differential test runs against."""
PI_VERSIONS = ("pi", "pi16")
"""The pi releases users run today: 0.73.1 and 1.6.0."""

ORACLES = REPO_ROOT.parent / "shared" / "peers"
"""Where the oracle scripts are."""


@dataclass(frozen=True)
class Peer:
    name: str
    runner: list[str]
    """The command that runs the oracle script (interpreter and script)."""
    env: dict[str, str]


def _anchors() -> Path:
    return Path(os.environ.get("ANCHORS_DIR", "/tmp/anchors"))


def _anchors16() -> Path:
    return Path(os.environ.get("ANCHORS16_DIR", "/tmp/anchors16"))


def find(name: str) -> Peer | None:
    """The installed peer `name`, or None when it (or its runtime) is not installed."""
    env = {**os.environ, "ANCHORS_DIR": str(_anchors()), "ANCHORS16_DIR": str(_anchors16())}
    if name == "pi":
        node = shutil.which("node")
        installed = _anchors() / "pi" / "node_modules" / "@mariozechner" / "pi-coding-agent"
        script = ORACLES / "pi-oracle.mjs"
        if node is None or not installed.is_dir() or not script.is_file():
            return None
        return Peer(name, [node, str(script)], env)
    if name == "pi16":
        node = _anchors16() / "node22" / "bin" / "node"
        installed = _anchors16() / "pi16" / "node_modules" / "@earendil-works" / "pi-coding-agent"
        script = ORACLES / "pi16-oracle.mjs"
        if not node.is_file() or not installed.is_dir() or not script.is_file():
            return None
        return Peer(name, [str(node), str(script)], env)
    if name == "omp":
        bun = _anchors() / "omp" / "node_modules" / ".bin" / "bun"
        installed = _anchors() / "omp" / "node_modules" / "@oh-my-pi" / "pi-coding-agent"
        script = ORACLES / "omp-oracle.ts"
        if not bun.exists() or not installed.is_dir() or not script.is_file():
            return None
        return Peer(name, [str(bun), str(script)], env)
    raise ValueError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")


def require(name: str) -> Peer:
    """The installed peer `name`; skips the test (fails it under CI) when it is missing."""
    peer = find(name)
    if peer is None:
        unavailable(f"the peer {name} is not installed; run scripts/peers/setup")
    return peer


def oracle(name: str, *args: str | os.PathLike[str], check: bool = True) -> str:
    """What peer `name`'s oracle prints for `args` (stdout; raises on a non-zero exit
    when `check`)."""
    peer = require(name)
    done = subprocess.run(
        [*peer.runner, *map(os.fspath, args)],
        capture_output=True,
        text=True,
        env=peer.env,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"{name} oracle {' '.join(map(os.fspath, args))} exited {done.returncode}:\n"
            f"{done.stderr}"
        )
    return done.stdout


def peer_context(
    name: str, path: str | os.PathLike[str], *, leaf: str | None = None
) -> dict[str, Any]:
    """The context peer `name` builds for a session file at its leaf (or at `leaf`)."""
    args: list[str | os.PathLike[str]] = ["context", path]
    if leaf is not None:
        args += ["--leaf", leaf]
    context: dict[str, Any] = json.loads(oracle(name, *args))
    return context


def peer_contexts(name: str, path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """`{"leafId", "context"}` for every entry of the file taken as the leaf, in file order."""
    out = oracle(name, "context", path, "--all-leaves")
    return [json.loads(line) for line in out.splitlines() if line.strip()]
