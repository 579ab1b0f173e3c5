"""`serve` with no store named: every store found, served as one.

A home with a pi store and a Claude Code store (a session of the latter imported into
the former): the listing shows both with their store, a session page opens from its own
store, search and usage cover both (each reply counted once, as `usage` counts it), a
store key the server did not make is refused, and `sessiontree serve` with no option
serves them all.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sessiontree.store import Store, find_stores, replies_of
from tests.conftest import REAL_FILES, require_module, unavailable
from tests.web_support import (
    AGENT_VARIABLES,
    CLAUDE_FIXTURE,
    CLAUDE_ID,
    FoundHome,
    Markup,
    build_home,
)

httpx = require_module("httpx")
require_module("starlette")
require_module("uvicorn")

from sessiontree.web.data import handle_of  # noqa: E402
from sessiontree.web.server import BackgroundServer  # noqa: E402


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FoundHome]:
    source = REAL_FILES / "foreign" / "claude" / CLAUDE_FIXTURE
    if not source.exists():
        unavailable(f"fixture {source} is missing")
    home = tmp_path_factory.mktemp("stores") / "home"
    home.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        for name in AGENT_VARIABLES:
            mp.delenv(name, raising=False)
        yield build_home(home, source)


@pytest.fixture(scope="module")
def stores(found: FoundHome) -> Iterator[list[Store]]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(found.home))
        for name in AGENT_VARIABLES:
            mp.delenv(name, raising=False)
        opened = [f.open() for f in find_stores()]
    assert [s.agent for s in opened] == ["pi", "claude"]
    yield opened
    for store in opened:
        store.close()


@pytest.fixture(scope="module")
def server(stores: list[Store]) -> Iterator[BackgroundServer]:
    with BackgroundServer(stores, poll_seconds=0.05) as s:
        yield s


@pytest.fixture()
def client(server: BackgroundServer) -> Iterator[Any]:
    with httpx.Client(base_url=server.base, cookies=server.login_cookies(), timeout=30) as c:
        yield c


def get(client: Any, url: str, status: int = 200) -> str:
    r = client.get(url)
    assert r.status_code == status, (url, r.status_code, r.text[:300])
    return str(r.text)


def rows(page: str) -> list[str]:
    return [str(a["data-handle"]) for a in Markup(page).all("tr") if a.get("data-handle")]


def test_the_listing_shows_every_store_and_names_each_sessions_store(
    client: Any, found: FoundHome
) -> None:
    mine, theirs, copy = (
        handle_of("s", found.pi_session),
        handle_of("s", found.claude_session),
        handle_of("s", found.imported),
    )
    page = get(client, "/sessions")
    assert set(rows(page)) == {mine, theirs, copy}
    links = [u for u in Markup(page).urls() if u.startswith("/sessions?store=")]
    assert set(links) == {"/sessions?store=pi", "/sessions?store=claude"}
    assert rows(get(client, "/sessions?store=claude")) == [theirs]
    assert set(rows(get(client, "/sessions?store=pi&sort=title"))) == {mine, copy}
    projects = get(client, "/")
    shown = Markup(projects).all_text
    assert str(found.pi) in shown.replace("~", str(found.home))
    assert [a["data-store"] for a in Markup(projects).all("tr") if a.get("data-store")] == [
        "pi",
        "claude",
    ]
    assert "No sessions" not in get(client, "/?store=claude")


@pytest.mark.parametrize(
    "url",
    [
        "/sessions?store=nope",
        "/sessions?store=../../etc",
        "/?store=%2Fetc%2Fpasswd",
        "/search?q=x&store=codex",
    ],
)
def test_a_store_key_the_server_did_not_make_is_refused(client: Any, url: str) -> None:
    assert "No such store" in get(client, url, 404)


def test_no_url_reads_a_file_outside_the_stores(client: Any, found: FoundHome) -> None:
    for path in ("/etc/passwd", str(found.home / "p"), found.claude_session + "x"):
        get(client, f"/s/{handle_of('s', path)}", 404)
    # a handle is a digest the server issued: not a store key and a path
    get(client, "/s/claude/" + "..%2F" * 8 + "etc%2Fpasswd", 404)


def test_a_session_page_opens_from_its_own_store(client: Any, found: FoundHome) -> None:
    theirs = get(client, f"/s/{handle_of('s', found.claude_session)}")
    assert CLAUDE_ID in theirs
    badge = [a for a in Markup(theirs).all("span") if a.get("class") == "store"]
    assert badge and badge[0]["title"] == str(found.claude)
    assert f"CLAUDE_CONFIG_DIR={found.claude}" not in theirs  # the default place: no variable
    assert "claude --resume " + CLAUDE_ID in theirs
    mine = get(client, f"/s/{handle_of('s', found.pi_session)}")
    assert "zanzibar it is" in mine
    exported = client.get(f"/s/{handle_of('s', found.claude_session)}/export/jsonl")
    assert exported.status_code == 200 and CLAUDE_ID in exported.text


def test_another_agents_replies_show_their_estimated_cost(
    client: Any, server: BackgroundServer, found: FoundHome
) -> None:
    """Claude Code records tokens, not dollars: its replies show the price table's cost
    marked `~`, never "$0.0000"; the projects table keeps the mark; a project's subtitle
    is no store folder."""
    page = Markup(get(client, f"/s/{handle_of('s', found.claude_session)}"))
    assert any(a.get("class") == "usage" for a in page.all("p"))
    assert "$0.0000" not in page.all_text and "~$" in page.all_text
    data = server.app.state.routes.data
    data.sessions()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        snapshot, _ = data.usage(wait=5.0)
        if snapshot is not None and snapshot.complete:
            break
    projects = get(client, "/?store=claude")
    costs = re.findall(r'data-label="Cost">([^<]*)<', projects)
    assert costs and all(c.startswith("~$") for c in costs), costs
    assert re.findall(r'class="sub">([^<]*)<', projects) == []  # one project path: none


def test_search_covers_every_store(client: Any, found: FoundHome) -> None:
    page = get(client, "/search?q=zanzibar")
    hrefs = {u.split("?")[0] for u in Markup(page).urls() if u.startswith("/s/")}
    assert hrefs == {f"/s/{handle_of('s', found.pi_session)}"}
    both = get(client, "/search?q=entire")
    hrefs = {u.split("?")[0] for u in Markup(both).urls() if u.startswith("/s/")}
    assert f"/s/{handle_of('s', found.claude_session)}" in hrefs
    assert f"/s/{handle_of('s', found.imported)}" in hrefs
    assert "in 2 stores" in Markup(both).all_text
    only = get(client, "/search?q=entire&store=claude")
    hrefs = {u.split("?")[0] for u in Markup(only).urls() if u.startswith("/s/")}
    assert hrefs == {f"/s/{handle_of('s', found.claude_session)}"}
    # the form's filters (regular expression, role) apply with the store key
    regex = get(client, "/search?q=entir.&regex=1&store=claude")
    hrefs = {u.split("?")[0] for u in Markup(regex).urls() if u.startswith("/s/")}
    assert hrefs == {f"/s/{handle_of('s', found.claude_session)}"}
    bad = get(client, "/search?q=entire&role=nobody&store=claude")
    assert "unknown role" in Markup(bad).all_text.casefold()


def test_usage_counts_each_reply_once_across_the_stores(
    client: Any, server: BackgroundServer, stores: list[Store]
) -> None:
    data = server.app.state.routes.data
    data.sessions()
    deadline = time.monotonic() + 60
    snapshot = None
    while time.monotonic() < deadline:
        snapshot, error = data.usage(wait=5.0)
        assert error is None
        if snapshot is not None and snapshot.complete:
            break
    assert snapshot is not None and snapshot.complete
    once = replies_of(stores).replies
    alone = sum(len(store.replies().replies) for store in stores)
    assert snapshot.total.messages == len(once) < alone  # the import's copies not again
    assert sum(t.messages for t in snapshot.by_store.values()) == len(once)
    assert set(snapshot.by_store) == {"pi", "claude"}
    page = get(client, "/usage")
    assert 'id="table-stores"' in page
    assert f"{len(once)} replies" in Markup(page).all_text
    # a range sums the per-store table over its days alone
    days = sorted(d for d in snapshot.by_day if d != "unknown")
    ranged = snapshot.within(days[-1])
    assert sum(t.messages for t in ranged.by_store.values()) == ranged.total.messages
    assert ranged.total.messages == snapshot.by_day[days[-1]].messages
    future = snapshot.within("9999-01-01")
    assert future.by_store == {} and future.total.messages == 0


def test_serve_with_no_store_named_serves_every_store_found(found: FoundHome) -> None:
    env = {k: v for k, v in os.environ.items() if k not in AGENT_VARIABLES}
    env.update(HOME=str(found.home), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "sessiontree"), "serve"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=found.home,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(6)]
        assert lines[0].strip() == "Serving 2 stores read-only:", lines
        assert lines[1].strip() == f"pi: {found.pi}"
        assert lines[2].strip() == f"claude: {found.claude}"
        url = lines[4].strip()
        with httpx.Client(timeout=30) as c:
            c.get(url)
            page = c.get(url.split("?")[0] + "sessions").text
        assert set(rows(page)) == {
            handle_of("s", found.pi_session),
            handle_of("s", found.claude_session),
            handle_of("s", found.imported),
        }
    finally:
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_serve_with_a_store_named_serves_that_one(found: FoundHome) -> None:
    env = {k: v for k, v in os.environ.items() if k not in AGENT_VARIABLES}
    env.update(HOME=str(found.home), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "sessiontree"), "--agent", "claude", "serve"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=found.home,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(2)]
        assert lines[0].strip() == f"Serving {found.claude} read-only at", lines
        with httpx.Client(timeout=30) as c:
            c.get(lines[1].strip())
            page = c.get(lines[1].strip().split("?")[0] + "sessions").text
        assert rows(page) == [handle_of("s", found.claude_session)]
        assert "?store=" not in page  # one store: no store column
    finally:
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err


def test_a_store_that_cannot_be_listed_is_passed_over(
    found: FoundHome, caplog: pytest.LogCaptureFixture
) -> None:
    good, bad = Store(found.pi), Store(found.claude)

    def unreadable(*args: object, **kwargs: object) -> list[object]:
        raise OSError(13, "Permission denied", str(found.claude))

    bad.list = unreadable  # type: ignore[method-assign]
    try:
        with BackgroundServer([good, bad]) as server:
            with httpx.Client(base_url=server.base, cookies=server.login_cookies()) as c:
                projects = get(c, "/")
                get(c, "/")
                assert "unreadable" in projects
                assert set(rows(get(c, "/sessions"))) == {
                    handle_of("s", found.pi_session),
                    handle_of("s", found.imported),
                }
                assert "zanzibar" in get(c, "/search?q=zanzibar")
        said = [r for r in caplog.records if "skipped" in r.getMessage()]
        assert len(said) == 1  # once, not on every page
    finally:
        good.close()
        bad.close()
