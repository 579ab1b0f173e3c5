"""HistoryStorage in oh-my-pi's store, judged by the real oh-my-pi (18.2.3, under Bun).

`tests/peers_history.ts` drives oh-my-pi's own `HistoryStorage` on a history.db: it opens
the file as oh-my-pi does (its schema checks and conversion), adds prompts, and prints
what it then holds. A file sessiontree creates in oh-my-pi's agent dir must be one
oh-my-pi opens, reads and writes; one it creates elsewhere keeps the spec's schema.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree import Store
from sessiontree.history import SCHEMA_VERSION, HistoryStorage
from tests import peers
from tests.conftest import REPO_ROOT, examples

SCRIPT = REPO_ROOT / "tests" / "peers_history.ts"

OURS = ["fix the failing test", "caf\u00e9 \u2603 r\u00e9sum\u00e9", "second\nline"]


@pytest.fixture(autouse=True)
def _close_registered() -> Iterator[None]:
    """Close whatever a failed test left open through HistoryStorage.open()."""
    yield
    for history in list(HistoryStorage._registry.values()):
        history.close()


def omp_history(home: Path, db: Path, *adds: tuple[str, str]) -> list[dict[str, Any]]:
    """What oh-my-pi holds in `db`, newest first, after opening it and adding `adds`
    (prompt, cwd); HOME and its agent dir are `home`'s, so nothing lands in ~/.omp."""
    peer = peers.require("omp")
    env = {
        key: value
        for key, value in peer.env.items()
        if not key.startswith("XDG_") and key not in ("OMP_PROFILE", "PI_PROFILE")
    }
    env.update(HOME=str(home), PI_CODING_AGENT_DIR=str(home / ".omp" / "agent"))
    ops = [arg for prompt, cwd in adds for arg in ("add", prompt, cwd)]
    done = subprocess.run(
        [peer.runner[0], str(SCRIPT), str(db), *ops],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, f"oh-my-pi could not use {db}: {done.stderr}"
    entries: list[dict[str, Any]] = json.loads(done.stdout)
    return entries


def schema(db: Path) -> tuple[list[tuple[Any, ...]], int, str]:
    """Every object of the file (its SQL text included), its user_version, its journal mode."""
    conn = sqlite3.connect(db)
    try:
        objects = sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
        return objects, version, journal
    finally:
        conn.close()


def omps_own_schema(tmp_path: Path) -> tuple[list[tuple[Any, ...]], int, str]:
    """The schema of a history.db oh-my-pi itself creates."""
    home = tmp_path / "omp-home"
    (home / ".omp" / "agent").mkdir(parents=True)
    db = home / ".omp" / "agent" / "history.db"
    omp_history(home, db)
    return schema(db)


def ours(history: HistoryStorage) -> list[str]:
    return [entry.prompt for entry in history.get_recent(1000)]


@pytest.mark.parametrize("how", ["omp agent dir", "agent keyword", "store"])
def test_a_history_db_created_in_omps_store_is_one_omp_uses(tmp_path: Path, how: str) -> None:
    """A history.db sessiontree created in oh-my-pi's agent dir had the spec's schema
    with user_version 1, so oh-my-pi failed to open it ("no such column: session_id").
    Now it is created as oh-my-pi creates one (same objects, SQL text, user_version,
    journal mode): oh-my-pi reads our prompts and adds its own, we read those back,
    and our next open changes nothing in it."""
    home = tmp_path / "home"
    if how == "omp agent dir":  # found by the agent dir's name, ~/.omp/agent
        agent_dir = home / ".omp" / "agent"
        history = HistoryStorage.open(agent_dir / "history.db")
    elif how == "agent keyword":  # an agent dir of any name, said to be oh-my-pi's
        agent_dir = tmp_path / "elsewhere"
        history = HistoryStorage.open(agent_dir / "history.db", agent="omp")
    else:
        agent_dir = tmp_path / "custom"
        agent_dir.mkdir()
        history = Store(agent_dir, agent="omp").history()
    db = agent_dir / "history.db"
    for prompt in OURS:
        history.add(prompt, cwd="/repo")
    history.close()
    home.mkdir(exist_ok=True)

    held = omp_history(home, db, ("omp's own prompt", "/omp"), (OURS[0], "/again"))
    assert schema(db) == omps_own_schema(tmp_path)
    assert sorted(e["prompt"] for e in held) == sorted([*OURS, "omp's own prompt"])
    assert {e["prompt"]: e["cwd"] for e in held}[OURS[1]] == "/repo"

    reopened = HistoryStorage.open(db, agent="xcsh" if how == "agent keyword" else None)
    try:
        assert sorted(ours(reopened)) == sorted(e["prompt"] for e in held)
        assert [e.prompt for e in reopened.search("omp own", 10)] == ["omp's own prompt"]
        assert [e.cwd for e in reopened.search("failing", 10)] == ["/again"]
        reopened.add("after omp")
        reopened.flush()
    finally:
        reopened.close()
    assert schema(db) == omps_own_schema(tmp_path / "again")
    assert omp_history(home, db)[0]["prompt"] == "after omp"


def test_a_file_of_ours_in_omps_store_is_converted_by_omp(tmp_path: Path) -> None:
    """A history.db an earlier sessiontree made in oh-my-pi's agent dir (the spec's
    schema, user_version 1) made oh-my-pi fail on every open; now opening it sets
    user_version 0, so oh-my-pi converts it to its own schema, keeping every prompt."""
    made = tmp_path / "made" / "history.db"
    with HistoryStorage(made) as earlier:
        for prompt in OURS:
            earlier.add(prompt, cwd="/repo")
    assert schema(made)[1] == SCHEMA_VERSION
    home = tmp_path / "home"
    (home / ".omp" / "agent").mkdir(parents=True)
    db = home / ".omp" / "agent" / "history.db"
    os.rename(made, db)

    with HistoryStorage.open(db) as history:
        history.add("added later")
        history.flush()
        assert ours(history) == ["added later", *OURS[::-1]]

    held = omp_history(home, db, ("omp's own prompt", "/omp"))
    assert sorted(e["prompt"] for e in held) == sorted([*OURS, "added later", "omp's own prompt"])
    objects, version, journal = schema(db)
    assert (sorted(o[:3] for o in objects), version, journal) == sorted_names(
        omps_own_schema(tmp_path)
    )


def sorted_names(
    found: tuple[list[tuple[Any, ...]], int, str],
) -> tuple[list[tuple[Any, ...]], int, str]:
    """The objects' type, name and table (their SQL text aside), user_version, journal."""
    objects, version, journal = found
    return sorted(o[:3] for o in objects), version, journal


@pytest.mark.parametrize("agent_dir", [".xcsh/agent", "plain"])
def test_a_history_db_created_elsewhere_keeps_the_spec_schema(
    tmp_path: Path, agent_dir: str
) -> None:
    """xcsh's store (and any dir not oh-my-pi's) gets the spec's schema, as before."""
    db = tmp_path / agent_dir / "history.db"
    with HistoryStorage.open(db) as history:
        history.add("one")
    objects, version, journal = schema(db)
    table = next(sql for _, name, _, sql in objects if name == "history")
    assert (version, journal) == (SCHEMA_VERSION, "wal")
    assert "session_id" not in table and "UNIQUE" not in table
    assert any(name == "history_ad" for _, name, _, _ in objects)


def test_omps_own_file_is_used_as_it_is(tmp_path: Path) -> None:
    """A history.db oh-my-pi made was changed by our open (its FTS table made again with
    prefix indexes, delete and update triggers added); now nothing of ours is added to
    it: its schema stays oh-my-pi's, SQL text and all, and the prompts go both ways."""
    home = tmp_path / "home"
    (home / ".omp" / "agent").mkdir(parents=True)
    db = home / ".omp" / "agent" / "history.db"
    omp_history(home, db, ("made by omp", "/omp"))
    made = schema(db)
    with HistoryStorage.open(db) as history:
        history.add("made by us", cwd="/us")
        history.add("made by omp", cwd="/us")
        history.flush()
        assert [e.prompt for e in history.search("made omp", 10)] == ["made by omp"]
    assert schema(db) == made
    held = omp_history(home, db)
    assert {e["prompt"]: e["cwd"] for e in held} == {"made by us": "/us", "made by omp": "/us"}


# Whitespace where JavaScript's and Python's differ (\x1c, \x85: Python's only; U+FEFF:
# JavaScript's only), line ends of every kind, and a few letters to tell prompts apart.
PROMPT_CHARS = st.sampled_from(
    list("ab \t\n\r\x0b\x0c\x1c\x85\u00a0\u2003\u2028\u3000\ufeff\u00e9")
)


@settings(max_examples=examples(10), deadline=None)
@given(st.lists(st.text(PROMPT_CHARS, max_size=8), min_size=1, max_size=12))
def test_prompts_are_stored_in_omps_form_in_its_file(prompts: list[str]) -> None:
    """oh-my-pi stores a prompt in its form (CRLF and CR as LF, each line's trailing
    whitespace dropped, trimmed by JavaScript's whitespace), once: we stored "a \\nb" as
    it came, so oh-my-pi, given the same prompts, added a second row beside ours. Now
    it finds each one already there, and skips the ones it skips (empty in its form)."""
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        db = home / ".omp" / "agent" / "history.db"
        with HistoryStorage.open(db) as history:
            for prompt in prompts:
                history.add(prompt, cwd="/us")
            history.flush()
            stored = sorted(ours(history))
        held = omp_history(home, db, *((prompt, "/omp") for prompt in prompts))
        assert sorted(e["prompt"] for e in held) == stored


def test_a_history_db_linked_to_omps_is_created_as_omps(tmp_path: Path) -> None:
    """A `~/.pi/agent/history.db` linked to oh-my-pi's (one history for both agents),
    opened through the link before oh-my-pi made its file, was created in the spec's
    schema with user_version 1: oh-my-pi then failed on every open ("no such column:
    session_id"). The file is judged by where it is, so it is created as oh-my-pi's."""
    home = tmp_path / "home"
    omp_db = home / ".omp" / "agent" / "history.db"
    omp_db.parent.mkdir(parents=True)
    link = home / ".pi" / "agent" / "history.db"
    link.parent.mkdir(parents=True)
    link.symlink_to(omp_db)
    history = HistoryStorage.open(link)
    try:
        history.add(OURS[0], cwd="/repo")
    finally:
        history.close()
    held = omp_history(home, omp_db, ("omp's own prompt", "/omp"))
    assert sorted(e["prompt"] for e in held) == sorted([OURS[0], "omp's own prompt"])
    assert schema(omp_db) == omps_own_schema(tmp_path)
