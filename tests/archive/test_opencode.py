"""An OpenCode database's session, archived as its `opencode export` document, is in the
archive's view as OpenCode's JSON files, written once per version, and a document whose
ids are not plain names writes nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sessiontree.archive import ArchiveSource, archive_stores, archive_view
from sessiontree.archive._opencode import export_as_storage
from tests.conftest import REAL_FILES
from tests.foreign_support import OPENCODE_DB

pytestmark = pytest.mark.usefixtures("homes_in_tmp")

DOCUMENT = REAL_FILES / "foreign" / "opencode" / "savekirk__session-bridge__29__dbfeaf9083__0__full.jsonl"  # fmt: skip


def test_an_export_is_laid_out_as_opencodes_json_files() -> None:
    files = dict(export_as_storage(DOCUMENT.read_bytes()) or [])
    document = json.loads(DOCUMENT.read_bytes())
    info = document["info"]
    session = f"storage/session/{info['projectID']}/{info['id']}.json"
    assert list(files)[-1] == session  # the session's own file last
    assert json.loads(files[session]) == info
    first = document["messages"][0]
    assert (
        json.loads(files[f"storage/message/{info['id']}/{first['info']['id']}.json"])
        == (first["info"])
    )
    parts = [k for k in files if k.startswith("storage/part/")]
    assert len(parts) == sum(len(m["parts"]) for m in document["messages"])


@pytest.mark.parametrize("where", ["session", "project", "message", "part"])
def test_an_id_that_is_not_a_plain_name_writes_nothing(where: str) -> None:
    document = json.loads(DOCUMENT.read_bytes())
    target = {
        "session": document["info"],
        "message": document["messages"][0]["info"],
        "part": document["messages"][0]["parts"][0],
    }.get(where)
    if target is None:
        document["info"]["projectID"] = "../../outside"
    else:
        target["id"] = "../../outside"
    assert export_as_storage(json.dumps(document).encode()) is None
    assert export_as_storage(b"not json") is None


def test_a_database_session_is_in_the_view_written_once(homes_in_tmp: Path) -> None:
    home = homes_in_tmp / "opencode"
    home.mkdir()
    shutil.copyfile(REAL_FILES / "foreign" / "opencode" / OPENCODE_DB, home / "opencode.db")
    archive = str(homes_in_tmp / "archive")
    archive_stores(archive, [ArchiveSource("opencode", str(home), ())])
    (view,) = archive_view(archive)
    (session,) = Path(view.home).glob("storage/session/*/ses_*.json")
    inode = session.stat().st_ino
    archive_view(archive)
    assert session.stat().st_ino == inode  # not written again: its version is the same
    assert not (Path(view.home) / "export").exists()
