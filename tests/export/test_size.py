"""`export -f html` of a huge session warns on stderr (naming its size, what opens it
better) and still writes the whole page; smaller sessions and other formats do not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import sessiontree.export._size as size_module
from sessiontree import SessionManager
from sessiontree.cli import app
from sessiontree.export import HTML_WARN_BYTES, html_size_warning
from sessiontree.storage import FileSessionStorage
from tests.helpers import assistant, user

runner = CliRunner()


def make(cwd: Path, answer: str = "Looking at the CI log now.", turns: int = 1) -> str:
    sm = SessionManager.create(str(cwd))
    for _ in range(turns):
        sm.append_message(user("Why does the build fail on CI?"))
        sm.append_message(assistant(answer))
    sm.close()
    path = sm.get_session_file()
    assert path is not None
    return path


def export(*args: str) -> Any:
    result = runner.invoke(app, ["export", *args])
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def test_threshold_is_fifty_megabytes() -> None:
    assert HTML_WARN_BYTES == 50_000_000


def test_a_session_over_the_threshold_warns(
    agent_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make(tmp_path)
    size = Path(path).stat().st_size
    monkeypatch.setattr(size_module, "HTML_WARN_BYTES", size)
    out = tmp_path / "out.html"
    result = export(path, "-f", "html", "-o", str(out))
    warning = " ".join(result.stderr.split())
    assert f"sessiontree: warning: this session is {size / 1e6:,.1f} MB ({size:,} bytes)" in (
        warning
    )
    assert "`export -f md`" in warning and "--leaf" in warning and "sessiontree serve" in warning
    assert "Why does the build fail on CI?" in out.read_text(encoding="utf-8")  # still whole
    assert "warning" not in result.stdout
    # Markdown and JSONL are one path: no warning.
    for fmt in ("md", "jsonl"):
        assert "warning" not in export(path, "-f", fmt, "-o", str(tmp_path / f"o.{fmt}")).stderr
    monkeypatch.setattr(size_module, "HTML_WARN_BYTES", size + 1)
    assert "warning" not in export(path, "-f", "html", "-o", str(out)).stderr


def test_an_unreadable_size_says_nothing(tmp_path: Path) -> None:
    assert html_size_warning(FileSessionStorage(), str(tmp_path / "gone.jsonl")) is None


@pytest.mark.slow
def test_a_real_fifty_megabyte_session_warns(agent_dir: Path, tmp_path: Path) -> None:
    # Big answers, each under what the writer keeps of one message.
    path = make(tmp_path, "x" * 400_000, turns=HTML_WARN_BYTES // 400_000 + 1)
    assert Path(path).stat().st_size > HTML_WARN_BYTES
    result = export(path, "-f", "html", "-o", str(tmp_path / "big.html"))
    assert "sessiontree: warning: this session is 50." in " ".join(result.stderr.split())
