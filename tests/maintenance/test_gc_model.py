"""gc between disks that come and go: every image a session names is still there.

A store keeps sessions in its own project dir, in project dirs under `sessions/`
that are symlinks to another disk, and in session dirs on another disk recorded in
`external-session-dirs`. Disks are unmounted (their dir renamed away) and mounted
again, lost for good (the user removes the link and the registry line), sessions
are written and deleted, orphan blobs put, and `gc --delete` runs between (its
clock an hour ahead, so every blob is old enough). Invariants: every blob ref in
every session file, on a disk that is mounted or away, resolves; and with every
disk in place gc refuses nothing and deletes every orphan (it is not stuck).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import tempfile
import time
import types
from collections import Counter
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import sessiontree.maintenance._gc as gc_module
from sessiontree import BlobStore, SessionManager
from sessiontree.layout import store_parts
from sessiontree.maintenance import collect_garbage
from tests.conftest import examples
from tests.helpers import assistant

pytestmark = pytest.mark.slow

RAN: Counter[str] = Counter()
DISKS = 2
_REF = re.compile(rb"blob:sha256:([0-9a-f]{64})")


class GcDisksModel(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="gc-model-"))
        self.agent = self.root / "agent"
        (self.agent / "sessions").mkdir(parents=True)
        self.mounted = [True] * DISKS
        self.lost = [False] * DISKS
        self.sessions: dict[str, str] = {}  # path -> the digest of its image
        self.orphans: set[str] = set()
        for disk in range(DISKS):
            (self._disk(disk) / "linked").mkdir(parents=True)
            os.symlink(self._disk(disk) / "linked", self._link(disk))
        RAN["examples"] += 1

    def teardown(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _disk(self, disk: int) -> Path:
        return self.root / f"disk{disk}"

    def _away(self, disk: int) -> Path:
        return self.root / f".disk{disk}-unmounted"

    def _link(self, disk: int) -> Path:
        return self.agent / "sessions" / f"--disk{disk}--"

    def _place(self, where: str, disk: int) -> Path | None:
        """The session dir to write into, None when its disk is away or lost."""
        if where == "store":
            return self.agent / "sessions" / "--proj--"
        if not self.mounted[disk] or self.lost[disk]:
            return None
        return self._link(disk) if where == "linked" else self._disk(disk) / "outside"

    @rule(where=st.sampled_from(["store", "linked", "outside"]), disk=st.integers(0, DISKS - 1))
    def write_session(self, where: str, disk: int) -> None:
        place = self._place(where, disk)
        if place is None:
            return
        data = os.urandom(2000)
        with SessionManager.create("/proj", str(place), agent_dir=str(self.agent)) as sm:
            image = {
                "type": "image",
                "data": base64.b64encode(data).decode(),
                "mimeType": "image/png",
            }
            sm.append_message({"role": "user", "content": [image], "timestamp": 1})
            sm.append_message(assistant("seen"))
            path = sm.get_session_file()
        assert path is not None
        digest = hashlib.sha256(data).hexdigest()
        assert [d.decode() for d in _REF.findall(Path(path).read_bytes())] == [digest]
        self.sessions[path] = digest
        RAN[f"sessions written ({where})"] += 1

    @rule(data=st.data())
    def delete_session(self, data: st.DataObject) -> None:
        reachable = sorted(p for p in self.sessions if os.path.exists(p))
        if not reachable:
            return
        path = data.draw(st.sampled_from(reachable))
        os.unlink(path)
        self.orphans.add(self.sessions.pop(path))

    @rule()
    def put_orphan(self) -> None:
        blobs = BlobStore(str(self.agent / "blobs"))
        self.orphans.add(blobs.put(os.urandom(32), "image/png").hash)

    @rule(disk=st.integers(0, DISKS - 1))
    def unmount(self, disk: int) -> None:
        if self.mounted[disk] and not self.lost[disk]:
            self._disk(disk).rename(self._away(disk))
            self.mounted[disk] = False
            RAN["unmounts"] += 1

    @rule(data=st.data())
    def mount(self, data: st.DataObject) -> None:
        away = [d for d in range(DISKS) if not self.mounted[d] and not self.lost[d]]
        if away:
            disk = data.draw(st.sampled_from(away))
            self._away(disk).rename(self._disk(disk))
            self.mounted[disk] = True
            RAN["mounts"] += 1

    @rule(disk=st.integers(0, DISKS - 1))
    def lose_for_good(self, disk: int) -> None:
        """The disk is gone; the user removes its link and registry line, as gc says."""
        if self.mounted[disk] or self.lost[disk]:
            return
        shutil.rmtree(self._away(disk))
        self._link(disk).unlink()
        registry = self.agent / "external-session-dirs"
        if registry.exists():
            gone = os.fsencode(self._disk(disk))
            kept = [
                line
                for line in registry.read_bytes().splitlines(keepends=True)
                if not line.startswith(gone + b"/")
            ]
            registry.write_bytes(b"".join(kept))
        for path in [p for p in self.sessions if p.startswith(f"{self._disk(disk)}/")]:
            self.orphans.add(self.sessions.pop(path))
        for path in [p for p in self.sessions if p.startswith(f"{self._link(disk)}/")]:
            self.orphans.add(self.sessions.pop(path))
        self.lost[disk] = True
        RAN["disks lost for good"] += 1

    @rule()
    def gc(self) -> None:
        later = types.SimpleNamespace(time=lambda: time.time() + 3600)
        with mock.patch.object(gc_module, "time", later):
            report = collect_garbage(store_parts(agent_dir=str(self.agent)), delete=True)
        away = [d for d in range(DISKS) if not self.mounted[d] and not self.lost[d]]
        if away:
            assert report.refused is not None and report.deleted == []
            unknown = {path for path, _ in report.unreadable}
            assert {str(self._link(d)) for d in away} <= unknown
            RAN["gc refused (a disk away)"] += 1
            return
        assert report.refused is None or not self.sessions, report.refused
        if report.refused is None:
            assert {b.hash for b in report.deleted} == self.orphans
            self.orphans.clear()
            RAN["gc deleted"] += 1

    @invariant()
    def every_ref_resolves(self) -> None:
        if not hasattr(self, "root"):
            return
        blobs = self.agent / "blobs"
        for directory, _, files in os.walk(self.root):
            if Path(directory).is_relative_to(blobs):
                continue
            for name in files:
                if not name.endswith(".jsonl"):
                    continue
                for digest in _REF.findall((Path(directory) / name).read_bytes()):
                    assert (blobs / digest.decode()).is_file(), (
                        f"{directory}/{name} names {digest!r}"
                    )
        RAN["invariant checks"] += 1


GcDisksModel.TestCase.settings = settings(
    max_examples=examples(100), stateful_step_count=25, deadline=None
)
TestGcDisksModel = GcDisksModel.TestCase


def test_model_run_size_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    """Runs after the model (file order): says how much it did."""
    with capsys.disabled():
        print("\ngc disks model:")
        for key, count in sorted(RAN.items()):
            print(f"  {key}: {count}")
    assert RAN["examples"] >= 1 or not RAN
