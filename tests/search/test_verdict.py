"""The content index's verdict (`search._verdict`): an unchanged store's refresh compares
nothing and reads nothing, and no change to a file is ever taken for none.

The model: sessions written, appended to, rewritten in place (same size, same inode),
truncated and rewritten, replaced by a same-size file (a new inode), created and deleted,
on a kernel whose ctime is as coarse as its mtime and with a clock the test moves (two
writes within one tick leave size, mtime, inode and ctime as they were: the worst case
for any cache). Searches through the index, with the listing's stats or with stats of
their own, of the whole store or of one file (another scope, as a project's search is),
must find what a scan of the files finds, whatever came before.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from sessiontree.format import serialize_entry
from sessiontree.layout import store_parts
from sessiontree.listing import _marks, clear_listing_cache, list_rows
from sessiontree.search import INDEX_DB_NAME, ContentIndex, SessionSource, search, search_sessions
from sessiontree.search._verdict import VERDICT_KEY, identities, verdict
from tests.conftest import examples

HEADER = {"type": "session", "version": 3, "id": "s1", "timestamp": "2026-01-01T00:00:00.000Z"}
OLD_NS = 1_700_000_000_123_456_789
TICK = 10_000_000_000  # past every timestamp tick
WORDS = ["alpha", "omega", "delta", "sigma"]  # one length: a rewrite in place keeps the size
NAMES = [f"s{k}.jsonl" for k in range(3)]


def _session(texts: list[str]) -> bytes:
    lines = [serialize_entry({**HEADER, "cwd": "/p"})]
    for n, text in enumerate(texts, start=1):
        lines.append(
            serialize_entry(
                {
                    "type": "message",
                    "id": f"e{n:07d}",
                    "parentId": f"e{n - 1:07d}" if n > 1 else None,
                    "timestamp": "2026-01-01T00:00:00.000Z",
                    "message": {"role": "user", "content": text},
                }
            )
        )
    return "".join(line + "\n" for line in lines).encode()


def _verdict_of(agent: Path) -> str | None:
    conn = sqlite3.connect(agent / INDEX_DB_NAME)
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (VERDICT_KEY,)).fetchone()
    finally:
        conn.close()
    return row[0] if row is not None else None


class VerdictMachine(RuleBasedStateMachine):
    """The files and the clock are the model's; the index's answers are checked against
    a scan's after every search."""

    def __init__(self) -> None:
        super().__init__()
        self.agent = Path(tempfile.mkdtemp(prefix="verdict-"))
        self.project = self.agent / "sessions" / "--p--"
        self.project.mkdir(parents=True)
        self.clock = OLD_NS
        self.texts: dict[str, list[str]] = {}
        self.patch = pytest.MonkeyPatch()
        self.patch.setattr(_marks, "_CTIME_MOVES", False)
        self.patch.setattr(_marks, "_now_ns", lambda: self.clock)
        self.dirty = False  # a write within the present tick of the clock
        self.settled: set[bool] = set()  # scopes (one file?) searched since with no write
        clear_listing_cache()

    def teardown(self) -> None:
        self.patch.undo()
        clear_listing_cache()
        shutil.rmtree(self.agent, ignore_errors=True)

    def _later(self, later: bool) -> None:
        """`later`: the clock moves past the tick first (what follows is not racy)."""
        if later:
            self.tick()

    def _stamp(self, path: Path) -> None:
        os.utime(path, ns=(self.clock, self.clock))  # stamped with the clock's tick
        self.dirty = True
        self.settled.clear()

    @initialize()
    def start(self) -> None:
        for name in NAMES:
            self.texts[name] = ["alpha"]
            (self.project / name).write_bytes(_session(self.texts[name]))
            self._stamp(self.project / name)

    @rule(name=st.sampled_from(NAMES), word=st.sampled_from(WORDS), later=st.booleans())
    def append(self, name: str, word: str, later: bool) -> None:
        self._later(later)
        path = self.project / name
        if name not in self.texts:
            return
        old = _session(self.texts[name])
        self.texts[name].append(word)
        with open(path, "ab") as f:
            f.write(_session(self.texts[name])[len(old) :])
        self._stamp(path)

    @rule(name=st.sampled_from(NAMES), word=st.sampled_from(WORDS), later=st.booleans())
    def rewrite_in_place(self, name: str, word: str, later: bool) -> None:
        """Same size, same inode: `writeFileSync` of an edited session."""
        self._later(later)
        path = self.project / name
        if name not in self.texts:
            return
        if self.texts[name] == [word for _ in self.texts[name]]:
            word = WORDS[(WORDS.index(word) + 1) % len(WORDS)]  # a change, always
        self.texts[name] = [word for _ in self.texts[name]]
        with open(path, "r+b") as f:
            f.write(_session(self.texts[name]))
        self._stamp(path)

    @rule(name=st.sampled_from(NAMES), word=st.sampled_from(WORDS), later=st.booleans())
    def rewrite(self, name: str, word: str, later: bool) -> None:
        """Truncated and written again: a new size (or a new file)."""
        self._later(later)
        path = self.project / name
        self.texts[name] = [word] * (1 + len(self.texts.get(name, [])) % 3)
        path.write_bytes(_session(self.texts[name]))
        self._stamp(path)

    @rule(name=st.sampled_from(NAMES), word=st.sampled_from(WORDS), later=st.booleans())
    def replace(self, name: str, word: str, later: bool) -> None:
        """A same-size file renamed over it: a new inode, the same size."""
        self._later(later)
        path = self.project / name
        if name not in self.texts:
            return
        self.texts[name] = [word for _ in self.texts[name]]
        tmp = self.project / ".tmp"
        tmp.write_bytes(_session(self.texts[name]))
        os.replace(tmp, path)
        self._stamp(path)

    @rule(name=st.sampled_from(NAMES))
    def delete(self, name: str) -> None:
        if name in self.texts and len(self.texts) > 1:
            del self.texts[name]
            os.unlink(self.project / name)
            self.settled.clear()

    def tick(self) -> None:
        self.clock += TICK
        self.dirty = False

    @rule(listed=st.booleans(), fresh=st.booleans(), one=st.booleans(), later=st.booleans())
    def search(self, listed: bool, fresh: bool, one: bool, later: bool) -> None:
        """A search of every file (or of one: another scope) for each word, through the
        listing's stats or its own, in this process or a fresh one (no listing in
        memory): the first refreshes the index, the others find it up to date."""
        self._later(later)
        if fresh:
            clear_listing_cache()
        paths = sorted(str(self.project / name) for name in self.texts)
        stats = None
        if listed:
            rows = list_rows(None, store_parts(agent_dir=str(self.agent)))
            assert rows.stats is not None
            stats = [s for d in rows.stats.values() for s in d]
        scope = paths[:1] if one else paths
        for n, word in enumerate(WORDS):
            found = search(scope, word, agent_dir=str(self.agent), listed=stats)
            scanned = search_sessions(scope, word)
            assert found.mode == "index", found.notes
            assert sorted((h.path, h.line) for h in found.hits) == sorted(
                (h.path, h.line) for h in scanned
            ), word
            refreshed = found.refreshed
            assert refreshed is not None
            if one in self.settled or n:
                # Nothing changed since a search of the same files whose stats were all
                # past their tick (or since the word before): nothing is read again.
                assert refreshed.files_read == 0 or (n and self.dirty)
        if not self.dirty:
            self.settled.add(one)

    @invariant()
    def a_kept_verdict_is_the_files_as_they_are(self) -> None:
        """Whenever the files digest as the verdict kept says, the index holds them as
        they are: its rows are their identities, and it answers as a scan of them does
        (a refresh that finds that verdict does nothing: these searches write nothing)."""
        if not (self.agent / INDEX_DB_NAME).exists():
            return
        kept = _verdict_of(self.agent)
        if kept is None:
            return
        paths = sorted(str(self.project / name) for name in self.texts)
        for scope in (paths, paths[:1]):
            stats, failed, _ = identities(scope)
            if failed or verdict(stats, scope) != kept[:-2]:
                continue
            index = ContentIndex.open(str(self.agent))
            assert index is not None
            try:
                held = {
                    row[0]: tuple(row[1:])
                    for row in index._conn.execute(
                        "SELECT path, size, mtime_ns, ino, ctime_ns FROM files"
                    )
                }
            finally:
                index.close()
            for s in stats:
                assert held.get(s[0]) == s[1:]
            for word in WORDS:
                found = search(scope, word, agent_dir=str(self.agent))
                assert found.refreshed is not None and found.refreshed.files_read == 0
                assert sorted((h.path, h.line) for h in found.hits) == sorted(
                    (h.path, h.line) for h in search_sessions(scope, word)
                ), word


VerdictMachine.TestCase.settings = settings(
    max_examples=examples(60),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_the_verdict_never_hides_a_change = VerdictMachine.TestCase


def test_an_unchanged_store_is_told_by_its_verdict_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second refresh of unchanged files reads no file and no `files` row."""
    agent = tmp_path / "agent"
    project = agent / "sessions" / "--p--"
    project.mkdir(parents=True)
    paths = []
    for k in range(5):
        path = project / f"s{k}.jsonl"
        path.write_bytes(_session(["alpha", f"word{k}"]))
        os.utime(path, ns=(OLD_NS, OLD_NS))
        paths.append(str(path))
    index = ContentIndex.open(str(agent))
    assert index is not None
    with index:
        first = index.refresh(paths)
        assert first.files_read == 5
        kept = _verdict_of(agent)
        assert kept is not None and kept.endswith(":e")
        statements: list[str] = []
        index._conn.set_trace_callback(statements.append)
        second = index.refresh(paths)
        index._conn.set_trace_callback(None)
        assert second.files_read == 0 and not second.stale
        assert not [s for s in statements if "FROM files" in s]
        assert index.covering(paths)[1] is None  # every file the index holds, no other
    # One file the same size, with a new mtime: seen, read, and a new verdict kept.
    os.utime(paths[2], ns=(OLD_NS + TICK, OLD_NS + TICK))
    index = ContentIndex.open(str(agent))
    assert index is not None
    with index:
        third = index.refresh([SessionSource(p) for p in paths])
        assert third.files_read == 1
    assert _verdict_of(agent) not in (None, kept)


def test_no_verdict_is_kept_of_a_file_written_within_its_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = tmp_path / "agent"
    project = agent / "sessions" / "--p--"
    project.mkdir(parents=True)
    path = project / "s.jsonl"
    path.write_bytes(_session(["alpha"]))
    mtime = os.stat(path).st_mtime_ns
    monkeypatch.setattr(_marks, "_now_ns", lambda: mtime + 1_000)  # within its tick
    index = ContentIndex.open(str(agent))
    assert index is not None
    with index:
        index.refresh([str(path)])
    assert _verdict_of(agent) is None


def test_a_refresh_killed_after_a_write_leaves_no_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every write transaction drops the verdict first: a refresh that fails (or is
    killed) after one leaves none that its writes made untrue."""
    agent = tmp_path / "agent"
    project = agent / "sessions" / "--p--"
    project.mkdir(parents=True)
    paths = []
    for k in range(3):
        path = project / f"s{k}.jsonl"
        path.write_bytes(_session(["alpha"]))
        os.utime(path, ns=(OLD_NS, OLD_NS))
        paths.append(str(path))
    index = ContentIndex.open(str(agent))
    assert index is not None
    with index:
        index.refresh(paths)
    assert _verdict_of(agent) is not None
    with open(paths[0], "ab") as f:
        f.write(_session(["alpha", "omega"])[len(_session(["alpha"])) :])
    os.utime(paths[0], ns=(OLD_NS + TICK, OLD_NS + TICK))

    def killed(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit("killed")

    index = ContentIndex.open(str(agent))
    assert index is not None
    monkeypatch.setattr(ContentIndex, "_keep_verdict", killed)
    with index, pytest.raises(SystemExit):
        index.refresh(paths)
    assert _verdict_of(agent) is None
    monkeypatch.undo()
    found = search(paths, "omega", agent_dir=str(agent))
    assert [h.path for h in found.hits] == [paths[0]]
