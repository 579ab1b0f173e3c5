"""pi's store keeps images inline; a rewrite there changes only what it edits.

pi (0.73) reads no `blob:sha256:` refs and writes `JSON.stringify(entry)`, images
inline and nothing cut. In its store (an agent dir named `.pi/agent`: `~/.pi/agent`,
`--agent pi`) entries are written that way, on append, rewrite and copy, and a rename
appends the `session_info` entry pi reads and changes nothing else (`tests/interop/test_pi16_store.py`).
In the xcsh and oh-my-pi stores every line a rewrite writes is what oh-my-pi writes for its
entry (images to `blobs/`), and a line already in that form keeps its bytes.

The tests marked `peers` also ask pi itself, both releases users run (0.73.1 and 1.6.0,
`peers.PI_VERSIONS`; `tests/peers.py` runs the project's oracle, with pi installed by
`scripts/peers/setup`), for the context of the files written here; the files read here are
those either release wrote (`tests/data/peers/`).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sessiontree import BlobStore, SessionManager, get_default_session_dir
from sessiontree.cli import app
from sessiontree.format import serialize_entry_bytes
from sessiontree.layout import is_pi_agent_dir, writes_pi_form
from sessiontree.session import MAX_PERSIST_CHARS, TRUNCATION_NOTICE, entry_line
from tests import peers
from tests.conftest import FIXTURES, examples
from tests.helpers import assistant, peer_context

DATA = FIXTURES / "peers"
MANIFEST = json.loads((DATA / "manifest.json").read_text(encoding="utf-8"))
PI_FILES = [
    pytest.param(DATA / case["name"] / rec["file"], id=f"{case['name']}/{rec['index']}")
    for case in MANIFEST["cases"]
    if case["writer"] in peers.PI_VERSIONS
    for rec in case["files"]
    if rec["exists"]
]
REF = b"blob:sha256:"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8


@pytest.fixture(params=["whole", "index-first"])
def load_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a session is loaded (index first: as sessions of 8 MiB and more are)."""
    if request.param == "index-first":
        monkeypatch.setattr("sessiontree.session._loader.LAZY_LOAD_BYTES", 0)
    return str(request.param)


def store_dir(tmp_path: Path, store: str) -> Path:
    """An agent dir of `store`: pi's, oh-my-pi's (by their default names) or xcsh's."""
    if store == "pi":
        return tmp_path / "home" / ".pi" / "agent"
    if store == "omp":
        return tmp_path / "home" / ".omp" / "agent"
    return tmp_path / "agent"  # the test's configured agent dir (conftest)


def place(source: Path, agent: Path) -> Path:
    """A copy of a session file in `agent`'s project dir for its cwd."""
    header = json.loads(source.read_bytes().split(b"\n", 1)[0])
    project = agent / "sessions" / os.path.basename(get_default_session_dir(header["cwd"]))
    project.mkdir(parents=True, exist_ok=True)
    target = project / source.name
    shutil.copyfile(source, target)
    return target


def cli(*args: str) -> None:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (result.stdout, result.stderr, result.exception)


def image_message(data: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image", "data": data, "mimeType": "image/png"},
        ],
        "timestamp": 1,
    }


def tool_result(text: str) -> dict[str, Any]:
    return {
        "role": "toolResult",
        "toolCallId": "call-1",
        "toolName": "bash",
        "content": [{"type": "text", "text": text}],
        "isError": False,
        "timestamp": 2,
    }


def pi_context(release: str, path: Path) -> dict[str, Any]:
    """The context pi `release` builds for the session file (skips when it is not
    installed)."""
    return peer_context(release, path)


def images_of(context: dict[str, Any]) -> list[str]:
    return [
        block["data"]
        for message in context["messages"]
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "image"
    ]


def test_the_store_rule() -> None:
    assert is_pi_agent_dir("/home/ann/.pi/agent")
    assert is_pi_agent_dir("/home/ann/.pi/agent/")
    assert not is_pi_agent_dir("/home/ann/.omp/agent")
    assert not is_pi_agent_dir("/home/ann/.xcsh/agent")
    assert not is_pi_agent_dir("/home/ann/pi/agent")
    session = "/home/ann/.pi/agent/sessions/--p--/x.jsonl"
    assert writes_pi_form(session, None, "/home/ann/.pi/agent")
    xcsh = "/home/ann/.xcsh/agent"
    assert not writes_pi_form(f"{xcsh}/sessions/--p--/x.jsonl", None, xcsh)


def agents_form(line: bytes, blobs: BlobStore) -> bytes:
    """The line oh-my-pi writes for the entry of `line` (`entry_line` is checked against
    oh-my-pi's own writes in test_persistence / test_peer_interop)."""
    return entry_line(json.loads(line), blobs)[:-1]


@pytest.mark.parametrize("source", PI_FILES)
def test_a_rename_in_pi_store_of_a_session_pi_wrote_appends_its_name_and_nothing_else(
    tmp_path: Path, source: Path, load_mode: str
) -> None:
    """`sessiontree rename` of a file pi wrote, in pi's store: every line comes back byte
    for byte (inline images stay inline, long strings stay whole), no blob is made, and
    the name is one `session_info` line appended, as pi writes it."""
    agent = store_dir(tmp_path, "pi")
    path = place(source, agent)
    before = path.read_bytes().split(b"\n")
    cli("--agent-dir", str(agent), "rename", str(path), "Renamed")
    after = path.read_bytes().split(b"\n")
    assert after[: len(before) - 1] == before[:-1]
    assert after[len(before) :] == [b""]
    entry = json.loads(after[len(before) - 1])
    assert (entry["type"], entry["name"]) == ("session_info", "Renamed")
    blobs = agent / "blobs"
    assert not blobs.exists() or not any(blobs.iterdir())


@pytest.mark.parametrize("store", ["xcsh", "omp"])
@pytest.mark.parametrize("source", PI_FILES)
def test_a_rename_in_the_other_stores_writes_every_line_as_oh_my_pi_does(
    tmp_path: Path, source: Path, store: str, load_mode: str
) -> None:
    """The same rename in xcsh's and oh-my-pi's store: every line is what oh-my-pi
    writes for its entry (inline images of 1024+ characters to `blobs/`, transient keys
    dropped, long strings cut); a line already in that form keeps its bytes."""
    agent = store_dir(tmp_path, store)
    path = place(source, agent)
    before = path.read_bytes().split(b"\n")
    cli("--agent-dir", str(agent), "rename", str(path), "Renamed")
    after = path.read_bytes().split(b"\n")
    assert len(after) == len(before)
    assert json.loads(after[0])["title"] == "Renamed"
    blobs = BlobStore(str(agent / "blobs"))
    assert after[1:-1] == [agents_form(line, blobs) for line in before[1:-1]]
    assert not any(
        block.get("type") == "image" and not block["data"].startswith("blob:")
        for line in after[1:-1]
        for block in (json.loads(line).get("message", {}).get("content") or [])
        if isinstance(block, dict) and len(block.get("data", "")) >= 1024
    )


@pytest.mark.peers
@pytest.mark.parametrize("release", peers.PI_VERSIONS)
def test_pi_reads_the_images_of_a_session_renamed_here(
    tmp_path: Path, load_mode: str, release: str
) -> None:
    source = (
        DATA / "s1-pi-by-pi" / "2026-11-29T13-12-34-108Z_01a2276f-963c-7010-8005-96ab87bb6dc5.jsonl"
    )
    agent = store_dir(tmp_path, "pi")
    path = place(source, agent)
    before = pi_context(release, path)
    assert images_of(before)
    cli("--agent-dir", str(agent), "rename", str(path), "Renamed")
    assert pi_context(release, path) == before


@pytest.mark.peers
@pytest.mark.parametrize("release", peers.PI_VERSIONS)
def test_a_pi_session_on_a_linked_disk_renamed_by_its_real_path_keeps_its_images(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, release: str
) -> None:
    """A project dir of pi's store linked to another disk: the session named by its
    real path (`/mnt/disk/...`, as a shell in that dir or a tool resolving links gives
    it) lay under no store by its name, so the rename wrote its images as blob refs
    in xcsh's store, which pi does not read (its context lost them). A dir pi's
    `sessions/` links to is pi's store too."""
    source = (
        DATA / "s1-pi-by-pi" / "2026-11-29T13-12-34-108Z_01a2276f-963c-7010-8005-96ab87bb6dc5.jsonl"
    )
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    agent = store_dir(tmp_path, "pi")
    in_store = place(source, agent)
    disk = tmp_path / "disk" / in_store.parent.name
    disk.parent.mkdir()
    in_store.parent.rename(disk)
    in_store.parent.symlink_to(disk)
    real = disk / in_store.name
    before = pi_context(release, in_store)
    assert images_of(before)
    cli("rename", str(real), "Renamed")  # the agent dir in effect: xcsh's (conftest)
    assert b"blob:sha256:" not in real.read_bytes()
    after = pi_context(release, in_store)
    assert images_of(after) == images_of(before)
    assert after["messages"] == before["messages"]


def test_appends_in_pi_store_keep_images_inline_and_strings_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What pi writes: an image given inline, one given as a ref `put_blob` handed out,
    and a string longer than oh-my-pi's cut all go into the file as they are."""
    agent = store_dir(tmp_path, "pi")
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    inline = base64.b64encode(PNG).decode()
    long_text = "x" * (MAX_PERSIST_CHARS + 10)
    sm = SessionManager.create("/proj")
    sm.append_message(image_message(inline))
    sm.append_message(assistant("a picture"))
    put = sm.put_blob(PNG + b"2")
    sm.append_message(image_message(put.ref))
    sm.append_message(tool_result(long_text))
    sm.close()
    path = Path(sm.get_session_file() or "")
    data = path.read_bytes()
    assert REF not in data
    messages = [json.loads(line)["message"] for line in data.splitlines()[1:]]
    assert messages[0]["content"][1]["data"] == inline
    assert messages[2]["content"][1]["data"] == base64.b64encode(PNG + b"2").decode()
    assert messages[3]["content"][0]["text"] == long_text
    # A rewrite keeps them so too, loaded whole or index first.
    for lazy in (False, True):
        with SessionManager.open(str(path), lazy=lazy) as again:
            again.rewrite_entries()
        assert path.read_bytes() == data


@pytest.mark.peers
@pytest.mark.parametrize("release", peers.PI_VERSIONS)
def test_pi_reads_what_was_appended_in_its_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, release: str
) -> None:
    agent = store_dir(tmp_path, "pi")
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    sm = SessionManager.create("/proj")
    put = sm.put_blob(PNG)
    sm.append_message(image_message(put.ref))
    sm.append_message(assistant("a picture"))
    sm.close()
    assert images_of(pi_context(release, Path(sm.get_session_file() or ""))) == [
        base64.b64encode(PNG).decode()
    ]


@pytest.mark.parametrize("store", ["xcsh", "omp"])
def test_other_stores_still_move_images_to_blobs_and_cut_long_strings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    agent = store_dir(tmp_path, store)
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    sm = SessionManager.create("/proj")
    sm.append_message(image_message(base64.b64encode(PNG).decode()))
    sm.append_message(assistant("a picture"))
    sm.append_message(tool_result("x" * (MAX_PERSIST_CHARS + 10)))
    sm.close()
    lines = Path(sm.get_session_file() or "").read_bytes().splitlines()
    image = json.loads(lines[1])["message"]["content"][1]["data"]
    assert image.startswith("blob:sha256:")
    assert (agent / "blobs" / image[len("blob:sha256:") :]).is_file()
    assert json.loads(lines[3])["message"]["content"][0]["text"].endswith(TRUNCATION_NOTICE)


def test_a_copy_into_pi_store_writes_its_images_inline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An in-memory session of the xcsh store holds a ref `put_blob` handed out; its
    copy into pi's store carries the image inline."""
    sm = SessionManager.in_memory("/proj")
    put = sm.put_blob(PNG)
    sm.append_message(image_message(put.ref))
    sm.append_message(assistant("a picture"))
    pi_project = store_dir(tmp_path, "pi") / "sessions" / "--proj--"
    copy = sm.persist_copy(str(pi_project))
    copy.close()
    data = Path(copy.get_session_file() or "").read_bytes()
    assert REF not in data
    assert base64.b64encode(PNG) in data


def test_a_rewrite_in_pi_store_turns_refs_back_into_images(tmp_path: Path, load_mode: str) -> None:
    """A session in pi's store that an older version wrote with blob refs: its next
    rewrite writes the images inline, where pi can read them (index first too: its
    unread lines with refs are written anew, not copied as they are)."""
    agent = store_dir(tmp_path, "pi")
    with SessionManager.create("/proj", str(tmp_path / "xcsh-form")) as sm:
        sm.append_message(image_message(base64.b64encode(PNG).decode()))
        sm.append_message(assistant("a picture"))
        written = Path(sm.get_session_file() or "")
    assert REF in written.read_bytes()
    (agent / "blobs").mkdir(parents=True)
    for blob in (tmp_path / "agent" / "blobs").iterdir():
        shutil.copyfile(blob, agent / "blobs" / blob.name)
    path = place(written, agent)
    with SessionManager.open(str(path), agent_dir=str(agent)) as sm:
        sm.rewrite_entries()
    data = path.read_bytes()
    assert REF not in data
    assert base64.b64encode(PNG) in data


def test_an_entry_edited_in_place_is_written_in_its_stores_form(
    tmp_path: Path, load_mode: str
) -> None:
    """`rewrite_entries` after an edit of a message pi wrote with an inline image, in
    the xcsh store: the edited line is written as oh-my-pi writes it (its image in
    `blobs/`), and every other line as well (a line already in that form keeps its bytes)."""
    source = (
        DATA / "s1-pi-by-pi" / "2026-11-29T13-12-34-108Z_01a2276f-963c-7010-8005-96ab87bb6dc5.jsonl"
    )
    agent = store_dir(tmp_path, "xcsh")
    path = place(source, agent)
    before = path.read_bytes().split(b"\n")
    with SessionManager.open(str(path)) as sm:
        entry = next(
            e
            for e in sm.get_entries()
            if any(
                isinstance(b, dict) and b.get("type") == "image"
                for b in (e.get("message", {}).get("content") or [])
                if isinstance(e.get("message", {}).get("content"), list)
            )
        )
        entry["message"]["edited"] = True
        edited = entry["id"]
        sm.rewrite_entries()
    after = path.read_bytes().split(b"\n")
    blobs = BlobStore(str(agent / "blobs"))
    for old, new in zip(before[1:-1], after[1:-1], strict=True):
        if json.loads(old)["id"] == edited:
            assert REF in new
            assert json.loads(new)["message"]["edited"] is True
        else:
            assert new == agents_form(old, blobs)


@pytest.mark.parametrize("store", ["pi", "xcsh"])
@pytest.mark.parametrize("source", PI_FILES[:4])
def test_a_fork_of_a_session_pi_wrote_copies_its_lines_in_its_stores_form(
    tmp_path: Path, source: Path, store: str, load_mode: str
) -> None:
    agent = store_dir(tmp_path, store)
    path = place(source, agent)
    with SessionManager.open(str(path)) as sm:
        forked = sm.fork()
    assert forked is not None
    old, new = (Path(p).read_bytes().split(b"\n") for p in forked)
    if store == "pi":
        assert new[1:] == old[1:]
    else:
        blobs = BlobStore(str(agent / "blobs"))
        assert new[1:-1] == [agents_form(line, blobs) for line in old[1:-1]]


blocks = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=20)),
    st.builds(
        lambda n, c: {"type": "image", "data": c * n, "mimeType": "image/png"},
        st.integers(1000, 3000),
        st.sampled_from("AQZ+/"),
    ),
)
pi_entries = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "toolResult", "assistant"]),
            "content": st.lists(blocks, min_size=1, max_size=3),
        },
        optional={
            "jsonlEvents": st.lists(st.integers(0, 9), max_size=2),
            "huge": st.just("y" * (MAX_PERSIST_CHARS + 1)),
        },
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=pi_entries, store=st.sampled_from(["pi", "xcsh"]), lazy=st.booleans())
def test_any_session_written_as_pi_writes_comes_back_from_a_rename_unchanged(
    messages: list[dict[str, Any]], store: str, lazy: bool
) -> None:
    """Lines in pi's form (inline images, strings oh-my-pi would cut, keys it would drop),
    renamed in either store and either load mode: in pi's store a `session_info` line is
    appended and nothing else changes; in xcsh's every line becomes what oh-my-pi writes
    for it."""
    with tempfile.TemporaryDirectory() as tmp:
        agent = store_dir(Path(tmp), store)
        project = agent / "sessions" / "--proj--"
        project.mkdir(parents=True)
        header = {"type": "session", "version": 3, "id": "s1", "timestamp": "t", "cwd": "/proj"}
        lines = [serialize_entry_bytes(header)]
        parent = None
        for i, m in enumerate(messages):
            entry = {"type": "message", "id": f"e{i}", "parentId": parent, "timestamp": "t"}
            entry["message"] = m
            lines.append(serialize_entry_bytes(entry))
            parent = f"e{i}"
        path = project / "2026-01-01T00-00-00-000Z_s1.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        with SessionManager.open(
            str(path), blob_store=BlobStore(str(agent / "blobs")), lazy=lazy
        ) as sm:
            sm.set_session_name("renamed")
        after = path.read_bytes().split(b"\n")
        if store == "pi":
            assert after[1 : len(lines)] == lines[1:]
            added = [json.loads(line)["type"] for line in after[len(lines) : -1]]
            assert added == ["session_info"]
            assert not (agent / "blobs").exists() or not any((agent / "blobs").iterdir())
        else:
            blobs = BlobStore(str(agent / "blobs"))
            assert after[1:-1] == [agents_form(line, blobs) for line in lines[1:]]
            assert not any(b'"jsonlEvents"' in line for line in after)


def _inline_images_of(path: str) -> list[bytes]:
    """The images of the file's message blocks, each inline (a ref fails the test)."""
    found = []
    for line in Path(path).read_bytes().splitlines():
        entry = json.loads(line)
        content = (
            entry.get("message", {}).get("content") if entry.get("type") == "message" else None
        )
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "image":
                assert not block["data"].startswith("blob:"), (path, block["data"])
                found.append(base64.b64decode(block["data"]))
    return found


def _pi_fork(src: str, dest: Path, lazy: bool) -> str:
    with SessionManager.open(src, session_dir=str(dest), lazy=lazy, breadcrumb=False) as sm:
        forked = sm.fork()
    assert forked is not None
    return forked[1]


def _pi_branched(src: str, dest: Path, lazy: bool) -> str:
    with SessionManager.open(src, session_dir=str(dest), lazy=lazy, breadcrumb=False) as sm:
        path = sm.create_branched_session(sm.get_leaf_id() or "")
    assert path is not None
    return path


def _pi_move(src: str, dest: Path, lazy: bool) -> str:
    with SessionManager.open(src, lazy=lazy, breadcrumb=False) as sm:
        sm.move_to("/dest")  # into the configured agent dir: pi's
        return sm.get_session_file() or ""


def _pi_fork_from(src: str, dest: Path, lazy: bool) -> str:
    with SessionManager.fork_from(src, "/dest") as forked:  # by size: see the test
        return forked.get_session_file() or ""


@pytest.mark.parametrize(
    "copy", [_pi_fork, _pi_branched, _pi_move, _pi_fork_from], ids=lambda f: f.__name__[4:]
)
def test_a_copy_from_another_store_into_pi_store_writes_its_images_inline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load_mode: str, copy: Any
) -> None:
    """A session of the xcsh store (images as refs) forked, branched or moved into pi's
    store: the copy holds its images inline, as pi writes them, whether the source was
    loaded whole (its form was the source store's) or index first (unread lines with
    refs were copied as they are): pi reads no refs."""
    xcsh = store_dir(tmp_path, "xcsh")
    sm = SessionManager.create("/proj", str(xcsh / "sessions" / "--proj--"))
    sm.append_message(image_message(base64.b64encode(PNG).decode()))
    sm.append_message(assistant("a picture"))
    sm.append_message(image_message(sm.put_blob(PNG[::-1]).ref))
    sm.append_message(assistant("another"))
    sm.close()
    src = sm.get_session_file() or ""
    assert Path(src).read_bytes().count(REF) == 2
    pi = store_dir(tmp_path, "pi")
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(pi))
    copied = copy(src, pi / "sessions" / "--dest--", load_mode == "index-first")
    assert writes_pi_form(copied, None, str(pi))
    assert _inline_images_of(copied) == [PNG, PNG[::-1]]


@pytest.mark.parametrize("how", ["fork", "branched"])
def test_after_a_fork_into_pi_store_appends_are_in_pi_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The manager goes on in the copy: what it appends there is written as pi writes
    it (it went on in the source store's form, refs and all)."""
    xcsh = store_dir(tmp_path, "xcsh")
    sm = SessionManager.create("/proj", str(xcsh / "sessions" / "--proj--"))
    sm.append_message(image_message(base64.b64encode(PNG).decode()))
    sm.append_message(assistant("a picture"))
    pi = store_dir(tmp_path, "pi")
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(pi))
    sm.close()
    with SessionManager.open(
        sm.get_session_file() or "", session_dir=str(pi / "sessions" / "--dest--")
    ) as copy_from:
        if how == "fork":
            assert copy_from.fork() is not None
        else:
            assert copy_from.create_branched_session(copy_from.get_leaf_id() or "")
        copy_from.append_message(image_message(base64.b64encode(PNG[::-1]).decode()))
        path = copy_from.get_session_file() or ""
    assert path.startswith(str(pi))
    assert _inline_images_of(path) == [PNG, PNG[::-1]]
