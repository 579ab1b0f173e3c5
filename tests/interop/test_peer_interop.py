"""Read direction: sessiontree reads session files that the TypeScript peers wrote.

The files, and what the peers themselves report about them, are committed under
`tests/data/peers/` (made by `scripts/gen_peer_data.py`; `manifest.json` lists every
case, which peer wrote each file, the op script and the exact commands). Nothing here
needs node or bun.

For every committed session file:

(a) `load_entries_from_file` + `serialize_entry` reproduce the file line for line
    (after omp's 256-byte title slot, which is not an entry). The header may also come
    back with the slot's title folded in, as omp's own loader does;
(b) `SessionManager.open(read_only=True)` gives the same tree as the writing peer's
    `tree --flat`: entries (id, parentId, type), root ids, children order, labels, leaf;
(c) files pi 0.73.1 or pi 1.6.0 wrote, against both releases (`peers.PI_VERSIONS`: each
    reads the files the other wrote): for every leaf in the reader's `contexts` (its
    `context --all-leaves`, compacted), `build_session_context()` after `branch(leaf)`
    has the same messages (sha256 of the exact JSON.stringify bytes), thinking level and
    default model; the default leaf's full context is compared message by message
    (unless it was stored as `messagesOmitted: {count, sha256}` because of its size).
    Where a release and sessiontree disagree today, the case is an expected failure
    (strict: it must flip when the fix lands) naming the rule it waits for;
(d) omp-written files: the default leaf's thinking level, TTSR rules and mode agree with
    omp's `context` (its messages differ by design: omp drops aborted/error turns and
    dangling tool calls, which the spec does not);
(e) appending to a copy keeps every byte already in the file (title slot included).

Every test runs twice: with the files loaded whole, and loaded index first (as
sessions of 8 MiB and more are), where entries are read only when asked for.

Messages are stringified with `sessiontree.format._jsonl.serialize_value` when it exists, else as
`"[" + ",".join(serialize_entry(m) for m in messages) + "]"`, which is what
`JSON.stringify` writes for an array of objects.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import sessiontree
import sessiontree.format._jsonl
from sessiontree import BlobStore, SessionManager, load_entries_from_file, serialize_entry
from tests import peers
from tests.conftest import FIXTURES

DATA = FIXTURES / "peers"
MANIFEST = json.loads((DATA / "manifest.json").read_text(encoding="utf-8"))


@pytest.fixture(params=["whole", "index-first"], autouse=True)
def load_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a session is loaded (see the module doc)."""
    if request.param == "index-first":
        monkeypatch.setattr("sessiontree.session._loader.LAZY_LOAD_BYTES", 0)
    return str(request.param)


def _files(pred: Any = None) -> list[Any]:
    out = []
    for case in MANIFEST["cases"]:
        for rec in case["files"]:
            if rec["exists"] and (pred is None or pred(case, rec)):
                out.append(pytest.param(case, rec, id=f"{case['name']}/{rec['index']}"))
    return out


ALL_FILES = _files()
OMP_FILES = _files(lambda case, rec: case["writer"] == "omp")

# Where the two pi releases read one file differently, sessiontree reads it as pi 1.6.0
# (the release users run, and the only one that knows the new entries): on the pi16-flavour
# files (null content, role "system" messages, compactions with a systemMessage) pi 0.73.1
# keeps `content: null`, keeps system messages in a compaction's kept range and emits no
# systemMessage. Strict: if the releases ever agree, the mark must go.
FOLLOWS_PI16 = (
    "decided: pi 0.73.1 reads pi 1.6's entries (null content, system messages, a "
    "compaction's systemMessage) differently from pi 1.6.0; sessiontree follows 1.6.0"
)
KNOWN_DIFFERENCES: dict[tuple[str, int, str, str], str] = {
    (case, 0, "pi", test): FOLLOWS_PI16
    for case in ("s21-pi16-by-pi", "s21-pi16-by-pi16")
    for test in ("messages", "default")
}


def _pi_files(test: str) -> list[Any]:
    """Every pi-format file (written by either pi release) with each pi release as reader."""
    out = []
    for case in MANIFEST["cases"]:
        if case["writer"] not in peers.PI_VERSIONS:
            continue
        for rec in case["files"]:
            if not rec["exists"]:
                continue
            for reader in peers.PI_VERSIONS:
                reason = KNOWN_DIFFERENCES.get((case["name"], rec["index"], reader, test))
                marks = (
                    [pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)]
                    if reason
                    else []
                )
                out.append(
                    pytest.param(
                        case,
                        rec,
                        reader,
                        id=f"{case['name']}/{rec['index']}/read-by-{reader}",
                        marks=marks,
                    )
                )
    return out


def stringify(value: list[Any]) -> str:
    ser = getattr(sessiontree.format._jsonl, "serialize_value", None)
    if ser is not None:
        return str(ser(value))
    return "[" + ",".join(serialize_entry(m) for m in value) + "]"


def first_diff(got: str, want: str, context: int = 80) -> str:
    i = next((k for k, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
    if i is None:
        i = min(len(got), len(want))
    lo = max(0, i - context)
    return (
        f"first difference at char {i} (lengths {len(got)} vs {len(want)}):\n"
        f"  got:  ...{got[lo : i + context]!r}\n  want: ...{want[lo : i + context]!r}"
    )


def session_path(case: dict[str, Any], rec: dict[str, Any]) -> Path:
    return DATA / case["name"] / rec["file"]


def blob_store(case: dict[str, Any], tmp_path: Path) -> BlobStore:
    if case.get("blobs"):
        return BlobStore(str(DATA / case["name"] / case["blobs"]))
    return BlobStore(str(tmp_path / "no-blobs"))


def open_ro(case: dict[str, Any], rec: dict[str, Any], tmp_path: Path) -> SessionManager:
    return SessionManager.open(
        str(session_path(case, rec)), read_only=True, blob_store=blob_store(case, tmp_path)
    )


def side(case: dict[str, Any], rec: dict[str, Any], key: str) -> Path:
    return DATA / case["name"] / rec[key]


def split_lines(data: bytes) -> tuple[bytes | None, list[bytes]]:
    """(title slot line or None, remaining lines) of a file that ends with a newline."""
    assert data.endswith(b"\n")
    lines = data[:-1].split(b"\n")
    first = json.loads(lines[0])
    if first.get("type") == "title":
        return lines[0], lines[1:]
    return None, lines


def test_manifest_covers_every_writer_and_both_pi_releases() -> None:
    writers = {case["writer"] for case in MANIFEST["cases"]}
    assert writers == set(peers.PEERS)
    assert MANIFEST["peers"]["pi"].startswith("@mariozechner/pi-coding-agent@0.73.1 ")
    assert MANIFEST["peers"]["pi16"].startswith("@earendil-works/pi-coding-agent@1.6.0 ")
    assert len(ALL_FILES) >= 14
    for case in MANIFEST["cases"]:
        for rec in case["files"]:
            if rec["exists"]:
                digest = hashlib.sha256(session_path(case, rec).read_bytes()).hexdigest()
                assert digest == rec["sha256"], f"{case['name']}/{rec['file']} changed"
                if case["writer"] in peers.PI_VERSIONS:  # read back by both releases
                    assert set(rec["readers"]) == set(peers.PI_VERSIONS)
    # Every pi-flavour script was written by both releases.
    for flavour in ("pi", "pi16"):
        scripts = {n for n, s in MANIFEST["scripts"].items() if s["flavour"] == flavour}
        assert scripts
        for writer in peers.PI_VERSIONS:
            assert scripts <= {c["script"] for c in MANIFEST["cases"] if c["writer"] == writer}


# ----------------------------------------------------------------------------- (a)
@pytest.mark.parametrize(("case", "rec"), ALL_FILES)
def test_raw_entries_serialize_back_to_the_same_lines(
    case: dict[str, Any], rec: dict[str, Any]
) -> None:
    path = session_path(case, rec)
    slot, lines = split_lines(path.read_bytes())
    if case["writer"] == "omp":
        assert slot is not None and len(slot) + 1 == 256
    entries = load_entries_from_file(str(path))
    assert len(entries) == len(lines)

    header_line = lines[0].decode("utf-8")
    got_header = serialize_entry(entries[0])
    accepted = {header_line}
    if slot is not None:  # omp's loader folds the slot's title into the header
        folded = json.loads(header_line)
        slot_obj = json.loads(slot)
        if slot_obj.get("title"):
            folded["title"] = slot_obj["title"]
        else:
            folded.pop("title", None)
        if slot_obj.get("source"):
            folded["titleSource"] = slot_obj["source"]
        else:
            folded.pop("titleSource", None)
        accepted.add(serialize_entry(folded))
    assert got_header in accepted, first_diff(got_header, header_line)

    bad = []
    for n, (entry, line) in enumerate(zip(entries[1:], lines[1:], strict=True), start=2):
        want = line.decode("utf-8")
        got = serialize_entry(entry)
        if got != want:
            bad.append(f"line {n} ({entry.get('type')} {entry.get('id')}): {first_diff(got, want)}")
    assert not bad, f"{len(bad)} lines differ; first: {bad[0]}"


# ----------------------------------------------------------------------------- (b)
@pytest.mark.parametrize(("case", "rec"), ALL_FILES)
def test_tree_matches_the_writing_peer(
    case: dict[str, Any], rec: dict[str, Any], tmp_path: Path
) -> None:
    want = json.loads(side(case, rec, "tree").read_text(encoding="utf-8"))
    sm = open_ro(case, rec, tmp_path)
    try:
        rows = [
            {"id": e["id"], "parentId": e.get("parentId"), "type": e["type"]}
            for e in sm.get_entries()
        ]
        assert rows == want["entries"]
        assert sm.get_leaf_id() == want["leafId"]
        labels = {e["id"]: sm.get_label(e["id"]) for e in sm.get_entries()}
        assert {k: v for k, v in labels.items() if v is not None} == want["labels"]

        roots = sm.get_tree()
        assert [r.entry["id"] for r in roots] == want["rootIds"]
        children: dict[str, list[str]] = {}
        node_labels: dict[str, str | None] = {}
        stack = list(roots)
        while stack:
            node = stack.pop()
            node_labels[node.entry["id"]] = node.label
            if node.children:
                children[node.entry["id"]] = [c.entry["id"] for c in node.children]
            stack.extend(node.children)
        assert children == want["children"]
        assert node_labels == {n: want["labels"].get(n) for n in node_labels}
    finally:
        sm.close()


# ----------------------------------------------------------------------------- (c)
def readout(case: dict[str, Any], rec: dict[str, Any], reader: str, key: str) -> Path:
    """A pi release's record (`contexts` or `contextDefault`) of a pi-format file."""
    return DATA / case["name"] / rec["readers"][reader][key]


def _leaves(case: dict[str, Any], rec: dict[str, Any], reader: str) -> list[dict[str, Any]]:
    text = readout(case, rec, reader, "contexts").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line]


@pytest.mark.parametrize(("case", "rec", "reader"), _pi_files("messages"))
def test_pi_context_messages_on_every_leaf(
    case: dict[str, Any], rec: dict[str, Any], reader: str, tmp_path: Path
) -> None:
    sm = open_ro(case, rec, tmp_path)
    try:
        leaves = _leaves(case, rec, reader)
        assert [w["leafId"] for w in leaves] == [e["id"] for e in sm.get_entries()]
        bad = []
        for want in leaves:
            sm.branch(want["leafId"])
            messages = sm.build_session_context().messages
            digest = hashlib.sha256(stringify(messages).encode("utf-8")).hexdigest()
            if digest != want["messagesSha256"]:
                bad.append(
                    f"leaf {want['leafId']}: {len(messages)} messages "
                    f"({reader}: {want['messageCount']}), sha256 differs"
                )
        assert not bad, f"{len(bad)}/{len(leaves)} leaves differ, e.g. {bad[:3]}"
    finally:
        sm.close()


@pytest.mark.parametrize(("case", "rec", "reader"), _pi_files("settings"))
def test_pi_thinking_level_and_model_on_every_leaf(
    case: dict[str, Any], rec: dict[str, Any], reader: str, tmp_path: Path
) -> None:
    sm = open_ro(case, rec, tmp_path)
    try:
        bad = []
        for want in _leaves(case, rec, reader):
            sm.branch(want["leafId"])
            ctx = sm.build_session_context()
            if ctx.thinking_level != want["thinkingLevel"]:
                bad.append(f"leaf {want['leafId']}: thinking {ctx.thinking_level!r}")
            model = want["model"]
            expected = None if model is None else f"{model['provider']}/{model['modelId']}"
            if ctx.models.get("default") != expected:
                bad.append(
                    f"leaf {want['leafId']}: models {ctx.models!r}, {reader} model {expected!r}"
                )
        assert not bad, f"{len(bad)} mismatches, e.g. {bad[:3]}"
    finally:
        sm.close()


@pytest.mark.parametrize(("case", "rec", "reader"), _pi_files("default"))
def test_pi_default_leaf_full_context(
    case: dict[str, Any], rec: dict[str, Any], reader: str, tmp_path: Path
) -> None:
    want = json.loads(readout(case, rec, reader, "contextDefault").read_text(encoding="utf-8"))
    sm = open_ro(case, rec, tmp_path)
    try:
        ctx = sm.build_session_context()
    finally:
        sm.close()
    assert ctx.thinking_level == want["thinkingLevel"]
    if "messagesOmitted" in want:  # stored without messages to save space (huge strings)
        digest = hashlib.sha256(stringify(ctx.messages).encode("utf-8")).hexdigest()
        assert (len(ctx.messages), digest) == (
            want["messagesOmitted"]["count"],
            want["messagesOmitted"]["sha256"],
        )
        return
    got_msgs = [serialize_entry(m) for m in ctx.messages]
    want_msgs = [serialize_entry(m) for m in want["messages"]]
    for n, (got, exp) in enumerate(zip(got_msgs, want_msgs, strict=False)):
        assert got == exp, f"message {n}: {first_diff(got, exp)}"
    assert len(got_msgs) == len(want_msgs)
    assert ctx.messages == want["messages"]


# ----------------------------------------------------------------------------- (d)
@pytest.mark.parametrize(("case", "rec"), OMP_FILES)
def test_omp_default_leaf_state(case: dict[str, Any], rec: dict[str, Any], tmp_path: Path) -> None:
    want = json.loads(side(case, rec, "ompContextDefault").read_text(encoding="utf-8"))
    sm = open_ro(case, rec, tmp_path)
    try:
        ctx = sm.build_session_context()
    finally:
        sm.close()
    assert ctx.thinking_level == want["thinkingLevel"]
    assert ctx.injected_ttsr_rules == want["injectedTtsrRules"]
    assert ctx.mode == want["mode"]
    assert ctx.mode_data == want.get("modeData")


# ----------------------------------------------------------------------------- (e)
@pytest.mark.parametrize(("case", "rec"), ALL_FILES)
def test_append_keeps_existing_bytes(
    case: dict[str, Any], rec: dict[str, Any], tmp_path: Path
) -> None:
    src = session_path(case, rec)
    work = tmp_path / "sessions"
    work.mkdir()
    path = work / src.name
    shutil.copyfile(src, path)
    blobs = tmp_path / "blobs"
    if case.get("blobs"):
        shutil.copytree(DATA / case["name"] / case["blobs"], blobs)
    before = path.read_bytes()
    sm = SessionManager.open(str(path), session_dir=str(work), blob_store=BlobStore(str(blobs)))
    try:
        leaf = sm.get_leaf_id()
        new_id = sm.append_message(
            {"role": "user", "content": "appended by sessiontree", "timestamp": 1763681581544}
        )
        sm.flush()
    finally:
        sm.close()
    after = path.read_bytes()
    assert after[: len(before)] == before, first_diff(
        after[: len(before)].decode("utf-8", "replace"), before.decode("utf-8", "replace")
    )
    tail = after[len(before) :]
    assert tail.endswith(b"\n") and tail.count(b"\n") == 1
    entry = json.loads(tail)
    assert (entry["type"], entry["id"], entry["parentId"]) == ("message", new_id, leaf)
    assert list(entry) == ["type", "id", "parentId", "timestamp", "message"]
