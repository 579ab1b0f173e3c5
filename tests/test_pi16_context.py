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

import peers
from sessiontree import UNSET, SessionManager, convert_to_llm, serialize_entry
from sessiontree.format import parse_iso_ms

CORPUS = Path(__file__).parent / "data" / "pi16"
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


def context_mismatches(path: Path) -> tuple[list[str], int]:
    """(what differs from pi 1.6.0's context, per leaf; the number of leaves)."""
    want = peers.peer_contexts("pi16", path)
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
