"""Two `sessiontree import --all` runs at once, in two real processes, into one store
(its files, or a PostgreSQL schema): each source is imported once, and the run that comes
second to a source skips it as imported before. A lock file that cannot be used stops
a run at once, naming it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REAL_FILES, unavailable

CLAUDE = REAL_FILES / "foreign" / "claude"
SOURCES = 12


def _claude_store(tmp_path: Path) -> list[str]:
    real = sorted(CLAUDE.glob("*.jsonl")) if CLAUDE.is_dir() else []
    if len(real) < SOURCES:  # one session each: a copy of one would be the same session
        unavailable(f"fewer than {SOURCES} real Claude Code files")
    paths = []
    for n in range(SOURCES):
        target = (
            tmp_path
            / "claude"
            / "projects"
            / f"-work-p{n % 2}"
            / f"{n:08d}-0000-4000-8000-000000000000.jsonl"
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(real[n], target)
        paths.append(str(target))
    return paths


def _start(tmp_path: Path, store: list[str]) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude"),
        "HOME": str(tmp_path / "home"),
    }
    env.pop("SESSIONTREE_STORE", None)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sessiontree",
            "--agent-dir",
            str(tmp_path / "agent"),
            *store,
            "import",
            "--all",
            "--from",
            "claude",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _finish(process: subprocess.Popen[str]) -> tuple[int, dict[str, Any]]:
    out, err = process.communicate(timeout=300)
    assert out, err
    return process.returncode, json.loads(out)


@pytest.mark.parametrize("backend", ["files", "postgresql"])
def test_two_import_all_runs_at_once_import_each_source_once(tmp_path: Path, backend: str) -> None:
    sources = _claude_store(tmp_path)
    if backend == "files":
        store: list[str] = []
        schema = None
    else:
        from sessiontree.storage.postgres import new_schema_name
        from tests.pg_support import drop_schema, pg_url

        url, schema = pg_url(), new_schema_name("st_test")
        store = ["--store", f"{url}?schema={schema}"]
    try:
        runs = [_start(tmp_path, store) for _ in range(2)]
        results = [_finish(run) for run in runs]
        after = _start(tmp_path, store)  # a third run, later: nothing new
        again = _finish(after)
    finally:
        if schema is not None:
            drop_schema(url, schema)
    assert [code for code, _ in results] == [0, 0]
    imported = [i["sourceId"] for _, r in results for i in r["imported"]]
    assert imported and sorted(imported) == sorted(set(imported))  # each once, by either
    seen = []
    for _, r in results:
        done = {i["sourcePath"] for i in r["imported"]}
        skipped = {s["sourcePath"] for s in r["skipped"]}
        assert not r["failed"]
        assert not done & skipped
        seen.append(done | skipped)
    assert seen[0] == seen[1] and seen[0] <= set(sources)  # each run saw every source
    assert again[1]["imported"] == [] and len(again[1]["skipped"]) == len(seen[0])


def test_a_lock_file_that_is_a_symlink_stops_the_run_naming_it(tmp_path: Path) -> None:
    _claude_store(tmp_path)
    sessions = tmp_path / "agent" / "sessions"
    sessions.mkdir(parents=True)
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    (sessions / "..import.writer-lock").symlink_to(target)
    code, result = _finish(_start(tmp_path, []))
    assert code == 1
    assert result["imported"] == []
    [failed] = result["failed"]  # one, not one per source: the run stopped there
    assert "not a regular file" in failed["error"] and "the run stopped here" in failed["error"]
    assert str(sessions / "..import.writer-lock") in failed["error"]
    assert target.read_text() == "keep me\n"
