"""`sessiontree stats` over every store found: an OpenCode store's size is its
database's and files', as `stores` says, not the few bytes of its sessions' rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sessiontree.cli import app
from sessiontree.store import find_stores, store_size
from tests.conftest import FIXTURES
from tests.foreign_support import layout_more


def test_stats_gives_an_opencode_store_its_database_size(
    homes_in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    more = layout_more(FIXTURES / "real" / "foreign", homes_in_tmp / "placed")
    monkeypatch.setenv("XDG_DATA_HOME", str(more["xdg"]))
    result = CliRunner().invoke(app, ["stats", "--json"])
    (opencode,) = [f for f in find_stores() if f.agent == "opencode"]
    expected = store_size(opencode)
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    (row,) = [s for s in document["stores"] if s["agent"] == "opencode"]
    assert row["bytes"] == expected
    assert expected >= (Path(more["opencode"]) / "opencode.db").stat().st_size
    assert document["bytes"] == sum(s["bytes"] for s in document["stores"])
