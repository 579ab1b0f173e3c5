"""The CLI's writing commands never delete or overwrite what is not theirs (review item 2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from sessiontree import SessionManager, load_entries_from_file
from sessiontree.cli import app
from sessiontree.storage import lock_path_for
from tests.helpers import assistant, user

runner = CliRunner()


def run(*args: str) -> Result:
    return runner.invoke(app, list(args))


def session(cwd: str = "/proj", session_dir: str | None = None) -> str:
    with SessionManager.create(cwd, session_dir) as sm:
        sm.append_message(user("q"))
        sm.append_message(assistant("a"))
        return sm.get_session_file() or ""


def test_rm_refuses_a_plain_file_and_leaves_the_directory_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.py").write_text("print('hi')\n")
    (project / "src.jsonl").write_text("not a session\n")
    monkeypatch.chdir(project)
    result = run("rm", "src.jsonl", "--yes")
    assert result.exit_code == 1 and "not in the session store" in result.stderr
    result = run("rm", "src.jsonl", "--yes", "--force")
    assert result.exit_code == 1
    assert (project / "src.jsonl").exists() and (project / "src" / "main.py").exists()


def test_rm_refuses_a_session_outside_the_store(tmp_path: Path) -> None:
    outside = session(session_dir=str(tmp_path / "elsewhere"))
    # Created with the agent's blobs, so its dir was registered: it may be deleted.
    assert run("rm", outside, "--yes").exit_code == 0
    unregistered = tmp_path / "copy" / "2026-01-01T00-00-00-000Z_0cb0000000000000.jsonl"
    unregistered.parent.mkdir()
    unregistered.write_bytes(Path(session()).read_bytes())
    result = run("rm", str(unregistered), "--yes")
    assert result.exit_code == 1 and "not in the session store" in result.stderr
    assert unregistered.exists()


def test_rm_of_a_damaged_session_needs_force(agent_dir: Path) -> None:
    path = session()
    Path(path).write_text("garbage\n")
    result = run("rm", path, "--yes")
    assert result.exit_code == 1 and "--force" in result.stderr
    assert Path(path).exists()
    assert run("rm", path, "--yes", "--force").exit_code == 0
    assert not Path(path).exists()


def test_rm_removes_an_artifacts_dir_only_when_names_match(agent_dir: Path) -> None:
    path = session()
    stem = Path(path[: -len(".jsonl")])
    stem.mkdir()
    (stem / "subagent.jsonl").write_text("x")
    assert run("rm", path, "--yes").exit_code == 0
    assert not stem.exists()
    # A session whose file name does not carry its header id keeps the dir beside it.
    other = Path(session())
    renamed = other.with_name("notes.jsonl")
    os.rename(other, renamed)
    beside = renamed.with_suffix("")
    beside.mkdir()
    (beside / "keep.txt").write_text("mine")
    assert run("rm", str(renamed), "--yes").exit_code == 0
    assert not renamed.exists() and (beside / "keep.txt").read_text() == "mine"


def test_rm_refuses_a_symlink_and_a_session_being_written(agent_dir: Path) -> None:
    path = session()
    link = Path(path).with_name("2026-01-01T00-00-00-000Z_0cb0000000000001.jsonl")
    os.symlink(path, link)
    result = run("rm", str(link), "--yes")
    assert result.exit_code == 1 and "symbolic link" in result.stderr
    assert link.is_symlink() and Path(path).exists()
    live = SessionManager.open(path)
    result = run("rm", path, "--yes")
    assert result.exit_code == 1 and "being written" in result.stderr
    live.close()
    assert Path(path).exists() and not os.path.exists(lock_path_for(path))


def test_repair_output_never_overwrites_the_source_or_another_file(tmp_path: Path) -> None:
    path = session()
    with open(path, "a") as f:
        f.write("garbage line\n")
    before = Path(path).read_bytes()
    result = run("repair", path, "-o", path)
    assert result.exit_code == 1 and "--in-place" in result.stderr
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    result = run("repair", path, "-o", str(precious))
    assert result.exit_code == 1 and "already exists" in result.stderr
    assert precious.read_text() == "keep me" and Path(path).read_bytes() == before
    assert run("repair", path, "--in-place").exit_code == 0
    assert Path(path + ".bak").read_bytes() == before
    assert len(load_entries_from_file(path)) == 3


def test_repair_in_place_through_a_symlink_repairs_the_target(tmp_path: Path) -> None:
    path = session()
    with open(path, "a") as f:
        f.write("garbage line\n")
    link = tmp_path / "link.jsonl"
    os.symlink(path, link)
    assert run("repair", str(link), "--in-place").exit_code == 0
    assert link.is_symlink() and os.readlink(link) == path
    assert b"garbage" not in Path(path).read_bytes()


def test_extract_does_not_migrate_or_lock_its_source(tmp_path: Path) -> None:
    v1 = tmp_path / "v1.jsonl"
    v1.write_text(
        '{"type":"session","id":"s1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/p"}\n'
        '{"type":"message","timestamp":"2026-01-01T00:00:01.000Z","message":'
        '{"role":"user","content":"hi","timestamp":1}}\n'
    )
    before = v1.read_bytes()
    with SessionManager.open(str(v1), read_only=True) as sm:
        leaf = sm.get_leaf_id() or ""
    result = run("extract", str(v1), "--leaf", leaf)
    assert result.exit_code == 0, result.stderr
    assert v1.read_bytes() == before
    new = result.stdout.strip()
    assert load_entries_from_file(new)[0]["parentSession"] == str(v1)


def test_long_file_names_can_be_rewritten_locked_and_repaired(tmp_path: Path) -> None:
    name = "2026-01-01T00-00-00-000Z_" + "x" * 220 + ".jsonl"
    assert len(name.encode()) > 240
    path = tmp_path / name
    path.write_bytes(Path(session()).read_bytes())
    with SessionManager.open(str(path)) as sm:
        sm.append_message(user("more"))
        sm.set_session_name("renamed")  # temp file + rename
        assert os.path.exists(lock_path_for(str(path)))
        assert all(len(n.encode()) <= 255 for n in os.listdir(tmp_path))
    with open(path, "a") as f:
        f.write("garbage\n")
    assert run("repair", str(path)).exit_code == 0
    assert run("repair", str(path), "--in-place").exit_code == 0
    assert run("migrate", str(path)).exit_code == 0
    assert all(len(n.encode()) <= 255 for n in os.listdir(tmp_path))
    assert load_entries_from_file(str(path))[0]["title"] == "renamed"


def test_a_conflict_copy_of_a_long_name_is_found_by_verify(tmp_path: Path) -> None:
    from sessiontree.maintenance import conflict_siblings

    name = "2026-01-01T00-00-00-000Z_" + "y" * 224 + ".jsonl"
    path = tmp_path / name
    path.write_bytes(Path(session()).read_bytes())
    sm = SessionManager.open(str(path))
    os.unlink(path)
    path.write_bytes(b"")  # replaced behind the writer's back
    with pytest.raises(Exception, match="changed on disk"):
        sm.append_message(user("x"))
    assert len(conflict_siblings(str(path))) == 1


def test_export_of_a_lone_surrogate_writes_a_replacement_character(tmp_path: Path) -> None:
    with SessionManager.create("/proj") as sm:
        sm.append_message(user("half a pair: \ud83d here"))
        sm.append_message(assistant("a"))
        path = sm.get_session_file() or ""
    for fmt in ("md", "html"):
        out = tmp_path / f"out.{fmt}"
        result = run("export", path, "-f", fmt, "-o", str(out))
        assert result.exit_code == 0, result.output
        assert "half a pair: \ufffd here" in out.read_text(encoding="utf-8")


def test_export_never_writes_over_its_source_or_another_session(tmp_path: Path) -> None:
    # `export S -o S` replaced the session with one branch of it (jsonl) or with
    # Markdown; `-o OTHER` replaced another session.
    with SessionManager.create("/proj") as sm:
        first = sm.append_message(user("q"))
        sm.append_message(assistant("branch one"))
        sm.branch(first)
        sm.append_message(assistant("branch two"))
        path = sm.get_session_file() or ""
    other = session()
    link = tmp_path / "link.jsonl"
    os.symlink(path, link)
    kept = {p: Path(p).read_bytes() for p in (path, other)}
    for target in (path, other, str(link)):
        for fmt in ("jsonl", "md", "html"):
            result = run("export", path, "-f", fmt, "-o", target)
            assert result.exit_code == 1, (target, fmt, result.output)
            assert "not overwritten" in result.stderr
    assert {p: Path(p).read_bytes() for p in kept} == kept and os.path.islink(link)
    # A file that is not a session (an earlier Markdown export, say) is replaced.
    out = tmp_path / "out.md"
    out.write_text("an earlier export\n")
    assert run("export", path, "-f", "md", "-o", str(out)).exit_code == 0
    assert "branch two" in out.read_text()
