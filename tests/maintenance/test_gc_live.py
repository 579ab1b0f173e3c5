"""gc and live managers: a blob a live manager on this host holds is never deleted,
whatever its age, and no session is written naming a blob its manager knows is gone.

The gc runs are real `sessiontree gc --delete` processes whose clock Debian's
`faketime` moves an hour ahead (scripts/test installs it), so the blobs the test
just put are old to them, as they would be to a gc run an hour from now.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path
from typing import Any

import pytest

import sessiontree.maintenance._gc as gc_module
from sessiontree import BlobStore, MissingBlobError, SessionManager
from sessiontree.layout import store_parts
from sessiontree.maintenance import collect_garbage, list_blobs
from sessiontree.storage import LIVE_DIR, MemoryBlobStore, MemorySessionStorage, read_pins
from tests.conftest import unavailable
from tests.helpers import assistant, user

CLI = os.path.join(os.path.dirname(sys.executable), "sessiontree")


def image_message(ref_or_data: str, text: str = "look") -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": text},
            {"type": "image", "data": ref_or_data, "mimeType": "image/png"},
        ],
        "timestamp": 1,
    }


def png(seed: bytes) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + seed * 300


def later_gc(agent_dir: Path, code: int = 0) -> dict[str, Any]:
    """`sessiontree gc --delete --json` in a process whose clock is an hour ahead (its
    exit status `code`: 1 when it refuses to delete)."""
    faketime = shutil.which("faketime")
    if faketime is None:
        unavailable("faketime is not installed (apt-get install faketime; scripts/test does)")
    done = subprocess.run(
        [faketime, "-f", "+1h", CLI, "--agent-dir", str(agent_dir), "gc", "--delete", "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == code, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def verify(*paths: str) -> list[str]:
    """`sessiontree verify` of the files: the kinds of its findings ([] when all is well)."""
    done = subprocess.run(
        [CLI, "verify", "--json", *paths], capture_output=True, text=True, check=False
    )
    assert done.returncode in (0, 1), done.stderr
    files = json.loads(done.stdout)["files"]
    assert sorted(f["path"] for f in files) == sorted(paths)
    found = [finding["kind"] for f in files for finding in f["findings"]]
    assert (done.returncode == 0) == (not found), done.stdout
    return found


def other_session() -> str:
    """A written session without images: gc refuses to delete anything without one."""
    with SessionManager.create("/elsewhere") as sm:
        sm.append_message(user("x"))
        sm.append_message(assistant("y"))
        path = sm.get_session_file()
    assert path is not None
    return path


def test_gc_an_hour_later_keeps_the_images_that_live_managers_hold(agent_dir: Path) -> None:
    """An in-memory session's `put_blob` and a new session not written before its first
    reply hold refs that no file names: gc keeps their blobs, and the sessions written
    afterwards verify without a missing blob."""
    other_session()
    blobs = agent_dir / "blobs"
    in_memory = SessionManager.in_memory("/proj")
    kept_in_memory = in_memory.put_blob(png(b"a"))
    in_memory.append_message(image_message(kept_in_memory.ref))
    deferred = SessionManager.create("/proj")
    kept_deferred = deferred.put_blob(png(b"b"))
    deferred.append_message(image_message(kept_deferred.ref))
    orphan = BlobStore(str(blobs)).put(png(b"c")).hash  # nobody holds it: it goes
    assert deferred.get_session_file() is not None
    assert not os.path.exists(deferred.get_session_file() or "")

    report = later_gc(agent_dir)

    assert report["deleted"] == [orphan]
    assert report["pinned"] == 2
    assert (blobs / kept_in_memory.hash).is_file()
    assert (blobs / kept_deferred.hash).is_file()
    deferred.append_message(assistant("a fine picture"))  # written now
    copy = in_memory.persist_copy()
    written = [deferred.get_session_file() or "", copy.get_session_file() or ""]
    deferred.close()
    copy.close()
    in_memory.close()
    assert verify(*written) == []


def test_the_pins_of_a_closed_manager_keep_nothing(agent_dir: Path) -> None:
    other_session()
    sm = SessionManager.in_memory("/proj")
    held = sm.put_blob(png(b"d")).hash
    assert held in read_pins(str(agent_dir / "blobs")).hashes
    sm.close()
    assert read_pins(str(agent_dir / "blobs")).hashes == set()
    assert os.listdir(agent_dir / "blobs" / LIVE_DIR) == []  # the pin file is gone
    assert later_gc(agent_dir)["deleted"] == [held]


def test_a_manager_nobody_closes_lets_its_pins_go_when_collected(agent_dir: Path) -> None:
    sm = SessionManager.in_memory("/proj")
    held = sm.put_blob(png(b"e")).hash
    assert held in read_pins(str(agent_dir / "blobs")).hashes
    del sm
    assert read_pins(str(agent_dir / "blobs")).hashes == set()


CHILD = textwrap.dedent(
    """
    import os, sys, time
    from sessiontree import SessionManager
    sm = SessionManager.in_memory("/proj")
    print(sm.put_blob(os.urandom(64) * 40).hash, flush=True)
    if sys.argv[1] == "fork":
        pid = os.fork()
        if pid == 0:
            # The child pins in a pin file of its own, then exits normally: atexit
            # handlers and finalizers run, the inherited manager's among them.
            own = SessionManager.in_memory("/proj")
            print(own.put_blob(os.urandom(64) * 40).hash, flush=True)
            sys.exit(0)
        os.waitpid(pid, 0)
    print("ready", flush=True)
    time.sleep(600)
    """
)


def start_child(how: str) -> tuple[subprocess.Popen[str], str, str | None]:
    """The process pinning a blob; its hash and (with a fork) the hash its child pinned."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, how], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    digest = child.stdout.readline().strip()
    forked = child.stdout.readline().strip() if how == "fork" else None
    assert child.stdout.readline().strip() == "ready"
    return child, digest, forked


@pytest.mark.parametrize("how", ["plain", "fork"])
def test_a_pin_left_by_a_killed_process_keeps_nothing(agent_dir: Path, how: str) -> None:
    """While the process that pinned a blob lives, gc keeps the blob (a child it forked,
    that pinned its own and exited normally, took the parent's pin with it neither
    through its atexit handlers nor its finalizers); once it is killed, its pin is
    stale: gc deletes the blob and removes the pin file."""
    other_session()
    child, digest, forked = start_child(how)
    try:
        report = later_gc(agent_dir)
        assert report["deleted"] == ([forked] if forked else [])
        assert (agent_dir / "blobs" / digest).is_file()
        assert read_pins(str(agent_dir / "blobs")).hashes == {digest}
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert child.stdout is not None
        child.stdout.close()
    pins = read_pins(str(agent_dir / "blobs"))
    assert pins.hashes == set() and len(pins.stale) == 1
    report = later_gc(agent_dir)
    assert report["deleted"] == [digest]
    assert report["stalePins"] == pins.stale
    assert os.listdir(agent_dir / "blobs" / LIVE_DIR) == []


def test_a_session_naming_a_put_blob_that_is_gone_is_not_written(agent_dir: Path) -> None:
    """The blob a new session's ref names was deleted behind it (by an older gc, by
    hand): its first write raises MissingBlobError, names the blob and the file, and
    writes nothing; putting the image again lets it be written."""
    sm = SessionManager.create("/proj")
    data = png(b"f")
    put = sm.put_blob(data)
    sm.append_message(image_message(put.ref))
    os.unlink(put.path)
    path = sm.get_session_file() or ""
    with pytest.raises(MissingBlobError) as caught:
        sm.append_message(assistant("a picture"))
    assert caught.value.hash == put.hash and caught.value.path == path
    assert put.hash in str(caught.value) and path in str(caught.value)
    assert not os.path.exists(path)
    assert len(sm.get_entries()) == 1  # the reply was refused, nothing else changed
    sm.put_blob(data)
    sm.append_message(assistant("a picture"))
    sm.close()
    assert verify(path) == []


def test_a_copy_naming_a_put_blob_that_is_gone_is_not_written(
    agent_dir: Path, tmp_path: Path
) -> None:
    sm = SessionManager.in_memory("/proj")
    put = sm.put_blob(png(b"g"))
    sm.append_message(image_message(put.ref))
    sm.append_message(assistant("seen"))
    os.unlink(put.path)
    target = tmp_path / "copies"
    with pytest.raises(MissingBlobError) as caught:
        sm.persist_copy(str(target))
    assert caught.value.hash == put.hash
    assert not target.exists() or list(target.iterdir()) == []


def test_an_append_naming_a_put_blob_that_is_gone_is_refused(agent_dir: Path) -> None:
    sm = SessionManager.create("/proj")
    sm.append_message(user("hi"))
    sm.append_message(assistant("hello"))
    put = sm.put_blob(png(b"h"))
    os.unlink(put.path)
    path = sm.get_session_file() or ""
    size = os.path.getsize(path)
    with pytest.raises(MissingBlobError):
        sm.append_message(image_message(put.ref))
    assert os.path.getsize(path) == size
    assert len(sm.get_entries()) == 2
    # A blob that is gone but that no entry names stops nothing.
    assert sm.set_session_name("renamed")
    sm.close()
    assert verify(path) == []


def test_gc_on_a_storage_keeps_what_its_blob_store_pins(monkeypatch: pytest.MonkeyPatch) -> None:
    """A storage's own blob store (here the memory one) keeps pinned blobs from gc too."""
    storage = MemorySessionStorage()
    store = storage.blob_store()
    assert isinstance(store, MemoryBlobStore)
    with SessionManager.create("/proj", storage=storage) as other:
        other.append_message(user("x"))
        other.append_message(assistant("y"))
    sm = SessionManager.in_memory("/proj", storage=storage)
    held = sm.put_blob(png(b"i")).hash
    orphan = store.put(png(b"j")).hash
    monkeypatch.setattr(store, "now", lambda: time.time() + 3600)
    report = collect_garbage(store_parts(storage), delete=True)
    assert [b.hash for b in report.deleted] == [orphan]
    assert store.has(held) and report.pinned == 1
    sm.close()
    assert [b.hash for b in collect_garbage(store_parts(storage), delete=True).deleted] == [held]


def test_an_inline_image_of_a_session_not_written_yet_needs_no_pin(agent_dir: Path) -> None:
    """Inline image data is stored when the session is written: nothing to pin before."""
    sm = SessionManager.create("/proj")
    data = base64.b64encode(png(b"k")).decode()
    sm.append_message(image_message(data))
    assert not (agent_dir / "blobs").exists() or read_pins(str(agent_dir / "blobs")).hashes == set()
    sm.close()


def test_gc_in_process_with_a_later_clock_keeps_pinned_blobs(
    agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other_session()
    sm = SessionManager.in_memory("/proj")
    held = sm.put_blob(png(b"l")).hash
    monkeypatch.setattr(gc_module, "time", types.SimpleNamespace(time=lambda: time.time() + 3600))
    report = collect_garbage(store_parts(agent_dir=str(agent_dir)), delete=True)
    assert report.deleted == [] and report.pinned == 1
    assert (agent_dir / "blobs" / held).is_file()
    sm.close()


def test_a_hash_stays_pinned_while_any_manager_holds_it(agent_dir: Path) -> None:
    blobs = str(agent_dir / "blobs")
    first, second = SessionManager.in_memory("/a"), SessionManager.in_memory("/b")
    digest = first.put_blob(png(b"m")).hash
    assert second.put_blob(png(b"m")).hash == digest
    first.close()
    assert read_pins(blobs).hashes == {digest}
    second.close()
    assert read_pins(blobs).hashes == set()


def test_a_pin_file_is_made_anew_when_most_of_it_was_let_go(agent_dir: Path) -> None:
    blobs = agent_dir / "blobs"
    managers = [SessionManager.in_memory("/a") for _ in range(200)]
    held = [sm.put_blob(png(b"n%d" % i)).hash for i, sm in enumerate(managers)]
    (pin,) = list((blobs / LIVE_DIR).iterdir())
    assert len(pin.read_bytes().splitlines()) == 200
    for sm in managers[:150]:
        sm.close()
    (pin,) = list((blobs / LIVE_DIR).iterdir())
    assert len(pin.read_bytes().splitlines()) < 200  # made anew without most let-go ones
    assert read_pins(str(blobs)).hashes >= set(held[150:])
    for sm in managers[150:]:
        sm.close()
    assert list((blobs / LIVE_DIR).iterdir()) == []


def test_a_dry_run_keeps_stale_pins_and_an_unreadable_pin_stops_deletion(
    agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other_session()
    blobs = agent_dir / "blobs"
    orphan = BlobStore(str(blobs)).put(png(b"o")).hash
    live = blobs / LIVE_DIR
    live.mkdir()
    stale = live / "12345-0123456789abcdef.pin"
    stale.write_text(orphan + "\n")
    monkeypatch.setattr(gc_module, "time", types.SimpleNamespace(time=lambda: time.time() + 3600))
    report = collect_garbage(store_parts(agent_dir=str(agent_dir)))
    assert report.stale_pins == [str(stale)] and stale.exists()
    assert [b.hash for b in report.unreferenced] == [orphan]  # a stale pin keeps nothing
    planted = live / "12346-0123456789abcdef.pin"
    planted.symlink_to(stale)
    report = collect_garbage(store_parts(agent_dir=str(agent_dir)), delete=True)
    assert report.refused is not None and report.deleted == []
    assert [p for p, _ in report.unreadable] == [str(planted)]
    planted.unlink()
    report = collect_garbage(store_parts(agent_dir=str(agent_dir)), delete=True)
    assert [b.hash for b in report.deleted] == [orphan] and not stale.exists()


class _HookedOs:
    """`os` as gc sees it, calling `before` ahead of the first removal or rename of a
    path whose name starts with `prefix` (the moment between gc's last look at a blob
    and its removal)."""

    def __init__(self, prefix: str, before: Any) -> None:
        self.prefix = prefix
        self.before = before
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def _maybe(self, path: Any) -> None:
        if not self.fired and os.path.basename(os.fspath(path)).startswith(self.prefix):
            self.fired = True
            self.before()

    def unlink(self, path: Any, *args: Any, **kwargs: Any) -> None:
        self._maybe(path)
        os.unlink(path, *args, **kwargs)

    def rename(self, src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        self._maybe(src)
        os.rename(src, dst, *args, **kwargs)

    def replace(self, src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        self._maybe(src)
        os.replace(src, dst, *args, **kwargs)


@pytest.mark.parametrize("how", ["put", "ref"])
def test_gc_racing_a_manager_that_takes_an_old_blob_at_that_moment_keeps_it(
    agent_dir: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A manager puts again (or names) an old blob no file names, right between gc's
    last look at the blob (its pins, its age) and the removal: the blob stays, and the
    session written afterwards resolves it. (Putting the same image again is common:
    the same screenshot pasted twice; its blob is old when the first session went.)"""
    other_session()
    blobs = agent_dir / "blobs"
    data = png(b"race")
    digest = BlobStore(str(blobs)).put(data, "image/png").hash
    sm = SessionManager.create("/proj")  # written with its first reply

    def take() -> None:
        ref = sm.put_blob(data).ref if how == "put" else f"blob:sha256:{digest}"
        sm.append_message(image_message(ref))

    hooked = _HookedOs(digest, take)
    monkeypatch.setattr(gc_module, "os", hooked)
    monkeypatch.setattr(gc_module, "time", types.SimpleNamespace(time=lambda: time.time() + 3600))
    collect_garbage(store_parts(agent_dir=str(agent_dir)), delete=True)
    assert hooked.fired
    assert BlobStore(str(blobs)).get(digest) == data
    sm.append_message(assistant("the same picture"))  # the session is written now
    path = sm.get_session_file() or ""
    sm.close()
    assert verify(path) == []


def test_a_put_whose_blob_a_gc_takes_while_it_reads_it_stores_it_anew(
    agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-put reads the blob there, then touches it; a gc that takes the file between
    the two (the moment `test_gc_racing_...` leaves a writer) must not leave the put
    returning a blob that is gone."""
    import sessiontree.storage._blobs as blobs_module

    store = BlobStore(str(agent_dir / "blobs"))
    data = png(b"taken")
    digest = store.put(data).hash
    real_holds = blobs_module._holds

    def holds_then_taken(path: str, wanted: bytes) -> bool:
        found = real_holds(path, wanted)
        os.rename(path, path + ".taken")  # what gc's `_take` does
        return found

    monkeypatch.setattr(blobs_module, "_holds", holds_then_taken)
    assert store.put(data).hash == digest
    monkeypatch.undo()
    assert store.get(digest) == data


def test_a_blob_a_stopped_gc_left_taken_is_put_back_and_judged_again(agent_dir: Path) -> None:
    """gc renames a blob before it deletes it; one killed in between leaves the file
    under a hidden name: the next `gc --delete` puts it back first, so a session naming
    it keeps it."""
    blobs = agent_dir / "blobs"
    data = png(b"left")
    digest = BlobStore(str(blobs)).put(data).hash
    with SessionManager.create("/proj") as sm:
        sm.append_message(image_message(f"blob:sha256:{digest}"))
        sm.append_message(assistant("seen"))
    (blobs / digest).rename(blobs / f".{digest}.0123456789ab.gc.tmp")
    report = later_gc(agent_dir)
    assert report["deleted"] == []
    assert BlobStore(str(blobs)).get(digest) == data
    assert sorted(p.name for p in blobs.iterdir() if p.is_file()) == [digest]


@pytest.mark.parametrize("lazy", [False, True], ids=["whole", "index-first"])
def test_a_live_session_whose_file_is_deleted_keeps_its_images_through_gc(
    agent_dir: Path, lazy: bool
) -> None:
    """A writer whose file another program deleted recreates it from what it holds; a
    gc run meanwhile must not take the images of the lines it holds. A whole load holds
    them resolved in memory; an index-first load holds only the unread lines' bytes,
    so its pass pins every ref it sees (and a whole load pins the refs it keeps as refs:
    snapcompact frames, see the next test)."""
    other_session()
    with SessionManager.create("/proj") as sm:
        sm.append_message(image_message(sm.put_blob(png(b"deleted")).ref))
        sm.append_message(assistant("nice"))
        for i in range(20):
            sm.append_message(user(f"u{i}"))
            sm.append_message(assistant(f"a{i}"))
        path = sm.get_session_file() or ""
    live = SessionManager.open(path, lazy=lazy)
    os.unlink(path)  # another program (an `rm`, an agent cleaning up)
    later_gc(agent_dir)
    live.append_message(user("more"))  # recreates the file whole
    live.close()
    assert verify(path) == []


def session_with_images(cwd: str = "/proj") -> tuple[str, str, str]:
    """A written session holding an image block and a snapcompact frame (a ref even in
    memory), then 40 more entries: (path, the image's hash, the frame's hash)."""
    with SessionManager.create(cwd) as sm:
        image = sm.put_blob(png(b"block")).hash
        sm.append_message(image_message(f"blob:sha256:{image}"))
        frame = sm.put_blob(png(b"frame")).hash
        sm.append_custom_entry(
            "snapcompact", {"frames": [{"data": f"blob:sha256:{frame}", "mimeType": "image/png"}]}
        )
        sm.append_message(assistant("nice"))
        for i in range(20):
            sm.append_message(user(f"u{i}"))
            sm.append_message(assistant(f"a{i}"))
        path = sm.get_session_file() or ""
    return path, image, frame


@pytest.mark.parametrize("read", [False, True], ids=["unread", "read"])
@pytest.mark.parametrize("lazy", [False, True], ids=["whole", "index-first"])
def test_a_live_session_whose_file_is_deleted_keeps_its_frames_through_gc(
    agent_dir: Path, lazy: bool, read: bool
) -> None:
    """A snapcompact frame stays a ref in memory (a whole load, an index-first line
    read): the manager pins it as it pins the refs of unread lines, so a gc while the
    file is deleted keeps the frame's blob too (an image block is held as data)."""
    other_session()
    path, image, frame = session_with_images()
    live = SessionManager.open(path, lazy=lazy)
    if read:
        live.get_entries()
    # Index first: every ref the pass saw; whole: the ones memory holds as refs.
    assert read_pins(str(agent_dir / "blobs")).hashes == ({image, frame} if lazy else {frame})
    os.unlink(path)
    report = later_gc(agent_dir)
    # A whole load holds the image block as data: its blob may go, and is put back.
    assert report["deleted"] == ([] if lazy else [image])
    live.append_message(user("more"))  # recreates the file whole
    live.close()
    assert verify(path) == []


def test_a_fork_of_an_index_first_session_keeps_the_images_of_its_unread_lines(
    agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fork_from` copies the lines its source has not read as they are: the fork's
    manager holds them only in its new file, and pins their refs as a load does."""
    other_session()
    path, *images = session_with_images()
    monkeypatch.setattr("sessiontree.session._loader.LAZY_LOAD_BYTES", 0)
    fork = SessionManager.fork_from(path, "/forked")
    copy = fork.get_session_file() or ""
    assert fork._index.pinned is not None  # unread lines, read from the fork's file
    os.unlink(path)  # the source goes
    os.unlink(copy)  # and so does the fork's file, under its live manager
    assert set(images) <= read_pins(str(agent_dir / "blobs")).hashes
    assert later_gc(agent_dir)["deleted"] == []
    fork.append_message(user("more"))
    fork.close()
    assert verify(copy) == []


def test_the_pins_of_a_loaded_file_go_with_its_manager_and_read_only_takes_none(
    agent_dir: Path,
) -> None:
    """A read-only manager never writes its file again: it pins nothing. A writable
    one lets its file's pins go when it closes; gc may then take what no file names."""
    other_session()
    path, image, frame = session_with_images()
    blobs = str(agent_dir / "blobs")
    for lazy in (False, True):
        with SessionManager.open(path, read_only=True, lazy=lazy):
            assert read_pins(blobs).hashes == set()
    live = SessionManager.open(path, lazy=True)
    assert read_pins(blobs).hashes == {image, frame}
    live.close()
    assert read_pins(blobs).hashes == set()
    os.unlink(path)
    assert sorted(later_gc(agent_dir)["deleted"]) == sorted([image, frame])


@pytest.mark.parametrize("planted", ["a file", "a dangling symlink"])
def test_a_pin_dir_that_is_not_a_directory_stops_deletion(
    agent_dir: Path, planted: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Something else at `blobs/.live` (a file, a link to nowhere) keeps every process
    from pinning there: gc cannot know what live managers hold, so it deletes nothing
    (it used to read that as "no pins" and delete what they held)."""
    other_session()
    blobs = agent_dir / "blobs"
    blobs.mkdir(parents=True)
    live = blobs / LIVE_DIR
    if planted == "a file":
        live.write_text("not a dir\n")
    else:
        live.symlink_to(agent_dir / "nowhere")
    sm = SessionManager.in_memory("/proj")
    with caplog.at_level("WARNING", logger="sessiontree"):
        held = sm.put_blob(png(b"unpinnable")).hash
    assert "could not pin blob" in caplog.text
    report = later_gc(agent_dir, code=1)
    assert report["deleted"] == [] and report["refused"] is not None
    assert (blobs / held).is_file()
    sm.close()


def test_a_pin_file_caught_being_made_keeps_its_blobs(
    agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pin file is written under a `.tmp` name, locked, then renamed: a gc that lists
    `.live` in that moment sees only the `.tmp`. What it holds is not always just put: a
    pin file made anew without the hashes let go (or the first pin of a ref to an old
    blob) holds old ones. They are kept as a named pin's are."""
    import fcntl

    other_session()
    blobs = agent_dir / "blobs"
    old = BlobStore(str(blobs)).put(png(b"old, held")).hash
    live = blobs / LIVE_DIR
    live.mkdir()
    being_made = live / f".{os.getpid()}-0123456789abcdef.tmp"  # as `_PinFile._make` names it
    fd = os.open(being_made, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, old.encode() + b"\n")
        monkeypatch.setattr(
            gc_module, "time", types.SimpleNamespace(time=lambda: time.time() + 3600)
        )
        report = collect_garbage(store_parts(agent_dir=str(agent_dir)), delete=True)
        assert report.deleted == [] and old in {b.hash for b in list_blobs(str(blobs))}
    finally:
        os.close(fd)


def test_a_pin_a_full_disk_refused_fails_the_put_and_is_written_whole_later(
    agent_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second pin of a session fails half-written (ENOSPC): put_blob raises rather than
    hand out a ref gc would take (an hour later it would: the hash is not in the pin
    file). Once the disk has room, the next pin writes the whole file again, the torn
    line gone, and gc keeps every blob the session holds."""
    import errno

    import sessiontree.storage._pins as pins_module

    other_session()
    sm = SessionManager.in_memory("/proj")
    first = sm.put_blob(png(b"f")).hash
    real_write_all = pins_module.write_all

    def full_disk(fd: int, data: bytes) -> None:
        real_write_all(fd, data[:10])  # a torn line, then no room
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pins_module, "write_all", full_disk)
    with pytest.raises(OSError, match="could not pin blob") as raised:
        sm.put_blob(png(b"g"))
    assert raised.value.errno == errno.ENOSPC
    monkeypatch.setattr(pins_module, "write_all", real_write_all)
    third = sm.put_blob(png(b"h")).hash
    pinned = read_pins(str(agent_dir / "blobs")).hashes
    assert {first, third} <= pinned
    sm.flush()
    deleted = later_gc(agent_dir)["deleted"]
    assert first not in deleted and third not in deleted
    sm.close()
