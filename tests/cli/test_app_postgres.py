"""The command line against a PostgreSQL store (`--store` / `SESSIONTREE_STORE`).

A file store with branched sessions and images is imported with `import-files`,
then moved out of the way: every command must read the database alone, and say
exactly what it says about the original files. `export-files` brings back every
byte. Needs the test server (`pg_support`): skipped locally without one, a
failure in CI.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from sessiontree import BlobStore, SessionManager
from sessiontree.cli import app
from sessiontree.store import STORE_ENV
from tests.conftest import unique_prefix
from tests.helpers import assistant, user
from tests.pg_support import fresh_schema

runner = CliRunner()


def run(*args: str, input: str | None = None) -> Result:
    return runner.invoke(app, list(args), input=input)


def ok(*args: str) -> Result:
    result = run(*args)
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)
    return result


def as_json(*args: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(ok(*args, "--json").stdout)
    assert document["schemaVersion"] == 1
    return document


def error_line(result: Result, code: int) -> str:
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sessiontree: error:"), result.stderr
    return lines[0]


@dataclass
class Stores:
    url: str
    """The database, with its test schema."""
    schema: str
    server: str
    agent: Path
    """The agent dir the database's paths map to (no longer on disk once imported)."""
    original: Path
    """The file store that was imported, moved here."""
    project: Path
    branched: str
    """Session paths as the database names them (under `agent`)."""
    simple: str
    other: str
    image: str
    """Base64 of the branched session's image."""
    orphan: str
    """A blob no session references."""
    ids: dict[str, str]

    def db(self, *args: str) -> list[str]:
        return ["--store", self.url, *args]

    def on_files(self, *args: str) -> Result:
        """Run a command on the original files (the agent dir is restored afterwards:
        `--agent-dir` sets it for the rest of the process)."""
        before = os.environ["PI_CODING_AGENT_DIR"]
        try:
            return ok("--agent-dir", str(self.original), *args)
        finally:
            os.environ["PI_CODING_AGENT_DIR"] = before

    def from_files(self, data: bytes) -> bytes:
        """Output about the original files as it reads about the database."""
        return data.replace(str(self.original).encode(), str(self.agent).encode())


def _image_message(data: str, text: str) -> dict[str, object]:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": text},
            {"type": "image", "data": data, "mimeType": "image/png"},
        ],
        "timestamp": 1760000000000,
    }


def _build_file_store(agent: Path, project: Path) -> dict[str, Any]:
    """Three sessions (two in `project`, images in two of them) and an orphan blob."""
    image = base64.b64encode(os.urandom(1500)).decode()
    sm = SessionManager.create(str(project))
    ids = {"q": sm.append_message(user("Why does the homepage load slowly?"))}
    ids["a1"] = sm.append_message(assistant("Let me profile the homepage."))
    ids["img"] = sm.append_message(_image_message(image, "Here is the flame graph:"))
    ids["a2"] = sm.append_message(assistant("The hero image is 8 MB; compress it."))
    sm.append_label_change(ids["a2"], "diagnosis")
    sm.branch(ids["q"])
    ids["b1"] = sm.append_message(assistant("Maybe the CDN cache is cold."))
    sm.set_session_name("Slow homepage", "user")
    sm.close()
    simple = SessionManager.create(str(project))
    simple.append_message(user("hello there"))
    simple.append_message(assistant("general kenobi"))
    simple.close()
    other = SessionManager.create("/elsewhere/project")
    other.append_message(_image_message(base64.b64encode(os.urandom(900)).decode(), "Logo?"))
    other.append_message(assistant("A fine logo."))
    other.close()
    orphan = BlobStore(str(agent / "blobs")).put(b"nobody refers to me", "image/png").hash
    paths = [m.get_session_file() for m in (sm, simple, other)]
    assert all(paths)
    return {
        "paths": paths,
        "image": image,
        "orphan": orphan,
        "ids": ids,
    }


@pytest.fixture
def stores(agent_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stores]:
    monkeypatch.delenv(STORE_ENV, raising=False)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    built = _build_file_store(agent_dir, project)
    with fresh_schema() as (server, schema):
        url = f"{server}{'&' if '?' in server else '?'}schema={schema}"
        report = as_json("--store", url, "import-files")
        assert report["agentDir"] == str(agent_dir)
        assert (report["files"], report["blobs"]) == (3, 3)
        assert report["bytes"] == sum(os.path.getsize(p) for p in built["paths"])
        # From now on only the database has the sessions: nothing may come from files.
        original = tmp_path / "original"
        os.rename(agent_dir, original)
        branched, simple, other = built["paths"]
        yield Stores(
            url,
            schema,
            server,
            agent_dir,
            original,
            project,
            branched,
            simple,
            other,
            built["image"],
            built["orphan"],
            built["ids"],
        )
        # Reading the database wrote nothing on this host (no listing cache, no blobs).
        assert not agent_dir.exists()


def _same(stores: Stores, *args: str) -> dict[str, Any]:
    """The JSON a command prints for the database, checked equal to what it prints for
    the original files (their paths mapped to the database's)."""
    from_db = as_json(*stores.db(*args))
    from_files = json.loads(stores.from_files(stores.on_files(*args, "--json").stdout_bytes))
    if args[0] == "search":
        # Both through their index: the files' content index, the database's own.
        assert from_db["mode"] == from_files["mode"] == "index", args
        assert from_db["notes"] == from_files["notes"] == [], args
    assert from_db == from_files, args
    return from_db


def test_reading_commands_see_what_the_files_show(stores: Stores) -> None:
    listing = _same(stores, "list")
    assert {s["path"] for s in listing["sessions"]} == {stores.branched, stores.simple}
    assert all(s["size"] > 0 for s in listing["sessions"])
    every = _same(stores, "list", "--all")
    assert {s["path"] for s in every["sessions"]} == {
        stores.branched,
        stores.simple,
        stores.other,
    }
    session_id = next(s["id"] for s in every["sessions"] if s["path"] == stores.branched)
    # Sessions made in the same millisecond share their first 13 hex digits: the
    # prefix is made unique against the others' ids, not assumed to be.
    prefix = unique_prefix(session_id, [s["id"] for s in every["sessions"]])
    shown = _same(stores, "show", prefix)
    assert shown["title"] == "Slow homepage" and shown["path"] == stores.branched
    assert shown["size"] == os.path.getsize(
        stores.original / os.path.relpath(stores.branched, stores.agent)
    )
    assert shown["labels"] == {stores.ids["a2"]: "diagnosis"}
    tree = _same(stores, "tree", session_id)
    assert tree["leafId"] == stores.ids["b1"] and len(tree["entries"]) == 6
    # The image comes back out of the database's blob store.
    context = _same(stores, "context", session_id, "--leaf", stores.ids["a2"])
    assert as_json(*stores.db("context", stores.branched, "--leaf", stores.ids["a2"])) == context
    image = context["messages"][2]["content"][1]
    assert image["data"] == stores.image
    _same(stores, "context", session_id, "--llm")
    hits = _same(stores, "search", "homepage", "--all")
    assert {h["path"] for h in hits["hits"]} == {stores.branched}
    _same(stores, "stats", "--all")
    stats = as_json(*stores.db("stats", "--all"))
    assert (stats["sessions"], stats["blobs"]) == (3, 3)
    verified = _same(stores, "verify", "--all")
    assert verified["checked"] == 3 and verified["withProblems"] == 0
    assert ok(*stores.db("resume", prefix)).stdout.strip() == stores.branched
    text = ok(*stores.db("list")).stdout
    assert "Slow homepage" in text and "hello there" in text
    assert "flame graph" in ok(*stores.db("context", session_id, "--leaf", stores.ids["a2"])).stdout


def test_export_reads_the_database(stores: Stores, tmp_path: Path) -> None:
    for fmt in ("md", "html", "jsonl"):
        from_db = ok(*stores.db("export", stores.branched, "-f", fmt)).stdout_bytes
        original = stores.branched.replace(str(stores.agent), str(stores.original))
        from_files = stores.from_files(stores.on_files("export", original, "-f", fmt).stdout_bytes)
        if fmt == "jsonl":  # a new session: its header has a new id and timestamp
            db_header, *db_lines = from_db.splitlines()
            files_header, *files_lines = from_files.splitlines()
            assert db_lines == files_lines and len(db_lines) == 2  # q -> b1
            assert json.loads(db_header)["id"] != json.loads(files_header)["id"]
            loose = [json.loads(h) for h in (db_header, files_header)]
            for header in loose:
                del header["id"], header["timestamp"]
            assert loose[0] == loose[1] and loose[0]["parentSession"] == stores.branched
        else:
            assert from_db == from_files, fmt
    assert (
        stores.image.encode()
        in ok(*stores.db("export", stores.branched, "-f", "html")).stdout_bytes
    )
    out = tmp_path / "out.md"
    ok(*stores.db("export", stores.branched, "-o", str(out)))
    assert "Slow homepage" in out.read_text()


def test_errors_against_the_database(stores: Stores) -> None:
    missing = run(*stores.db("search", "no such words anywhere"))
    assert missing.exit_code == 1 and "No match" in missing.stdout
    line = error_line(run(*stores.db("show", str(stores.agent / "sessions" / "none.jsonl"))), 1)
    assert "no such session file in the store" in line
    line = error_line(run(*stores.db("show", "/outside/the/root.jsonl")), 1)
    assert "no such session file" in line
    assert "no session matches" in error_line(run(*stores.db("show", "zzzz")), 1)


def test_writes_go_to_the_database(stores: Stores) -> None:
    ok(*stores.db("rename", stores.simple, "Greetings"))
    assert as_json(*stores.db("show", stores.simple))["title"] == "Greetings"
    forked = ok(*stores.db("fork", stores.branched)).stdout.strip()
    assert forked.startswith(str(stores.agent / "sessions"))
    shown = as_json(*stores.db("show", forked))
    assert shown["header"]["parentSession"] == as_json(*stores.db("show", stores.branched))["id"]
    ok(*stores.db("rm", forked, "--yes"))
    assert run(*stores.db("show", forked)).exit_code == 1


def _tree(top: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `top`: its bytes and mtime."""
    return {
        str(p.relative_to(top)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(top.rglob("*"))
        if p.is_file()
    }


def test_export_files_brings_back_every_byte(stores: Stores, tmp_path: Path) -> None:
    target = tmp_path / "restored"
    report = as_json(*stores.db("export-files", str(target)))
    assert (report["files"], report["blobs"]) == (3, 3)
    original_sessions = _tree(stores.original / "sessions")
    assert _tree(target / "sessions") == original_sessions  # bytes and mtimes
    blobs = {k: v[0] for k, v in _tree(target / "blobs").items()}
    assert blobs == {k: v[0] for k, v in _tree(stores.original / "blobs").items()}
    assert any(name.endswith(".png") for name in blobs)  # the sidecars, too
    # The exported store works on its own.
    with SessionManager.open(
        str(target / os.path.relpath(stores.branched, stores.agent)),
        read_only=True,
        blob_store=BlobStore(str(target / "blobs")),
    ) as sm:
        assert sm.get_entries()[2]["message"]["content"][1]["data"] == stores.image


def _age_blobs(stores: Stores, seconds: int) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(stores.server, autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {}.blobs SET created_at = now() - make_interval(secs => %s)").format(
                sql.Identifier(stores.schema)
            ),
            (seconds,),
        )


def test_gc_collects_only_old_unreferenced_blobs_in_the_database(stores: Stores) -> None:
    dry = as_json(*stores.db("gc"))
    assert dry["filesScanned"] == 3 and dry["blobs"] == 3
    assert [b["hash"] for b in dry["young"]] == [stores.orphan]
    assert dry["unreferenced"] == [] and dry["refused"] is None
    young = as_json(*stores.db("gc", "--delete"))
    assert young["deleted"] == []  # younger than 10 minutes: never deleted
    _age_blobs(stores, 3600)
    old = as_json(*stores.db("gc"))
    assert [b["hash"] for b in old["unreferenced"]] == [stores.orphan]
    assert old["unreferenced"][0]["paths"][1].endswith(".png")
    text = ok(*stores.db("gc")).stdout
    assert "in the database" in text and "1 unreferenced blob(s)" in text
    deleted = as_json(*stores.db("gc", "--delete"))
    assert deleted["deleted"] == [stores.orphan] and deleted["freedBytes"] == len(
        b"nobody refers to me"
    )
    after = as_json(*stores.db("gc"))
    assert after["blobs"] == 2 and after["unreferenced"] == []
    assert as_json(*stores.db("verify", "--all"))["withProblems"] == 0  # images all there


def test_gc_and_verify_notice_a_missing_blob(stores: Stores) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(stores.server, autocommit=True) as conn:
        conn.execute(sql.SQL("DELETE FROM {}.blobs").format(sql.Identifier(stores.schema)))
    verified = run(*stores.db("verify", stores.branched, "--json"))
    assert verified.exit_code == 1
    (checked,) = json.loads(verified.stdout)["files"]
    assert [f["kind"] for f in checked["findings"]] == ["missing_blob"]


def test_store_from_the_environment(stores: Stores, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STORE_ENV, stores.url)
    listing = as_json("list", "--all")
    assert len(listing["sessions"]) == 3
    # An explicit path is the files again (here: the moved original).
    files = as_json("--store", str(stores.original), "list", "--all")
    assert {s["path"] for s in files["sessions"]} == {
        p.replace(str(stores.agent), str(stores.original))
        for p in (stores.branched, stores.simple, stores.other)
    }


def test_import_and_export_need_a_database(
    agent_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(STORE_ENV, raising=False)
    for args in (["import-files"], ["export-files", str(tmp_path / "out")]):
        line = error_line(run(*args), 2)
        assert "--store postgresql://" in line
    line = error_line(run("--store", "mysql://user:secret@db/x", "list"), 1)
    assert "unsupported store" in line and "secret" not in line
    line = error_line(
        run("--store", str(tmp_path / "a"), "--agent-dir", str(tmp_path / "b"), "list"), 2
    )
    assert "--agent-dir" in line
    # Commands that need no store never connect: an unreachable server is no error.
    assert run("--store", "postgresql://nobody@127.0.0.1:1/x", "history").exit_code == 0
    line = error_line(
        run("--store", "postgresql://nobody@127.0.0.1:1/x?connect_timeout=2", "list"), 1
    )
    assert "cannot connect" in line


def test_import_files_from_another_dir_and_again(stores: Stores) -> None:
    again = as_json(*stores.db("import-files", str(stores.original)))
    assert (again["files"], again["blobs"]) == (3, 3)  # replaces, does not duplicate
    assert len(as_json(*stores.db("list", "--all"))["sessions"]) == 3
    text = ok(*stores.db("import-files", str(stores.original))).stdout
    assert f"schema {stores.schema}" in text and "3 file(s)" in text
    missing = error_line(run(*stores.db("import-files", str(stores.original / "nope"))), 1)
    assert "no such directory" in missing


def _session_bytes(cwd: str) -> bytes:
    """A small, complete session file written by the manager (in a scratch agent dir)."""
    sm = SessionManager.create(cwd)
    sm.append_message(user("a question"))
    sm.append_message(assistant("an answer"))
    sm.close()
    path = sm.get_session_file()
    assert path is not None
    data = Path(path).read_bytes()
    os.remove(path)
    return data


def test_import_skips_names_that_are_not_utf8_and_says_so(
    agent_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    sessions = agent_dir / "sessions"
    good = sessions / "--p--"
    good.mkdir(parents=True)
    (good / "good.jsonl").write_bytes(_session_bytes("/p"))
    # A project dir from a Latin-1 cwd, and a file name with a stray byte: a database
    # key is text, so neither can be stored under its name.
    latin = os.path.join(os.fsencode(sessions), b"--caf\xe9--")
    os.mkdir(latin)
    with open(os.path.join(latin, b"s.jsonl"), "wb") as f:
        f.write(_session_bytes("/caf"))
    with open(os.path.join(os.fsencode(good), b"b\xff.jsonl"), "wb") as f:
        f.write(b"kept on disk\n")
    # A blob damaged on disk: copying it would spread the damage.
    digest = BlobStore(str(agent_dir / "blobs")).put(b"fine image").hash
    bad_digest = "0" * 64
    (agent_dir / "blobs" / bad_digest).write_bytes(b"not what the name says")
    with fresh_schema() as (server, schema):
        url = f"{server}{'&' if '?' in server else '?'}schema={schema}"
        result = run("--store", url, "import-files")
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert "Imported 1 file(s)" in result.stdout and "1 blob(s)" in result.stdout
        lines = result.stderr.strip().splitlines()
        assert lines[-1] == "sessiontree: error: 3 path(s) not imported (listed above)"
        skipped = "\n".join(lines[:-1])
        assert f"{sessions}/--caf\\xe9--: the name is not UTF-8" in skipped
        assert "nothing in it copied" in skipped
        assert f"{good}/b\\xff.jsonl: the name is not UTF-8" in skipped
        assert f"blobs/{bad_digest}: the content does not match its name" in skipped
        # Running it again is the same: nothing duplicated, the same paths skipped.
        again = run("--store", url, "import-files", "--json")
        assert again.exit_code == 1
        document = json.loads(again.stdout)
        assert (document["files"], document["blobs"]) == (1, 1)
        assert sorted(os.fsencode(s["path"]) for s in document["skipped"]) == sorted(
            [
                latin,
                os.path.join(os.fsencode(good), b"b\xff.jsonl"),
                os.fsencode(agent_dir / "blobs" / bad_digest),
            ]
        )
        assert "see skipped" in again.stderr
        listing = as_json("--store", url, "list", "--all")
        assert [s["path"] for s in listing["sessions"]] == [str(good / "good.jsonl")]
        exported = tmp_path / "exported"
        report = as_json("--store", url, "export-files", str(exported))
        assert (report["files"], report["blobs"], report["skipped"]) == (1, 1, [])
        assert (exported / "blobs" / digest).read_bytes() == b"fine image"
        assert not (exported / "blobs" / bad_digest).exists()


def test_a_stopped_import_says_what_it_copied_and_a_rerun_finishes(
    agent_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    first = agent_dir / "sessions" / "--a--"
    first.mkdir(parents=True)
    (first / "done.jsonl").write_bytes(_session_bytes("/a"))
    with fresh_schema() as (server, schema):
        url = f"{server}{'&' if '?' in server else '?'}schema={schema}"
        # A live agent holds a session in a later directory: the import stops there.
        with SessionManager.create("/b", str(agent_dir / "sessions" / "--b--")) as live:
            live.append_message(user("still typing"))
            live.append_message(assistant("still answering"))
            line = error_line(run("--store", url, "import-files"), 1)
            live_path = live.get_session_file()
        assert live_path is not None
        assert f"{live_path}: a writer is active" in line
        assert "import stopped after copying 1 file(s)" in line and "again" in line
        assert [s["path"] for s in as_json("--store", url, "list", "--all")["sessions"]] == [
            str(first / "done.jsonl")
        ]
        # The writer is done: running it again finishes the import, nothing twice.
        report = as_json("--store", url, "import-files")
        assert (report["files"], report["skipped"]) == (2, [])
        listing = as_json("--store", url, "list", "--all")["sessions"]
        assert sorted(s["path"] for s in listing) == sorted([str(first / "done.jsonl"), live_path])
        exported = tmp_path / "exported"
        as_json("--store", url, "export-files", str(exported))
        assert sorted(p.name for p in exported.rglob("*.jsonl")) == sorted(
            ["done.jsonl", os.path.basename(live_path)]
        )
        assert (exported / os.path.relpath(live_path, agent_dir)).read_bytes() == Path(
            live_path
        ).read_bytes()
