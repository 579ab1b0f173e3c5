"""Persistence transforms: truncation, transient keys, blob externalization, load-side resolving."""

from __future__ import annotations

import base64
import copy
import hashlib
import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree import SessionManager
from sessiontree.session import (
    BLOB_EXTERNALIZE_THRESHOLD,
    MAX_PERSIST_CHARS,
    TRUNCATION_NOTICE,
    b64decode_lenient,
    js_len,
    prepare_for_persist,
    resolve_blob_refs,
    truncate_for_persist,
)
from sessiontree.storage import BlobPutResult, BlobStore, MemoryBlobStore
from tests.conftest import examples

KEEP = MAX_PERSIST_CHARS - len(TRUNCATION_NOTICE)
EMOJI = "😀"  # two UTF-16 units
HIGH, LOW = "\ud83d", "\ude00"


def msg_entry(
    content: list[dict[str, Any]], role: str = "assistant", **extra: Any
) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "a1b2c3d4",
        "parentId": None,
        "timestamp": "2026-02-16T10:20:30.000Z",
        "message": {"role": role, "content": content, "timestamp": 1760000000000, **extra},
    }


def image_b64(size: int) -> str:
    """Canonical base64 of `size` decoded bytes."""
    return base64.b64encode(bytes(i % 251 for i in range(size))).decode()


def strings(v: Any) -> list[str]:
    """Every string value below `v`."""
    if isinstance(v, str):
        return [v]
    if isinstance(v, dict):
        v = list(v.values())
    return [s for x in v for s in strings(x)] if isinstance(v, list) else []


@pytest.fixture
def blobs() -> MemoryBlobStore:
    return MemoryBlobStore()


# -- constants and js_len -------------------------------------------------------------------


def test_constants() -> None:
    assert MAX_PERSIST_CHARS == 500_000
    assert BLOB_EXTERNALIZE_THRESHOLD == 1024
    assert TRUNCATION_NOTICE == "\n\n[Session persistence truncated large content]"
    assert len(TRUNCATION_NOTICE) == 47 and KEEP == 499_953


@pytest.mark.parametrize(
    ("s", "n"),
    [("", 0), ("abc", 3), ("é€", 2), (EMOJI, 2), ("a" + EMOJI + "b", 4), (HIGH, 1), ("\x00", 1)],
)
def test_js_len(s: str, n: int) -> None:
    assert js_len(s) == n


# -- truncation -----------------------------------------------------------------------------


def test_exactly_the_limit_is_kept(blobs: MemoryBlobStore) -> None:
    entry = msg_entry([{"type": "text", "text": "a" * MAX_PERSIST_CHARS}])
    assert prepare_for_persist(entry, blobs) is entry


def test_one_over_the_limit_is_cut(blobs: MemoryBlobStore) -> None:
    entry = msg_entry([{"type": "text", "text": "a" * (MAX_PERSIST_CHARS + 1)}])
    out = prepare_for_persist(entry, blobs)
    text = out["message"]["content"][0]["text"]
    assert text == "a" * KEEP + TRUNCATION_NOTICE
    assert len(text) == MAX_PERSIST_CHARS


def test_limit_counts_utf16_units() -> None:
    # 250000 emoji are 500000 units (kept); one more is over the limit although
    # the string has only 250001 code points.
    assert truncate_for_persist(EMOJI * 250_000) == EMOJI * 250_000
    cut = truncate_for_persist(EMOJI * 250_001)
    assert cut.endswith(TRUNCATION_NOTICE)
    # 499953 units: 249976 whole pairs, then the high half of the next one is dropped.
    assert cut == EMOJI * 249_976 + TRUNCATION_NOTICE


def test_astral_char_straddling_the_cut_is_dropped() -> None:
    s = "a" * (KEEP - 1) + EMOJI + "b" * 100  # the pair occupies units KEEP-1 and KEEP
    assert truncate_for_persist(s) == "a" * (KEEP - 1) + TRUNCATION_NOTICE


def test_astral_char_just_before_the_cut_is_kept() -> None:
    s = "a" * (KEEP - 2) + EMOJI + "b" * 100
    out = truncate_for_persist(s)
    assert out == "a" * (KEEP - 2) + EMOJI + TRUNCATION_NOTICE
    assert js_len(out) == MAX_PERSIST_CHARS


def test_lone_high_surrogate_at_the_cut_is_dropped() -> None:
    s = "é" * (KEEP - 1) + HIGH + "é" * 100
    assert truncate_for_persist(s) == "é" * (KEEP - 1) + TRUNCATION_NOTICE


def test_bmp_text_is_cut_by_code_points() -> None:
    assert truncate_for_persist("é" * 600_000) == "é" * KEEP + TRUNCATION_NOTICE


@settings(max_examples=examples(60), deadline=None)
@given(
    filler=st.integers(min_value=KEEP - 30, max_value=MAX_PERSIST_CHARS + 30),
    head=st.text(st.characters(exclude_categories=()), max_size=40),
    tail=st.text(st.characters(exclude_categories=()), max_size=40),
)
def test_truncation_property(filler: int, head: str, tail: str) -> None:
    s = head + "x" * filler + tail
    out = truncate_for_persist(s)
    assert js_len(out) <= MAX_PERSIST_CHARS
    if js_len(s) <= MAX_PERSIST_CHARS:
        assert out is s
        return
    assert out.endswith(TRUNCATION_NOTICE)
    kept = out[: -len(TRUNCATION_NOTICE)]
    assert s.startswith(kept)
    units = kept.encode("utf-16-le", "surrogatepass")
    assert not 0xD8 <= units[-1] <= 0xDB  # never ends with a (lone) high surrogate
    assert len(units) // 2 in (KEEP, KEEP - 1)


def test_any_key_any_depth_is_truncated(blobs: MemoryBlobStore) -> None:
    big = "z" * (MAX_PERSIST_CHARS + 10)
    entry = {
        "type": "custom",
        "customType": "x",
        "data": {"deep": [{"k": [big]}], "small": "s"},
        "id": "i",
        "parentId": None,
        "timestamp": "t",
    }
    out = prepare_for_persist(entry, blobs)
    assert out["data"]["deep"][0]["k"][0] == "z" * KEEP + TRUNCATION_NOTICE
    assert list(out) == list(entry)


@pytest.mark.parametrize(
    "block",
    [
        {"type": "thinking", "thinking": "BIG", "thinkingSignature": "sig"},
        {"type": "text", "text": "BIG", "textSignature": "sig"},
        {"type": "toolCall", "id": "c", "name": "n", "arguments": "BIG", "thoughtSignature": "s"},
        {"type": "redactedThinking", "data": "BIG"},
        {"type": "reasoning", "summary": "BIG", "encrypted_content": "enc"},
        {"type": "anthropicCompaction", "content": "BIG"},
        {
            "type": "anthropicServerTool",
            "block": {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": "BIG"},
        },
        {
            "type": "anthropicServerTool",
            "block": {"type": "web_search_tool_result", "tool_use_id": "s1", "content": "BIG"},
        },
    ],
)
def test_signed_and_provider_blocks_are_verbatim(
    blobs: MemoryBlobStore, block: dict[str, Any]
) -> None:
    big = "q" * (MAX_PERSIST_CHARS + 5)
    block = copy.deepcopy(block)
    for key, value in list(block.items()):
        if value == "BIG":
            block[key] = big
    for inner in [block.get("block")]:
        if isinstance(inner, dict):
            for key in ("input", "content"):
                if inner.get(key) == "BIG":
                    inner[key] = big
    entry = msg_entry([block])
    assert prepare_for_persist(entry, blobs) is entry


@pytest.mark.parametrize(
    "block",
    [
        {"type": "thinking", "thinking": "BIG", "thinkingSignature": ""},
        {"type": "thinking", "thinking": "BIG"},
        {"type": "text", "text": "BIG"},
        {"type": "toolCall", "id": "c", "name": "n", "arguments": {"code": "BIG"}},
        {
            "type": "anthropicServerTool",
            "block": {"type": "server_tool_use", "id": "s1", "name": "bash", "input": "BIG"},
        },
    ],
)
def test_unsigned_blocks_are_truncated(blobs: MemoryBlobStore, block: dict[str, Any]) -> None:
    big = "q" * (MAX_PERSIST_CHARS + 5)

    def fill(v: Any) -> Any:
        if v == "BIG":
            return big
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        return v

    entry = msg_entry([fill(block)])
    out = prepare_for_persist(entry, blobs)
    assert out is not entry
    assert any(x.endswith(TRUNCATION_NOTICE) for x in strings(out["message"]["content"][0]))


def test_signature_keys_are_never_truncated(blobs: MemoryBlobStore) -> None:
    # omp 18.2.3 keeps an oversized signature on an unknown carrier verbatim.
    sig = "s" * (MAX_PERSIST_CHARS + 1)
    entry = msg_entry(
        [
            {
                "type": "custom",
                "thinkingSignature": sig,
                "thoughtSignature": sig,
                "textSignature": sig,
            }
        ]
    )
    assert prepare_for_persist(entry, blobs) is entry


def test_line_count_recomputed_after_truncation(blobs: MemoryBlobStore) -> None:
    content = "line\n" * 200_000  # 1,000,000 chars
    details = {"path": "/x", "content": content, "lineCount": 200_001, "more": 1}
    entry = msg_entry([{"type": "text", "text": "ok"}], role="toolResult", details=details)
    out = prepare_for_persist(entry, blobs)
    new = out["message"]["details"]
    assert new["content"].endswith(TRUNCATION_NOTICE)
    assert new["lineCount"] == len(new["content"].split("\n"))
    assert list(new) == ["path", "content", "lineCount", "more"]
    assert details["lineCount"] == 200_001


def test_line_count_untouched_when_nothing_changed(blobs: MemoryBlobStore) -> None:
    entry = msg_entry([], details={"content": "a\nb", "lineCount": 99})
    assert prepare_for_persist(entry, blobs) is entry


def test_line_count_recomputed_when_object_changed_otherwise(blobs: MemoryBlobStore) -> None:
    # omp recomputes whenever the object changed, not only when `content` was cut.
    entry = msg_entry([], details={"content": "a\nb", "lineCount": 99, "jsonlEvents": []})
    out = prepare_for_persist(entry, blobs)
    assert out["message"]["details"] == {"content": "a\nb", "lineCount": 2}


def test_transient_keys_dropped_at_any_depth(blobs: MemoryBlobStore) -> None:
    entry = msg_entry(
        [
            {"type": "toolCall", "id": "c", "partialJson": '{"a":', "name": "n", "arguments": {}},
            {"type": "text", "text": "t", "nested": [{"jsonlEvents": [1, 2], "keep": True}]},
        ],
        jsonlEvents=["e"],
    )
    before = copy.deepcopy(entry)
    out = prepare_for_persist(entry, blobs)
    assert entry == before
    assert out["message"]["content"][0] == {
        "type": "toolCall",
        "id": "c",
        "name": "n",
        "arguments": {},
    }
    assert out["message"]["content"][1]["nested"] == [{"keep": True}]
    assert "jsonlEvents" not in out["message"]
    assert list(out["message"]) == ["role", "content", "timestamp"]


# -- blob externalization ------------------------------------------------------------------------


@pytest.mark.parametrize(("length", "externalized"), [(1020, False), (1024, True), (1028, True)])
def test_image_threshold(blobs: MemoryBlobStore, length: int, externalized: bool) -> None:
    data = image_b64(length * 3 // 4)
    assert len(data) == length
    entry = msg_entry([{"type": "image", "data": data, "mimeType": "image/png"}], role="user")
    out = prepare_for_persist(entry, blobs)
    if not externalized:
        assert out is entry
        return
    block = out["message"]["content"][0]
    digest = hashlib.sha256(base64.b64decode(data)).hexdigest()
    assert block == {"type": "image", "data": f"blob:sha256:{digest}", "mimeType": "image/png"}
    assert blobs.get(digest) == base64.b64decode(data)
    assert entry["message"]["content"][0]["data"] == data  # the original is untouched


def test_threshold_is_in_utf16_units(blobs: MemoryBlobStore) -> None:
    data = EMOJI * 512  # 512 code points, 1024 units
    entry = msg_entry([{"type": "image", "data": data}])
    out = prepare_for_persist(entry, blobs)
    assert out["message"]["content"][0]["data"].startswith("blob:sha256:")


def test_existing_ref_is_kept(blobs: MemoryBlobStore) -> None:
    entry = msg_entry([{"type": "image", "data": "blob:sha256:" + "0" * 2000}])
    assert prepare_for_persist(entry, blobs) is entry
    assert len(blobs) == 0


def test_image_shape_under_other_keys_stays_inline(blobs: MemoryBlobStore) -> None:
    entry = msg_entry([], attachments=[{"type": "image", "data": image_b64(3000)}])
    assert prepare_for_persist(entry, blobs) is entry


def test_images_and_frames_positions(blobs: MemoryBlobStore) -> None:
    data = image_b64(3000)
    entry = {
        "type": "compaction",
        "images": [{"data": data, "mimeType": "image/jpeg"}, {"data": data, "mimeType": "text/x"}],
        "preserveData": {"snapcompact": {"frames": [{"data": data, "mimeType": "image/png"}]}},
    }
    out = prepare_for_persist(entry, blobs)
    assert out["images"][0]["data"].startswith("blob:sha256:")
    assert out["images"][1]["data"] == data  # not an image payload
    assert out["preserveData"]["snapcompact"]["frames"][0]["data"].startswith("blob:sha256:")
    assert len(blobs) == 1  # one distinct image


def test_images_inside_custom_entries_and_nested_content(blobs: MemoryBlobStore) -> None:
    data = image_b64(3000)
    custom = {
        "type": "custom",
        "customType": "x",
        "data": {"content": [{"type": "image", "data": data}]},
    }
    custom_message: dict[str, Any] = {
        "type": "custom_message",
        "customType": "x",
        "content": [{"type": "text", "text": "t"}, {"type": "image", "data": data}],
        "display": True,
    }
    tool_result = msg_entry(
        [{"type": "text", "text": "t"}],
        role="toolResult",
        details={"result": {"content": [{"type": "image", "data": data}]}},
    )
    assert prepare_for_persist(custom, blobs)["data"]["content"][0]["data"].startswith("blob:")
    out = prepare_for_persist(custom_message, blobs)
    assert out["content"][1]["data"].startswith("blob:")
    assert out["content"][0] is custom_message["content"][0]  # unchanged subtrees are shared
    got = prepare_for_persist(tool_result, blobs)["message"]["details"]["result"]["content"][0]
    assert got["data"].startswith("blob:")


def test_image_url_and_generation_results(blobs: MemoryBlobStore) -> None:
    url = "data:image/png;base64,iVBORw0KGgo="
    png = image_b64(3000)
    entry = msg_entry(
        [{"type": "text", "text": "t"}],
        providerPayload={
            "items": [
                {"type": "input_image", "image_url": url},
                {"type": "image_generation_call", "result": png, "status": "completed"},
            ]
        },
    )
    out = prepare_for_persist(entry, blobs)
    items = out["message"]["providerPayload"]["items"]
    url_hash = hashlib.sha256(url.encode()).hexdigest()
    assert items[0]["image_url"] == f"blob:sha256:{url_hash}"
    assert items[1]["result"].startswith("blob:sha256:")
    back = resolve_blob_refs(out, blobs)
    assert back["message"]["providerPayload"]["items"][0]["image_url"] == url
    assert back["message"]["providerPayload"]["items"][1]["result"] == png
    assert back == entry


def test_lenient_base64_like_node() -> None:
    # Expected bytes recorded from Bun 1.4.5 and Node's Buffer.from(s, "base64").
    cases = {
        "QUJD": "414243",
        "QUJDRA==": "41424344",
        "QUJDRA": "41424344",
        "QUJ\nDRA==": "41424344",
        "QU JD\r\nRA==": "41424344",
        "QU@JDRA": "41424344",
        "QUJD=RUZH": "414243",
        "QUJDR": "414243",
        "-_-_": "fbffbf",
        "+/+/": "fbffbf",
        "QUJDRA=": "41424344",
        "QQ=QQ": "41",
        "Q": "",
        "QUJDRA==QUJD": "41424344",
        "QUJDRA===": "41424344",
        "éQUJD": "414243",
        "QUJéDRA": "41424344",
    }
    for text, hexed in cases.items():
        assert b64decode_lenient(text).hex() == hexed, text


def test_non_canonical_base64_comes_back_canonical(blobs: MemoryBlobStore) -> None:
    raw = bytes(range(256)) * 8
    wrapped = base64.encodebytes(raw).decode()  # MIME style, newline every 76 chars
    entry = msg_entry([{"type": "image", "data": wrapped, "mimeType": "image/png"}], role="user")
    stored = prepare_for_persist(entry, blobs)
    loaded = resolve_blob_refs(stored, blobs)
    assert loaded["message"]["content"][0]["data"] == base64.b64encode(raw).decode()


# -- identity, copying and speed-relevant behaviour -------------------------------------------


def test_unchanged_entry_is_returned_as_is(blobs: MemoryBlobStore) -> None:
    entry = msg_entry(
        [
            {"type": "thinking", "thinking": "hm", "thinkingSignature": "sig"},
            {"type": "text", "text": "hello é 😀"},
            {"type": "image", "data": image_b64(100), "mimeType": "image/png"},
            {"type": "toolCall", "id": "c", "name": "n", "arguments": {"a": [1, 2.5, None, True]}},
        ],
        usage={"input": 1, "cost": {"total": 0.1}},
    )
    before = copy.deepcopy(entry)
    assert prepare_for_persist(entry, blobs) is entry
    assert entry == before


def test_original_is_not_mutated_and_siblings_shared(blobs: MemoryBlobStore) -> None:
    big = "b" * (MAX_PERSIST_CHARS + 1)
    entry = msg_entry(
        [{"type": "text", "text": big}, {"type": "image", "data": image_b64(3000)}],
        usage={"input": 1},
    )
    before = copy.deepcopy(entry)
    out = prepare_for_persist(entry, blobs)
    assert entry == before
    assert out["message"]["usage"] is entry["message"]["usage"]
    assert out["message"] is not entry["message"]
    assert out["message"]["content"] is not entry["message"]["content"]


def test_openai_responses_duplicate_signature_dropped(blobs: MemoryBlobStore) -> None:
    item = {"type": "reasoning", "id": "rs_1", "encrypted_content": "ENC", "summary": []}
    entry = msg_entry(
        [
            {
                "type": "thinking",
                "thinking": "t",
                "thinkingSignature": '{"type":"reasoning","id":"rs_1","encrypted_content":"ENC"}',
            },
            {
                "type": "thinking",
                "thinking": "u",
                "thinkingSignature": '{"type":"reasoning","encrypted_content":"OTHER"}',
            },
            {"type": "text", "text": "x"},
        ],
        providerPayload={"type": "openaiResponsesHistory", "items": [item]},
    )
    out = prepare_for_persist(entry, blobs)
    content = out["message"]["content"]
    assert content[0] == {"type": "thinking", "thinking": "t"}
    assert "thinkingSignature" in content[1]
    assert "thinkingSignature" in entry["message"]["content"][0]


# -- load side ---------------------------------------------------------------------------------


def test_resolve_round_trip(tmp_path: Path) -> None:
    store = BlobStore(str(tmp_path / "blobs"))
    data = image_b64(5000)
    entry = msg_entry(
        [
            {"type": "text", "text": "see"},
            {"type": "image", "data": data, "mimeType": "image/webp"},
        ],
        role="user",
    )
    stored = prepare_for_persist(entry, store)
    ref = stored["message"]["content"][1]["data"]
    assert ref.startswith("blob:sha256:")
    assert Path(store.dir, ref.removeprefix("blob:sha256:") + ".webp").exists()
    loaded = resolve_blob_refs(copy.deepcopy(stored), store)
    assert loaded == entry
    assert stored["message"]["content"][1]["data"] == ref  # resolve copies, too


def test_resolve_without_refs_is_identity(blobs: MemoryBlobStore) -> None:
    entry = msg_entry([{"type": "image", "data": image_b64(10)}])
    assert resolve_blob_refs(entry, blobs) is entry
    header = {"type": "session", "id": "x", "note": "blob:sha256:" + "a" * 64}
    assert resolve_blob_refs(header, blobs) is header


def test_missing_blob_keeps_ref_and_warns(
    blobs: MemoryBlobStore, caplog: pytest.LogCaptureFixture
) -> None:
    ref = "blob:sha256:" + "e" * 64
    entry = {
        "type": "custom_message",
        "customType": "x",
        "content": [{"type": "image", "data": ref}],
    }
    with caplog.at_level(logging.WARNING, logger="sessiontree"):
        out = resolve_blob_refs(entry, blobs)
    assert out["content"][0]["data"] == ref
    assert any("e" * 64 in r.getMessage() for r in caplog.records)


def test_malformed_ref_is_never_a_path(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = BlobStore(str(tmp_path / "blobs"))
    secret = tmp_path / "secret"
    secret.write_text("top secret")
    refs = ["blob:sha256:../secret", "blob:sha256:" + "A" * 64, "blob:sha256:" + "a" * 63]
    entry = msg_entry([{"type": "image", "data": r} for r in refs], role="user")
    with caplog.at_level(logging.WARNING, logger="sessiontree"):
        out = resolve_blob_refs(entry, store)
    assert [b["data"] for b in out["message"]["content"]] == refs
    assert len(caplog.records) == 3


def test_frames_stay_refs_on_load(blobs: MemoryBlobStore) -> None:
    data = image_b64(3000)
    entry = {"type": "compaction", "preserveData": {"frames": [{"type": "image", "data": data}]}}
    stored = prepare_for_persist(entry, blobs)
    loaded = resolve_blob_refs(stored, blobs)
    assert loaded["preserveData"]["frames"][0]["data"].startswith("blob:sha256:")


def test_dict_subclasses_and_tuples_are_walked(blobs: MemoryBlobStore) -> None:
    big = "b" * (MAX_PERSIST_CHARS + 1)
    entry = msg_entry([OrderedDict(type="text", text=big)], extra=("x", {"jsonlEvents": 1}))
    out = prepare_for_persist(entry, blobs)
    assert out["message"]["content"][0]["text"].endswith(TRUNCATION_NOTICE)
    assert out["message"]["extra"] == ["x", {}]


class _UncheckedBlobs:
    """A third-party store that hands out whatever bytes it holds, never checking them."""

    def __init__(self) -> None:
        self.held: dict[str, bytes] = {}

    def put(self, data: bytes, mime_type: str | None = None) -> BlobPutResult:
        digest = hashlib.sha256(data).hexdigest()
        self.held.setdefault(digest, data)
        return BlobPutResult(digest, f"/unchecked/{digest}", "blob:sha256:" + digest)

    def get(self, hash: str) -> bytes | None:
        return self.held.get(hash)

    def has(self, hash: str) -> bool:
        return hash in self.held

    def sync(self) -> None:
        pass


def test_damaged_bytes_from_an_unchecking_store_keep_the_ref(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = _UncheckedBlobs()
    data = image_b64(3000)
    stored = prepare_for_persist(msg_entry([{"type": "image", "data": data}], role="user"), store)
    ref = stored["message"]["content"][0]["data"]
    digest = ref.removeprefix("blob:sha256:")
    store.held[digest] = store.held[digest][:100]  # truncated behind the store's back
    with caplog.at_level(logging.WARNING, logger="sessiontree"):
        loaded = resolve_blob_refs(stored, store)
    assert loaded["message"]["content"][0]["data"] == ref
    assert any(digest in r.getMessage() and "damaged" in r.getMessage() for r in caplog.records)
    assert prepare_for_persist(loaded, store) is loaded  # written back as the same ref
    assert list(store.held) == [digest]


def _image_session(data: bytes) -> str:
    sm = SessionManager.create("/proj")
    image = {"type": "image", "data": base64.b64encode(data).decode(), "mimeType": "image/png"}
    sm.append_message({"role": "user", "content": [image], "timestamp": 1})
    sm.append_message(
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "ok"}],
            "timestamp": 2,
            "api": "x",
            "provider": "x",
            "model": "x",
            "usage": {},
            "stopReason": "stop",
        }
    )
    sm.close()
    path = sm.get_session_file()
    assert path is not None
    return path


def _image_data(sm: SessionManager) -> str:
    [entry] = [
        e for e in sm.get_entries() if e["type"] == "message" and e["message"]["role"] == "user"
    ]
    data: str = entry["message"]["content"][0]["data"]
    return data


@pytest.mark.parametrize("how", ["same-size", "truncated"])
def test_a_session_with_a_damaged_blob_keeps_its_ref_through_load_and_rewrite(
    agent_dir: Path, how: str
) -> None:
    good = os.urandom(4000)
    path = _image_session(good)
    digest = hashlib.sha256(good).hexdigest()
    blob = agent_dir / "blobs" / digest
    with open(blob, "r+b") as f:  # damaged in place: the sidecar (a hard link) too
        if how == "same-size":
            f.write(b"\0" * 16)
        else:
            f.truncate(1000)
    with SessionManager.open(path) as sm:
        assert _image_data(sm) == "blob:sha256:" + digest
        sm.rewrite_entries()
    assert f"blob:sha256:{digest}" in Path(path).read_text()
    blobs = (agent_dir / "blobs").iterdir()  # and `.live`, where a writer pinned the ref
    assert {p.name.split(".")[0] for p in blobs if p.is_file()} == {digest}
    BlobStore(str(agent_dir / "blobs")).put(good)  # whoever holds the image repairs it
    with SessionManager.open(path, read_only=True) as sm:
        assert _image_data(sm) == base64.b64encode(good).decode()
    assert (agent_dir / "blobs" / f"{digest}.png").read_bytes() == good
