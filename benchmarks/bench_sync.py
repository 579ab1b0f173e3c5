"""The sync benchmark: `python benchmarks/bench_sync.py [--sessions 10000] [--hub URL]`.

Writes a corpus of pi-format sessions (benchmarks.data.write_corpus) into machine A's
pi agent dir (a HOME of its own under `--work`), then times `sessiontree.sync.sync`
rounds, each as the machine it runs on (HOME set to that machine's):

* A first:  the whole store sent to an empty hub (bytes sent, hub bytes, time);
* A again:  nothing new (time; session bytes read past what the last push marked:
            must be 0; hub bytes written: must be 0);
* B first:  machine B, with an empty pi store, receives every session;
* B again:  nothing new on B (the files B wrote are checked: 16 KB at their head and
            end each, none read whole), and once more (nothing checked);
* grown:    a line appended to 100 of A's sessions: A sends only those lines, B
            receives them.

The hub is a temp dir, or the PostgreSQL database `--hub` names.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.data import write_corpus  # noqa: E402


def _hub_bytes(hub: str) -> tuple[int, int]:
    """(files, bytes) of the hub."""
    from sessiontree.sync._hub import opened_hub

    files = total = 0
    with opened_hub(hub) as place:
        todo = [""]
        while todo:
            rel = todo.pop()
            for name in place.list_files(rel, "*"):
                files += 1
                total += place.size(f"{rel}/{name}" if rel else name)
            todo += [f"{rel}/{d}" if rel else d for d in place.list_dirs(rel)]
    return files, total


def _round(label: str, home: Path, hub: str, machine: str) -> None:
    from sessiontree.layout import StoreParts
    from sessiontree.storage import FileSessionStorage
    from sessiontree.sync import sync

    os.environ["HOME"] = str(home)
    before = _hub_bytes(hub)
    parts = StoreParts(FileSessionStorage(), str(home / ".pi" / "agent"))
    started = time.perf_counter()
    report = sync(hub, [("pi", parts)], machine=machine)
    seconds = time.perf_counter() - started
    after = _hub_bytes(hub)
    print(
        f"{label:10} {seconds:7.2f} s  sent {report.sent_lines:>7} lines "
        f"{report.sent_bytes / 1e6:7.2f} MB  received {report.received_lines:>7} lines "
        f"{report.received_bytes / 1e6:7.2f} MB  session bytes read {report.bytes_read / 1e6:7.2f}"
        f" MB  hub +{after[1] - before[1]:>10} B in {after[0] - before[0]:>5} new files",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--hub", help="a postgresql:// URL (default: a dir under --work)")
    parser.add_argument("--work", help="where the machines live (default: a temp dir)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="sessiontree-bench-sync-"))
    a, b = work / "a", work / "b"
    for home in (a, b):
        shutil.rmtree(home, ignore_errors=True)
        (home / ".pi" / "agent" / "sessions").mkdir(parents=True)
    shutil.rmtree(work / "hub", ignore_errors=True)
    hub = args.hub or str(work / "hub")
    size = write_corpus(a / ".pi" / "agent", args.sessions)
    from sessiontree.storage import redact_url

    label = redact_url(hub)
    print(f"{args.sessions} sessions, {size / 1e6:.1f} MB on A; hub {label}", flush=True)
    time.sleep(2.1)  # past the racy window of the files just written (listing._marks)
    _round("A first", a, hub, "a")
    _round("A again", a, hub, "a")
    _round("B first", b, hub, "b")
    time.sleep(2.1)
    _round("B again", b, hub, "b")  # checks the head and end of each file it wrote
    _round("B 3rd", b, hub, "b")
    sessions = sorted((a / ".pi" / "agent" / "sessions").rglob("*.jsonl"))
    for path in sessions[:: max(1, len(sessions) // 100)][:100]:
        last = path.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1]
        import json

        parent = json.loads(last).get("id")
        entry = {
            "type": "message",
            "id": "bench001",
            "parentId": parent,
            "timestamp": "2026-12-07T00:00:00.000Z",
            "message": {"role": "user", "content": "one more", "timestamp": 1},
        }
        with open(path, "ab") as f:
            f.write(json.dumps(entry).encode() + b"\n")
    _round("A grown", a, hub, "a")
    _round("B grown", b, hub, "b")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
