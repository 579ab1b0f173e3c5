"""Benchmark `sessiontree import --all --from claude`: a few hundred Claude Code sessions
into a pi store, each under the store's import lock (asked again there, then written).

    .venv/bin/python benchmarks/bench_import.py [--files 300] [--earlier 1000] [--runs 3]
        [--src OTHER_CHECKOUT/src]

Builds, from the real files in `tests/data/real/foreign/claude` (each copied under a new
session id, spread over 20 project dirs), a Claude Code store of `--files` sessions to
import and a pi store that holds `--earlier` imports of other sessions already (the
re-check under the lock lists the store: its size is what it costs). Then, `--runs` times
each, in a fresh process on a fresh copy of that store (the copy is not timed): the
import into it, and into an empty store. `--src` times another checkout's code on the
same data, run for run in turn (before and after a change). Prints the median wall and
CPU seconds of the whole process.

For figures from outside the process, run the printed command under `farm-bench`.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "data" / "real" / "foreign" / "claude"


def build_claude(root: Path, files: int, first_id: int) -> None:
    sources = sorted(FIXTURES.glob("*.jsonl"))
    if not sources:
        raise SystemExit(f"no real Claude Code files in {FIXTURES}")
    for i in range(files):
        target = (
            root / "projects" / f"-work-project-{i % 20}" / f"{uuid.UUID(int=first_id + i)}.jsonl"
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sources[i % len(sources)], target)


def import_all(src: Path, claude: Path, agent: Path, home: Path) -> tuple[float, float]:
    """One `import --all` in a fresh process: (wall, cpu) seconds."""
    env = dict(
        os.environ,
        PYTHONPATH=str(src),
        CLAUDE_CONFIG_DIR=str(claude),
        PI_CODING_AGENT_DIR=str(agent),
        HOME=str(home),
    )
    env.pop("SESSIONTREE_STORE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "sessiontree", "import", "--all", "--from", "claude"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--earlier", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--src", type=Path, action="append", default=[])
    ap.add_argument("--work", type=Path, default=None)
    a = ap.parse_args()
    work = a.work or Path(tempfile.mkdtemp(prefix="sessiontree-bench-import-"))
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    new, old, earlier = work / "claude-new", work / "claude-old", work / "agent-earlier"
    if not new.exists():
        build_claude(new, a.files, 1_000_000)
    if a.earlier and not earlier.exists():
        build_claude(old, a.earlier, 1)
        import_all(ROOT / "src", old, earlier, home)
    trees = [ROOT / "src", *a.src]
    for tree in trees:  # as `pip install` does: no run counts compiling the modules
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], check=True)
    for base in ([earlier] if a.earlier else []) + [None]:
        times: dict[Path, list[tuple[float, float]]] = {t: [] for t in trees}
        for _ in range(a.runs):
            for tree in trees:
                agent = work / "run"
                shutil.rmtree(agent, ignore_errors=True)
                if base is not None:
                    shutil.copytree(base, agent, symlinks=True)
                times[tree].append(import_all(tree, new, agent, home))
                shutil.rmtree(agent, ignore_errors=True)
        into = f"a store of {a.earlier} imports" if base is not None else "an empty store"
        for tree, runs in times.items():
            wall = statistics.median(w for w, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            print(f"{a.files} sessions into {into}, {tree}: wall {wall:.2f} s, cpu {cpu:.2f} s")
    print(f"data in {work}")


if __name__ == "__main__":
    main()
