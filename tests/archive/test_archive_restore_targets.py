"""A restore without --to writes only the exact layout of an agent store on this machine.

A manifest's `home` and path are not trusted: whoever hands over an archive dir (or
can write to a shared PostgreSQL archive) wrote them. `restore --all` wrote e.g.
`~/projects/<repo>/conftest.py` (pytest imports it), as only the first component of
the path was checked and any home was taken. Now the home must be where that agent
keeps its store on this machine, and the path one of its own session files
(Claude Code `projects/<key>/<uuid>.jsonl`, Codex `sessions/YYYY/MM/DD/rollout-*.jsonl`,
pi `sessions/--<cwd>--/<ts>_<id>.jsonl`, ...); anything else is refused by name.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sessiontree.archive import (
    ArchiveError,
    ArchiveSource,
    archive_stores,
    archived_files,
    restore_files,
    restore_session,
)
from sessiontree.cli import app

A = "aaaaaaaa-0000-0000-0000-000000000001"
B = "bbbbbbbb-0000-0000-0000-000000000002"
CRAFTED = {
    "a repo's conftest in the home": ("claude", "", "projects/repo/conftest.py"),
    "a conftest in Claude's projects": ("claude", ".claude", "projects/repo/conftest.py"),
    "a Neovim session file": ("pi", ".local/share/nvim", "sessions/work.vim"),
    "a script in Codex's sessions": ("codex", ".codex", "sessions/2026/01/02/rollout-x.py"),
    "a Claude session in another home": ("claude", "other/.claude", f"projects/-w/{B[:-1]}9.jsonl"),
    "a pi session in the home itself": (
        "pi",
        "",
        "sessions/--w--/2026-01-01T00-00-00-000Z_x.jsonl",
    ),
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This user's home: the agents keep their stores at their defaults under it."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "XDG_DATA_HOME", "GEMINI_CLI_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COPILOT_HOME", str(tmp_path / "none"))
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(home / ".pi" / "agent"))
    return home


def _archive_with(tmp_path: Path, home: Path, crafted: tuple[str, str, str]) -> tuple[str, Path]:
    """An archive of two Claude sessions plus one crafted manifest; (archive, its target)."""
    project = home / ".claude" / "projects" / "-w"
    project.mkdir(parents=True)
    (project / f"{A}.jsonl").write_bytes(b'{"type":"user","n":1}\n')
    (project / f"{B}.jsonl").write_bytes(b'{"type":"user","n":2}\n')
    archive = str(tmp_path / "archive")
    archive_stores(archive, [ArchiveSource("claude", str(home / ".claude"), ("projects",))])
    agent, where, rel = crafted
    crafted_home = str(home / where) if where else str(home)
    (template,) = [f.key for f in archived_files(archive) if f.rel.endswith(f"{A}.jsonl")]
    manifest = json.loads((Path(archive) / template).read_bytes())
    manifest.update(agent=agent, home=crafted_home, rel=rel)
    digest = hashlib.sha256(f"{crafted_home}/{rel}".encode()).hexdigest()
    key = Path(archive) / "files" / agent / f"{digest}.json"
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_text(json.dumps(manifest))
    return archive, Path(crafted_home) / rel


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_restore_all_refuses_a_crafted_target_by_name_and_restores_the_rest(
    tmp_path: Path, home: Path, case: str
) -> None:
    archive, target = _archive_with(tmp_path, home, CRAFTED[case])
    project = home / ".claude" / "projects" / "-w"
    (project / f"{A}.jsonl").unlink()
    report = restore_files(archive, archived_files(archive), to=None, keep_going=True)
    assert not target.exists(), f"wrote {target}"
    (refusal,) = report.conflicts
    assert "refused" in refusal and CRAFTED[case][0] in refusal
    assert report.written == [str(project / f"{A}.jsonl")]


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_the_cli_names_what_it_refused_and_exits_1(tmp_path: Path, home: Path, case: str) -> None:
    archive, target = _archive_with(tmp_path, home, CRAFTED[case])
    result = CliRunner().invoke(app, ["restore", "--all", "--from", archive])
    assert result.exit_code == 1, result.output
    assert not target.exists()
    said = result.stderr.replace("\n", "")  # rich wraps long paths anywhere
    assert "refused" in said and f"/archive/files/{CRAFTED[case][0]}/" in said


def test_a_crafted_session_restored_alone_is_refused(tmp_path: Path, home: Path) -> None:
    case = CRAFTED["a Claude session in another home"]
    archive, target = _archive_with(tmp_path, home, case)
    with pytest.raises(ArchiveError, match="where claude keeps no store on this machine; refused"):
        restore_session(archive, case[2])
    assert not target.exists()


def test_with_to_a_crafted_home_is_only_a_dir_under_it(tmp_path: Path, home: Path) -> None:
    """--to names the home: the manifest's is not used at all (as before)."""
    archive, target = _archive_with(tmp_path, home, CRAFTED["a Claude session in another home"])
    out = tmp_path / "out"
    report = restore_files(archive, archived_files(archive), to=str(out), keep_going=True)
    assert report.conflicts == [] and not target.exists()
    assert (out / CRAFTED["a Claude session in another home"][2]).exists()


@pytest.mark.parametrize(
    ("agent", "where", "rel"),
    [
        ("claude", ".claude", f"projects/-w/{A}.jsonl"),
        ("claude", ".claude", f"projects/-w/{A}/subagents/agent-1.jsonl"),
        ("codex", ".codex", "sessions/2026/01/02/rollout-2026-01-02T00-00-00-x.jsonl"),
        ("codex", ".codex", "archived_sessions/rollout-2026-01-02T00-00-00-x.jsonl"),
        ("pi", ".pi/agent", "sessions/--w--/2026-01-01T00-00-00-000Z_x.jsonl"),
        ("pi", ".pi/agent", "sessions/--w--/2026-01-01T00-00-00-000Z_x/sub.jsonl"),
        ("pi", ".pi/agent", "blobs/" + "a" * 64 + ".png"),
        ("gemini", ".gemini", "tmp/abc/chats/session-2026-01-01T00-00-x.jsonl"),
        ("opencode", ".local/share/opencode", "storage/session/p/ses_x.json"),
        ("opencode", ".local/share/opencode", "export/opencode.db/ses_x.json"),
        ("opencode", ".local/share/opencode", "export/opencode-dev.db/ses_x.json"),
    ],
)
def test_an_agents_own_session_file_at_its_home_here_is_restored(
    tmp_path: Path, home: Path, agent: str, where: str, rel: str
) -> None:
    archive, target = _archive_with(tmp_path, home, (agent, where, rel))
    target.unlink(missing_ok=True)
    report = restore_files(archive, archived_files(archive), to=None, keep_going=True)
    assert report.conflicts == [] and target.exists()


def test_a_crafted_row_of_a_postgresql_archive_is_refused(tmp_path: Path, home: Path) -> None:
    """Anyone who can write to a shared PostgreSQL archive can plant a manifest: the
    same check applies to its rows."""
    from sessiontree.archive import _storage
    from tests.pg_support import fresh_schema

    project = home / ".claude" / "projects" / "-w"
    project.mkdir(parents=True)
    (project / f"{A}.jsonl").write_bytes(b'{"type":"user","n":1}\n')
    with fresh_schema() as (url, schema):
        archive = url + ("&" if "?" in url else "?") + f"schema={schema}"
        archive_stores(archive, [ArchiveSource("claude", str(home / ".claude"), ("projects",))])
        (template,) = archived_files(archive)
        target = home / "projects" / "repo" / "conftest.py"
        with _storage.opened(archive) as place:
            manifest = json.loads(place.read(template.key) or b"{}")
            manifest.update(home=str(home), rel="projects/repo/conftest.py")
            place.write("files/claude/" + "c" * 64 + ".json", json.dumps(manifest).encode())
        (project / f"{A}.jsonl").unlink()
        report = restore_files(archive, archived_files(archive), to=None, keep_going=True)
        assert not target.exists()
        (refusal,) = report.conflicts
        assert "projects/repo/conftest.py" in refusal and "refused" in refusal
        assert report.written == [str(project / f"{A}.jsonl")]
