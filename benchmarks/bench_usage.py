"""The usage report beside ccusage, on the same corpus: the rows `--ccusage` adds to
`python -m benchmarks store`.

ccusage (the usage report people compare with) is installed from the npm registry at
the version pinned in benchmarks/ccusage/package-lock.json, into the benchmark's work
dir (`npm install` of that lock, no install scripts, nothing global). It reads Claude
Code's and pi's files, so both are timed, each command in a fresh process with the
caches warm:

* `sessiontree --agent claude usage daily --json` against `ccusage claude daily --json
  --offline` over the corpus written as Claude Code transcripts
  (benchmarks.data.write_claude_corpus: the same replies, tokens and models);
* `sessiontree usage daily --json` against `ccusage pi daily --json --offline` over the
  pi corpus itself.

Days are UTC for both (`--tz UTC`, `-z UTC`). The totals of each pair (tokens of each
kind, cost) are compared and every day where they differ is printed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_store import CLI, StoreTable, sample
from benchmarks.data import write_claude_corpus

PINNED = Path(__file__).resolve().parent / "ccusage"
"""package.json and package-lock.json: the ccusage version these figures are of."""
KINDS = ("input", "output", "cacheRead", "cacheWrite", "cost")
CCUSAGE_KINDS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheCreationTokens")


def install_ccusage(work: Path) -> Path | None:
    """ccusage's command, installed under `work` when missing; None without npm."""
    npm = shutil.which("npm")
    if npm is None:
        return None
    target = work / "ccusage"
    command = target / "node_modules" / ".bin" / "ccusage"
    lock = (PINNED / "package-lock.json").read_bytes()
    stamp = target / "installed-lock.json"
    if command.exists() and stamp.exists() and stamp.read_bytes() == lock:
        return command
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(PINNED / name, target / name)
    # `install`, not `ci`: ccusage names a binary package per platform, of which this
    # registry lacks some, and `npm ci` refuses a lock without them; `install` follows
    # the lock for the rest (the version is printed beside the figures).
    subprocess.run(
        [npm, "install", "--ignore-scripts", "--no-audit", "--no-fund"],
        cwd=target,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    stamp.write_bytes(lock)
    return command


def claude_corpus(agent: Path) -> tuple[Path, int, int]:
    """The Claude Code config dir of the corpus in `agent` (written unless already
    there), its transcripts and their bytes."""
    config = agent.parent / f"{agent.name}-claude"
    done = config / "corpus-written"
    if not done.exists():
        shutil.rmtree(config, ignore_errors=True)
        started = time.perf_counter()
        write_claude_corpus(config, agent)
        done.write_text(f"{time.perf_counter() - started:.1f} s\n")
    files = list((config / "projects").rglob("*.jsonl"))
    return config, len(files), sum(p.stat().st_size for p in files)


def days(report: dict[str, Any]) -> dict[str, tuple[float, ...]]:
    """Each day's input, output, cache read and cache write tokens and cost, from either
    tool's `daily --json`."""
    if "daily" in report:  # ccusage
        return {
            row["date"]: (*(row[k] for k in CCUSAGE_KINDS), row["totalCost"])
            for row in report["daily"]
        }
    return {row["period"]: tuple(row[k] for k in KINDS) for row in report["rows"]}


def compare(ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """The totals of both reports, and each day where they differ."""
    mine, other = days(ours), days(theirs)
    lines = []
    for name, report in (("sessiontree", mine), ("ccusage", other)):
        sums = [sum(day[i] for day in report.values()) for i in range(len(KINDS))]
        figures = ", ".join(f"{k} {v:,.0f}" for k, v in zip(KINDS[:-1], sums, strict=False))
        lines.append(f"  {name}: {len(report)} days, {figures}, cost ${sums[-1]:,.2f}")
    for day in sorted(set(mine) | set(other)):
        a, b = mine.get(day), other.get(day)
        if (
            a is None
            or b is None
            or any(abs(x - y) > 1e-6 * max(1, abs(y)) for x, y in zip(a, b, strict=True))
        ):
            lines.append(f"  differ on {day}: sessiontree {_day(a)}; ccusage {_day(b)}")
    if len(lines) == 2:
        lines.append("  every day agrees (tokens of each kind and cost)")
    return lines


def _day(figures: tuple[float, ...] | None) -> str:
    if figures is None:
        return "no row"
    return " / ".join(f"{v:,.0f}" for v in figures[:-1]) + f" tokens, ${figures[-1]:,.4f}"


def report_json(argv: list[str], cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=True).stdout
    result: dict[str, Any] = json.loads(out)
    return result


def usage_rows(table: StoreTable, agent: Path, work: Path, runs: int) -> None:
    """Add the usage report's rows against ccusage (see the module's doc) to `table`."""
    ccusage = install_ccusage(work)
    if ccusage is None:
        table.notes.append("ccusage: npm is not installed, its rows are left out")
        return
    version = subprocess.run(
        [str(ccusage), "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    config, files, size = claude_corpus(agent)
    env = dict(os.environ, TZ="UTC", CLAUDE_CONFIG_DIR=str(config), PI_CODING_AGENT_DIR=str(agent))
    env.pop("SESSIONTREE_STORE", None)
    pairs = (
        (
            f"usage daily --json --agent claude ({files:,} Claude Code files, "
            f"{size / 2**20:,.0f} MB)",
            [*CLI, "--agent", "claude", "usage", "daily", "--json", "--tz", "UTC"],
            "ccusage claude daily",
            [str(ccusage), "claude", "daily", "--json", "--offline", "-z", "UTC"],
        ),
        (
            "usage daily --json (the pi corpus)",
            [*CLI, "usage", "daily", "--json", "--tz", "UTC"],
            "ccusage pi daily",
            [
                str(ccusage),
                "pi",
                "daily",
                "--json",
                "--offline",
                "-z",
                "UTC",
                "--pi-path",
                str(agent / "sessions"),
            ],
        ),
    )
    for name, ours, floor_name, theirs in pairs:
        theirs_timed = sample(theirs, agent, env, runs)
        table.add(name, sample(ours, agent, env, runs), floor_name, theirs_timed)
        table.notes.append(f"{name} against {version}:")
        table.notes.extend(compare(report_json(ours, agent, env), report_json(theirs, agent, env)))
