"""The LangGraph checkpointer beside LangGraph's own savers, in one run.

    .venv/bin/python benchmarks/bench_langgraph.py [--steps 200] [--repeat 3] [--pg URL]

A `MessagesState` graph runs `--steps` steps, one message per step (a model reply of
about 800 characters, a tool call every third step, whose result of about 1,200
characters is the next step), with each saver:

- `SessionTreeSaver` on an agent dir (and on PostgreSQL with `--pg`, or
  `$SESSIONTREE_TEST_PG`, in a fresh schema dropped afterwards);
- LangGraph's `SqliteSaver` on a file (WAL, as it sets itself up);
- `InMemorySaver`, which writes nothing anywhere (a floor for the time).

Reported per saver: the run's checkpoint writes (the time spent in `put` and
`put_writes`, summed, best of `--repeat` runs), the bytes on disk after the run
(the session file and its blobs; the SQLite database with its WAL, checkpointed), the
bytes per step, and `get_state_history` of the whole thread by a new saver (read
from disk, cold) and again (warm). Times are the best of `--repeat`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph

from sessiontree.integrations.langgraph import SessionTreeSaver

WORDS = (
    "the session tree keeps every checkpoint of the graph as an entry whose parent is "
    "its parent checkpoint so a fork is a branch and the conversation reads as one "
).split()


def text(step: int, length: int) -> str:
    words = []
    i, size = step, 0
    while size < length:
        words.append(WORDS[i % len(WORDS)])
        size += len(words[-1]) + 1
        i = (i * 7 + 3) % 1_000_003
    return " ".join(words)


def build(checkpointer: Any, steps: int) -> Any:
    def model(state: MessagesState) -> dict[str, Any]:
        n = len(state["messages"])
        usage = {"input_tokens": 1000 + 300 * n, "output_tokens": 200, "total_tokens": 0}
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        calls = []
        if n % 3 == 1:
            calls = [{"name": "search", "args": {"query": text(n, 40)}, "id": f"call_{n}"}]
        reply = AIMessage(
            content=text(n, 800),
            tool_calls=calls,
            usage_metadata=usage,  # type: ignore[arg-type]
            response_metadata={"model_name": "bench-1", "model_provider": "bench"},
        )
        return {"messages": [reply]}

    def tools(state: MessagesState) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]  # type: ignore[attr-defined]
        return {
            "messages": [
                ToolMessage(
                    text(len(state["messages"]), 1200), tool_call_id=call["id"], name="search"
                )
            ]
        }

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        if len(state["messages"]) > steps:
            return END
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else "model"

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", tools)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", "model", END])
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=checkpointer)


def timed_writes(saver: Any) -> list[float]:
    """Wrap the saver's put/put_writes to sum the time spent in them."""
    spent = [0.0]
    for name in ("put", "put_writes"):
        real = getattr(saver, name)

        def wrapper(*args: Any, _real: Callable[..., Any] = real, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _real(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start

        setattr(saver, name, wrapper)
    return spent


def run(saver: Any, steps: int) -> tuple[float, float]:
    """(seconds in checkpoint writes, seconds of the whole run)."""
    spent = timed_writes(saver)
    graph = build(saver, steps)
    config = {"configurable": {"thread_id": "bench"}, "recursion_limit": steps * 2 + 10}
    start = time.perf_counter()
    graph.invoke({"messages": [HumanMessage(text(0, 300))]}, config)
    return spent[0], time.perf_counter() - start


def history(saver: Any, steps: int) -> tuple[float, int]:
    graph = build(saver, steps)
    start = time.perf_counter()
    snapshots = list(graph.get_state_history({"configurable": {"thread_id": "bench"}}))
    return time.perf_counter() - start, len(snapshots)


def tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


@contextmanager
def pg_location(url: str | None) -> Iterator[str | None]:
    if not url:
        yield None
        return
    import psycopg
    from psycopg import sql

    from sessiontree.storage.postgres import new_schema_name

    schema = new_schema_name("lg_bench")
    separator = "&" if "?" in url else "?"
    try:
        yield f"{url}{separator}schema={schema}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def pg_bytes(location: str) -> int:
    """The bytes the thread's rows hold in the schema's tables (content, blobs)."""
    import psycopg

    url, _, query = location.partition("?")
    schema = dict(p.split("=", 1) for p in query.split("&") if "=" in p)["schema"]
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
            "AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    return int(rows[0]) if rows else 0


def measure(kind: str, steps: int, work: Path, pg: str | None) -> dict[str, Any]:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    if kind == "memory":
        saver = InMemorySaver()
        writes, total = run(saver, steps)
        cold, count = history(saver, steps)
        warm, _ = history(saver, steps)
        return {"writes": writes, "run": total, "bytes": 0, "cold": cold, "warm": warm, "n": count}
    if kind == "sqlite":
        path = work / "checkpoints.sqlite"
        conn = sqlite3.connect(path, check_same_thread=False)
        saver = SqliteSaver(conn)
        writes, total = run(saver, steps)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        size = tree_bytes(work)
        conn = sqlite3.connect(path, check_same_thread=False)
        reader = SqliteSaver(conn)
        cold, count = history(reader, steps)
        warm, _ = history(reader, steps)
        conn.close()
        return {
            "writes": writes,
            "run": total,
            "bytes": size,
            "cold": cold,
            "warm": warm,
            "n": count,
        }
    location = pg if kind.startswith("sessiontree-pg") else str(work / "agent")
    assert location is not None
    with SessionTreeSaver(location, fsync=kind.endswith("fsync")) as saver:
        writes, total = run(saver, steps)
    size = pg_bytes(location) if kind.startswith("sessiontree-pg") else tree_bytes(work / "agent")
    with SessionTreeSaver(location) as reader:
        cold, count = history(reader, steps)
        warm, _ = history(reader, steps)
    return {"writes": writes, "run": total, "bytes": size, "cold": cold, "warm": warm, "n": count}


def compare_history(steps: int, rounds: int, work: Path) -> None:
    """`get_state_history` of one run by this saver and by `SqliteSaver`, read in turns
    in one process (`rounds` each, warm): a load that comes and goes falls on both."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    with SessionTreeSaver(str(work / "agent")) as saver:
        run(saver, steps)
    conn = sqlite3.connect(work / "checkpoints.sqlite", check_same_thread=False)
    run(SqliteSaver(conn), steps)
    times: dict[str, list[float]] = {"sessiontree": [], "sqlite": []}
    with SessionTreeSaver(str(work / "agent")) as ours:
        theirs = SqliteSaver(conn)
        for _ in range(rounds):
            times["sessiontree"].append(history(ours, steps)[0])
            times["sqlite"].append(history(theirs, steps)[0])
    conn.close()
    shutil.rmtree(work, ignore_errors=True)
    for name, got in times.items():
        got.sort()
        best, median = got[0] * 1000, got[len(got) // 2] * 1000
        print(f"history in turns, {name}: best {best:.0f} ms, median {median:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pg", default=os.environ.get("SESSIONTREE_TEST_PG"))
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument(
        "--history-turns",
        type=int,
        default=0,
        help="instead: read one run's history by this saver and SqliteSaver in turns, N each",
    )
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="lg-bench-"))
    if args.history_turns:
        compare_history(args.steps, args.history_turns, work)
        return
    kinds = ["sessiontree", "sessiontree+fsync", "sqlite", "memory"]
    rows: dict[str, dict[str, Any]] = {}
    with pg_location(args.pg) as pg:
        if pg is not None:
            kinds[2:2] = ["sessiontree-pg", "sessiontree-pg+fsync"]
        # Interleaved (each saver once per round): a load that comes and goes on the
        # machine falls on every saver alike.
        for _ in range(args.repeat):
            for kind in kinds:
                if pg is not None and kind.startswith("sessiontree-pg"):
                    with SessionTreeSaver(pg) as saver:
                        saver.delete_thread("bench")
                got = measure(kind, args.steps, work / kind, pg)
                best = rows.setdefault(kind, {})
                for key, value in got.items():
                    better = max if key == "n" else min
                    best[key] = better(best[key], value) if key in best else value
    shutil.rmtree(work, ignore_errors=True)
    sqlite_row = rows["sqlite"]
    python = sys.version.split()[0]
    print(f"{args.steps}-step MessagesState run, best of {args.repeat}; python {python}")
    header = (
        f"{'saver':<22}{'writes ms':>11}{'run ms':>9}{'bytes':>13}{'B/step':>9}"
        f"{'vs sqlite':>10}{'history cold ms':>17}{'warm ms':>9}{'states':>8}"
    )
    print(header)
    for kind, row in rows.items():
        ratio = f"{row['bytes'] / sqlite_row['bytes']:.2f}x" if row["bytes"] else "-"
        print(
            f"{kind:<22}{row['writes'] * 1000:>11.0f}{row['run'] * 1000:>9.0f}"
            f"{row['bytes']:>13,}{row['bytes'] // max(1, args.steps):>9,}{ratio:>10}"
            f"{row['cold'] * 1000:>17.0f}{row['warm'] * 1000:>9.0f}{row['n']:>8}"
        )


if __name__ == "__main__":
    main()
