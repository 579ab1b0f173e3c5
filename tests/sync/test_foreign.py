"""Other agents' sessions through a hub: machine A's Claude Code, Codex, Gemini CLI,
Copilot CLI and OpenCode stores mirrored into the hub, and shown on machine B (listed,
searched, marked with A) from its view, never in B's own stores; only what changed is
read and sent; every name read from the hub is checked. Two machines are two homes;
the hub a dir and a PostgreSQL database."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sessiontree.cli import app
from sessiontree.storage import FileSessionStorage, SessionStorage
from sessiontree.store import Store, Stores, find_stores
from sessiontree.sync import ForeignCounts, journal_path, pull_foreign, push_foreign
from tests import foreign_support as fs
from tests.conftest import REAL_FILES, unavailable
from tests.pg_support import pg_storage

AGENTS = ("claude", "codex", "copilot", "gemini", "opencode")


@dataclass
class Hub:
    storage: SessionStorage
    root: str

    def write(self, rel: str, data: bytes) -> None:
        path = os.path.join(self.root, rel)
        self.storage.ensure_dir(os.path.dirname(path))
        writer = self.storage.open_writer(path, "w")
        writer.write_line(data.decode())
        writer.close()

    def read(self, rel: str) -> bytes:
        return self.storage.read_text(os.path.join(self.root, rel)).encode()


@pytest.fixture(params=["dir", "postgres"])
def hub(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Hub]:
    root = tmp_path / "hub"
    if request.param == "dir":
        root.mkdir()
        yield Hub(FileSessionStorage(), str(root))
        return
    with pg_storage(root=root) as storage:
        yield Hub(storage, str(root))


@dataclass
class Machine:
    name: str
    root: Path
    monkeypatch: pytest.MonkeyPatch

    def enter(self) -> None:
        """This machine's environment: its home and its agents' stores."""
        env = {
            "HOME": "home",
            "PI_CODING_AGENT_DIR": "agent",
            "CLAUDE_CONFIG_DIR": "claude",
            "CODEX_HOME": "codex",
            "XDG_DATA_HOME": "xdg",
            "GEMINI_CLI_HOME": "gemini-home",
            "COPILOT_HOME": "copilot-home",
            "XDG_STATE_HOME": "state",
        }
        for name, rel in env.items():
            self.monkeypatch.setenv(name, str(self.root / rel))
        self.monkeypatch.delenv("SESSIONTREE_STORE", raising=False)

    @property
    def state(self) -> str:
        return str(self.root / "state" / "sessiontree" / "sync" / "hub1" / "foreign.db")

    @property
    def view(self) -> Path:
        return self.root / "state" / "sessiontree" / "sync" / "hub1" / "machines"

    def push(self, hub: Hub) -> ForeignCounts:
        self.enter()
        return push_foreign(hub.storage, hub.root, self.name, find_stores(), self.state)

    def pull(self, hub: Hub) -> ForeignCounts:
        self.enter()
        return pull_foreign(hub.storage, hub.root, self.name, str(self.view), self.state)


def _machine(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Machine:
    root = tmp_path / name
    (root / "home").mkdir(parents=True)
    return Machine(name, root, monkeypatch)


@pytest.fixture
def machines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Machine, Machine]:
    """A with a store of every other agent (real files); B with a Claude Code store of
    its own."""
    fixtures = REAL_FILES / "foreign"
    if not fixtures.is_dir():
        unavailable(f"fixtures {fixtures} are missing")
    a, b = _machine("A", tmp_path, monkeypatch), _machine("B", tmp_path, monkeypatch)
    fs.layout(fixtures, a.root)
    fs.layout_more(fixtures, a.root)
    own = b.root / "claude" / "projects" / "-b"
    own.mkdir(parents=True)
    shutil.copyfile(
        fixtures / "claude" / "entireio__cli__26__dcd5518fea__0__full.jsonl",
        own / "bbbbbbbb-1111-2222-3333-444444444444.jsonl",
    )
    return a, b


def _tree(root: Path) -> dict[str, str]:
    """Every file under `root` (relative path -> sha256)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _ids(store: Store) -> set[str]:
    return {info.id for info in store.list()}


def test_a_machines_other_agents_are_shown_on_another_marked_with_it(
    hub: Hub, machines: tuple[Machine, Machine]
) -> None:
    a, b = machines
    sent = a.push(hub)
    assert sent.files_sent > 0 and sent.bytes_sent > 0
    a.enter()
    here = {f.agent: f for f in find_stores() if f.agent in AGENTS}
    assert set(here) == set(AGENTS)
    expected = {agent: _ids(found.open()) for agent, found in here.items()}
    # the files under A's session dirs are in the hub byte for byte
    claude_file = next((a.root / "claude" / "projects").rglob("*.jsonl"))
    rel = claude_file.relative_to(a.root / "claude").as_posix()
    assert hub.read(f"foreign/A/claude/{rel}") == claude_file.read_bytes()

    b_own = _tree(b.root / "claude")
    got = b.pull(hub)
    assert got.files_received > 0 and got.notes == []
    b.enter()
    views = {f.agent: f for f in find_stores() if f.machine == "A"}
    assert set(views) == set(AGENTS)
    assert views["claude"].name == "Claude Code (A)" and views["claude"].via == "sync"
    for agent, found in views.items():
        store = found.open()
        assert store.read_only and store.machine == "A"
        assert _ids(store) == expected[agent], agent
    # the files of A's stores are in B's view as they are on A (the OpenCode database's
    # sessions as OpenCode's JSON files)
    for agent, home in (("claude", "claude"), ("codex", "codex"), ("copilot", "copilot-home")):
        assert _tree(b.view / "A" / agent) == _tree(a.root / home), agent
    assert (b.view / "A" / "claude" / rel).stat().st_mtime_ns == claude_file.stat().st_mtime_ns
    # B's own stores are as they were: nothing of A's is in them
    assert _tree(b.root / "claude") == b_own
    assert not (b.root / "codex").exists() and not (b.root / "xdg").exists()

    # listed, searched and counted with the machine they came from
    stores = Stores([Store(b.root / "agent"), *(f.open() for f in find_stores())])
    listed = stores.list()
    made = {one.made_by for one in listed}
    assert {f"{agent}@A" for agent in AGENTS} <= made and "claude" in made
    title = next(one for one in listed if one.store == "claude@A").info
    word = max((title.first_message or "x").split(), key=len)
    found = stores.search(word, sessions=listed)
    assert any(hit.store == "claude@A" for hit in found.hits)
    # B sends its own store, never what it shows of A's (it would come back to A as B's)
    assert b.push(hub).files_sent == 1
    assert not hub.storage.exists(os.path.join(hub.root, "foreign", "B", "codex"))


def test_the_cli_shows_each_store_with_its_machine(
    hub: Hub, machines: tuple[Machine, Machine]
) -> None:
    a, b = machines
    a.push(hub)
    b.pull(hub)
    b.enter()
    b.monkeypatch.delenv("PI_CODING_AGENT_DIR")  # no store named: every store found is read
    result = CliRunner().invoke(app, ["stores", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["stores"]
    assert {(r["agent"], r["machine"]) for r in rows} >= {("claude", None), ("claude", "A")}
    assert all(r["readOnly"] for r in rows if r["machine"] == "A")
    table = CliRunner().invoke(app, ["stores"], env={"COLUMNS": "200"})
    assert "Machine" in table.output and " A " in table.output and "here" in table.output
    listing = CliRunner().invoke(app, ["list", "--all", "--json"])
    sessions = json.loads(listing.output)["sessions"]
    assert {s["machine"] for s in sessions} == {None, "A"}


def test_an_appended_log_sends_and_fetches_only_its_new_bytes(
    hub: Hub, machines: tuple[Machine, Machine]
) -> None:
    a, b = machines
    a.push(hub)
    b.pull(hub)
    log = sorted((a.root / "claude" / "projects").rglob("*.jsonl"))[0]
    line = b'{"type":"custom-title","customTitle":"appended on A","sessionId":"x"}\n'
    with open(log, "ab") as f:
        f.write(line)
    sent = a.push(hub)
    assert (sent.files_sent, sent.bytes_sent) == (1, len(line))
    assert sent.files_read == 1 and sent.bytes_read <= len(line) + 1024
    got = b.pull(hub)
    assert (got.files_received, got.bytes_received) == (1, len(line))
    rel = log.relative_to(a.root / "claude")
    assert (b.view / "A" / "claude" / rel).read_bytes() == log.read_bytes()


def test_a_file_rewritten_in_place_is_sent_whole(
    hub: Hub, machines: tuple[Machine, Machine]
) -> None:
    a, b = machines
    a.push(hub)
    b.pull(hub)
    # Gemini CLI writes its chat file again over itself (same inode, new bytes anywhere)
    chat = next((a.root / "gemini-home").rglob("*.json"))
    data = chat.read_bytes()
    with open(chat, "r+b") as f:
        f.write(data.replace(b"{", b"{ ", 1) + b"\n")
    sent = a.push(hub)
    assert sent.files_sent == 1 and sent.bytes_sent == len(data) + 2
    b.pull(hub)
    rel = chat.relative_to(a.root / "gemini-home" / ".gemini")
    assert (b.view / "A" / "gemini" / rel).read_bytes() == chat.read_bytes()


def test_a_round_with_nothing_new_reads_and_writes_nothing(
    hub: Hub, machines: tuple[Machine, Machine], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = machines
    a.push(hub)
    b.pull(hub)
    journal = journal_path(hub.root, "A")
    size = hub.storage.stat(journal).size
    view = {str(p): p.stat().st_mtime_ns for p in b.view.rglob("*")}

    def no_read(*args: object) -> None:
        raise AssertionError(f"read {args}")

    monkeypatch.setattr("sessiontree.sync._foreign_push.read_span", no_read)
    assert a.push(hub) == ForeignCounts()
    assert hub.storage.stat(journal).size == size
    assert b.pull(hub) == ForeignCounts()
    assert {str(p): p.stat().st_mtime_ns for p in b.view.rglob("*")} == view


def test_a_view_lost_or_changed_is_written_again(
    hub: Hub, machines: tuple[Machine, Machine]
) -> None:
    a, b = machines
    a.push(hub)
    b.pull(hub)
    before = _tree(b.view)
    files = sorted(p for p in b.view.rglob("*.jsonl"))
    files[0].unlink()
    with open(files[1], "ab") as f:
        f.write(b"not A's\n")
    got = b.pull(hub)
    assert got.files_received == 2 and _tree(b.view) == before
    shutil.rmtree(b.view)
    b.pull(hub)
    assert _tree(b.view) == before


def _journal(hub: Hub, machine: str, logs: list[object]) -> None:
    lines = b"".join(json.dumps({"log": log, "size": 1}).encode() + b"\n" for log in logs)
    hub.write(f"machines/{machine}/journal.jsonl", lines + b"not json\n")


def test_names_another_machine_wrote_are_checked_before_they_touch_a_path(
    hub: Hub, machines: tuple[Machine, Machine]
) -> None:
    _, b = machines
    hub.write("foreign/evil/claude/projects/p/s.jsonl", b"{}\n")
    hostile: list[object] = [
        "foreign/../x",
        "foreign/evil/../../x",
        "/etc/passwd",
        "foreign/evil/claude/../../../home/.claude/projects/p/s.jsonl",
        "foreign/other/claude/projects/p/s.jsonl",  # another machine's namespace
        "foreign/evil/pi/sessions/--w--/s.jsonl",  # not an agent carried read-only
        "foreign/evil/claude/settings.json",  # not under its session dir
        "foreign/evil/claude/projects/p/" + "x" * 300,
        "foreign/evil/opencode/export/other.db/s.json",
        42,
    ]
    _journal(hub, "evil", [*hostile, "foreign/evil/claude/projects/p/s.jsonl"])
    hub.write("machines/-bad/journal.jsonl", b'{"log":"foreign/-bad/claude/projects/p/s.jsonl"}\n')
    got = b.pull(hub)
    assert got.files_received == 1
    assert (b.view / "evil" / "claude" / "projects" / "p" / "s.jsonl").read_bytes() == b"{}\n"
    # the two that are no hub path at all, and the line that is no JSON, said at once
    assert sum("refused" in note for note in got.notes) == len(hostile) - 2 + 1
    assert "evil's journal: 3 line(s) that are no file's growth; skipped" in got.notes
    assert sorted(p.name for p in b.view.iterdir()) == ["evil"]
    assert _tree(b.view) == {"evil/claude/projects/p/s.jsonl": hashlib.sha256(b"{}\n").hexdigest()}


def test_a_symlink_planted_in_the_view_is_never_followed(
    hub: Hub, machines: tuple[Machine, Machine]
) -> None:
    a, b = machines
    b_own = _tree(b.root / "claude")
    b.view.mkdir(parents=True)
    (b.view / "A").mkdir()
    os.symlink(b.root / "claude", b.view / "A" / "claude")
    a.push(hub)
    got = b.pull(hub)
    assert any("symlink" in note for note in got.notes)
    assert _tree(b.root / "claude") == b_own
    # a symlink in place of a file is not written through either
    os.unlink(b.view / "A" / "claude")
    b.pull(hub)
    target = next((b.view / "A" / "claude" / "projects").rglob("*.jsonl"))
    target.unlink()
    os.symlink(b.root / "claude" / "projects" / "-b" / "x.jsonl", target)
    log = a.root / "claude" / target.relative_to(b.view / "A" / "claude")
    with open(log, "ab") as f:
        f.write(b'{"type":"summary","summary":"more"}\n')
    assert a.push(hub).files_sent == 1
    got = b.pull(hub)
    assert any("symlink" in note for note in got.notes)
    assert not (b.root / "claude" / "projects" / "-b" / "x.jsonl").exists()
    assert _tree(b.root / "claude") == b_own


def test_the_same_claude_transcript_here_and_in_a_view_counts_its_usage_once(
    hub: Hub, machines: tuple[Machine, Machine]
) -> None:
    a, b = machines
    # A has the transcript B has in its own store
    shutil.copytree(b.root / "claude" / "projects" / "-b", a.root / "claude" / "projects" / "-b")
    a.push(hub)
    b.pull(hub)
    b.enter()
    own = Store(b.root / "claude", agent="claude")
    alone = own.usage("daily").totals
    view = next(f for f in find_stores() if f.machine == "A" and f.agent == "claude").open()
    both = Stores([Store(b.root / "agent"), own, view])
    report = both.usage("daily")
    assert alone.messages > 0
    view_alone = view.usage("daily").totals
    assert view_alone.messages > alone.messages  # A has more transcripts besides it
    assert report.totals.messages == view_alone.messages
    assert report.totals.to_json() == view_alone.to_json()
    assert report.duplicates.session_copies == alone.messages


def test_a_symlink_or_fifo_planted_in_the_hub_is_not_read(tmp_path: Path) -> None:
    """A machine that plants, under its own hub dir, a symlink to one of this machine's
    files or a FIFO neither gets that file shown here nor stops this pull."""
    secret = tmp_path / "secret.jsonl"
    secret.write_bytes(b'{"secret":1}\n')
    hub = Hub(FileSessionStorage(), str(tmp_path / "hub"))
    projects = tmp_path / "hub" / "foreign" / "evil" / "claude" / "projects"
    (projects / "p").mkdir(parents=True)
    os.symlink(secret, projects / "p" / "link.jsonl")
    os.mkfifo(projects / "p" / "fifo.jsonl")
    os.symlink(tmp_path, projects / "linked-dir")
    (projects / "p" / "s.jsonl").write_bytes(b"{}\n")
    _journal(
        hub,
        "evil",
        [
            "foreign/evil/claude/projects/p/link.jsonl",
            "foreign/evil/claude/projects/p/fifo.jsonl",
            "foreign/evil/claude/projects/linked-dir/secret.jsonl",
            "foreign/evil/claude/projects/p/s.jsonl",
        ],
    )
    view = tmp_path / "view"
    got = pull_foreign(hub.storage, hub.root, "me", str(view), str(tmp_path / "foreign.db"))
    assert _tree(view) == {"evil/claude/projects/p/s.jsonl": hashlib.sha256(b"{}\n").hexdigest()}
    assert sum("not a regular file" in note for note in got.notes) == 3


def test_an_opencode_export_nested_too_deep_stops_nothing(tmp_path: Path) -> None:
    """A document another machine sent as an OpenCode session, nested deeper than a
    parser recurses, is passed over with a note; the files after it still come."""
    hub = Hub(FileSessionStorage(), str(tmp_path / "hub"))
    export = "foreign/evil/opencode/export/opencode.db/ses_deep.json"
    hub.write(export, b'{"info":' + b"[" * 200_000)
    hub.write("foreign/evil/claude/projects/p/s.jsonl", b"{}\n")
    _journal(hub, "evil", [export, "foreign/evil/claude/projects/p/s.jsonl"])
    view = tmp_path / "view"
    got = pull_foreign(hub.storage, hub.root, "me", str(view), str(tmp_path / "foreign.db"))
    assert (view / "evil" / "claude" / "projects" / "p" / "s.jsonl").read_bytes() == b"{}\n"
    assert any("not an OpenCode export" in note for note in got.notes)


def test_views_kept_inside_an_agents_own_dir_are_not_sent_back_as_its_own(
    hub: Hub, machines: tuple[Machine, Machine]
) -> None:
    """With the state home (where the views are kept) inside Claude Code's projects
    dir, a push sends the Claude sessions made here, not the other machines' views
    nor the sync's own state."""
    a, b = machines
    a.push(hub)
    b.enter()
    state_home = b.root / "claude" / "projects" / "state"
    b.monkeypatch.setenv("XDG_STATE_HOME", str(state_home))
    sync_dir = state_home / "sessiontree" / "sync" / "hub1"
    state = str(sync_dir / "foreign.db")
    assert pull_foreign(
        hub.storage, hub.root, "B", str(sync_dir / "machines"), state
    ).files_received
    sent = push_foreign(hub.storage, hub.root, "B", find_stores(), state)
    assert sent.files_sent == 1  # B's own transcript only
    assert any("sync's own dir" in note for note in sent.notes)


class _Killed(Exception):
    pass


def _dying(real: Callable[..., object], after: int) -> Callable[..., object]:
    """`real`, raising _Killed from its call `after + 1` on (a process killed there)."""
    calls = 0

    def dying(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        if calls > after:
            raise _Killed
        return real(*args, **kwargs)

    return dying


@pytest.mark.parametrize("call", ["replace", "write", "utime", "mkdir"])
def test_a_pull_killed_at_any_write_then_run_again_ends_with_the_hubs_bytes(
    machines: tuple[Machine, Machine], monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    a, b = machines
    hub = Hub(FileSessionStorage(), str(a.root.parent / "hub"))
    os.mkdir(hub.root)
    a.push(hub)
    grown = next((a.root / "claude" / "projects").rglob("*.jsonl"))
    real = getattr(os, call)
    for kill_at in range(0, 300, 23):
        monkeypatch.setattr(os, call, _dying(real, kill_at))
        try:
            b.pull(hub)
        except _Killed:
            pass
        finally:
            monkeypatch.setattr(os, call, real)
        if kill_at == 69:  # a log grows between killed pulls
            with open(grown, "ab") as f:
                f.write(b'{"type":"summary","summary":"more"}\n')
            a.push(hub)
    b.pull(hub)
    sent = _tree(Path(hub.root) / "foreign" / "A")
    shown = _tree(b.view / "A")
    assert {rel: shown.get(rel) for rel in sent} == sent
    assert not [rel for rel in shown if rel.endswith(".tmp")]


@pytest.mark.parametrize("call", ["replace", "write", "fsync"])
def test_a_push_killed_at_any_write_then_run_again_sends_each_byte_once(
    machines: tuple[Machine, Machine], monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    a, b = machines
    hub = Hub(FileSessionStorage(), str(a.root.parent / "hub"))
    os.mkdir(hub.root)
    grown = next((a.root / "claude" / "projects").rglob("*.jsonl"))
    real = getattr(os, call)
    for kill_at in range(0, 2000, 97):
        monkeypatch.setattr(os, call, _dying(real, kill_at))
        try:
            a.push(hub)
        except _Killed:
            pass
        finally:
            monkeypatch.setattr(os, call, real)
        if kill_at % 3 == 0:  # a log grows between killed pushes
            with open(grown, "ab") as f:
                f.write(b'{"type":"summary","summary":"%d"}\n' % kill_at)
    a.push(hub)
    b.pull(hub)
    mine = _tree(a.root / "claude")
    sent = _tree(Path(hub.root) / "foreign" / "A" / "claude")
    assert {rel: sent.get(rel) for rel in mine if rel.startswith("projects/")} == {
        rel: digest for rel, digest in mine.items() if rel.startswith("projects/")
    }
    assert _tree(b.view / "A" / "claude") == sent


def test_state_lost_or_a_log_cut_then_rounds_end_with_the_same_bytes(
    hub: Hub, machines: tuple[Machine, Machine]
) -> None:
    """Both machines' state deleted between rounds: everything is sent and fetched
    again, whole, nothing twice; a log cut shorter (shrunk) is sent whole."""
    a, b = machines
    a.push(hub)
    b.pull(hub)
    cut = next((a.root / "codex" / "sessions").rglob("*.jsonl"))
    data = cut.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    for machine in (a, b):
        os.unlink(machine.state)
    assert a.push(hub).files_sent > 1
    b.pull(hub)
    mine = _tree(a.root / "claude" / "projects")
    assert _tree(b.view / "A" / "claude" / "projects") == mine
    codex = _tree(b.view / "A" / "codex")
    rel = str(cut.relative_to(a.root / "codex"))
    assert codex[rel] == hashlib.sha256(data[: len(data) // 2]).hexdigest()


# A log dated after 2262 (`touch -d 2300-01-01`: ext4 keeps times up to 2446) has an
# `st_mtime_ns` beyond 64 bits, which the foreign sync state's INTEGER does not hold.
FAR_NS = 10_413_792_000 * 10**9  # 2300-01-01: 1.04e19 > 2**63


def _date_far_after_2262(path: Path) -> None:
    try:
        os.utime(path, ns=(FAR_NS, FAR_NS))
    except (OSError, OverflowError):  # pragma: no cover - a file system of 32-bit times
        unavailable("this file system keeps no time after 2262")
    if os.stat(path).st_mtime_ns < 1 << 63:  # pragma: no cover - clamped
        unavailable("this file system keeps no time after 2262")


def test_a_log_dated_after_2262_is_sent_shown_and_appended(
    hub: Hub,
    machines: tuple[Machine, Machine],
) -> None:
    a, b = machines
    logs = sorted((a.root / "claude" / "projects").rglob("*.jsonl"))
    _date_far_after_2262(logs[0])
    a.push(hub)  # raised OverflowError: Python int too large to convert to SQLite INTEGER
    b.pull(hub)
    rel = logs[0].relative_to(a.root / "claude")
    shown = b.view / "A" / "claude" / rel
    assert shown.read_bytes() == logs[0].read_bytes()
    assert a.push(hub).files_sent == 0  # unchanged: not sent again
    line = b'{"type":"custom-title","customTitle":"appended on A","sessionId":"x"}\n'
    with open(logs[0], "ab") as f:
        f.write(line)
    _date_far_after_2262(logs[0])
    sent = a.push(hub)
    assert (sent.files_sent, sent.bytes_sent) == (1, len(line))
    b.pull(hub)
    assert shown.read_bytes() == logs[0].read_bytes()
