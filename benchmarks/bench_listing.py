"""Benchmark session listing (`list_all_sessions`) over a large store.

    .venv/bin/python benchmarks/bench_listing.py                # 2000 sessions, 20-500 entries
    .venv/bin/python benchmarks/bench_listing.py --max-entries 200   # a smaller store

Generates `--files` sessions (fixed seed) spread over `--projects`
project dirs of a temporary agent dir, then times, each `--runs` times:

* floor:        os.stat of every session file (what any cache must still do);
* cold:         a fresh process, no cache db: every file is read and parsed;
* cold, 1 proc: the same, scanning in this process only (no worker processes);
* warm, fresh:  a fresh process, cache db present, nothing changed;
* warm, again:  the same call repeated in one process (in-process cache);
* grown:        a fresh process after 10 sessions grew by a few entries.

Times are for the `list_all_sessions` call inside the process (interpreter start
and `import sessiontree` are reported separately); `cpu` is the CPU time that call
took, its worker processes included (on a shared machine it moves less than the
wall time). The machine's other load
shows up in the spread, so read the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sessiontree.format import serialize_entry

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from sessiontree.listing import _scan, list_all_sessions
from sessiontree.layout import store_parts
t1 = time.perf_counter()
args = json.loads(sys.argv[1])
if args.get("workers"):
    _scan.MAX_WORKERS = args["workers"]
def cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # the scan's worker processes
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
times = []
cpus = []
for _ in range(args["repeat"]):
    t = time.perf_counter()
    c = cpu()
    infos = list_all_sessions(store_parts(agent_dir=args["agent"]))
    times.append((time.perf_counter() - t) * 1000)
    cpus.append((cpu() - c) * 1000)
print(json.dumps({
    "import_ms": (t1 - t0) * 1000,
    "times": times,
    "cpu": cpus,
    "count": len(infos),
    "messages": sum(i.message_count for i in infos),
}))
"""

WORDS = (
    "session tree leaf branch entry parent compaction summary context message assistant user "
    "tool result file path read write edit bash grep find function class import export return"
).split()


def iso(ms: int) -> str:
    t = time.gmtime(ms // 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{ms % 1000:03d}Z"


def own_generator(out: Path, files: int, lo: int, hi: int, seed: int) -> None:
    """Sessions of user/assistant/toolResult turns (a fallback for the peers' generator)."""
    r = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    base = 1_763_681_581_544
    for k in range(files):
        start = base + k * 3_600_000
        sid = f"{r.getrandbits(64):016x}"
        ms = start
        lines = [{"type": "session", "version": 3, "id": sid, "timestamp": iso(ms), "cwd": "/w"}]
        parent = None
        for i in range(r.randrange(lo, hi + 1)):
            ms += r.randrange(500, 20_000)
            role = ("user", "assistant", "toolResult")[i % 3]
            size = int(r.lognormvariate(5.5, 1.2)) if role == "toolResult" else r.randrange(20, 600)
            text = " ".join(r.choice(WORDS) for _ in range(max(1, size // 6)))
            eid = f"{r.getrandbits(32):08x}"
            msg = {"role": role, "content": [{"type": "text", "text": text}], "timestamp": ms}
            lines.append(
                {
                    "type": "message",
                    "id": eid,
                    "parentId": parent,
                    "timestamp": iso(ms),
                    "message": msg,
                }
            )
            parent = eid
        path = out / f"{iso(start).replace(':', '-').replace('.', '-')}_{sid}.jsonl"
        path.write_text("".join(serialize_entry(e) + "\n" for e in lines))
        os.utime(path, (ms / 1000, ms / 1000))


def generate(args: argparse.Namespace, sessions_root: Path) -> tuple[int, int]:
    raw = sessions_root.parent / "generated"
    own_generator(raw, args.files, args.min_entries, args.max_entries, args.seed)
    names = sorted(os.listdir(raw))
    total = 0
    for i, name in enumerate(names):
        project = sessions_root / f"--bench-project-{i % args.projects}--"
        project.mkdir(parents=True, exist_ok=True)
        target = project / name
        os.replace(raw / name, target)  # keeps the mtime the generator set
        total += target.stat().st_size
    raw.rmdir()
    return len(names), total


def child(agent: Path, repeat: int = 1, workers: int | None = None) -> dict[str, Any]:
    payload = json.dumps({"agent": str(agent), "repeat": repeat, "workers": workers})
    out = subprocess.run(
        [sys.executable, "-c", CHILD, payload], check=True, capture_output=True, text=True
    ).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def floor(sessions_root: Path) -> float:
    t = time.perf_counter()
    for project in os.scandir(sessions_root):
        for entry in os.scandir(project.path):
            if entry.name.endswith(".jsonl"):
                os.stat(entry.path)
    return (time.perf_counter() - t) * 1000


def grow(files: list[Path], round_no: int) -> None:
    for path in files:
        lines = []
        for j in range(3):
            msg = {
                "role": "user" if j % 2 == 0 else "assistant",
                "content": [{"type": "text", "text": f"grown {round_no}.{j} " + "w " * 200}],
                "timestamp": 1_770_000_000_000,
            }
            entry = {
                "type": "message",
                "id": f"{round_no:04x}{j:04x}",
                "parentId": None,
                "timestamp": "2026-02-16T10:00:00.000Z",
                "message": msg,
            }
            lines.append(serialize_entry(entry) + "\n")
        with open(path, "a", encoding="utf-8") as f:
            f.write("".join(lines))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--min-entries", type=int, default=20)
    ap.add_argument("--max-entries", type=int, default=500)
    ap.add_argument("--bytes-per-entry", type=int, default=500)
    ap.add_argument("--projects", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--work", help="directory to build the store in (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the generated store")
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = ap.parse_args(argv)

    work = Path(args.work or tempfile.mkdtemp(prefix="bench-listing-"))
    agent = work / "agent"
    sessions_root = agent / "sessions"
    try:
        if not sessions_root.is_dir():
            t = time.perf_counter()
            n, size = generate(args, sessions_root)
            print(f"generated {n} sessions, {size / 1e6:.1f} MB in {time.perf_counter() - t:.1f} s")
        files = sorted(sessions_root.glob("*/*.jsonl"))
        size = sum(p.stat().st_size for p in files)
        print(f"store: {len(files)} sessions, {size / 1e6:.1f} MB, {args.projects} project dirs")
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()}")
        cache = agent / "cache"
        rows: dict[str, list[float]] = {}
        cpu: dict[str, list[float]] = {}
        imports: list[float] = []

        def record(name: str, result: dict[str, Any], skip: int = 0) -> None:
            if result["count"] != len(files):
                raise SystemExit(f"{name}: listed {result['count']} of {len(files)} sessions")
            rows.setdefault(name, []).extend(result["times"][skip:])
            cpu.setdefault(name, []).extend(result["cpu"][skip:])
            imports.append(result["import_ms"])

        # touch every file once so the page cache is warm for every scenario
        for p in files:
            p.read_bytes()
        for _ in range(args.runs):
            rows.setdefault("floor: os.stat per file", []).append(floor(sessions_root))
        for _ in range(args.runs):
            shutil.rmtree(cache, ignore_errors=True)
            record("cold (no cache db)", child(agent))
        for _ in range(args.runs):
            shutil.rmtree(cache, ignore_errors=True)
            record("cold, 1 process", child(agent, workers=1))
        for _ in range(args.runs):
            record("warm, fresh process", child(agent))
        result = child(agent, repeat=args.runs + 1)
        record("warm, same process again", result, skip=1)
        step = max(1, len(files) // 10)
        grown = files[::step][:10]
        for k in range(args.runs):
            grow(grown, k)
            record("10 sessions grew, fresh process", child(agent))

        print()
        heading = f"{'list_all_sessions':36s} {'median':>9s} {'min':>9s} {'max':>9s} {'cpu':>9s}"
        print(f"{heading}   (ms, {args.runs} runs; cpu: median, workers included)")
        for name, values in rows.items():
            used = f"{statistics.median(cpu[name]):9.1f}" if name in cpu else f"{'':9s}"
            print(
                f"{name:36s} {statistics.median(values):9.1f} {min(values):9.1f} "
                f"{max(values):9.1f} {used}"
            )
        print(f"{'(import sessiontree, per process)':36s} {statistics.median(imports):9.1f}")
        db = cache / "sessions-meta.db"
        if db.exists():
            print(f"cache db: {db.stat().st_size / 1e6:.1f} MB")
        if args.json:
            print(json.dumps({k: sorted(v) for k, v in rows.items()}))
            print(json.dumps({k: sorted(v) for k, v in cpu.items()}))
    finally:
        if not args.keep and not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
