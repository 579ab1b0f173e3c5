"""The Claude Agent SDK adapter: the SDK's own conformance suite on files and PostgreSQL
(nothing skipped), its store helpers, Claude Code's layout as sessiontree's Claude reader
reads it, names, idempotency, torn tails, concurrent writers."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import examples, require_module
from tests.pg_support import drop_schema, pg_url

sdk = require_module("claude_agent_sdk")

from claude_agent_sdk.testing import run_session_store_conformance  # noqa: E402

from sessiontree.integrations.claude_agent_sdk import SessionTreeStore  # noqa: E402

KEY: Any = {"project_key": "-work-proj", "session_id": "6c0a3b7e-1f0e-4c3a-9d1e-0123456789ab"}


def user(
    uuid: str, text: str, parent: str | None = None, ts: str = "2026-01-02T03:04:05.000Z"
) -> dict[str, Any]:
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "type": "user",
        "message": {"role": "user", "content": text},
        "uuid": uuid,
        "timestamp": ts,
        "cwd": "/work/proj",
        "sessionId": KEY["session_id"],
        "version": "2.0.0",
    }


def assistant(
    uuid: str, text: str, parent: str, ts: str = "2026-01-02T03:04:06.000Z"
) -> dict[str, Any]:
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "type": "assistant",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 10, "output_tokens": 5},
        },
        "uuid": uuid,
        "timestamp": ts,
        "cwd": "/work/proj",
        "sessionId": KEY["session_id"],
        "version": "2.0.0",
    }


@contextmanager
def pg_stores(tmp_path: Path) -> Iterator[Any]:
    """A factory of stores, each on a fresh schema of the test server (all dropped)."""
    url = pg_url()
    made: list[tuple[SessionTreeStore, str]] = []

    def make() -> SessionTreeStore:
        from sessiontree.storage.postgres import new_schema_name

        schema = new_schema_name("st_claude")
        store = SessionTreeStore(f"{url}{'&' if '?' in url else '?'}schema={schema}")
        made.append((store, schema))
        return store

    try:
        yield make
    finally:
        for store, schema in made:
            store.close()
            drop_schema(url, schema)


@pytest.mark.parametrize("backend", ["files", "postgres"])
def test_sdk_conformance_suite_nothing_skipped(backend: str, tmp_path: Path) -> None:
    from claude_agent_sdk import SessionStore

    with ExitStack() as stack:
        if backend == "files":
            counter = iter(range(1000))

            def make() -> SessionTreeStore:
                return SessionTreeStore(tmp_path / f"store{next(counter)}")

        else:
            make = stack.enter_context(pg_stores(tmp_path))
        probe = make()
        # Nothing skipped: the suite runs an optional contract only for a method the
        # store overrides.
        for method in ("list_sessions", "list_session_summaries", "delete", "list_subkeys"):
            assert getattr(type(probe), method) is not getattr(SessionStore, method)
        asyncio.run(run_session_store_conformance(make))


@pytest.mark.slow
def test_layout_is_claude_codes_and_the_claude_reader_reads_it(tmp_path: Path) -> None:
    root = tmp_path / "claude"
    store = SessionTreeStore(root)
    entries = [user("u1", "hello tree"), assistant("a1", "hi there", "u1")]
    asyncio.run(store.append(KEY, entries))
    sub = {**KEY, "subpath": "subagents/agent-1"}
    asyncio.run(store.append(sub, [user("s1", "sub task")]))
    main = root / "projects" / KEY["project_key"] / f"{KEY['session_id']}.jsonl"
    assert main.read_bytes() == b"".join(
        json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode() + b"\n" for e in entries
    )
    assert (
        root / "projects" / KEY["project_key"] / KEY["session_id"] / "subagents" / "agent-1.jsonl"
    ).exists()
    assert [p.name for p in (root / "projects").rglob("*") if "lock" in p.name]  # kept a moment
    store.close()  # lets go of the writer locks it kept for the next batch
    assert not [p for p in (root / "projects").rglob("*") if "lock" in p.name]

    from sessiontree.store import Store

    with Store(root, agent="claude") as claude:
        listed = claude.list()
        assert [s.id for s in listed] == [KEY["session_id"]]
        assert listed[0].first_message == "hello tree"
        manager = claude.open(KEY["session_id"][:8], read_only=True)
        texts = [json.dumps(e.get("message", {})) for e in manager.get_entries()]
        assert any("hi there" in t for t in texts)
    for command, wanted in (
        (["list", "--all"], "hello tree"),
        (["show", KEY["session_id"][:8]], "hi there"),
        (["search", "--all", "tree"], "hello tree"),
        (["usage", "session"], "15"),
    ):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "sessiontree",
                "--agent",
                "claude",
                "--store",
                str(root),
                *command,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        assert wanted in out.stdout, (command, out.stdout)


def test_sdk_helpers_work_through_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SessionTreeStore(tmp_path / "claude")
    # import_session_to_store: a Claude Code transcript on disk, into the store (twice:
    # the uuids make the second import land nothing).
    src_dir = tmp_path / "src" / "projects" / KEY["project_key"]
    src_dir.mkdir(parents=True)
    entries = [user("u1", "imported"), assistant("a1", "ok", "u1")]
    (src_dir / f"{KEY['session_id']}.jsonl").write_text(
        "".join(json.dumps(e) + "\n" for e in entries)
    )
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "src"))
    sid = KEY["session_id"]

    async def run() -> None:
        await sdk.import_session_to_store(sid, store, directory="/work/proj")
        await sdk.import_session_to_store(sid, store, directory="/work/proj")
        assert [e["uuid"] for e in await store.load(KEY) or []] == ["u1", "a1"]
        await sdk.rename_session_via_store(store, sid, "My title", directory="/work/proj")
        await sdk.tag_session_via_store(store, sid, "blue", directory="/work/proj")
        infos = await sdk.list_sessions_from_store(store, directory="/work/proj")
        assert [(i.session_id, i.custom_title, i.tag) for i in infos] == [(sid, "My title", "blue")]
        messages = await sdk.get_session_messages_from_store(store, sid, directory="/work/proj")
        assert [m.uuid for m in messages] == ["u1", "a1"]
        fork = await sdk.fork_session_via_store(store, sid, directory="/work/proj", title="fork")
        forked = await store.load(
            {"project_key": KEY["project_key"], "session_id": fork.session_id}
        )
        assert forked and any(e.get("type") == "assistant" for e in forked)
        await sdk.delete_session_via_store(store, sid, directory="/work/proj")
        assert await store.load(KEY) is None
        assert [
            i.session_id for i in await sdk.list_sessions_from_store(store, directory="/work/proj")
        ] == [fork.session_id]

    asyncio.run(run())


@pytest.mark.parametrize(
    "key",
    [
        {"project_key": "..", "session_id": "s"},
        {"project_key": "a/b", "session_id": "s"},
        {"project_key": "p", "session_id": "../../etc/passwd"},
        {"project_key": "p", "session_id": "s\x00x"},
        {"project_key": "p", "session_id": "x" * 300},
        {"project_key": "p", "session_id": ""},
        {"project_key": "p", "session_id": ".hidden"},
        {"project_key": "p", "session_id": "s", "subpath": "../escape"},
        {"project_key": "p", "session_id": "s", "subpath": "/abs"},
        {"project_key": "p", "session_id": "s", "subpath": "a//b"},
    ],
)
def test_unsafe_names_are_refused_before_any_path(key: Any, tmp_path: Path) -> None:
    store = SessionTreeStore(tmp_path / "claude")
    for call in (
        lambda: store.append(key, [{"type": "x"}]),
        lambda: store.append(key, []),
        lambda: store.load(key),
        lambda: store.delete(key),
    ):
        with pytest.raises(ValueError):
            asyncio.run(call())
    assert not (tmp_path / "claude" / "projects").exists() or not any(
        (tmp_path / "claude").rglob("*.jsonl")
    )
    assert not (tmp_path / "etc").exists()


def test_bad_entries_refused_and_nothing_of_the_batch_written(tmp_path: Path) -> None:
    store = SessionTreeStore(tmp_path / "claude")
    asyncio.run(store.append(KEY, [user("u1", "a")]))
    for bad in (
        [user("u2", "b"), "not an object"],
        [user("u2", "b"), {"no": "type"}],
        [user("u2", "b"), {"type": "x", "v": {1, 2}}],
    ):
        with pytest.raises(TypeError):
            asyncio.run(store.append(KEY, bad))  # type: ignore[arg-type]
    assert [e["uuid"] for e in asyncio.run(store.load(KEY)) or []] == ["u1"]


def test_uuid_is_the_idempotency_key(tmp_path: Path) -> None:
    store = SessionTreeStore(tmp_path / "claude")
    batch = [
        user("u1", "a"),
        assistant("a1", "b", "u1"),
        {"type": "custom-title", "customTitle": "t"},
    ]
    asyncio.run(store.append(KEY, batch))
    asyncio.run(store.append(KEY, batch))  # a retried batch
    # Another process (a new store object) retries too: it reads the uuids from the file.
    asyncio.run(SessionTreeStore(tmp_path / "claude").append(KEY, [*batch, user("u2", "c", "a1")]))
    loaded = asyncio.run(store.load(KEY)) or []
    assert [e.get("uuid") for e in loaded] == ["u1", "a1", None, None, None, "u2"]


def test_changes_by_another_program_are_seen(tmp_path: Path) -> None:
    store = SessionTreeStore(tmp_path / "claude")
    asyncio.run(store.append(KEY, [user("u1", "a")]))
    path = Path(store.path_of(KEY))
    with path.open("ab") as f:  # another program appends, and dies mid-line
        f.write(json.dumps(user("u2", "b")).encode() + b"\n" + b'{"type":"user","uuid":"u3","mess')
    asyncio.run(store.append(KEY, [user("u2", "b"), user("u4", "d")]))
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(line.startswith(b"{") for line in lines[:-1])
    assert [e["uuid"] for e in asyncio.run(store.load(KEY)) or []] == ["u1", "u2", "u4"]
    # Replaced by a shorter file: read again from the start.
    path.write_text(json.dumps(user("z1", "z")) + "\n")
    asyncio.run(store.append(KEY, [user("u1", "a")]))
    assert [e["uuid"] for e in asyncio.run(store.load(KEY)) or []] == ["z1", "u1"]


def _writer(root: str, worker: int, n: int) -> None:
    store = SessionTreeStore(root)

    async def run() -> None:
        for i in range(n):
            await store.append(KEY, [user(f"w{worker}-{i}", f"m{i}"), user(f"shared-{i}", "same")])

    asyncio.run(run())


def _check_concurrent(loaded: list[dict[str, Any]], workers: int, n: int) -> None:
    uuids = [e["uuid"] for e in loaded]
    assert len(uuids) == len(set(uuids)) == workers * n + n
    for w in range(workers):
        mine = [u for u in uuids if u.startswith(f"w{w}-")]
        assert mine == [f"w{w}-{i}" for i in range(n)]


@pytest.mark.slow
def test_concurrent_writers_threads_and_processes_on_files(tmp_path: Path) -> None:
    root = str(tmp_path / "claude")
    threads = [threading.Thread(target=_writer, args=(root, w, 20)) for w in range(4)]
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(root, w, 20)) for w in range(4, 8)]
    for t in threads:
        t.start()
    for p in procs:
        p.start()
    for t in threads:
        t.join()
    for p in procs:
        p.join()
        assert p.exitcode == 0
    _check_concurrent(asyncio.run(SessionTreeStore(root).load(KEY)) or [], 8, 20)


@pytest.mark.slow
def test_concurrent_writers_processes_on_postgres(tmp_path: Path) -> None:
    from sessiontree.storage.postgres import new_schema_name

    url = pg_url()
    schema = new_schema_name("st_claude")
    location = f"{url}{'&' if '?' in url else '?'}schema={schema}"
    try:
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=_writer, args=(location, w, 10)) for w in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
            assert p.exitcode == 0
        store = SessionTreeStore(location)
        _check_concurrent(asyncio.run(store.load(KEY)) or [], 4, 10)
        store.close()
    finally:
        drop_schema(url, schema)


def test_import_without_the_sdk_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "sys.modules['claude_agent_sdk'] = None\n"
        "try:\n"
        "    import sessiontree.integrations.claude_agent_sdk\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'sessiontree[claude-agent-sdk]'" in out.stdout
    assert os.environ.get("PI_CODING_AGENT_DIR")


json_value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
entry = st.builds(
    lambda extra, uuid: {**extra, "type": "x", **({"uuid": uuid} if uuid else {})},
    st.dictionaries(st.text(max_size=8), json_value, max_size=5),
    st.none() | st.uuids().map(str),
)


@settings(max_examples=examples(50), deadline=None)
@given(st.lists(st.lists(entry, max_size=5), max_size=5))
def test_any_json_entries_load_as_json_parse_reads_what_json_stringify_wrote(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[dict[str, Any]]]
) -> None:
    """Entries come back deep-equal to what JavaScript reads of the line JavaScript
    writes (`JSON.parse(JSON.stringify(e))`: the same, but for a float JavaScript writes
    as an integer, 1e16 and beyond), and the file holds exactly those lines."""
    import uuid

    from sessiontree.format import loads_line, serialize_entry

    store = SessionTreeStore(tmp_path_factory.getbasetemp() / "hypothesis-claude")
    key: Any = {"project_key": "p", "session_id": str(uuid.uuid4())}

    async def go() -> list[dict[str, Any]] | None:
        for batch in batches:
            await store.append(key, batch)
        return await store.load(key)

    loaded = asyncio.run(go())
    seen: set[str] = set()
    expected: list[dict[str, Any]] = []
    for e in (e for batch in batches for e in batch):
        if isinstance(e.get("uuid"), str):
            if e["uuid"] in seen:
                continue
            seen.add(e["uuid"])
        expected.append(e)
    if not expected:
        assert loaded is None
        return
    assert loaded == [loads_line(serialize_entry(e)) for e in expected]
    assert Path(store.path_of(key)).read_text(encoding="utf-8") == "".join(
        serialize_entry(e) + "\n" for e in expected
    )


def test_the_writer_lock_is_kept_between_batches_and_let_go_once_idle(tmp_path: Path) -> None:
    import time

    from sessiontree.storage import FileSessionStorage, is_locked

    store = SessionTreeStore(tmp_path / "claude")
    asyncio.run(store.append(KEY, [user("u1", "a")]))
    path = store.path_of(KEY)
    assert is_locked(FileSessionStorage(), path)  # kept for the next batch
    deadline = time.monotonic() + 10
    while is_locked(FileSessionStorage(), path):
        assert time.monotonic() < deadline, "the lock was never let go"
        time.sleep(0.05)
    # Another writer (a new store object: another process would do the same) goes on.
    other = SessionTreeStore(tmp_path / "claude")
    asyncio.run(other.append(KEY, [user("u2", "b")]))
    other.close()
    asyncio.run(store.append(KEY, [user("u3", "c")]))  # takes it again, seeing u2
    store.close()
    assert [
        e["uuid"] for e in asyncio.run(SessionTreeStore(tmp_path / "claude").load(KEY)) or []
    ] == ["u1", "u2", "u3"]


@pytest.mark.parametrize(
    ("victim", "other"),
    [
        # Session "s.jsonl"'s subagent dir is session "s"'s transcript path.
        (
            {"project_key": "p", "session_id": "s"},
            {"project_key": "p", "session_id": "s.jsonl", "subpath": "agent"},
        ),
        # Subpath "x.jsonl/y"'s directory is subpath "x"'s transcript path.
        (
            {"project_key": "p", "session_id": "s", "subpath": "x"},
            {"project_key": "p", "session_id": "s", "subpath": "x.jsonl/y"},
        ),
    ],
)
def test_a_key_whose_directory_is_another_transcript_is_refused(
    victim: Any, other: Any, tmp_path: Path
) -> None:
    # Red team: either key written first made the other unwritable (IsADirectoryError,
    # NotADirectoryError), its load None, and deleting one raised on the other's file.
    store = SessionTreeStore(tmp_path / "claude")
    asyncio.run(store.append(victim, [user("u1", "a")]))
    for call in (
        lambda: store.append(other, [user("u2", "b")]),
        lambda: store.load(other),
        lambda: store.delete(other),
    ):
        with pytest.raises(ValueError):
            asyncio.run(call())
    assert [e["uuid"] for e in asyncio.run(store.load(victim)) or []] == ["u1"]
    store.close()


def test_list_subkeys_does_not_follow_symlinked_directories(tmp_path: Path) -> None:
    # Red team: a symlink loop under a session's dir made list_subkeys raise ELOOP, and a
    # link to a directory outside the store listed that directory's files as subkeys.
    store = SessionTreeStore(tmp_path / "claude")
    sub: Any = {**KEY, "subpath": "subagents/agent-1"}
    asyncio.run(store.append(sub, [user("u1", "a")]))
    session_dir = Path(store.path_of(KEY)[: -len(".jsonl")])
    (session_dir / "loop").symlink_to(session_dir)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_text("{}\n")
    (session_dir / "subagents" / "out").symlink_to(outside)
    assert asyncio.run(store.list_subkeys(KEY)) == ["subagents/agent-1"]
    asyncio.run(store.delete(KEY))
    assert (outside / "secret.jsonl").exists()
    assert asyncio.run(store.list_subkeys(KEY)) == []
    store.close()


def test_a_subpath_too_long_for_a_path_is_refused_before_any_directory(tmp_path: Path) -> None:
    # Red team: 30 components of 200 bytes each (each a safe name) made 23 directories
    # before the OS refused the path; load raised OSError.
    store = SessionTreeStore(tmp_path / "claude")
    key: Any = {**KEY, "subpath": "/".join(["d" * 200] * 30)}
    for call in (
        lambda: store.append(key, [user("u1", "a")]),
        lambda: store.load(key),
        lambda: store.delete(key),
    ):
        with pytest.raises(ValueError, match="too long"):
            asyncio.run(call())
    assert not (tmp_path / "claude" / "projects").exists()
    store.close()


def test_delete_never_follows_a_session_directory_linked_elsewhere(tmp_path: Path) -> None:
    """A session's subagent directory replaced by a link to a directory that is not ours:
    delete removes the transcript and nothing behind the link."""
    store = SessionTreeStore(tmp_path / "claude")
    asyncio.run(store.append(KEY, [user("u1", "a")]))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.jsonl").write_text("{}\n")
    os.symlink(outside, Path(store.path_of(KEY)).with_suffix(""))
    try:
        asyncio.run(store.delete(KEY))
    except OSError:
        pass  # refused at the link: what matters is below
    assert (outside / "keep.jsonl").read_text() == "{}\n"
    assert asyncio.run(store.load(KEY)) is None
