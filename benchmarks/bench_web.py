"""Benchmark `sessiontree serve`: the first page of a big store, a big session's page.

    .venv/bin/python benchmarks/bench_web.py                 # 2,000 sessions, a 100 MB session
    .venv/bin/python benchmarks/bench_web.py --files 200 --mb 10 --runs 1   # quick
    .venv/bin/python benchmarks/bench_web.py --gigabyte      # a 1 GiB session's page

Generates (seeded, with benchmarks/data.py) an agent dir holding `--files`
sessions in 20 projects and a `--mb` MB session with branches, labels, a compaction
and images. Each measurement runs in a fresh process that starts the server on a free
port and waits until it is ready; the times are of the first requests after that:

* first page, warm: `GET /` (projects) with the listing cache on disk from a previous
  run, then `GET /sessions` (the first page of every session);
* first page, cold: the same without the listing cache (every file is read);
* big session: Chromium (Playwright) opens the session's page; the time runs from
  `goto` until the leaf's last message is visible, with the server's own time for
  the HTML; the session is not yet open in the server (it loads it index first and
  reads the entries the page shows).
* `--gigabyte`: only that, for a store holding one 1 GiB session of 150,000 entries
  (the target: the page within 1 s, the server within 0.35 GB), with the caches
  warm (the listing and the search index that a first visit builds, finished) and
  cold (the first visit: the search index of the whole gigabyte is built in the
  background meanwhile, about 30 s); and the server process's peak memory (VmHWM,
  with the test's own client in it).

Prints median, min and max over `--runs`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.data import SessionSpec, write_big_session, write_store  # noqa: E402
from sessiontree.format._entries import format_iso  # noqa: E402
from sessiontree.format._naming import session_file_name  # noqa: E402
from sessiontree.layout._paths import encode_session_dir_name  # noqa: E402

CHROMIUM = os.environ.get("SESSIONTREE_CHROMIUM", "/usr/bin/chromium")
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

CHILD = r"""
import json, sys, time
args = json.loads(sys.argv[1])
import httpx
from sessiontree.storage import FileSessionStorage
from sessiontree.web.server import BackgroundServer
out = {}
with BackgroundServer(FileSessionStorage(), args["agent"]) as server:
    with httpx.Client(base_url=server.base, cookies=server.login_cookies(), timeout=120) as client:
        if args["mode"] == "prepare":  # the background passes of a first visit, finished
            deadline = time.monotonic() + 900
            while 'id="usage-summary"' not in client.get("/usage").text:
                assert time.monotonic() < deadline, "usage never came"
                time.sleep(1)
        elif args["mode"] == "listing":
            for name, url in (("projects", "/"), ("sessions", "/sessions")):
                t = time.perf_counter()
                r = client.get(url)
                out[name] = (time.perf_counter() - t) * 1000
                assert r.status_code == 200, r.status_code
        else:
            from playwright.sync_api import sync_playwright
            from sessiontree.web.data import handle_of
            client.get("/")  # the listing, as a person arrives at the session
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path=args["chromium"], args=args["browser_args"])
                context = browser.new_context(viewport={"width": 1280, "height": 900})
                [(name, value)] = server.login_cookies().items()
                context.add_cookies([{"name": name, "value": value, "url": server.base}])
                page = context.new_page()
                url = server.base + "/s/" + handle_of("s", args["session"])
                t = time.perf_counter()
                page.goto(url, wait_until="commit")
                # Shown: the last entry of the path holds the text and is in the viewport.
                page.wait_for_function(
                    "(text) => { const a = document.querySelector('#entries > article:last-child');"
                    " if (!a || !a.textContent.includes(text)) return false;"
                    " const r = a.getBoundingClientRect();"
                    " return r.top < innerHeight && r.bottom > 0; }",
                    arg=args["last_text"], polling="raf")
                out["page"] = (time.perf_counter() - t) * 1000
                out["in_viewport"] = True

                out["html_bytes"] = len(page.content())
                t = time.perf_counter()
                r = client.get(url)
                out["server_again"] = (time.perf_counter() - t) * 1000
                browser.close()
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        out["peak_mb"] = int(line.split()[1]) / 1024
print(json.dumps(out))
"""


def child(args: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(args)],
        capture_output=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stderr.decode())
    result: dict[str, Any] = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    return result


def last_text(path: Path) -> str:
    """A piece of the last message's text on the file's last line (the leaf)."""
    from sessiontree.format import entry_text

    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - (4 << 20)))
        line = f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    entry = json.loads(line)
    text = entry_text(entry, thinking=False).strip() or str(entry.get("id"))
    return text.split("\n")[0][:40]


def make_store(work: Path, files: int, mb: int) -> dict[str, Any]:
    agent = work / "agent"
    if (work / "done.json").exists():
        done: dict[str, Any] = json.loads((work / "done.json").read_text())
        if done.get("files") == files and done.get("mb") == mb:
            return done
    shutil.rmtree(work, ignore_errors=True)
    sessions = agent / "sessions"
    sessions.mkdir(parents=True)
    write_store(sessions, files, 20, 200, seed=1, projects=20)
    big_dir = sessions / encode_session_dir_name("/work/big-project")
    big_dir.mkdir()
    big = big_dir / session_file_name(format_iso(1_767_225_600_000), "bench-big-session")
    write_big_session(big, SessionSpec(entries=20_000, target_bytes=mb << 20), agent / "blobs")
    bigs = [str(big)]
    done = {"files": files, "mb": mb, "agent": str(agent), "big": bigs}
    (work / "done.json").write_text(json.dumps(done))
    return done


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):8.1f} {min(values):8.1f} {max(values):8.1f}"


def gigabyte(work: Path, runs: int) -> None:
    """The page of a 1 GiB session, warm and cold, and the server's peak memory."""
    agent = work / "agent"
    done = work / "done.json"
    if not done.exists():
        shutil.rmtree(work, ignore_errors=True)
        big_dir = agent / "sessions" / encode_session_dir_name("/work/big-project")
        big_dir.mkdir(parents=True)
        big = big_dir / session_file_name(format_iso(1_767_225_600_000), "gigabyte-session")
        spec = SessionSpec(
            entries=150_000, target_bytes=1 << 30, branches=8, labels=20, compactions=3
        )
        write_big_session(big, spec, agent / "blobs")
        done.write_text(json.dumps({"big": str(big)}))
    big = json.loads(done.read_text())["big"]
    size = Path(big).stat().st_size / (1 << 20)
    text = last_text(Path(big))
    job = {
        "mode": "session",
        "agent": str(agent),
        "session": big,
        "last_text": text,
        "chromium": CHROMIUM,
        "browser_args": BROWSER_ARGS,
    }
    results: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": []}
    for _ in range(runs):
        shutil.rmtree(agent / "cache", ignore_errors=True)
        results["cold"].append(child(job))
    child({"mode": "prepare", "agent": str(agent)})  # the search index built, usage known
    for _ in range(runs):
        results["warm"].append(child(job))
    print(f"a {size:,.0f} MB session, 150,000 entries")
    print("target: the page within 1,000 ms, the server within 358 MB")
    print(f"{'measurement':64} {'median':>8} {'min':>8} {'max':>8}")
    for state in ("warm", "cold"):
        rows = results[state]
        page = summary([r["page"] for r in rows])
        peak = summary([r["peak_mb"] for r in rows])
        print(f"{f'page until the leaf shows, {state} caches (ms)':64} {page}")
        print(f"{f'server process peak memory, {state} caches (MB)':64} {peak}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--work", default="/tmp/sessiontree-bench-web")
    parser.add_argument("--gigabyte", action="store_true", help="only the 1 GiB session's page")
    args = parser.parse_args()
    work = Path(args.work)
    if args.gigabyte:
        gigabyte(work.with_name(work.name + "-gigabyte"), args.runs)
        return
    store = make_store(work, args.files, args.mb)
    agent = store["agent"]
    cache = Path(agent) / "cache"
    rows: list[tuple[str, list[float]]] = []
    for state in ("cold", "warm"):
        projects, sessions = [], []
        for _ in range(args.runs):
            if state == "cold":
                shutil.rmtree(cache, ignore_errors=True)
            else:
                child({"mode": "listing", "agent": agent}) if not cache.exists() else None
            r = child({"mode": "listing", "agent": agent})
            projects.append(r["projects"])
            sessions.append(r["sessions"])
        rows.append((f"GET / (projects), {args.files} sessions, {state} listing cache", projects))
        rows.append((f"then GET /sessions (first 100 of {args.files})", sessions))
    for big in store["big"]:
        size = Path(big).stat().st_size / (1 << 20)
        text = last_text(Path(big))
        pages, again, html = [], [], 0
        for _ in range(args.runs):
            r = child(
                {
                    "mode": "session",
                    "agent": agent,
                    "session": big,
                    "last_text": text,
                    "chromium": CHROMIUM,
                    "browser_args": BROWSER_ARGS,
                }
            )
            assert r["in_viewport"], "the leaf's last message is not in view"
            pages.append(r["page"])
            again.append(r["server_again"])
            html = r["html_bytes"]
        name = Path(big).name.split("_", 1)[1]
        rows.append((f"{name} ({size:.0f} MB): page until the leaf's message shows", pages))
        rows.append((f"  same page again, server only (open session cached; {html:,} B)", again))
    print(f"{'measurement':80} {'median':>8} {'min':>8} {'max':>8}  (ms)")
    for name, values in rows:
        print(f"{name:80} {summary(values)}")


if __name__ == "__main__":
    main()
