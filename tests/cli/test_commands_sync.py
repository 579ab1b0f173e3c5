"""`sessiontree sync` from the command line, run as two machines (two HOMEs): every
pi-format store found syncs, errors are one line and an exit code, --status and --json
say what was done."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import REAL_FILES
from tests.sync_support import Machine, message, new_session


def _run(machine: Machine, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sessiontree", "sync", *args],
        capture_output=True,
        text=True,
        env=machine.env_vars(),
        timeout=120,
    )


def test_two_machines_sync_every_store_through_the_cli(tmp_path: Path) -> None:
    a = Machine(tmp_path, "a", ("pi", "omp"))
    b = Machine(tmp_path, "b", ("pi", "omp"))
    hub = str(tmp_path / "hub")
    new_session(a.session_path("p1"), "p1", message("e1", None, "pi's"))
    new_session(a.session_path("o1", "omp"), "o1", message("f1", None, "omp's"))
    first = _run(a, hub, "--machine", "a")
    assert first.returncode == 0, first.stderr
    second = _run(b, hub, "--machine", "b", "--json")
    assert second.returncode == 0, second.stderr
    report = json.loads(second.stdout)
    assert len(report["created"]) == 2
    assert b.files("pi") == a.files("pi") and b.files("omp") == a.files("omp")
    status = _run(b, hub, "--status", "--json")
    machines = {m["machine"]: m for m in json.loads(status.stdout)["machines"]}
    assert machines["a"]["sent"]["sessions"] == 2
    assert machines["b"]["received"]["sessions"] == 2
    watched = _run(b, hub, "--machine", "b", "--watch", "--rounds", "2", "--interval", "0.5")
    assert watched.returncode == 0, watched.stderr


def test_user_errors_are_one_line_and_an_exit_code(tmp_path: Path) -> None:
    a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
    hub = tmp_path / "hub"
    assert _run(a, str(hub), "--machine", "same").returncode == 0
    taken = _run(b, str(hub), "--machine", "same")
    assert taken.returncode == 1
    assert "already used by another machine" in taken.stderr
    assert "Traceback" not in taken.stderr
    bad = _run(b, str(hub), "--machine", "../up")
    assert bad.returncode == 2 and "cannot name a machine" in bad.stderr
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"...")
    refused = _run(a, str(other))
    assert refused.returncode == 1 and "not a sessiontree hub" in refused.stderr
    assert sorted(p.name for p in other.iterdir()) == ["cat.jpg"]


def test_two_machines_syncing_at_the_same_moment_end_the_same(tmp_path: Path) -> None:
    a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
    hub = str(tmp_path / "hub")
    for n in range(20):
        new_session(a.session_path(f"a{n}"), f"a{n}", message(f"e{n}", None, "laptop's"))
        new_session(b.session_path(f"b{n}"), f"b{n}", message(f"f{n}", None, "desk's"))
    assert _run(a, hub, "--machine", "a").returncode == 0  # the hub made before the race
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "sessiontree", "sync", hub, "--machine", m.name],
            env=m.env_vars(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for m in (a, b, a, b)
    ]
    errors = [run.communicate(timeout=120)[1] for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0, 0], errors
    for m in (a, b):
        assert _run(m, hub, "--machine", m.name).returncode == 0
    assert a.files() == b.files() and len(a.files()) == 40


def test_other_agents_sessions_reach_the_other_machine_read_only(tmp_path: Path) -> None:
    """One `sessiontree sync` per machine carries a Claude Code session from A to B, where
    `stores` and `list` show it as A's, and nothing is written into B's own ~/.claude."""
    a = Machine(tmp_path, "a")
    b = Machine(tmp_path, "b")
    hub = str(tmp_path / "hub")
    made = a.home / ".claude" / "projects" / "-work-app"
    made.mkdir(parents=True)
    source = REAL_FILES / "foreign" / "claude" / "entireio__cli__26__dcd5518fea__0__full.jsonl"
    (made / source.name).write_bytes(source.read_bytes())
    new_session(a.session_path("p1"), "p1", message("e1", None, "pi's"))
    sent = _run(a, hub, "--machine", "a", "--json")
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["otherAgents"]["sent"]["files"] == 1
    got = _run(b, hub, "--machine", "b", "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["otherAgents"]["received"]["files"] == 1
    assert not (b.home / ".claude").exists()
    stores = subprocess.run(
        [sys.executable, "-m", "sessiontree", "stores", "--json"],
        capture_output=True,
        text=True,
        env=b.env_vars(),
        timeout=120,
    )
    found = {(s["agent"], s["machine"]) for s in json.loads(stores.stdout)["stores"]}
    assert ("claude", "a") in found and ("pi", None) in found
    listed = subprocess.run(
        [sys.executable, "-m", "sessiontree", "list", "--all", "--json", "-n", "0"],
        capture_output=True,
        text=True,
        env=b.env_vars(),
        timeout=120,
    )
    rows = json.loads(listed.stdout)["sessions"]
    assert any(r.get("machine") == "a" and r["agent"] == "claude" for r in rows)
    again = _run(a, hub, "--machine", "a", "--json")
    assert json.loads(again.stdout)["otherAgents"]["sent"]["files"] == 0
    status = _run(b, hub, "--status", "--json")
    machines = {m["machine"]: m for m in json.loads(status.stdout)["machines"]}
    assert machines["a"]["sent"]["otherFiles"] == 1
    assert machines["b"]["received"]["otherFiles"] == 1
    said = _run(b, hub, "--status")
    assert "other agents' files: 0 sent (0 B), 1 received" in said.stdout, said.stdout


def _shown_from(tmp_path: Path, machine: str) -> Machine:
    """Machine b, after a round each, with a Claude Code session `machine` made and
    one of its own (the same transcript)."""
    a = Machine(tmp_path, "a")
    b = Machine(tmp_path, "b")
    hub = str(tmp_path / "hub")
    source = REAL_FILES / "foreign" / "claude" / "entireio__cli__26__dcd5518fea__0__full.jsonl"
    for home in (a.home, b.home):
        made = home / ".claude" / "projects" / "-work-app"
        made.mkdir(parents=True)
        (made / source.name).write_bytes(source.read_bytes())
    assert _run(a, hub, "--machine", machine).returncode == 0
    assert _run(b, hub, "--machine", "b").returncode == 0
    return b


def _shown(machine: Machine, *args: str) -> list[str]:
    run = subprocess.run(
        [sys.executable, "-m", "sessiontree", *args],
        capture_output=True,
        text=True,
        env={**machine.env_vars(), "COLUMNS": "80"},
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()


def test_stores_fit_80_columns_with_a_long_machine_name(tmp_path: Path) -> None:
    """A long machine name is cut, not the path: at 80 columns every header is whole,
    the path keeps a readable width and no line is wider than the terminal."""
    lines = _shown(_shown_from(tmp_path, "desktop-with-a-rather-long-name-indeed"), "stores")
    assert all(len(line) <= 80 for line in lines)
    assert "Sessions" in lines[0]
    row = next(line for line in lines if "desktop-" in line)
    path = row.split("│")[-1].strip()
    assert len(path) >= 20, row


def test_list_at_80_columns_says_which_machine_each_session_is_from(tmp_path: Path) -> None:
    """The same transcript here and from another machine: at 80 columns the two rows
    still say whose each is (the agent column is cut, not left out)."""
    lines = _shown(_shown_from(tmp_path, "desktop-with-a-rather-long-name"), "list", "--all")
    assert all(len(line) <= 80 for line in lines)
    rows = [line for line in lines if "185" in line]
    assert len(rows) == 2
    assert any("claude@desk" in row for row in rows), rows
    assert any("│ claude " in row for row in rows), rows


def test_serve_names_the_machine_of_each_store_it_serves(tmp_path: Path) -> None:
    b = _shown_from(tmp_path, "laptop")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sessiontree", "serve"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**b.env_vars(), "PYTHONUNBUFFERED": "1"},
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        while not lines or lines[-1] != "at":
            lines.append(proc.stdout.readline().strip())
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    assert any(line.startswith("claude@laptop: ") for line in lines), lines
    assert any(line.startswith("claude: ") for line in lines), lines


def test_a_machine_with_no_pi_format_store_says_what_it_synced(tmp_path: Path) -> None:
    b = _shown_from(tmp_path, "laptop")
    shutil.rmtree(b.home / ".pi")
    first = _run(b, str(tmp_path / "hub"), "--machine", "b").stdout.splitlines()[0]
    assert first == f"Synced other agents' sessions with {tmp_path / 'hub'} as b", first
