"""The framework adapters beside the frameworks' own backends, side by side in one run.

    eval "$(scripts/pg-start)"           # or pass --url postgresql://...; without, files only
    .venv/bin/python benchmarks/bench_integrations.py [--items 10000] [--entries 5000]

OpenAI Agents (`SessionTreeSession` against the SDK's `SQLiteSession` on a file and in
memory): `add_items` of `--items` items one turn (a user and an assistant item) at a
time, then `get_items()` of them all, then `get_items(limit=20)` (the median of 200).

Claude Agent SDK (`SessionTreeStore` against its floor and the SDK's in-memory store):
`append` of an `--entries`-entry transcript (about 1 KB an entry) in the batches the SDK
sends (500 entries or 1 MiB, whichever comes first; `--eager`: one entry a batch),
then `load`. The floor on files: the same lines appended with `open(..., "ab")` and one
fsync per batch, then read back and parsed; on PostgreSQL: one multi-row `INSERT` per
batch through psycopg (a synchronous commit), then `SELECT` and parse.

Data lives under a temp dir on disk (fsyncs are real); database objects in fresh
schemas, dropped at the end. Times are the best of `--repeat`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

Row = tuple[str, str, str, str]


def _turn(i: int) -> list[Any]:
    return [
        {"role": "user", "content": f"Question {i}: " + "lorem ipsum " * 8},
        {
            "type": "message",
            "id": f"msg_{i}",
            "role": "assistant",
            "status": "completed",
            "content": [
                {
                    "type": "output_text",
                    "text": f"Answer {i}: " + "dolor sit " * 20,
                    "annotations": [],
                }
            ],
        },
    ]


async def _openai_one(session: Any, items: int) -> tuple[float, float, float]:
    start = time.perf_counter()
    for i in range(items // 2):
        await session.add_items(_turn(i))
    add = time.perf_counter() - start
    start = time.perf_counter()
    got = await session.get_items()
    get_all = time.perf_counter() - start
    assert len(got) == items, len(got)
    samples = []
    for _ in range(200):
        start = time.perf_counter()
        last = await session.get_items(limit=20)
        samples.append(time.perf_counter() - start)
    assert len(last) == 20
    return items / add, get_all, statistics.median(samples)


def bench_openai(work: Path, items: int, url: str | None) -> list[Row]:
    from agents import SQLiteSession

    from sessiontree.integrations.openai_agents import SessionTreeSession

    makers: list[tuple[str, Callable[[], Any]]] = [
        ("SQLiteSession (file)", lambda: SQLiteSession("bench", work / "openai.db")),
        ("SQLiteSession (memory)", lambda: SQLiteSession("bench")),
        (
            "SessionTreeSession (files)",
            lambda: SessionTreeSession("bench", work / "agent", cwd="/bench"),
        ),
    ]
    makers.append(
        (
            "SessionTreeSession (files, durable=False)",
            lambda: SessionTreeSession("bench2", work / "agent", cwd="/bench", durable=False),
        )
    )
    if url is not None:
        makers.append(
            (
                "SessionTreeSession (postgres)",
                lambda: SessionTreeSession("bench", url, cwd="/bench"),
            )
        )
    rows: list[Row] = []
    for name, make in makers:
        session = make()
        try:
            rate, get_all, limited = asyncio.run(_openai_one(session, items))
        finally:
            session.close()
        rows.append(
            (name, f"{rate:,.0f} items/s", f"{get_all * 1000:,.1f} ms", f"{limited * 1000:.3f} ms")
        )
    return rows


def _entries(n: int) -> list[dict[str, Any]]:
    out = []
    parent = None
    for i in range(n):
        uuid = f"{i:08d}-0000-4000-8000-000000000000"
        out.append(
            {
                "parentUuid": parent,
                "isSidechain": False,
                "type": "user" if i % 2 == 0 else "assistant",
                "message": {"role": "user" if i % 2 == 0 else "assistant", "content": "x" * 800},
                "uuid": uuid,
                "timestamp": "2026-01-02T03:04:05.000Z",
                "sessionId": "bench",
                "cwd": "/bench",
            }
        )
        parent = uuid
    return out


def _batches(entries: list[dict[str, Any]], eager: bool) -> list[list[dict[str, Any]]]:
    """The SDK's flush rule: 500 entries or 1 MiB of lines (eager: every entry)."""
    if eager:
        return [[e] for e in entries]
    out: list[list[dict[str, Any]]] = [[]]
    size = 0
    for entry in entries:
        line = len(orjson.dumps(entry)) + 1
        if out[-1] and (len(out[-1]) >= 500 or size + line > 1 << 20):
            out.append([])
            size = 0
        out[-1].append(entry)
        size += line
    return out


def _best(fn: Callable[[], float], repeat: int) -> float:
    return min(fn() for _ in range(repeat))


def _store_run(
    make: Callable[[], Any], batches: list[list[dict[str, Any]]], n: int
) -> tuple[float, float]:
    key = {"project_key": "-bench", "session_id": "bench"}

    async def go(store: Any) -> tuple[float, float]:
        start = time.perf_counter()
        for batch in batches:
            await store.append(key, batch)
        append = time.perf_counter() - start
        start = time.perf_counter()
        loaded = await store.load(key)
        load = time.perf_counter() - start
        assert loaded is not None and len(loaded) == n
        return append, load

    store = make()
    try:
        result: tuple[float, float] = asyncio.run(go(store))
        return result
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()


def _floor_files(path: Path, batches: list[list[dict[str, Any]]], n: int) -> tuple[float, float]:
    if path.exists():
        path.unlink()
    start = time.perf_counter()
    for batch in batches:
        data = b"".join(orjson.dumps(e) + b"\n" for e in batch)
        with open(path, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    append = time.perf_counter() - start
    start = time.perf_counter()
    loaded = [orjson.loads(line) for line in path.read_bytes().splitlines() if line]
    load = time.perf_counter() - start
    assert len(loaded) == n
    return append, load


def _floor_postgres(url: str, batches: list[list[dict[str, Any]]], n: int) -> tuple[float, float]:
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute("DROP TABLE IF EXISTS pg_temp.floor")
        conn.execute("CREATE TEMP TABLE floor (session text, seq bigint, entry text)")
        conn.commit()
        start = time.perf_counter()
        seq = 0
        for batch in batches:
            values = ",".join(["(%s,%s,%s)"] * len(batch))
            params: list[Any] = []
            for entry in batch:
                params += ["bench", seq, orjson.dumps(entry).decode()]
                seq += 1
            conn.execute(f"INSERT INTO floor VALUES {values}", params)  # type: ignore[arg-type]
            conn.commit()
        append = time.perf_counter() - start
        start = time.perf_counter()
        rows = conn.execute(
            "SELECT entry FROM floor WHERE session = 'bench' ORDER BY seq"
        ).fetchall()
        loaded = [orjson.loads(r[0]) for r in rows]
        load = time.perf_counter() - start
        assert len(loaded) == n
    return append, load


def bench_claude(work: Path, n: int, eager: bool, url: str | None, repeat: int) -> list[Row]:
    from claude_agent_sdk import InMemorySessionStore

    from sessiontree.integrations.claude_agent_sdk import SessionTreeStore

    entries = _entries(n)
    batches = _batches(entries, eager)
    counter = iter(range(10_000))
    rows: list[Row] = []

    def measure(
        name: str, run: Callable[[], tuple[float, float]], floor: tuple[float, float] | None
    ) -> tuple[float, float]:
        results = [run() for _ in range(repeat)]
        append = min(r[0] for r in results)
        load = min(r[1] for r in results)
        ratio = f"{(append + load) / sum(floor):.2f}x floor" if floor else "floor"
        rows.append((name, f"{append * 1000:,.0f} ms", f"{load * 1000:,.0f} ms", ratio))
        return append, load

    files_floor = measure(
        "floor: open(a) + fsync per batch",
        lambda: _floor_files(work / "floor.jsonl", batches, n),
        None,
    )
    measure(
        "SessionTreeStore (files)",
        lambda: _store_run(lambda: SessionTreeStore(work / f"claude{next(counter)}"), batches, n),
        files_floor,
    )
    measure(
        "InMemorySessionStore (SDK)",
        lambda: _store_run(InMemorySessionStore, batches, n),
        files_floor,
    )
    if url is not None:
        from sessiontree.storage.postgres import new_schema_name

        pg_floor = measure(
            "floor: psycopg INSERT per batch", lambda: _floor_postgres(url, batches, n), None
        )

        def pg_store() -> Any:
            schema = new_schema_name("bench_claude")
            schemas.append(schema)
            return SessionTreeStore(f"{url}{'&' if '?' in url else '?'}schema={schema}")

        schemas: list[str] = []
        try:
            measure(
                "SessionTreeStore (postgres)", lambda: _store_run(pg_store, batches, n), pg_floor
            )
        finally:
            _drop(url, schemas)
    return rows


def _drop(url: str, schemas: list[str]) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _print(title: str, header: Row, rows: list[Row]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    print(f"\n{title}")
    for row in [header, *rows]:
        print(
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("SESSIONTREE_TEST_PG"))
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--entries", type=int, default=5_000)
    parser.add_argument(
        "--eager", action="store_true", help="one entry a batch (the SDK's eager mode)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sessiontree-bench-integrations-", dir="/var/tmp"))
    os.environ["PI_CODING_AGENT_DIR"] = str(work / "agent")
    url: str | None = args.url
    schemas: list[str] = []
    try:
        if url is not None:
            from sessiontree.storage.postgres import new_schema_name

            schema = new_schema_name("bench_openai")
            schemas.append(schema)
            openai_url: str | None = f"{url}{'&' if '?' in url else '?'}schema={schema}"
        else:
            openai_url = None
        _print(
            f"OpenAI Agents: {args.items:,} items, one turn (2 items) per add_items",
            ("session", "add_items", "get_items()", "get_items(limit=20)"),
            bench_openai(work, args.items, openai_url),
        )
        batching = "eager" if args.eager else "500 entries / 1 MiB"
        _print(
            f"Claude Agent SDK: {args.entries:,} entries, {batching} batches",
            ("store", "append", "load", "append+load"),
            bench_claude(work, args.entries, args.eager, url, args.repeat),
        )
    finally:
        if url is not None:
            _drop(url, schemas)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
