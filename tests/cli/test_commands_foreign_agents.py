"""`--agent opencode|gemini|copilot`, a session file given by its path, and `import` of them.

The real files are laid out as each agent keeps them (`foreign_support.layout_more`):
each lists, shows, searches (through the content index, as a scan finds) and
imports, by id in its store and by its path anywhere, its format detected. An
OpenCode database being written is read (WAL: the last commit) without ever holding
OpenCode up, or skipped with a warning that names it; a damaged database or file is
never fatal to the rest.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sessiontree import SessionManager, load_entries_from_file
from sessiontree.cli import app
from sessiontree.foreign import agents, opencode_db
from sessiontree.foreign.store import ForeignStore
from sessiontree.format import convert_to_llm
from sessiontree.search import ContentIndex
from tests import foreign_support as fs
from tests.conftest import REAL_FILES, require_module, unavailable
from tests.foreign.test_agents import assert_answered

runner = CliRunner()
FOREIGN = REAL_FILES / "foreign"
DB_SESSION = "ses_04ca851f7ffevKrKMHW3RsPK1U"
REAL: list[tuple[str, str]] = (
    [("opencode", fs.OPENCODE_DB)]
    + [("opencode", p.name) for p in sorted((FOREIGN / "opencode").glob("*.jsonl"))]
    + [("gemini", p.name) for p in sorted((FOREIGN / "gemini").glob("*"))]
    + [("copilot", p.name) for p in sorted((FOREIGN / "copilot").glob("*.jsonl"))]
)
IDS = {
    "opencode": {
        DB_SESSION,
        "ses_277daa810ffePOBsdfS6gm8uA2",
        "ses_277ed760bffeXZM4Joly2lQJzU",
        "ses_27a3283eeffe2okXvUQaxKJ0Nw",
        # A subagent's session, listed: its parent is not in the store.
        "ses_2bef25635ffe8EzID0I1Oeymal",
    },
    "gemini": {
        "94feec1f-6d77-4069-83be-f9fc0e81f60b",
        "5ac8a003-3138-4e2d-ad7e-600cf2d89ebc",
        "gemini_stage0_jsonl",
        "dcbe78d3-ea75-4786-929e-d6cff0fc00ed",
        "914f3c63-152a-4f25-9f4e-367c43140554",
        "970c70a7-5c8e-4fd8-a146-707379eae099",
        "cdb14b05-cceb-4354-a9d8-8c9182ece8bf",
    },
    "copilot": {
        "31b0eadb-c44b-41ef-b46b-16c3f8e1fdd6",
        "b4257b63-a7e8-4e3f-9bf0-019c98db1744",
        "e07fc822-e277-4d5d-898a-1b91eedea7b6",
    },
}


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The real files where the agents keep them; their variables point there."""
    if not FOREIGN.is_dir():
        unavailable(f"real files {FOREIGN} are missing")
    laid = fs.layout_more(FOREIGN, tmp_path / "homes")
    monkeypatch.setenv("XDG_DATA_HOME", str(laid["xdg"]))
    monkeypatch.setenv("GEMINI_CLI_HOME", str(laid["gemini"]))
    monkeypatch.setenv("COPILOT_HOME", str(laid["copilot"]))
    monkeypatch.setenv("COLUMNS", "200")
    return laid


def run(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    return result


def as_json(*args: str) -> dict[str, Any]:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


def placed(homes: dict[str, Any], kind: str, name: str) -> Path:
    """Where the layout put a fixture; an OpenCode database's session, for the database."""
    path: Path = homes["placed"][name]
    return path / DB_SESSION if name == fs.OPENCODE_DB else path


# ----------------------------------------------------------------------------- reading


@pytest.mark.parametrize("agent", ["opencode", "gemini", "copilot"])
def test_list_each_agents_store(homes: dict[str, Any], agent: str) -> None:
    doc = as_json("--agent", agent, "list", "--all", "--limit", "0")
    assert {s["id"] for s in doc["sessions"]} == IDS[agent]
    by_id = {s["id"]: s for s in doc["sessions"]}
    if agent == "opencode":
        db = by_id[DB_SESSION]
        assert db["path"] == str(homes["opencode"] / "opencode.db" / DB_SESSION)
        assert db["cwd"] == "/workspace" and db["title"] is None
        assert db["firstMessage"].startswith("Read SPEC.md and improve it")
        assert db["created"] == "2026-07-30T14:04:55.689Z" and db["size"] > 0
        assert by_id["ses_277daa810ffePOBsdfS6gm8uA2"]["title"] == "Implement Entire CLI commands"
    elif agent == "gemini":
        assert {s["cwd"] for s in doc["sessions"]} == {fs.GEMINI_ROOT}
        shown = by_id["914f3c63-152a-4f25-9f4e-367c43140554"]["firstMessage"]
        # What Gemini CLI appended for an @file is not part of the prompt.
        assert shown.startswith("Wrap the demo gifs") and "Content from referenced" not in shown
    else:
        star = by_id["e07fc822-e277-4d5d-898a-1b91eedea7b6"]
        assert star["cwd"] == "C:\\Users\\Chris\\git\\starcar"
        # Its first 64 KiB are the system prompt and hooks: the prompt is read further on.
        assert star["firstMessage"] == "good morning claude. Please pick up where we left off."


def test_listing_is_kept_in_the_listing_cache(
    homes: dict[str, Any], agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second listing reads no session: what the first found comes from the cache."""
    agent_dir.mkdir(parents=True)
    fs.settle(*(Path(home) for home in homes.values() if isinstance(home, (str, Path))))
    first = {a: as_json("--agent", a, "list", "--all", "--limit", "0") for a in IDS}

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a listing read a session again")

    for name in ("scan_gemini", "scan_copilot", "describe_db_sessions", "load_opencode_json"):
        monkeypatch.setattr(agents, name, refuse)
    again = {a: as_json("--agent", a, "list", "--all", "--limit", "0") for a in IDS}
    assert again == first
    assert (agent_dir / "cache" / "sessions-meta.db").is_file()


@pytest.mark.parametrize(("kind", "name"), REAL)
def test_each_real_file_shows_searches_and_imports(
    homes: dict[str, Any], agent_dir: Path, kind: str, name: str
) -> None:
    path = placed(homes, kind, name)
    store = ForeignStore.default(kind)  # type: ignore[arg-type]
    session = store.read(str(path))
    entries = len(session.manager.get_entries())
    # In its store, by id.
    shown = as_json("--agent", kind, "show", session.source_id)
    assert shown["path"] == str(path) and shown["id"] == session.source_id
    assert shown["entries"] == entries
    # By its path, anywhere (the fixture itself, where there is a file), its format detected.
    original = FOREIGN / kind / name if name != fs.OPENCODE_DB else path
    alone = as_json("show", str(original))
    assert alone["id"] == session.source_id and alone["entries"] == entries
    # Searched through this agent's content index, as reading every session finds.
    agent_dir.mkdir(parents=True, exist_ok=True)
    prompt = next(
        m["content"] if isinstance(m["content"], str) else m["content"][0]["text"]
        for e in session.manager.get_entries()
        if e["type"] == "message"
        and (m := e["message"])["role"] == "user"
        and m["content"]
        and (isinstance(m["content"], str) or m["content"][0].get("type") == "text")
    )
    word = max(prompt.split(), key=len)[:40]
    indexed = as_json("--agent", kind, "search", word, "--all", "-n", "1000")
    scanned = as_json("--agent", kind, "search", word, "--all", "-n", "1000", "--no-index")
    assert indexed["mode"] == "index" and scanned["mode"] == "scan"
    assert indexed["hits"] == scanned["hits"]
    assert session.source_id in {h["sessionId"] for h in indexed["hits"]}
    # Imported by its path: --from is found from the file.
    done = as_json("import", str(path))
    written = load_entries_from_file(done["path"])
    assert written[0]["version"] == 3
    record = written[-1]
    assert (record["type"], record["customType"]) == ("custom", "foreign_session_import")
    assert record["data"] == {
        "source": kind,
        "sourceId": session.source_id,
        "sourcePath": str(path),
        "sourceCwd": session.cwd,
        "sourceBytes": session.size,
    }
    with SessionManager.open(done["path"], read_only=True) as sm:
        assert sm.get_leaf_id() == record["id"]
        assert len(sm.get_entries()) == entries + 1
        context = sm.build_session_context().messages
        assert_answered(convert_to_llm(context))
        assert context == session.manager.build_session_context().messages
    assert len(done["subsessions"]) == len(session.subsessions)
    for sub in done["subsessions"]:
        with SessionManager.open(sub, read_only=True) as sm:
            assert_answered(convert_to_llm(sm.build_session_context().messages))
    refused = run("import", str(path))
    assert refused.exit_code == 1 and "imported before" in refused.output


def test_import_all_then_nothing_new(homes: dict[str, Any], agent_dir: Path) -> None:
    for agent in ("opencode", "gemini", "copilot"):
        first = as_json("import", "--all", "--from", agent)
        assert {i["sourceId"] for i in first["imported"]} == IDS[agent]
        assert not first["failed"] and not first["skipped"]
        second = as_json("import", "--all", "--from", agent)
        assert second["imported"] == [] and len(second["skipped"]) == len(IDS[agent])


def test_an_export_is_imported_as_it_is(homes: dict[str, Any], agent_dir: Path) -> None:
    export = FOREIGN / "opencode" / "savekirk__session-bridge__13__dddd416599__3__full.jsonl"
    done = as_json("import", str(export), "--from", "opencode")
    assert load_entries_from_file(done["path"])[-1]["data"]["sourcePath"] == str(export)
    wrong = run("import", str(export), "--from", "gemini", "--again")
    assert wrong.exit_code == 1 and "not a Gemini CLI session file" in wrong.output


def test_what_is_not_a_known_session_is_said_so(
    homes: dict[str, Any], agent_dir: Path, tmp_path: Path
) -> None:
    other = tmp_path / "notes.json"
    other.write_text('{"hello": "world"}\n', encoding="utf-8")
    result = run("import", str(other))
    assert result.exit_code == 1 and "not a session file of" in result.output
    database = homes["opencode"] / "opencode.db"
    whole = run("show", str(database))
    assert whole.exit_code == 1
    assert f"name one of its sessions as {database}/SESSION_ID" in whole.output
    assert f"{database}/{DB_SESSION}" in whole.output
    assert run("import", str(database)).exit_code == 1
    assert run("import", "ses_04ca", "--json").exit_code == 0  # found in OpenCode's store


@pytest.mark.parametrize("args", [["rename", "x"], ["rm", "--yes"], ["repair", "--in-place"]])
def test_a_foreign_file_is_never_written(
    homes: dict[str, Any], agent_dir: Path, args: list[str]
) -> None:
    path = placed(homes, "copilot", "computermode__test-repo__69__9504f045e2__0__full.jsonl")
    before = snapshot(homes["copilot"])
    result = run(args[0], str(path), *args[1:])
    assert result.exit_code == 2, result.output
    assert "which sessiontree only reads" in result.output and "sessiontree import" in result.output
    assert snapshot(homes["copilot"]) == before
    refused = run("--agent", "gemini", args[0], "cdb14b05", *args[1:])
    assert refused.exit_code == 2 and "import --from gemini" in refused.output


def test_the_content_index_holds_each_agents_kind(homes: dict[str, Any], agent_dir: Path) -> None:
    agent_dir.mkdir(parents=True)
    for agent in IDS:
        assert as_json("--agent", agent, "search", "the", "--all", "-n", "1")["mode"] == "index"
    with ContentIndex.open(str(agent_dir)) as index:
        assert index is not None
        files = index.files()
    assert {f.kind for f in files} == {"opencode", "gemini", "copilot"}
    assert str(homes["opencode"] / "opencode.db" / DB_SESSION) in {f.path for f in files}


def test_usage_counts_what_the_sources_recorded(homes: dict[str, Any], agent_dir: Path) -> None:
    agent_dir.mkdir(parents=True)
    database = homes["opencode"] / "opencode.db"
    with sqlite3.connect(f"file:{database}?mode=ro&immutable=1", uri=True) as conn:
        tokens = conn.execute(
            "SELECT tokens_input, tokens_output + tokens_reasoning, tokens_cache_read "
            "FROM session WHERE id = ?",
            (DB_SESSION,),
        ).fetchone()
    stats = as_json("show", str(database / DB_SESSION))
    assert (
        stats["usage"]["input"],
        stats["usage"]["output"],
        stats["usage"]["cacheRead"],
    ) == tokens
    report = as_json("--agent", "opencode", "usage", "session")
    assert report["notes"] == [] and report["totals"]["input"] >= tokens[0]


# ----------------------------------------------------------------------------- where


def test_agent_dir_is_detected(homes: dict[str, Any]) -> None:
    for agent, home in (
        ("opencode", homes["opencode"]),
        ("gemini", homes["gemini"] / ".gemini"),
        ("copilot", homes["copilot"]),
    ):
        by_dir = as_json("--agent-dir", str(home), "list", "--all", "--limit", "0")
        assert by_dir == as_json("--agent", agent, "list", "--all", "--limit", "0")
    # OpenCode's database, given by its file: its data dir.
    database = homes["opencode"] / "opencode.db"
    by_file = as_json("--agent-dir", str(database), "list", "--all", "--limit", "0")
    assert by_file == as_json("--agent", "opencode", "list", "--all", "--limit", "0")


def test_the_agents_default_locations(
    homes: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenCode: `$XDG_DATA_HOME/opencode`, else `~/.local/share/opencode`; Gemini CLI:
    `$GEMINI_CLI_HOME/.gemini`, else `~/.gemini`; Copilot CLI: `$COPILOT_HOME`, else
    `~/.copilot`."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    for variable in ("XDG_DATA_HOME", "GEMINI_CLI_HOME", "COPILOT_HOME"):
        monkeypatch.delenv(variable)
    (home / ".local" / "share").mkdir(parents=True)
    os.rename(homes["opencode"], home / ".local" / "share" / "opencode")
    os.rename(homes["gemini"] / ".gemini", home / ".gemini")
    os.rename(homes["copilot"], home / ".copilot")
    for agent in IDS:
        listed = as_json("--agent", agent, "list", "--all", "--limit", "0")
        assert {s["id"] for s in listed["sessions"]} == IDS[agent]
        assert all(s["path"].startswith(str(home)) for s in listed["sessions"])
    missing = run("--agent", "copilot", "list")
    assert missing.exit_code == 0
    monkeypatch.setenv("COPILOT_HOME", str(tmp_path / "nothing"))
    nothing = run("--agent", "copilot", "list")
    assert nothing.exit_code == 1
    assert (
        f"no Copilot CLI sessions found (looked in {tmp_path / 'nothing' / 'session-state'})"
        in (nothing.output)
    )


# ----------------------------------------------------------------------------- damage


def wal_copy(homes: dict[str, Any]) -> Path:
    database = homes["opencode"] / "opencode.db"
    with sqlite3.connect(database) as conn:
        assert conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    return database


NEW_SESSION = (
    "INSERT INTO session (id, project_id, slug, directory, title, version, time_created, "
    "time_updated) SELECT 'ses_new', project_id, 'new', '/elsewhere', 'Being written', "
    "version, 1, 2 FROM session LIMIT 1"
)


def test_a_database_being_written_is_read_without_holding_opencode_up(
    homes: dict[str, Any], agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenCode (WAL mode) has a write transaction open: the listing reads the last
    commit and never takes a lock the writer waits for. The writer commits in the
    middle of a session being read (with no patience at all: `timeout=0`), and the
    read goes on from the state it started in."""
    database = wal_copy(homes)
    writer = sqlite3.connect(database, timeout=0, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute(NEW_SESSION)
        listed = as_json("--agent", "opencode", "list", "--all", "--limit", "0")
        assert {s["id"] for s in listed["sessions"]} == IDS["opencode"]
        writer.execute("COMMIT")  # nothing of ours holds it up
        assert "ses_new" in {
            s["id"] for s in as_json("--agent", "opencode", "list", "--all")["sessions"]
        }
        real_json, real_load = opencode_db._json, opencode_db._load
        loading: list[bool] = []
        committed: list[bool] = []

        def load(*args: Any, **kwargs: Any) -> Any:
            loading.append(True)
            return real_load(*args, **kwargs)

        def commit_meanwhile(data: object) -> Any:
            if loading and not committed:  # the session's first row is read: OpenCode writes
                writer.execute("BEGIN IMMEDIATE")
                writer.execute("DELETE FROM message WHERE session_id = ?", (DB_SESSION,))
                writer.execute("COMMIT")
                committed.append(True)
            return real_json(data)

        monkeypatch.setattr(opencode_db, "_json", commit_meanwhile)
        monkeypatch.setattr(opencode_db, "_load", load)
        # By its path: an id is resolved through a listing, which reads the session too.
        shown = as_json("--agent", "opencode", "show", str(Path(database) / DB_SESSION))
        assert committed and shown["entries"] == 57
    finally:
        writer.close()


def test_a_database_in_rollback_mode_is_read_without_a_lock(
    homes: dict[str, Any], agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where WAL cannot work (a network mount) OpenCode keeps a rollback journal: a
    reader holding a lock would make its commits wait. The database is read with no
    lock at all (`immutable`): OpenCode commits in the middle of the read without
    waiting a moment, and nothing is created beside its database."""
    database = homes["opencode"] / "opencode.db"
    with sqlite3.connect(database) as conn:
        assert conn.execute("PRAGMA journal_mode = DELETE").fetchone()[0] == "delete"
    writer = sqlite3.connect(database, timeout=0, isolation_level=None)
    real_load = opencode_db._load
    committed: list[bool] = []

    def commit_meanwhile(*args: Any, **kwargs: Any) -> Any:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE session SET title = 'Renamed meanwhile' WHERE id = ?", (DB_SESSION,))
        writer.execute("COMMIT")
        committed.append(True)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(opencode_db, "_load", commit_meanwhile)
    try:
        with opencode_db.open_db(str(database)) as conn:
            conn.execute("BEGIN")
            conn.execute("SELECT COUNT(*) FROM part").fetchone()  # a read under way
            writer.execute("BEGIN IMMEDIATE")
            writer.execute("UPDATE session SET slug = 'x' WHERE id = ?", (DB_SESSION,))
            writer.execute("COMMIT")  # would be "database is locked" under a shared lock
            conn.execute("COMMIT")
        result = run("--agent", "opencode", "show", DB_SESSION, "--json")
        assert committed and result.exit_code == 0
    finally:
        writer.close()
    assert sorted(p.name for p in homes["opencode"].iterdir()) == ["opencode.db", "storage"]


def test_a_database_half_written_or_damaged_is_skipped_with_a_warning(
    homes: dict[str, Any], agent_dir: Path
) -> None:
    """A rollback journal (a database not in WAL mode, a write half done): skipped,
    named. A file that is no database: skipped, named. The rest of the store lists."""
    database = homes["opencode"] / "opencode.db"
    writer = sqlite3.connect(database, isolation_level=None)
    try:
        assert writer.execute("PRAGMA journal_mode = DELETE").fetchone()[0] == "delete"
        writer.execute("BEGIN EXCLUSIVE")
        writer.execute(NEW_SESSION)
        writer.execute("UPDATE message SET data = data || ' '")  # enough pages to journal
        assert (homes["opencode"] / "opencode.db-journal").is_file()
        result = run("--agent", "opencode", "list", "--all", "--limit", "0", "--json")
        assert result.exit_code == 0
        assert f"{database}: being written" in result.stderr
        listed = {s["id"] for s in json.loads(result.stdout)["sessions"]}
        assert listed == IDS["opencode"] - {DB_SESSION}
        writer.execute("ROLLBACK")
    finally:
        writer.close()
    garbage = homes["opencode"] / "opencode-dev.db"
    garbage.write_bytes(b"SQLite format 3\x00" + os.urandom(4096))
    result = run("--agent", "opencode", "list", "--all", "--limit", "0", "--json")
    assert result.exit_code == 0 and str(garbage) in result.stderr
    assert {s["id"] for s in json.loads(result.stdout)["sessions"]} == IDS["opencode"]


def test_a_file_cut_short_shows_what_it_holds_and_says_so(
    homes: dict[str, Any], agent_dir: Path
) -> None:
    name = "savekirk__session-bridge__e9__4f17cdc65d__0__full.jsonl"
    path: Path = homes["placed"][name]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    result = run("--agent", "gemini", "show", "cdb14b05", "--json")
    assert result.exit_code == 0
    assert f"{path}: skipped line" in result.stderr and "cut short" in result.stderr
    assert 0 < json.loads(result.stdout)["roles"]["assistant"] < 38
    listed = as_json("--agent", "gemini", "list", "--all", "--limit", "0")
    assert {s["id"] for s in listed["sessions"]} == IDS["gemini"]


@pytest.mark.parametrize(
    ("agent", "command", "variable"),
    [
        ("opencode", "opencode --session ID", "XDG_DATA_HOME"),
        ("gemini", "gemini --resume ID", "GEMINI_CLI_HOME"),
        ("copilot", "copilot --resume ID", "COPILOT_HOME"),
    ],
)
def test_the_web_app_offers_each_agents_resume_command(
    homes: dict[str, Any], agent: str, command: str, variable: str
) -> None:
    """In the session's directory; a store away from the default named by the variable
    the agent reads (OpenCode's and Gemini CLI's name the dir above their own)."""
    require_module("starlette")
    from datetime import UTC, datetime

    from sessiontree import Store
    from sessiontree.foreign.storage import ForeignStorage
    from sessiontree.web.app import ServeOptions, _App
    from sessiontree.web.data import SessionRow

    store = ForeignStore.default(agent)  # type: ignore[arg-type]
    app_ = _App(Store(storage=ForeignStorage(store)), ServeOptions("token", "cookie"))
    try:
        moment = datetime.now(UTC)
        row = SessionRow("h", "/p", "ID", "/work/app", "p", None, "", 0, 0, moment, moment, None)
        resume = app_._foreign_resume(row)
    finally:
        app_.close()
    value = os.environ[variable]
    assert resume == {"name": agent, "command": f"cd /work/app && {variable}={value} {command}"}


def test_serve_reads_each_agents_store(homes: dict[str, Any], agent_dir: Path) -> None:
    """The web app lists and opens every session of each store (an OpenCode database's
    too), searches it through this agent's content index, and changes none of it."""
    require_module("httpx")
    require_module("uvicorn")
    import re

    import httpx

    from sessiontree.foreign.storage import ForeignStorage
    from sessiontree.web.server import BackgroundServer

    agent_dir.mkdir(parents=True)
    before = {a: snapshot(Path(homes[a])) for a in ("opencode", "gemini", "copilot")}
    for agent in ("opencode", "gemini", "copilot"):
        store = ForeignStore.default(agent, str(agent_dir))  # type: ignore[arg-type]
        with (
            BackgroundServer(ForeignStorage(store), store.home) as server,
            httpx.Client(
                base_url=server.base, cookies=server.login_cookies(), timeout=60
            ) as client,
        ):
            listing = client.get("/sessions")
            assert listing.status_code == 200
            handles = list(dict.fromkeys(re.findall(r'href="(/s/[0-9a-f]+)', listing.text)))
            assert len(handles) == len(IDS[agent])
            for handle in handles:
                assert client.get(handle).status_code == 200
            found = client.get("/search?q=the")
            assert found.status_code == 200 and "searched by the content index" in found.text
    assert {a: snapshot(Path(homes[a])) for a in before} == before


@pytest.mark.parametrize(
    ("kind", "name"),
    [("claude", p.name) for p in sorted((FOREIGN / "claude").glob("*.jsonl"))]
    + [("codex", p.name) for p in sorted((FOREIGN / "codex").glob("*.jsonl"))],
)
def test_a_claude_code_or_codex_file_is_shown_by_its_path(
    agent_dir: Path, kind: str, name: str
) -> None:
    """The same detection serves the two agents read before: their files show (and
    import) by path, with no --agent or --from."""
    from sessiontree.foreign import detect_file, read_claude_session, read_codex_session

    path = FOREIGN / kind / name
    if not path.is_file():
        unavailable(f"real file {path} is missing")
    assert detect_file(str(path)) == kind
    if kind == "claude":
        session = read_claude_session(str(path))
    else:
        session = read_codex_session(str(path))
    shown = as_json("show", str(path))
    assert shown["id"] == session.source_id
    assert shown["entries"] == len(session.manager.get_entries())


@pytest.mark.parametrize(
    ("agent", "kind", "name"),
    [
        ("opencode", "opencode", "savekirk__session-bridge__29__dbfeaf9083__0__full.jsonl"),
        ("opencode", "claude", "kvsankar__agent-history__tests__fixtures__real_sessions__claude__session-01.jsonl"),
    ],
)  # fmt: skip
def test_a_file_outside_the_store_agent_names_is_shown_by_its_path(
    homes: dict[str, Any], tmp_path: Path, agent: str, kind: str, name: str
) -> None:
    """`--agent opencode show PATH` of an `opencode export` document (one `restore`
    wrote) looked only in OpenCode's store and failed, though the same path shows
    without `--agent`."""
    path = tmp_path / "elsewhere" / f"{name.rsplit('.', 1)[0]}.json"
    path.parent.mkdir()
    path.write_bytes((FOREIGN / kind / name).read_bytes())
    without = as_json("show", str(path))
    shown = as_json("--agent", agent, "show", str(path))
    assert (shown["id"], shown["entries"]) == (without["id"], without["entries"])
    assert shown["entries"] > 0
