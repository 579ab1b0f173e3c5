"""pi 1.6's custom session ids (`^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$`, pi's
`assertValidSessionId`): sessions named so are listed as pi lists them, and each is found
by its id wherever an id is taken (`resolve_resumable_session`, `Store.open`, the CLI),
while an argument that is a path trick finds nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sessiontree import Store, resolve_resumable_session, serialize_entry
from sessiontree.cli import app
from tests import peers
from tests.conftest import examples

PI_ID = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,30}[A-Za-z0-9])?")
"""pi 1.6's rule (assertValidSessionId), lengths bounded for the test."""

custom_ids = st.from_regex(PI_ID, fullmatch=True)


def write_session(directory: Path, session_id: str, n: int, text: str) -> Path:
    """A session as pi 1.6 names and writes it (`<timestamp>_<id>.jsonl`)."""
    stamp = f"2026-11-20T10:00:{n:02d}.000Z"
    path = directory / f"{stamp.replace(':', '-').replace('.', '-')}_{session_id}.jsonl"
    header = {
        "type": "session",
        "version": 3,
        "id": session_id,
        "timestamp": stamp,
        "cwd": "/work/demo",
    }
    entry = {
        "type": "message",
        "id": f"{n:08x}",
        "parentId": None,
        "timestamp": stamp,
        "message": {"role": "user", "content": text, "timestamp": 1},
    }
    path.write_text(serialize_entry(header) + "\n" + serialize_entry(entry) + "\n")
    return path


@settings(max_examples=examples(30))
@given(ids=st.lists(custom_ids, min_size=1, max_size=4, unique_by=str))
def test_custom_ids_are_listed_and_found(ids: list[str], tmp_path_factory: Any) -> None:
    agent = tmp_path_factory.mktemp("agent")
    project = agent / "sessions" / "--work-demo--"
    project.mkdir(parents=True)
    paths = {sid: write_session(project, sid, n, f"prompt of {sid}") for n, sid in enumerate(ids)}
    with Store(str(agent)) as store:
        listed = {info.id: info.path for info in store.list()}
        assert listed == {sid: str(p) for sid, p in paths.items()}
        for sid, path in paths.items():
            found = resolve_resumable_session(sid, "/work/demo", str(project))
            assert found is not None and found.session.path == str(path), sid
            with store.open(sid, read_only=True) as sm:
                assert sm.get_session_id() == sid
    pi = json.loads(peers.oracle("pi16", "list", project))
    assert sorted(s["id"] for s in pi) == sorted(ids)


@pytest.mark.parametrize(
    ("ids", "asked", "expected"),
    [
        # a custom id may hold `_`: the file name's id is what follows the timestamp
        (["my_session", "session"], "session", "session"),
        # ids differ in case alone: the one spelled so wins
        (["Build", "build"], "Build", "Build"),
        (["Build", "build"], "build", "build"),
        # pi tells case apart in prefixes too (`s.id.startsWith(arg)`): `build` is the
        # start of build-fix, not the id Build; the one deleted or renamed was Build
        (["Build", "build-fix"], "build", "build-fix"),
        (["build-fix", "Build"], "build", "build-fix"),
        (["Build-a", "build-b"], "build", "build-b"),
    ],
)
def test_an_exact_custom_id_beats_a_look_alike(
    tmp_path: Path, ids: list[str], asked: str, expected: str
) -> None:
    project = tmp_path / "sessions" / "--work-demo--"
    project.mkdir(parents=True)
    for n, sid in enumerate(ids if asked == ids[0] else reversed(ids)):
        write_session(project, sid, n, "hi")  # the one asked for is the older file
    found = resolve_resumable_session(asked, "/work/demo", str(project))
    assert found is not None and found.session.id == expected


@pytest.mark.parametrize("trick", ["../sessions", "a/b", "..", "x/../y", "/etc/passwd", "a\x00b"])
def test_path_tricks_find_nothing(tmp_path: Path, trick: str, agent_dir: Path) -> None:
    project = agent_dir / "sessions" / "--work-demo--"
    project.mkdir(parents=True)
    write_session(project, "a", 0, "hi")
    assert resolve_resumable_session(trick, "/work/demo", str(project)) is None
    result = CliRunner().invoke(app, ["show", trick])
    assert result.exit_code != 0


@given(session_id=custom_ids)
def test_a_file_names_its_whole_custom_id(session_id: str) -> None:
    """The id part of `<timestamp>_<id>` is the whole id, `_`s and all (the usage report
    follows a fork's `parentSession` path by it)."""
    from sessiontree.format import file_session_id
    from sessiontree.reports._usage import _reference_id

    stem = f"2026-11-20T10-00-00-000Z_{session_id}"
    assert file_session_id(stem) == session_id
    assert _reference_id(f"/gone/{stem}.jsonl") == session_id


@pytest.mark.parametrize("command", ["resume", "show", "rename"])
def test_a_custom_id_beats_a_file_of_its_name_in_the_current_dir(
    tmp_path: Path, agent_dir: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """pi 1.6 reads an argument without a separator or `.jsonl` as a session id: with a
    file `notes` in the current dir, `resume notes` printed that file's path (a shell's
    `pi --session "$(sessiontree resume notes)"` then opened the user's notes as a
    session) and `show`/`rename notes` failed on it, the session `notes` unreachable."""
    project = agent_dir / "sessions" / "--work-demo--"
    project.mkdir(parents=True)
    session = write_session(project, "notes", 0, "hi")
    here = tmp_path / "here"
    here.mkdir()
    (here / "notes").write_text("my own notes\n")
    monkeypatch.chdir(here)
    args = [command, "notes"] + (["new name"] if command == "rename" else [])
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (here / "notes").read_text() == "my own notes\n"
    if command == "resume":
        assert result.output.strip() == str(session)
    with Store(str(agent_dir)) as store:
        assert store.resolve("notes", cwd=str(here)) == str(session)
        # a file there that no session id names is still taken as given
        (here / "copy").write_bytes(session.read_bytes())
        assert store.resolve("copy", cwd=str(here)) == str(here / "copy")


@settings(max_examples=examples(25))
@given(ids=st.lists(custom_ids, min_size=1, max_size=4, unique_by=str.lower), gone=st.data())
def test_the_archive_restores_a_custom_id_and_no_other(
    ids: list[str], gone: st.DataObject, tmp_path_factory: Any
) -> None:
    """`restore ID` and `restore ID --versions` find a pi 1.6 custom id: one of fewer
    than 8 characters (`build`) was found by nothing, one that is the start of another
    (`my-session-1`, `my-session-10`) "matched 2 archived sessions", and an id inside
    another's (`login-bug`, archived only as `fix-login-bug`) restored that other one."""
    from sessiontree.archive import (
        ArchiveError,
        ArchiveSource,
        archive_stores,
        archived_versions,
        restore_session,
    )

    root = tmp_path_factory.mktemp("archive")
    home = root / "agent"
    project = home / "sessions" / "--work-demo--"
    project.mkdir(parents=True)
    paths = {sid: write_session(project, sid, n, f"prompt of {sid}") for n, sid in enumerate(ids)}
    archive = str(root / "archive")
    archive_stores(archive, [ArchiveSource("pi", str(home), ("sessions",))])
    for sid, path in paths.items():
        file, _ = archived_versions(archive, sid)
        assert file.rel == f"sessions/--work-demo--/{path.name}", sid
        out = root / f"out-{sid}"
        report = restore_session(archive, sid, to=str(out))
        assert report.written == [str(out / file.rel)], sid
    # an id the archive does not keep (nor one it starts), inside ones it keeps,
    # restores none of them
    names = [i.lower() for i in ids] + ["2026-11-20t10-00-00-000z_"]
    missing = gone.draw(
        custom_ids.filter(lambda s: not any(n.startswith(s.lower()) for n in names))
    )
    inside = f"x-{missing}" if f"x-{missing}".lower() not in {i.lower() for i in ids} else None
    if inside is not None:
        write_session(project, inside, 9, "another")
        archive_stores(archive, [ArchiveSource("pi", str(home), ("sessions",))])
    with pytest.raises(ArchiveError, match="no archived session matches"):
        restore_session(archive, missing, to=str(root / "none"))


@pytest.mark.parametrize("session_id", ["sessions", "subagents"])
@pytest.mark.usefixtures("homes_in_tmp")
def test_a_restored_custom_id_brings_its_own_files_alone(tmp_path: Path, session_id: str) -> None:
    """A file whose path holds a dir named as the id asked for was taken for a companion
    of the session: `restore sessions` (a pi 1.6 custom id) brought back every other
    session's artifacts, and stopped when one of them was there with other bytes."""
    from sessiontree.archive import ArchiveSource, archive_stores, restore_session

    home = tmp_path / ".pi" / "agent"
    project = home / "sessions" / "--work-demo--"
    project.mkdir(parents=True)
    mine = write_session(project, session_id, 0, "mine")
    theirs = write_session(project, "other-one", 1, "theirs")
    artifact = project / theirs.name.removesuffix(".jsonl") / "subagents" / "tool-output.txt"
    artifact.parent.mkdir(parents=True)
    artifact.write_text("theirs")
    own = project / mine.name.removesuffix(".jsonl") / "notes.txt"
    own.parent.mkdir()
    own.write_text("mine")
    archive = str(tmp_path / "archive")
    archive_stores(archive, [ArchiveSource("pi", str(home), ("sessions",))])
    artifact.write_text("changed since")  # there with other bytes: not this session's
    mine.unlink()
    own.unlink()
    report = restore_session(archive, session_id)
    assert sorted(report.written) == sorted([str(mine), str(own)])
    assert artifact.read_text() == "changed since"
