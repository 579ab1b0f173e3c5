"""`stats` with no store named: a row per store found and their total, each
reply counted once across the stores (as `usage` counts it)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sessiontree.cli import app
from sessiontree.store import Store, replies_of
from tests.conftest import REAL_FILES, unavailable
from tests.web_support import AGENT_VARIABLES, CLAUDE_FIXTURE, FoundHome, build_home


@pytest.fixture
def found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FoundHome:
    source = REAL_FILES / "foreign" / "claude" / CLAUDE_FIXTURE
    if not source.exists():
        unavailable(f"fixture {source} is missing")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in AGENT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(home)
    return build_home(home, source)


def stats(*args: str) -> dict[str, object]:
    result = CliRunner().invoke(app, [*args, "stats", "--all", "--json"])
    assert result.exit_code == 0, result.output
    document: dict[str, object] = json.loads(result.stdout)
    return document


def test_stats_counts_every_store_found_and_their_total(found: FoundHome) -> None:
    document = stats()
    per = {s["agent"]: s for s in document["stores"]}  # type: ignore[attr-defined]
    assert list(per) == ["pi", "claude"]
    assert per["pi"]["location"] == str(found.pi)
    # each store's row is what stats of it alone says
    for agent, where in (("pi", found.pi), ("claude", found.claude)):
        alone = stats("--agent-dir", str(where))
        assert "stores" not in alone
        assert {
            k: v for k, v in per[agent].items() if k not in ("agent", "machine", "location")
        } == {k: v for k, v in alone.items() if k not in ("scope", "schemaVersion")}
    assert document["sessions"] == 3 == per["pi"]["sessions"] + per["claude"]["sessions"]
    for key in ("bytes", "entries", "projects", "blobs"):
        assert document[key] == per["pi"][key] + per["claude"][key]
    # the import's replies are copies of the Claude Code session's: counted once
    with Store(found.pi) as pi, Store(found.claude) as claude:
        once = len(replies_of([pi, claude]).replies)
    usage = document["usage"]
    assert usage["messages"] == once  # type: ignore[index]
    assert once < per["pi"]["usage"]["messages"] + per["claude"]["usage"]["messages"]
    by_model = document["byModel"]
    assert sum(m["messages"] for m in by_model.values()) == once  # type: ignore[attr-defined]


def test_stats_text_has_a_row_per_store_and_the_total(found: FoundHome) -> None:
    result = CliRunner().invoke(app, ["stats", "--all"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    joined = "".join(text.split())
    assert f"pi({found.pi})" in joined and f"claude({found.claude})" in joined
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert lines["pi"].split()[2] == "2"  # its own session and the import
    assert lines["claude"].split()[2] == "1"
    assert lines["total"].split()[2] == "3"
    assert "countedonce" in joined


def test_stats_of_this_project_only_across_stores(found: FoundHome) -> None:
    os.chdir(found.home / "p")
    result = CliRunner().invoke(app, ["stats", "-p", ".", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["sessions"] == 1  # the pi session of this project; none of claude's
    assert document["usage"]["messages"] == 1
    assert [s["sessions"] for s in document["stores"]] == [1, 0]


def test_stats_with_one_store_is_as_before(found: FoundHome) -> None:
    document = stats("--agent", "claude")
    assert "stores" not in document and document["sessions"] == 1
