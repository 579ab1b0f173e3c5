"""Compare FTS5 set-ups for the content index on one store: size, build time, query time.

    .venv/bin/python benchmarks/bench_search.py AGENT_DIR [--files N]

For each variant it indexes the casefolded `entry_text` of every entry of up to
`--files` sessions into a fresh database and reports the build time, the FTS
tables' size against the text indexed, and the median time of a few queries
(`LIMIT 100`, newest first). The variants:

* trigram, detail=none: what `sessiontree.search._content_index` uses (a superset of
  the substring's entries; each hit is verified against its line);
* trigram, detail=full: positions kept, so a phrase query is exact, but larger;
* trigram, detail=column: between the two;
* unicode61, detail=none: word tokens. Smallest, but a word *part* ("pars" in
  "parser") is not found, and punctuation inside a query is lost: it breaks the
  substring semantics `search` has always had.

The scan (`search_sessions`, no index) is timed on the same files for scale.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

from sessiontree.format import entry_text
from sessiontree.search import index_text, query_trigrams, search_sessions

VARIANTS = {
    "trigram, detail=none": "detail=none, tokenize='trigram case_sensitive 1'",
    "trigram, detail=column": "detail=column, tokenize='trigram case_sensitive 1'",
    "trigram, detail=full": "detail=full, tokenize='trigram case_sensitive 1'",
    "unicode61, detail=none": "detail=none, tokenize='unicode61'",
}
QUERIES = ["session", "compaction summary", "serialize migrate", "nothing-like-this"]


def texts(paths: list[str]) -> list[str]:
    out = []
    for path in paths:
        with open(path, "rb") as f:
            for n, line in enumerate(f):
                if n == 0 or not line.strip():
                    continue
                text = entry_text(orjson.loads(line))
                if text:
                    out.append(index_text(text))
    return out


def match(variant: str, query: str) -> str:
    if variant.startswith("unicode61"):
        return " AND ".join('"' + w + '"' for w in re.findall(r"\w+", query))
    return " AND ".join('"' + t.replace('"', '""') + '"' for t in query_trigrams(query))


def run_variant(name: str, options: str, corpus: list[str], directory: str) -> list[str]:
    db = os.path.join(directory, f"{abs(hash(name))}.db")
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"CREATE VIRTUAL TABLE fts USING fts5(t, content='', columnsize=0, {options})")
    start = time.perf_counter()
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO fts (rowid, t) VALUES (?, ?)", enumerate(corpus, start=1))
    conn.execute("COMMIT")
    build = time.perf_counter() - start
    size = conn.execute(
        "SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name LIKE 'fts%'"
    ).fetchone()[0]
    text = sum(len(t.encode()) for t in corpus)
    timings = []
    for query in QUERIES:
        samples = []
        for _ in range(5):
            t = time.perf_counter()
            conn.execute(
                "SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rowid DESC LIMIT 100",
                (match(name, query),),
            ).fetchall()
            samples.append(time.perf_counter() - t)
        timings.append(f"{statistics.median(samples) * 1000:.1f}")
    conn.close()
    return [name, f"{build:.1f}", f"{size / 2**20:,.1f}", f"{size / text:.2f}x", *timings]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("agent_dir")
    parser.add_argument("--files", type=int, default=2000)
    args = parser.parse_args()
    paths = sorted(str(p) for p in Path(args.agent_dir, "sessions").rglob("*.jsonl"))
    paths = paths[: args.files]
    corpus = texts(paths)
    text = sum(len(t.encode()) for t in corpus)
    print(f"{len(paths)} sessions, {len(corpus):,} entries, {text / 2**20:,.1f} MB of text")
    head = ["variant", "build s", "FTS MB", "vs text", *(f"{q!r} ms" for q in QUERIES)]
    rows = [head]
    with tempfile.TemporaryDirectory() as directory:
        for name, options in VARIANTS.items():
            rows.append(run_variant(name, options, corpus, directory))
    samples = []
    for query in QUERIES[:1]:
        t = time.perf_counter()
        list(search_sessions(paths, query, limit=100))
        samples.append(time.perf_counter() - t)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for row in rows:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    print(f"scan (no index), {QUERIES[0]!r}, limit 100: {statistics.median(samples) * 1000:.0f} ms")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
