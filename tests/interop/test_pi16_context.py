"""The context of pi 1.6.0's sessions, as pi 1.6.0 itself builds it, on every leaf.

The corpus in `tests/data/pi16/` was written by pi 1.6.0's own `SessionManager`
(`scripts/gen_pi16_corpus.py`; `manifest.json` has the command): role "system"
messages, `context_edit` entries, compactions with a `systemMessage` and with "retain
none", `content: null`, `thinkingLevel: null`, `usage` entries. For every entry of
every file taken as the leaf, `build_session_context()` must give pi 1.6.0's messages
(the exact JSON.stringify bytes, key order included), thinking level and model, and
`convert_to_llm` of them pi's `convertToLlm`. The live peer is asked (`peers.py`: the
test skips without it locally and fails under CI).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sessiontree import UNSET, SessionManager, convert_to_llm, serialize_entry
from sessiontree.format import parse_iso_ms
from tests import peers
from tests.conftest import FIXTURES

CORPUS = FIXTURES / "pi16"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text(encoding="utf-8"))
FILES = [pytest.param(CORPUS / case["file"], id=case["file"]) for case in MANIFEST["cases"]]


@pytest.fixture(params=["whole", "index-first"], autouse=True)
def load_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a session is loaded: whole, and index first (as sessions of 8 MiB and
    more are), where the context reads only the entries it needs."""
    if request.param == "index-first":
        monkeypatch.setattr("sessiontree.session._loader.LAZY_LOAD_BYTES", 0)
    return str(request.param)


def stringify(messages: list[dict[str, Any]]) -> str:
    return "[" + ",".join(serialize_entry(m) for m in messages) + "]"


def pi_model(context: dict[str, Any]) -> str | None:
    model = context.get("model")
    if not model:
        return None
    return f"{model.get('provider')}/{model.get('modelId')}"


def context_mismatches(path: Path, peer: str = "pi16") -> tuple[list[str], int]:
    """(what differs from the peer's context (pi 1.6.0's by default), per leaf; the
    number of leaves)."""
    want = peers.peer_contexts(peer, path)
    bad: list[str] = []
    with SessionManager.open(str(path), read_only=True) as sm:
        assert [w["leafId"] for w in want] == [e["id"] for e in sm.get_entries()]
        for leaf in want:
            sm.branch(leaf["leafId"])
            ctx = sm.build_session_context()
            pi = leaf["context"]
            got, exp = stringify(ctx.messages), stringify(pi["messages"])
            if got != exp:
                bad.append(f"{leaf['leafId']}: messages {got[:300]} != {exp[:300]}")
            elif ctx.thinking_level != pi.get("thinkingLevel"):
                bad.append(f"{leaf['leafId']}: thinking {ctx.thinking_level!r}")
            elif ctx.models.get("default") != pi_model(pi):
                bad.append(f"{leaf['leafId']}: model {ctx.models!r} != {pi_model(pi)!r}")
    return bad, len(want)


def test_the_corpus_exercises_what_pi_16_added() -> None:
    lines = [
        json.loads(line)
        for case in MANIFEST["cases"]
        for line in (CORPUS / case["file"]).read_text(encoding="utf-8").splitlines()
    ]
    kinds = {entry.get("type") for entry in lines}
    assert {"context_edit", "usage", "compaction", "branch_summary"} <= kinds
    edits = [e for e in lines if e.get("type") == "context_edit"]
    assert any(e["replacement"] is None for e in edits)
    assert any(e["replacement"] is not None for e in edits)
    compactions = [e for e in lines if e.get("type") == "compaction"]
    assert any(e["firstKeptEntryId"] == e["id"] for e in compactions)  # retain none
    assert any("systemMessage" in e for e in compactions)
    messages = [e["message"] for e in lines if e.get("type") == "message"]
    assert any(m["role"] == "system" for m in messages)
    assert any(m.get("content", 0) is None for m in messages)
    assert any(e.get("thinkingLevel", 0) is None for e in lines)


@pytest.mark.parametrize("path", FILES)
def test_context_equals_pi_16_on_every_leaf(path: Path) -> None:
    bad, leaves = context_mismatches(path)
    assert not bad, f"{len(bad)}/{leaves} leaves differ from pi 1.6.0, e.g. {bad[:2]}"


@pytest.mark.parametrize("path", FILES)
def test_convert_to_llm_equals_pi_16_on_every_leaf(path: Path) -> None:
    out = peers.oracle("pi16", "llm", path, "--all-leaves")
    want = [json.loads(line) for line in out.splitlines() if line.strip()]
    bad = []
    with SessionManager.open(str(path), read_only=True) as sm:
        for leaf in want:
            # pi's conversion of pi's own messages: the conversion alone is under test.
            got = stringify(convert_to_llm(leaf["messages"]))
            if got != stringify(leaf["llm"]):
                bad.append(f"{leaf['leafId']}: {got[:300]}")
            sm.branch(leaf["leafId"])
            ours = stringify(convert_to_llm(sm.build_session_context().messages))
            if ours != stringify(leaf["llm"]):
                bad.append(f"{leaf['leafId']} (our context): {ours[:300]}")
    assert not bad, f"{len(bad)} conversions differ from pi 1.6.0, e.g. {bad[:2]}"


# ----------------------------------------------------------------------------- writing


def _replay_cases() -> list[Any]:
    """Every compaction and context edit in the corpus, with the op that made it."""
    out = []
    for case in MANIFEST["cases"]:
        ops = json.loads((CORPUS / case["ops"]).read_text(encoding="utf-8"))["ops"]
        for op, entry_id in zip(ops, case["ids"], strict=True):
            if entry_id is not None and op["op"] in ("compaction", "edit"):
                out.append(
                    pytest.param(case["file"], op, entry_id, id=f"{case['file']}-{entry_id}")
                )
    return out


REPLAYS = _replay_cases()


def test_the_replays_cover_retain_none_system_messages_and_normalized_edits() -> None:
    ops = [p.values[1] for p in REPLAYS]
    assert any(op["op"] == "compaction" and op["pick"] is None for op in ops)
    assert any(op["op"] == "edit" and op["replacement"] is None for op in ops)
    assert any(
        op["op"] == "edit" and isinstance((op["replacement"] or {}).get("content"), str)
        for op in ops
    )


@pytest.mark.parametrize(("name", "op", "entry_id"), REPLAYS)
def test_appended_line_is_what_pi_16_wrote(
    name: str, op: dict[str, Any], entry_id: str, tmp_path: Path
) -> None:
    """The same call at the same leaf writes pi 1.6.0's line byte for byte (its id and
    time aside): key order, "retain none", the replayed `systemMessage`, a string
    replacement of an assistant's content stored as a text block."""
    lines = (CORPUS / name).read_text(encoding="utf-8").splitlines()
    written = next(json.loads(line) for line in lines if f'"id":"{entry_id}"' in line)
    pi_line = next(line for line in lines if f'"id":"{entry_id}"' in line)
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with SessionManager.open(str(path), session_dir=str(tmp_path)) as sm:
        sm.branch(written["parentId"])
        if op["op"] == "compaction":
            kept = written["firstKeptEntryId"]
            new_id = sm.append_compaction(
                op["summary"],
                None,
                None if kept == entry_id else kept,
                op["tokensBefore"],
                op.get("details", UNSET),
                usage=op.get("usage", UNSET),
            )
        else:
            new_id = sm.append_context_edit(written["targetId"], op["replacement"])
    # The line in the file, as written (the last one).
    ours = json.loads(path.read_text(encoding="utf-8").splitlines()[-1])
    assert ours["id"] == new_id
    # Only the id and the time are pi's own; the rest must come out the same.
    ours["id"] = entry_id
    if ours.get("firstKeptEntryId") == new_id:
        ours["firstKeptEntryId"] = entry_id
    if isinstance(ours.get("systemMessage"), dict):
        # Stamped with the compaction's own time, as pi stamps it.
        assert ours["systemMessage"]["timestamp"] == parse_iso_ms(ours["timestamp"])
        ours["systemMessage"] = {
            **ours["systemMessage"],
            "timestamp": written["systemMessage"]["timestamp"],
        }
    ours["timestamp"] = written["timestamp"]
    if op.get("fromHook"):  # pi's fromHook is oh-my-pi's fromExtension in this API
        written = {k: v for k, v in written.items() if k != "fromHook"}
        pi_line = serialize_entry(written)
    assert serialize_entry(ours) == pi_line


# ----------------------------------------------------------------------------- reading back


def _line(kind: str, entry_id: str, parent: str | None, second: int, **fields: Any) -> str:
    entry = {
        "type": kind,
        "id": entry_id,
        "parentId": parent,
        "timestamp": f"2026-11-20T10:00:{second:02d}.000Z",
        **fields,
    }
    return serialize_entry(entry)


def _msg(role: str, **fields: Any) -> dict[str, Any]:
    return {"role": role, **fields, "timestamp": 1763632800000}


HAND_EDITED = [
    # Shapes pi 1.6's own API does not write but its reader takes (old or hand-edited
    # files): missing content, edits of entries it would refuse, replacements without
    # content, an edit on another branch, edits before a compaction's kept range.
    serialize_entry(
        {
            "type": "session",
            "version": 3,
            "id": "0193f0c0-0000-7000-8000-000000000001",
            "timestamp": "2026-11-20T10:00:00.000Z",
            "cwd": "/p",
        }
    ),
    _line("message", "s1", None, 1, message=_msg("system", sections={"a": "<a/>"})),
    _line("message", "u1", "s1", 2, message=_msg("user")),
    _line(
        "message", "a1", "u1", 3, message=_msg("assistant", content=None, provider="p", model="m")
    ),
    _line("message", "t1", "a1", 4, message=_msg("toolResult", toolCallId="c", toolName="x")),
    _line("custom_message", "c1", "t1", 5, customType="n", display=True),
    _line("custom_message", "c2", "c1", 6, customType="n", content=None, display=False),
    _line("context_edit", "e1", "c2", 7, targetId="a1", replacement={"content": "raw string"}),
    _line("context_edit", "e2", "e1", 8, targetId="s1", replacement={"content": "not applied"}),
    _line("context_edit", "e3", "e2", 9, targetId="c1", replacement={"content": "custom text"}),
    _line("branch_summary", "b1", "e3", 10, fromId="u1", summary="went elsewhere"),
    _line("context_edit", "e4", "b1", 11, targetId="b1", replacement=None),
    _line("context_edit", "e5", "e4", 12, targetId="u1", replacement={"other": 1}),
    _line("context_edit", "e6", "e5", 13, targetId="t1", replacement="no object"),
    _line("context_edit", "x1", "e3", 14, targetId="c2", replacement=None),  # another branch
    _line("message", "s2", "e6", 15, message=_msg("system", content="later rule")),
    _line("message", "u2", "s2", 16, message=_msg("user", content="kept")),
    _line("context_edit", "e7", "u2", 17, targetId="u2", replacement={"content": "first"}),
    _line("context_edit", "e8", "e7", 18, targetId="u2", replacement={"content": "second"}),
    _line(
        "compaction",
        "k1",
        "e8",
        19,
        summary="sum",
        firstKeptEntryId="e5",
        tokensBefore=9,
        systemMessage=_msg("system", content="replayed"),
    ),
    _line("thinking_level_change", "th", "k1", 20),  # no level at all
    _line("context_edit", "e9", "th", 21, targetId="e6", replacement=None),
    _line("context_edit", "ea", "e9", 22, targetId="c1", replacement=None),  # not in context
    _line("compaction", "k2", "ea", 23, summary="none kept", firstKeptEntryId="k2", tokensBefore=1),
    _line("context_edit", "eb", "k2", 24, targetId="k2", replacement={"content": "x"}),
    _line("message", "u3", "eb", 25, message=_msg("user", content="after")),
    _line("context_edit", "ec", "u3", 26, targetId="k2", replacement=None),
]


def test_hand_edited_shapes_read_as_pi_16_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "hand.jsonl"
    path.write_text("\n".join(HAND_EDITED) + "\n", encoding="utf-8")
    bad, leaves = context_mismatches(path)
    assert leaves == len(HAND_EDITED) - 1
    assert not bad, f"{len(bad)}/{leaves} leaves differ from pi 1.6.0, e.g. {bad[:2]}"


def test_what_sessiontree_writes_pi_16_reads_with_the_same_context(tmp_path: Path) -> None:
    """A session written through the API (system messages, edits, compactions that
    keep some entries or none, a branch) has pi 1.6.0's context on every leaf."""
    with SessionManager.create("/p", str(tmp_path)) as sm:
        sm.append_message(_msg("system", content="base", toolsAdded=[{"name": "read"}]))
        u1 = sm.append_message(_msg("user", content="one"))
        a1 = sm.append_message(_msg("assistant", content=[], provider="p", model="m"))
        sm.append_message(_msg("system", content="more", sections={"s": "<s/>"}))
        sm.append_context_edit(a1, {"content": "shorter"})
        sm.append_context_edit(u1, None)
        u2 = sm.append_message(_msg("user", content="two"))
        sm.append_compaction("kept from u2", None, u2, 100)
        sm.append_message(_msg("system", content="after", toolsRemoved=[{"name": "read"}]))
        sm.append_context_edit(u2, {"content": [{"type": "text", "text": "edited"}]})
        fork = sm.append_message(_msg("user", content="three"))
        sm.append_compaction("nothing kept", None, None, 200, usage={"input": 1})
        sm.append_message(_msg("user", content="four"))
        sm.branch(fork)
        sm.append_context_edit(fork, None)
        path = sm.get_session_file()
    assert path is not None
    bad, leaves = context_mismatches(Path(path))
    assert leaves == 14
    assert not bad, f"{len(bad)}/{leaves} leaves differ from pi 1.6.0, e.g. {bad[:2]}"


PEER_DATA = FIXTURES / "peers"
PI_073_FILES = [
    pytest.param(PEER_DATA / case["name"] / rec["file"], id=f"{case['name']}/{rec['index']}")
    for case in json.loads((PEER_DATA / "manifest.json").read_text(encoding="utf-8"))["cases"]
    # pi 0.73.1's own scripts: on the pi16 flavour (pi 1.6's entries, written by 0.73.1)
    # the two releases disagree and sessiontree follows 1.6.0 (test_peer_interop.FOLLOWS_PI16)
    if case["writer"] == "pi" and case["flavour"] != "pi16"
    for rec in case["files"]
    if rec["exists"]
]


@pytest.mark.parametrize("peer", peers.PI_VERSIONS)
@pytest.mark.parametrize("path", PI_073_FILES)
def test_files_pi_073_wrote_read_as_both_pi_releases_read_them(path: Path, peer: str) -> None:
    """The pi 1.6 rules change nothing on what pi 0.73.1 writes: both releases build
    the same context there, and so does sessiontree."""
    bad, leaves = context_mismatches(path, peer)
    assert not bad, f"{len(bad)}/{leaves} leaves differ from {peer}, e.g. {bad[:2]}"
