"""`Stores`: several stores read as one, by the command line and the web app alike.

A home with a pi store (sessions of its own, one imported from Claude Code), a Claude
Code store and a Codex store of real files: `list` and the web page give the same
sessions for the same filter (one rule: the shown title, the first message, the
project dir or the id contains the text, case and runs of whitespace aside); a store
that cannot be read is passed over and named once; and `Stores` itself: keys, the merged
listing and its filters, search, usage and stats across the stores, what was skipped.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sessiontree.cli import app
from sessiontree.store import SessionFilter, Store, Stores, find_stores, replies_of
from tests.conftest import REAL_FILES, require_module, unavailable
from tests.helpers import assistant, user
from tests.web_support import AGENT_VARIABLES, CLAUDE_FIXTURE, Markup, build_home

CODEX_FIXTURE = "kvsankar__agent-history__tests__fixtures__real_sessions__codex__session-01.jsonl"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """~/.pi/agent (a session in ~/quokka-project whose messages never say so, one whose
    first message has tabs and runs of spaces, an import of the Claude Code session),
    ~/.claude (a real session) and ~/.codex (a real rollout); the cwd is the home."""
    claude_source = REAL_FILES / "foreign" / "claude" / CLAUDE_FIXTURE
    codex_source = REAL_FILES / "foreign" / "codex" / CODEX_FIXTURE
    for source in (claude_source, codex_source):
        if not source.exists():
            unavailable(f"fixture {source} is missing")
    root = tmp_path / "home"
    root.mkdir()
    monkeypatch.setenv("HOME", str(root))
    for name in AGENT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(root)
    found = build_home(root, claude_source)
    rollouts = root / ".codex" / "sessions" / "2026" / "01" / "01"
    rollouts.mkdir(parents=True)
    shutil.copyfile(codex_source, rollouts / f"rollout-{codex_source.name}")
    quokka = root / "quokka-project"
    quokka.mkdir()
    with Store(found.pi).create(quokka) as sm:
        sm.append_message(user("nothing about the place"))
        sm.append_message(assistant("indeed"))
    with Store(found.pi).create(root / "p") as sm:
        sm.append_message(user("tabs\tand   spaces\n here"))
        sm.append_message(assistant("noted"))
    return root


def cli_list(*args: str) -> list[tuple[str, str]]:
    result = CliRunner().invoke(app, ["list", "--all", "--limit", "0", "--json", *args])
    assert result.exit_code == 0, result.output
    return [(s["agent"], s["path"]) for s in json.loads(result.stdout)["sessions"]]


def opened_stores() -> list[Store]:
    return [found.open() for found in find_stores()]


# ---------------------------------------------------------------------------- CLI and web


@pytest.mark.parametrize(
    "text",
    [
        "",  # every session
        "QUOKKA-project",  # the project dir only, in another case
        "and spaces here",  # across a tab, a run of spaces and a newline
        "the",
        "AAAAAAAA-1111",  # an id's start, in another case
    ],
)
def test_the_cli_and_the_web_give_the_same_sessions_for_a_filter(home: Path, text: str) -> None:
    require_module("httpx")
    require_module("starlette")
    require_module("uvicorn")
    import httpx

    from sessiontree.web.data import handle_of
    from sessiontree.web.server import BackgroundServer

    listed = cli_list(*([text] if text else []))
    if not text:
        assert {agent for agent, _ in listed} == {"pi", "claude", "codex"}
    if text in ("QUOKKA-project", "and spaces here"):
        assert len(listed) == 1 and listed[0][0] == "pi"
    stores = opened_stores()
    assert [s.agent for s in stores] == ["pi", "claude", "codex"]
    try:
        with BackgroundServer(stores) as server:
            with httpx.Client(base_url=server.base, cookies=server.login_cookies()) as client:
                page = client.get("/sessions", params={"q": text} if text else {})
                assert page.status_code == 200
        shown = [a["data-handle"] for a in Markup(page.text).all("tr") if a.get("data-handle")]
    finally:
        for store in stores:
            store.close()
    assert sorted(shown) == sorted(handle_of("s", path) for _, path in listed)
    assert shown  # each filter finds some


# ---------------------------------------------------------------------------- skipping


@pytest.fixture
def claude_unreadable(home: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Claude Code's store cannot be listed or read; returns its location."""
    listing, rows, files = Store.list, Store._list_rows, Store.files

    def refused(store: Store) -> None:
        if store.agent == "claude":
            raise OSError(13, "Permission denied", store.location)

    def list_(self: Store, *args: Any, **kwargs: Any) -> Any:
        refused(self)
        return listing(self, *args, **kwargs)

    def rows_(self: Store, *args: Any, **kwargs: Any) -> Any:  # a page of `list`
        refused(self)
        return rows(self, *args, **kwargs)

    def files_(self: Store, *args: Any, **kwargs: Any) -> Any:
        refused(self)
        return files(self, *args, **kwargs)

    monkeypatch.setattr(Store, "list", list_)
    monkeypatch.setattr(Store, "_list_rows", rows_)
    monkeypatch.setattr(Store, "files", files_)
    return str(home / ".claude")


@pytest.mark.parametrize(
    "args",
    [
        ["list"],  # this project's (listed twice: the other projects' are counted too)
        ["list", "--all", "--json"],
        ["search", "--all", "zanzibar"],
        ["stats", "--json"],
        ["usage", "daily", "--json"],
    ],
)
def test_a_store_that_cannot_be_read_is_skipped_and_named_once(
    claude_unreadable: str, home: Path, args: list[str]
) -> None:
    os.chdir(home / "quokka-project" if args == ["list"] else home)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if "skipped" in line]
    assert len(notes) == 1, result.stderr
    assert notes[0].startswith("sessiontree: note: skipped claude at " + claude_unreadable)
    assert "Permission denied" in notes[0] and result.stderr.count("claude at ") == 1
    assert "zanzibar" in result.stdout or args[0] != "search"  # the other stores are read


def test_the_store_named_is_not_skipped(claude_unreadable: str) -> None:
    result = CliRunner().invoke(app, ["--agent", "claude", "list", "--all"])
    assert result.exit_code != 0 and "Permission denied" in result.output


def test_the_web_shows_a_store_it_skipped(claude_unreadable: str) -> None:
    require_module("starlette")
    from sessiontree.web.data import Data

    stores = opened_stores()
    data = Data(stores)
    try:
        agents = {row.store for row in data.sessions()}
        assert agents == {"pi", "codex"}
        assert list(data.skipped) == ["claude"] and "Permission denied" in data.skipped["claude"]
    finally:
        data.close()
        for store in stores:
            store.close()


# ---------------------------------------------------------------------------- Stores


@pytest.fixture
def stores(home: Path) -> Iterator[Stores]:
    opened = opened_stores()
    yield Stores(opened)
    for store in opened:
        store.close()


def test_stores_are_keyed_by_agent_and_numbered_when_an_agent_repeats(home: Path) -> None:
    second = home / "claude-elsewhere"
    shutil.copytree(home / ".claude", second)
    with Store(home / ".pi" / "agent") as pi, Store(home / ".claude", agent="claude") as claude:
        with Store(second, agent="claude") as again:
            keyed = Stores([pi, claude, again])
            assert list(keyed) == ["pi", "claude", "claude-2"]
            assert keyed.first is pi and keyed["claude-2"] is again and len(keyed) == 3
    with pytest.raises(ValueError):
        Stores([])


def test_the_listing_merges_every_store_newest_first_each_row_naming_its_store(
    stores: Stores,
) -> None:
    listed = stores.list()
    assert {one.store for one in listed} == {"pi", "claude", "codex"}
    for one in listed:
        assert one.agent == stores[one.store].agent
        assert one.info.path in {i.path for i in stores[one.store].list()}
        assert one.size == os.path.getsize(one.info.path)
    times = [one.info.modified for one in listed]
    assert times == sorted(times, reverse=True)
    assert len(listed) == sum(len(store.list()) for store in stores.values())


def test_the_listing_filters_by_one_rule(stores: Stores, home: Path) -> None:
    every = stores.list()
    quokka = stores.list(text="  quokka-PROJECT ")
    assert [one.info.cwd for one in quokka] == [str(home / "quokka-project")]
    assert [one.info.first_message for one in stores.list(text="TABS and spaces")] == [
        "tabs\tand   spaces\n here"
    ]
    some = every[len(every) // 2]
    assert some in stores.list(text=some.info.id.upper())
    assert {one.store for one in stores.list(agent="codex")} == {"codex"}
    assert {one.store for one in stores.list(store="claude")} == {"claude"}
    assert stores.list(str(home / "quokka-project")) == quokka  # a project's sessions
    middle = int(some.info.modified.timestamp() * 1000)
    assert all(one.info.modified >= some.info.modified for one in stores.list(since=middle))
    assert all(one.info.modified <= some.info.modified for one in stores.list(until=middle))
    assert stores.list(since=datetime(2999, 1, 1, tzinfo=UTC)) == []
    # the rule, on its own, is the one the listing applies
    where = SessionFilter(text="quokka-project")
    assert where.apply(every) == quokka and SessionFilter().apply(every) == every


def test_a_store_other_than_the_first_is_skipped_until_it_reads_again(
    stores: Stores, claude_unreadable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert {one.store for one in stores.list()} == {"pi", "codex"}
    stores.list()  # failing again: still one record
    (skipped,) = stores.skipped
    assert (skipped.store, skipped.location) == ("claude", claude_unreadable)
    assert "Permission denied" in skipped.reason
    assert [s.agent for s in stores.readable] == ["pi", "codex"]
    monkeypatch.undo()
    assert {one.store for one in stores.list()} == {"pi", "claude", "codex"}
    assert stores.skipped == []


def test_the_first_stores_error_is_the_callers(home: Path, claude_unreadable: str) -> None:
    with Store(home / ".claude", agent="claude") as claude, Store(home / ".pi" / "agent") as pi:
        with pytest.raises(OSError, match="Permission denied"):
            Stores([claude, pi]).list()


def test_search_covers_every_store_and_names_each_hits_store(stores: Stores) -> None:
    found = stores.search("zanzibar")
    assert {(h.store, h.hit.role) for h in found.hits} >= {("pi", "user"), ("pi", "assistant")}
    both = stores.search("entire")
    assert {h.store for h in both.hits} == {"pi", "claude"}  # the import and its original
    for h in both.hits:
        assert h.hit.path in {one.info.path for one in stores.list(store=h.store)}
    assert len(stores.search("entire", limit=2).hits) == 2
    only = stores.search("entire", sessions=stores.list(store="claude"))
    assert {h.store for h in only.hits} == {"claude"} and len(only.sessions) == 1


def test_usage_and_stats_count_each_reply_once_across_the_stores(stores: Stores) -> None:
    once = replies_of(list(stores.values()))
    priced = stores.replies()
    assert len(priced.replies) == len(once.replies)
    alone = sum(len(store.replies().replies) for store in stores.values())
    assert len(priced.replies) < alone  # the import's copies are not counted again
    report = stores.usage("daily")
    assert report.totals.messages == len(once.replies)
    both = stores.stats()
    assert [key for key, _ in both.per_store] == ["pi", "claude", "codex"]
    assert both.total.sessions == sum(one.sessions for _, one in both.per_store)
    assert both.total.usage.messages == len(once.replies)
