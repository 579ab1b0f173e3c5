"""Benchmark `sessiontree archive` (issue 26.3), one run.

    .venv/bin/python benchmarks/bench_archive.py [--forks 2]

Builds a home with a Claude Code and a Codex store from the real files in
`shared/fixtures/foreign` (each file, and `--forks` forks of it: the parent's lines
copied after a new first line, as Codex forks copy their parent, plus lines of their
own; a Claude Code copy is a resume, every line replayed with the new session's id),
then measures:

* first:  archiving it all from nothing: sessions/s and MB/s;
* again:  the same with nothing new (only metadata is read);
* size:   the archive's stored bytes against the originals;
* watch:  `archive --watch` latency from an append at the source to the archived copy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "data" / "real" / "foreign"


def build(home: Path, forks: int) -> int:
    count = 0
    for agent, target in (
        ("claude", home / ".claude" / "projects" / "-bench"),
        ("codex", home / ".codex" / "sessions" / "2026" / "01" / "01"),
    ):
        target.mkdir(parents=True)
        for n, source in enumerate(sorted((FIXTURES / agent).glob("*.jsonl"))):
            body = source.read_bytes()
            name = f"{n:08x}-0000-4000-8000-{0:012x}"
            prefix = "rollout-2026-01-01T00-00-00-" if agent == "codex" else ""
            (target / f"{prefix}{name}.jsonl").write_bytes(body)
            count += 1
            first, _, rest = body.partition(b"\n")
            for k in range(1, forks + 1):
                own = json.dumps({"type": "fork", "n": k}).encode() + b"\n"
                fork = f"{n:08x}-0000-4000-8000-{k:012x}"
                if agent == "claude":  # a resume: every line replayed with the new id
                    copy = re.sub(rb'"sessionId":"[^"]*"', f'"sessionId":"{fork}"'.encode(), body)
                else:  # a Codex fork: a new first line, the parent's lines as they are
                    copy = first + b" \n" + rest
                (target / f"{prefix}{fork}.jsonl").write_bytes(copy + own)
                count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--forks", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from sessiontree.archive import ArchiveSource, archive_stats, archive_stores

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        sessions = build(home, args.forks)
        sources = [
            ArchiveSource("claude", str(home / ".claude"), ("projects",)),
            ArchiveSource("codex", str(home / ".codex"), ("sessions",)),
        ]
        archive = str(Path(tmp) / "archive")
        started = time.perf_counter()
        first = archive_stores(archive, sources)
        elapsed = time.perf_counter() - started
        original = first.bytes_read
        started = time.perf_counter()
        again = archive_stores(archive, sources)
        second = time.perf_counter() - started
        figures = archive_stats(archive)
        print(f"sessions: {sessions}, original {original / 1e6:.1f} MB")
        print(
            f"first run: {elapsed:.2f}s, {sessions / elapsed:.0f} sessions/s, "
            f"{original / 1e6 / elapsed:.1f} MB/s"
        )
        print(f"again (nothing new): {second * 1000:.0f} ms, read {again.bytes_read} bytes")
        ratio = figures.stored_bytes / figures.original_bytes
        print(
            f"archive: {figures.stored_bytes / 1e6:.2f} MB stored for "
            f"{figures.original_bytes / 1e6:.2f} MB ({ratio:.2f}x)"
        )
        env = {
            **os.environ,
            "HOME": str(home),
            "PYTHONPATH": str(ROOT / "src"),
        }
        for name in ("PI_CODING_AGENT_DIR", "SESSIONTREE_STORE", "CLAUDE_CONFIG_DIR", "CODEX_HOME"):
            env.pop(name, None)
        watcher = subprocess.Popen(
            [sys.executable, "-m", "sessiontree", "archive", "--to", archive, "--watch"],
            env=env,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(3)  # its first round
            target = next((home / ".claude" / "projects" / "-bench").glob("*.jsonl"))
            latencies = []
            for n in range(5):
                size_before = target.stat().st_size
                with target.open("ab") as f:
                    f.write(json.dumps({"type": "user", "n": n}).encode() + b"\n")
                appended = time.perf_counter()
                while True:
                    from sessiontree.archive import archived_files

                    sizes = [f.size for f in archived_files(archive) if f.rel.endswith(target.name)]
                    if sizes and sizes[0] > size_before:
                        break
                    if time.perf_counter() - appended > 30:
                        raise SystemExit("watch did not archive the append within 30 s")
                    time.sleep(0.02)
                latencies.append(time.perf_counter() - appended)
            print(
                "watch latency (append -> archived): "
                + ", ".join(f"{x:.2f}" for x in latencies)
                + f" s (max {max(latencies):.2f} s)"
            )
        finally:
            watcher.terminate()
            watcher.wait()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
