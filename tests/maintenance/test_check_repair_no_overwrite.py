"""`repair` never writes over what is not its own: without `-o` it once
wrote `<file>.repaired` over the copy an earlier repair had left there (which its
user may have edited since). It now takes the first free name of `.repaired`,
`.repaired-2`, ... and never replaces a file, a symlink, or one another program
creates while the copy is being written.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from sessiontree import load_entries_from_file
from sessiontree.cli import app
from sessiontree.errors import SessionTreeError
from sessiontree.layout import store_parts
from sessiontree.maintenance import repair_session
from sessiontree.storage import MemorySessionStorage
from tests.maintenance.test_check import damaged

runner = CliRunner()


def run(*args: str) -> Result:
    return runner.invoke(app, list(args))


# -- repair ------------------------------------------------------------------------------


def test_repair_never_replaces_an_earlier_repaired_copy(tmp_path: Path) -> None:
    path = damaged(tmp_path)
    first = repair_session(str(path), store_parts())
    assert first.out_path == f"{path}.repaired"
    Path(first.out_path).write_text("the user's edits of the first repair\n")
    second = repair_session(str(path), store_parts())
    assert second.out_path == f"{path}.repaired-2"
    assert Path(first.out_path).read_text() == "the user's edits of the first repair\n"
    assert Path(second.out_path).read_bytes() == Path(f"{path}.repaired-2").read_bytes()
    assert load_entries_from_file(second.out_path)  # a valid session
    # The command line says where it wrote, and that the earlier copy is kept.
    result = run("repair", str(path), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["outPath"] == f"{path}.repaired-3"
    result = run("repair", str(path))
    assert result.exit_code == 0, result.output
    assert f"Wrote {path}.repaired-4" in result.stdout and "kept" in result.stdout
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_repair_never_writes_through_a_symlink_at_its_name(tmp_path: Path) -> None:
    path = damaged(tmp_path)
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    Path(f"{path}.repaired").symlink_to(precious)
    Path(f"{path}.repaired-2").symlink_to(tmp_path / "dangling")
    report = repair_session(str(path), store_parts())
    assert report.out_path == f"{path}.repaired-3"
    assert precious.read_text() == "keep me\n"
    assert not (tmp_path / "dangling").exists()
    assert os.path.islink(f"{path}.repaired") and os.path.islink(f"{path}.repaired-2")


def _appearing(path: str, when: str) -> Any:
    """A write of the repaired bytes during which another program creates `path`."""
    from sessiontree._util import fs as _fs

    original = _fs.write_all

    def write_all(fd: int, data: Any) -> int:
        if not os.path.lexists(path):
            Path(path).write_text(f"made by another program {when}\n")
        return original(fd, data)

    return write_all


def test_a_file_made_at_the_name_while_repair_writes_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sessiontree._util import fs as _fs

    path = damaged(tmp_path)
    monkeypatch.setattr(_fs, "write_all", _appearing(f"{path}.repaired", "meanwhile"))
    report = repair_session(str(path), store_parts())
    assert report.out_path == f"{path}.repaired-2"
    assert Path(f"{path}.repaired").read_text() == "made by another program meanwhile\n"
    # With -o, the one name given: refused, and nothing left behind.
    out = tmp_path / "out.jsonl"
    monkeypatch.setattr(_fs, "write_all", _appearing(str(out), "for -o"))
    with pytest.raises(SessionTreeError, match="already exist"):
        repair_session(str(path), store_parts(), str(out))
    assert out.read_text() == "made by another program for -o\n"
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_without_hard_links_repair_still_takes_a_free_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = damaged(tmp_path)
    Path(f"{path}.repaired").write_text("earlier\n")

    def no_links(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")  # vfat, some FUSE mounts

    monkeypatch.setattr(os, "link", no_links)
    report = repair_session(str(path), store_parts())
    assert report.out_path == f"{path}.repaired-2"
    assert Path(f"{path}.repaired").read_text() == "earlier\n"
    assert load_entries_from_file(report.out_path)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_repair_in_another_storage_takes_a_free_name_too(tmp_path: Path) -> None:
    storage = MemorySessionStorage()
    path = str(tmp_path / "s.jsonl")
    storage.ensure_dir(str(tmp_path))
    (tmp_path / "src").mkdir()
    storage.write_text(path, damaged(tmp_path / "src").read_text())
    storage.write_text(path + ".repaired", "earlier\n")
    report = repair_session(path, store_parts(storage))
    assert report.out_path == path + ".repaired-2"
    assert storage.read_text(path + ".repaired") == "earlier\n"


def test_a_new_file_whose_write_fails_halfway_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """create_new (repair's and export's free-name writer): a disk that fills after the
    first chunk leaves no file under any name and no temp file, and says so."""
    import errno

    from sessiontree._util import fs

    real = fs.write_all
    calls = []

    def fill(fd: int, data: bytes | bytearray | memoryview) -> int:
        calls.append(len(data))
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data)

    monkeypatch.setattr(fs, "write_all", fill)
    names = [str(tmp_path / "out.jsonl"), str(tmp_path / "out-2.jsonl")]
    with pytest.raises(OSError) as raised:
        fs.create_new(names, [b"first line\n", b"second line\n"])
    assert raised.value.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == []
