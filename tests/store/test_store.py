"""`Store`: every method on a file store and on PostgreSQL, another agent's store read-only,
where a store is (paths, `~`, `file:` URLs, `postgresql://` with its password hidden,
agents by name), and its life (closed once, refused after, two on one place, threads)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sessiontree
from sessiontree import (
    AmbiguousSessionError,
    InvalidStoreError,
    ReadOnlyStoreError,
    SessionManager,
    SessionNotFoundError,
    SessionTreeError,
    SessionWriteConflictError,
    Store,
    StoreClosedError,
)
from tests import foreign_support as fs
from tests.conftest import examples, unique_prefix
from tests.helpers import assistant, user
from tests.pg_support import fresh_schema

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
DAY = 86_400_000
T0 = 1_760_000_000_000
"""2025-10-09 08:53:20 UTC: the replies' times (days apart)."""


# ---------------------------------------------------------------------------- stores


def _with_schema(url: str, schema: str) -> str:
    return url + ("&" if "?" in url else "?") + f"schema={schema}"


@pytest.fixture(params=["files", "postgres"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(location, agent dir) of a new, empty store: an agent dir's files, or a PostgreSQL
    schema (its paths under an agent dir that holds its caches and history)."""
    if request.param == "files":
        yield str(tmp_path / "agent"), tmp_path / "agent"
        return
    with fresh_schema() as (url, schema):
        yield _with_schema(url, schema), tmp_path / "db-root"


@pytest.fixture
def store(place: tuple[str, Path]) -> Iterator[Store]:
    """A `Store` on `place`, closed afterwards."""
    location, agent_dir = place
    with Store(location, agent_dir=agent_dir) as opened:
        yield opened


@dataclass
class Sessions:
    """What `_fill` wrote: per project dir, its sessions (path, id), oldest first."""

    alpha: Path
    beta: Path
    paths: dict[str, list[str]]
    ids: dict[str, str]
    """path -> session id"""


def _session(store: Store, cwd: Path, n: int, day: int, text: str) -> SessionManager:
    sm = store.create(cwd)
    sm.append_message({**user(f"{text} question {n}"), "timestamp": T0 + day * DAY})
    sm.append_message(assistant(f"answer {n} about {text}", timestamp=T0 + day * DAY + 1000))
    return sm


def _fill(store: Store, tmp_path: Path) -> Sessions:
    """Two sessions in project alpha, one in beta (replies a day apart, one image)."""
    alpha, beta = tmp_path / "alpha", tmp_path / "beta"
    alpha.mkdir(exist_ok=True)
    beta.mkdir(exist_ok=True)
    paths: dict[str, list[str]] = {str(alpha): [], str(beta): []}
    ids: dict[str, str] = {}
    for n, (cwd, text) in enumerate([(alpha, "parsing"), (alpha, "lexing"), (beta, "parsing")]):
        with _session(store, cwd, n, n, text) as sm:
            if n == 0:
                ref = sm.put_blob(PNG)
                image = {"type": "image", "data": ref.ref, "mimeType": "image/png"}
                sm.append_message({"role": "user", "content": [image], "timestamp": T0 + 5000})
            path = sm.get_session_file()
            assert path is not None
            paths[str(cwd)].append(path)
            ids[path] = sm.get_session_id()
    return Sessions(alpha, beta, paths, ids)


# ---------------------------------------------------------------------------- every method


def test_create_list_and_open(store: Store, tmp_path: Path) -> None:
    made = _fill(store, tmp_path)
    alpha = [info.path for info in store.list(made.alpha)]
    assert alpha == list(reversed(made.paths[str(made.alpha)]))  # newest first
    assert [info.path for info in store.list(str(made.beta))] == made.paths[str(made.beta)]
    everything = store.list()
    assert sorted(info.path for info in everything) == sorted(made.ids)
    modified = [info.modified for info in everything]
    assert modified == sorted(modified, reverse=True)
    ids = list(made.ids.values())
    for path, session_id in made.ids.items():
        prefix = unique_prefix(session_id, ids)
        stem = os.path.basename(path)[: -len(".jsonl")]
        file_prefix = stem[: stem.index("_") + 1 + len(prefix)]
        for name in (path, prefix, stem, file_prefix, stem.upper()):
            assert store.resolve(name) == path
            with store.open(name, read_only=True) as sm:
                assert sm.get_session_id() == session_id and sm.is_read_only()
    with store.open(unique_prefix(ids[0], ids)) as sm:
        assert not sm.is_read_only()
        sm.append_message(assistant("more"))
    assert store.list(made.alpha)[0].message_count == 4


def test_open_says_what_it_could_not_find(store: Store, tmp_path: Path) -> None:
    made = _fill(store, tmp_path)
    with pytest.raises(SessionNotFoundError, match="no session matches 'ffff"):
        store.open("ffffffffffff", read_only=True)
    with pytest.raises(LookupError):  # a SessionNotFoundError is one
        store.resolve("ffffffffffff")
    missing = str(tmp_path / "gone.jsonl")
    with pytest.raises(SessionNotFoundError, match="no such session file"):
        store.open(missing)
    with pytest.raises(SessionNotFoundError, match="is a directory"):
        store.resolve(os.path.dirname(next(iter(made.ids))) + os.sep)
    # Ids are time-ordered: sessions made a moment apart share their first digits.
    ids = list(made.ids.values())
    shared = ids[0][:4]
    assert all(i.startswith(shared) for i in ids)
    with pytest.raises(AmbiguousSessionError) as raised:
        store.resolve(shared)  # here (no session of this directory) and everywhere
    assert len(raised.value.candidates) == 3
    beta = made.paths[str(made.beta)][0]
    assert store.resolve(shared, cwd=made.beta) == beta  # the project's own come first
    with pytest.raises(SessionTreeError):
        store.resolve("../escape")


def test_search(store: Store, tmp_path: Path) -> None:
    made = _fill(store, tmp_path)
    result = store.search("parsing")
    assert {hit.path for hit in result.hits} == {
        made.paths[str(made.alpha)][0],
        made.paths[str(made.beta)][0],
    }
    hit = next(h for h in result.hits if h.role == "user")
    assert hit.session_id == made.ids[hit.path] and hit.entry_id is not None
    assert "parsing" in hit.snippet.lower() and hit.timestamp is not None
    local = store.search("parsing", cwd=made.beta)
    assert {h.path for h in local.hits} == set(made.paths[str(made.beta)])
    assert {h.role for h in store.search("parsing", roles=["assistant"]).hits} == {"assistant"}
    # Times are the entries' own (when they were written: now).
    assert len(store.search("parsing", since="2000-01-01", until=datetime.now(UTC)).hits) == 4
    assert store.search("parsing", until="2000-01-01").hits == []
    assert store.search("parsing", since=datetime.now(UTC) + timedelta(days=1)).hits == []
    assert store.search("parsing", since=int(time.time() * 1000) - 3_600_000).hits
    assert store.search("lex.ng", regex=True).hits
    assert store.search("nowhere to be found").hits == []


def test_usage_and_stats(store: Store, tmp_path: Path) -> None:
    made = _fill(store, tmp_path)
    daily = store.usage("daily", tz="UTC")
    assert len(daily.rows) == 3  # one reply a day
    assert daily.totals.messages == 3 and daily.totals.cost == pytest.approx(0.9)
    assert daily.totals.input == 300 and daily.totals.estimated_messages == 0
    per_project = store.usage("project", projects=[made.beta])
    assert [row.key for row in per_project.rows] == [str(made.beta)]
    assert per_project.totals.messages == 1
    late = store.usage("monthly", since=T0 + DAY, until="2030-01-01")
    assert late.totals.messages == 2
    with pytest.raises(ValueError, match="unknown period"):
        store.usage("hourly")  # type: ignore[arg-type]
    # A reply without a recorded cost is priced from the table, and marked so.
    with store.create(made.beta) as sm:
        sm.append_message(user("estimate me"))
        unpriced = assistant("priced later", timestamp=T0 + 9 * DAY)
        unpriced["usage"] = {"input": 1000, "output": 100, "cacheRead": 0, "cacheWrite": 0}
        sm.append_message(unpriced)
    estimated = store.usage("session").totals
    assert estimated.estimated_messages == 1 and estimated.estimated_cost > 0
    stats = store.stats()
    assert stats.sessions == 4 and stats.usage.messages == 4 and stats.blobs == 1
    assert store.stats(made.alpha).sessions == 2


def test_gc_check_and_repair(store: Store, tmp_path: Path) -> None:
    made = _fill(store, tmp_path)
    blobs = store.blobs
    assert blobs is not None
    orphan = blobs.put(b"nobody refers to this").hash
    report = store.gc()
    assert report.referenced == 1 and report.files_scanned == 3
    assert [b.hash for b in report.young] == [orphan] and report.unreferenced == []
    assert store.gc(delete=True).deleted == []  # too young to go
    assert blobs.has(orphan)
    assert store.check() == []
    damaged = made.paths[str(made.beta)][0]
    storage = store.storage
    storage.write_text(damaged, storage.read_text(damaged) + '{"type":"message","id":')
    findings = store.check()
    assert findings and {f.path for f in findings} == {damaged}
    assert store.check([made.ids[damaged]]) == findings
    preview = store.repair(damaged, dry_run=True)
    assert preview.changes and storage.read_text(damaged).endswith('"id":')
    assert store.check(fix=True) == []
    assert store.check() == [] and storage.exists(damaged + ".bak")
    with store.open(made.ids[damaged], read_only=True) as sm:
        assert len(sm.get_entries()) == 2


def test_check_does_not_repair_a_session_a_live_writer_holds(tmp_path: Path) -> None:
    with Store(tmp_path / "agent") as store:
        made = _fill(store, tmp_path)
        path = made.paths[str(made.beta)][0]
        live = store.open(made.ids[path])  # holds the writer lock
        live.append_message(assistant("still talking"))
        live.flush()
        before = Path(path).read_bytes()
        with open(path, "ab") as f:  # another program tears the last line
            f.write(b'{"type":"message"')
        findings = store.check(fix=True)
        kinds = {f.kind for f in findings}
        assert "unrepaired" in kinds and kinds - {"unrepaired"}
        assert {f.path for f in findings} == {path}
        assert Path(path).read_bytes() == before + b'{"type":"message"'
        assert not os.path.exists(path + ".bak")
        with pytest.raises(SessionWriteConflictError):  # the writer sees the change too
            live.close()


def test_fork_delete_continue_and_history(store: Store, tmp_path: Path) -> None:
    made = _fill(store, tmp_path)
    source = made.paths[str(made.alpha)][0]
    with store.fork(made.ids[source]) as fork:
        forked = fork.get_session_file()
        assert fork.get_header()["parentSession"] == made.ids[source]  # type: ignore[index]
        assert fork.get_cwd() == str(made.alpha)
    with store.fork(source, made.beta) as elsewhere:
        assert elsewhere.get_cwd() == str(made.beta)
    assert forked in {info.path for info in store.list(made.alpha)}
    removed = store.delete(made.ids[source])
    assert source in removed and not store.storage.exists(source)
    with store.continue_recent(made.beta) as recent:
        assert recent.get_session_file() in {info.path for info in store.list(made.beta)}
    history = store.history()
    history.add("a prompt to remember", str(made.alpha))
    history.flush()
    assert [e.prompt for e in history.get_recent(5)] == ["a prompt to remember"]
    history.close()
    assert store.history_path == os.path.join(store.agent_dir, "history.db")


def test_delete_takes_only_the_stores_own_sessions(tmp_path: Path) -> None:
    """A session file outside the store, and a symlink to one inside it, are refused
    and stay; a store's own goes, with nothing else."""
    with Store(tmp_path / "agent") as store:
        made = _fill(store, tmp_path)
        path = made.paths[str(made.beta)][0]
        outside = tmp_path / "elsewhere" / os.path.basename(path)
        outside.parent.mkdir()
        outside.write_bytes(Path(path).read_bytes())
        with pytest.raises(SessionTreeError):
            store.delete(outside)
        link = Path(path).parent / "link.jsonl"
        link.symlink_to(path)
        with pytest.raises(SessionTreeError):
            store.delete(link)
        assert outside.exists() and link.is_symlink() and Path(path).exists()
        assert store.delete(path) == [path] and not Path(path).exists()
        assert sorted(i.path for i in store.list()) == sorted(made.paths[str(made.alpha)])


def test_images_go_to_the_stores_blobs(store: Store, tmp_path: Path) -> None:
    _fill(store, tmp_path)
    blobs = store.blobs
    assert blobs is not None
    digest = __import__("hashlib").sha256(PNG).hexdigest()
    assert blobs.has(digest) and blobs.get(digest) == PNG
    if store.is_files:
        assert os.path.isfile(os.path.join(store.agent_dir, "blobs", digest))
    else:  # a database keeps them in its own table, nothing on this host
        assert not os.path.exists(os.path.join(store.agent_dir, "blobs"))


def test_files_move_between_a_database_and_an_agent_dir(tmp_path: Path) -> None:
    source = tmp_path / "source"
    with Store(source) as files:
        made = _fill(files, tmp_path)
        with pytest.raises(InvalidStoreError, match="database"):
            files.import_files(tmp_path / "elsewhere")
        with pytest.raises(InvalidStoreError, match="database"):
            files.export_files(tmp_path / "elsewhere")
    with (
        fresh_schema() as (url, schema),
        Store(_with_schema(url, schema), agent_dir=source) as database,
    ):
        copied = database.import_files(source)
        assert copied.files == 3 and copied.blobs == 1 and not copied.skipped
        assert sorted(i.path for i in database.list()) == sorted(made.ids)
        target = tmp_path / "exported"
        back = database.export_files(target)
        assert back.files == 3 and back.blobs == 1
        for path in made.ids:
            moved = target / os.path.relpath(path, source)
            assert moved.read_bytes() == Path(path).read_bytes()
        with pytest.raises(FileNotFoundError):
            database.import_files(tmp_path / "no-such-dir")


# ---------------------------------------------------------------------------- its life


def test_close_is_idempotent_and_refuses_later_use(store: Store, tmp_path: Path) -> None:
    _fill(store, tmp_path)
    location, agent = store.location, store.agent
    store.close()
    store.close()
    assert store.closed and "closed" in repr(store)
    assert (store.location, store.agent) == (location, agent)
    for use in (
        lambda: store.storage,
        lambda: store.list(),
        lambda: store.open("x", read_only=True),
        lambda: store.create(tmp_path),
        lambda: store.search("parsing"),
        lambda: store.gc(),
        lambda: store.check(),
        lambda: store.blobs,
    ):
        with pytest.raises(StoreClosedError, match="closed"):
            use()
    with pytest.raises(ValueError):  # a StoreClosedError is one
        store.list()


def test_context_manager_closes(tmp_path: Path) -> None:
    with Store(tmp_path / "agent") as store:
        assert not store.closed
        _fill(store, tmp_path)
    assert store.closed
    with pytest.raises(StoreClosedError), store:
        pass


def test_a_store_opened_twice(store: Store, place: tuple[str, Path], tmp_path: Path) -> None:
    """Two `Store`s on one place see each other's sessions; closing one leaves the other."""
    with Store(place[0], agent_dir=place[1]) as other:
        made = _fill(other, tmp_path)
        assert sorted(i.path for i in store.list()) == sorted(made.ids)
    assert other.closed and not store.closed
    path = next(iter(made.ids))
    with store.open(made.ids[path]) as sm:
        sm.append_message(assistant("after the other closed"))
    assert len(store.list()) == 3


def test_concurrent_opens_share_one_storage(
    store: Store, place: tuple[str, Path], tmp_path: Path
) -> None:
    """The web app opens sessions from a thread pool: many threads at once, on a store
    whose database is connected to by whichever comes first, all get the session, and
    the store holds one storage (one pool of connections)."""
    made = _fill(store, tmp_path)
    with Store(place[0], agent_dir=place[1]) as fresh:
        seen: list[object] = []
        errors: list[BaseException] = []
        ids = list(made.ids.values())
        start = threading.Barrier(8)

        def work(n: int) -> None:
            try:
                start.wait()
                target = ids[n % len(ids)]
                with fresh.open(unique_prefix(target, ids), read_only=True) as sm:
                    assert sm.get_session_id() == target
                seen.append(fresh.storage)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == [] and len(seen) == 8
        assert all(s is seen[0] for s in seen)


# ---------------------------------------------------------------------------- where it is


def test_locations_name_agent_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    agent = tmp_path / "some agent dir"
    assert Store(agent).location == str(agent)
    assert Store(str(agent)).agent_dir == str(agent)
    assert Store("~/stores/a").location == str(home / "stores" / "a")
    assert Store(Path("~/b")).location == str(home / "b")
    assert Store("file:" + quote(str(agent))).location == str(agent)
    assert Store("file://" + quote(str(agent))).location == str(agent)
    monkeypatch.chdir(tmp_path)
    assert Store("relative").location == str(tmp_path / "relative")
    store = Store(agent)
    assert repr(store) == f"Store({str(agent)!r}, agent='xcsh')"
    assert store.agent == "xcsh" and not store.read_only and store.is_files
    assert Store(home / ".pi" / "agent").agent == "pi"
    assert Store(home / ".omp" / "agent").agent == "omp"
    assert Store(agent, agent="pi").agent == "pi"
    with pytest.raises(InvalidStoreError, match="agent_dir"):
        Store(agent, agent_dir=tmp_path / "other")
    assert Store(agent, agent_dir=agent).location == str(agent)
    with pytest.raises(InvalidStoreError, match="empty"):
        Store("")


def test_agents_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    for agent in ("xcsh", "omp", "pi"):
        store = Store(agent=agent)
        assert store.location == str(home / f".{agent}" / "agent") and store.agent == agent
    with pytest.raises(InvalidStoreError) as raised:
        Store(agent="chatgpt")
    message = str(raised.value)
    assert "'chatgpt'" in message
    for known in ("xcsh", "omp", "pi", "claude", "codex", "opencode", "gemini", "copilot"):
        assert known in message
    assert isinstance(raised.value, ValueError)


def test_the_default_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Store()`: `$SESSIONTREE_STORE`, else `$PI_CODING_AGENT_DIR`, else `~/.xcsh/agent`."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "from-pi"))
    assert Store().location == str(tmp_path / "from-pi")
    monkeypatch.setenv("SESSIONTREE_STORE", str(tmp_path / "from-store"))
    assert Store().location == str(tmp_path / "from-store")
    monkeypatch.setenv("SESSIONTREE_STORE", "postgresql://me:hush@db.invalid/x")
    database = Store()
    assert database.location == "postgresql://me:***@db.invalid/x"
    assert database.agent_dir == str(tmp_path / "from-pi")  # its paths' root, its caches
    monkeypatch.delenv("SESSIONTREE_STORE")
    monkeypatch.delenv("PI_CODING_AGENT_DIR")
    assert Store().location == str(tmp_path / "home" / ".xcsh" / "agent")


def test_a_database_url_hides_its_password(tmp_path: Path) -> None:
    url = "postgresql://alice:s3cr%40t@db.invalid:5432/sessions?schema=team&sslmode=require"
    store = Store(url, agent_dir=tmp_path)
    shown = f"{store.location} {store!r}"
    assert "s3cr" not in shown and "alice:***@db.invalid:5432" in store.location
    assert "schema=team" in store.location and store.agent == "xcsh"
    assert store.agent_dir == str(tmp_path) and not store.is_files
    store.close()  # never connected: nothing to release, no error
    in_query = Store("postgres://bob@db.invalid/x?password=hunter2", agent_dir=tmp_path)
    assert "hunter2" not in in_query.location + repr(in_query)
    with pytest.raises(InvalidStoreError, match="unsupported store") as raised:
        Store("mysql://carol:topsecret@db.invalid/x")
    assert "topsecret" not in str(raised.value)
    with pytest.raises(InvalidStoreError):
        Store("postgresql://db.invalid/x", agent="codex")
    # Claude Code's layout in a database (the Claude Agent SDK adapter's) is read from
    # it, read-only; nothing is connected to before a method needs it.
    claude = Store("postgresql://dan:pw4@db.invalid/x", agent="claude", agent_dir=tmp_path)
    assert claude.read_only and claude.agent == "claude" and "pw4" not in repr(claude)
    claude.close()


@settings(max_examples=examples(50), deadline=None)
@given(
    password=st.text(
        st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=24
    ),
    user_name=st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True),
)
def test_no_password_shows(password: str, user_name: str) -> None:
    """Whatever the password (percent-encoded in the URL, as libpq takes it), neither
    `.location` nor the repr shows it, and the rest of the URL stays."""
    encoded = quote(password, safe="")
    url = f"postgresql://{user_name}:{encoded}@db.invalid:5432/name?schema=s"
    store = Store(url, agent_dir="/tmp")
    # Both exactly as expected: nothing else is there to show a password (a substring
    # test would trip on a password such as "a", which "db.invalid" holds).
    assert store.location == f"postgresql://{user_name}:***@db.invalid:5432/name?schema=s"
    assert repr(store) == f"Store({store.location!r}, agent='xcsh')"
    query = Store(f"postgresql://db.invalid/name?password={encoded}", agent_dir="/tmp")
    assert query.location == "postgresql://db.invalid/name?password=***"


@settings(max_examples=examples(50), deadline=None)
@given(
    name=st.text(
        st.characters(codec="utf-8", exclude_characters="\x00/"), min_size=1, max_size=30
    ).filter(lambda n: n not in (".", ".."))
)
def test_a_path_and_its_file_url_name_one_store(name: str) -> None:
    base = "/tmp/st-store-names"
    path = os.path.join(base, name)
    expected = os.path.abspath(path)
    assert Store(path).location == expected
    assert Store("file:" + quote(path)).location == expected
    assert Store(path).agent_dir == Store("file://" + quote(path)).agent_dir


# ---------------------------------------------------------------------------- another agent's


@pytest.fixture
def claude(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Claude Code config dir holding one session (with a subagent), the default one."""
    config = tmp_path / "claude"
    fs.claude_subagent_session(config / "projects")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    return config


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()
    }


def test_another_agents_store_is_read(claude: Path, agent_dir: Path) -> None:
    before = _tree(claude)
    for store in (Store(claude), Store(agent="claude"), Store(claude, agent="claude")):
        with store:
            assert store.read_only and store.agent == "claude"
            assert store.location == str(claude) == store.agent_dir
            assert store.blobs is None
            assert "read-only" in repr(store)
            listed = store.list()
            assert len(listed) == 1
            info = listed[0]
            with store.open(info.id[:8], read_only=True) as sm:
                assert sm.get_session_id() == info.id and sm.get_entries()
            assert store.list(info.cwd)[0].path == info.path
            assert store.search("the").hits or store.search("a").hits
            assert store.usage("session").rows
            assert store.stats().sessions == 1
            assert store.check() == [] or all(f.path == info.path for f in store.check())
            assert store.repair(info.path, dry_run=True).path == info.path
    assert _tree(claude) == before  # nothing of it was written


def test_another_agents_store_refuses_every_write(claude: Path, tmp_path: Path) -> None:
    with Store(claude) as store:
        info = store.list()[0]
        writes: dict[str, Any] = {
            "open": lambda: store.open(info.id[:8]),
            "create": lambda: store.create(tmp_path),
            "continue_recent": lambda: store.continue_recent(tmp_path),
            "fork": lambda: store.fork(info.id[:8]),
            "delete": lambda: store.delete(info.id[:8]),
            "gc": lambda: store.gc(),
            "check": lambda: store.check(fix=True),
            "repair": lambda: store.repair(info.path),
            "history": lambda: store.history(),
            "import_files": lambda: store.import_files(tmp_path),
            "export_files": lambda: store.export_files(tmp_path / "out"),
        }
        for name, write in writes.items():
            with pytest.raises(ReadOnlyStoreError, match="Claude Code store is read-only") as e:
                write()
            assert "sessiontree import" in str(e.value), name
        with pytest.raises(SessionTreeError):  # its storage refuses too
            store.storage.write_text(info.path, "")
    assert not (tmp_path / "out").exists()


def test_another_agents_store_and_other_names(
    claude: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "no-codex"))
    with pytest.raises(InvalidStoreError, match="is a claude store, not a xcsh agent dir"):
        Store(claude, agent="xcsh")
    with pytest.raises(InvalidStoreError, match="database"):
        Store("postgresql://db.invalid/x", agent="codex")
    with pytest.raises(SessionTreeError, match="no Codex sessions found"):
        Store(agent="codex")


def test_publishes_its_names() -> None:
    assert sessiontree.Store is Store and Store.__module__ == "sessiontree"
    assert "Store" in sessiontree.__all__ and "Store" in dir(sessiontree)
    for name in ("InvalidStoreError", "ReadOnlyStoreError", "StoreClosedError"):
        assert issubclass(getattr(sessiontree, name), sessiontree.SessionTreeError)
    assert issubclass(sessiontree.SessionNotFoundError, LookupError)
