"""`--agent claude|codex` (reading commands on those stores, read-only) and `import`."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sessiontree import SessionManager, load_entries_from_file
from sessiontree.cli import app
from sessiontree.foreign import listing, read_claude_session, read_codex_session
from sessiontree.foreign import store as store_module
from sessiontree.foreign.listing import ForeignMeta
from sessiontree.foreign.store import ForeignStore
from sessiontree.search import ContentIndex
from tests import foreign_support as fs
from tests.conftest import REAL_FILES, require_module, unavailable

runner = CliRunner()
FOREIGN = REAL_FILES / "foreign"
REWIND = "entireio__cli__de__22551397e1__0__full.jsonl"
SKILLS = "entireio__skills__15__94d668ead7__0__raw_transcript.jsonl"


@pytest.fixture
def stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The real files laid out as the agents store them, plus the generated shapes;
    CLAUDE_CONFIG_DIR and CODEX_HOME point at them."""
    if not FOREIGN.is_dir():
        unavailable(f"real files {FOREIGN} are missing")
    claude, codex, placed = fs.layout(FOREIGN, tmp_path / "stores")
    subagent = fs.claude_subagent_session(claude / "projects")
    fork = fs.claude_fork(claude / "projects")
    parent, child = fs.codex_rollouts(codex)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude))
    monkeypatch.setenv("CODEX_HOME", str(codex))
    monkeypatch.setenv("COLUMNS", "200")
    return {
        "claude": claude,
        "codex": codex,
        "placed": placed,
        "subagent": subagent,
        "fork": fork,
        "codex_parent": parent,
        "codex_child": child,
    }


def fixture_file(kind: str, name: str) -> Path:
    path = FOREIGN / kind / name
    if not path.is_file():
        unavailable(f"real file {path} is missing")
    return path


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


# ----------------------------------------------------------------------------- reading


def test_list_a_claude_code_store(stores: dict[str, Any]) -> None:
    doc = as_json("--agent", "claude", "list", "--all", "--limit", "0")
    paths = {s["path"] for s in doc["sessions"]}
    assert str(stores["placed"][REWIND]) in paths
    assert str(stores["subagent"]) in paths
    # A subagent's transcript is not a session of its own.
    assert not any("subagents" in p for p in paths)
    rewind = next(s for s in doc["sessions"] if s["path"] == str(stores["placed"][REWIND]))
    assert rewind["id"] == "20b81bf8-77cd-4205-8ac9-727b573a70e4"
    assert rewind["cwd"] == "/Users/soph/Work/entire/devenv/cli"
    assert rewind["created"] == "2026-01-20T15:42:19.685Z"
    fork = next(s for s in doc["sessions"] if s["path"] == str(stores["fork"]))
    assert fork["title"] == "Find the bug (fork)"
    assert fork["messageCount"] == 2


def test_list_this_projects_sessions_only(stores: dict[str, Any], tmp_path: Path) -> None:
    project = tmp_path / "work-app"
    project.mkdir()
    previous = os.getcwd()
    os.chdir(project)
    try:
        # The generated sessions were recorded in /work/app; none here.
        assert as_json("--agent", "claude", "list")["total"] == 0
    finally:
        os.chdir(previous)


def test_show_tree_context_of_a_claude_session(stores: dict[str, Any]) -> None:
    path = stores["placed"][REWIND]
    session = read_claude_session(str(path))
    show = as_json("--agent", "claude", "show", "20b81bf8")
    assert show["path"] == str(path)
    assert show["id"] == session.source_id
    assert show["entries"] == len(session.manager.get_entries())
    assert show["leafId"] == session.manager.get_leaf_id()
    assert show["branchPoints"] == 1
    tree = as_json("--agent", "claude", "tree", str(path))
    assert [e["id"] for e in tree["entries"]][-1] == session.manager.get_leaf_id()
    context = as_json("--agent", "claude", "context", "20b81bf8")
    assert context["messages"] == session.manager.build_session_context().messages
    # Another leaf, by the id `tree` showed: ids are the same in every run.
    other = next(e["id"] for e in tree["entries"] if not e["onActivePath"] and e["role"] == "user")
    at = as_json("--agent", "claude", "context", "20b81bf8", "--leaf", other)
    assert at["leafId"] == other and at["messages"] != context["messages"]


def test_export_search_stats_of_a_codex_store(stores: dict[str, Any]) -> None:
    result = run("--agent", "codex", "export", "019df94c", "-f", "md")
    assert result.exit_code == 0 and "check out main; pull the latest" in result.stdout
    exported = run("--agent", "codex", "export", "019df94c", "-f", "jsonl")
    lines = [json.loads(x) for x in exported.stdout.splitlines()]
    assert lines[0]["type"] == "session" and lines[0]["cwd"] == "/Users/rizel/Documents/work/skills"
    hits = as_json("--agent", "codex", "search", "explain", "--all")["hits"]
    assert hits and {h["sessionId"] for h in hits} >= {"019df94c-2cb3-7ca0-9b30-dc36c840bfcc"}
    stats = as_json("--agent", "codex", "stats", "--all")
    summed = 0
    for path in stores["codex"].rglob("rollout-*.jsonl"):
        for e in read_codex_session(str(path)).manager.get_entries():
            if e["type"] == "message" and e["message"]["role"] == "assistant":
                summed += e["message"]["usage"]["output"]
    assert stats["usage"]["output"] == summed > 0
    # Codex records no cost: none is written, and a report estimates it (marked as such).
    assert stats["usage"]["recordedCost"] == 0
    assert stats["usage"]["cost"] == stats["usage"]["estimatedCost"]


def test_search_usage_and_stats_of_a_foreign_store_go_through_this_agents_index(
    stores: dict[str, Any], agent_dir: Path
) -> None:
    """Claude Code and Codex sessions are indexed as ours are, in this agent's content
    index (never in the other agent's directory), and answer as a scan of them does.
    Without an agent dir to keep an index in, they are scanned, and the note says so."""
    before = {k: snapshot(stores[k]) for k in ("claude", "codex")}
    scanned = as_json("--agent", "codex", "search", "explain", "--all")
    assert scanned["mode"] == "scan" and scanned["notes"]
    assert not agent_dir.exists()  # no agent dir is made to hold a cache
    agent_dir.mkdir(parents=True)
    for agent, query in (("claude", "off by one"), ("claude", "git"), ("codex", "explain")):
        indexed = as_json("--agent", agent, "search", query, "--all", "-n", "10000")
        read = as_json("--agent", agent, "search", query, "--all", "-n", "10000", "--no-index")
        assert indexed["mode"] == "index" and indexed["notes"] == []
        assert read["mode"] == "scan"
        assert indexed["hits"] == read["hits"] and indexed["hits"]
    for agent in ("claude", "codex"):
        report = as_json("--agent", agent, "usage", "session")
        unindexed = as_json("--agent", agent, "usage", "session", "--no-index")
        assert report["notes"] == [] and report["rows"] == unindexed["rows"]
        assert report["totals"] == unindexed["totals"] and report["totals"]["totalTokens"] > 0
        stats = as_json("--agent", agent, "stats", "--all")
        assert stats["usage"] == report["totals"]
        assert stats["sessions"] == len(report["rows"])
    with ContentIndex.open(str(agent_dir)) as index:
        assert index is not None
        kinds = {f.kind for f in index.files()}
    assert kinds == {"claude", "codex"}
    assert {k: snapshot(stores[k]) for k in ("claude", "codex")} == before


def test_the_agents_default_locations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Claude Code: `$CLAUDE_CONFIG_DIR` (comma-separated dirs), else `~/.claude/projects`
    and `~/.config/claude/projects`; Codex: `$CODEX_HOME`, else `~/.codex`, with
    `sessions/` and `archived_sessions/`."""
    claude = fixture_file(
        "claude",
        "kvsankar__agent-history__tests__fixtures__real_sessions__claude__session-01.jsonl",
    )
    codex = fixture_file(
        "codex", "kvsankar__agent-history__tests__fixtures__real_sessions__codex__session-01.jsonl"
    )
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.delenv("CODEX_HOME", raising=False)

    def place(source: Path, target: Path) -> str:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
        return str(target)

    ids = [f"0000000{n}-1111-4222-8333-444444444444" for n in range(4)]
    dot = place(claude, home / ".claude" / "projects" / "-a" / f"{ids[0]}.jsonl")
    xdg = place(claude, home / ".config" / "claude" / "projects" / "-b" / f"{ids[1]}.jsonl")
    one = place(claude, tmp_path / "one" / "projects" / "-c" / f"{ids[2]}.jsonl")
    two = place(claude, tmp_path / "two" / "projects" / "-d" / f"{ids[3]}.jsonl")

    def listed(agent: str) -> set[str]:
        doc = as_json("--agent", agent, "list", "--all", "--limit", "0")
        return {s["path"] for s in doc["sessions"]}

    assert listed("claude") == {dot, xdg}
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", f"{tmp_path / 'one'}, {tmp_path / 'two'}")
    assert listed("claude") == {one, two}

    day = "2026/01/02"
    live = place(codex, home / ".codex" / "sessions" / day / f"rollout-{ids[0]}.jsonl")
    archived = place(codex, home / ".codex" / "archived_sessions" / f"rollout-{ids[1]}.jsonl")
    elsewhere = place(codex, tmp_path / "cx" / "sessions" / day / f"rollout-{ids[2]}.jsonl")
    assert listed("codex") == {live, archived}
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "cx"))
    assert listed("codex") == {elsewhere}


def test_agent_dir_is_detected(stores: dict[str, Any]) -> None:
    by_dir = as_json("--agent-dir", str(stores["codex"]), "list", "--all", "--limit", "0")
    by_name = as_json("--agent", "codex", "list", "--all", "--limit", "0")
    assert by_dir == by_name and by_dir["total"] == 12
    projects = as_json("--agent-dir", str(stores["claude"] / "projects"), "list", "--all")
    assert projects["total"] == as_json("--agent", "claude", "list", "--all")["total"]


def test_agent_names_a_native_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with SessionManager.create(
        "/work/app", str(tmp_path / ".pi/agent/sessions/--work-app--")
    ) as sm:
        sm.append_message({"role": "user", "content": "from pi", "timestamp": 1})
        sm.append_message({"role": "assistant", "content": [], "timestamp": 2})
    doc = as_json("--agent", "pi", "list", "--all")
    assert [s["firstMessage"] for s in doc["sessions"]] == ["from pi"]
    assert run("--agent", "nobody", "list").exit_code == 2


@pytest.mark.parametrize(
    "args",
    [
        ["rename", "20b81bf8", "new name"],
        ["rm", "20b81bf8", "--yes"],
        ["migrate", "--all"],
        ["repair", "20b81bf8", "--in-place"],
        ["verify", "--all"],
        ["gc", "--delete"],
        ["fork", "20b81bf8"],
        ["import", "20b81bf8", "--from", "claude"],
    ],
)
def test_a_foreign_store_is_never_written(stores: dict[str, Any], args: list[str]) -> None:
    before = snapshot(stores["claude"])
    result = run("--agent", "claude", *args)
    assert result.exit_code == 2
    assert "only reads" in result.output and "sessiontree import --from claude" in result.output
    assert snapshot(stores["claude"]) == before


def test_listing_reads_each_transcript_once(
    stores: dict[str, Any], monkeypatch: pytest.MonkeyPatch, agent_dir: Path
) -> None:
    """`list` reads each file once (whole: its records, and the session they make for its
    title, first prompt and message count): a second listing, in this process or in a fresh store
    object, comes from the persistent cache and reads no file."""
    agent_dir.mkdir(parents=True)
    fs.settle(stores["claude"], stores["codex"])
    first = as_json("--agent", "claude", "list", "--all", "--limit", "0")
    assert (agent_dir / "cache" / "sessions-meta.db").is_file()

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached listing read a transcript")

    monkeypatch.setattr(store_module, "read_transcript", refuse)
    again = as_json("--agent", "claude", "list", "--all", "--limit", "0")
    assert again == first
    fresh = ForeignStore.default("claude", str(agent_dir)).list()
    assert len(fresh) == first["total"]


def test_a_large_file_lists_the_count_show_gives(stores: dict[str, Any]) -> None:
    """Past the windows a scan reads, the listing counts the session read whole: the
    count `show` gives, not an estimate."""
    path = stores["placed"]["entireio__cli__26__dcd5518fea__0__full.jsonl"]
    assert path.stat().st_size > 2 * listing.WINDOW
    listed = as_json("--agent", "claude", "list", "--all", "--limit", "0")
    item = next(s for s in listed["sessions"] if s["path"] == str(path))
    exact = sum(
        1 for e in read_claude_session(str(path)).manager.get_entries() if e["type"] == "message"
    )
    assert item["messageCount"] == exact
    shown = as_json("--agent", "claude", "show", str(path))
    assert shown["messageCount"] == sum(shown["roles"].values()) == exact


def test_a_first_prompt_past_the_head_window_is_listed(
    stores: dict[str, Any], tmp_path: Path
) -> None:
    """A first prompt after attachments, instructions or plugin lists that fill a file's
    first window is listed, however far in it lies (the file is read whole); a cached
    record of an older scan is scanned again."""
    # Real: this rollout's instructions and plugin list fill its first 110 KB.
    rollout = stores["placed"]["entireio__entire-graph__37__05cde00da0__0__full.jsonl"]
    listed = as_json("--agent", "codex", "list", "--all", "--limit", "0")
    item = next(s for s in listed["sessions"] if s["path"] == str(rollout))
    assert item["firstMessage"] == "Review all open PRs for the entire-graph project"
    assert item["messageCount"] > 0

    # Generated: Claude Code attachment lines (skill listings, file contents) before
    # the prompt, then enough conversation that the file is not read whole.
    def session(filler: int) -> Path:
        attachment = {"type": "text", "text": "x" * 4000}
        lines = [
            fs._cc(f"t{n}", f"t{n - 1}" if n else None, "attachment", attachment, 1)
            for n in range(filler // 4000)
        ]
        last = lines[-1]["uuid"]
        lines.append(fs._cc("p", last, "user", {"role": "user", "content": "Fix the parser"}, 2))
        lines += [
            fs._cc(f"a{n}", "p", "assistant", {"role": "assistant", "content": "y" * 4000}, 3)
            for n in range(40)
        ]
        return fs.write_jsonl(tmp_path / f"{filler}.jsonl", lines)

    far = session(listing.WINDOW + (1 << 20) + 100_000)
    rows = ForeignStore.single("claude", str(far)).list()
    assert [row.meta.first_message for row in rows] == ["Fix the parser"]
    meta = rows[0].meta
    old = meta.dump()[:-1]  # a record of a scan without a version
    with pytest.raises(ValueError):
        ForeignMeta.load(old)
    assert ForeignMeta.load(meta.dump()) == meta


# ----------------------------------------------------------------------------- import


def test_import_writes_one_session_and_refuses_a_second_time(
    stores: dict[str, Any], agent_dir: Path
) -> None:
    source = stores["placed"][REWIND]
    done = as_json("import", "20b81bf8", "--from", "claude")
    path = Path(done["path"])
    assert path.parent == agent_dir / "sessions" / "--Users-soph-Work-entire-devenv-cli--"
    entries = load_entries_from_file(str(path))
    header, last = entries[0], entries[-1]
    assert header["version"] == 3 and "parentSession" not in header
    assert (last["type"], last["customType"]) == ("custom", "foreign_session_import")
    assert last["data"] == {
        "source": "claude",
        "sourceId": "20b81bf8-77cd-4205-8ac9-727b573a70e4",
        "sourcePath": str(source),
        "sourceCwd": "/Users/soph/Work/entire/devenv/cli",
        "sourceBytes": source.stat().st_size,
    }
    with SessionManager.open(str(path), read_only=True) as sm:
        assert sm.get_leaf_id() == last["id"]
        read = read_claude_session(str(source)).manager
        assert sm.build_session_context().messages == read.build_session_context().messages
    before = snapshot(agent_dir / "sessions")
    refused = run("import", str(source), "--from", "claude")
    assert refused.exit_code == 1
    assert f"imported before, into {path}" in refused.output
    assert "grown" not in refused.output
    assert snapshot(agent_dir / "sessions") == before
    again = as_json("import", str(source), "--from", "claude", "--again")
    assert again["path"] != str(path) and Path(again["path"]).is_file()


def test_a_grown_source_says_so(stores: dict[str, Any], agent_dir: Path) -> None:
    source = stores["fork"]
    as_json("import", str(source), "--from", "claude")
    with open(source, "a", encoding="utf-8") as f:
        f.write(
            json.dumps({"type": "ai-title", "sessionId": fs.CLAUDE_FORK, "aiTitle": "x"}) + "\n"
        )
    refused = run("import", str(source), "--from", "claude")
    assert refused.exit_code == 1 and "has grown since" in refused.output


def test_import_subagents_into_the_artifacts_dir(stores: dict[str, Any]) -> None:
    done = as_json("import", fs.CLAUDE_SESSION[:8], "--from", "claude")
    (sub,) = done["subsessions"]
    assert Path(sub).parent == Path(done["path"][: -len(".jsonl")])
    header = load_entries_from_file(sub)[0]
    assert header["parentSession"] == done["path"] and header["title"] == "Find the bug"
    last = load_entries_from_file(sub)[-1]
    assert last["customType"] == "foreign_subagent"
    assert last["data"]["toolCallId"] == "toolu_task"
    # The list of this store shows the session, not its subagent.
    listed = as_json("list", "--all")["sessions"]
    assert [s["path"] for s in listed] == [done["path"]]


def test_import_codex_with_an_image_and_its_fork(stores: dict[str, Any], agent_dir: Path) -> None:
    parent = as_json("import", fs.CODEX_PARENT, "--from", "codex")
    entries = load_entries_from_file(parent["path"])
    image = next(
        b
        for e in entries
        if e["type"] == "message" and isinstance(e["message"]["content"], list)
        for b in e["message"]["content"]
        if b["type"] == "image"
    )
    assert image["data"].startswith("blob:sha256:")
    assert (agent_dir / "blobs" / image["data"][len("blob:sha256:") :]).is_file()
    with SessionManager.open(parent["path"], read_only=True) as sm:
        restored = sm.get_entry(
            next(
                e["id"]
                for e in entries
                if e["type"] == "message" and e["message"]["role"] == "user"
            )
        )
        assert restored is not None
        assert restored["message"]["content"][1]["data"] == fs.PNG
    assert entries[0]["title"] == "Screenshot colors"
    child = as_json("import", str(stores["codex_child"]), "--from", "codex", "--cwd", "/elsewhere")
    header = load_entries_from_file(child["path"])[0]
    assert header["parentSession"] == parent["path"]
    assert header["cwd"] == "/elsewhere"
    assert "--elsewhere--" in child["path"]


def test_import_all_then_nothing_new(stores: dict[str, Any], agent_dir: Path) -> None:
    first = as_json("import", "--all", "--from", "codex")
    assert len(first["imported"]) == 12 and not first["failed"] and not first["skipped"]
    with open(stores["codex_child"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"timestamp": "2026-06-05T05:00:00.000Z", "type": "x", "payload": {}}))
        f.write("\n")
    second = as_json("import", "--all", "--from", "codex")
    assert second["imported"] == [] and len(second["skipped"]) == 12
    assert {s["importedAs"] for s in second["skipped"]} == {i["path"] for i in first["imported"]}
    assert [s["sourcePath"] for s in second["skipped"] if s["grown"]] == [
        str(stores["codex_child"])
    ]
    text = run("import", "--all", "--from", "codex")
    assert text.exit_code == 0
    assert "Imported 0 Codex session(s); 12 imported before (1 grown since" in text.output


def test_import_arguments(stores: dict[str, Any]) -> None:
    assert run("import", "zzzz").exit_code == 1  # no --from, in no store
    assert run("import", "--from", "claude").exit_code == 2  # neither SESSION nor --all
    assert run("import", "zzzz", "--from", "claude").exit_code == 1
    assert run("import", "/nowhere/x.jsonl", "--from", "claude").exit_code == 1
    assert run("import", "x", "--from", "nobody").exit_code == 2


def test_a_subagent_transcript_reads_by_its_path(stores: dict[str, Any]) -> None:
    agent = stores["subagent"].with_suffix("") / "subagents" / "agent-a5f0c2.jsonl"
    shown = as_json("--agent", "claude", "show", str(agent))
    assert shown["roles"] == {"user": 1, "assistant": 2}


def test_no_store_where_the_agent_keeps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "nothing"))
    result = run("--agent", "claude", "list")
    assert result.exit_code == 1
    assert f"no Claude Code sessions found (looked in {tmp_path / 'nothing' / 'projects'})" in (
        result.output
    )


def test_a_session_without_a_cwd_goes_under_this_directory(
    stores: dict[str, Any], tmp_path: Path, agent_dir: Path
) -> None:
    legacy = FOREIGN / "codex" / "AcidicSoil__codex-session-viewer__docs__example.jsonl"
    lines = legacy.read_text(encoding="utf-8").splitlines()
    # The same rollout without the environment message that names its cwd.
    bare = tmp_path / "bare.jsonl"
    bare.write_text(
        "\n".join(line for line in lines if "<environment_context>" not in line) + "\n",
        encoding="utf-8",
    )
    here = tmp_path / "here"
    here.mkdir()
    previous = os.getcwd()
    os.chdir(here)
    try:
        done = as_json("import", str(bare), "--from", "codex")
    finally:
        os.chdir(previous)
    assert load_entries_from_file(done["path"])[0]["cwd"] == str(here)


def test_usage_and_serve_read_a_foreign_store(stores: dict[str, Any], agent_dir: Path) -> None:
    require_module("httpx")
    require_module("uvicorn")
    import httpx

    from sessiontree.foreign.storage import ForeignStorage
    from sessiontree.web.server import BackgroundServer

    report = as_json("--agent", "codex", "usage", "daily")
    assert report["rows"] and report["totals"]["recordedCost"] == 0
    before = snapshot(stores["claude"])
    store = ForeignStore.default("claude", None)
    with (
        BackgroundServer(ForeignStorage(store), store.home) as server,
        httpx.Client(base_url=server.base, cookies=server.login_cookies(), timeout=30) as client,
    ):
        listing = client.get("/sessions")
        assert listing.status_code == 200
        handles = re.findall(r'href="(/s/[0-9a-f]+)', listing.text)
        assert handles
        for handle in dict.fromkeys(handles):
            assert client.get(handle).status_code == 200
        found = client.get("/search?q=the")
        assert found.status_code == 200 and "searched by reading every session" in found.text
    # With an agent dir to keep this agent's content index in, the pages use it (files
    # written within their mtime's tick are read again, not trusted: settle them first).
    agent_dir.mkdir(parents=True)
    fs.settle(stores["claude"], stores["codex"])
    before = snapshot(stores["claude"])
    store = ForeignStore.default("claude", str(agent_dir))
    with (
        BackgroundServer(ForeignStorage(store), store.home) as server,
        httpx.Client(base_url=server.base, cookies=server.login_cookies(), timeout=30) as client,
    ):
        # Usage first: its thread brings the index up to date at start, and a search that
        # meets that refresh reads the files it holds (answers alike, mode "mixed").
        deadline = time.monotonic() + 120  # the page waits 3 s for the figures, then says so
        while "Usage is being computed" in (usage := client.get("/usage").text):
            assert time.monotonic() < deadline, "usage was never computed"
        assert "from the content index" in usage
        found = client.get("/search?q=off+by+one")
        assert "searched by the content index" in found.text and "off by one" in found.text
        # The agent's own resume command, in the session's directory, for this store.
        listing = client.get("/sessions").text
        handle = re.search(r'href="(/s/[0-9a-f]+)"[^>]*>Find the bug in parse', listing)
        assert handle is not None
        copies = re.findall(r'data-copy="([^"]+)"', client.get(handle.group(1)).text)
        want = f"cd /work/app &amp;&amp; CLAUDE_CONFIG_DIR={stores['claude']} claude --resume {fs.CLAUDE_SESSION}"
        assert want in copies
    store = ForeignStore.default("codex", str(agent_dir))
    with (
        BackgroundServer(ForeignStorage(store), store.home) as server,
        httpx.Client(base_url=server.base, cookies=server.login_cookies(), timeout=30) as client,
    ):
        listing = client.get("/sessions").text
        handle = re.search(r'href="(/s/[0-9a-f]+)"[^>]*>Now make it red', listing)
        assert handle is not None
        copies = re.findall(r'data-copy="([^"]+)"', client.get(handle.group(1)).text)
        want = f"cd /work/app &amp;&amp; CODEX_HOME={stores['codex']} codex resume {fs.CODEX_CHILD}"
        assert want in copies
    assert snapshot(stores["claude"]) == before  # served read-only: nothing changed


@pytest.mark.parametrize("source", [[], ["--from", "claude"]], ids=["detected", "--from"])
@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_import_of_a_fifo_or_dir_says_what_it_is(
    agent_dir: Path, tmp_path: Path, source: list[str], kind: str
) -> None:
    # It said "no such file" of a FIFO (or directory) that is there.
    path = tmp_path / "transcript.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    result = CliRunner().invoke(app, ["import", *source, str(path)])
    assert result.exit_code == 1, (result.stdout, result.stderr)
    what = "a FIFO" if kind == "fifo" else "a directory"
    assert result.stderr == f"sessiontree: error: {path}: {what}, not a regular file\n"
