"""The benchmark suite itself runs (tiny sizes): a broken benchmark is caught here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, unavailable
from tests.pg_support import pg_url

pytestmark = pytest.mark.slow  # the whole benchmark suite, each workload in its own process

ROOT = REPO_ROOT


def test_quick_benchmark_suite_prints_every_workload(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--work", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    out = proc.stdout
    for workload in [
        "open + context",
        "context,",
        "get_tree",
        "append",
        "list_all",
        "history",
        "index build",
        "search a word",
        "index refresh",
        "CLI search",
    ]:
        assert workload in out, out
    assert "ratio" in out and "peak RSS MB" in out


def test_the_integrations_benchmark_prints_both_tables() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = ["--items", "20", "--entries", "20", "--repeat", "1"]
    proc = subprocess.run(
        [sys.executable, "benchmarks/bench_integrations.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    for row in ("SQLiteSession (file)", "SessionTreeSession (files)", "SessionTreeStore (files)"):
        assert row in proc.stdout, proc.stdout
    if os.environ.get("SESSIONTREE_TEST_PG"):
        assert "SessionTreeStore (postgres)" in proc.stdout


def test_the_store_benchmark_prints_every_figure_against_its_floor(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = ["store", "--sessions", "50", "--runs", "1", "--work", str(tmp_path)]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    out = proc.stdout
    assert "50 sessions" in out, out
    for row in (
        "ingest: content index from nothing",
        "list --all --json",
        "list --all -n 20",
        "search zanzibar --all --json",
        "usage daily --json",
        "sessions/s",
        "of cat's",
    ):
        assert row in out, out
    for floor in ("| cat ", "| grep -c '' -r", "| grep -rl"):
        assert floor in out, out
    assert "a refresh of the unchanged store read 0 session files" in out, out


def test_the_sync_benchmark_prints_every_round() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "benchmarks/bench_sync.py", "--sessions", "20"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    for row in ("A first", "A again", "B first", "B again", "B 3rd", "A grown", "B grown"):
        assert row in proc.stdout, proc.stdout


def test_the_store_benchmark_runs_the_same_figures_on_postgres_and_beside_ccusage(
    tmp_path: Path,
) -> None:
    pg_url()  # skips locally without a server; fails under CI
    if shutil.which("npm") is None:
        unavailable("needs npm (ccusage is installed from the npm registry)")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = ["store", "--sessions", "20", "--runs", "1", "--work", str(tmp_path)]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args, "--postgres", "--ccusage"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    out = proc.stdout
    for row in (
        "search, the 3 words together",
        "usage daily --json --agent claude (20 Claude Code files",
        "| ccusage claude daily",
        "| ccusage pi daily",
        "postgres ingest: import-files of the corpus",
        "postgres: list --all -n 20",
        "postgres: search quokka --all --json",
        "postgres: usage daily --json",
        "postgres ingest: ",
        "load average",
    ):
        assert row in out, out
    # The pi corpus's usage, read by both tools, agrees to the token and the cent.
    pi_totals = out.split("(the pi corpus) against ccusage")[1]
    assert "every day agrees" in pi_totals.splitlines()[3], out
