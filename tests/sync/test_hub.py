"""The hub's place: a dir that is no hub is refused (a mistyped path is not littered), a
newer hub is refused, and a hub that cannot be written changes nothing here."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sessiontree.storage import FileSessionStorage
from sessiontree.sync import HubError, NotAHubError, sync_status
from tests.sync_support import Machine, append, message, new_session


def test_a_dir_that_holds_something_else_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = Machine(tmp_path, "a")
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    elsewhere = tmp_path / "Documents"
    elsewhere.mkdir()
    (elsewhere / "thesis.tex").write_text("...")
    with pytest.raises(NotAHubError, match="not a sessiontree hub"):
        a.sync(elsewhere, monkeypatch)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["thesis.tex"]


def test_a_missing_or_empty_dir_becomes_a_hub(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = Machine(tmp_path, "a")
    (tmp_path / "empty").mkdir()
    for hub in (tmp_path / "empty", tmp_path / "new" / "hub"):
        a.sync(hub, monkeypatch)
        mark = json.loads((hub / "sessiontree-hub.json").read_text())
        assert mark == {"format": "sessiontree-hub", "version": 1}


def test_a_newer_hub_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = Machine(tmp_path, "a")
    hub = tmp_path / "hub"
    hub.mkdir()
    (hub / "sessiontree-hub.json").write_text('{"format": "sessiontree-hub", "version": 2}')
    with pytest.raises(NotAHubError, match="version 2"):
        a.sync(hub, monkeypatch)


def test_status_of_a_dir_that_is_no_hub_makes_nothing(tmp_path: Path) -> None:
    with pytest.raises(NotAHubError):
        sync_status(str(tmp_path / "nothing"))
    assert not (tmp_path / "nothing").exists()


def _read_only(monkeypatch: pytest.MonkeyPatch, hub: Path, error: int = errno.EROFS) -> None:
    """Every write under `hub` fails as on a read-only mount (EROFS) or a full disk
    (ENOSPC), whoever runs."""

    def refusing(method: Callable[..., Any]) -> Callable[..., Any]:
        def write(self: FileSessionStorage, path: str, *args: Any, **kwargs: Any) -> Any:
            if str(path).startswith(str(hub)):
                raise OSError(error, os.strerror(error), path)
            return method(self, path, *args, **kwargs)

        return write

    for name in ("write_atomic", "open_writer", "ensure_dir", "write_text", "unlink"):
        monkeypatch.setattr(FileSessionStorage, name, refusing(getattr(FileSessionStorage, name)))


@pytest.mark.parametrize(("error", "said"), [(errno.EROFS, "read-only"), (errno.ENOSPC, "full")])
@pytest.mark.parametrize("something_to_send", [True, False])
def test_a_read_only_or_full_hub_is_an_error_and_changes_nothing_here(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    something_to_send: bool,
    error: int,
    said: str,
) -> None:
    a, b, hub = Machine(tmp_path, "a"), Machine(tmp_path, "b"), tmp_path / "hub"
    new_session(a.session_path("s1"), "s1", message("e1", None, "hi"))
    a.sync(hub, monkeypatch)
    b.sync(hub, monkeypatch)
    append(b.session_path("s1"), message("b1", "e1", "desk"))
    new_session(b.session_path("s2"), "s2", message("f1", None, "desk's"))
    b.sync(hub, monkeypatch)
    if something_to_send:
        append(a.session_path("s1"), message("a1", "e1", "laptop"))
    before = a.files()
    with monkeypatch.context() as patch:
        _read_only(patch, hub, error)
        with pytest.raises(HubError, match=said):
            a.sync(hub, monkeypatch)
    assert a.files() == before
    a.sync(hub, monkeypatch)  # writable again: all of it comes
    assert "s2" in "".join(a.files())
