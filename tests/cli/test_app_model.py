"""Every CLI command that writes or deletes touches only its written-down allowed set.

hypothesis builds random agent dirs holding sessions (current and v1, with and
without images and artifacts dirs), damaged sessions, non-session `.jsonl` files,
directories named like artifacts dirs that belong to no session, symlinks into and
out of the store, `.bak` and conflict copies, files of other agents, and a project
dir with a `src.jsonl` beside a `src/`. It then runs one command on a random target
(a session or anything else) and compares a snapshot of the whole tree before and
after with the command's allowed set (`ALLOWED` below). Reading commands may only
write `<agent>/cache/`.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from sessiontree import SessionManager
from sessiontree.cli import app
from sessiontree.session import _loader as loader
from sessiontree.storage import FileSessionStorage, PublishLock, lock_path_for
from tests import foreign_support as fs
from tests.conftest import examples
from tests.helpers import assistant, user

pytestmark = pytest.mark.slow  # about a minute under the ci profile

EXAMPLES = examples(200, "SESSIONTREE_CLI_MODEL_EXAMPLES")
RAN: Counter[str] = Counter()  # commands run and their exit codes, printed after the run
runner = CliRunner()
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8).decode()

Snapshot = dict[str, tuple[str, int, str, float]]


def snapshot(root: str) -> Snapshot:
    """Every path under `root` -> (kind, inode, content digest or link target, mtime)."""
    found: Snapshot = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(directory, name)
            st_ = os.lstat(path)
            if os.path.islink(path):
                found[path] = ("link", st_.st_ino, os.readlink(path), 0.0)
            elif os.path.isdir(path):
                found[path] = ("dir", st_.st_ino, "", 0.0)
            else:
                with open(path, "rb") as f:
                    digest = hashlib.blake2b(f.read(), digest_size=16).hexdigest()
                found[path] = ("file", st_.st_ino, digest, st_.st_mtime)
    return found


@dataclass
class Store:
    root: str
    agent: str
    project: str
    sessions: list[str] = field(default_factory=list)
    """Valid sessions of the store (files that `rm` may delete)."""
    targets: list[str] = field(default_factory=list)
    """Everything a command may be pointed at, sessions or not."""
    leaves: dict[str, str] = field(default_factory=dict)
    referenced_blobs: set[str] = field(default_factory=set)
    foreign: list[str] = field(default_factory=list)
    """Claude Code and Codex session files (in `root/claude`, `root/codex`) to import."""


def build_store(data: st.DataObject) -> Store:
    root = tempfile.mkdtemp(prefix="st-cli-model-")
    agent = os.path.join(root, "agent")
    project = os.path.join(root, "project")
    os.makedirs(os.path.join(project, "src"))
    with open(os.path.join(project, "src", "main.py"), "w") as f:
        f.write("print('hi')\n")
    with open(os.path.join(project, "src.jsonl"), "w") as f:
        f.write("not a session, beside a directory of the same stem\n")
    store = Store(root, agent, project)
    os.environ["PI_CODING_AGENT_DIR"] = agent
    session_dir = os.path.join(
        agent, "sessions", "--" + project.strip("/").replace("/", "-") + "--"
    )
    for i in range(data.draw(st.integers(1, 4), label="sessions")):
        cwd = project if i % 2 == 0 else "/elsewhere/other"
        with SessionManager.create(cwd) as sm:
            first = sm.append_message(user(f"question {i}"))
            if data.draw(st.booleans(), label="image"):
                content = [
                    {"type": "text", "text": "see"},
                    {"type": "image", "data": PNG + str(i), "mimeType": "image/png"},
                ]
                sm.append_message({"role": "user", "content": content, "timestamp": 1})
            sm.append_message(assistant(f"answer {i}"))
            sm.branch(first)
            sm.append_message(assistant(f"other branch {i}"))
            path = sm.get_session_file() or ""
        store.sessions.append(path)
        store.leaves[path] = first
        if data.draw(st.booleans(), label="artifacts"):
            os.makedirs(path[: -len(".jsonl")])
            with open(os.path.join(path[: -len(".jsonl")], "subagent.jsonl"), "w") as f:
                f.write("{}\n")
    os.makedirs(session_dir, exist_ok=True)
    extras: dict[str, bytes] = {
        "notes.jsonl": b"just notes\n",
        "damaged.jsonl": b"garbage first line\n" + b'{"type":"message"}\n',
        "2026-01-01T00-00-00-000Z_0cb0000000000000.jsonl.bak": b"a backup\n",
        "v1.jsonl": (
            b'{"type":"session","id":"0cb00000000000aa","timestamp":"2026-01-01T00:00:00.000Z",'
            b'"cwd":"' + project.encode() + b'"}\n'
            b'{"type":"message","timestamp":"2026-01-01T00:00:01.000Z","message":'
            b'{"role":"user","content":"old","timestamp":1}}\n'
        ),
        "pi-session.jsonl": (
            b'{"type":"session","version":3,"id":"0cb00000000000bb","timestamp":'
            b'"2026-01-01T00:00:00.000Z","cwd":"/pi"}\n'
            b'{"type":"session_info","id":"aa000001","parentId":null,"timestamp":'
            b'"2026-01-01T00:00:01.000Z","name":"named by pi"}\n'
        ),
    }
    for name, content in extras.items():
        if data.draw(st.booleans(), label=name):
            with open(os.path.join(session_dir, name), "wb") as f:
                f.write(content)
            store.targets.append(os.path.join(session_dir, name))
            if name in ("v1.jsonl", "pi-session.jsonl"):
                store.sessions.append(os.path.join(session_dir, name))
    # A directory named like an artifacts dir of a session that is not there.
    orphan = os.path.join(session_dir, "2026-01-01T00-00-00-000Z_0cb00000000000cc")
    os.makedirs(orphan)
    with open(os.path.join(orphan, "keep.txt"), "w") as f:
        f.write("not yours\n")
    # Symlinks: into the store from outside, and out of the store from inside.
    outside = os.path.join(root, "outside.jsonl")
    with open(outside, "w") as f:
        f.write("a file that is not the store's\n")
    link = os.path.join(session_dir, "2026-01-01T00-00-00-000Z_0cb00000000000dd.jsonl")
    os.symlink(outside, link)
    store.targets += [link, outside, os.path.join(project, "src.jsonl"), orphan + ".jsonl"]
    store.targets += store.sessions
    # Blobs: the ones sessions reference, and old ones nothing references.
    blobs = os.path.join(agent, "blobs")
    if os.path.isdir(blobs):
        store.referenced_blobs = {n for n in os.listdir(blobs) if len(n) == 64}
    os.makedirs(blobs, exist_ok=True)
    for i in range(data.draw(st.integers(0, 2), label="garbage blobs")):
        payload = f"garbage {i}".encode()
        path = os.path.join(blobs, hashlib.sha256(payload).hexdigest())
        with open(path, "wb") as f:
            f.write(payload)
        old = time.time() - 3600
        os.utime(path, (old, old))
    # Other agents' stores, for `import` (which must only read them).
    store.foreign.append(str(fs.claude_subagent_session(Path(root, "claude", "projects"))))
    store.foreign += [str(p) for p in fs.codex_rollouts(Path(root, "codex"))]
    return store


@contextmanager
def inside(store: Store) -> Iterator[None]:
    previous = os.getcwd()
    os.chdir(store.project)
    try:
        yield
    finally:
        os.chdir(previous)
        shutil.rmtree(store.root, ignore_errors=True)


def sibling(path: str, pattern: str) -> str:
    directory, name = os.path.split(path)
    return os.path.join(directory, pattern.replace("{name}", name))


Rule = Callable[[Store, str, list[str]], list[str]]
"""The paths (glob patterns) a command on `target` may create, change or remove."""


def _session_side(store: Store, target: str) -> list[str]:
    return [target, lock_path_for(target), sibling(target, ".{name}.*.tmp")]


def _blobs(store: Store, target: str) -> list[str]:
    return [os.path.join(store.agent, "blobs"), os.path.join(store.agent, "blobs", "*")]


def _new_sessions(store: Store, target: str) -> list[str]:
    sessions = os.path.join(store.agent, "sessions")
    return [
        os.path.join(sessions, "*"),
        os.path.join(sessions, "*", "*.jsonl"),
        os.path.join(sessions, "*", ".*.writer-lock"),
        os.path.join(sessions, "*", ".*.tmp"),
        os.path.join(store.agent, "external-session-dirs"),
    ]


def _cache(store: Store, target: str) -> list[str]:
    return [os.path.join(store.agent, "cache"), os.path.join(store.agent, "cache", "*")]


def _in_store(store: Store, target: str) -> bool:
    return target in store.sessions and not os.path.islink(target)


def _rm(store: Store, target: str, args: list[str]) -> list[str]:
    """A valid session of the store, with its own artifacts dir; with --force also a
    damaged `*.jsonl` in the store's session dirs (never its neighbours)."""
    if _in_store(store, target):
        return [*_session_side(store, target), target[:-6], target[:-6] + "/*"]
    in_sessions = target.startswith(os.path.join(store.agent, "sessions") + os.sep)
    if "--force" in args and in_sessions and target.endswith(".jsonl"):
        if os.path.isfile(target) and not os.path.islink(target):
            return _session_side(store, target)
    return []


def _imports(store: Store, target: str, args: list[str]) -> list[str]:
    """New sessions with their artifacts dirs (subagents), blobs, the listing cache; that
    nothing existing changes is checked apart (`check_changes`)."""
    sessions = os.path.join(store.agent, "sessions")
    artifacts = [
        os.path.join(sessions, "*", "*", name) for name in ("*.jsonl", ".*.writer-lock", ".*.tmp")
    ]
    return [
        *_new_sessions(store, target),
        *artifacts,
        *_blobs(store, target),
        *_cache(store, target),
    ]


ALLOWED: dict[str, Rule] = {
    # rm: the session file and its own artifacts dir, nothing else, ever.
    "rm": _rm,
    "repair": lambda s, t, a: [*_session_side(s, t), sibling(t, "{name}.bak*")],
    # migrate and rename rewrite: a file with lines no reader parses is kept as `.bak*`.
    "migrate": lambda s, t, a: [*_session_side(s, t), sibling(t, "{name}.bak*"), *_blobs(s, t)],
    "rename": lambda s, t, a: [*_session_side(s, t), sibling(t, "{name}.bak*"), *_blobs(s, t)],
    "fork": lambda s, t, a: [*_new_sessions(s, t), *_blobs(s, t), *_cache(s, t)],
    "extract": lambda s, t, a: [*_new_sessions(s, t), *_blobs(s, t), *_cache(s, t)],
    "gc": lambda s, t, a: [os.path.join(s.agent, "blobs", "*")],
    "import": _imports,
    "read": lambda s, t, a: _cache(s, t),
}

READING = [
    ["list", "--all"],
    ["show", "{t}"],
    ["tree", "{t}"],
    ["context", "{t}"],
    ["export", "{t}", "-f", "md"],
    ["search", "question", "--all"],
    ["stats", "--all"],
    ["verify", "--all"],
    ["gc"],
]


def command_line(kind: str, store: Store, target: str, data: st.DataObject) -> list[str]:
    if kind == "rm":
        return ["rm", target, "--yes", *(["--force"] if data.draw(st.booleans()) else [])]
    if kind == "repair":
        return ["repair", target, "--in-place"]
    if kind == "migrate":
        return ["migrate", target]
    if kind == "rename":
        return ["rename", target, "a new name"]
    if kind == "fork":
        return ["fork", target]
    if kind == "extract":
        return ["extract", target, "--leaf", store.leaves.get(target, "00000000")]
    if kind == "gc":
        return ["gc", "--delete"]
    if kind == "import":
        source = data.draw(st.sampled_from(["claude", "codex"]), label="from")
        again = ["--again"] if data.draw(st.booleans(), label="again") else []
        if data.draw(st.booleans(), label="all"):
            return ["import", "--all", "--from", source, *again]
        what = data.draw(st.sampled_from(store.foreign + store.targets), label="source")
        return ["import", what, "--from", source, *again]
    template = data.draw(st.sampled_from(READING))
    return [part.replace("{t}", target) for part in template]


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data(), kind=st.sampled_from(sorted(ALLOWED)))
def test_each_command_touches_only_its_allowed_set(data: st.DataObject, kind: str) -> None:
    saved = {
        v: os.environ.get(v) for v in ("PI_CODING_AGENT_DIR", "CLAUDE_CONFIG_DIR", "CODEX_HOME")
    }
    store = build_store(data)
    os.environ["CLAUDE_CONFIG_DIR"] = os.path.join(store.root, "claude")
    os.environ["CODEX_HOME"] = os.path.join(store.root, "codex")
    try:
        with inside(store):
            # Half the time a session, so that the commands' successes are checked too.
            pool = data.draw(st.sampled_from([store.sessions, store.targets]), label="pool")
            target = data.draw(st.sampled_from(pool), label="target")
            args = command_line(kind, store, target, data)
            allowed = ALLOWED[kind](store, target, args)  # decided before the command runs
            peer = data.draw(PEERS, label="peer") if kind in REWRITING else None
            if peer is not None:
                # Its line goes to the target, carried or kept as a conflict copy.
                allowed += [target, sibling(target, "{name}.conflict-*")]
            before = snapshot(store.root)
            with peer_appending(peer, target) as appended:
                result = runner.invoke(app, args)
            after = snapshot(store.root)
            if appended:
                RAN["peer appends raced"] += 1
                RAN[f"peer appends raced: {kind}, {peer}"] += 1
                assert holds(store.root, appended[0]), f"{args}: {peer} peer's line lost"
            RAN["examples"] += 1
            RAN[f"{kind} exit {result.exit_code}"] += 1
            RAN["paths changed"] += sum(
                1 for p in set(before) | set(after) if before.get(p) != after.get(p)
            )
            assert "Traceback" not in result.output, (args, result.output)
            assert result.exception is None or isinstance(result.exception, SystemExit), (
                args,
                result.exception,
            )
            check_changes(kind, args, before, after, allowed, store)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


REWRITING = {"rename", "migrate", "repair"}
"""Commands that rewrite a session in place: a peer may append during them."""
PEERS = st.one_of(
    st.none(),
    st.tuples(st.sampled_from(["pi", "omp"]), st.sampled_from(["written", "window", "swapped"])),
)
"""pi (open, append, close) or oh-my-pi (under its publish lock) appends a line to the
target while the new file is written, between the last check and the rename, or just
after (oh-my-pi waits while the rewrite holds its lock, then appends to the path)."""


@contextmanager
def peer_appending(peer: tuple[str, str] | None, path: str) -> Iterator[list[bytes]]:
    """While the command runs, a peer appends one line to `path` at the moment `peer`
    says; yields the lines appended (none when the command never got there)."""
    appended: list[bytes] = []
    if peer is None or not os.path.isfile(path) or os.path.islink(path):
        yield appended
        return
    way, moment = peer
    line = b'{"type":"custom","customType":"peer","id":"peer%d","parentId":null}\n' % (
        time.monotonic_ns()
    )
    waited: list[str] = []

    def append(target: str) -> None:
        if appended or waited or not os.path.isfile(target):
            return
        if way == "omp":
            gate = PublishLock(target)
            if not gate._take_gate():
                waited.append(target)  # the rewrite holds oh-my-pi's lock: it waits
                return
            gate._drop_gate()
        pi_append(target, line)
        appended.append(line)

    real_write, real_rename = FileSessionStorage.write_atomic, FileSessionStorage.rename

    def write_atomic(storage: FileSessionStorage, target: str, chunks: Any) -> Any:
        if moment == "written" and target != path:
            append(path)
        return real_write(storage, target, chunks)

    def rename(storage: FileSessionStorage, src: str, dst: str) -> None:
        if moment == "window" and dst == path:
            append(dst)
        real_rename(storage, src, dst)
        if moment == "swapped" and dst == path:
            append(dst)

    FileSessionStorage.write_atomic = write_atomic  # type: ignore[method-assign]
    FileSessionStorage.rename = rename  # type: ignore[method-assign]
    try:
        yield appended
    finally:
        FileSessionStorage.write_atomic = real_write  # type: ignore[method-assign]
        FileSessionStorage.rename = real_rename  # type: ignore[method-assign]
    if waited:
        with PublishLock(path):
            pi_append(path, line)
        appended.append(line)
        RAN["peer appends that waited for the rewrite's lock"] += 1


def pi_append(path: str, line: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def holds(root: str, line: bytes) -> bool:
    """Whether a file under `root` holds `line`'s entry."""
    needle = line[line.index(b'"id":') : line.index(b',"parentId"')]
    for directory, _, files in os.walk(root):
        for name in files:
            full = os.path.join(directory, name)
            if not os.path.islink(full) and os.path.isfile(full):
                with open(full, "rb") as f:
                    if needle in f.read():
                        return True
    return False


def check_changes(
    kind: str,
    args: list[str],
    before: Snapshot,
    after: Snapshot,
    allowed: list[str],
    store: Store,
) -> None:
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new or (old and new and old[:3] == new[:3] and old[0] == "dir"):
            continue
        if old is not None and new is not None and old[:3] == new[:3]:
            continue  # only an mtime (a re-put blob is touched, by design)
        assert any(fnmatch.fnmatchcase(path, pattern) for pattern in allowed), (
            f"{args} changed {path} ({old} -> {new}); allowed: {allowed}"
        )
        if kind == "import" and not path.startswith(os.path.join(store.agent, "cache")):
            # Only new files: no session, blob or source that was there changes.
            assert old is None or old[0] == "dir", f"{args} changed {path}"
        if kind == "gc":
            # Only old, unreferenced blobs go; nothing is created or changed.
            assert new is None and os.path.basename(path)[:64] not in store.referenced_blobs, (
                f"gc removed a referenced blob {path}"
            )


def test_the_model_covers_every_writing_command() -> None:
    writing = {"rm", "repair", "migrate", "gc", "rename", "fork", "extract", "import"}
    assert writing <= set(ALLOWED)


def test_a_store_is_built_as_described() -> None:
    @given(st.data())
    @settings(max_examples=examples(3), deadline=None)
    def check(data: st.DataObject) -> None:
        saved = os.environ.get("PI_CODING_AGENT_DIR")
        store = build_store(data)
        try:
            assert store.sessions and all(os.path.exists(p) for p in store.sessions)
            assert any(os.path.islink(t) for t in store.targets)
        finally:
            shutil.rmtree(store.root, ignore_errors=True)
            if saved is None:
                os.environ.pop("PI_CODING_AGENT_DIR", None)
            else:
                os.environ["PI_CODING_AGENT_DIR"] = saved

    check()


# --- family: copies across agent dirs ---
# The copying commands (fork, extract, export -f jsonl -o, import) run on a target of the
# store built above (agent dir A), each source loaded whole or index first, either with
# --agent-dir B or within A. Into B: nothing in A changes, and once A and the other
# agents' stores are deleted, every copy verifies clean in B and loads with its images.
# Within A: every path changed is in the command's allowed set, and no blob of A is
# added, rewritten or moved (an import's new images aside).

COPYING = ["fork", "extract", "export", "import"]


def _blob_files(agent: str) -> dict[str, tuple[int, str]]:
    """The blobs (not their image viewers' `<hash>.<ext>` links) of `agent`: name ->
    (inode, content hash)."""
    blobs = os.path.join(agent, "blobs")
    found = {}
    for name in os.listdir(blobs) if os.path.isdir(blobs) else []:
        if len(name) == 64:
            with open(os.path.join(blobs, name), "rb") as f:
                found[name] = (os.stat(f.fileno()).st_ino, hashlib.sha256(f.read()).hexdigest())
    return found


def _copy_command(kind: str, store: Store, target: str, out: str, data: st.DataObject) -> list[str]:
    if kind == "export":
        return ["export", target, "-f", "jsonl", "-o", out]
    if kind == "import":
        if data.draw(st.booleans(), label="all"):
            agent = data.draw(st.sampled_from(["claude", "codex"]), label="from")
            return ["import", "--all", "--from", agent, "--json"]
        source = data.draw(st.sampled_from(store.foreign), label="source")
        agent = "claude" if source == store.foreign[0] else "codex"
        return ["import", source, "--from", agent, "--json"]
    return command_line(kind, store, target, data)


def _copies_made(kind: str, result: Result, out: str) -> list[str]:
    """The paths of the sessions a copying command wrote (it exited 0)."""
    if kind == "export":
        return [out]
    if kind == "import":
        document = json.loads(result.stdout)
        done = document.get("imported", [document])
        return [p for d in done for p in (d["path"], *d["subsessions"])]
    return [result.stdout.strip()]


def _resolves_with_images(agent: str, path: str) -> None:
    verified = runner.invoke(app, ["--agent-dir", agent, "verify", path])
    assert verified.exit_code == 0, (path, verified.stdout, verified.stderr)
    for lazy in (False, True):
        with SessionManager.open(path, read_only=True, lazy=lazy) as sm:
            for entry in sm.get_entries():
                content = entry.get("message", {}).get("content")
                for block in content if isinstance(content, list) else []:
                    if isinstance(block, dict) and block.get("type") == "image":
                        assert not str(block.get("data")).startswith("blob:"), (path, block)


@settings(
    max_examples=max(1, EXAMPLES // 2),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data(), kind=st.sampled_from(COPYING), across=st.booleans(), lazy=st.booleans())
def test_copies_take_their_images_into_their_own_agent_dir(
    data: st.DataObject, kind: str, across: bool, lazy: bool
) -> None:
    saved = {
        v: os.environ.get(v) for v in ("PI_CODING_AGENT_DIR", "CLAUDE_CONFIG_DIR", "CODEX_HOME")
    }
    store = build_store(data)
    os.environ["CLAUDE_CONFIG_DIR"] = os.path.join(store.root, "claude")
    os.environ["CODEX_HOME"] = os.path.join(store.root, "codex")
    b = os.path.join(store.root, "other-agent")
    agent = b if across else store.agent
    where = data.draw(st.sampled_from(["agent", "outside"]), label="export to")
    out = (
        os.path.join(agent, "sessions", "--exports--", "export.jsonl")
        if where == "agent"
        else os.path.join(store.root, "exports", "export.jsonl")
    )
    os.makedirs(os.path.dirname(out), exist_ok=True)
    saved_lazy = loader.LAZY_LOAD_BYTES
    loader.LAZY_LOAD_BYTES = 0 if lazy else 1 << 40  # type: ignore[misc]
    try:
        with inside(store):
            pools = [store.sessions, store.sessions, store.sessions, store.targets]
            target = data.draw(st.sampled_from(data.draw(st.sampled_from(pools))), label="target")
            args = _copy_command(kind, store, target, out, data)
            if across:
                args = ["--agent-dir", b, *args]
                sessions = os.path.join(b, "sessions")
                allowed = [
                    b,
                    *(os.path.join(b, n) for n in ("blobs", "blobs/*", "cache", "cache/*")),
                    sessions,
                    *(os.path.join(sessions, "*" + "/*" * depth) for depth in range(3)),
                    out,
                ]
            else:
                rule = ALLOWED["import" if kind == "import" else "fork"]
                allowed = [*rule(store, target, args), out, os.path.dirname(out)]
            allowed.append(os.path.join(os.path.dirname(out), ".*.tmp"))
            blobs_before = _blob_files(store.agent)
            before = snapshot(store.root)
            result = runner.invoke(app, args)
            after = snapshot(store.root)
            RAN["examples"] += 1
            RAN[f"copies across agent dirs: {kind} {'into B' if across else 'within A'}"] += 1
            RAN[f"copies across agent dirs: {kind} exit {result.exit_code}"] += 1
            assert "Traceback" not in result.output, (args, result.output)
            assert result.exception is None or isinstance(result.exception, SystemExit), (
                args,
                result.exception,
            )
            check_changes(kind, args, before, after, allowed, store)
            if kind != "import" or across:
                # No blob of A is added, rewritten or moved (an import within A adds
                # the images it brings).
                assert _blob_files(store.agent) == blobs_before, args
            if result.exit_code != 0:
                return
            copies = _copies_made(kind, result, out)
            assert copies and all(os.path.isfile(c) for c in copies), (args, result.stdout)
            if across:
                # The source agent dir and the other agents' stores go entirely.
                for gone in (store.agent, os.path.join(store.root, "claude")):
                    shutil.rmtree(gone)
                shutil.rmtree(os.path.join(store.root, "codex"))
            for path in copies:
                _resolves_with_images(agent, path)
                RAN["copies across agent dirs: verified, images load"] += 1
    finally:
        loader.LAZY_LOAD_BYTES = saved_lazy  # type: ignore[misc]
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def test_model_run_size_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    """Runs after the model (file order): says how much it did."""
    with capsys.disabled():
        print(f"\ncli model: {RAN['examples']} examples (max_examples={EXAMPLES}); ran:")
        for key, count in sorted(RAN.items()):
            print(f"  {key}: {count}")
    assert RAN["examples"] >= 1 or not RAN
