"""A stateful model of the manager on real files, with interference and injected faults.

hypothesis drives every public operation in random order (appends of every entry
type, values JSON cannot hold, branching, labels, names, rewrites, flush, close and
reopen, moves between cwds whose dir names collide, fork, branched and new
sessions, copies of every kind between two agent dirs), interleaved with another
program that appends to, replaces, deletes, edits (same length, anywhere) or
truncates the session file, with forked children that do what they like with the
manager they inherit, with a peer (pi's way, or oh-my-pi's under its lock) that appends
a line at a random moment of every rewrite (the line must be in a file right after),
with I/O faults (ENOSPC, EIO, EACCES, EROFS on write, fsync,
rename or open) injected into the calls the package makes, and with other managers
that hold images no file names yet while `gc --delete` runs an hour later (issue
21.2), with index-first managers whose file another program deletes before such a gc,
and with copies written outside every agent dir (`export -o`, `repair -o`) whose source
then goes before a gc (see each family's block for its own checks). After every manager
operation it checks:

- every session file the manager wrote loads;
- the manager's entries equal what a fresh read-only open sees (both through the
  persistence transforms and a JSON round trip), unless the manager raised, and then
  a conflict copy holds all of its entries;
- no entry that was flushed is missing from every file;
- every file created, changed or removed is in the operation's allowed set
  (`ALLOWED` below, written down once per operation), and no temp file is left;
- after a forked child exited (its at-exit close included), nothing changed on disk
  and the manager still holds its writer lock.
- every copy into the other agent dir resolves, and loads with its images, while the
  blobs/ of the agent dir it was copied from is away.

Half the examples reopen sessions index first (`lazy=True`): entries are then read
only when an operation asks for them, and the checks read nothing themselves. Such a
session holds the lines it has not read only on disk, so another program that
overwrites them in place (an edit, a cut) destroys them: the model marks those
entries "at risk" at the moment of the damage, and every check then asks that
nothing *else* is lost (the rescue copy holds every other entry, in order).

Run size: `SESSIONTREE_MODEL_EXAMPLES` examples (default 300 under the `ci` hypothesis
profile, 30 under `dev`: see conftest.py) of up to `SESSIONTREE_MODEL_STEPS` (default 60;
about 40 on average) steps; what ran is printed.
"""

from __future__ import annotations

import base64
import copy
import errno
import fnmatch
import hashlib
import os
import re
import shutil
import tempfile
import types
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

import sessiontree.maintenance._gc as gc_module
from sessiontree import (
    EntryNotFoundError,
    EntryNotSerializableError,
    InheritedHandleError,
    InvalidSessionFileError,
    SessionLockError,
    SessionManager,
    SessionTreeError,
)
from sessiontree._util.fs import side_stem
from sessiontree.errors import SessionClosedError
from sessiontree.export import export_jsonl
from sessiontree.format import loads_line, serialize_entry_bytes
from sessiontree.layout import get_default_session_dir, store_parts
from sessiontree.maintenance import check_session, collect_garbage, repair_session
from sessiontree.session import _file as session_file
from sessiontree.session import _loader as loader
from sessiontree.session import _manager_storage as manager_storage
from sessiontree.session import prepare_for_persist, read_session
from sessiontree.storage import (
    LIVE_DIR,
    BlobStore,
    FileLock,
    FileSessionStorage,
    MemoryBlobStore,
    PublishLock,
    find_blob_refs,
    lock_path_for,
    read_pins,
)
from tests.conftest import examples
from tests.helpers import last_entry_id

pytestmark = pytest.mark.slow  # a few minutes under the ci profile

EXAMPLES = examples(300, "SESSIONTREE_MODEL_EXAMPLES")
STEPS = int(os.environ.get("SESSIONTREE_MODEL_STEPS", "60"))
RAN: Counter[str] = Counter()  # operations run and outcomes seen, printed after the run

# Cwds whose session dirs collide: "/w/a/b" and "/w/a-b" both encode as "--w-a-b--".
CWDS = ["/w/a/b", "/w/a-b", "/w/c"]
ERRNOS = [errno.ENOSPC, errno.EIO, errno.EACCES, errno.EROFS]
FAULTABLE = ["write", "fsync", "replace", "open"]

# What each operation may create, change or remove, by kind of path:
#   session   the session file before or after the operation
#   lock      their writer locks        conflict  their conflict copies
#   dirs      their directories         artifacts their artifacts dirs
#   agent     blobs/, the outside-dir registry, breadcrumbs, rescue/
#   backup    `<file>.bak*`: the file as it was, when a rewrite drops lines no reader parsed
#   new       a new session file this operation made (fork, branched)
#   copies    a copy across agent dirs (its file, lock, temp files and dirs) and both agent
#             dirs' blobs
# and what it may remove besides lock and temp files.
ALLOWED: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "append": (frozenset({"session", "lock", "conflict", "dirs", "agent"}), frozenset()),
    "append-first": (frozenset({"session", "lock", "conflict", "dirs", "agent"}), frozenset()),
    "rewrite": (
        frozenset({"session", "lock", "conflict", "dirs", "agent", "backup"}),
        frozenset(),
    ),
    "flush": (frozenset({"session", "lock", "conflict", "dirs", "agent"}), frozenset()),
    "reopen": (frozenset({"session", "lock", "conflict", "dirs", "agent"}), frozenset()),
    "move": (
        frozenset({"session", "lock", "conflict", "dirs", "artifacts", "agent", "backup"}),
        frozenset({"old-session", "artifacts"}),
    ),
    "fork": (frozenset({"session", "lock", "conflict", "dirs", "agent", "new"}), frozenset()),
    "new": (frozenset({"session", "lock", "conflict", "dirs", "agent"}), frozenset()),
    "memory": (frozenset(), frozenset()),  # branch, reset_leaf, refused appends, a child
    # Copies across agent dirs: the copy, its lock and dirs, either agent
    # dir's blobs; a move of the other agent dir's session removes it there.
    "copy": (frozenset({"copies", "agent"}), frozenset()),
    "copy-move": (frozenset({"copies", "agent"}), frozenset({"copied-source"})),
}


# Operations that check the file before touching it, and what they must notice: a
# deleted file is recreated, any other change stops the manager (after a rescue copy).
# With the link check on every append (see `ManagerModel.__init__`), an append must
# notice a delete or a replacement too; several changes are left to flush and reopen.
ANSWERING = {
    "append": frozenset({"append", "truncate", "replace", "delete"}),
    "flush": frozenset({"append", "truncate", "replace", "delete", "mixed"}),
    "reopen": frozenset({"append", "truncate", "replace", "delete", "mixed"}),
}


class Faults:
    """Fail the n-th call of one `os` function, once, while armed."""

    def __init__(self) -> None:
        self.name: str | None = None
        self.code = 0
        self.countdown = 0
        self.fired = False

    @contextmanager
    def armed(self) -> Iterator[None]:
        name = self.name
        if name is None:
            yield
            return
        real = getattr(os, name)

        def failing(*args: Any, **kwargs: Any) -> Any:
            self.countdown -= 1
            if self.countdown == 0:
                self.fired = True
                raise OSError(self.code, os.strerror(self.code))
            return real(*args, **kwargs)

        setattr(os, name, failing)
        try:
            yield
        finally:
            setattr(os, name, real)
            self.name = None


def normalize(entry: dict[str, Any]) -> Any:
    """An entry as a reader sees it after a write: transforms applied, JSON round trip."""
    return loads_line(serialize_entry_bytes(prepare_for_persist(entry, MemoryBlobStore())))


PEERS = st.one_of(
    st.none(),
    st.tuples(st.sampled_from(["pi", "omp"]), st.sampled_from(["written", "window", "swapped"])),
)
"""Who appends during a rewrite, and when (see the peer family), or nobody."""


def pi_append(path: str, line: bytes) -> None:
    """pi's `appendFileSync`: open by path, append, close."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def file_ids(path: str) -> list[str]:
    loaded = read_session(path, FileSessionStorage())
    return [e.get("id") for e in loaded.entries if isinstance(e.get("id"), str)]


def with_ids(entries: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(id, entry) of the entries that have an id (another program's edit may take one
    away: `"id"` becomes `"Id"`)."""
    return [(e["id"], e) for e in entries if isinstance(e.get("id"), str)]


def ids_of(entries: list[dict[str, Any]]) -> list[str]:
    return [i for i, _ in with_ids(entries)]


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_HEX = re.compile(rb"[0-9a-f]{8,}")


def stable_letters(data: bytes) -> list[int]:
    """Offsets of the lowercase ASCII letters whose place does not depend on the run:
    not inside a string that holds a digit or is hex (ids, timestamps, temp paths),
    whose letters differ from run to run. An edit picked among these hits the same
    spot whenever hypothesis replays the example (else its choice is flaky)."""
    skip = bytearray(len(data))
    for match in _STRING.finditer(data):
        inner = match.group()[1:-1]
        if any(48 <= b <= 57 for b in inner) or _HEX.fullmatch(inner):
            skip[match.start() : match.end()] = b"\x01" * (match.end() - match.start())
    return [i for i, b in enumerate(data) if 97 <= b <= 122 and not skip[i]]


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.blake2b(f.read(), digest_size=16).hexdigest()


Snapshot = dict[str, tuple[str, int, str]]


def snapshot(root: str) -> Snapshot:
    """Every path under `root` -> (kind, inode, content digest)."""
    found: Snapshot = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs:
            path = os.path.join(directory, name)
            found[path] = ("link" if os.path.islink(path) else "dir", 0, "")
        for name in files:
            path = os.path.join(directory, name)
            st_ = os.lstat(path)
            if os.path.islink(path):
                found[path] = ("link", st_.st_ino, os.readlink(path))
            else:
                found[path] = ("file", st_.st_ino, digest(path))
    return found


IMAGE = "iVBORw0KGgo" + "A" * 2000


def model_image(seed: int) -> bytes:
    """Image bytes of one of a few kinds (managers share some: one blob, several pins)."""
    return b"\x89PNG\r\n\x1a\n" + bytes([seed]) * 1500


def image_ref_message(ref: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "image", "data": ref, "mimeType": "image/png"}],
        "timestamp": 5,
    }


def message(kind: str, text: str) -> dict[str, Any]:
    if kind == "user":
        return {"role": "user", "content": text, "timestamp": 1}
    if kind == "image":
        return {
            "role": "user",
            "content": [
                {"type": "text", "text": text},
                {"type": "image", "data": IMAGE + text.encode().hex(), "mimeType": "image/png"},
            ],
            "timestamp": 2,
        }
    if kind == "tool":
        return {
            "role": "toolResult",
            "toolCallId": "call-1",
            "toolName": "bash",
            "content": [{"type": "text", "text": text}],
            "isError": False,
            "timestamp": 3,
        }
    return {
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "provider": "p",
        "model": "m",
        "usage": {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0, "cost": {"total": 0.5}},
        "stopReason": "stop",
        "timestamp": 4,
    }


texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)

# The real calls, for a forked child's report: a fault armed in the parent is armed in
# the child too (`Faults` patches `os`), and must not eat the report.
_fork, _pipe, _read, _write, _close, _waitpid, _exit = (
    os.fork,
    os.pipe,
    os.read,
    os.write,
    os.close,
    os.waitpid,
    os._exit,
)


def in_forked_child(work: Callable[[], str]) -> str:
    """`work()` in a forked child that then exits without this process's at-exit
    handlers (pytest's are not its to run); what it returned, or what it raised."""
    read, write = _pipe()
    pid = _fork()
    if pid == 0:
        try:
            _close(read)
            try:
                said = work()
            except BaseException as exc:
                said = f"child raised {type(exc).__name__}: {exc}"
            _write(write, said.encode())
        finally:
            _exit(0)
    _close(write)
    chunks = []
    while chunk := _read(read, 65536):
        chunks.append(chunk)
    _close(read)
    _waitpid(pid, 0)
    return b"".join(chunks).decode()


class ManagerModel(RuleBasedStateMachine):
    """See the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="st-model-")
        self.agent = os.path.join(self.root, "agent")
        self.saved_env = {k: os.environ.get(k) for k in ("PI_CODING_AGENT_DIR", "TMUX_PANE")}
        os.environ["PI_CODING_AGENT_DIR"] = self.agent
        os.environ["TMUX_PANE"] = "%1"  # breadcrumbs are written (and must stay in bounds)
        # No clock in the model: every append checks the links (the strictest rate), and
        # no lock check waits for a quiet second. Outcomes then never depend on timing.
        self.saved_checks = (session_file.LINK_CHECK_SECONDS, session_file.LOCK_CHECK_SECONDS)
        session_file.LINK_CHECK_SECONDS = -1.0
        session_file.LOCK_CHECK_SECONDS = 1e9
        self.faults = Faults()
        self.sm: SessionManager | None = None
        self.lazy = False  # reopen index first
        self.at_risk: set[str] = set()  # unread entries another program overwrote in place
        self.expected: list[dict[str, Any]] = []
        self.flushed: dict[str, Any] = {}  # id -> normalized entry
        self.written: set[str] = set()  # session files the manager wrote
        self.trusted = True  # the file is what the manager wrote (no interference since)
        self.pending = ""  # interference not yet answered by a manager operation
        self.tampered: set[str] = set()  # files another program changed since we wrote them
        self.decoys: Snapshot = {}
        self.other = os.path.join(self.root, "other-agent")  # a second agent dir, for copies
        self.live: list[SessionManager] = []  # other managers holding images
        self.peer_touched: str | None = None  # a file a peer appended to during an operation
        self.peers = 0  # lines appended by a peer during a rewrite

    def teardown(self) -> None:
        try:
            self.close_live()
            if self.sm is not None:
                try:
                    self.sm.close()
                except SessionTreeError:
                    pass
        finally:
            session_file.LINK_CHECK_SECONDS, session_file.LOCK_CHECK_SECONDS = self.saved_checks
            for key, value in self.saved_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------------ setup

    @initialize(cwd=st.sampled_from(CWDS), lazy=st.booleans())
    def start(self, cwd: str, lazy: bool) -> None:
        RAN["examples"] += 1
        RAN["examples reopening index first"] += lazy
        self.lazy = lazy
        self.sm = SessionManager.create(cwd)
        directory = get_default_session_dir("/w/a/b")
        os.makedirs(directory)
        # Things in the session dir that are not this session's: they never change.
        foreign = SessionManager.create("/w/a/b", directory)
        foreign.append_message(message("assistant", "foreign"))
        foreign.close()
        decoy_path = foreign.get_session_file() or ""
        with open(os.path.join(directory, "notes.jsonl"), "w") as f:
            f.write("not a session\n")
        os.makedirs(os.path.join(directory, "2026-01-01T00-00-00-000Z_ffffffffffffffff"))
        os.symlink(decoy_path, os.path.join(directory, "link.jsonl"))
        self.decoys = {
            p: v for p, v in snapshot(directory).items() if not p.endswith(".writer-lock")
        }

    @invariant()
    def count_step(self) -> None:
        # Runs once after `start` and once after every step: the run's step count.
        RAN["steps"] += 1

    # ------------------------------------------------------------------ helpers

    @property
    def manager(self) -> SessionManager:
        assert self.sm is not None
        return self.sm

    def dead(self) -> bool:
        file = self.manager._file
        return file is not None and file.error is not None

    def on_disk(self) -> bool:
        file = self.manager._file
        return file is not None and file.on_disk

    def run(
        self, kind: str, action: Callable[[], Any], targets: Sequence[str] = ()
    ) -> Exception | None:
        """Run one manager operation with faults armed, then check every invariant.

        `action` updates the model itself once the call returns; the error it
        raised (if any) is returned after the checks. `targets` are session paths
        the operation may create besides the manager's own (a list the action may
        fill: it is read after the action).
        """
        before_path = self.manager.get_session_file()
        pending = self.pending
        before = snapshot(self.root)
        error: Exception | None = None
        with self.faults.armed():
            try:
                action()
            except Exception as exc:
                error = exc
        RAN["operations"] += 1
        RAN[f"op {kind}"] += 1
        if error is not None:
            RAN[f"raised {type(error).__name__}"] += 1
            if type(error) is OSError:
                RAN[f"raw OSError in {kind}: {error}"] += 1
        after = snapshot(self.root)
        after_path = self.manager.get_session_file()
        self.check_files_changed(kind, before, after, before_path, after_path, targets)
        self.update_trust(kind, before, after, before_path, after_path)
        if self.peer_touched is not None and not self.dead():
            # A peer appended to the file during the operation (carried into the file
            # that took the path, or appended to it after): the manager does not hold it.
            self.other_program_appended(self.peer_touched)
        self.peer_touched = None
        touched = error is None or self.dead()  # else refused before touching the file
        if pending in ANSWERING.get(kind, ()) and self.pending == pending:
            # An operation that touches the file must answer a delete (recreate it) or
            # any other change (conflict): never go on writing into the void.
            assert self.dead() or not touched, f"{kind} did not answer the {pending} of the file"
        self.check_state(error)
        return error

    def update_trust(
        self,
        kind: str,
        before: Snapshot,
        after: Snapshot,
        before_path: str | None,
        after_path: str | None,
    ) -> None:
        if self.dead():
            return
        if after_path != before_path:
            # The manager moved to another file (fork, branched, new, reopen elsewhere).
            self.trusted, self.pending = True, ""
            return
        if after_path is None or not self.pending:
            return
        old, new = before.get(after_path), after.get(after_path)
        if new is not None and (old is None or old[1] != new[1]):
            # A new inode at the path: the manager recreated or rewrote the file.
            self.trusted, self.pending = True, ""
            self.tampered.discard(after_path)

    def check_files_changed(
        self,
        kind: str,
        before: Snapshot,
        after: Snapshot,
        before_path: str | None,
        after_path: str | None,
        targets: Sequence[str] = (),
    ) -> None:
        allowed_kinds, removable = ALLOWED[kind]
        sessions = [p for p in (before_path, after_path, *targets) if p]
        patterns: list[str] = []
        if "session" in allowed_kinds or "new" in allowed_kinds:
            patterns += sessions
        if "lock" in allowed_kinds:
            patterns += [lock_path_for(p) for p in sessions]
            # oh-my-pi's publish lock beside the file: a rewrite takes it (and a fault may
            # leave it; oh-my-pi tells a stale one by its gate, the abstract socket)
            for p in sessions:
                d, name = os.path.split(p)
                patterns.append(os.path.join(d, "." + glob_escape(name) + ".lock"))
        if "conflict" in allowed_kinds:
            for p in sessions:
                d, name = os.path.split(p)
                patterns.append(os.path.join(d, glob_escape(side_stem(name)) + ".conflict-*"))
        if "backup" in allowed_kinds:
            for p in sessions:
                d, name = os.path.split(p)
                patterns.append(os.path.join(d, glob_escape(side_stem(name)) + ".bak*"))
        if "dirs" in allowed_kinds:
            patterns += [os.path.dirname(p) for p in sessions]
            patterns += [self.agent, os.path.join(self.agent, "sessions")]
        if "artifacts" in allowed_kinds:
            patterns += [p[: -len(".jsonl")] + suffix for p in sessions for suffix in ("", "/*")]
        if "copies" in allowed_kinds:
            patterns += self.copy_patterns(targets)
        if "agent" in allowed_kinds:
            patterns += [
                os.path.join(self.agent, name)
                for name in ("blobs", "blobs/*", "external-session-dirs", "terminal-sessions")
            ]
            patterns += [os.path.join(self.agent, "terminal-sessions", "*")]
            patterns += [os.path.join(self.agent, "rescue"), os.path.join(self.agent, "rescue/*")]
        for path in sorted(set(before) | set(after)):
            if before.get(path) == after.get(path):
                continue
            if path.endswith(".tmp"):
                assert path not in after, f"temp file left: {path}"
                continue
            assert path not in self.decoys, f"{kind} touched {path}, which is not this session's"
            if ".bak" in os.path.basename(path) and path not in before:
                RAN["backups kept of unparseable lines"] += 1
            assert any(fnmatch.fnmatchcase(path, pattern) for pattern in patterns), (
                f"{kind} touched {path} (allowed: {patterns})"
            )
            if path in before and path not in after:
                removal_ok = path.endswith((".writer-lock", ".jsonl.lock")) or (
                    "old-session" in removable and path == before_path and path != after_path
                )
                if "copied-source" in removable:
                    removal_ok = removal_ok or path in targets
                # A manager's pins go with it (its process's pin file when it held the last).
                pins = os.path.join(self.agent, "blobs", LIVE_DIR)
                removal_ok = removal_ok or ("agent" in allowed_kinds and path.startswith(pins))
                if "artifacts" in removable and before_path is not None:
                    removal_ok = removal_ok or path.startswith(before_path[: -len(".jsonl")])
                assert removal_ok, f"{kind} removed {path}"

    def kept(self, ids: list[str]) -> list[str]:
        """`ids` without the entries at risk (and without what their damage renamed)."""
        if not self.at_risk:
            return ids
        known = {e.get("id") for e in self.expected}
        return [i for i in ids if i in known and i not in self.at_risk]

    def check_state(self, error: Exception | None) -> None:
        sm = self.manager
        held = sm._index.read_so_far()  # reads nothing
        ids = [entry_id for entry_id, _ in held]
        assert self.kept(ids) == self.kept([e.get("id") for e in self.expected])
        path = sm.get_session_file()
        if self.on_disk() and path is not None:
            self.written.add(path)
        for written in self.written - self.tampered:
            if os.path.exists(written):
                assert read_session(written, FileSessionStorage()).valid, written
        if self.dead():
            # The manager raised and stopped: a conflict copy holds all of its entries.
            assert error is not None
            RAN["dead managers, rescued"] += 1
            copies = self.conflict_copies()
            assert copies, "a dead manager left no rescue copy"
            newest = max(copies, key=os.path.getmtime)
            assert self.kept(file_ids(newest)) == self.kept([i for i in ids if isinstance(i, str)])
            self.restart()
            return
        if self.on_disk() and path is not None and self.trusted:
            with SessionManager.open(path, read_only=True, lazy=False) as fresh:
                fresh_entries = fresh.get_entries()
            assert self.kept([e.get("id") for e in fresh_entries]) == self.kept(ids)
            if not self.at_risk:
                for (_, entry), got in zip(held, fresh_entries, strict=True):
                    if entry is not None:  # an unread entry is what the file holds
                        assert normalize(got) == normalize(entry)
        if not self.pending:
            self.check_flushed()

    def conflict_copies(self) -> list[str]:
        found = []
        for directory, _, files in os.walk(self.root):
            found += [os.path.join(directory, f) for f in files if ".conflict-" in f]
        return found

    def check_flushed(self) -> None:
        present: set[str] = set()
        for directory, _, files in os.walk(self.root):
            for name in files:
                full = os.path.join(directory, name)
                if name.endswith(".tmp") or os.path.islink(full):
                    continue
                if full.startswith(self.other + os.sep):
                    continue  # copies of this session hold its ids too
                try:
                    present.update(file_ids(full))
                except (OSError, ValueError):
                    continue
        missing = set(self.flushed) - present
        assert not missing, f"flushed entries lost: {missing}"

    def restart(self) -> None:
        """The dead manager is closed (it raises its error) and a new session starts."""
        try:
            self.manager.close()
        except SessionTreeError:
            pass
        self.sm = SessionManager.create(CWDS[0])
        self.expected = []
        self.trusted, self.pending = True, ""
        self.at_risk = set()

    def reopened(self, path: str) -> None:
        """The session was just opened at `path`: the model takes what it holds."""
        self.sm = SessionManager.open(path, lazy=self.lazy)
        held = self.manager._index.read_so_far()
        self.expected = [copy.deepcopy(e) if e is not None else {"id": i} for i, e in held]
        # Lines another program's edit left unparseable are indexed by their prefix
        # (found out when read), where the whole load skips them: at risk from here.
        whole = set(file_ids(path))
        self.at_risk = {i for i, _ in held if i not in whole}
        self.trusted, self.pending = True, ""

    # ------------------------------------------------------------------ appends

    def append(self, build: Callable[[SessionManager], str]) -> None:
        sm = self.manager

        def action() -> None:
            entry_id = build(sm)
            self.expected.append(copy.deepcopy(sm.get_entry(entry_id)) or {})

        self.run("append" if self.on_disk() else "append-first", action)

    @rule(kind=st.sampled_from(["user", "assistant", "tool", "image"]), text=texts)
    def append_message(self, kind: str, text: str) -> None:
        self.append(lambda sm: sm.append_message(message(kind, text)))

    @rule(bad=st.sampled_from([{1, 2}, b"bytes", object(), frozenset()]))
    def append_unserializable(self, bad: object) -> None:
        sm = self.manager
        leaf = sm.get_leaf_id()
        msg = message("assistant", "x")
        msg["content"][0]["extra"] = bad
        error = self.run("memory", lambda: sm.append_message(msg))
        if self.sm is not sm:
            return  # the manager had died of an earlier interference
        assert isinstance(error, EntryNotSerializableError), error
        assert isinstance(error, TypeError) and "extra" in str(error)
        assert sm.get_leaf_id() == leaf

    @rule(
        kind=st.sampled_from(
            ["thinking", "model", "custom", "custom_message", "ttsr", "init", "mode", "compaction"]
        ),
        text=texts,
    )
    def append_other(self, kind: str, text: str) -> None:
        def build(sm: SessionManager) -> str:
            if kind == "thinking":
                return sm.append_thinking_level_change(text or None)
            if kind == "model":
                return sm.append_model_change(f"p/{text}", role=text or None)
            if kind == "custom":
                return sm.append_custom_entry("ext", {"state": text})
            if kind == "custom_message":
                return sm.append_custom_message_entry("ext", text, True)
            if kind == "ttsr":
                return sm.append_ttsr_injection([text])
            if kind == "init":
                return sm.append_session_init("system", text, [])
            if kind == "mode":
                return sm.append_mode_change(text or "plan", {"x": 1})
            # The first entry on the leaf's path (an id off it is refused); none: keep nothing.
            path = sm.get_branch()
            return sm.append_compaction(text, None, path[0]["id"] if path else None, 100)

        self.append(build)

    @rule(data=st.data(), label=st.one_of(st.none(), texts))
    def append_label(self, data: st.DataObject, label: str | None) -> None:
        ids = ids_of(self.expected)
        target = data.draw(st.sampled_from([*ids, "unknown"]))
        if target == "unknown":
            sm = self.manager
            error = self.run("memory", lambda: sm.append_label_change(target, label))
            assert self.sm is not sm or isinstance(error, EntryNotFoundError), error
            return
        self.append(lambda sm: sm.append_label_change(target, label))

    # ------------------------------------------------------------------ tree

    @precondition(lambda self: bool(ids_of(self.expected)))
    @rule(data=st.data())
    def branch(self, data: st.DataObject) -> None:
        target = data.draw(st.sampled_from(ids_of(self.expected)))
        self.run("memory", lambda: self.manager.branch(target))

    @rule()
    def reset_leaf(self) -> None:
        self.run("memory", self.manager.reset_leaf)

    @rule(data=st.data(), summary=texts)
    def branch_with_summary(self, data: st.DataObject, summary: str) -> None:
        target = data.draw(st.sampled_from([None, *ids_of(self.expected)]))
        self.append(lambda sm: sm.branch_with_summary(target, summary))

    # ------------------------------------------------------------------ rewrites

    @rule(name=texts, source=st.sampled_from(["auto", "user"]), peer=PEERS)
    def set_session_name(self, name: str, source: str, peer: tuple[str, str] | None) -> None:
        with self.peer_appending(peer):
            self.run("rewrite", lambda: self.manager.set_session_name(name, source))

    @precondition(lambda self: bool(ids_of(self.expected)))
    @rule(data=st.data(), text=texts, peer=PEERS)
    def rewrite_entries(self, data: st.DataObject, text: str, peer: tuple[str, str] | None) -> None:
        index = data.draw(st.integers(0, len(self.expected) - 1))
        sm = self.manager
        entry = sm.get_entry(self.expected[index]["id"])
        if entry is None:  # at risk, and its damage found out
            return
        entry["edited"] = text  # an in-place edit, as tools make them
        self.expected[index] = copy.deepcopy(entry)
        with self.peer_appending(peer):
            self.run("rewrite", sm.rewrite_entries)

    @rule()
    def flush(self) -> None:
        sm = self.manager

        def action() -> None:
            sm.flush()
            if self.on_disk() and not self.pending:
                self.flushed.update(dict.fromkeys(self.held_ids(sm)))

        self.run("flush", action)

    @rule()
    def close_and_reopen(self) -> None:
        sm = self.manager
        path = sm.get_session_file()
        was_on_disk = self.on_disk()

        def action() -> None:
            sm.close()
            if not was_on_disk or path is None:
                # Never written (no assistant yet): nothing to reopen, start over.
                self.sm = SessionManager.create(CWDS[0])
                self.expected, self.trusted, self.pending = [], True, ""
                return
            if not self.pending:
                self.flushed.update(dict.fromkeys(self.held_ids(sm)))
            try:
                # The reopened session is what the file holds (another program's edit
                # included).
                self.reopened(path)
            except InvalidSessionFileError:
                # Another program's edit broke the header: the file is left as it is.
                assert path in self.tampered
                self.sm = SessionManager.create(CWDS[0])
                self.expected, self.trusted, self.pending = [], True, ""
                self.at_risk = set()
                return
            self.tampered.discard(path)

        error = self.run("reopen", action)
        if error is not None and self.sm is sm and not self.dead():
            # close went well, but the reopen met an injected fault: open again.
            assert path is not None
            self.reopened(path)

    # ------------------------------------------------------------------ lifecycle

    @rule(cwd=st.sampled_from(CWDS), peer=PEERS)
    def move_to(self, cwd: str, peer: tuple[str, str] | None) -> None:
        sm = self.manager
        path = sm.get_session_file() or ""
        target = os.path.join(get_default_session_dir(cwd), os.path.basename(path))
        with self.peer_appending(peer):
            self.run("move", lambda: sm.move_to(cwd), (target,))

    @rule()
    def fork(self) -> None:
        self.run("fork", self.manager.fork)

    @precondition(lambda self: bool(ids_of(self.expected)))
    @rule(data=st.data())
    def create_branched_session(self, data: st.DataObject) -> None:
        target = data.draw(st.sampled_from(ids_of(self.expected)))
        sm = self.manager
        # The path, without its label entries (the labels in effect are re-created after it).
        path_ids = [i for i, e in with_ids(sm.get_branch(target)) if e.get("type") != "label"]

        def action() -> None:
            sm.create_branched_session(target)
            ids = ids_of(sm.get_entries())
            assert ids[: len(path_ids)] == path_ids
            self.expected = copy.deepcopy(sm.get_entries())
            self.at_risk = set()

        self.run("fork", action)

    @rule()
    def new_session(self) -> None:
        sm = self.manager

        def action() -> None:
            sm.new_session()
            self.expected = []
            self.at_risk = set()

        self.run("new", action)

    # ------------------------------------------------------------------ the outside world

    def session_path(self) -> str | None:
        path = self.manager.get_session_file()
        return path if path is not None and os.path.exists(path) else None

    @rule(
        kind=st.sampled_from(["append", "replace", "delete", "edit", "truncate"]),
        where=st.floats(0, 1),
    )
    def interfere(self, kind: str, where: float) -> None:
        path = self.session_path()
        if path is None or self.dead():
            return
        with open(path, "rb") as f:
            data = f.read()
        if kind == "edit":
            letters = stable_letters(data)
            damage = (letters[int(where * (len(letters) - 1))],) * 2 if letters else None
        elif kind == "truncate" and data:
            damage = (min(int(len(data) * where), len(data) - 1), len(data))
        else:
            damage = None
        if damage is not None:
            self.mark_at_risk(path, data, damage)
        if kind == "append":
            line = b'{"type":"custom","customType":"other","id":"ffff0000","parentId":null,'
            line += b'"timestamp":"2026-01-01T00:00:00.000Z"}\n'
            with open(path, "ab") as f:
                f.write(line)
        elif kind == "replace":
            # Another program rewrites the session (with one more line of its own).
            tmp = path + ".other"
            with open(tmp, "wb") as f:
                f.write(data + b'{"type":"custom","customType":"other","id":"ffff0001"}\n')
            os.replace(tmp, path)
        elif kind == "delete":
            os.unlink(path)
        elif kind == "edit":
            # Flip one ASCII letter's case inside the file: same length, same inode.
            letters = stable_letters(data)
            if not letters:
                return
            i = letters[int(where * (len(letters) - 1))]
            with open(path, "r+b") as f:
                f.seek(i)
                f.write(bytes([data[i] - 32]))
        else:
            if not data:
                return
            with open(path, "r+b") as f:
                f.truncate(min(int(len(data) * where), len(data) - 1))
        self.trusted = False
        self.tampered.add(path)
        RAN[f"interference {kind}"] += 1
        if kind == "edit":
            # An edit may hit an id: entries it renamed are the other program's doing.
            try:
                left = set(file_ids(path))
            except (OSError, ValueError):
                left = set()
            for entry_id in [i for i in self.flushed if i not in left]:
                del self.flushed[entry_id]
        if not self.pending or self.pending == kind:
            self.pending = kind
        elif kind != "edit":
            # Several changes before an answer (say, a replacement, then an append to the
            # new file): only a check of the path itself must notice.
            self.pending = "mixed"

    def other_program_appended(self, path: str) -> None:
        """Another program appended to `path` behind the manager (see `interfere`)."""
        self.trusted = False
        self.tampered.add(path)
        self.pending = "append" if self.pending in ("", "append") else "mixed"

    # --- family: a peer appends during a rewrite ---
    # Every rewrite rule (a name, an edit, a move) may run with a peer that appends a line
    # to the session file at a random moment: pi's way (open, append, close) or oh-my-pi's
    # (under its publish lock), while the new file is written (before the last check),
    # between the last check and the rename or unlink (the window the check cannot see),
    # or just after. Right after the operation the line is in a file: the session file
    # (carried into the new one, or appended to it) or a conflict copy. oh-my-pi's way
    # waits while the rewrite holds its lock (the window and just after): the line is
    # then appended once the operation let go of it.

    @contextmanager
    def peer_appending(self, peer: tuple[str, str] | None) -> Iterator[None]:
        path = self.session_path()
        if peer is None or path is None or self.dead():
            yield
            return
        way, moment = peer
        sm = self.manager
        self.peers += 1
        line_id = f"peer{self.peers:05d}"
        line = b'{"type":"custom","customType":"peer","id":"%s","parentId":null,' % (
            line_id.encode()
        )
        line += b'"timestamp":"2026-01-01T00:00:00.000Z"}\n'
        done: list[str] = []
        waited: list[str] = []

        def append(target: str) -> None:
            if done or waited or not os.path.exists(target):
                return
            if way == "omp":
                gate = PublishLock(target)
                if not gate._take_gate():  # the rewrite holds it: oh-my-pi waits
                    waited.append(target)
                    return
                gate._drop_gate()
                with PublishLock(target):
                    pi_append(target, line)
            else:
                pi_append(target, line)
            done.append(target)
            self.peer_touched = target

        real_write, real_rename, real_unlink = (
            FileSessionStorage.write_atomic,
            FileSessionStorage.rename,
            FileSessionStorage.unlink,
        )

        def write_atomic(storage: FileSessionStorage, target: str, chunks: Any) -> Any:
            if moment == "written":
                append(path)
            return real_write(storage, target, chunks)

        def rename(storage: FileSessionStorage, src: str, dst: str) -> None:
            if moment == "window" and dst == path:
                append(dst)
            real_rename(storage, src, dst)
            if moment == "swapped" and dst == path:
                append(dst)

        def unlink(storage: FileSessionStorage, target: str) -> None:
            if moment == "window" and target == path:
                append(target)
            real_unlink(storage, target)
            if moment == "swapped" and target == path:
                moved = sm.get_session_file()
                if moved and moved != path:
                    append(moved)

        FileSessionStorage.write_atomic = write_atomic  # type: ignore[method-assign]
        FileSessionStorage.rename = rename  # type: ignore[method-assign]
        FileSessionStorage.unlink = unlink  # type: ignore[method-assign]
        try:
            yield
        finally:
            FileSessionStorage.write_atomic = real_write  # type: ignore[method-assign]
            FileSessionStorage.rename = real_rename  # type: ignore[method-assign]
            FileSessionStorage.unlink = real_unlink  # type: ignore[method-assign]
        if waited:
            # oh-my-pi got its lock once the rewrite let go of it: it appends to the path.
            now = sm.get_session_file() if not self.dead() else None
            target = now if now and os.path.exists(now) else waited[0]
            if os.path.exists(target):
                with PublishLock(target):
                    pi_append(target, line)
                done.append(target)
                RAN["peer appends that waited for the rewrite's lock"] += 1
                if not self.dead():
                    self.other_program_appended(target)
        if not done:
            RAN["peer appends the rewrite never reached"] += 1
            return
        RAN["peer appends raced"] += 1
        RAN[f"peer appends raced: {way}, {moment}"] += 1
        assert self.holds(line_id.encode()), f"{way}'s line {line_id} ({moment}) was lost"

    def holds(self, entry_id: bytes) -> bool:
        """Whether a file under the model's root holds the line of `entry_id`."""
        needle = b'"id":"%s"' % entry_id
        for directory, _, files in os.walk(self.root):
            for name in files:
                full = os.path.join(directory, name)
                if not name.endswith(".tmp") and not os.path.islink(full):
                    with open(full, "rb") as f:
                        if needle in f.read():
                            return True
        return False

    def held_ids(self, sm: SessionManager) -> list[str]:
        return [
            i for i, _ in sm._index.read_so_far() if isinstance(i, str) and i not in self.at_risk
        ]

    def mark_at_risk(self, path: str, data: bytes, damage: tuple[int, int]) -> None:
        """Unread entries whose lines the damage (a byte range, ends included) hits, when
        the manager reads its lines from this very file: they are lost with it."""
        index = self.manager._index
        pinned = index.pinned
        if pinned is None or os.stat(path).st_ino != pinned.ino:
            return
        first, last = damage
        at = 0
        for line in data.split(b"\n"):
            end = at + len(line)
            if end > first and at <= last:
                try:
                    value = loads_line(line) if line.strip() else None
                except ValueError:
                    value = None
                entry_id = value.get("id") if isinstance(value, dict) else None
                if isinstance(entry_id, str) and not index.is_read(entry_id):
                    self.at_risk.add(entry_id)
                    self.flushed.pop(entry_id, None)
                    RAN["entries at risk (unread, overwritten in place)"] += 1
            at = end + 1

    @rule(
        name=st.sampled_from(FAULTABLE),
        code=st.sampled_from(ERRNOS),
        nth=st.integers(1, 3),
    )
    def arm_fault(self, name: str, code: int, nth: int) -> None:
        self.faults.name, self.faults.code, self.faults.countdown = name, code, nth
        RAN["faults armed"] += 1

    # --- family: torn tails ---
    # A crash ends the process while it writes the last line: the file is cut anywhere
    # in its last two lines, while no writer holds it. Resumed index first or whole, the
    # session holds every entry the cut left whole, its leaf is the last of them, and the
    # next entry continues it (never a new root), on a line of its own.

    @precondition(
        lambda self: self.on_disk() and self.trusted and not self.pending and not self.dead()
    )
    @rule(
        kind=st.sampled_from(["brace", "line end", "anywhere"]),
        where=st.floats(0, 1),
        lazy=st.booleans(),
    )
    def tear_tail_and_resume(self, kind: str, where: float, lazy: bool) -> None:
        sm = self.manager
        path = sm.get_session_file()
        assert path is not None
        torn: list[tuple[bytes, set[str]]] = []  # what the crash left, what it cut away

        def action() -> None:
            sm.close()
            self.flushed.update(dict.fromkeys(self.held_ids(sm)))
            torn.append(self.tear(path, kind, where))
            self.resume(path, lazy, *torn[0])

        error = self.run("reopen", action)
        if torn and self.sm is sm and not self.dead():
            # The crash happened, the reopen met an injected fault: resume again.
            assert error is not None
            self.resume(path, lazy, *torn[0])
            self.check_state(None)
        if not torn or self.sm is sm:
            return
        leaf = self.manager.get_leaf_id()
        with SessionManager.open(path, read_only=True, lazy=not lazy) as other:
            assert other.get_leaf_id() == leaf
            assert other.build_session_context() == self.manager.build_session_context()
        before = len(self.expected)
        self.append_message("user", "after the crash")
        if len(self.expected) == before or self.dead():
            return  # the append met an injected fault
        assert self.expected[-1]["parentId"] == leaf
        with open(path, "rb") as f:
            data = f.read()
        cut = torn[0][0]
        assert data.startswith(cut)  # only appended to
        if cut and not cut.endswith(b"\n"):
            assert data[len(cut) : len(cut) + 1] == b"\n"  # never glued onto the torn line
        last = loads_line(data.rstrip(b"\n").rsplit(b"\n", 1)[-1])
        assert last["id"] == self.expected[-1]["id"] and last["parentId"] == leaf
        RAN["torn tails continued"] += 1

    def tear(self, path: str, kind: str, where: float) -> tuple[bytes, set[str]]:
        """Cut the file in its last two lines (the header stays whole). Returns what is
        left and the ids of the entries whose lines the cut reached: lost, so no longer
        flushed (nor expected, once the session is read again)."""
        with open(path, "rb") as f:
            data = f.read()
        body = data.rstrip(b"\n")
        start = max(body.rfind(b"\n", 0, body.rfind(b"\n")) + 1, data.index(b"\n") + 1)
        cuts = range(start, len(data) + 1)
        if kind == "brace":  # just after an inner `}`: the end of a content block
            places = [p + 1 for p in cuts if p < len(data) and data[p] == 0x7D]
        elif kind == "line end":
            places = [p + d for p in cuts if p < len(data) and data[p] == 0x0A for d in (0, 1)]
        else:
            places = list(cuts)
        cut = places[min(int(where * len(places)), len(places) - 1)] if places else len(data)
        with open(path, "r+b") as f:
            f.truncate(cut)
        # A line is lost when the cut reached into it (ended before its last byte).
        lost: set[str] = set()
        at = 0
        for line in data.split(b"\n"):
            if at + len(line) > cut and line.strip():
                try:
                    value = loads_line(line)
                except ValueError:  # damaged before (at risk), not by the cut
                    value = None
                if isinstance(value, dict) and isinstance(value.get("id"), str):
                    lost.add(value["id"])
            at += len(line) + 1
        assert lost <= set(ids_of(self.expected))  # the file is what the manager wrote
        for entry_id in lost:
            self.flushed.pop(entry_id, None)
        self.trusted = False  # until the resume reads it
        RAN["torn tails"] += 1
        RAN[f"torn tails, cut {kind}"] += 1
        RAN["torn tails, entries cut away"] += len(lost)
        RAN["torn tails, torn line left in the file"] += cut > 0 and data[cut - 1] != 0x0A
        return data[:cut], lost

    def resume(self, path: str, lazy: bool, cut: bytes, lost: set[str]) -> None:
        """Open the file the crash left (`cut`) again, index first or whole: it holds
        the entries the model expects but the `lost` ones, and its leaf is the last
        line's that parses (an oracle of its own)."""
        want = [i for i in ids_of(self.expected) if i not in lost]
        sm = SessionManager.open(path, lazy=lazy)
        self.sm = sm
        held = sm._index.read_so_far()
        # Lines an earlier edit left unparseable are indexed by their prefix (as in
        # `reopened`): at risk from here, as they were before.
        whole = set(file_ids(path))
        risky = {i for i, _ in held if i not in whole}
        self.at_risk |= risky
        assert self.kept([i for i, _ in held]) == self.kept(want)
        assert sm.get_leaf_id() == last_entry_id(cut)
        if not self.at_risk:
            assert sm.get_leaf_id() == (want[-1] if want else None)
        self.expected = [copy.deepcopy(e) if e is not None else {"id": i} for i, e in held]
        self.at_risk = risky
        self.trusted, self.pending = True, ""
        RAN[f"torn tails resumed {'index first' if lazy else 'whole'}"] += 1

    # --- family: forked processes ---

    @rule(
        acts=st.lists(
            st.sampled_from(
                [
                    "read",
                    "append",
                    "append-assistant",
                    "flush",
                    "rename",
                    "new_session",
                    "fork",
                    "branch",
                    "close",
                    "release-lock",
                ]
            ),
            max_size=5,
        )
    )
    def fork_a_child(self, acts: list[str]) -> None:
        """A child forked now does what `acts` say with the manager it inherited, then
        exits as a program does (the package's at-exit close runs, in the child); the
        parent goes on. Nothing may change on disk ("memory"), the parent keeps its lock
        (a second writer is refused), and the rules after this one go on as before."""
        sm = self.manager
        ids = [i for i, _ in sm._index.read_so_far()]
        path = sm.get_session_file()
        locked = self.on_disk()

        def child() -> str:
            closed = False
            for act in acts:
                error: Exception | None = None
                try:
                    if act == "read":
                        got = [i for i, _ in sm._index.read_so_far()]
                        if got != ids:
                            return f"the child's copy holds {got}, not {ids}"
                        sm.build_session_context()
                    elif act == "append":
                        sm.append_message(message("user", "from the child"))
                    elif act == "append-assistant":  # would write a session not yet on disk
                        sm.append_message(message("assistant", "from the child"))
                    elif act == "flush":
                        sm.flush()
                    elif act == "rename":
                        sm.set_session_name("the child's", "user")
                    elif act == "new_session":
                        sm.new_session()
                    elif act == "fork":
                        sm.fork()
                    elif act == "branch":
                        sm.reset_leaf()  # the child's copy only
                    elif act == "close":
                        sm.close()
                        closed = True
                    else:  # what a finalizer of the lock would do at the child's exit
                        lock = sm._file._lock if sm._file is not None else None
                        if lock is not None:
                            lock.release()
                except Exception as exc:
                    error = exc
                # Reads, closes and a lock's release go through; a move of the leaf too
                # until the child closed its copy; every write is refused.
                harmless = act in ("read", "close", "release-lock")
                expected: tuple[type[Exception], ...] = ()
                if closed and not harmless:
                    expected = (SessionClosedError,)
                elif not harmless and act != "branch":
                    expected = (InheritedHandleError,)
                if expected and not isinstance(error, expected):
                    return f"{act}: expected {expected}, got {error!r}"
                if not expected and error is not None:
                    return f"{act}: {error!r}"
                if isinstance(error, InheritedHandleError) and error.owner_pid == os.getpid():
                    return f"{act}: the error names the child as the owner"
            if [i for i, _ in sm._index.read_so_far()] != ids:
                return "a refused write changed the child's copy"
            manager_storage._close_open_managers()  # what the child's exit runs
            return "ok"

        said: list[str] = []

        def action() -> None:
            said.append(in_forked_child(child))

        RAN["forked children"] += 1
        for act in acts:
            RAN[f"forked child: {act}"] += 1
        error = self.run("memory", action)
        assert error is None and said == ["ok"], (error, said)
        if locked and path is not None and not self.dead():
            with pytest.raises(SessionLockError):
                FileLock(path)  # a second writer is refused: the lock is still ours
            RAN["forked children: the parent's lock checked"] += 1

    # --- family: copies across agent dirs ---
    # A second agent dir (`self.other`) beside the manager's. This session (whole or index
    # first, interfered with, faults armed) is copied into it, and a session it holds is
    # copied into the manager's agent dir, by every copy operation; a rule then takes the
    # source agent dir's blobs/ away and checks that every copy made from it still
    # resolves in its own agent dir and loads with its images.

    @initialize()
    def other_agent_dir(self) -> None:
        os.makedirs(os.path.join(self.other, "blobs"))
        self.copies: list[tuple[str, str]] = []  # (copy, agent dir it was copied from)
        self.copy_dest = ""  # the session dir the copy running goes to
        self.other_source = self.new_other_source()

    def new_other_source(self) -> str:
        """A session in the other agent dir with an image in each form a session holds it."""
        directory = os.path.join(self.other, "sessions", "--w-other--")
        sm = SessionManager.create("/w/other", directory)
        sm.append_message(message("image", "other"))
        sm.append_message(message("assistant", "seen"))
        append_image_ref(sm, "handed", "other")
        append_image_ref(sm, "frame", "other")
        sm.append_message(message("assistant", "done"))
        sm.close()
        path = sm.get_session_file()
        assert path is not None
        return path

    def copy_patterns(self, targets: Sequence[str]) -> list[str]:
        """What a copy may touch: its file, lock and dirs (made even when the copy then
        fails), and both agent dirs' blobs."""
        agents = (self.agent, self.other)
        patterns = [os.path.join(d, n) for d in agents for n in ("blobs", "blobs/*")]
        patterns += [self.copy_dest, os.path.dirname(self.copy_dest)]
        for p in targets:
            d = os.path.dirname(p)
            patterns += [p, lock_path_for(p), d, os.path.dirname(d)]
        return patterns

    @contextmanager
    def loads(self, lazy: bool) -> Iterator[None]:
        """Sources whose load mode is not given load index first (True) or whole."""
        saved = loader.LAZY_LOAD_BYTES
        loader.LAZY_LOAD_BYTES = 0 if lazy else 1 << 40  # type: ignore[misc]
        try:
            yield
        finally:
            loader.LAZY_LOAD_BYTES = saved  # type: ignore[misc]

    def copied(self, kind: str, action: Callable[[], str | None], source: str) -> None:
        """Run a copy as a manager operation (faults armed, every check after it)."""
        targets: list[str] = []

        def run_copy() -> None:
            path = action()
            if path is not None:
                targets.append(path)

        error = self.run(kind, run_copy, targets)
        self.made(error, targets[-1] if targets else None, source)

    def made(self, error: Exception | None, path: str | None, source: str) -> None:
        """A copy from `source` was made at `path` (unless it raised): it resolves without
        its source's blobs now, and is checked again later (`source_blobs_gone`)."""
        if error is not None or not path:
            RAN[f"copies across agent dirs: {'failed' if error else 'nothing to copy'}"] += 1
            return
        RAN["copies across agent dirs: made"] += 1
        assert read_session(path, FileSessionStorage()).valid
        self.copies.append((path, source))
        self.without_blobs_of(source, [path])

    @rule(kind=st.sampled_from(["handed", "frame"]), text=texts)
    def append_image_ref(self, kind: str, text: str) -> None:
        """An image this session holds as a ref: one `put_blob` handed out, or a frame."""
        self.append(lambda sm: append_image_ref(sm, kind, text))

    @rule(op=st.sampled_from(["fork_from", "persist_copy", "extract"]), lazy=st.booleans())
    def copy_out(self, op: str, lazy: bool) -> None:
        """This session copied into the other agent dir."""
        sm = self.manager
        path = sm.get_session_file()
        directory = self.copy_dest = os.path.join(self.other, "sessions", "--w-copies--")
        if op == "fork_from" and (path is None or not self.on_disk()):
            return

        def action() -> str | None:
            RAN[f"copy into the other agent dir: {op}"] += 1
            if op == "fork_from":
                assert path is not None
                with self.loads(lazy), SessionManager.fork_from(path, "/w/x", directory) as fork:
                    return fork.get_session_file()
            leaf = sm.get_leaf_id() if op == "extract" else None
            if op == "extract" and leaf is None:
                return None
            with sm.persist_copy(directory, breadcrumb=False, leaf_id=leaf) as copy_:
                return copy_.get_session_file()

        self.copied("copy", action, self.agent)

    @rule(
        op=st.sampled_from(
            ["fork", "create_branched_session", "persist_copy", "extract", "fork_from", "move_to"]
        ),
        lazy=st.booleans(),
        cwd=st.sampled_from(CWDS),
    )
    def copy_in(self, op: str, lazy: bool, cwd: str) -> None:
        """The other agent dir's session copied (or moved) into this one."""
        source = self.other_source
        directory = self.copy_dest = get_default_session_dir(cwd)

        def action() -> str | None:
            RAN[f"copy from the other agent dir: {op}"] += 1
            if op == "fork_from":
                with self.loads(lazy), SessionManager.fork_from(source, cwd) as fork:
                    return fork.get_session_file()
            if op in ("persist_copy", "extract"):
                with SessionManager.open(source, read_only=True, lazy=lazy) as sm:
                    leaf = sm.get_leaf_id() if op == "extract" else None
                    copy_ = sm.persist_copy(directory, breadcrumb=False, leaf_id=leaf)
                with copy_:
                    return copy_.get_session_file()
            with SessionManager.open(
                source, session_dir=directory, lazy=lazy, breadcrumb=False
            ) as sm:
                if op == "fork":
                    forked = sm.fork()
                    return forked[1] if forked else None
                if op == "create_branched_session":
                    return sm.create_branched_session(sm.get_leaf_id() or "")
                sm.move_to(cwd)
                return sm.get_session_file()

        if op == "move_to":
            # The source goes: the move may remove it (and must take its images along).
            targets: list[str] = [source]
            error = self.run("copy-move", lambda: targets.append(action() or ""), targets)
            self.made(error, targets[-1], self.other)
        else:
            self.copied("copy", action, self.other)
        if not os.path.exists(source) or not read_session(source, FileSessionStorage()).valid:
            self.other_source = self.new_other_source()

    @precondition(lambda self: bool(getattr(self, "copies", None)))
    @rule(which=st.sampled_from(["this", "other"]))
    def source_blobs_gone(self, which: str) -> None:
        """The blobs/ of the agent dir copies were made from goes: they still resolve."""
        source = self.agent if which == "this" else self.other
        copies = [c for c, origin in self.copies if origin == source and os.path.exists(c)]
        self.without_blobs_of(source, copies)

    def without_blobs_of(self, source: str, copies: list[str]) -> None:
        """Check each copy resolves while the blobs/ of `source` is away."""
        blobs = os.path.join(source, "blobs")
        away = blobs + ".away"
        if os.path.isdir(blobs):
            os.rename(blobs, away)
        try:
            for path in copies:
                self.check_copy_resolves(path)
        finally:
            if os.path.isdir(away):
                os.rename(away, blobs)

    def check_copy_resolves(self, path: str) -> None:
        """Every ref in the copy resolves in its own agent dir's blobs; it loads (whole
        and index first) with every image block as data, not a ref."""
        findings = check_session(path, conflicts=False)
        bad = [f for f in findings if f.kind in ("missing_blob", "damaged_blob")]
        assert not bad, (path, bad)
        for lazy in (False, True):
            with SessionManager.open(path, read_only=True, lazy=lazy) as sm:
                for entry in sm.get_entries():
                    content = entry.get("message", {}).get("content")
                    for block in content if isinstance(content, list) else []:
                        if isinstance(block, dict) and block.get("type") == "image":
                            data = block.get("data")
                            assert not (isinstance(data, str) and data.startswith("blob:")), (
                                path,
                                data,
                            )
        RAN["copies checked with their source's blobs gone"] += 1

    # --- family: gc and live managers ---
    # Beside the manager under test live others that hold images no file names yet: in
    # memory (`put_blob`, later `persist_copy`), deferred (`put_blob` before the first
    # reply) and persisted ones, some images shared between them; a process that died
    # leaves its pin now and then; the manager under test puts images too. `gc --delete`
    # runs with its clock an hour ahead, so every blob is past the minimum age. After
    # each gc and each write of these managers: every ref in every file gc reads and in
    # every live manager (the one under test included) resolves, every blob a live
    # manager pinned is there, and no stale pin outlives a gc that deleted.

    def close_live(self) -> None:
        for sm in self.live:
            try:
                sm.close()
            except SessionTreeError:
                pass
        self.live = []

    @rule(
        kind=st.sampled_from(["memory", "deferred", "persisted"]),
        seed=st.integers(0, 5),
        use=st.booleans(),
    )
    def live_put_image(self, kind: str, seed: int, use: bool) -> None:
        """A new manager of `kind`, or the last one of that kind still open, puts an
        image (and, with `use`, appends a message naming it)."""
        sm = next((m for m in reversed(self.live) if getattr(m, "model_kind", "") == kind), None)
        if sm is None:
            if kind == "memory":
                sm = SessionManager.in_memory("/w/live")
            else:
                sm = SessionManager.create(f"/w/live-{kind}")
                if kind == "persisted":
                    sm.append_message(message("assistant", "first"))
            sm.model_kind = kind  # type: ignore[attr-defined]
            self.live.append(sm)
        ref = sm.put_blob(model_image(seed)).ref
        if use:
            sm.append_message(image_ref_message(ref))
        RAN[f"live {kind}: images put"] += 1
        self.check_refs_resolve()

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), close=st.booleans())
    def live_write_or_close(self, data: st.DataObject, close: bool) -> None:
        """A live manager writes its session (the deferred one gets its first reply, the
        in-memory one a persisted copy, closed at once, the persisted one an entry), or
        closes (its pins go; a deferred one's session is never written)."""
        sm = data.draw(st.sampled_from(self.live))
        kind = getattr(sm, "model_kind", "")
        if close:
            self.live.remove(sm)
            sm.close()
            RAN[f"live {kind}: closed"] += 1
            return
        if kind == "memory":
            sm.persist_copy(get_default_session_dir("/w/live-copies")).close()
        else:
            sm.append_message(message("assistant", "seen"))
        RAN[f"live {kind}: written"] += 1
        self.check_refs_resolve()

    @rule(seed=st.integers(0, 5))
    def main_put_image(self, seed: int) -> None:
        """The manager under test puts an image and appends a message naming it."""
        sm = self.manager

        def action() -> None:
            ref = sm.put_blob(model_image(seed)).ref
            entry_id = sm.append_message(image_ref_message(ref))
            self.expected.append(copy.deepcopy(sm.get_entry(entry_id)) or {})

        self.run("append" if self.on_disk() else "append-first", action)

    @rule(stale=st.one_of(st.none(), st.integers(0, 5)))
    def gc_delete(self, stale: int | None) -> None:
        """`gc --delete` an hour later; first, with `stale`, what a process killed while it
        held an image leaves: its blob and its pin, unlocked."""
        if stale is not None:
            digest = BlobStore(os.path.join(self.agent, "blobs")).put(model_image(stale)).hash
            live = os.path.join(self.agent, "blobs", LIVE_DIR)
            os.makedirs(live, exist_ok=True)
            with open(os.path.join(live, f"99999999-{stale:016x}.pin"), "w") as f:
                f.write(digest + "\n")
            RAN["stale pins left"] += 1
        self.later_gc()

    def later_gc(self) -> bool:
        """`gc --delete` with its clock an hour ahead, then the family's checks; False
        when it refused to delete."""
        real = gc_module.time
        later = types.SimpleNamespace(time=lambda: real.time() + 3600)
        gc_module.time = later  # type: ignore[assignment]
        try:
            report = collect_garbage(store_parts(agent_dir=self.agent), delete=True)
        finally:
            gc_module.time = real
        RAN["gc runs"] += 1
        if report.refused is not None:
            RAN[f"gc refused: {report.refused}"] += 1
            return False
        RAN["gc: blobs deleted"] += len(report.deleted)
        RAN["gc: blobs kept for live managers"] += report.pinned
        self.check_refs_resolve()
        pins = read_pins(os.path.join(self.agent, "blobs"))
        assert pins.stale == [], pins.stale
        return True

    # --- family: a live index-first session whose file is deleted ---
    # A writable manager loaded index first holds the lines it has not read only in its
    # file. Another program deletes that file, gc runs an hour later, and the manager
    # writes again (it recreates the file from what it holds): every ref of the new file
    # resolves, because the index pass pinned every ref it saw. The manager is this one
    # (when it holds unread lines) or another, made with an image of every form.

    @rule(which=st.sampled_from(["this", "another"]), read=st.booleans())
    def lazy_file_deleted_then_gc(self, which: str, read: bool) -> None:
        """`read`: another manager reads every line first (this one reads what the
        other rules ask for)."""
        sm = self.manager
        path = sm.get_session_file()
        this = (
            which == "this"
            and path is not None
            and sm._index.pinned is not None  # lines not read yet
            and self.on_disk()
            and self.trusted
            and not self.pending
            and not self.dead()
            and os.path.exists(path)
        )
        if not this:
            self.another_lazy_file_deleted(read)
            return
        assert path is not None
        os.unlink(path)
        self.trusted, self.pending = False, "delete"
        self.tampered.add(path)
        RAN["index-first files deleted under their live manager: this one"] += 1
        self.later_gc()
        self.append_message("user", "after the delete")  # must recreate the file
        if not self.dead() and os.path.exists(path):
            self.check_refs_resolve()
            RAN["index-first files recreated after gc: this one"] += 1

    def another_lazy_file_deleted(self, read: bool) -> None:
        directory = os.path.join(self.agent, "sessions", "--w-lazy--")
        with SessionManager.create("/w/lazy", directory) as made:
            made.append_message(message("image", "lazy"))
            made.append_message(message("assistant", "seen"))
            append_image_ref(made, "handed", "lazy")
            append_image_ref(made, "frame", "lazy")
            for i in range(6):
                made.append_message(message("user", f"u{i}"))
                made.append_message(message("assistant", f"a{i}"))
            path = made.get_session_file() or ""
        live = SessionManager.open(path, lazy=True)
        assert live._index.pinned is not None
        live.model_kind = "lazy"  # type: ignore[attr-defined]
        self.live.append(live)
        if read:
            live.get_entries()
        os.unlink(path)
        RAN["index-first files deleted under their live manager: another"] += 1
        self.later_gc()
        live.append_message(message("user", "after the delete"))  # recreates the file
        assert os.path.exists(path)
        assert check_session(path, conflicts=False) == [], path
        self.check_refs_resolve()
        RAN["index-first files recreated after gc: another"] += 1

    # --- family: copies outside every agent dir (they hold their images inline) ---
    # `export -f jsonl -o` and `repair -o` (the library calls behind them) to a path
    # outside every agent dir: no gc reads it there, so the copy holds its images itself.
    # The source is this session (live) or one made for the copy, with an image of every
    # form, removed once copied; gc runs an hour later. No image is lost: each image
    # payload of the source is data in the copy, unless its blob could not be read (its
    # ref is then kept, and reported), and gc changes nothing of the copy.

    @rule(
        command=st.sampled_from(["export", "repair"]),
        source=st.sampled_from(["this", "removed"]),
        lazy=st.booleans(),
    )
    def copy_outside(self, command: str, source: str, lazy: bool) -> None:
        path = self.manager.get_session_file()
        removed = source == "removed" or path is None or not self.on_disk() or self.dead()
        if removed:
            path = self.source_to_remove(command)
        assert path is not None
        outside = os.path.join(self.root, "outside")
        os.makedirs(outside, exist_ok=True)
        self.copy_dest = outside
        out = os.path.join(outside, f"copy-{RAN['copies outside: tried']}.jsonl")
        RAN["copies outside: tried"] += 1
        reported: list[tuple[str, str]] = []
        original: list[bytes] = []

        def action() -> str | None:
            if command == "repair":
                with open(path, "rb") as f:
                    original.append(f.read())
                report = repair_session(path, store_parts(agent_dir=self.agent), out)
                return report.out_path if report.out_path == out else None
            sm = self.manager
            if removed:
                sm = SessionManager.open(path, read_only=True, lazy=lazy)
            try:
                data = export_jsonl(sm)
                original.append(data)
                carry = sm.blob_carry(out, FileSessionStorage(), standalone=True)
                assert carry.inlines
                FileSessionStorage().write_atomic(out, carry.chunks([data], out))
                reported.extend(carry.report())
            finally:
                if removed:
                    sm.close()
            return out

        targets: list[str] = [out]  # (a fault after the rename may leave it, whole)
        error = self.run("copy", lambda: targets.append(action() or ""), targets)
        made = error is None and targets[-1] == out
        if removed and os.path.exists(path):
            os.unlink(path)
        if not made:
            RAN[f"copies outside: {'failed' if error else 'nothing to copy'}"] += 1
            if os.path.exists(out):  # failed once it was in place (syncing its dir, say)
                assert error is not None and read_session(out, FileSessionStorage()).valid
                RAN["copies outside: failed after the copy was in place"] += 1
            return
        RAN[f"copies outside: {command} of {'a removed' if removed else 'this'} session"] += 1
        with open(out, "rb") as f:
            copied = f.read()
        self.check_standalone(original[0], copied, {d for _, d in reported}, command)
        self.later_gc()
        with open(out, "rb") as f:
            assert f.read() == copied
        RAN["copies outside: checked after the source went and gc ran"] += 1

    def source_to_remove(self, command: str) -> str:
        """A session with an image of every form, for a copy outside; torn at its end
        for a repair (something to repair)."""
        directory = os.path.join(self.agent, "sessions", "--w-outside--")
        with SessionManager.create("/w/outside", directory) as sm:
            sm.append_message(message("image", "outside"))
            sm.append_message(message("assistant", "seen"))
            append_image_ref(sm, "handed", "outside")
            append_image_ref(sm, "frame", "outside")
            sm.append_message(message("assistant", "done"))
            path = sm.get_session_file() or ""
        if command == "repair":
            with open(path, "ab") as f:
                f.write(b'{"type":"message","id":"torn"')
        return path

    def check_standalone(
        self, source: bytes, copied: bytes, reported: set[str], command: str
    ) -> None:
        """Every image payload of `source` is data in `copied`, in the same places, but
        the refs reported (blobs that could not be read); no other ref is left."""
        want, got = image_payloads(source), image_payloads(copied)
        assert len(got) == len(want), (command, want, got)  # (a torn line is no image)
        blobs = BlobStore(os.path.join(self.agent, "blobs"))
        for before, after in zip(want, got, strict=True):
            if after.startswith("blob:sha256:"):
                assert after == before and after.removeprefix("blob:sha256:") in reported
                RAN["copies outside: refs kept (reported)"] += 1
                continue
            if before.startswith("blob:sha256:"):
                image = base64.b64decode(after, validate=True)  # the blob's canonical base64
                assert blobs.get(before.removeprefix("blob:sha256:")) in (image, None)
            else:
                assert after == before  # data already: as the source holds it
            RAN["copies outside: images inline"] += 1
        left = find_blob_refs(copied)
        assert left <= reported, (left, reported)

    def check_refs_resolve(self) -> None:
        blobs = os.path.join(self.agent, "blobs")
        for directory, dirs, files in os.walk(self.agent):
            if os.path.abspath(directory) == os.path.abspath(blobs):
                dirs[:] = []
                continue
            for name in files:
                path = os.path.join(directory, name)
                if name.endswith(".tmp") or os.path.islink(path):
                    continue
                with open(path, "rb") as f:
                    refs = find_blob_refs(f.read())
                for digest in refs:
                    assert os.path.isfile(os.path.join(blobs, digest)), (path, digest)
        for sm in [*self.live, self.manager]:
            for _, entry in sm._index.read_so_far():
                if entry is None or not isinstance(entry, dict):
                    continue
                for digest in find_blob_refs(serialize_entry_bytes(entry)):
                    assert os.path.isfile(os.path.join(blobs, digest)), (sm, digest)
            for digest in sm._pins.hashes():
                assert os.path.isfile(os.path.join(blobs, digest)), (sm, digest)


def append_image_ref(sm: SessionManager, kind: str, text: str) -> str:
    """Append an image given as a ref `put_blob` handed out ("handed"), or as a
    snapcompact frame (a ref even when read back)."""
    ref = sm.put_blob(f"{kind} image {text}".encode() * 100).ref
    if kind == "handed":
        block = {"type": "image", "data": ref, "mimeType": "image/png"}
        return sm.append_message({"role": "user", "content": [block], "timestamp": 5})
    frame = {"data": ref, "mimeType": "image/png"}
    return sm.append_custom_entry("snapcompact", {"frames": [frame]})


def image_payloads(data: bytes) -> list[str]:
    """The `data` of every image block and snapcompact frame in a session's bytes, in order."""
    found: list[str] = []
    for line in data.splitlines()[1:]:
        try:
            entry = loads_line(line)
        except ValueError:
            continue  # a torn line
        if not isinstance(entry, dict):
            continue
        if entry.get("customType") == "snapcompact":
            found += [f["data"] for f in entry.get("data", {}).get("frames", [])]
            continue
        content = (
            entry.get("message", {}).get("content") if entry.get("type") == "message" else None
        )
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "image":
                found.append(block["data"])
    return found


def glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


ManagerModel.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class TestManagerModel(ManagerModel.TestCase):  # type: ignore[name-defined,misc]
    """The model, as a pytest test."""


def test_model_run_size_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    """Runs after the model (file order): says how much it did."""
    with capsys.disabled():
        ran = max(1, RAN["examples"])
        print(
            f"\nmanager model: {RAN['examples']} examples (max_examples={EXAMPLES}) x up to "
            f"{STEPS} steps: {RAN['steps'] / ran:.1f} steps per example on average "
            f"({RAN['operations'] / ran:.1f} of them manager operations); ran:"
        )
        for key, count in sorted(RAN.items()):
            print(f"  {key}: {count}")
    assert RAN["examples"] >= 1 or not RAN
