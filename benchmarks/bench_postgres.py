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

from benchmarks.data import SessionSpec, write_big_session, write_store
from sessiontree import SessionManager
from sessiontree.layout import store_parts
from sessiontree.maintenance import import_files
from sessiontree.storage import FileSessionStorage
from sessiontree.storage.postgres import PostgresSessionStorage, new_schema_name

DATA = Path("/tmp/sessiontree-bench")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("SESSIONTREE_TEST_PG"))
    parser.add_argument("--appends", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not args.url:
        parser.error('no database: pass --url or run `eval "$(scripts/pg-start)"` first')
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
        import psycopg
        from psycopg import sql

        with psycopg.connect(args.url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        shutil.rmtree(work, ignore_errors=True)
    width = max(len(r[0]) for r in rows)
    print(f"{'workload':<{width}}  {'files':>10}  {'postgres':>10}")
    for name, f_val, p_val in rows:
        print(f"{name:<{width}}  {f_val:>10}  {p_val:>10}")


if __name__ == "__main__":
    main()
