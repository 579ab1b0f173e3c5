"""The benchmark suite itself runs (tiny sizes): a broken benchmark is caught here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

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
