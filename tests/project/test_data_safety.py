"""Regression tests for the data-loss paths a review found (each failed on the old code).

Each test names the review item it answers. The stateful model test
(`tests/session/test_manager_model.py`) looks for the paths nobody listed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from sessiontree import (
    EntryNotSerializableError,
    SessionClosedError,
    SessionManager,
    SessionTreeError,
    SessionWriteConflictError,
    load_entries_from_file,
)
from sessiontree.layout import get_default_session_dir
from sessiontree.storage import lock_path_for
from tests.helpers import assistant, user


def persisted(cwd: str = "/proj", session_dir: str | None = None) -> SessionManager:
    sm = SessionManager.create(cwd, session_dir)
    sm.append_message(user("question"))
    sm.append_message(assistant("answer"))
    return sm


def ids(path: str) -> list[str]:
    return [e["id"] for e in load_entries_from_file(path)[1:]]


# -- 1. move_to onto itself ------------------------------------------------------------------


def test_move_to_the_same_cwd_changes_nothing_on_disk(agent_dir: Path) -> None:
    sm = persisted()
    path = sm.get_session_file() or ""
    before = Path(path).read_bytes()
    sm.move_to(sm.get_cwd())
    assert Path(path).read_bytes() == before
    sm.append_message(user("still here"))
    sm.close()
    assert len(ids(path)) == 3 and load_entries_from_file(path)[0]["type"] == "session"


def test_move_to_a_cwd_that_encodes_the_same_rewrites_in_place(agent_dir: Path) -> None:
    sm = persisted("/a/b")
    path = sm.get_session_file() or ""
    assert get_default_session_dir("/a-b") == os.path.dirname(path)
    sm.move_to("/a-b")
    assert sm.get_session_file() == path
    sm.append_message(user("after"))
    sm.close()
    loaded = load_entries_from_file(path)
    assert loaded[0]["cwd"] == "/a-b" and len(loaded) == 4


def test_move_to_refuses_a_target_that_exists(agent_dir: Path) -> None:
    sm = persisted("/one")
    path = sm.get_session_file() or ""
    target_dir = Path(get_default_session_dir("/two"))
    target_dir.mkdir(parents=True)
    squatter = target_dir / os.path.basename(path)
    squatter.write_text("someone else's file\n")
    with pytest.raises(SessionTreeError, match="already exists"):
        sm.move_to("/two")
    assert squatter.read_text() == "someone else's file\n"
    assert sm.get_session_file() == path and os.path.exists(path)
    sm.append_message(user("fine"))
    sm.close()
    assert len(ids(path)) == 3


def test_move_to_another_dir_moves_and_removes_only_the_old_file(agent_dir: Path) -> None:
    sm = persisted("/one")
    old = sm.get_session_file() or ""
    sm.move_to("/two")
    new = sm.get_session_file() or ""
    assert new != old and not os.path.exists(old) and os.path.exists(new)
    assert not os.path.exists(lock_path_for(old)) and os.path.exists(lock_path_for(new))
    sm.close()
    assert len(ids(new)) == 2


@pytest.mark.parametrize("lazy", [False, True])
def test_move_to_another_agent_dir_takes_its_images_along(
    tmp_path: Path, agent_dir: Path, lazy: bool
) -> None:
    other = tmp_path / "other-agent"
    (other / "blobs").mkdir(parents=True)  # an agent dir of its own (another agent's)
    sm = SessionManager.create("/one", str(other / "sessions" / "--one--"))
    picture = "iVBORw0KGgo" + "C" * 2000
    image = [{"type": "image", "data": picture, "mimeType": "image/png"}]
    first = sm.append_message({"role": "user", "content": image, "timestamp": 1})
    ref = sm.put_blob(b"bytes handed out as a ref").ref
    sm.append_message(assistant("seen"))
    sm.append_message({"role": "user", "content": [{"type": "image", "data": ref}], "timestamp": 2})
    sm.close()
    path = sm.get_session_file() or ""
    sm = SessionManager.open(path, lazy=lazy)  # unread lines keep their refs when lazy
    sm.move_to("/two")
    moved = sm.get_session_file() or ""
    assert moved.startswith(str(agent_dir))
    sm.close()
    entries = SessionManager.open(moved, read_only=True).get_entries()
    assert entries[0]["id"] == first
    assert not any("blob:sha256:" in str(e) for e in entries), "an image stayed behind"


# -- 3. a rejected append changes nothing ----------------------------------------------------


@pytest.mark.parametrize("stage", ["memory", "before-first-write", "on-disk"])
def test_an_unserializable_entry_is_refused_and_changes_nothing(tmp_path: Path, stage: str) -> None:
    if stage == "memory":
        sm = SessionManager.in_memory("/proj")
        sm.append_message(user("q"))
    else:
        sm = SessionManager.create("/proj", str(tmp_path))
        sm.append_message(user("q"))
        if stage == "on-disk":
            sm.append_message(assistant("a"))
    leaf, count = sm.get_leaf_id(), len(sm.get_entries())
    bad = {"role": "assistant", "content": [{"type": "text", "text": "x", "tags": {1, 2}}]}
    with pytest.raises(EntryNotSerializableError) as info:
        sm.append_message(bad)
    assert isinstance(info.value, TypeError)  # callers that catch TypeError keep working
    assert info.value.key_path == "message.content[0].tags"
    assert "message.content[0].tags" in str(info.value)
    assert sm.get_leaf_id() == leaf and len(sm.get_entries()) == count
    # The session goes on: the next entry's parent is on disk too.
    sm.append_message(assistant("next"))
    path = sm.get_session_file()
    sm.close()
    if path is not None:
        assert ids(path) == [e["id"] for e in sm.get_entries()]
        assert load_entries_from_file(path)[-1]["parentId"] == leaf


def test_values_orjson_would_stringify_are_refused_too(tmp_path: Path) -> None:
    import datetime

    sm = SessionManager.in_memory("/proj")
    with pytest.raises(EntryNotSerializableError, match=r"message\.when"):
        sm.append_message({"role": "user", "content": "x", "when": datetime.datetime.now()})
    with pytest.raises(EntryNotSerializableError, match="data"):
        sm.append_custom_entry("x", data=b"bytes")


# -- 4. an append after the file was deleted or replaced -------------------------------------


def test_an_append_right_after_a_delete_recreates_the_file(tmp_path: Path) -> None:
    sm = persisted(session_dir=str(tmp_path))
    path = sm.get_session_file() or ""
    os.unlink(path)
    sm.append_message(user("after delete"))  # within the same second
    sm.close()
    assert [e["id"] for e in load_entries_from_file(path)[1:]] == [
        e["id"] for e in sm.get_entries()
    ]


@pytest.mark.parametrize("when", ["append", "flush", "close"])
def test_a_replaced_file_raises_a_conflict_at_once(tmp_path: Path, when: str) -> None:
    sm = persisted(session_dir=str(tmp_path))
    sm.append_message(user("more"))
    path = sm.get_session_file() or ""
    other = b'{"type":"session","version":3,"id":"other","timestamp":"x","cwd":"/x"}\n'
    tmp = Path(path + ".new")
    tmp.write_bytes(other)
    os.replace(tmp, path)
    with pytest.raises(SessionWriteConflictError) as info:
        if when == "append":
            sm.append_message(user("lost?"))
        elif when == "flush":
            sm.flush()
        else:
            sm.close()
    saved = info.value.saved_to
    assert saved is not None
    assert ids(saved) == [e["id"] for e in sm.get_entries()]
    assert Path(path).read_bytes() == other  # the other program's file is not overwritten
    if when != "close":
        with pytest.raises(SessionWriteConflictError):
            sm.close()


def test_flush_and_close_recreate_a_deleted_file(tmp_path: Path) -> None:
    sm = persisted(session_dir=str(tmp_path))
    path = sm.get_session_file() or ""
    os.unlink(path)
    sm.flush()
    assert ids(path) == [e["id"] for e in sm.get_entries()]
    os.unlink(path)
    sm.close()
    assert ids(path) == [e["id"] for e in sm.get_entries()]


def test_a_deleted_session_dir_is_recreated_with_its_lock(tmp_path: Path) -> None:
    directory = tmp_path / "sessions"
    sm = persisted(session_dir=str(directory))
    path = sm.get_session_file() or ""
    for name in os.listdir(directory):
        os.unlink(directory / name)
    directory.rmdir()
    sm.append_message(user("after rm -r"))
    assert os.path.exists(lock_path_for(path))
    sm.close()
    assert len(ids(path)) == 3


# -- 5. a same-length edit anywhere in the file ----------------------------------------------


def test_a_same_length_edit_far_from_the_end_stops_the_rewrite(tmp_path: Path) -> None:
    sm = SessionManager.create("/proj", str(tmp_path))
    sm.append_message(user("first words"))
    sm.append_message(assistant("a"))
    for i in range(200):
        sm.append_message(user("x" * 100 + str(i)))
    path = sm.get_session_file() or ""
    data = Path(path).read_bytes()
    edited = data.replace(b"first words", b"FIRST WORDS")
    assert len(edited) == len(data) and edited.index(b"FIRST") < len(data) - 8192
    Path(path).write_bytes(edited)  # same inode, same size
    with pytest.raises(SessionWriteConflictError):
        sm.set_session_name("renamed")
    assert Path(path).read_bytes() == edited


# -- 7. symlinks under our side-file names ---------------------------------------------------


def test_a_symlinked_lock_file_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    sm = persisted(session_dir=str(tmp_path))
    path = sm.get_session_file() or ""
    sm.close()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    os.symlink(victim, lock_path_for(path))
    with pytest.raises(SessionTreeError, match="not a regular file"):
        SessionManager.open(path)
    assert victim.read_text() == "precious\n"
    assert os.path.islink(lock_path_for(path))


def test_a_fifo_lock_file_neither_blocks_nor_is_used(tmp_path: Path) -> None:
    sm = persisted(session_dir=str(tmp_path))
    path = sm.get_session_file() or ""
    sm.close()
    os.mkfifo(lock_path_for(path))
    with pytest.raises(SessionTreeError, match="not a regular file"):
        SessionManager.open(path)
    assert stat.S_ISFIFO(os.lstat(lock_path_for(path)).st_mode)


def test_opening_a_symlinked_session_writes_the_file_it_names(tmp_path: Path) -> None:
    sm = persisted(session_dir=str(tmp_path / "real"))
    real = sm.get_session_file() or ""
    sm.close()
    link = tmp_path / "link.jsonl"
    os.symlink(real, link)
    with SessionManager.open(str(link)) as sm2:
        assert sm2.get_session_file() == real
        sm2.append_message(user("through the link"))
        sm2.set_session_name("renamed")
    assert os.path.islink(link) and len(ids(real)) == 3


# -- 8. a read-only manager writes nothing ---------------------------------------------------


def test_read_only_put_blob_raises(tmp_path: Path, agent_dir: Path) -> None:
    sm = persisted(session_dir=str(tmp_path))
    path = sm.get_session_file() or ""
    sm.close()
    ro = SessionManager.open(path, read_only=True)
    with pytest.raises(SessionTreeError, match="read-only"):
        ro.put_blob(b"\x89PNG" * 400)
    assert not (agent_dir / "blobs").exists()


# -- 14. a closed manager ---------------------------------------------------------------------


def test_every_operation_after_close_raises(tmp_path: Path) -> None:
    sm = persisted(session_dir=str(tmp_path))
    path = sm.get_session_file() or ""
    first = sm.get_entries()[0]["id"]
    sm.close()
    size = os.path.getsize(path)
    operations = [
        lambda: sm.append_message(user("late")),
        lambda: sm.append_label_change(first, "x"),
        lambda: sm.set_session_name("late"),
        lambda: sm.rewrite_entries(),
        lambda: sm.flush(),
        lambda: sm.fork(),
        lambda: sm.new_session(),
        lambda: sm.create_branched_session(first),
        lambda: sm.move_to("/elsewhere"),
        lambda: sm.ensure_on_disk(),
        lambda: sm.put_blob(b"x"),
        lambda: sm.set_session_file(path),
    ]
    for operation in operations:
        with pytest.raises(SessionClosedError):
            operation()
    assert os.path.getsize(path) == size and not os.path.exists(lock_path_for(path))
    assert len(sm.get_entries()) == 2  # reading the in-memory session still works
    sm.close()  # idempotent


def test_a_closed_in_memory_manager_refuses_appends() -> None:
    sm = SessionManager.in_memory("/proj")
    sm.close()
    with pytest.raises(SessionClosedError):
        sm.append_message(user("late"))


# -- suspected: the lock window when opening an empty file ---------------------------------


def test_opening_an_empty_file_keeps_the_lock_throughout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessiontree.storage import _locks as locks

    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    taken: list[str] = []
    real = locks.FileLock.release

    def spy_release(self: locks.FileLock) -> None:
        taken.append("release")
        real(self)

    monkeypatch.setattr(locks.FileLock, "release", spy_release)
    sm = SessionManager.open(str(path))
    assert taken == []  # never released between reading the file and writing its header
    assert load_entries_from_file(str(path))[0]["id"] == sm.get_session_id()
    sm.close()


# -- suspected: a name held only by oh-my-pi's title slot ------------------------------------


@pytest.mark.parametrize("how", ["fork", "branched"])
def test_a_title_slot_name_survives_fork_and_branching(tmp_path: Path, how: str) -> None:
    sm = persisted(session_dir=str(tmp_path))
    path = sm.get_session_file() or ""
    sm.close()
    data = Path(path).read_bytes()
    slot_line = _slot(b"Slot name")
    Path(path).write_bytes(slot_line + data)
    with SessionManager.open(path) as sm2:
        assert sm2.get_session_name() == "Slot name"
        if how == "fork":
            result = sm2.fork()
            assert result is not None
            new = result[1]
        else:
            new = sm2.create_branched_session(sm2.get_entries()[-1]["id"]) or ""
    with SessionManager.open(new, read_only=True) as reopened:
        assert reopened.get_session_name() == "Slot name"


def _slot(title: bytes) -> bytes:
    head = b'{"type":"title","v":1,"title":"' + title + b'","source":"user",'
    head += b'"updatedAt":"2026-01-01T00:00:00.000Z","pad":"'
    return head + b" " * (256 - len(head) - 3) + b'"}\n'


# -- 16. a header version that is not a number -----------------------------------------------


def _branched_file(path: Path, version: object) -> list[dict[str, object]]:
    import json

    header: dict[str, object] = {"type": "session", "id": "s1", "timestamp": "t", "cwd": "/p"}
    if version is not None:
        header["version"] = version
    entries: list[dict[str, object]] = [
        {"type": "message", "id": "a", "parentId": None, "timestamp": "t", "message": user("q")},
        {"type": "message", "id": "b", "parentId": "a", "timestamp": "t", "message": assistant()},
        {"type": "message", "id": "c", "parentId": "a", "timestamp": "t", "message": user("r")},
        {
            "type": "label",
            "id": "d",
            "parentId": "c",
            "timestamp": "t",
            "targetId": "b",
            "label": "x",
        },
    ]
    path.write_text(
        "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in [header, *entries])
    )
    return entries


@pytest.mark.parametrize("version", ["3", "abc", {"v": 3}, 3.5])
def test_a_version_that_is_not_a_number_never_rechains_the_tree(
    tmp_path: Path, version: object
) -> None:
    path = tmp_path / "s.jsonl"
    entries = _branched_file(path, version)
    before = path.read_bytes()
    with SessionManager.open(str(path)) as sm:
        assert [(e["id"], e["parentId"]) for e in sm.get_entries()] == [
            (e["id"], e["parentId"]) for e in entries
        ]
        assert sm.get_label("b") == "x"
    assert path.read_bytes() == before  # nothing to migrate, nothing rewritten


@pytest.mark.parametrize("version", [None, 1, "1", ""])
def test_a_v1_header_over_entries_with_ids_keeps_the_tree(tmp_path: Path, version: object) -> None:
    path = tmp_path / "s.jsonl"
    entries = _branched_file(path, version)
    with SessionManager.open(str(path)) as sm:
        assert [(e["id"], e["parentId"]) for e in sm.get_entries()] == [
            (e["id"], e["parentId"]) for e in entries
        ]
        assert len(sm.get_children("a")) == 2
    assert load_entries_from_file(str(path))[0]["version"] == 3


def test_version_two_as_a_string_runs_only_the_v3_step(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    _branched_file(path, "2")
    with SessionManager.open(str(path)) as sm:
        assert [e["id"] for e in sm.get_entries()] == ["a", "b", "c", "d"]
    assert load_entries_from_file(str(path))[0]["version"] == 3


# -- 17. forked workers ----------------------------------------------------------------------


def test_forked_workers_mint_distinct_session_ids_and_never_collide(tmp_path: Path) -> None:
    import multiprocessing

    from sessiontree.format import generate_entry_id, generate_session_id

    generate_session_id()  # the parent's state is set up before the fork, as with --preload
    context = multiprocessing.get_context("fork")
    queue = context.Queue()

    def worker(n: int) -> None:
        sessions = []
        for _ in range(n):
            sm = SessionManager.create("/proj", str(tmp_path))
            sm.append_message(assistant("a"))
            sm.close()
            sessions.append(sm.get_session_id())
        ids = [generate_session_id() for _ in range(200)]
        entries = [generate_entry_id(()) for _ in range(200)]
        queue.put((sessions, ids, entries))

    workers = [context.Process(target=worker, args=(20,)) for _ in range(4)]
    for process in workers:
        process.start()
    results = [queue.get(timeout=60) for _ in workers]
    for process in workers:
        process.join(timeout=60)
        assert process.exitcode == 0  # no SessionLockError, no refused file
    sessions = [s for r in results for s in r[0]]
    ids = [i for r in results for i in r[1]]
    entries = [e for r in results for e in r[2]]
    assert len(set(sessions)) == len(sessions) == 80
    assert len(set(ids)) == len(ids)
    # Entry ids are 32 random bits, unique within a session: across 800 of them a chance
    # collision happens about once in 13,500 runs. Workers that shared the parent's
    # random state would repeat each other's 200 ids.
    assert len(entries) - len(set(entries)) <= 2
    assert len([n for n in os.listdir(tmp_path) if n.endswith(".jsonl")]) == 80, os.listdir(
        tmp_path
    )


# -- 18. a project dir whose name is not UTF-8 -----------------------------------------------


def test_a_project_dir_that_is_not_utf8_works_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", None)
    monkeypatch.setenv("TMUX_PANE", "%3")  # so a breadcrumb is written and followed
    raw = os.fsencode(tmp_path) + b"/proj-\xff\xfe"
    os.mkdir(raw)
    cwd = os.fsdecode(raw)
    sm = SessionManager.create(cwd)
    sm.append_message(user("q"))
    sm.append_message(assistant("a"))
    path = sm.get_session_file() or ""
    sm.close()
    assert os.fsencode(path).count(b"\xff\xfe") == 1
    with SessionManager.continue_recent(cwd) as again:
        assert again.get_session_file() == path and again.get_cwd() == cwd
        again.append_message(user("more"))
    assert [s.path for s in SessionManager.list(cwd)] == [path]
    assert load_entries_from_file(path)[0]["cwd"] == cwd


# -- 6. the outside-dir registry ---------------------------------------------------------------


def test_two_processes_registering_at_once_lose_no_dir(tmp_path: Path, agent_dir: Path) -> None:
    import multiprocessing

    from sessiontree.layout import register_session_dir, registered_session_dirs

    dirs = [tmp_path / f"outside-{i}" for i in range(40)]
    for d in dirs:
        d.mkdir()
    context = multiprocessing.get_context("fork")
    start = context.Event()

    def worker(mine: list[Path]) -> None:
        start.wait()
        for d in mine:
            register_session_dir(str(d / "s.jsonl"), str(agent_dir))

    workers = [context.Process(target=worker, args=(dirs[i::4],)) for i in range(4)]
    for process in workers:
        process.start()
    start.set()
    for process in workers:
        process.join(timeout=60)
        assert process.exitcode == 0
    assert sorted(registered_session_dirs(str(agent_dir))) == sorted(
        os.path.realpath(d) for d in dirs
    )


def test_opening_a_session_elsewhere_registers_its_dir(tmp_path: Path, agent_dir: Path) -> None:
    from sessiontree.layout import registered_session_dirs

    # Written by another agent (not by us), then opened here with the agent's blobs.
    elsewhere = tmp_path / "elsewhere"
    sm = persisted(session_dir=str(elsewhere))
    path = sm.get_session_file() or ""
    sm.close()
    (agent_dir / "external-session-dirs").unlink()
    with SessionManager.open(path):
        pass
    assert registered_session_dirs(str(agent_dir)) == [os.path.realpath(elsewhere)]


def test_a_torn_registry_line_does_not_swallow_the_next_dir(
    tmp_path: Path, agent_dir: Path
) -> None:
    from sessiontree.layout import read_registry, register_session_dir

    agent_dir.mkdir(parents=True, exist_ok=True)
    (agent_dir / "external-session-dirs").write_bytes(b"/home/someone/pro")  # a crash mid-line
    target = tmp_path / "new-dir"
    target.mkdir()
    register_session_dir(str(target / "s.jsonl"), str(agent_dir))
    dirs, torn, _ = read_registry(str(agent_dir))
    assert os.path.realpath(target) in dirs and torn == b""


# -- hunt: a new session's name that is taken ------------------------------------------------


@pytest.mark.parametrize("how", ["fork", "branched", "persist_copy"])
@pytest.mark.parametrize("victim_open", [False, True])
def test_a_new_session_whose_name_is_taken_leaves_the_file_there_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, victim_open: bool
) -> None:
    # Two writers whose ids collide (same millisecond, same pid bits, same sequence):
    # the name is taken, by a closed session or by one being written. The refused copy
    # must not take the other session with it.
    victim = persisted(session_dir=str(tmp_path))
    victim_path = victim.get_session_file() or ""
    if not victim_open:
        victim.close()
    before = Path(victim_path).read_bytes()
    sm = persisted(session_dir=str(tmp_path))
    own = sm.get_session_file() or ""
    monkeypatch.setattr("sessiontree.session._manager_copies.session_path", lambda *_: victim_path)
    with pytest.raises(SessionTreeError):
        if how == "fork":
            sm.fork()
        elif how == "branched":
            sm.create_branched_session(sm.get_entries()[-1]["id"])
        else:
            sm.persist_copy(str(tmp_path))
    assert Path(victim_path).read_bytes() == before
    # The manager stays on its own session, unchanged, and goes on.
    assert sm.get_session_file() == own
    sm.append_message(user("on"))
    sm.close()
    assert len(ids(own)) == 3
    if victim_open:
        victim.append_message(user("victim goes on"))
        victim.close()
        assert len(ids(victim_path)) == 3


def test_a_fork_whose_directory_fsync_fails_leaves_no_half_made_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from sessiontree._util import fs as _fs

    sm = persisted(session_dir=str(tmp_path))
    own = sm.get_session_file() or ""

    def failing(path: str) -> None:
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(_fs, "fsync_directory", failing)
    with pytest.raises(SessionTreeError):
        sm.fork()
    monkeypatch.undo()
    assert [n for n in os.listdir(tmp_path) if n.endswith(".jsonl")] == [os.path.basename(own)]
    assert sm.get_session_file() == own
    sm.close()


def test_a_failed_fork_leaves_a_file_another_program_made_there_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fork's write fails after another program has put a file at its new path (the
    # path was free when the fork looked): that file is not the fork's to remove.
    from sessiontree.storage import _file as file_module

    sm = persisted(session_dir=str(tmp_path))
    theirs = b"another program's bytes\n"
    made: list[str] = []

    def failing(path: str, chunks: Any) -> Any:
        for _ in chunks:
            pass
        Path(path).write_bytes(theirs)
        made.append(path)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(file_module, "atomic_write", failing)
    with pytest.raises(SessionTreeError):
        sm.fork()
    monkeypatch.undo()
    assert made and Path(made[0]).read_bytes() == theirs
    sm.close()


# -- hunt: lines no reader can parse, dropped by a rewrite ----------------------------------

_BROKEN = (
    b'{"type":"message","id":"b2","parentId":"b1","timestamp":"t","message":'
    b'{"role":"assistant","content":[{"type":"text","text":"the only copy of this"}]\n'
)


def _with_broken_line(tmp_path: Path) -> tuple[str, bytes]:
    sm = persisted(session_dir=str(tmp_path / "s"))
    path = sm.get_session_file() or ""
    sm.close()
    lines = Path(path).read_bytes().splitlines(keepends=True)
    data = b"".join([lines[0], lines[1], _BROKEN, *lines[2:]])
    Path(path).write_bytes(data)
    return path, data


@pytest.mark.parametrize("how", ["name", "rewrite", "move"])
def test_a_rewrite_keeps_the_lines_it_cannot_parse_in_a_backup(
    tmp_path: Path, agent_dir: Path, how: str
) -> None:
    # A rewrite is made from memory, and a line no reader can parse is not in memory:
    # its bytes (someone's text) are kept in `<file>.bak` before the file is replaced.
    path, data = _with_broken_line(tmp_path)
    with SessionManager.open(path) as sm:
        if how == "name":
            sm.set_session_name("renamed")
        elif how == "rewrite":
            sm.rewrite_entries()
        else:
            sm.move_to("/somewhere/else")
        new = sm.get_session_file() or ""
    backups = [n for n in os.listdir(os.path.dirname(path)) if ".bak" in n]
    assert len(backups) == 1 and backups[0].startswith(os.path.basename(path))
    assert Path(os.path.dirname(path), backups[0]).read_bytes() == data
    assert b"the only copy of this" not in Path(new).read_bytes()
    # Only once: the file now holds what memory holds.
    with SessionManager.open(new) as again:
        again.set_session_name("again")
    assert len([n for n in os.listdir(os.path.dirname(path)) if ".bak" in n]) == 1


def test_migrate_keeps_the_lines_it_drops_in_a_backup(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from sessiontree.cli import app

    path = tmp_path / "v2.jsonl"
    data = (
        b'{"type":"session","version":2,"id":"0cb00000000000aa","timestamp":"t","cwd":"/p"}\n'
        b'{"type":"message","id":"b1","parentId":null,"timestamp":"t","message":'
        b'{"role":"user","content":"q","timestamp":1}}\n' + _BROKEN
    )
    path.write_bytes(data)
    result = CliRunner().invoke(app, ["migrate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    backup = tmp_path / "v2.jsonl.bak"
    assert backup.read_bytes() == data
    changes = json.loads(result.stdout)["files"][0]["changes"]
    assert f"dropped 1 unparseable line(s) (the file as it was is kept as {backup})" in changes
    assert load_entries_from_file(str(path))[0]["version"] == 3


# -- hunt: another program writes while a rewrite or a move is being written -----------------


OTHER_LINE = (
    b'{"type":"custom","customType":"other","id":"ffff0000","parentId":null,"timestamp":"t"}\n'
)


@pytest.mark.parametrize("how", ["name", "move"])
@pytest.mark.parametrize("what", ["append", "delete"])
def test_a_change_while_the_new_file_is_written_is_answered(
    tmp_path: Path, agent_dir: Path, monkeypatch: pytest.MonkeyPatch, how: str, what: str
) -> None:
    # The whole-file check runs before the new file is written; writing a big one takes
    # a while. Another program's line appended meanwhile went into the replaced (or
    # removed) inode.
    from sessiontree.session import _file as session_file
    from sessiontree.storage import _base as storage_base

    sm = persisted(session_dir=str(tmp_path / "s"))
    path = sm.get_session_file() or ""
    real = session_file.write_whole

    def meanwhile(storage: object, target: str, chunks: object) -> object:
        def stream() -> object:
            for n, chunk in enumerate(chunks):  # type: ignore[attr-defined]
                if n == 0 and ".conflict-" not in target and ".bak" not in target:
                    if what == "append" and os.path.exists(path):
                        with open(path, "ab") as f:
                            f.write(OTHER_LINE)
                    elif what == "delete" and os.path.exists(path):
                        os.unlink(path)
                yield chunk

        return real(storage, target, stream())  # type: ignore[arg-type]

    monkeypatch.setattr(session_file, "write_whole", meanwhile)  # a move, a rescue
    monkeypatch.setattr(storage_base, "write_whole", meanwhile)  # a rewrite (replace_checked)
    if what == "append":
        with pytest.raises(SessionWriteConflictError) as info:
            if how == "name":
                sm.set_session_name("renamed")
            else:
                sm.move_to("/elsewhere")
        monkeypatch.undo()
        assert OTHER_LINE in Path(path).read_bytes()  # the other program's line is there
        saved = info.value.saved_to
        assert saved is not None and ids(saved) == [e["id"] for e in sm.get_entries()]
        if how == "move":
            moved = Path(get_default_session_dir("/elsewhere")) / os.path.basename(path)
            assert not moved.exists()
        with pytest.raises(SessionWriteConflictError):
            sm.close()
        return
    # A delete meanwhile: the policy for a deleted file, the file is (re)written from memory.
    if how == "name":
        sm.set_session_name("renamed")
    else:
        sm.move_to("/elsewhere")
    monkeypatch.undo()
    new = sm.get_session_file() or ""
    sm.close()
    assert ids(new) == [e["id"] for e in sm.get_entries()]


def test_a_rewrite_whose_directory_fsync_fails_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by the model: the rewrite's own temp file stayed when the fsync of its
    # directory failed.
    import errno

    from sessiontree import SessionPersistenceError
    from sessiontree._util import fs as _fs

    sm = persisted(session_dir=str(tmp_path / "s"))
    path = sm.get_session_file() or ""
    before = Path(path).read_bytes()

    def failing(directory: str) -> None:
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(_fs, "fsync_directory", failing)
    with pytest.raises(SessionPersistenceError):
        sm.set_session_name("renamed")
    monkeypatch.undo()
    assert [n for n in os.listdir(tmp_path / "s") if n.endswith(".tmp")] == []
    assert Path(path).read_bytes() == before
    with pytest.raises(SessionPersistenceError):
        sm.close()


def test_a_rewrite_of_a_session_file_that_is_a_symlink_writes_at_its_target(
    agent_dir: Path, tmp_path: Path
) -> None:
    """A session file linked into the store from another disk: a rewrite (a rename) and an
    append write the file the link names, the link stays a link, no entry is lost, and
    nothing is left beside either name."""
    sm = persisted()
    path = Path(sm.get_session_file() or "")
    sm.close()
    elsewhere = tmp_path / "disk" / path.name
    elsewhere.parent.mkdir()
    os.replace(path, elsewhere)
    path.symlink_to(elsewhere)
    before = ids(str(path))
    sm = SessionManager.open(str(path))
    sm.set_session_name("renamed")
    sm.append_message(user("after"))
    sm.close()
    assert path.is_symlink() and os.readlink(path) == str(elsewhere)
    assert ids(str(elsewhere))[: len(before)] == before
    assert len(ids(str(elsewhere))) > len(before)
    assert SessionManager.open(str(path), read_only=True).get_session_name() == "renamed"
    assert sorted(p.name for p in elsewhere.parent.iterdir()) == [elsewhere.name]
    beside = {p.name for p in path.parent.iterdir()} - {path.name}
    assert not [n for n in beside if path.stem in n and not n.endswith("writer-lock")]
