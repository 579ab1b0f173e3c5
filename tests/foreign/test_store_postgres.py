"""Claude Code transcripts in PostgreSQL (as the Claude Agent SDK adapter keeps them) read
by `sessiontree --agent claude --store URL` and `Store(url, agent="claude")`: list, show,
search, usage and stats give what the same transcripts give on files; the store is only
read; the listing cache of a database's files never answers for a host file; a row whose
name is no path component, or a path with a NUL, is never read as a path."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import REAL_FILES, require_module, unavailable
from tests.foreign_support import (
    CLAUDE_FORK,
    CLAUDE_SESSION,
    claude_fork,
    claude_layout_name,
    claude_subagent_session,
)
from tests.pg_support import fresh_schema

require_module("claude_agent_sdk")

from sessiontree.cli import app  # noqa: E402
from sessiontree.errors import ReadOnlyStoreError, SessionNotFoundError  # noqa: E402
from sessiontree.foreign import ForeignStore  # noqa: E402
from sessiontree.integrations.claude_agent_sdk import SessionTreeStore  # noqa: E402
from sessiontree.store import Store  # noqa: E402

runner = CliRunner()

SMALL = "kvsankar__agent-history__tests__fixtures__real_sessions__claude__session-01.jsonl"
LARGE = (
    "DRMacIver__claude-reliability__snapshot-tests__tests__python-to-rust-port__transcript.jsonl"
)
"""Larger than both listing windows: the listing reads a head and a tail range."""


def _fixture(name: str) -> Path:
    path = REAL_FILES / "foreign" / "claude" / name
    if not path.is_file():
        unavailable(f"real file {path} is missing")
    return path


def _entries(path: Path) -> list[dict[str, Any]]:
    """The lines the SDK could send: JSON objects with a string `type`."""
    out = []
    for line in path.read_bytes().splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("type"), str):
            out.append(value)
    return out


def _sources(tmp: Path, fixtures: tuple[str, ...]) -> Path:
    """A Claude Code `projects/` tree: a session with a subagent's transcript (and its
    `.meta.json`), a fork of it, and shared fixtures."""
    projects = tmp / "src" / "projects"
    claude_subagent_session(projects)
    claude_fork(projects)
    for name in fixtures:
        path = _fixture(name)
        target = projects / "-fixtures" / f"{claude_layout_name(path)}.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return projects


def _mirror(projects: Path, store: SessionTreeStore, raw: Any) -> None:
    """Every transcript of `projects` appended through `store` (in batches, as the SDK
    sends them); any other file written by `raw(relative path, bytes)`."""
    for path in sorted(projects.rglob("*")):
        if not path.is_file():
            continue
        parts = path.relative_to(projects).parts
        if not path.name.endswith(".jsonl"):
            raw("/".join(parts), path.read_bytes())
            continue
        key: dict[str, Any] = {"project_key": parts[0], "session_id": parts[1]}
        if len(parts) == 2:
            key["session_id"] = parts[1][: -len(".jsonl")]
        else:
            key["subpath"] = "/".join(parts[2:])[: -len(".jsonl")]
        entries = _entries(path)
        for start in range(0, len(entries), 500):
            asyncio.run(store.append(key, entries[start : start + 500]))  # type: ignore[arg-type]


@dataclass
class Both:
    url: str
    """The database's URL (its schema given)."""
    base: str
    schema: str
    pg_root: Path
    """The root its paths are under (the default agent dir)."""
    files: Path
    """The same transcripts written to files."""


@pytest.fixture
def both(tmp_path: Path, agent_dir: Path) -> Iterator[Both]:
    with _both(tmp_path, agent_dir, (SMALL, LARGE)) as made:
        yield made


@contextmanager
def _both(tmp_path: Path, agent_dir: Path, fixtures: tuple[str, ...]) -> Iterator[Both]:
    """The sessions of `_sources` written by the adapter to files and to a database."""
    projects = _sources(tmp_path, fixtures)
    files = tmp_path / "claude"
    with fresh_schema() as (base, schema):
        url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
        on_files = SessionTreeStore(files)
        on_pg = SessionTreeStore(url)
        try:
            storage = on_pg._store.storage

            def raw_pg(relative: str, data: bytes) -> None:
                path = os.path.join(on_pg.root, "projects", *relative.split("/"))
                storage.ensure_dir(os.path.dirname(path))
                storage.write_atomic(path, [data])  # type: ignore[attr-defined]

            def raw_files(relative: str, data: bytes) -> None:
                path = files / "projects" / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)

            _mirror(projects, on_files, raw_files)
            _mirror(projects, on_pg, raw_pg)
            assert on_pg.root == str(agent_dir)
        finally:
            on_files.close()
            on_pg.close()
        yield Both(url, base, schema, agent_dir, files)


def run(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output, result.output
    return result


def as_json(*args: str) -> Any:
    result = run(*args, "--json")
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return json.loads(result.stdout)


_VARYING = frozenset({"modified", "mtime", "mtimeMs", "lastModified", "notes", "mode"})
"""When a file was written (the database's clock, not the file's), and how the sessions
were read (a database's are, a directory's through the content index when it can)."""


def _same(value: Any, root: str, other: str) -> Any:
    """`value` with `root` written as `other` and the write times left out."""
    if isinstance(value, dict):
        return {k: _same(v, root, other) for k, v in value.items() if k not in _VARYING}
    if isinstance(value, list):
        return [_same(v, root, other) for v in value]
    if isinstance(value, str):
        return value.replace(root, other)
    return value


def _by_id(document: dict[str, Any]) -> dict[str, Any]:
    document["sessions"].sort(key=lambda s: s["id"])
    return document


# ----------------------------------------------------------------------------- the CLI


def _hits(found: dict[str, Any]) -> list[Any]:
    """A search's hits, a title hit without its time: that is the file's modified time,
    the database row's on one side and the copy's on the other."""
    return [
        {k: v for k, v in hit.items() if not (hit.get("role") == "title" and k == "timestamp")}
        for hit in found["hits"]
    ]


def test_list_show_search_usage_stats_on_postgres_as_on_files(both: Both) -> None:
    pg = ("--agent", "claude", "--store", both.url)
    fs = ("--agent", "claude", "--store", str(both.files))
    root, files = str(both.pg_root), str(both.files)

    listed = _by_id(as_json(*pg, "list", "--all"))
    assert len(listed["sessions"]) == 4  # a subagent's transcript is read with its session
    assert {s["id"] for s in listed["sessions"]} >= {CLAUDE_SESSION, CLAUDE_FORK}
    assert all(s["path"].startswith(root + "/projects/") for s in listed["sessions"])
    assert _same(listed, root, files) == _same(_by_id(as_json(*fs, "list", "--all")), "", "")

    for session in [s["id"] for s in listed["sessions"]]:
        shown = as_json(*pg, "show", session[:8])
        assert _same(shown, root, files) == _same(as_json(*fs, "show", session[:8]), "", "")
    # The fork names its parent by the parent's path in the same store.
    fork = as_json(*pg, "show", CLAUDE_FORK[:8])
    assert json.dumps(fork).count(f"{root}/projects/-work-app/{CLAUDE_SESSION}.jsonl")
    # The subagent's transcript (and its .meta.json) are read with the session.
    assert "Find the bug" in run(*pg, "tree", CLAUDE_SESSION[:8]).stdout
    for command in (("context", "--json"), ("export", "-f", "jsonl"), ("export", "-f", "md")):
        out = run(*pg, command[0], CLAUDE_SESSION[:8], *command[1:])
        expected = run(*fs, command[0], CLAUDE_SESSION[:8], *command[1:])
        assert out.exit_code == expected.exit_code == 0, (out.stdout, out.stderr)
        skip = 1 if "jsonl" in command else 0  # an export's header: a new session's id and time
        got = out.stdout.replace(root, files).splitlines()[skip:]
        assert got == expected.stdout.splitlines()[skip:], command

    for query in ("bug", "parse", "the"):
        found = as_json(*pg, "search", "--all", query)
        assert found["hits"], query
        expected = as_json(*fs, "search", "--all", query)
        assert _same(_hits(found), root, files) == _same(_hits(expected), "", "")

    for period in ("session", "daily", "project"):
        report = as_json(*pg, "usage", period)
        assert report["totals"]["totalTokens"] > 0
        assert _same(report, root, files) == _same(as_json(*fs, "usage", period), "", "")

    stats = as_json(*pg, "stats")
    assert _same(stats, root, files) == _same(as_json(*fs, "stats"), "", "")


@pytest.mark.slow
def test_every_shared_fixture_reads_the_same_from_postgres(tmp_path: Path, agent_dir: Path) -> None:
    every = tuple(p.name for p in sorted((REAL_FILES / "foreign" / "claude").glob("*.jsonl")))
    if not every:
        unavailable("the shared Claude Code fixtures are missing")
    with _both(tmp_path, agent_dir, every) as made:
        pg = ("--agent", "claude", "--store", made.url)
        fs = ("--agent", "claude", "--store", str(made.files))
        root, files = str(made.pg_root), str(made.files)
        listed = _by_id(as_json(*pg, "list", "--all"))
        assert len(listed["sessions"]) >= len(every)
        assert _same(listed, root, files) == _same(_by_id(as_json(*fs, "list", "--all")), "", "")
        for session in [s["id"] for s in listed["sessions"]]:
            shown = as_json(*pg, "show", session)
            assert _same(shown, root, files) == _same(as_json(*fs, "show", session), "", "")
        found = as_json(*pg, "search", "--all", "error")
        expected = as_json(*fs, "search", "--all", "error")
        assert _same(_hits(found), root, files) == _same(_hits(expected), "", "")
        report = as_json(*pg, "usage", "session")
        assert _same(report, root, files) == _same(as_json(*fs, "usage", "session"), "", "")


def test_the_root_is_the_agent_dir_given_and_writing_commands_are_refused(both: Both) -> None:
    # The same keys under another root: every path is under it.
    elsewhere = both.pg_root.parent / "elsewhere"
    pg = ("--agent", "claude", "--store", both.url, "--agent-dir", str(elsewhere))
    listed = as_json(*pg, "list", "--all")
    assert len(listed["sessions"]) == 4
    assert all(s["path"].startswith(f"{elsewhere}/projects/") for s in listed["sessions"])
    refused = run("--agent", "claude", "--store", both.url, "rm", CLAUDE_SESSION[:8])
    assert refused.exit_code == 2 and "only reads" in refused.stderr
    # Another agent's store is never a database's.
    codex = run("--agent", "codex", "--store", both.url, "list")
    assert codex.exit_code == 2 and "cannot be used together" in codex.stderr


# ----------------------------------------------------------------------------- the library


def test_the_library_store_reads_the_database_and_writes_nothing(both: Both) -> None:
    with Store(both.url, agent="claude") as store, Store(both.files, agent="claude") as files:
        assert store.read_only and store.agent == "claude" and not store.is_files
        assert sorted(s.id for s in store.list()) == sorted(s.id for s in files.list())
        with store.open(CLAUDE_SESSION[:8], read_only=True) as manager:
            with files.open(CLAUDE_SESSION[:8], read_only=True) as expected:
                assert manager.get_entries() == expected.get_entries()
                assert manager.get_leaf_id() == expected.get_leaf_id()
        assert store.usage("session").totals.to_json() == (files.usage("session").totals.to_json())
        with pytest.raises(ReadOnlyStoreError, match="Claude Code"):
            store.create("/work/app")
        with pytest.raises(ReadOnlyStoreError):
            store.open(CLAUDE_SESSION[:8])
        # A path with a NUL, or outside the root, names nothing in it.
        for bad in (
            f"{both.pg_root}/projects/-work-app/\x00.jsonl",
            f"{both.pg_root}/projects/../../etc/passwd.jsonl",
            "/etc/passwd.jsonl",
        ):
            with pytest.raises(SessionNotFoundError):
                store.resolve(bad)


def test_a_host_file_at_a_database_path_is_never_read(both: Both) -> None:
    """The database's transcripts are read through the database alone: a file on this
    host at the same path (the root is this host's agent dir) is not what is shown."""
    session = both.pg_root / "projects" / "-work-app" / f"{CLAUDE_SESSION}.jsonl"
    session.parent.mkdir(parents=True)
    line = {"type": "user", "sessionId": CLAUDE_SESSION, "uuid": "x", "parentUuid": None}
    line |= {"message": {"role": "user", "content": "a host file"}, "cwd": "/host"}
    session.write_text(json.dumps(line) + "\n")
    (both.pg_root / "projects" / "-host" / "a.jsonl").parent.mkdir(parents=True)
    (both.pg_root / "projects" / "-host" / "a.jsonl").write_text(json.dumps(line) + "\n")
    pg = ("--agent", "claude", "--store", both.url)
    listed = as_json(*pg, "list", "--all")
    assert len(listed["sessions"]) == 4
    assert "a host file" not in json.dumps(listed)
    nothing = run(*pg, "search", "--all", "host file", "--json")
    assert nothing.exit_code == 1 and not json.loads(nothing.stdout)["hits"]  # as grep
    shown = json.dumps(as_json(*pg, "show", CLAUDE_SESSION[:8]))
    assert "/work/app" in shown and "/host" not in shown


# ----------------------------------------------------------------------------- safety


def _sql(both: Both, statement: str, params: tuple[object, ...] = ()) -> None:
    import psycopg

    with psycopg.connect(both.base, autocommit=True) as conn:
        conn.execute(statement.replace("{s}", f'"{both.schema}"'), params)


def test_rows_whose_names_are_no_path_are_never_read(both: Both) -> None:
    """Rows a hostile client left (the schema refuses them; one that dropped the check
    could): a `..` project, a name with a `/`, a key that is not its parent's key and
    name. None is listed, none is read, none is a path anywhere."""
    # A transcript that would be listed if a row's name were taken as a path.
    stolen = (both.files / "projects" / "-work-app" / f"{CLAUDE_SESSION}.jsonl").read_bytes()
    (both.pg_root / "outside.jsonl").parent.mkdir(parents=True, exist_ok=True)
    (both.pg_root / "outside.jsonl").write_bytes(stolen)
    before = as_json("--agent", "claude", "--store", both.url, "list", "--all")
    _sql(both, "ALTER TABLE {s}.nodes DROP CONSTRAINT nodes_name_is_a_component")
    for key, parent, name, is_dir in (
        ("projects/..", "projects", "..", True),
        ("projects/-work-app/..", "projects/-work-app", "..", True),
        ("projects/-work-app/a/b.jsonl", "projects/-work-app", "a/b.jsonl", False),
        ("projects/-work-app/../../x.jsonl", "projects/-work-app", "../../x.jsonl", False),
        ("outside.jsonl", "projects/-work-app", "looks-fine.jsonl", False),
    ):
        _sql(
            both,
            "INSERT INTO {s}.nodes (key, parent, name, is_dir, mtime_ns) "
            "VALUES (%s, %s, %s, %s, 1)",
            (key, parent, name, is_dir),
        )
    after = as_json("--agent", "claude", "--store", both.url, "list", "--all")
    assert _same(after, "", "") == _same(before, "", "")
    assert "outside" not in json.dumps(after) and "looks-fine" not in json.dumps(after)
    assert len(as_json("--agent", "claude", "--store", both.url, "search", "--all", "bug")["hits"])
    for name in ("looks-fine", "outside", "b.jsonl"):
        result = run("--agent", "claude", "--store", both.url, "show", name)
        assert result.exit_code != 0, (name, result.stdout)


def test_a_fork_parent_id_is_a_name_never_a_path(tmp_path: Path) -> None:
    """`forkedFrom.sessionId` comes from the transcript: one that is not a file name is
    kept as the parent's id, never looked up as a path (on files or in a database)."""
    line = {"type": "user", "sessionId": "s", "uuid": "u", "parentUuid": None, "cwd": "/w"}
    line |= {"message": {"role": "user", "content": "hi"}}
    line["forkedFrom"] = {"sessionId": "../../../etc/passwd", "messageUuid": "m"}
    project = tmp_path / "claude" / "projects" / "-w"
    project.mkdir(parents=True)
    (project / "fork.jsonl").write_text(json.dumps(line) + "\n")
    (tmp_path / "etc").mkdir()
    with Store(tmp_path / "claude", agent="claude") as store:
        with store.open("fork", read_only=True) as manager:
            assert (manager.get_header() or {}).get("parentSession") == "../../../etc/passwd"


# ----------------------------------------------------------------------------- the cache


def _cached_keys(agent: Path) -> list[str]:
    with sqlite3.connect(agent / "cache" / "sessions-meta.db") as conn:
        return [r[0] for r in conn.execute("SELECT path FROM foreign_files ORDER BY path")]


def test_the_listing_cache_keeps_a_database_file_apart_from_a_host_file(both: Both) -> None:
    """Files and database at the same paths, one listing cache: each record is the one
    of its own store (a database's key is its label and path, never a host path)."""
    shutil.copytree(both.files / "projects", both.pg_root / "projects")
    with Store(both.url, agent="claude") as pg:
        first = {s.path: s.message_count for s in pg.list()}
    host = ForeignStore.at("claude", str(both.pg_root), str(both.pg_root))
    assert {item.path for item in host.list()} == set(first)
    keys = _cached_keys(both.pg_root)
    on_host = [k for k in keys if k.startswith("/")]
    in_db = [k for k in keys if not k.startswith("/")]
    assert sorted(on_host) == sorted(first) and len(in_db) == len(first)
    assert all("#" in k and k.split("#", 2)[-1] in first for k in in_db)
    # The host files change (each keeps its size: only the cache could still answer).
    for path in first:
        data = Path(path).read_bytes().replace(b"Find the bug", b"Hunt the bug")
        Path(path).write_bytes(data)
    with Store(both.url, agent="claude") as pg:
        assert {s.path: s.message_count for s in pg.list()} == first
        titles = {s.first_message for s in pg.list()}
    assert "Find the bug in parse()" in titles
    assert "Hunt the bug in parse()" in {item.meta.first_message for item in host.list()}


# ----------------------------------------------------------------------------- serve


def test_serve_shows_searches_and_exports_the_database_transcripts(both: Both) -> None:
    httpx = require_module("httpx")
    require_module("starlette")
    require_module("uvicorn")
    from sessiontree.web.data import handle_of
    from sessiontree.web.server import BackgroundServer

    path = f"{both.pg_root}/projects/-work-app/{CLAUDE_SESSION}.jsonl"
    with (
        Store(both.url, agent="claude") as store,
        BackgroundServer([store], poll_seconds=0.05) as server,
        httpx.Client(base_url=server.base, cookies=server.login_cookies(), timeout=30) as client,
    ):
        listing = client.get("/sessions")
        assert listing.status_code == 200 and handle_of("s", path) in listing.text
        page = client.get(f"/s/{handle_of('s', path)}")
        assert page.status_code == 200 and "Find the bug in parse()" in page.text
        assert "claude --resume" not in page.text  # Claude Code reads files, not this store
        found = client.get("/search?q=parse")
        assert found.status_code == 200 and f"/s/{handle_of('s', path)}" in found.text
        exported = client.get(f"/s/{handle_of('s', path)}/export/jsonl")
        assert exported.status_code == 200 and CLAUDE_SESSION in exported.text
