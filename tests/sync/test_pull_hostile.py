"""A hub is written by other machines, and nothing it holds is trusted: a name that is
not one sessiontree uses, a header whose id is not its file's, a journal line that
does not parse, a blob whose bytes do not hash to its name: each is skipped and named,
and nothing is written outside this machine's store."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.sync_support import PROJECT, Machine, header, line, message, new_session


def _files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*") if p.is_file()}


def _plant(hub: Path, machine: str, logs: dict[str, bytes], journal: list[bytes]) -> None:
    """Another machine's files in the hub, as it would write them (or worse)."""
    for rel, data in logs.items():
        path = hub / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (hub / "machines" / machine).mkdir(parents=True, exist_ok=True)
    (hub / "machines" / machine / "journal.jsonl").write_bytes(b"".join(journal))


def _journal(rel: str, size: int) -> bytes:
    return json.dumps({"log": rel, "size": size}).encode() + b"\n"


@pytest.fixture
def hub_and_b(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Machine]:
    a, b = Machine(tmp_path, "a"), Machine(tmp_path, "b")
    hub = tmp_path / "hub"
    new_session(a.session_path("ok"), "ok", message("e1", None, "hi"))
    a.sync(hub, monkeypatch)
    return hub, b


STEM = "2026-12-01T10-00-00-000Z_s9"


@pytest.mark.parametrize(
    "rel",
    [
        f"sessions/pi/../../../../outside/{STEM}/evil.jsonl",
        f"sessions/pi/{PROJECT}/../../evil.jsonl",
        "/etc/evil.jsonl",
        f"sessions/pi/.hidden/{STEM}/evil.jsonl",
        f"sessions/claude/{PROJECT}/{STEM}/evil.jsonl",
        f"sessions/pi/{PROJECT}/{STEM}/a.jsonl",  # another machine's log
        f"sessions/pi/{PROJECT}/..{STEM}/evil.jsonl",
    ],
)
def test_a_journal_naming_a_log_that_is_not_its_machines_is_refused(
    hub_and_b: tuple[Path, Machine], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, rel: str
) -> None:
    hub, b = hub_and_b
    data = header("s9") + message("x1", None, "planted")
    try:
        _plant(hub, "evil", {rel.lstrip("/"): data}, [_journal(rel, len(data))])
    except (OSError, ValueError):
        pass
    before = _files(tmp_path)
    report = b.sync(hub, monkeypatch)
    assert any("journal of evil" in what for what, _ in report.skipped)
    assert sorted(b.files()) == [f"{PROJECT}/2026-12-01T10-00-00-000Z_ok.jsonl"]
    made = _files(tmp_path) - before
    assert all(str(b.home) in p or str(hub) in p for p in made), made


def test_a_malformed_journal_line_is_named_and_the_rest_is_read(
    hub_and_b: tuple[Path, Machine], monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, b = hub_and_b
    rel = f"sessions/pi/{PROJECT}/{STEM}/evil.jsonl"
    data = header("s9") + message("x1", None, "planted")
    _plant(hub, "evil", {rel: data}, [b"{not json\n", b'["log"]\n', _journal(rel, len(data))])
    report = b.sync(hub, monkeypatch)
    refused = [why for what, why in report.skipped if "journal of evil" in what]
    assert len(refused) == 2
    assert (b.session_path("s9")).read_bytes() == data


def test_a_header_whose_id_is_not_its_file_names_is_skipped(
    hub_and_b: tuple[Path, Machine], monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, b = hub_and_b
    rel = f"sessions/pi/{PROJECT}/{STEM}/evil.jsonl"
    data = header("other") + message("x1", None, "planted")
    _plant(hub, "evil", {rel: data}, [_journal(rel, len(data))])
    report = b.sync(hub, monkeypatch)
    assert any("header's id" in why for _, why in report.skipped)
    assert not b.session_path("s9").exists()


def test_bad_machine_dirs_are_passed_over(
    hub_and_b: tuple[Path, Machine], monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, b = hub_and_b
    for name in (".hidden", "-x", "a b"):
        rel = f"sessions/pi/{PROJECT}/{STEM}/{name}.jsonl"
        data = header("s9") + message("x1", None, "planted")
        _plant(hub, name, {rel: data}, [_journal(rel, len(data))])
    b.sync(hub, monkeypatch)
    assert not b.session_path("s9").exists()


def test_a_blob_whose_bytes_do_not_hash_to_its_name_is_refused(
    hub_and_b: tuple[Path, Machine], monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, b = hub_and_b
    digest = hashlib.sha256(b"the real image").hexdigest()
    (hub / "blobs").mkdir(exist_ok=True)
    (hub / "blobs" / digest).write_bytes(b"something else")
    image = line(
        {
            "type": "message",
            "id": "x1",
            "parentId": None,
            "timestamp": "2026-12-01T10:00:01.000Z",
            "message": {
                "role": "user",
                "content": [{"type": "image", "data": f"blob:sha256:{digest}", "mimeType": "x"}],
                "timestamp": 1,
            },
        }
    )
    rel = f"sessions/pi/{PROJECT}/{STEM}/evil.jsonl"
    data = header("s9") + image
    _plant(hub, "evil", {rel: data}, [_journal(rel, len(data))])
    report = b.sync(hub, monkeypatch)
    assert any(digest in what for what, _ in report.skipped)
    assert not (b.agent_dir() / "blobs" / digest).exists()
    assert b.session_path("s9").read_bytes() == data  # the entry comes, its image does not


def test_a_journal_claiming_a_log_far_larger_than_it_is_costs_nothing_later(
    hub_and_b: tuple[Path, Machine], monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, b = hub_and_b
    rel = f"sessions/pi/{PROJECT}/{STEM}/c.jsonl"
    log = header("s9") + message("x1", None, "from c")
    _plant(hub, "c", {rel: log}, [_journal(rel, 10**15)])
    b.sync(hub, monkeypatch)
    assert b.session_path("s9").read_bytes() == log
    again = b.sync(hub, monkeypatch)
    assert again.bytes_read == 0 and not again.changed


def test_a_log_line_split_by_a_carriage_return_is_not_carried_as_two(
    hub_and_b: tuple[Path, Machine], monkeypatch: pytest.MonkeyPatch
) -> None:
    hub, b = hub_and_b
    rel = f"sessions/pi/{PROJECT}/{STEM}/c.jsonl"
    joined = message("x1", None, "one")[:-1] + b"\r" + message("x2", "x1", "two")
    _plant(hub, "c", {rel: header("s9") + joined}, [_journal(rel, 10**6)])
    b.sync(hub, monkeypatch)
    for raw in b.session_path("s9").read_bytes().split(b"\n")[:-1]:
        json.loads(raw)  # every line of the file is one JSON value, as an agent reads it
