"""The store-size benchmark: `python -m benchmarks store --sessions 10000 [--runs 5]`.

Writes a corpus of pi-format sessions (benchmarks.data.write_corpus: deterministic
from `--seed`, a few real sessions mixed in) into an agent dir under `--work`
(kept between runs: a second run reuses it) and times, each in a fresh process
with the caches warm unless said, what a user with a big store runs, next to the
floor measured in the same run on the same files:

* ingest: the content index built from nothing (sessions/s, MB/s), against `cat`
  of every file; its peak memory; then a refresh of the unchanged store;
* `list --all --json`, `list --all --json -n 0` (every row) and `list --all -n 20`
  (the first page, a table), against `grep -c '' -r` over the store;
* `search WORD --all --json` (p50/p95 over the runs) for a rare, a less rare and a
  common word, against `grep -rl WORD` (and `rg -l WORD` when installed);
* `usage daily --json` (the usage report), against `grep -c '' -r`.

With `--postgres [URL]` the corpus is then loaded into a PostgreSQL schema of its own
(`import-files`, timed as the database's ingest) and the same listings, searches and
usage report run there, each against the file store's figure; with `--ccusage` the
usage report is timed against ccusage's (benchmarks/bench_usage.py).

A ratio is the command's median (p50) over the floor's median: under 1 is faster
than the floor. The CPU ratio compares the children's CPU time (user + system), which
other work on a shared machine disturbs less than the wall time. Peak memory is the
child's ru_maxrss (the workload's VmHWM for the in-process ingest).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks.data import RARE_WORD, SOME_WORD, write_corpus

CLI = [sys.executable, "-c", "from sessiontree.cli import main; main()"]
COMMON_WORD = "compaction"


def timed_process(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, float]:
    """Seconds, CPU seconds (user + system) and peak RSS (MB) of one child process run
    to its end (output discarded)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):  # grep and search exit 1 when nothing matched
        raise SystemExit(f"{' '.join(argv)} failed with exit code {proc.returncode}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def sample(argv: list[str], cwd: Path, env: dict[str, str], runs: int) -> dict[str, Any]:
    """`runs` timings of a command after one untimed run (which warms the caches)."""
    timed_process(argv, cwd, env)
    times, cpu, peaks = zip(*(timed_process(argv, cwd, env) for _ in range(runs)), strict=True)
    return {"times": sorted(times), "cpu": sorted(cpu), "rss_mb": max(peaks)}


def p95(times: list[float]) -> float:
    return times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]


def ms(seconds: float) -> str:
    value = seconds * 1000
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


class StoreTable:
    """Rows of figure | p50 | p95 | floor | floor p50 | ratio | CPU ratio | peak RSS."""

    head = (
        "figure",
        "p50 ms",
        "p95 ms",
        "floor",
        "floor ms",
        "ratio",
        "CPU ms",
        "floor CPU ms",
        "CPU ratio",
        "peak RSS MB",
    )

    def __init__(self) -> None:
        self.rows: list[tuple[str, ...]] = []
        self.notes: list[str] = []

    def add(
        self, name: str, result: dict[str, Any], floor_name: str, floor: dict[str, Any]
    ) -> None:
        median, floor_median = (statistics.median(r["times"]) for r in (result, floor))
        cpu, floor_cpu = (
            statistics.median(r["cpu"]) if r.get("cpu") else 0.0 for r in (result, floor)
        )
        self.rows.append(
            (
                name,
                ms(median),
                ms(p95(result["times"])),
                floor_name,
                ms(floor_median),
                f"{median / floor_median:.2f}x",
                ms(cpu) if cpu else "-",
                ms(floor_cpu),
                f"{cpu / floor_cpu:.2f}x" if cpu and floor_cpu else "-",
                f"{result['rss_mb']:,.0f}",
            )
        )
        # A run at 100,000 sessions takes long: say each row as it comes, the table
        # follows at the end.
        print(" | ".join(self.rows[-1]), file=sys.stderr, flush=True)

    def print(self) -> None:
        widths = [max(len(r[i]) for r in [self.head, *self.rows]) for i in range(len(self.head))]
        print(" | ".join(h.ljust(w) for h, w in zip(self.head, widths, strict=True)))
        print("-|-".join("-" * w for w in widths))
        for row in self.rows:
            print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        for note in self.notes:
            print(note)


def corpus(work: Path, sessions: int, seed: int) -> tuple[Path, int, int]:
    """The agent dir of the corpus (written unless already there), its files and bytes."""
    agent = work / f"corpus-{sessions}-seed{seed}"
    done = agent / "corpus-written"
    if not done.exists():
        shutil.rmtree(agent, ignore_errors=True)
        started = time.perf_counter()
        write_corpus(agent, sessions, seed)
        done.write_text(f"{time.perf_counter() - started:.1f} s\n")
    files = list((agent / "sessions").rglob("*.jsonl"))
    return agent, len(files), sum(p.stat().st_size for p in files)


def search_rows(
    table: StoreTable,
    agent: Path,
    env: dict[str, str],
    runs: int,
    floors: dict[str, dict[str, Any]],
    label: str = "",
) -> dict[str, dict[str, Any]]:
    """`search WORD --all --json` for each word of WORDS, against each floor of that word
    (`floors`: "grep -rl WORD" -> its sample), and every run of the words together (the
    p50 and p95 a user sees over several searches); returns the searches' samples."""
    results: dict[str, dict[str, Any]] = {}
    for word in WORDS:
        result = sample([*CLI, "search", word, "--all", "--json"], agent, env, runs)
        results[word] = result
        found = f"{FOUND[word]:,} files" if word in FOUND else ""
        for floor_name, floor in floors.items():
            if floor_name.endswith(f" {word}"):
                name = f"{label}search {word} --all --json ({found})"
                table.add(name, result, floor_name.removesuffix(f" {word}"), floor)
    together = pooled(results.values())
    for kind in dict.fromkeys(name.rsplit(" ", 1)[0] for name in floors):
        floor = pooled(r for name, r in floors.items() if name.rsplit(" ", 1)[0] == kind)
        table.add(f"{label}search, the {len(WORDS)} words together", together, kind, floor)
    return results


def pooled(samples: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The runs of several samples as one."""
    samples = list(samples)
    return {
        "times": sorted(t for r in samples for t in r["times"]),
        "cpu": sorted(t for r in samples for t in r["cpu"]),
        "rss_mb": max(r["rss_mb"] for r in samples),
    }


FOUND: dict[str, int] = {}
"""Files holding each word of WORDS (grep's count, filled by main)."""
WORDS = (RARE_WORD, SOME_WORD, COMMON_WORD)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks store", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions in the corpus")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each command")
    parser.add_argument("--seed", type=int, default=1, help="the corpus's seed")
    parser.add_argument("--work", default="/tmp/sessiontree-bench-store", help="data directory")
    parser.add_argument(
        "--postgres",
        nargs="?",
        const=os.environ.get("SESSIONTREE_TEST_PG", ""),
        default=None,
        metavar="URL",
        help="also load the corpus into PostgreSQL and time the same commands there "
        '(default URL: $SESSIONTREE_TEST_PG, which `eval "$(scripts/pg-start)"` sets)',
    )
    parser.add_argument(
        "--ccusage",
        action="store_true",
        help="also time the usage report against ccusage (installed from npm under --work)",
    )
    args = parser.parse_args(argv)
    if args.postgres == "":
        parser.error(
            '--postgres: no URL given and no $SESSIONTREE_TEST_PG (eval "$(scripts/pg-start)")'
        )
    from benchmarks.__main__ import compile_bytecode, run_workload

    compile_bytecode()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    agent, files, size = corpus(work, args.sessions, args.seed)
    mb = size / 2**20
    env = dict(os.environ, PI_CODING_AGENT_DIR=str(agent))
    env.pop("SESSIONTREE_STORE", None)
    table = StoreTable()
    runs = args.runs

    cat_all = "find sessions -name '*.jsonl' -exec cat {} + >/dev/null"
    cat = sample(["sh", "-c", cat_all], agent, env, runs)
    build = run_workload("index_build", {"agent": str(agent), "repeat": 1})
    table.add("ingest: content index from nothing", build, "cat", cat)
    build_s = statistics.median(build["times"])
    cat_rate = mb / statistics.median(cat["times"])
    table.notes.append(
        f"ingest: {files / build_s:,.0f} sessions/s, {mb / build_s:,.1f} MB/s = "
        f"{mb / build_s / cat_rate:.1%} of cat's {cat_rate:,.0f} MB/s; the index is "
        f"{build['db_bytes'] / 2**20:,.0f} MB; a refresh of the unchanged store read "
        f"{build['unchanged_files_read']} session files in {ms(build['unchanged_s'])} ms; "
        f"its CPU time counts its read-ahead workers' (peak RSS "
        f"{build.get('workers_rss_mb', 0):,.0f} MB each at most)"
    )

    lines = sample(["grep", "-c", "", "-r", "sessions"], agent, env, runs)
    listings: dict[str, dict[str, Any]] = {}
    for name, extra in LISTINGS:
        listings[name] = sample([*CLI, "list", "--all", *extra], agent, env, runs)
        table.add(name, listings[name], "grep -c '' -r", lines)

    rg = shutil.which("rg")
    floors: dict[str, dict[str, Any]] = {}
    for word in WORDS:
        FOUND[word] = subprocess.run(
            ["grep", "-rl", word, "sessions"], cwd=agent, capture_output=True, check=False
        ).stdout.count(b"\n")
        floors[f"grep -rl {word}"] = sample(["grep", "-rl", word, "sessions"], agent, env, runs)
        if rg:
            floors[f"rg -l {word}"] = sample([rg, "-l", word, "sessions"], agent, env, runs)
    searches = search_rows(table, agent, env, runs, floors)

    usage = sample([*CLI, "usage", "daily", "--json"], agent, env, runs)
    table.add("usage daily --json", usage, "grep -c '' -r", lines)
    if args.ccusage:
        from benchmarks.bench_usage import usage_rows

        usage_rows(table, agent, work, runs)
    if args.postgres:
        postgres_rows(table, args.postgres, agent, files, mb, runs, cat, listings, searches, usage)

    print(
        f"sessiontree store benchmark: {files:,} sessions, {mb:,.0f} MB in {agent}; "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, {runs} runs each, "
        f"fresh processes, caches warm, load average {load_average()} at the end "
        f"({time.perf_counter() - started:.0f} s)"
    )
    table.print()


LISTINGS = (
    ("list --all --json", ["--json"]),
    ("list --all --json -n 0", ["--json", "-n", "0"]),
    ("list --all -n 20", ["-n", "20"]),
)


def load_average() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def postgres_rows(
    table: StoreTable,
    url: str,
    agent: Path,
    files: int,
    mb: float,
    runs: int,
    cat: dict[str, Any],
    listings: dict[str, dict[str, Any]],
    searches: dict[str, dict[str, Any]],
    usage: dict[str, Any],
) -> None:
    """The same commands on a PostgreSQL store loaded from the corpus (`import-files`,
    timed as its ingest), each against the file store's figure: a ratio over 1 is
    slower than the files. The store is a schema of its own, dropped at the end."""
    import psycopg
    from psycopg import sql

    schema = f"bench_store_{os.getpid()}"
    store = f"{url}{'&' if '?' in url else '?'}schema={schema}"
    env = dict(os.environ, SESSIONTREE_STORE=store)
    env.pop("PI_CODING_AGENT_DIR", None)
    try:
        seconds, cpu, rss = timed_process([*CLI, "import-files", str(agent), "--json"], agent, env)
        load = {"times": [seconds], "cpu": [cpu], "rss_mb": rss}
        table.add("postgres ingest: import-files of the corpus", load, "cat", cat)
        table.notes.append(
            f"postgres ingest: {files / seconds:,.0f} sessions/s, {mb / seconds:,.1f} MB/s "
            f"(the client's peak RSS {rss:,.0f} MB; the server's memory is not counted)"
        )
        for name, _ in LISTINGS:
            argv = [*CLI, "list", "--all", *dict(LISTINGS)[name]]
            table.add(f"postgres: {name}", sample(argv, agent, env, runs), "files", listings[name])
        search_rows(
            table,
            agent,
            env,
            runs,
            {f"files {word}": result for word, result in searches.items()},
            label="postgres: ",
        )
        result = sample([*CLI, "usage", "daily", "--json"], agent, env, runs)
        table.add("postgres: usage daily --json", result, "files", usage)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
