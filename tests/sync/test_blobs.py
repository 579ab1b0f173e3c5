"""Blobs travel with the lines that name them, each once, checked against their hash."""

from __future__ import annotations

from pathlib import Path

import pytest

from sessiontree.storage import BlobStore
from tests.sync_support import Machine, line, new_session


def _image_entry(entry_id: str, ref: str) -> bytes:
    return line(
        {
            "type": "message",
            "id": entry_id,
            "parentId": None,
            "timestamp": "2026-12-01T10:00:01.000Z",
            "message": {
                "role": "user",
                "content": [{"type": "image", "data": ref, "mimeType": "image/png"}],
                "timestamp": 1,
            },
        }
    )


def test_a_blob_named_by_a_session_arrives_before_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, hub = Machine(tmp_path, "a"), Machine(tmp_path, "b"), tmp_path / "hub"
    image = b"\x89PNG fake image bytes"
    put = BlobStore(str(a.agent_dir() / "blobs")).put(image)
    new_session(a.session_path("s1"), "s1", _image_entry("e1", put.ref))
    new_session(a.session_path("s2"), "s2", _image_entry("f1", put.ref))
    sent = a.sync(hub, monkeypatch)
    assert sent.sent_blobs == 1
    got = b.sync(hub, monkeypatch)
    assert got.received_blobs == 1
    assert BlobStore(str(b.agent_dir() / "blobs")).get(put.hash) == image
