"""Forked processes and what they inherit.

A child made by `os.fork` (or a `multiprocessing` fork process or pool) holds copies
of its parent's managers, locks, writers and database connections. Whatever it does
with them (read, try to write, flush, close, return, `sys.exit`, run pool tasks), the
parent keeps its writer lock, goes on appending and flushing without a conflict, and
its file is intact; a write through an inherited manager raises InheritedHandleError
and changes nothing. Parents here are real processes (a script run by the test), so
the children exit as programs do: at-exit handlers, finalizers and all.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sessiontree import (
    FileSessionStorage,
    HistoryStorage,
    InheritedHandleError,
    MemorySessionStorage,
    SessionLockError,
    SessionManager,
)
from sessiontree.storage import lock_path_for
from tests.pg_support import fresh_schema

TIMEOUT = 60.0

# The parent: writes a session, forks a child that does what `mode` says with the
# inherited manager, then (told to by the test) goes on writing. Every child appends
# what it saw to the report file, one JSON line each.
PARENT = r'''
import hashlib, json, multiprocessing, os, sys
from sessiontree import InheritedHandleError, SessionManager

mode, session_dir, report = sys.argv[1:4]
storage = None
if len(sys.argv) > 4:
    from sessiontree.storage.postgres import PostgresSessionStorage
    storage = PostgresSessionStorage(
        sys.argv[4], schema=sys.argv[5], root=os.environ["PI_CODING_AGENT_DIR"]
    )


def msg(role, text):
    if role == "user":
        return {"role": "user", "content": text, "timestamp": 1}
    return {"role": "assistant", "content": [{"type": "text", "text": text}], "timestamp": 2}


sm = SessionManager.create("/proj", session_dir=session_dir, storage=storage)
sm.append_message(msg("user", "first"))
sm.append_message(msg("assistant", "second"))
sm.flush()
path = sm.get_session_file()
parent = os.getpid()


def content():
    if storage is not None:
        return storage.read_text(path).encode()
    with open(path, "rb") as f:
        return f.read()


print(json.dumps({"path": path, "pid": parent,
                  "digest": hashlib.sha256(content()).hexdigest()}), flush=True)


def child(n=0):
    """Reads work; an append, a flush, a rename, a new session raise; nothing changes."""
    seen = {"pid": os.getpid(), "entries": len(sm.get_entries()),
            "context": len(sm.build_session_context().messages)}
    for name, op in [
        ("append", lambda: sm.append_message(msg("user", "from the child"))),
        ("flush", sm.flush),
        ("rename", lambda: sm.set_session_name("the child's name", "user")),
        ("new_session", sm.new_session),
    ]:
        try:
            op()
            seen[name] = "no error"
        except InheritedHandleError as exc:
            seen[name] = "refused" if exc.owner_pid == parent and path in str(exc) else str(exc)
        except Exception as exc:
            seen[name] = f"{type(exc).__name__}: {exc}"
    seen["entries after"] = len(sm.get_entries())
    seen["file"] = sm.get_session_file() == path
    if storage is not None:
        seen["read"] = len(content())  # the storage's pool in the child is the child's
    with open(report, "a") as f:
        f.write(json.dumps(seen) + "\n")
    return n


def append_in_child(n):
    sm.append_message(msg("user", f"task {n}"))


forker = multiprocessing.get_context("fork")
if mode in ("returns", "sys.exit", "close"):
    pid = os.fork()
    if pid == 0:
        child()
        if mode == "sys.exit":
            sys.exit(0)
        if mode == "close":
            sm.close()
            if storage is not None:
                storage.close()
        # Else (and after a close) the child runs off the end of the script below.
    else:
        _, status = os.waitpid(pid, 0)
        assert status == 0, status
elif mode == "grandchild":
    # A child of a child: the grandchild does its worst and exits as a program does,
    # then the child runs off the end of the script (both at-exit handlers run).
    pid = os.fork()
    if pid == 0:
        grandchild = os.fork()
        if grandchild == 0:
            child()
            sys.exit(0)
        _, status = os.waitpid(grandchild, 0)
        assert status == 0, status
    else:
        _, status = os.waitpid(pid, 0)
        assert status == 0, status
elif mode == "mp-process":
    process = forker.Process(target=child)
    process.start()
    process.join()
    assert process.exitcode == 0, process.exitcode
elif mode == "mp-pool":
    with forker.Pool(2) as pool:
        assert pool.map(child, range(4)) == [0, 1, 2, 3]
        try:
            pool.apply(append_in_child, (9,))
            outcome = "no error"
        except InheritedHandleError as exc:  # pickled back from the worker
            outcome = "refused" if exc.owner_pid == parent else str(exc)
        with open(report, "a") as f:
            f.write(json.dumps({"pool append": outcome}) + "\n")
        pool.close()
        pool.join()  # the workers end as pool workers do
elif mode == "outlives":
    pid = os.fork()
    if pid == 0:
        sys.stdin.read()  # lives on until the test closes our stdin
        os._exit(0)
    print(json.dumps({"child": pid}), flush=True)
    os._exit(0)  # the parent dies without releasing anything (a crash)

if os.getpid() == parent:
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(3):
        sm.append_message(msg("user" if i % 2 == 0 else "assistant", f"after {i}"))
        sm.flush()
    sm.close()
    if storage is not None:
        storage.close()
    print("done", flush=True)
'''


class Parent:
    """The parent script, run as a process the test talks to through its stdin/stdout."""

    def __init__(self, tmp_path: Path, mode: str, pg: tuple[str, str] | None = None) -> None:
        script = tmp_path / "parent.py"
        script.write_text(PARENT)
        self.report = tmp_path / "report.jsonl"
        agent = os.environ["PI_CODING_AGENT_DIR"]
        self.session_dir = os.path.join(agent, "sessions", "--proj--")
        args = [sys.executable, str(script), mode, self.session_dir, str(self.report)]
        self.proc = subprocess.Popen(
            [*args, *(pg or ())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its children too are ended by `close`
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.errors: list[str] = []
        self.readers = [
            threading.Thread(target=self._pump, daemon=True),
            threading.Thread(target=self._drain, daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put("<eof>")

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        self.errors.extend(self.proc.stderr)

    def line(self) -> str:
        try:
            return self.lines.get(timeout=TIMEOUT)
        except queue.Empty:
            self.proc.kill()
            raise AssertionError(f"the parent said nothing for {TIMEOUT} s") from None

    def json(self) -> dict[str, Any]:
        text = self.line()
        assert text.startswith("{"), (text, self.stderr())
        value: dict[str, Any] = json.loads(text)
        return value

    def expect(self, word: str) -> None:
        got = self.line()
        assert got == word, (got, self.stderr())

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def finish(self) -> None:
        assert self.proc.wait(TIMEOUT) == 0, self.stderr()
        assert "Traceback" not in self.stderr() and "Error" not in self.stderr(), self.stderr()

    def stderr(self) -> str:
        time.sleep(0.05)  # what the process wrote last is read by the drain thread
        return "".join(self.errors)

    def reports(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.report.read_text().splitlines()]

    def close(self) -> None:
        """Kill it if it still runs; close its pipes (ending a child it left: its stdin)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        end_group(self.proc.pid)  # a child left behind (a test that failed midway)
        for reader in self.readers:
            reader.join(TIMEOUT)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def end_group(pgid: int) -> None:
    """Kill what is left of a process group this test started (nothing, normally)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextmanager
def parent_process(
    tmp_path: Path, mode: str, pg: tuple[str, str] | None = None
) -> Iterator[Parent]:
    parent = Parent(tmp_path, mode, pg)
    try:
        yield parent
    finally:
        parent.close()


@contextmanager
def backend(name: str) -> Iterator[tuple[Any, tuple[str, str] | None]]:
    """(storage for the test's own checks, the parent's PostgreSQL url and schema)."""
    if name == "file":
        yield FileSessionStorage(), None
        return
    from sessiontree.storage.postgres import PostgresSessionStorage

    with fresh_schema() as (url, schema):
        storage = PostgresSessionStorage(
            url, schema=schema, root=os.environ["PI_CODING_AGENT_DIR"], max_size=2
        )
        try:
            yield storage, (url, schema)
        finally:
            storage.close()


def digest(storage: Any, path: str) -> str:
    import hashlib

    return hashlib.sha256(storage.read_text(path).encode()).hexdigest()


CHILD_SAW = {
    "entries": 2,
    "context": 2,
    "append": "refused",
    "flush": "refused",
    "rename": "refused",
    "new_session": "refused",
    "entries after": 2,
    "file": True,
}


@pytest.mark.parametrize("store", ["file", "postgres"])
@pytest.mark.parametrize(
    "mode", ["returns", "sys.exit", "close", "grandchild", "mp-process", "mp-pool"]
)
def test_a_forked_child_leaves_its_parents_session_alone(
    tmp_path: Path, mode: str, store: str
) -> None:
    with backend(store) as (storage, pg), parent_process(tmp_path, mode, pg) as parent:
        first = parent.json()
        path = first["path"]
        parent.expect("ready")  # the child has done its worst and exited
        # The parent still holds its lock: a second writer (this process) is refused.
        if store == "file":
            assert os.path.exists(lock_path_for(path))
        with pytest.raises(SessionLockError):
            SessionManager.open(path, storage=storage)
        assert digest(storage, path) == first["digest"]  # the child wrote nothing
        parent.send("go")
        parent.expect("done")
        parent.finish()  # appends and flushes went well: no conflict
        with SessionManager.open(path, storage=storage, read_only=True) as sm:
            entries = sm.get_entries()
        texts = [e["message"]["content"] for e in entries]
        texts = [t if isinstance(t, str) else t[0]["text"] for t in texts]
        assert texts == ["first", "second", "after 0", "after 1", "after 2"]
        assert [e["parentId"] for e in entries[1:]] == [e["id"] for e in entries[:-1]]
        assert sm.get_session_name() is None
        reports = parent.reports()
        pool = [r for r in reports if "pool append" in r]
        children = [r for r in reports if "pool append" not in r]
        assert len(children) == (4 if mode == "mp-pool" else 1)
        for seen in children:
            assert seen["pid"] != first["pid"]
            assert {k: seen[k] for k in CHILD_SAW} == CHILD_SAW
            if pg is not None:
                assert seen["read"] > 0
        assert pool == ([{"pool append": "refused"}] if mode == "mp-pool" else [])
    if store == "file":
        left = sorted(os.listdir(os.path.dirname(path)))
        assert left == [os.path.basename(path)], left  # no conflict copy, no lock file
        assert not (Path(os.environ["PI_CODING_AGENT_DIR"]) / "rescue").exists()


@pytest.mark.parametrize("store", ["file", "postgres"])
def test_a_child_that_outlives_its_parent_does_not_keep_the_session_locked(
    tmp_path: Path, store: str
) -> None:
    """The parent dies (no release: a crash) while a child it forked lives on: the lock
    went with the parent; the child never held it."""
    with backend(store) as (storage, pg), parent_process(tmp_path, "outlives", pg) as parent:
        path = parent.json()["path"]
        child = parent.json()["child"]
        assert parent.proc.wait(TIMEOUT) == 0
        assert Path(f"/proc/{child}").exists()  # still alive
        deadline = time.monotonic() + 10  # the server notices the closed socket at once
        while True:
            try:
                sm = SessionManager.open(path, storage=storage)
                break
            except SessionLockError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        assert Path(f"/proc/{child}").exists()
        sm.append_message({"role": "user", "content": "a new writer", "timestamp": 3})
        sm.close()
        assert parent.proc.stdin is not None
        parent.proc.stdin.close()  # the child ends


# -- in this process: one fork, a child that reports through a pipe --------------------


def in_child(work: Any) -> str:
    """Run `work()` in a forked child; what it returned (or raised) as text. The child
    ends with os._exit: the test process's at-exit handlers are not its to run."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            try:
                result = repr(work())
            except BaseException as exc:
                result = f"{type(exc).__name__}: {exc}"
            os.write(write, result.encode())
        finally:
            os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode()


@pytest.mark.parametrize("store", ["file", "memory"])
def test_a_storage_writer_refuses_writes_in_a_forked_child(tmp_path: Path, store: str) -> None:
    storage = FileSessionStorage() if store == "file" else MemorySessionStorage()
    path = str(tmp_path / "s.jsonl")
    storage.ensure_dir(str(tmp_path))
    writer = storage.open_writer(path)
    writer.write_line('{"a":1}\n')
    said = in_child(lambda: writer.write_line('{"child":1}\n'))
    assert said.startswith("InheritedHandleError") and path in said
    said = in_child(writer.fsync)
    assert said.startswith("InheritedHandleError")
    writer.write_line('{"b":2}\n')  # the parent's writer goes on
    writer.close()
    assert storage.read_text(path) == '{"a":1}\n{"b":2}\n'


def test_an_in_memory_session_is_the_childs_own(tmp_path: Path) -> None:
    sm = SessionManager.in_memory("/proj")
    sm.append_message({"role": "user", "content": "hi", "timestamp": 1})

    def work() -> int:
        sm.append_message({"role": "user", "content": "in the child", "timestamp": 2})
        return len(sm.get_entries())

    assert in_child(work) == "2"
    assert len(sm.get_entries()) == 1


def test_a_child_may_copy_an_inherited_session_into_a_session_of_its_own(
    tmp_path: Path,
) -> None:
    """Reading is allowed: `persist_copy` makes a new session (the child's), while the
    inherited one stays the parent's."""
    sm = SessionManager.create("/proj", session_dir=str(tmp_path / "s"))
    sm.append_message({"role": "user", "content": "hi", "timestamp": 1})
    sm.append_message({"role": "assistant", "content": [], "timestamp": 2})
    path = sm.get_session_file()

    def work() -> str | None:
        copy = sm.persist_copy(str(tmp_path / "copies"))
        copy.append_message({"role": "user", "content": "more", "timestamp": 3})
        copy.close()
        return copy.get_session_file()

    copied = in_child(work).strip("'")
    assert os.path.dirname(copied) == str(tmp_path / "copies")
    with SessionManager.open(copied, read_only=True) as copy:
        assert len(copy.get_entries()) == 3
    sm.append_message({"role": "user", "content": "the parent goes on", "timestamp": 4})
    sm.close()
    assert path is not None
    with SessionManager.open(path, read_only=True) as again:
        assert len(again.get_entries()) == 3


# -- prompt history -------------------------------------------------------------------

HISTORY_PARENT = r"""
import json, os, sys
from sessiontree import HistoryStorage, InheritedHandleError

db = sys.argv[1]
history = HistoryStorage.open(db)
history.add("before the fork")
history.flush()
parent = os.getpid()
pid = os.fork()
if pid == 0:
    seen = {}
    for name, op in [
        ("add", lambda: history.add("through the parent's")),
        ("flush", history.flush),
        ("search", lambda: history.search("before", 10)),
        ("recent", lambda: history.get_recent(10)),
    ]:
        try:
            op()
            seen[name] = "no error"
        except InheritedHandleError as exc:
            seen[name] = "refused" if exc.owner_pid == parent else str(exc)
    own = HistoryStorage.open(db)
    seen["own"] = own is not history
    own.add("from the child")
    own.flush()
    seen["child sees"] = [e.prompt for e in own.search("child", 10)]
    print(json.dumps(seen), flush=True)
    # runs off the end: the at-exit handlers close both (the inherited one: untouched)
else:
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
    history.add("after the fork")
    history.flush()
    print(json.dumps(sorted(e.prompt for e in history.get_recent(10))), flush=True)
    history.close()
"""


def test_a_forked_child_neither_uses_nor_closes_the_parents_history(tmp_path: Path) -> None:
    script = tmp_path / "history_parent.py"
    script.write_text(HISTORY_PARENT)
    db = tmp_path / "history.db"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT)  # a child stuck in flush: fails
    finally:
        end_group(proc.pid)
        proc.wait()
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
    child, parent = (json.loads(line) for line in stdout.splitlines())
    assert child == {
        "add": "refused",
        "flush": "refused",
        "search": "refused",
        "recent": "refused",
        "own": True,
        "child sees": ["from the child"],
    }
    assert parent == ["after the fork", "before the fork", "from the child"]
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    with HistoryStorage(db) as history:
        assert len(history.get_recent(10)) == 3


def test_a_forked_child_does_not_use_the_parents_content_index(tmp_path: Path) -> None:
    from sessiontree.search import ContentIndex

    agent = Path(os.environ["PI_CODING_AGENT_DIR"])
    agent.mkdir(parents=True)
    index = ContentIndex.open(str(agent))
    assert index is not None
    try:
        said = in_child(lambda: index.refresh([]))
        assert said.startswith("InheritedHandleError"), said
        assert in_child(index.close) == "None"  # lets go of the child's copy only
        index.refresh([])  # the parent's connection still works
    finally:
        index.close()


# -- PostgreSQL: pools and connections ---------------------------------------------------


def test_a_forked_child_cannot_use_a_pool_the_caller_owns(tmp_path: Path) -> None:
    from psycopg_pool import ConnectionPool

    from sessiontree.storage.postgres import PostgresSessionStorage

    with fresh_schema() as (url, schema):
        with ConnectionPool(url, min_size=1, max_size=2, kwargs={"autocommit": True}) as pool:
            storage = PostgresSessionStorage(pool, schema=schema, root=str(tmp_path))
            storage.ensure_dir(str(tmp_path / "d"))
            said = in_child(lambda: storage.exists(str(tmp_path / "d")))
            assert said.startswith("InheritedHandleError") and "pool" in said, said
            assert in_child(storage.close) == "None"
            assert storage.exists(str(tmp_path / "d"))  # the parent's pool is untouched
            storage.close()


def test_a_forked_child_gets_a_pool_of_its_own(tmp_path: Path) -> None:
    """The storage made its pool: a child's first operation makes the child's; the
    parent's connection (and its session on the server) is never used or closed."""
    from sessiontree.storage.postgres import PostgresSessionStorage

    with fresh_schema() as (url, schema):
        storage = PostgresSessionStorage(
            url, schema=schema, root=str(tmp_path), min_size=1, max_size=1
        )

        def backend() -> int:
            row = storage._db.run(str(tmp_path), lambda c, _: c.execute("SELECT pg_backend_pid()"))
            return int(row.fetchone()[0])

        try:
            storage.ensure_dir(str(tmp_path / "d"))
            storage.write_text(str(tmp_path / "d" / "f"), "parent\n")
            before = backend()

            def work() -> tuple[str, bool]:
                storage.write_text(str(tmp_path / "d" / "g"), "child\n")
                text = storage.read_text(str(tmp_path / "d" / "f"))
                other = backend() != before
                storage.close()
                return text, other

            assert in_child(work) == repr(("parent\n", True))
            assert backend() == before  # the same connection, alive
            assert storage.read_text(str(tmp_path / "d" / "g")) == "child\n"
            storage.write_text(str(tmp_path / "d" / "f"), "parent again\n")
            assert storage.read_text(str(tmp_path / "d" / "f")) == "parent again\n"
        finally:
            storage.close()


def test_the_error_names_the_owner_and_survives_pickling() -> None:
    """A pool worker's error reaches the parent pickled: all of it."""
    import pickle

    error = InheritedHandleError("/s/a.jsonl", 4242)
    assert "/s/a.jsonl" in str(error) and "4242" in str(error)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is InheritedHandleError
    assert (again.path, again.owner_pid, str(again)) == (error.path, 4242, str(error))


# A thread of the parent holds a process-wide lock at the moment another thread forks
# (a listing, a put_blob, a history open in flight): the child has no such thread, so a
# lock copied held is held forever there. The child then does what the lock guards.
LOCK_HELD_AT_FORK = r"""
import importlib, os, sys, threading, time
from sessiontree import HistoryStorage, SessionManager

module, attribute, use = sys.argv[1:4]
owner = importlib.import_module(module)
for part in attribute.split(".")[:-1]:
    owner = getattr(owner, part)
name = attribute.split(".")[-1]
sm = SessionManager.create("/proj")
sm.append_message({"role": "user", "content": "u", "timestamp": 1})
sm.append_message({"role": "assistant", "content": [], "timestamp": 2})
holding, release = threading.Event(), threading.Event()


def in_flight():
    with getattr(owner, name):  # where the other thread is when the fork comes
        holding.set()
        release.wait()


threading.Thread(target=in_flight, daemon=True).start()
holding.wait()
pid = os.fork()
if pid == 0:
    if use == "list":
        done = len(SessionManager.list("/proj")) == 1
    elif use == "put_blob":
        done = len(SessionManager.in_memory("/x").put_blob(b"image").hash) == 64
    elif use == "append":
        done = bool(SessionManager.in_memory("/x").append_message(
            {"role": "user", "content": "u", "timestamp": 1}))
    else:
        done = HistoryStorage.open(os.path.join(sys.argv[4], "h.db")) is not None
    os._exit(0 if done else 3)
release.set()
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    finished, status = os.waitpid(pid, os.WNOHANG)
    if finished:
        print("exit", os.waitstatus_to_exitcode(status), flush=True)
        sys.exit(0)
    time.sleep(0.02)
os.kill(pid, 9)
os.waitpid(pid, 0)
print("stuck", flush=True)
"""


@pytest.mark.parametrize(
    ("module", "attribute", "use"),
    [
        ("sessiontree.listing._cache", "lock", "list"),
        ("sessiontree.storage._pins", "_lock", "put_blob"),
        ("sessiontree.format._entries", "_snowflake_lock", "append"),
        ("sessiontree.history._history", "HistoryStorage._registry_lock", "history"),
    ],
)
def test_a_child_forked_while_another_thread_holds_a_lock_is_not_stuck(
    tmp_path: Path, agent_dir: Path, module: str, attribute: str, use: str
) -> None:
    script = tmp_path / "held.py"
    script.write_text(LOCK_HELD_AT_FORK)
    done = subprocess.run(
        [sys.executable, str(script), module, attribute, use, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        start_new_session=True,
        check=False,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "exit 0"), done.stderr


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc (Linux)")
def test_a_program_spawned_not_forked_inherits_no_lock_pin_or_database(agent_dir: Path) -> None:
    """`subprocess` (with `close_fds=False` too) and `os.posix_spawn` run no fork hook:
    what keeps a spawned program from holding the parent's writer lock, pin or databases
    after the parent is gone is that every descriptor sessiontree opens is close-on-exec."""
    from sessiontree.search import ContentIndex

    def descriptors() -> dict[int, str]:
        found = {}
        for name in os.listdir("/proc/self/fd"):
            try:
                found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
            except OSError:
                continue  # the listing's own descriptor, closed meanwhile
        return found

    before = descriptors()
    sm = SessionManager.create("/proj")
    sm.append_message({"role": "user", "content": "u", "timestamp": 1})
    sm.append_message({"role": "assistant", "content": [], "timestamp": 2})  # locked
    sm.put_blob(b"pinned" * 20)
    history = HistoryStorage.open()
    history.add("a prompt")
    assert len(SessionManager.list("/proj")) == 1  # the listing cache
    index = ContentIndex.open(str(agent_dir))
    assert index is not None
    opened = {fd: target for fd, target in descriptors().items() if fd not in before}
    assert any(t.endswith(".writer-lock") for t in opened.values())
    assert any(t.endswith(".pin") for t in opened.values())
    inherited = []
    for fd, target in opened.items():
        try:
            if os.get_inheritable(fd):
                inherited.append(target)
        except OSError:
            continue  # closed since it was listed
    assert inherited == []
    index.close()
    history.close()
    sm.close()
