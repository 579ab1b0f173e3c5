"""`sessiontree sync` from the command line, run as two machines (two HOMEs): every
pi-format store found syncs, errors are one line and an exit code, --status and --json
say what was done."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
