"""The benchmark suite: `python -m benchmarks [--quick] [--peers] [--runs N]`.

`python -m benchmarks store --sessions 10000` runs the store-size benchmark instead
(benchmarks/bench_store.py).

Generates its data deterministically (seeded) under a work dir, runs each
workload in its own process several times and prints one table: median, min and
max of the measured work, the same-run floor (the unavoidable work on the same
data) and the ratio to it, and peak RSS. `--peers` adds the TypeScript peers'
figures on the same files when they are installed (`scripts/peers/setup`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.data import SessionSpec, write_big_session, write_store

ROOT = Path(__file__).resolve().parent.parent
ORACLE = ROOT / "scripts" / "peers" / "oracle"
"""Runs a TypeScript peer's oracle (scripts/peers/setup installs the peers)."""


def compile_bytecode() -> None:
    """Write sessiontree's .pyc files, as `pip install` does: with PYTHONDONTWRITEBYTECODE
    set (as in many sandboxes) and an editable checkout, each fresh process would
    otherwise compile every module it imports, and time that as if it were the work."""
    import compileall

    import sessiontree

    compileall.compile_dir(os.path.dirname(sessiontree.__file__), quiet=1)


def run_workload(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one workload in a child process (which reports its own peak RSS)."""
    # The caller's PYTHONPATH is kept after the checkout: a run of another tree's code
    # (`PYTHONPATH=<tree>/src:<tree>`, as the before/after tables are made) must time that
    # tree's sessiontree in its workloads too, not the installed one, as its CLI runs do.
    path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.workloads", name, json.dumps(args)],
        stdout=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.stdout.close()
    if proc.wait() != 0:
        raise SystemExit(f"workload {name} failed with exit code {proc.returncode}")
    result: dict[str, Any] = json.loads(out)
    return result


def peer_bench(peer: str, *argv: str) -> dict[str, Any] | None:
    """One bench line from a TypeScript peer's oracle, or None when not installed."""
    try:
        proc = subprocess.run(
            [str(ORACLE), peer, "bench", *argv], capture_output=True, timeout=600, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    line: dict[str, Any] = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    return line


def ms(seconds: float) -> str:
    value = seconds * 1000
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


class Table:
    def __init__(self) -> None:
        self.rows: list[list[str]] = []
        self.notes: list[str] = []

    def add(
        self,
        name: str,
        result: dict[str, Any],
        key: str = "times",
        floor: bool = True,
        peers: str = "",
    ) -> None:
        times = sorted(result[key])
        median = statistics.median(times)
        floor_median = statistics.median(result["floor"]) if floor and result.get("floor") else None
        ratio = f"{median / floor_median:.2f}x" if floor_median else "-"
        self.rows.append(
            [
                name,
                ms(median),
                ms(times[0]),
                ms(times[-1]),
                ms(floor_median) if floor_median else "-",
                ratio,
                f"{result.get('rss_mb', 0):,.0f}",
                peers,
            ]
        )

    def note(self, name: str, text: str) -> None:
        self.notes.append(f"{name}: {text}")

    def print(self) -> None:
        head = [
            "workload",
            "median ms",
            "min",
            "max",
            "floor ms",
            "ratio",
            "peak RSS MB",
            "peers (ms)",
        ]
        widths = [max(len(r[i]) for r in [head, *self.rows]) for i in range(len(head))]
        line = " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))
        print(line)
        print("-|-".join("-" * w for w in widths))
        for row in self.rows:
            print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        for note in self.notes:
            print(note)


def giant_sessions(work: Path, blobs: Path, quick: bool) -> list[tuple[str, Path]]:
    """The issue's giant sessions: 100 MB of 20,000 entries with branches, labels, a
    compaction and images (the shape of the peers' own big-session benchmark) and a 1 GB
    session compacted ten times."""
    out: list[tuple[str, Path]] = []
    entries, mb = (2_000, 10) if quick else (20_000, 100)
    big = work / f"big-{entries}-{mb}.jsonl"
    if not big.exists():
        write_big_session(big, SessionSpec(entries=entries, target_bytes=mb << 20), blobs)
    out.append((f"{mb} MB, {entries:,} entries, branches and a compaction", big))
    entries, size = (6_000, 40 * 2**20) if quick else (150_000, 2**30)
    giant = work / f"compacted-{entries}-{size}.jsonl"
    if not giant.exists():
        spec = SessionSpec(entries=entries, target_bytes=size, compactions=10)
        write_big_session(giant, spec, blobs)
    out.append((f"{size / 2**20:,.0f} MB, {entries:,} entries, 10 compactions", giant))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, to check the suite runs")
    parser.add_argument("--peers", action="store_true", help="also run the TypeScript peers")
    parser.add_argument("--runs", type=int, default=5, help="repetitions per workload")
    parser.add_argument("--work", default="/tmp/sessiontree-bench-suite", help="data directory")
    parser.add_argument("--only", default="", help="comma-separated workloads to run")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    runs = 2 if args.quick else args.runs
    only = set(filter(None, args.only.split(",")))

    def wanted(name: str) -> bool:
        return not only or name in only

    sizes = (
        [("load 1 MB", 300, 1_000_000)]
        if args.quick
        else [("load 50 MB", 10_000, 50 * 2**20), ("load 200 MB", 40_000, 200 * 2**20)]
    )
    table = Table()
    started = time.perf_counter()
    compile_bytecode()
    blobs = work / "agent" / "blobs"
    if wanted("load"):
        floor_rss = run_workload("import_floor", {})["rss_mb"]
        table.note("memory floor", f"{floor_rss:,.0f} MB (a fresh interpreter after import)")
    loads: list[tuple[str, Path]] = []
    for label, entries, size in sizes:
        path = work / f"session-{entries}-{size}.jsonl"
        if not path.exists():
            write_big_session(path, SessionSpec(entries=entries, target_bytes=size), blobs)
        loads.append((label, path))
    if wanted("load"):
        loads += giant_sessions(work, blobs, args.quick)
    for label, path in loads if wanted("load") else []:
        result = run_workload("load", {"path": str(path), "blobs": str(blobs), "repeat": runs})
        peer = ""
        if args.peers:
            figures = [
                peer_bench(p, "load", str(path), "--repeat", str(runs)) for p in ("omp", "pi")
            ]
            peer = " / ".join(
                f"{p} {f.get('medianMs', f.get('ms'))}"
                for p, f in zip(("omp", "pi"), figures, strict=True)
                if f
            )
            omp = figures[0]
            if omp:
                ratio = statistics.median(result["times"]) * 1000 / omp.get("medianMs", omp["ms"])
                peer += f" ({ratio:.2f}x omp)"
        size_mb = path.stat().st_size / 2**20
        table.add(f"{label}: open + context", result, peers=peer)
        table.note(
            f"{label}",
            f"peak RSS {result['rss_mb']:,.0f} MB = {result['rss_mb'] / size_mb:.2f}x the file "
            f"({size_mb:,.0f} MB), {result['rss_mb'] - floor_rss:,.0f} MB above the floor",
        )

    path_entries = 2_000 if args.quick else 20_000
    ctx_file = work / f"path-{path_entries}.jsonl"
    if not ctx_file.exists():
        write_big_session(
            ctx_file,
            SessionSpec(entries=path_entries, target_bytes=path_entries * 600, branches=0),
            blobs,
        )
    if wanted("context"):
        result = run_workload(
            "context", {"path": str(ctx_file), "blobs": str(blobs), "repeat": runs * 4}
        )
        peer = ""
        if args.peers:
            figures = [peer_bench(p, "context", str(ctx_file), "20") for p in ("omp", "pi")]
            peer = " / ".join(
                f"{p} {f['perCallMs']:.1f}"
                for p, f in zip(("omp", "pi"), figures, strict=True)
                if f
            )
        table.add(
            f"context, {result['path']:,}-entry path, from scratch (entries read)",
            result,
            peers=peer,
        )
        table.add(
            "context, same, first call after an index-first load",
            result,
            key="first_lazy",
            floor=False,
        )
        table.add(
            "context, same, `build_session_context(entries, leaf, by_id)`", result, key="function"
        )
        table.add("context, same (incremental, per call)", result, key="warm", floor=False)
    if wanted("tree"):
        result = run_workload(
            "tree", {"path": str(ctx_file), "blobs": str(blobs), "repeat": runs * 2}
        )
        peer = ""
        if args.peers:
            # Their bench times one getTree per process: the median over `runs` processes.
            tree_ms = {
                p: [
                    f["getTreeMs"]
                    for _ in range(runs)
                    if (f := peer_bench(p, "tree", str(ctx_file)))
                ]
                for p in ("omp", "pi")
            }
            peer = " / ".join(f"{p} {statistics.median(v):.1f}" for p, v in tree_ms.items() if v)
            ratios = ", ".join(
                f"{statistics.median(result['times']) * 1000 / statistics.median(v):.2f}x {p}"
                for p, v in tree_ms.items()
                if v
            )
            if ratios:
                table.note("get_tree", f"{ratios} (same run)")
        table.add(f"get_tree, {path_entries:,} entries", result, peers=peer)
        table.note("get_tree", f"first call on the opened manager {ms(result['first'])} ms")
        first = run_workload(
            "tree_first_lazy", {"path": str(ctx_file), "blobs": str(blobs), "repeat": runs}
        )
        table.add("get_tree, same, first call after an index-first load", first, floor=False)

    if wanted("append"):
        n = 1_000 if args.quick else 10_000
        result = run_workload("append", {"n": n, "repeat": runs})
        rate = n / statistics.median(result["times"])
        peer = ""
        if args.peers:
            figures = [
                peer_bench(p, "append", str(work / f"append-{p}"), str(n)) for p in ("omp", "pi")
            ]
            for p in ("omp", "pi"):
                shutil.rmtree(work / f"append-{p}", ignore_errors=True)
            peer = " / ".join(
                f"{p} {f['ms']:.0f} ({n / f['ms'] * 1000:,.0f}/s)"
                for p, f in zip(("omp", "pi"), figures, strict=True)
                if f
            )
            rates = ", ".join(
                f"{rate / (n / f['ms'] * 1000):.2f}x {p}'s rate"
                for p, f in zip(("omp", "pi"), figures, strict=True)
                if f
            )
            if rates:
                table.note("append", f"{rate:,.0f} entries/s: {rates} (same run)")
        us = statistics.median(result["times"]) / n * 1e6
        table.add(
            f"append {n:,} x 1 KB (the peers' messages) + flush ({rate:,.0f}/s, {us:.1f} µs each)",
            result,
            peers=peer,
        )

    if wanted("listing"):
        files = 100 if args.quick else 2_000
        # One project dir, so the peers' `list DIR` sees the same 2,000 files.
        agent = work / f"store-{files}"
        if not (agent / "sessions").exists():
            write_store(agent / "sessions", files, 20, 500, projects=1)
        common = {"agent": str(agent), "repeat": runs}
        cold = run_workload("listing", {**common, "mode": "cold"})
        peer = first = again = ""
        if args.peers:
            flat = next((agent / "sessions").iterdir())
            figures = [peer_bench(p, "list", str(flat)) for p in ("omp", "pi")]
            peer = " / ".join(
                f"{p} {f['ms']:.0f}" for p, f in zip(("omp", "pi"), figures, strict=True) if f
            )
            # omp keeps its scans in process: its first call is what a fresh process of
            # ours is compared with, its repeats what ours repeated in process is.
            omp = peer_bench("omp", "list", str(flat), "--repeat", str(max(runs, 2) + 1))
            if omp:
                first, again = f"omp first {omp['ms']:.0f}", f"omp {omp['medianMs']:.1f}"
        table.add(f"list_all {files:,} sessions, cold", cold, peers=peer)
        warm = {"times": [], "cpu": [], "floor": []}
        for _ in range(runs):
            one = run_workload("listing", {**common, "mode": "warm"})
            warm["times"] += one["times"]
            warm["cpu"] += one["cpu"]
            warm["floor"] += one["floor"]
            warm["rss_mb"] = one["rss_mb"]
        table.add(f"list_all {files:,}, warm cache, fresh process", warm, peers=first)
        repeated = run_workload("listing", {**common, "mode": "repeat"})
        table.add(f"list_all {files:,}, repeated in-process", repeated, peers=again)
        table.note(
            "list_all CPU",
            f"fresh process {ms(statistics.median(warm['cpu']))} ms, repeated in-process "
            f"{ms(statistics.median(repeated['cpu']))} ms (medians; the call's own CPU time)",
        )
        grown = sorted((agent / "sessions").rglob("*.jsonl"))[:10]
        for f in grown:
            with open(f, "ab") as out:
                out.write(
                    b'{"type":"custom","customType":"grow","id":"g","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z"}\n'
                )
        table.add(
            f"list_all {files:,}, after 10 sessions grew",
            run_workload("listing", {**common, "mode": "warm"}),
        )

    if wanted("search"):
        files = 100 if args.quick else 2_000
        agent = work / f"search-store-{files}"
        if not (agent / "sessions").exists():
            write_store(agent / "sessions", files, 20, 500, projects=20)
        words = ["session", "compaction summary", "serialize migrate", "nothing-like-this"]
        build = run_workload("index_build", {"agent": str(agent), "repeat": 1})
        mb = build["bytes"] / 2**20
        table.add(
            f"index build, {files:,} sessions, {mb:,.0f} MB "
            f"({mb / statistics.median(build['times']):,.1f} MB/s)",
            build,
            floor=False,
        )
        table.note(
            "index size",
            f"{build['db_bytes'] / 2**20:,.1f} MB on disk ({build['fts_bytes'] / 2**20:,.1f} MB "
            f"FTS) for {build['text_bytes'] / 2**20:,.1f} MB of text indexed: "
            f"{build['db_bytes'] / build['text_bytes']:.2f}x "
            f"(FTS {build['fts_bytes'] / build['text_bytes']:.2f}x), "
            f"{build['entries']:,} entries, no text stored",
        )
        lib = run_workload("search_index", {"agent": str(agent), "queries": words, "repeat": runs})
        table.add(f"search a word, {files:,} sessions, warm index, in process", lib)
        grown = run_workload(
            "search_refresh",
            {"agent": str(agent), "grow": 10, "entries": 100, "repeat": runs},
        )
        table.add("index refresh after 10 sessions grew by 100 entries", grown, floor=False)
        cli = run_workload(
            "cli_run",
            {
                "agent": str(agent),
                "argv": ["search", "compaction summary", "--all", "-n", "10"],
                "repeat": runs,
            },
        )
        listing = run_workload(
            "cli_run",
            {"agent": str(agent), "argv": ["list", "--all", "--limit", "1"], "repeat": runs},
        )
        ratio = statistics.median(cli["times"]) / statistics.median(listing["times"])
        table.add(f"CLI search --all, fresh process ({ratio:.2f}x a warm list)", cli, floor=False)
        table.add("CLI list --all --limit 1, fresh process, warm cache", listing, floor=False)
        big = os.environ.get("SESSIONTREE_BENCH_BIG_STORE")
        if big and not args.quick:
            lib = run_workload("search_index", {"agent": big, "queries": words, "repeat": runs})
            table.add(f"search a word, {lib['files']:,}-session big store ({big})", lib)

    if wanted("history"):
        n = 5_000 if args.quick else 100_000
        result = run_workload("history", {"n": n, "repeat": 5 if args.quick else 20})
        p50, p99 = result["p50"] * 1000, result["p99"] * 1000
        table.add(f"history search, {n:,} prompts (p50 {p50:.2f} / p99 {p99:.2f} ms)", result)
        table.note(
            "history add()",
            f"{result['add_us']:.1f} µs per call (queued); flush {result['flush_s']:.1f} s",
        )

    print(
        f"sessiontree benchmarks: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
        f"{runs} runs each, data in {work} ({time.perf_counter() - started:.0f} s)"
    )
    table.print()


if __name__ == "__main__":
    if sys.argv[1:2] == ["store"]:
        from benchmarks import bench_store

        bench_store.main(sys.argv[2:])
    else:
        main()
