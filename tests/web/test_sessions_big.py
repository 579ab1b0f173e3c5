"""A big session's page asks only for what it shows: the tree's shape, then the entries
it draws. Loaded index first, the server reads those lines and no others, and the
page is the page of the same session read whole."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sessiontree.session._loader as loader
import sessiontree.web.sessions as web_sessions
from sessiontree import SessionManager
from sessiontree.export import nav_items
from sessiontree.format import SessionTreeNode
from sessiontree.storage import FileSessionStorage
from sessiontree.web.data import handle_of
from sessiontree.web.server import BackgroundServer
from sessiontree.web.sessions import PATH_CHUNK, OpenSession, nav
from tests.web_support import write_wide_session

ENTRIES = 3000
BRANCHES = ((2000, 1500), (2600, 2400), (2601, 100))


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("big") / "agent"


@pytest.fixture(scope="module")
def wide(agent: Path) -> str:
    # 3,000 entries of 4 KB: 12 MB, over the size loaded index first (8 MB).
    path = write_wide_session(agent, ENTRIES, 4000, branches=BRANCHES)
    assert Path(path).stat().st_size >= loader.LAZY_LOAD_BYTES
    return path


@pytest.fixture
def server(agent: Path, wide: str) -> Iterator[BackgroundServer]:
    with BackgroundServer(FileSessionStorage(), str(agent)) as s:
        yield s


def _client(server: BackgroundServer) -> httpx.Client:
    return httpx.Client(base_url=server.base, cookies=server.login_cookies(), timeout=60)


def _open_session(server: BackgroundServer, path: str) -> OpenSession:
    """The server's open session (the test looks inside the cache)."""
    routes = server.app.state.routes
    cache = next(iter(routes.caches.values()))
    session: OpenSession = cache._open[path]
    return session


def _held(session: OpenSession) -> int:
    """How many entries the session holds as dicts (read, or kept at load)."""
    return sum(1 for e in session.sm._index._entries if e)


def test_the_page_of_a_big_session_reads_only_what_it_shows(
    server: BackgroundServer, wide: str
) -> None:
    url = "/s/" + handle_of("s", wide)
    with _client(server) as client:
        page = client.get(url)
        assert page.status_code == 200
        assert f"message {ENTRIES - 1} " in page.text  # the leaf is shown
        session = _open_session(server, wide)
        first = _held(session)
        # The path's end, the tree's shaping entries and the tips: not the session.
        assert first <= PATH_CHUNK + 40, first
        assert session.shape().size == ENTRIES
        # Earlier entries: one more chunk each time.
        ids = re.findall(
            r'<article class="entry[^"]*" data-n="\d+" data-id="([0-9a-f]{8})"', page.text
        )
        assert len(ids) == PATH_CHUNK
        leaf = f"{ENTRIES - 1:08x}"
        earlier = client.get(url + "/path", params={"leaf": leaf, "before": ids[0]}).json()
        assert earlier["earlier"] > 0 and earlier["html"].count("<article") == PATH_CHUNK
        assert _held(session) <= first + PATH_CHUNK
        # Another branch: its end, not its whole path.
        other = f"{2599:08x}"
        before = _held(session)
        switched = client.get(url + "/path", params={"leaf": other, "from": leaf}).json()
        assert switched["leaf"] == other
        assert _held(session) <= before + PATH_CHUNK
        # A search hit far from its tip: the path around it.
        hit = f"{300:08x}"
        before = _held(session)
        focused = client.get(url, params={"at": hit})
        assert focused.status_code == 200 and f'data-id="{hit}"' in focused.text
        assert _held(session) <= before + 2 * PATH_CHUNK
        assert _held(session) < ENTRIES // 4


def _page_parts(text: str) -> str:
    """A page without what differs between two servers and loads: the note, the
    handle's links and the live offset."""
    text = re.sub(r'<p class="info" id="load-note">[^<]*</p>', "", text)
    return re.sub(r'data-offset="\d+"', "", text)


def test_the_page_read_index_first_is_the_page_read_whole(
    agent: Path, wide: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = "/s/" + handle_of("s", wide)
    leaf, other = f"{ENTRIES - 1:08x}", f"{2599:08x}"
    queries: list[tuple[str, dict[str, str]]] = [
        ("", {}),
        ("", {"leaf": other}),
        ("", {"at": f"{1700:08x}"}),
        ("/path", {"leaf": other, "from": leaf}),
        ("/path", {"leaf": leaf, "before": f"{2900:08x}"}),
        ("/path", {"leaf": f"{2601:08x}", "from": other}),
    ]
    pages = []
    index_first = loader.LAZY_LOAD_BYTES
    for lazy_from in (index_first, 1 << 50):
        monkeypatch.setattr(loader, "LAZY_LOAD_BYTES", lazy_from)
        with (
            BackgroundServer(FileSessionStorage(), str(agent)) as server,
            _client(server) as client,
        ):
            got = [_page_parts(client.get(url + suffix, params=q).text) for suffix, q in queries]
            pages.append(got)
            index = _open_session(server, wide).sm._index
            assert (index.pinned is not None) == (lazy_from == index_first)
    assert pages[0] == pages[1]


# ---------------------------------------------------------------------- the tree drawn


def _reference_keep(leaf_id: str | None) -> Any:
    """What the tree of a big session shows (the rule `NAV_FULL` names), per node."""

    def keep(node: SessionTreeNode, parent: SessionTreeNode | None) -> bool:
        return (
            parent is None
            or len(node.children) != 1
            or len(parent.children) > 1
            or node.label is not None
            or node.entry.get("type") in ("compaction", "branch_summary")
            or node.entry.get("id") == leaf_id
        )

    return keep


@st.composite
def trees(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 60))
    entries: list[dict[str, Any]] = []
    for i in range(n):
        entry_id = f"n{i:03d}"
        if i == 0 or draw(st.integers(0, 9)) == 0:
            parent = (
                None if i == 0 or draw(st.booleans()) else f"n{draw(st.integers(0, i - 1)):03d}"
            )
        else:
            parent = f"n{i - 1:03d}"
        kind = draw(st.sampled_from(["message"] * 6 + ["compaction", "branch_summary", "label"]))
        entry: dict[str, Any] = {
            "type": kind,
            "id": entry_id,
            "parentId": parent,
            "timestamp": f"2026-01-01T00:00:{draw(st.integers(0, 59)):02d}.000Z",
        }
        if kind == "message":
            entry["message"] = {"role": "user", "content": f"text {i}"}
        elif kind == "label":
            entry["targetId"] = f"n{draw(st.integers(0, i)):03d}"
            entry["label"] = "mark"
        else:
            entry["summary"] = "s"
        entries.append(entry)
    return entries


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(entries=trees(), pick=st.integers(0, 59))
def test_the_condensed_tree_is_the_tree_with_its_runs_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entries: list[dict[str, Any]], pick: int
) -> None:
    from sessiontree.format import serialize_entry

    path = tmp_path / "t.jsonl"
    header = {"type": "session", "version": 3, "id": "t", "timestamp": "2026-01-01T00:00:00.000Z"}
    path.write_text("".join(serialize_entry(e) + "\n" for e in [{**header, "cwd": "/w"}, *entries]))
    monkeypatch.setattr(web_sessions, "NAV_FULL", 0)
    monkeypatch.setattr(web_sessions, "SIBLINGS_SHOWN", 1 << 30)  # its own test below
    sm = SessionManager.open(str(path), read_only=True)
    session = OpenSession("h", str(path), sm, web_sessions.Mark(0, 0, 0))
    leaf = sm.get_entry(entries[pick % len(entries)]["id"])
    path_ids = [str(e["id"]) for e in sm.get_branch(leaf["id"] if leaf else None)]
    expected = nav_items(
        sm.get_tree(),
        lambda _e: None,
        set(path_ids),
        keep=_reference_keep(leaf.get("id") if leaf else None),
    )
    assert nav(session, leaf, path_ids) == expected


# ---------------------------------------------------------------------- hostile sessions


def _write_lines(agent: Path, name: str, lines: list[Any]) -> str:
    """A session of `lines` (dicts, or raw bytes written as they are) in `agent`."""
    from sessiontree.layout import encode_session_dir_name

    folder = agent / "sessions" / encode_session_dir_name("/work/odd")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"2026-01-01T00-00-00-000Z_{name}.jsonl"
    header = {
        "type": "session",
        "version": 3,
        "id": f"{name}-session",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/work/odd",
    }
    raw = [orjson.dumps(header)]
    raw += [line if isinstance(line, bytes) else orjson.dumps(line) for line in lines]
    path.write_bytes(b"\n".join(raw) + b"\n")
    return str(path)


def _chained(n: int, first: int = 0, parent: str | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for k in range(first, first + n):
        entry_id = f"{k:08x}"
        out.append(
            {
                "type": "message",
                "id": entry_id,
                "parentId": parent,
                "timestamp": f"2026-01-01T00:{k // 60 % 60:02d}:{k % 60:02d}.000Z",
                "message": {"role": "user", "content": f"message {k}"},
            }
        )
        parent = entry_id
    return out


def test_the_condensed_tree_takes_entries_whose_kind_is_not_a_string(tmp_path: Path) -> None:
    # A hostile line's "type" may be any JSON value (a list is unhashable).
    entries = _chained(web_sessions.NAV_FULL + 100)
    entries[100]["type"] = ["odd"]
    entries[101]["type"] = {"odd": 1}
    path = _write_lines(tmp_path / "agent", "kinds", entries)
    with (
        BackgroundServer(FileSessionStorage(), str(tmp_path / "agent")) as server,
        _client(server) as client,
    ):
        url = "/s/" + handle_of("s", path)
        assert client.get(url).status_code == 200
        assert client.get(url + "/path", params={"leaf": f"{50:08x}"}).status_code == 200


def test_a_page_whose_reads_find_a_damaged_line_draws_the_tree_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Index first, a line in the writers' form that does not parse is found when the
    # page reads it (on the path it shows); the tree drawn then is the tree read whole.
    damaged = (
        b'{"type":"message","id":"00000001","parentId":"00000000",'
        b'"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":x}}'
    )
    lines: list[Any] = [*_chained(1), damaged, *_chained(3, first=2, parent="00000001")]
    path = _write_lines(tmp_path / "agent", "damaged", lines)
    pages = []
    for lazy_from in (0, 1 << 50):
        monkeypatch.setattr(loader, "LAZY_LOAD_BYTES", lazy_from)
        with (
            BackgroundServer(FileSessionStorage(), str(tmp_path / "agent")) as server,
            _client(server) as client,
        ):
            url = "/s/" + handle_of("s", path)
            got = [_page_parts(client.get(url).text), client.get(url + "/path").json()["nav"]]
            index = _open_session(server, path).sm._index
            assert (index._source is not None) == (lazy_from == 0)  # loaded index first
            pages.append(got)
    assert pages[0] == pages[1]


def test_a_session_of_thousands_of_roots_draws_a_tree_of_bounded_size(tmp_path: Path) -> None:
    roots = 5000
    entries = [dict(e, parentId=None) for e in _chained(roots)]
    path = _write_lines(tmp_path / "agent", "roots", entries)
    with (
        BackgroundServer(FileSessionStorage(), str(tmp_path / "agent")) as server,
        _client(server) as client,
    ):
        nav_html = client.get("/s/" + handle_of("s", path) + "/path").json()["nav"]
        assert nav_html.count("<button") <= 2 * web_sessions.NAV_FULL
        assert nav_html.count("<button") == web_sessions.SIBLINGS_SHOWN - 1  # the newest
        assert f"⋯ {roots - web_sessions.SIBLINGS_SHOWN + 1:,} older branches not drawn" in nav_html
        # The leaf (the newest root here) is drawn; an old root picked shows too.
        old = client.get("/s/" + handle_of("s", path) + "/path", params={"leaf": "00000003"})
        assert 'data-id="00000003"' in old.json()["nav"]
        assert old.json()["nav"].count("<button") == web_sessions.SIBLINGS_SHOWN


def test_a_branch_that_ends_in_an_entry_whose_id_is_not_a_string_has_a_page(
    tmp_path: Path,
) -> None:
    # `?at=a` shows a's branch down to its newest tip: here an entry whose id is a list.
    lines = [
        {"type": "message", "id": ["a"], "parentId": "a", "timestamp": "2026-01-01T00:00:01Z"},
        {"type": "message", "id": "b", "parentId": None, "timestamp": "2026-01-01T00:00:01Z"},
        {"type": "message", "id": "a", "parentId": "b", "timestamp": "2026-01-01T00:00:01Z"},
    ]
    for line in lines:
        line["message"] = {"role": "user", "content": f"text {line['id']}"}
    path = _write_lines(tmp_path / "agent", "ids", lines)
    with (
        BackgroundServer(FileSessionStorage(), str(tmp_path / "agent")) as server,
        _client(server) as client,
    ):
        url = "/s/" + handle_of("s", path)
        page = client.get(url, params={"at": "a"})
        assert page.status_code == 200
        assert 'data-id="a"' in page.text
        assert client.get(url + "/path", params={"leaf": "a"}).status_code == 200


_ODD_IDS = ["a", "b", "c", ""]
_odd_values = st.one_of(
    st.sampled_from(_ODD_IDS), st.none(), st.integers(0, 2), st.just(["a"]), st.just({"x": 1})
)


@st.composite
def hostile_sessions(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Entries with ids and parents of any JSON value, reused ids, empty ids, kinds that
    are not strings, bad timestamps (every line parses: a damaged line is found only
    when read, which the tree drawn before it cannot know)."""
    out: list[dict[str, Any]] = []
    for k in range(draw(st.integers(1, 20))):
        odd = draw(st.integers(0, 4)) == 0
        entry_id = draw(_odd_values) if odd else draw(st.sampled_from(_ODD_IDS))
        kind = (
            draw(st.sampled_from(["message", ["x"], "compaction", "label"])) if odd else "message"
        )
        entry: dict[str, Any] = {
            "type": kind,
            "id": entry_id,
            "parentId": draw(_odd_values),
            "timestamp": draw(st.sampled_from(["2026-01-01T00:00:01.000Z", "bad", None])),
            "message": {"role": "user", "content": f"text {k}"},
        }
        if kind == "label":
            entry["targetId"] = draw(st.sampled_from(_ODD_IDS))
            entry["label"] = "mark"
        out.append(entry)
    return out


def _views(path: Path, lazy: bool, wanted: list[str | None]) -> list[Any]:
    """What a page shows of the session, for each leaf or focus asked for."""
    sm = SessionManager.open(str(path), read_only=True, lazy=lazy)
    session = OpenSession("h", str(path), sm, web_sessions.Mark(0, 0, 0))
    out: list[Any] = []
    for want in wanted:
        leaf = session.leaf(want)
        part = web_sessions.path_slice(session, leaf, limit=3)
        items = nav(session, leaf, part.ids)
        around = web_sessions.branch_around(session, want) if want is not None else None
        out.append(
            (
                part.length,
                part.earlier,
                part.ids,
                [(t.kind, t.id, t.text, t.label, t.forks, t.on_path) for t in items],
                [c["value"] for c in web_sessions.leaf_choices(session, leaf)],
                None if around is None else (around[0].get("id"), around[1].ids),
            )
        )
    return out


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    entries=hostile_sessions(),
    nav_full=st.sampled_from([0, 400]),
    wanted=st.lists(st.sampled_from([*_ODD_IDS, None]), max_size=3),
)
def test_the_views_of_a_hostile_session_read_index_first_are_those_read_whole(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    entries: list[dict[str, Any]],
    nav_full: int,
    wanted: list[str | None],
) -> None:
    path = Path(_write_lines(tmp_path / "agent", "hostile", list(entries)))
    monkeypatch.setattr(web_sessions, "NAV_FULL", nav_full)  # 0: every tree condensed
    asked = [None, *wanted]
    assert _views(path, True, asked) == _views(path, False, asked)
