"""What the CLI prints into a pipe or a file: one line per item, no path or name broken
by a newline at the terminal's width (scripts read it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import sessiontree.cli.common as cli_common
from sessiontree.cli import app

A = "aaaaaaaa-0000-0000-0000-000000000001"
B = "bbbbbbbb-0000-0000-0000-000000000002"


def test_archive_and_restore_print_whole_paths_into_a_pipe(
    homes_in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_common.console, "width", 80)
    monkeypatch.setattr(cli_common.err_console, "width", 80)
    project = homes_in_tmp / ".claude" / "projects" / ("-work-" + "a-long-project-name-" * 3)
    project.mkdir(parents=True)
    for sid in (A, B):
        (project / f"{sid}.jsonl").write_bytes(
            b'{"type":"user","sessionId":"' + sid.encode() + b'"}\n'
        )
    archive = homes_in_tmp / ("an-archive-dir-with-a-name-long-enough-to-wrap-" * 2)
    runner = CliRunner()
    archived = runner.invoke(app, ["archive", "--to", str(archive)])
    assert archived.exit_code == 0, archived.stderr
    assert (
        f"Archived into {archive} from: claude {homes_in_tmp / '.claude'}"
        in (archived.stdout.splitlines()[0])
    )
    target = homes_in_tmp / ("restored-into-a-dir-whose-name-is-long-as-well-" * 2)
    restored = runner.invoke(app, ["restore", "--all", "--from", str(archive), "--to", str(target)])
    assert restored.exit_code == 0, restored.stderr
    lines = restored.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith(f"restored {target}/") for line in lines)
    assert {line.rsplit("/", 1)[-1] for line in lines} == {f"{A}.jsonl", f"{B}.jsonl"}
