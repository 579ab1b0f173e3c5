"""The TypeScript agents as oracles: one place that finds them and runs them.

Peers by name: `pi` (pi 0.73.1), `pi16` (pi 1.6.0, the newest pi) and `omp` (oh-my-pi
18.2.3), as `scripts/peers/setup` installs them (into `.peers`, or $SESSIONTREE_PEERS;
`scripts/test` runs it). Each is driven by the project's oracle script for it
(`scripts/peers/*-oracle.mjs`), whose commands (`context FILE`, `tree FILE
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

from tests.conftest import REPO_ROOT, unavailable

PEERS = ("pi", "pi16", "omp")
"""Every peer a differential test runs against."""
PI_VERSIONS = ("pi", "pi16")
"""The pi releases users run today: 0.73.1 and 1.6.0."""

SCRIPTS = REPO_ROOT / "scripts" / "peers"
"""The project's oracle scripts and the setup that installs the peers."""

PACKAGES = {
    "pi": "@mariozechner/pi-coding-agent",
    "pi16": "@earendil-works/pi-coding-agent",
    "omp": "@oh-my-pi/pi-coding-agent",
}
"""The npm package of each peer."""


@dataclass(frozen=True)
class Peer:
    name: str
    runner: list[str]
    """The command that runs the oracle script (interpreter and script)."""
    env: dict[str, str]
    project: Path
    """The npm project the peer is installed in."""

    @property
    def version(self) -> str:
        """The release of the peer's package that is installed."""
        manifest = self.project / "node_modules" / PACKAGES[self.name] / "package.json"
        version: str = json.loads(manifest.read_text(encoding="utf-8"))["version"]
        return version


def install_dir() -> Path:
    """Where `scripts/peers/setup` installs the peers: $SESSIONTREE_PEERS, or `.peers`."""
    return Path(os.environ.get("SESSIONTREE_PEERS") or REPO_ROOT / ".peers")


def project(name: str) -> Path:
    """The npm project peer `name` is taken from: $SESSIONTREE_PEER_<NAME> when set
    (`scripts/peers/drift` points it at the registry's newest release), else the pinned
    install."""
    return Path(os.environ.get(f"SESSIONTREE_PEER_{name.upper()}") or install_dir() / name)


def find(name: str) -> Peer | None:
    """The installed peer `name`, or None when it (or its runtime) is not installed."""
    if name not in PACKAGES:
        raise ValueError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
    where = project(name)
    runtime: str | Path | None
    if name == "pi":
        runtime = shutil.which("node")
    elif name == "pi16":  # pi 1.6 needs Node >= 22.19, installed beside the peers
        runtime = install_dir() / "node22" / "bin" / "node"
    else:
        runtime = where / "node_modules" / ".bin" / "bun"
    script = SCRIPTS / ("omp-oracle.mjs" if name == "omp" else "pi-oracle.mjs")
    installed = (where / "node_modules" / PACKAGES[name] / "package.json").is_file()
    if runtime is None or not Path(runtime).exists() or not installed:
        return None
    env = {**os.environ, "SESSIONTREE_PEER_DIR": str(where), "SESSIONTREE_PEER_NAME": name}
    return Peer(name, [str(runtime), str(script)], env, where)


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
