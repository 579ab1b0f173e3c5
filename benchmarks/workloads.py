"""One benchmark workload per process: `python -m benchmarks.workloads NAME ARGS_JSON`.

Each run prints one JSON object: `times` (seconds per repetition of the measured
work), `floor` (seconds per repetition of the unavoidable work on the same data)
and extra figures. Timings are in-process: interpreter start and imports are
excluded, as the TypeScript peers' bench does. The parent reads peak RSS from the
child's rusage, so each workload's memory is its own.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from sessiontree import HistoryStorage, SessionManager, build_session_context
from sessiontree._util.gcpause import gc_paused
from sessiontree.format import serialize_entry_bytes
from sessiontree.storage import BlobStore


def _timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def load(args: dict[str, Any]) -> dict[str, Any]:
    """open + build_session_context, as an agent resuming the session does (writable,
    lock taken, the file hashed for the guard; `read_only` as a viewer does; `lazy` as
    the manager's default chooses it, unless given); floor: read the bytes +
    orjson.loads each line (what loading every entry costs at least)."""
    path, blobs = args["path"], BlobStore(args["blobs"])
    read_only = args.get("read_only", False)
    lazy = args.get("lazy")

    def work() -> None:
        sm = SessionManager.open(
            path, read_only=read_only, blob_store=blobs, breadcrumb=False, lazy=lazy
        )
        sm.build_session_context()
        sm.close()

    def floor() -> None:
        loads = orjson.loads
        with open(path, "rb") as f:
            for line in f:
                if len(line) > 1:
                    loads(line)

    repeat = args.get("repeat", 3)
    floor_times = _timed(floor, repeat)
    return {"times": _timed(work, repeat), "floor": floor_times}


def context(args: dict[str, Any]) -> dict[str, Any]:
    """The context at the leaf of a long path: from scratch on a manager whose entries
    are all read (its cached context dropped before each call, as the peers build
    theirs every time), the first call on a manager loaded index first, the
    `build_session_context(entries, leaf, by_id)` function, and the manager's
    incremental context; floor: one pass over the path entries."""
    blobs = BlobStore(args["blobs"])
    sm = SessionManager.open(args["path"], read_only=True, blob_store=blobs, lazy=False)
    entries, leaf = sm.get_entries(), sm.get_leaf_id()
    by_id = {e["id"]: e for e in entries}  # the index an open session has (as the peers pass)
    path = sm.get_branch()
    repeat = args.get("repeat", 10)
    index = sm._index
    sm.build_session_context()  # the parent positions, built once per loaded session

    def from_scratch() -> None:
        index._context = None
        sm.build_session_context()

    def floor() -> None:
        for entry in path:
            entry.get("type")

    first = []
    for _ in range(max(3, repeat // 4)):
        lazy = SessionManager.open(args["path"], read_only=True, blob_store=blobs, lazy=True)
        start = time.perf_counter()
        lazy.build_session_context()
        first.append(time.perf_counter() - start)
    return {
        "times": _timed(from_scratch, repeat),
        "first_lazy": first,
        "function": _timed(lambda: build_session_context(entries, leaf, by_id), repeat),
        "warm": _timed(sm.build_session_context, repeat),
        "floor": _timed(floor, repeat),
        "path": len(path),
        "messages": len(sm.build_session_context().messages),
    }


def _timed_keeping(fn: Callable[[], Any], repeat: int) -> list[float]:
    """`_timed`, but each result is freed after its clock stops (the peers' timings
    do not include freeing what they built either)."""
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        out.append(time.perf_counter() - start)
        del result
    return out


def tree_first_lazy(args: dict[str, Any]) -> dict[str, Any]:
    """get_tree as the first call on a manager loaded index first (it reads every entry)."""
    blobs = BlobStore(args["blobs"])
    times = []
    for _ in range(args.get("repeat", 3)):
        sm = SessionManager.open(args["path"], read_only=True, blob_store=blobs, lazy=True)
        times += _timed_keeping(sm.get_tree, 1)
    return {"times": times, "floor": []}


def import_floor(args: dict[str, Any]) -> dict[str, Any]:
    """Nothing but `import sessiontree`: the memory floor every workload stands on."""
    return {"times": [0.0], "floor": []}


def tree(args: dict[str, Any]) -> dict[str, Any]:
    """get_tree on a manager whose entries are in memory (`first`: its first call);
    floor: one small object per entry, linked to its parent's list (the collector
    paused, as get_tree pauses it)."""
    sm = SessionManager.open(args["path"], read_only=True, blob_store=BlobStore(args["blobs"]))
    entries = sm.get_entries()
    repeat = args.get("repeat", 10)

    def floor() -> dict[Any, list[Any]]:
        children: dict[Any, list[Any]] = {}
        with gc_paused():
            for entry in entries:
                children.setdefault(entry.get("parentId"), []).append([entry, []])
        return children

    first = _timed_keeping(sm.get_tree, 1)[0]
    return {
        "times": _timed_keeping(sm.get_tree, repeat),
        "floor": _timed_keeping(floor, repeat),
        "first": first,
    }


def kb1_text(i: int) -> str:
    """The peers' append-bench text (`kb1Text` in scripts/peers/common.mjs): 1,024 characters."""
    base = (
        f"Message {i}: the quick brown fox jumps over the lazy dog while the session tree grows. "
    )
    return (base * (1024 // len(base) + 1))[:1024]


def user_message(i: int) -> dict[str, Any]:
    """The peers' `userMsg(i)`."""
    return {
        "role": "user",
        "content": [{"type": "text", "text": kb1_text(i)}],
        "timestamp": 1_700_000_000_000 + i,
    }


def assistant_message(i: int) -> dict[str, Any]:
    """The peers' `assistantMsg(i)`: usage with float costs, as agents write them."""
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": kb1_text(i)}],
        "api": "anthropic-messages",
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "usage": {
            "input": 100,
            "output": 50,
            "cacheRead": 0,
            "cacheWrite": 0,
            "totalTokens": 150,
            "cost": {
                "input": 0.0003,
                "output": 0.00075,
                "cacheRead": 0,
                "cacheWrite": 0,
                "total": 0.00105,
            },
        },
        "stopReason": "stop",
        "timestamp": 1_700_000_000_000 + i,
    }


def append(args: dict[str, Any]) -> dict[str, Any]:
    """N appends + flush of the peers' own `bench append` messages (alternating ~1 KB
    user and assistant messages, after a first user + assistant pair and a flush);
    floor: os.write of the same pre-serialized lines to an O_APPEND fd, then fsync.

    The peers build each message inside their timed loop; here the messages are
    built before it, as an agent hands over a message it already holds.
    """
    n = args["n"]
    work_dir = Path(tempfile.mkdtemp(prefix="st-append-"))
    times, floors = [], []
    try:
        for run in range(args.get("repeat", 3)):
            os.environ["PI_CODING_AGENT_DIR"] = str(work_dir / f"agent{run}")
            sm = SessionManager.create("/bench", str(work_dir / f"s{run}"))
            sm.append_message(user_message(0))
            sm.append_message(assistant_message(1))
            sm.flush()
            messages = [
                user_message(i + 2) if i % 2 == 0 else assistant_message(i + 2) for i in range(n)
            ]
            start = time.perf_counter()
            for message in messages:
                sm.append_message(message)
            sm.flush()
            times.append(time.perf_counter() - start)
            sm.close()
            lines = [
                serialize_entry_bytes({"type": "message", "message": m}) + b"\n" for m in messages
            ]
            fd = os.open(work_dir / f"floor{run}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            start = time.perf_counter()
            for line in lines:
                os.write(fd, line)
            os.fsync(fd)
            floors.append(time.perf_counter() - start)
            os.close(fd)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return {"times": times, "floor": floors, "n": n}


def listing(args: dict[str, Any]) -> dict[str, Any]:
    """SessionManager.list_all over a store: `mode` cold (no cache), warm (cache from a
    previous process) or repeat (in-process, after a first call); floor: os.stat of every file."""
    agent = args["agent"]
    os.environ["PI_CODING_AGENT_DIR"] = agent
    files = [
        os.path.join(d, f)
        for d, _, names in os.walk(os.path.join(agent, "sessions"))
        for f in names
        if f.endswith(".jsonl")
    ]

    def floor() -> None:
        for f in files:
            os.stat(f)

    def read_floor() -> None:
        # A cold listing must read every file: bytes + orjson.loads of each line.
        loads = orjson.loads
        for f in files:
            with open(f, "rb") as fh:
                for line in fh:
                    if len(line) > 1:
                        loads(line)

    mode = args["mode"]
    if mode == "cold":
        times = []
        for _ in range(args.get("repeat", 3)):
            shutil.rmtree(os.path.join(agent, "cache"), ignore_errors=True)
            start = time.perf_counter()
            count = len(SessionManager.list_all(agent_dir=agent))
            times.append(time.perf_counter() - start)
            _forget_in_process_caches()
    cpu: list[float] = []  # the CPU time of each timed call (steadier on a busy machine)
    if mode == "warm":
        start, cpu_start = time.perf_counter(), time.process_time()
        count = len(SessionManager.list_all(agent_dir=agent))
        times = [time.perf_counter() - start]
        cpu = [time.process_time() - cpu_start]
    elif mode != "cold":
        SessionManager.list_all(agent_dir=agent)
        times = []
        for _ in range(args.get("repeat", 5)):
            start, cpu_start = time.perf_counter(), time.process_time()
            SessionManager.list_all(agent_dir=agent)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - cpu_start)
        count = len(SessionManager.list_all(agent_dir=agent))
    floor_times = _timed(read_floor if mode == "cold" else floor, 3)
    return {"times": times, "cpu": cpu, "floor": floor_times, "count": count, "files": len(files)}


def _forget_in_process_caches() -> None:
    from sessiontree.listing import clear_listing_cache

    clear_listing_cache()


def history(args: dict[str, Any]) -> dict[str, Any]:
    """HistoryStorage: n add() calls (per-call time), flush, then search latencies."""
    import random

    from benchmarks.bench_history import prompt

    rng = random.Random(args.get("seed", 1))
    prompts = [prompt(rng) for _ in range(args["n"])]
    directory = tempfile.mkdtemp(prefix="st-history-")
    try:
        store = HistoryStorage.open(os.path.join(directory, "history.db"))
        start = time.perf_counter()
        for p in prompts:
            store.add(p, "/bench")
        add_total = time.perf_counter() - start
        start = time.perf_counter()
        store.flush()
        flush_time = time.perf_counter() - start
        queries = [
            "fix",
            "te",
            "session manager",
            "parser err",
            "a",
            "refactor the",
            "json",
            "why does",
            "cache inval",
            "zzz nothing",
        ]
        samples = []
        for _ in range(args.get("repeat", 20)):
            for q in queries:
                t = time.perf_counter()
                store.search(q, 50)
                samples.append(time.perf_counter() - t)
        store.close()
        # Floor for search: one indexed FTS lookup of the same queries, raw sqlite3.
        conn = sqlite3.connect(os.path.join(directory, "history.db"))
        floor = []
        for _ in range(args.get("repeat", 20)):
            for q in queries:
                t = time.perf_counter()
                conn.execute(
                    "SELECT rowid FROM history_fts WHERE history_fts MATCH ? LIMIT 50",
                    (" ".join(f'"{w}"*' for w in q.split()),),
                ).fetchall()
                floor.append(time.perf_counter() - t)
        conn.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    samples.sort()
    floor.sort()
    return {
        "times": samples,
        "floor": floor,
        "add_us": add_total / len(prompts) * 1e6,
        "flush_s": flush_time,
        "p50": statistics.median(samples),
        "p99": samples[int(len(samples) * 0.99) - 1],
    }


def _session_paths(agent: str) -> list[str]:
    return sorted(
        os.path.join(d, f)
        for d, _, names in os.walk(os.path.join(agent, "sessions"))
        for f in names
        if f.endswith(".jsonl")
    )


def _cpu_with_workers() -> float:
    """User + system time of this process and of the children it reaped (the index's
    read-ahead workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _workers_peak_rss_mb() -> float:
    """The largest peak RSS of a reaped child (what it shares with this process at the
    fork included)."""
    import resource

    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def index_build(args: dict[str, Any]) -> dict[str, Any]:
    """The content index built from nothing (cache deleted); figures: MB/s and sizes,
    and a second refresh of the unchanged files (its files read and time)."""
    from sessiontree.search import ContentIndex, SessionSource

    agent = args["agent"]
    paths = _session_paths(agent)
    times, cpu = [], []
    for _ in range(args.get("repeat", 1)):
        shutil.rmtree(os.path.join(agent, "cache"), ignore_errors=True)
        start, cpu_start = time.perf_counter(), _cpu_with_workers()
        index = ContentIndex.open(agent)
        assert index is not None
        refreshed = index.refresh([SessionSource(p) for p in paths])
        times.append(time.perf_counter() - start)
        cpu.append(_cpu_with_workers() - cpu_start)
        start = time.perf_counter()
        unchanged = index.refresh([SessionSource(p) for p in paths])
        unchanged_s = time.perf_counter() - start
        index.close()
        index = ContentIndex.open(agent)  # sizes once the -wal file is checkpointed
        assert index is not None
        stats = index.stats()
        index.close()
    return {
        "times": times,
        "cpu": cpu,
        "floor": [],
        "bytes": refreshed.bytes_read,
        "entries": stats.entries,
        "text_bytes": stats.text_bytes,
        "db_bytes": stats.db_bytes,
        "fts_bytes": stats.fts_bytes,
        "unchanged_files_read": unchanged.files_read,
        "unchanged_s": unchanged_s,
        "workers_rss_mb": _workers_peak_rss_mb(),
    }


def search_index(args: dict[str, Any]) -> dict[str, Any]:
    """`search.search` over every session (index warm), per query; floor: os.stat of
    every file (what any refresh must do)."""
    from sessiontree.search import search

    agent = args["agent"]
    paths = _session_paths(agent)
    search(paths, "warm up", agent_dir=agent, limit=1)
    times = []
    hits = 0
    for _ in range(args.get("repeat", 5)):
        for query in args["queries"]:
            start = time.perf_counter()
            result = search(paths, query, agent_dir=agent, limit=args.get("limit", 100))
            times.append(time.perf_counter() - start)
            hits += len(result.hits)
            assert result.mode == "index", result.notes

    def floor() -> None:
        for p in paths:
            os.stat(p)

    return {"times": times, "floor": _timed(floor, 5), "hits": hits, "files": len(paths)}


def search_refresh(args: dict[str, Any]) -> dict[str, Any]:
    """The index refresh after `grow` sessions each grew by `entries` entries."""
    from sessiontree.search import ContentIndex, SessionSource

    agent = args["agent"]
    paths = _session_paths(agent)
    sources = [SessionSource(p) for p in paths]
    index = ContentIndex.open(agent)
    assert index is not None
    index.refresh(sources)
    times = []
    for run in range(args.get("repeat", 5)):
        for n, path in enumerate(paths[: args["grow"]]):
            with open(path, "ab") as out:
                for i in range(args["entries"]):
                    out.write(
                        serialize_entry_bytes(
                            {
                                "type": "message",
                                "id": f"g{run:02d}{n:03d}{i:04d}",
                                "parentId": None,
                                "timestamp": "2026-06-01T00:00:00.000Z",
                                "message": {
                                    "role": "user",
                                    "content": f"grown entry {run} {n} {i} " + "word " * 60,
                                },
                            }
                        )
                        + b"\n"
                    )
        start = time.perf_counter()
        refreshed = index.refresh(sources)
        times.append(time.perf_counter() - start)
        assert refreshed.files_read == args["grow"], refreshed
    index.close()
    return {"times": times, "floor": []}


def cli_run(args: dict[str, Any]) -> dict[str, Any]:
    """A command in a fresh process each time (interpreter start and imports included)."""
    env = dict(os.environ, PI_CODING_AGENT_DIR=args["agent"])
    command = [sys.executable, "-c", "from sessiontree.cli import main; main()", *args["argv"]]
    import subprocess

    subprocess.run(command, env=env, capture_output=True, check=False)  # warm
    times = []
    for _ in range(args.get("repeat", 5)):
        start = time.perf_counter()
        proc = subprocess.run(command, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
        assert proc.returncode in (0, 1), proc.stderr
    return {"times": times, "floor": []}


WORKLOADS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "index_build": index_build,
    "search_index": search_index,
    "search_refresh": search_refresh,
    "cli_run": cli_run,
    "load": load,
    "import_floor": import_floor,
    "tree_first_lazy": tree_first_lazy,
    "context": context,
    "tree": tree,
    "append": append,
    "listing": listing,
    "history": history,
}


def peak_rss_mb() -> float:
    """This process's own peak RSS (VmHWM): unlike rusage's ru_maxrss it does not
    include the parent's memory inherited across fork + exec."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


if __name__ == "__main__":
    name, raw = sys.argv[1], sys.argv[2]
    result = WORKLOADS[name](json.loads(raw))
    result["rss_mb"] = peak_rss_mb()
    sys.stdout.write(json.dumps(result) + "\n")
