"""The `sessiontree` command line, driven in-process on generated stores."""

from __future__ import annotations

import base64
import json
import os
import shutil
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner, Result

import sessiontree.maintenance._gc as gc_module
from sessiontree import BlobStore, HistoryStorage, SessionManager, get_default_session_dir
from sessiontree.cli import app
from sessiontree.maintenance import file_version
from tests.conftest import real_file, unique_prefix
from tests.helpers import assistant, user

LARGE_FIXTURE = "pi-v1-large-session.jsonl"
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


def assert_user_error(result: Result, code: int = 1, prompt: bool = False) -> str:
    """Exit `code`, no traceback, one error line on stderr (after a prompt, if asked)."""
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.output
    text = result.stderr.split("[y/N]:", 1)[1] if prompt else result.stderr
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sessiontree: error:"), result.stderr
    return lines[0]


@dataclass
class Store:
    project: Path
    branched: str
    simple: str
    other: str
    ids: dict[str, str]


def make_session(cwd: str, prompt: str, answer: str, title: str | None = None) -> str:
    sm = SessionManager.create(cwd)
    sm.append_message(user(prompt))
    sm.append_message(assistant(answer))
    if title:
        sm.set_session_name(title, "user")
    sm.close()
    path = sm.get_session_file()
    assert path is not None
    return path


@pytest.fixture
def store(agent_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    sm = SessionManager.create(str(project))
    ids = {"q": sm.append_message(user("Why does the build fail on CI?"))}
    ids["a1"] = sm.append_message(assistant("Looking at the CI log now."))
    image = base64.b64encode(os.urandom(1500)).decode()
    ids["img"] = sm.append_message(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Screenshot:"},
                {"type": "image", "data": image, "mimeType": "image/png"},
            ],
            "timestamp": 2,
        }
    )
    ids["a2"] = sm.append_message(assistant("Python 3.12 is missing on the runner."))
    sm.append_label_change(ids["a2"], "diagnosis")
    sm.branch(ids["q"])
    ids["b1"] = sm.append_message(assistant("Maybe the cache is stale [bold]really[/bold]."))
    sm.set_session_name("CI fails", "user")
    sm.close()
    branched = sm.get_session_file()
    assert branched is not None
    simple = make_session(str(project), "hello there", "general kenobi")
    other = make_session("/elsewhere/project", "unrelated question", "unrelated python answer")
    return Store(project, branched, simple, other, ids)


def shared_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def snapshot(root: Path, skip: str | None = None) -> dict[str, tuple[int, bytes]]:
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file() and not (skip and str(p.relative_to(root)).startswith(skip))
    }


# ---------------------------------------------------------------------- help


def test_every_command_and_parameter_has_help() -> None:
    group: Any = get_command(app)
    names = set(group.commands)
    assert {
        "demo",
        "list",
        "show",
        "tree",
        "context",
        "export",
        "search",
        "history",
        "resume",
        "rename",
        "rm",
        "fork",
        "extract",
        "stats",
        "migrate",
        "verify",
        "repair",
        "gc",
        "import-files",
        "export-files",
        "usage",
    } <= names
    for name, command in group.commands.items():
        assert command.help and command.help.strip(), name
        for param in command.params:
            assert getattr(param, "help", None), f"{name} {param.name}"
        result = run(name, "--help")
        assert result.exit_code == 0 and "Usage:" in result.stdout, name
    assert ok("--help").stdout.count("\n") > 10


def test_demo_still_works() -> None:
    assert "Context at leaf" in ok("demo").stdout
    document = as_json("demo")
    assert document["context"]["messages"]


# ---------------------------------------------------------------------- reading


def test_list_this_project_and_all(store: Store) -> None:
    document = as_json("list")
    assert {s["path"] for s in document["sessions"]} == {store.branched, store.simple}
    first = next(s for s in document["sessions"] if s["path"] == store.branched)
    assert first["title"] == "CI fails" and first["messageCount"] >= 5 and first["size"] > 0
    assert first["modified"].endswith("Z")
    every = as_json("list", "--all")
    assert {s["path"] for s in every["sessions"]} == {store.branched, store.simple, store.other}
    assert len(as_json("list", "--all", "--limit", "1")["sessions"]) == 1
    text = ok("list").stdout
    assert "CI fails" in text and "hello there" in text


def test_show(store: Store) -> None:
    document = as_json("show", store.branched)
    assert document["id"] in store.branched and document["title"] == "CI fails"
    assert document["types"]["message"] == 5 and document["types"]["label"] == 1
    assert document["roles"] == {"user": 2, "assistant": 3}
    assert document["leafId"] == store.ids["b1"]
    assert len(document["tips"]) == 2 and document["branchPoints"] == 1
    model = document["models"]["anthropic/claude-sonnet-4-5"]
    assert model["input"] == 300 and model["output"] == 60 and model["cacheRead"] == 15
    assert model["cacheWrite"] == 3 and abs(model["cost"] - 0.9) < 1e-9
    assert document["labels"] == {store.ids["a2"]: "diagnosis"}
    with SessionManager.open(store.branched, read_only=True) as sm:
        totals = sm.get_usage_statistics()
    usage = document["usage"]
    assert (usage["input"], usage["output"], usage["cacheRead"], usage["cacheWrite"]) == (
        totals.input,
        totals.output,
        totals.cache_read,
        totals.cache_write,
    )
    assert abs(usage["cost"] - totals.cost) < 1e-9
    text = ok("show", store.branched).stdout
    assert "CI fails" in text and "#diagnosis" in text and "2 tip(s)" in text


def test_tree(store: Store) -> None:
    text = ok("tree", store.branched).stdout
    assert "← leaf" in text and "#diagnosis" in text and "⑂2" in text
    assert "[bold]really" in text  # session text is never rich markup
    # Both children of the branch point are visibly branches.
    assert text.count("● ") == 1 and text.count("○ ") == 1
    document = as_json("tree", store.branched)
    entries = {e["id"]: e for e in document["entries"]}
    assert entries[store.ids["q"]]["children"] == [store.ids["a1"], store.ids["b1"]]
    assert entries[store.ids["b1"]]["onActivePath"] and not entries[store.ids["a1"]]["onActivePath"]
    assert document["leafId"] == store.ids["b1"]
    shallow = ok("tree", store.branched, "--depth", "0").stdout
    assert "2 branches below" in shallow and "Looking at" not in shallow


def test_tree_collapses_long_runs_unless_full(agent_dir: Path, tmp_path: Path) -> None:
    sm = SessionManager.create("/proj")
    for i in range(40):
        sm.append_message(user(f"message number {i}"))
    sm.append_message(assistant("done"))
    sm.close()
    path = str(sm.get_session_file())
    short = ok("tree", path).stdout
    assert "entries (--full shows them)" in short and "message number 20" not in short
    assert "message number 20" in ok("tree", path, "--full").stdout


def test_context(store: Store) -> None:
    document = as_json("context", store.branched)
    assert [m["role"] for m in document["messages"]] == ["user", "assistant"]
    document = as_json("context", store.branched, "--leaf", store.ids["a2"])
    assert document["leafId"] == store.ids["a2"]
    assert len(document["messages"]) == 4
    image = document["messages"][2]["content"][1]
    assert image["type"] == "image" and not image["data"].startswith("blob:")
    llm = as_json("context", store.branched, "--llm")
    assert llm["llm"] is True and llm["messages"][0]["role"] == "user"
    assert (
        "Python 3.12 is missing" in ok("context", store.branched, "--leaf", store.ids["a2"]).stdout
    )
    assert_user_error(run("context", store.branched, "--leaf", "nope"))


def test_export_formats(store: Store, tmp_path: Path) -> None:
    md = ok("export", store.branched, "--leaf", store.ids["a2"]).stdout
    assert "Python 3.12 is missing" in md and "stale" not in md
    out = tmp_path / "page.html"
    result = ok("export", store.branched, "--format", "html", "-o", str(out))
    assert "Wrote" in result.stderr and result.stdout == ""
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "http://" not in page and "https://" not in page
    jsonl = tmp_path / "path.jsonl"
    ok("export", store.branched, "-f", "jsonl", "--leaf", store.ids["a2"], "-o", str(jsonl))
    assert ok("verify", str(jsonl)).exit_code == 0
    with SessionManager.open(str(jsonl), read_only=True) as sm:
        assert sm.get_label(store.ids["a2"]) == "diagnosis"
    assert run("export", store.branched, "--format", "pdf").exit_code == 2


def test_search(store: Store) -> None:
    document = as_json("search", "python")
    hits = document["hits"]
    assert [(h["path"], h["entryId"]) for h in hits] == [(store.branched, store.ids["a2"])]
    hit = hits[0]
    assert hit["snippet"][hit["matchStart"] : hit["matchEnd"]] == "Python"
    assert hit["role"] == "assistant"
    every = as_json("search", "python", "--all")
    assert {h["path"] for h in every["hits"]} == {store.branched, store.other}
    text = ok("search", "stale").stdout
    assert store.ids["b1"] in text and "stale" in text
    assert run("search", "no such words anywhere").exit_code == 1
    none = run("search", "PYTHON", "--case-sensitive", "--all", "--json")
    assert none.exit_code == 1 and json.loads(none.stdout)["hits"] == []


def test_history(agent_dir: Path) -> None:
    assert "No prompts" in ok("history").stdout
    assert not (agent_dir / "history.db").exists()  # reading never creates the database
    history = HistoryStorage(str(agent_dir / "history.db"))
    for prompt in ("fix the failing test", "explain the tree", "fix the docs"):
        history.add(prompt, "/proj")
    history.flush()
    history.close()
    before = snapshot(agent_dir)
    document = as_json("history")
    assert [e["prompt"] for e in document["entries"]] == [
        "fix the docs",
        "explain the tree",
        "fix the failing test",
    ]
    found = as_json("history", "--search", "fix")["entries"]
    assert {e["prompt"] for e in found} == {"fix the docs", "fix the failing test"}
    assert "explain the tree" in ok("history", "--limit", "5").stdout
    assert snapshot(agent_dir) == before


def test_stats(store: Store, agent_dir: Path) -> None:
    document = as_json("stats", "-p", os.getcwd())
    assert document["sessions"] == 2 and document["blobs"] == 1
    assert document["usage"]["messages"] == 4 and document["usage"]["input"] == 400
    assert list(document["byModel"]) == ["anthropic/claude-sonnet-4-5"]
    assert sum(d["messages"] for d in document["byDay"].values()) == 4
    every = as_json("stats")  # every project, as `usage` counts them
    assert every["sessions"] == 3 and every["projects"] == 2
    assert as_json("stats", "--all") == every
    assert "Sessions" in ok("stats", "--all").stdout


def test_inspecting_writes_nothing(
    agent_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fixture = real_file(LARGE_FIXTURE)
    monkeypatch.setenv("TMUX_PANE", "%7")  # a terminal: a writable open would drop a breadcrumb
    project = tmp_path / "proj"
    project.mkdir()
    monkeypatch.chdir(project)
    target = Path(get_default_session_dir(str(project))) / "2025_old.jsonl"
    target.parent.mkdir(parents=True)
    shutil.copyfile(fixture, target)
    with target.open("ab") as f:
        f.write(b'{"type":"message","torn')  # a torn line a writer would repair
    # The caches in <agent>/cache/ (the listing cache sessions-meta.db, the content
    # index content-index.db) are the one thing a read may write: derived data,
    # private (0600), safe to delete.
    before = snapshot(agent_dir, skip="cache/")
    path = str(target)
    for args in (
        ["list"],
        ["list", "--all"],
        ["show", path],
        ["tree", path],
        ["context", path],
        ["context", path, "--llm"],
        ["export", path],
        ["export", path, "-f", "html"],
        ["export", path, "-f", "jsonl"],
        ["search", "theme"],
        ["search", "theme", "--all", "--regex", "--role", "user", "--since", "3000d"],
        ["search", "th", "--all"],
        ["stats", "--all"],
        ["usage", "daily"],
        ["usage", "session", "--breakdown"],
        ["usage", "blocks"],
        ["history"],
        ["gc"],
        ["migrate", "--dry-run", path],
        ["repair", "--dry-run", path],
    ):
        result = (
            run(*args, "--json")
            if args[0] in ("show", "tree", "context", "stats", "usage")
            else run(*args)
        )
        assert result.exit_code == 0, (args, result.stderr)
    assert run("verify", path).exit_code == 1  # the torn line
    assert snapshot(agent_dir, skip="cache/") == before
    assert (agent_dir / "cache" / "content-index.db").is_file()
    for cached in (agent_dir / "cache").iterdir():
        assert cached.stat().st_mode & 0o777 == 0o600, cached


# ---------------------------------------------------------------------- locating


def test_resume_exit_codes(store: Store) -> None:
    branched_id = Path(store.branched).stem.split("_")[-1]
    simple_id = Path(store.simple).stem.split("_")[-1]
    assert ok("resume", branched_id).stdout.strip() == store.branched
    assert ok("resume", store.simple).stdout.strip() == store.simple
    common = shared_prefix(branched_id, simple_id)
    assert common, "ids are time-ordered and share a prefix"
    result = run("resume", common)
    assert result.exit_code == 3
    assert store.branched in result.stderr and store.simple in result.stderr
    assert result.stdout == ""
    result = run("resume", "ffffffffffff")
    assert_user_error(result, 1)
    assert result.stdout == ""


def test_session_prefixes_and_user_errors(store: Store, tmp_path: Path) -> None:
    branched_id = Path(store.branched).stem.split("_")[-1]
    ids = [Path(p).stem.split("_")[-1] for p in (store.branched, store.simple, store.other)]
    assert as_json("show", unique_prefix(branched_id, ids))["leafId"] == store.ids["b1"]
    assert_user_error(run("show", "ffffffffffff"))
    assert_user_error(run("show", str(tmp_path / "missing.jsonl")))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type":"message"}\n')
    assert "not a session file" in assert_user_error(run("show", str(bad)))
    simple_id = Path(store.simple).stem.split("_")[-1]
    common = shared_prefix(branched_id, simple_id)
    assert_user_error(run("show", common), 3)
    assert run("show", store.branched, "--bogus").exit_code == 2
    assert run("tree").exit_code == 2


def test_agent_dir_option(store: Store, tmp_path: Path) -> None:
    other_store = tmp_path / "pi-agent"
    os.environ["PI_CODING_AGENT_DIR"] = str(other_store)
    path = make_session("/somewhere", "in the other store", "yes")
    os.environ["PI_CODING_AGENT_DIR"] = str(tmp_path / "agent")
    document = as_json("--agent-dir", str(other_store), "list", "--all")
    assert [s["path"] for s in document["sessions"]] == [path]


def test_store_option_with_a_path_is_the_agent_dir(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other_store = tmp_path / "pi-agent"
    os.environ["PI_CODING_AGENT_DIR"] = str(other_store)
    path = make_session("/somewhere", "in the other store", "yes")
    for value in (str(other_store), f"file://{other_store}"):
        os.environ["PI_CODING_AGENT_DIR"] = str(tmp_path / "agent")
        document = as_json("--store", value, "list", "--all")
        assert [s["path"] for s in document["sessions"]] == [path]
    os.environ["PI_CODING_AGENT_DIR"] = str(tmp_path / "agent")
    monkeypatch.setenv("SESSIONTREE_STORE", str(other_store))
    assert [s["path"] for s in as_json("list", "--all")["sessions"]] == [path]
    monkeypatch.delenv("SESSIONTREE_STORE")
    os.environ["PI_CODING_AGENT_DIR"] = str(tmp_path / "agent")
    # The same dir twice is fine; two different ones are a usage error.
    assert as_json("--agent-dir", str(other_store), "--store", str(other_store), "list", "--all")
    message = assert_user_error(
        run("--agent-dir", str(tmp_path / "agent"), "--store", str(other_store), "list"), 2
    )
    assert "--agent-dir" in message
    assert "postgresql://" in assert_user_error(run("--store", "mysql://db/x", "list"))
    assert "--store postgresql://" in assert_user_error(run("import-files"), 2)


# ---------------------------------------------------------------------- changing


def test_rename(store: Store) -> None:
    ok("rename", store.simple, "  A better\nname ")
    with SessionManager.open(store.simple, read_only=True) as sm:
        assert sm.get_session_name() == "A better name"
    assert_user_error(run("rename", store.simple, "   "))


def test_rm_asks_first(store: Store) -> None:
    artifacts = Path(store.simple[: -len(".jsonl")])
    artifacts.mkdir()
    (artifacts / "output.txt").write_text("x")
    assert_user_error(run("rm", store.simple, input="n\n"), prompt=True)
    assert Path(store.simple).exists()
    assert_user_error(run("rm", store.simple), prompt=True)  # no answer: nothing deleted
    assert Path(store.simple).exists()
    result = run("rm", store.simple, input="y\n")
    assert result.exit_code == 0
    assert not Path(store.simple).exists() and not artifacts.exists()
    ok("rm", store.other, "--yes")
    assert not Path(store.other).exists()


def test_fork_and_extract(store: Store) -> None:
    forked = ok("fork", store.branched).stdout.strip()
    assert forked != store.branched and Path(forked).exists()
    with SessionManager.open(forked, read_only=True) as sm:
        header = sm.get_header()
        assert header is not None and header["parentSession"] in store.branched
        assert len(sm.get_entries()) == 6
    extracted = ok("extract", store.branched, "--leaf", store.ids["a2"]).stdout.strip()
    with SessionManager.open(extracted, read_only=True) as sm:
        assert [e["type"] for e in sm.get_entries()] == ["message"] * 4 + ["label"]
        assert sm.get_label(store.ids["a2"]) == "diagnosis"
    assert_user_error(run("extract", store.branched, "--leaf", "nope"))


def test_migrate(agent_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fixture = real_file(LARGE_FIXTURE)
    project = tmp_path / "proj"
    project.mkdir()
    monkeypatch.chdir(project)
    target = Path(get_default_session_dir(str(project))) / "2025_old.jsonl"
    target.parent.mkdir(parents=True)
    shutil.copyfile(fixture, target)
    dry = as_json("migrate", "--dry-run")
    assert dry["files"][0]["fromVersion"] == 1 and dry["files"][0]["written"] is False
    assert target.read_bytes() == fixture.read_bytes()
    result = ok("migrate")
    assert "v1 -> v3" in result.stdout
    assert file_version(str(target)) == 3
    again = as_json("migrate", str(target))
    assert again["files"][0]["needed"] is False
    bad = target.parent / "2025_bad.jsonl"
    bad.write_text("not json\n")
    failed = run("migrate", "--json")
    assert failed.exit_code == 1
    assert any("error" in f for f in json.loads(failed.stdout)["files"])


def test_verify(store: Store) -> None:
    assert ok("verify").exit_code == 0
    document = as_json("verify", "--all")
    assert document["checked"] == 3 and document["withProblems"] == 0
    with open(store.simple, "ab") as f:
        f.write(b"garbage\n")
    result = run("verify")
    assert result.exit_code == 1 and "unparseable_line" in result.stdout
    failed = run("verify", "--all", "--json")
    assert failed.exit_code == 1
    document = json.loads(failed.stdout)
    bad = next(f for f in document["files"] if f["path"] == store.simple)
    assert bad["findings"][0]["kind"] == "unparseable_line" and bad["findings"][0]["line"] == 4


def test_repair(store: Store) -> None:
    with open(store.simple, "ab") as f:
        f.write(b"garbage\n")
    original = Path(store.simple).read_bytes()
    document = as_json("repair", store.simple)
    assert [c["kind"] for c in document["changes"]] == ["dropped_line"]
    assert Path(store.simple).read_bytes() == original
    assert Path(document["outPath"]).exists()
    result = ok("repair", store.simple, "--in-place")
    assert ".bak" in result.stdout
    assert ok("verify", store.simple).exit_code == 0
    assert "nothing to repair" in ok("repair", store.simple).stdout


def test_gc(store: Store, agent_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    orphan = BlobStore(str(agent_dir / "blobs")).put(b"nobody needs me").hash
    document = as_json("gc")
    assert [b["hash"] for b in document["young"]] == [orphan]
    assert document["unreferenced"] == [] and document["deleted"] == []
    assert document["filesScanned"] == 3 and document["blobs"] == 2
    later = types.SimpleNamespace(time=lambda: 10**10)
    monkeypatch.setattr(gc_module, "time", later)
    dry = ok("gc").stdout
    assert "1 unreferenced blob(s)" in dry and "--delete" in dry
    assert (agent_dir / "blobs" / orphan).exists()
    deleted = as_json("gc", "--delete")
    assert deleted["deleted"] == [orphan]
    assert not (agent_dir / "blobs" / orphan).exists()
    assert len(list((agent_dir / "blobs").iterdir())) == 2  # the session's image and its sidecar
    assert run("gc", "--min-age", "5").exit_code == 2


def test_demo_puts_its_image_in_the_blob_store() -> None:
    result = CliRunner().invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    assert "1 image(s) in the blob store" in result.output
