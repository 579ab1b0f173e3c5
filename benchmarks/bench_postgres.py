"""PostgreSQL storage beside files: append rate, opening a 50 MB session, listing 2,000.

    eval "$(scripts/pg-start)"           # or pass --url postgresql://...
    .venv/bin/python benchmarks/bench_postgres.py [--appends 1000] [--repeat 3]

Workloads (each run on FileSessionStorage and on PostgresSessionStorage):

- append + flush: `append_message` then `flush()` per entry (fsync on files, a
  synchronous commit on PostgreSQL) — entries per second;
- append: the same without flush (files: write(2); PostgreSQL: one async commit);
- open + context: `SessionManager.open(read_only=True)` + `build_session_context()`
  of a 50 MB session of 10,000 entries (benchmarks/data.py, seed 1);
- list 2,000: a directory of 2,000 sessions (benchmarks/data.py, seed 1),
  listed by discovery (`list_sessions`): files with its caches off (every file
  scanned) and warm (in-process cache); PostgreSQL from the session index, and
  the raw `list_session_meta` query alone.

With `--search-sessions N` (e.g. 10000) it runs only `search_and_usage`: a corpus of N
sessions (benchmarks/data.py `write_corpus`, seed 1) in an agent dir and imported into
PostgreSQL, then on each store through `Store`: the first search (the file store
builds its content index, PostgreSQL its index in the database), `--repeat` rounds
of `QUERIES` (`--limit` hits, as the CLI's default 100) warm, reported as p50/p95,
and the daily usage report warm; then one search and one report with `use_index=False`
(every session read: what a PostgreSQL store did before it had an index).

Data is generated once under /tmp/sessiontree-bench; every database object lives
in a fresh schema that is dropped at the end. Times are the best of `--repeat`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.data import SessionSpec, write_big_session, write_corpus, write_store
from sessiontree import SessionManager
from sessiontree.layout import store_parts
from sessiontree.maintenance import import_files
from sessiontree.storage import FileSessionStorage
from sessiontree.storage.postgres import PostgresSessionStorage, new_schema_name

DATA = Path("/tmp/sessiontree-bench")
QUERIES = (
    "session",
    "error",
    "compaction summary",
    "refactor",
    "serialize",
    "lint format",
    "nothing-like-this",
    "grep",
)


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def generate() -> tuple[Path, Path]:
    big = DATA / "big-50mb.jsonl"
    store = DATA / "many-2000"
    DATA.mkdir(parents=True, exist_ok=True)
    if not big.exists():
        write_big_session(big, SessionSpec(entries=10_000, target_bytes=50 << 20), DATA / "blobs")
    if not store.exists():
        write_store(store, files=2000, min_entries=20, max_entries=200, projects=1)
    (many,) = store.iterdir()  # the one project's directory
    return big, many


def append_rate(storage: Any, session_dir: str, n: int, flush: bool) -> float:
    sm = SessionManager.create("/bench", session_dir, storage=storage)
    sm.append_message({"role": "assistant", "content": [], "timestamp": 0})  # now persisted
    message = {"role": "user", "content": "x" * 400, "timestamp": 1}
    start = time.perf_counter()
    for _ in range(n):
        sm.append_message(message)
        if flush:
            sm.flush()
    elapsed = time.perf_counter() - start
    sm.close()
    return n / elapsed


def open_context(path: str, storage: Any) -> None:
    with SessionManager.open(path, storage=storage, read_only=True) as sm:
        sm.build_session_context()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def search_and_usage(
    url: str, sessions: int, repeat: int, limit: int
) -> list[tuple[str, str, str]]:
    """Search and the usage report on `sessions` sessions, file store against PostgreSQL
    (see the module docstring); rows of (workload, files, postgres)."""
    from sessiontree import Store

    agent = DATA / f"corpus-{sessions}" / "agent"
    if not agent.exists():
        write_corpus(agent, sessions)
    work = Path(tempfile.mkdtemp(prefix="sessiontree-bench-"))
    files_dir = work / "files"
    shutil.copytree(agent, files_dir)  # a fresh agent dir: its caches are built here
    schema = new_schema_name("bench")
    rows: list[tuple[str, str, str]] = []
    files = Store(str(files_dir))
    db = Store(f"{url}{'&' if '?' in url else '?'}schema={schema}", agent_dir=str(work / "db"))
    try:
        start = time.perf_counter()
        db.import_files(agent)
        took = time.perf_counter() - start
        rows.append((f"import {sessions:,} sessions (sessions/s)", "-", f"{sessions / took:,.0f}"))
        first = []
        for store in (files, db):
            start = time.perf_counter()
            store.search(QUERIES[0], limit=limit)
            first.append(time.perf_counter() - start)
        rows.append(("first search: index built (s)", f"{first[0]:.2f}", f"{first[1]:.2f}"))
        times: list[list[float]] = [[], []]
        for _ in range(repeat):
            for query in QUERIES:
                for n, store in enumerate((files, db)):
                    start = time.perf_counter()
                    store.search(query, limit=limit)
                    times[n].append(time.perf_counter() - start)
        for label, fraction in (("p50", 0.5), ("p95", 0.95)):
            f, p = (percentile(t, fraction) * 1000 for t in times)
            rows.append((f"search, limit {limit}, {label} (ms)", f"{f:.0f}", f"{p:.0f}"))
        for store in (files, db):
            store.usage("daily")  # the usage rows of the first search's refresh, kept
        f = best(lambda: files.usage("daily"), repeat)
        p = best(lambda: db.usage("daily"), repeat)
        rows.append(("usage report, daily (ms)", f"{f * 1000:.0f}", f"{p * 1000:.0f}"))
        # Without the index: every session read, as a PostgreSQL store did before it had one.
        f = best(lambda: files.search(QUERIES[1], limit=limit, use_index=False), 1)
        p = best(lambda: db.search(QUERIES[1], limit=limit, use_index=False), 1)
        rows.append(("search, every session read (ms)", f"{f * 1000:.0f}", f"{p * 1000:.0f}"))
        f = best(lambda: files.usage("daily", use_index=False), 1)
        p = best(lambda: db.usage("daily", use_index=False), 1)
        rows.append(("usage, every session read (ms)", f"{f * 1000:.0f}", f"{p * 1000:.0f}"))
    finally:
        files.close()
        db.close()
        drop(url, schema)
        shutil.rmtree(work, ignore_errors=True)
    return rows


def drop(url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def show(rows: list[tuple[str, str, str]]) -> None:
    width = max(len(r[0]) for r in rows)
    print(f"{'workload':<{width}}  {'files':>10}  {'postgres':>10}")
    for name, f_val, p_val in rows:
        print(f"{name:<{width}}  {f_val:>10}  {p_val:>10}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("SESSIONTREE_TEST_PG"))
    parser.add_argument("--appends", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--search-sessions", type=int, default=0)
    parser.add_argument("--limit", type=int, default=100)
    args = parser.parse_args()
    if not args.url:
        parser.error('no database: pass --url or run `eval "$(scripts/pg-start)"` first')
    if args.search_sessions:
        show(search_and_usage(args.url, args.search_sessions, args.repeat, args.limit))
        return
    big, many = generate()
    work = Path(tempfile.mkdtemp(prefix="sessiontree-bench-"))
    os.environ["PI_CODING_AGENT_DIR"] = str(work / "agent")  # no breadcrumbs in ~
    schema = new_schema_name("bench")
    rows: list[tuple[str, str, str]] = []
    files = FileSessionStorage()
    pg = PostgresSessionStorage(args.url, schema=schema, root=str(work / "db"))
    try:
        from sessiontree.listing import clear_listing_cache, list_sessions

        session_dir = str(work / "agent" / "sessions" / "--bench--")
        db_dir = str(work / "db" / "sessions" / "--bench--")
        files.ensure_dir(session_dir)
        pg.ensure_dir(db_dir)
        for flush in (True, False):
            label = "append + flush (entries/s)" if flush else "append, no flush (entries/s)"
            f = append_rate(files, session_dir, args.appends, flush)
            p = append_rate(pg, db_dir, args.appends, flush)
            rows.append((label, f"{f:,.0f}", f"{p:,.0f}"))

        pg.ensure_dir(pg.path_for("sessions/--big--"))
        start = time.perf_counter()
        pg.write_atomic(pg.path_for("sessions/--big--/big.jsonl"), files.iter_chunks(str(big)))
        rows.append(("import 50 MB session (s)", "-", f"{time.perf_counter() - start:.2f}"))
        f = best(lambda: open_context(str(big), files), args.repeat)
        p = best(lambda: open_context(pg.path_for("sessions/--big--/big.jsonl"), pg), args.repeat)
        rows.append(("open + context, 50 MB (s)", f"{f:.2f}", f"{p:.2f}"))

        agent = work / "import"
        (agent / "sessions").mkdir(parents=True)
        shutil.copytree(many, agent / "sessions" / "--many--")
        start = time.perf_counter()
        import_files(str(agent), pg)
        rows.append(("import 2,000 sessions (s)", "-", f"{time.perf_counter() - start:.2f}"))
        many_files = str(agent / "sessions" / "--many--")
        many_db = pg.path_for("sessions/--many--")

        def cold_files() -> None:
            assert (
                len(list_sessions("/x", store_parts(), session_dir=many_files, cache=False)) == 2000
            )

        def warm_files() -> None:
            assert len(list_sessions("/x", store_parts(), session_dir=many_files)) == 2000

        def meta_db() -> None:
            assert len(pg.list_session_meta(many_db)) == 2000

        def discovery_db() -> None:
            assert (
                len(list_sessions("/x", store_parts(pg), session_dir=many_db, cache=False)) == 2000
            )

        clear_listing_cache()
        f_cold = best(cold_files, args.repeat)
        warm_files()
        f_warm = best(warm_files, args.repeat)
        p_disc = best(discovery_db, args.repeat)
        p_meta = best(meta_db, args.repeat)
        rows.append(("list 2,000 via discovery, cold (s)", f"{f_cold:.3f}", f"{p_disc:.3f}"))
        rows.append(("list 2,000: warm cache / raw index (s)", f"{f_warm:.3f}", f"{p_meta:.3f}"))
    finally:
        pg.close()
        drop(args.url, schema)
        shutil.rmtree(work, ignore_errors=True)
    show(rows)


if __name__ == "__main__":
    main()
