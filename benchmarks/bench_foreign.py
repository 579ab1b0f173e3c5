"""Benchmark listing a Claude Code or Codex store, as `--agent claude list --all` does.

    .venv/bin/python benchmarks/bench_foreign.py [--files 300] [--agent claude|codex] [--runs 5]

Builds a store of `--files` session files from the real files in
`shared/fixtures/foreign` (each copied under a new session id, spread over 20
project dirs; hand-assembled files left out), then times, each `--runs` times in
a fresh process (`list_all_sessions` through `ForeignStorage`, as the CLI lists):

* floor:  os.stat of every file (what any listing must still do);
* cold:   no listing cache: each file read whole once, for its id and times and the
          session's title, first prompt and message count (on every core when the
          store is large enough: `foreign.store._workers_for`);
* warm:   the listing cache present, nothing changed (a stat per file, one query);
* again:  the same listing repeated in one process;
* grown:  the largest session grew by a few lines (the one an agent is writing), then
          listed in a fresh process: what a listing while an agent works costs;
* full:   for comparison, what reading every transcript would cost (the readers).

Times are for the call inside the process (interpreter start and imports not
included). Read the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "data" / "real" / "foreign"
HAND_ASSEMBLED = ("jazzyalex__",)

CHILD = r"""
import json, os, sys, time
args = json.loads(sys.argv[1])
from sessiontree.listing import list_all_sessions
from sessiontree.foreign.storage import ForeignStorage
from sessiontree.foreign.store import ForeignStore
from sessiontree.layout import store_parts
times = []
count = 0
if args["mode"] == "floor":
    for _ in range(args["repeat"]):
        t = time.perf_counter()
        store = ForeignStore.at(args["agent"], args["root"])
        for path in store.files():
            os.stat(path)
        times.append((time.perf_counter() - t) * 1000)
elif args["mode"] == "full":
    for _ in range(args["repeat"]):
        t = time.perf_counter()
        store = ForeignStore.at(args["agent"], args["root"])
        for p in store.files():
            count += len(store.read(p, subagents=False).manager.get_entries())
        times.append((time.perf_counter() - t) * 1000)
else:
    for _ in range(args["repeat"]):
        t = time.perf_counter()
        store = ForeignStore.at(args["agent"], args["root"], args["cache"])
        infos = list_all_sessions(store_parts(ForeignStorage(store), store.home))
        times.append((time.perf_counter() - t) * 1000)
        count = len(infos)
print(json.dumps({"times": times, "count": count}))
"""


def build(agent: str, files: int, root: Path) -> tuple[int, int]:
    """`files` session files from the real ones; (count, bytes)."""
    sources = sorted(
        p for p in (FIXTURES / agent).glob("*.jsonl") if not p.name.startswith(HAND_ASSEMBLED)
    )
    if not sources:
        raise SystemExit(f"no fixtures in {FIXTURES / agent}")
    total = 0
    for i in range(files):
        source = sources[i % len(sources)]
        sid = str(uuid.UUID(int=i + 1))
        if agent == "claude":
            target = root / "projects" / f"-work-project-{i % 20}" / f"{sid}.jsonl"
        else:
            target = (
                root / "sessions" / "2026" / "01" / f"{i % 20 + 1:02d}" / f"rollout-{sid}.jsonl"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        total += target.stat().st_size
    return files, total


def grow(path: Path, lines: int = 3) -> None:
    """Append `lines` lines to the session at `path`: copies of its last lines, a
    Claude Code line under a new uuid chained to the line before it (a turn goes on)."""
    values: list[Any] = []
    for raw in path.read_bytes().split(b"\n"):
        try:
            values.append(json.loads(raw))
        except ValueError:  # a blank or damaged line
            continue
    added: list[bytes] = []
    last: str | None = None
    for value in values[-lines:]:
        if isinstance(value, dict) and "uuid" in value:
            if last is not None:
                value["parentUuid"] = last
            value["uuid"] = last = str(uuid.uuid4())
        added.append(json.dumps(value).encode())
    with path.open("ab") as f:
        f.write(b"\n".join(added) + b"\n")


def child(args: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(args)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--agent", choices=["claude", "codex"], default="claude")
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--work", type=Path, default=None)
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="sessiontree-bench-foreign-"))
    root = work / a.agent
    cache = work / "agent"
    try:
        count, size = build(a.agent, a.files, root)
        print(f"{count} {a.agent} files, {size / 1e6:.1f} MB in {root}")
        base = {"agent": a.agent, "root": str(root), "cache": str(cache), "repeat": 1}
        rows: list[tuple[str, list[float], int]] = []
        floor = [child({**base, "mode": "floor"})["times"][0] for _ in range(a.runs)]
        rows.append(("floor (stat every file)", floor, count))
        cold = []
        for _ in range(a.runs):
            shutil.rmtree(cache, ignore_errors=True)
            cache.mkdir()
            result = child({**base, "mode": "list"})
            cold.append(result["times"][0])
        rows.append(("cold (no cache: each file whole)", cold, result["count"]))
        warm = [child({**base, "mode": "list"})["times"][0] for _ in range(a.runs)]
        rows.append(("warm (cache, fresh process)", warm, result["count"]))
        again = child({**base, "mode": "list", "repeat": a.runs})["times"][1:]
        rows.append(("again (same process)", again or [0.0], result["count"]))
        largest = max(root.rglob("*.jsonl"), key=lambda p: p.stat().st_size)
        grown = []
        for _ in range(a.runs):
            grow(largest)
            grown.append(child({**base, "mode": "list"})["times"][0])
        rows.append(("grown (largest file + 3 lines)", grown, result["count"]))
        full = child({**base, "mode": "full"})
        rows.append(("full read of every transcript", full["times"], full["count"]))
        width = max(len(r[0]) for r in rows)
        print(f"{'workload'.ljust(width)}  median ms    min ms    max ms   items")
        for name, times, items in rows:
            print(
                f"{name.ljust(width)}  {statistics.median(times):9.1f} {min(times):9.1f} "
                f"{max(times):9.1f} {items:7d}"
            )
    finally:
        if a.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
