"""Benchmark HistoryStorage: add() latency, flush time and search latency.

    .venv/bin/python benchmarks/bench_history.py --n 100000

Fills a fresh database in a temporary directory with generated prompts shaped
like a coding agent's (short requests, file paths, identifiers, pasted errors,
a few long pastes), then times searches a user would type, including the
one- and two-letter prefixes an incremental search box sends first.
`--compare` also times the straightforward query that sorts every match by
created_at, the alternative the store's query avoids.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sessiontree.history import HistoryStorage
from sessiontree.history._history import _fts_query

VERBS = [
    "fix", "add", "refactor", "explain", "write", "update", "remove", "rename", "why does",
    "how do I", "implement", "debug", "optimize", "review", "run", "migrate", "document",
    "split", "move", "test", "check", "make", "investigate", "port", "clean up",
]  # fmt: skip
OBJECTS = [
    "the failing test", "unit tests for", "the parser", "the session manager", "the CLI",
    "error handling in", "the migration", "the README", "type hints in", "the benchmark",
    "the flaky integration test", "logging in", "the database schema", "the config loader",
    "the retry logic", "the docker compose file", "the CI workflow", "the API client",
    "the cache invalidation", "the websocket handler", "pagination", "the auth middleware",
]  # fmt: skip
TAILS = [
    "", "", "", "please", "so it handles empty input", "without breaking the public API",
    "and add a regression test", "it crashes on startup", "it is too slow", "on windows",
    "use pathlib instead", "keep backwards compatibility", "step by step",
    "TypeError: cannot read properties of undefined (reading 'map')",
    "sqlite3.OperationalError: database is locked", "ENOENT: no such file or directory",
    "see the stack trace below", "in the same style as the rest of the module",
]  # fmt: skip
DIRS = ["src", "tests", "lib", "packages/core/src", "app", "scripts", "docs"]
EXTS = ["py", "ts", "tsx", "rs", "go", "md", "json", "toml", "yaml"]
SYLLABLES = "ka lo mi nu pe ra si to vu xe zo be da fi gu ho ji ku le mo ne po qu".split()

QUERIES = [
    # incremental typing of a common request
    "f", "fi", "fix", "fix t", "fix the", "fix the fa", "fix the failing test",
    # other common words and prefixes
    "a", "t", "the", "add unit", "refactor pars", "why", "explain how", "test",
    "migrat", "docker comp", "TypeError", "database is locked", "src/", "tests/test_",
    "pyproject", "step by step", "windows", "readme",
    # rare and absent terms
    "kalomi", "zozobe", "nosuchwordanywhere", "fix nosuchwordanywhere",
]  # fmt: skip


def identifier(rng: random.Random) -> str:
    parts = [rng.choice(SYLLABLES) + rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))]
    return rng.choice([parts[0] + "".join(p.title() for p in parts[1:]), "_".join(parts)])


def prompt(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.6:
        text = f"{rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)}"
    elif kind < 0.85:
        path = f"{rng.choice(DIRS)}/{identifier(rng)}.{rng.choice(EXTS)}"
        text = f"{rng.choice(VERBS)} {identifier(rng)} in {path} {rng.choice(TAILS)}"
    elif kind < 0.98:
        text = " ".join(
            rng.choice([rng.choice(VERBS), rng.choice(OBJECTS), identifier(rng), str(rng.random())])
            for _ in range(rng.randint(5, 40))
        )
    else:  # a pasted log or file: long
        text = "\n".join(
            f"{rng.choice(TAILS)} at {identifier(rng)} ({rng.choice(DIRS)}/{identifier(rng)}.ts:"
            f"{rng.randint(1, 999)})"
            for _ in range(rng.randint(20, 200))
        )
    return text.strip()


def percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def time_queries(
    run: Callable[[str], object], repeat: int
) -> tuple[list[float], dict[str, list[float]]]:
    """Time every query `repeat` times; return all samples (ms), and them by query."""
    samples: list[float] = []
    per_query: dict[str, list[float]] = {query: [] for query in QUERIES}
    for _ in range(repeat):
        for query in QUERIES:
            start = time.perf_counter()
            run(query)
            elapsed = (time.perf_counter() - start) * 1000
            samples.append(elapsed)
            per_query[query].append(elapsed)
    return samples, per_query


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="prompts to add")
    parser.add_argument("--limit", type=int, default=50, help="search/get_recent limit")
    parser.add_argument("--repeat", type=int, default=20, help="runs of the query set")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--compare", action="store_true", help="also time a full-sort query")
    parser.add_argument("--per-query", action="store_true", help="print each query's timings")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    prompts = [prompt(rng) for _ in range(args.n)]
    rows: list[tuple[str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history.db"
        history = HistoryStorage.open(path)
        try:
            add_us: list[float] = []
            for text in prompts:
                start = time.perf_counter()
                history.add(text, cwd="/home/user/project")
                add_us.append((time.perf_counter() - start) * 1e6)
            start = time.perf_counter()
            history.flush()
            flush_s = time.perf_counter() - start

            recent_ms: list[float] = []
            for _ in range(args.repeat * 10):
                start = time.perf_counter()
                history.get_recent(args.limit)
                recent_ms.append((time.perf_counter() - start) * 1000)

            search, per_query = time_queries(lambda q: history.search(q, args.limit), args.repeat)
            search_max, _ = time_queries(lambda q: history.search(q, 1000), 2)
        finally:
            history.close()
        size_mb = path.stat().st_size / 1e6
        conn = sqlite3.connect(path)
        try:
            (stored,) = conn.execute("SELECT count(*) FROM history").fetchone()
        finally:
            conn.close()

        rows += [
            ("prompts added / stored", f"{args.n} / {stored} (consecutive repeats dropped)"),
            ("db size", f"{size_mb:.1f} MB"),
            ("add() per call, mean", f"{statistics.fmean(add_us):.1f} µs"),
            ("add() per call, p99", f"{percentile(add_us, 99):.1f} µs"),
            ("add() per call, max", f"{max(add_us):.1f} µs"),
            ("flush() after the adds", f"{flush_s * 1000:.0f} ms"),
            (f"get_recent({args.limit}) p50 / p99", fmt(recent_ms)),
            (f"search(limit={args.limit}) p50 / p99", fmt(search)),
            ("search(limit=1000) p50 / p99", fmt(search_max)),
            (
                "slowest query (median)",
                max(per_query, key=lambda q: statistics.median(per_query[q])),
            ),
        ]
        if args.compare:
            rows.append(("full-sort query p50 / p99", fmt(compare(path, args))))

    width = max(len(name) for name, _ in rows)
    print(f"{'metric':<{width}}  value")
    print(f"{'-' * width}  {'-' * 24}")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    if args.per_query:
        print(f"\n{'query':<24}  median / max (ms)")
        for query, ms in per_query.items():
            print(f"{query!r:<24}  {statistics.median(ms):.2f} / {max(ms):.2f}")


def fmt(ms: list[float]) -> str:
    return f"{percentile(ms, 50):.2f} / {percentile(ms, 99):.2f} ms"


def compare(path: Path, args: argparse.Namespace) -> list[float]:
    """Time the join that sorts every match by created_at before applying LIMIT."""
    sql = (
        "SELECT h.id, h.prompt, h.created_at, h.cwd FROM history_fts f"
        " JOIN history h ON h.id = f.rowid WHERE history_fts MATCH ?"
        " ORDER BY h.created_at DESC, h.id DESC LIMIT ?"
    )
    conn = sqlite3.connect(path)
    try:
        samples, _ = time_queries(
            lambda q: conn.execute(sql, (_fts_query(q), args.limit)).fetchall(), args.repeat
        )
    finally:
        conn.close()
    return samples


if __name__ == "__main__":
    main()
