"""Write direction, without the peers: run the committed op scripts through sessiontree
(`tests/opscript.py`) and compare the files with the ones the peers wrote from the same
script (`tests/data/peers/`, see `scripts/gen_peer_data.py`). The omp-flavour scripts are
compared with omp's files, the pi-flavour scripts with both omp's and pi's.

Ids, session ids and timestamps are random or wall-clock in every implementation, so the
files are compared by *position*, per session file (the initial one and each one made by
`createBranchedSession`, in order):

* the sequence of entry types;
* the parent structure: each entry's parent as a position (`None` for a root,
  `"missing"` for a dangling parentId, which createBranchedSession leaves behind when it
  drops a label entry that was a parent);
* the references inside entries as positions: `label.targetId`,
  `compaction.firstKeptEntryId`, `branch_summary.fromId` (`"root"` kept);
* the key order of the entry types whose shape sessiontree shares with the peer:
  `message` (and the message object's own keys: it is stored verbatim), `branch_summary`,
  `custom`, `custom_message` (pi writes no `attribution`; that key is ignored against pi),
  `label`, and `compaction` restricted to its core keys (type, id, parentId, timestamp,
  summary, firstKeptEntryId, tokensBefore, details): omp adds `shortSummary` and pi
  ignores the `shortSummary` it is given, so only the core order is common.

Values (`payload`): against omp, the message object of `message` entries, the
`content`/`details` of `custom_message`, the `data` of `custom`, the summaries/details of
`branch_summary`/`compaction` and `label.label`, exactly (omp and sessiontree both
externalise images to content-addressed blob refs and truncate strings over 500000 UTF-16
units, so the stored values must agree); against pi, which keeps everything inline, only
`custom`, `branch_summary`, `compaction` and `label` values.

Not compared: `thinking_level_change` and `model_change` (omp adds `configured` and
`resolvedModelIsFallback`, pi writes `provider`/`modelId`; sessiontree follows API.md),
`session_init` (omp spreads every key of `init`; the API has four parameters), headers and
the title slot. Session names: both peers append an entry (`title_change` for omp,
`session_info` for pi) while sessiontree only updates the header, so those peer entries
are removed before comparing; their children are re-parented to their parent, and a
label, compaction or branch summary that refers to one refers to its parent instead
(`tests/opscript.py` resolves a ref to a `setSessionName` op to the leaf at that time).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests import peers
from tests.conftest import FIXTURES
from tests.opscript import load_ops, run_script

DATA = FIXTURES / "peers"
MANIFEST = json.loads((DATA / "manifest.json").read_text(encoding="utf-8"))

NAME_ENTRY_TYPES = {"title_change", "session_info"}
COMPACTION_CORE = [
    "type",
    "id",
    "parentId",
    "timestamp",
    "summary",
    "firstKeptEntryId",
    "tokensBefore",
    "details",
]
KEY_ORDER_TYPES = {"message", "compaction", "branch_summary", "custom", "custom_message", "label"}
PI_WRITERS = set(peers.PI_VERSIONS)
"""Both pi releases (0.73.1 and 1.6.0) write entries alike: inline, no `attribution`."""


def read_entries(path: Path) -> list[dict[str, Any]]:
    """Entries of a session file (title slot and header dropped)."""
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line))
    if out and out[0].get("type") == "title":
        out = out[1:]
    assert out and out[0].get("type") == "session", f"{path}: no header"
    return out[1:]


REF_KEYS = ("parentId", "targetId", "firstKeptEntryId", "fromId")


def collapse_name_entries(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop title_change/session_info entries. Whatever pointed at one of them (a child's
    parentId, a label's targetId, ...) points at its parent instead, as the interpreter
    resolves a ref to a setSessionName op to the leaf the name was set on."""
    dropped = {e["id"]: e.get("parentId") for e in entries if e["type"] in NAME_ENTRY_TYPES}

    def resolve(ref: Any) -> Any:
        seen = set()
        while ref in dropped and ref not in seen:
            seen.add(ref)
            ref = dropped[ref]
        return ref

    out = []
    for e in entries:
        if e["type"] in NAME_ENTRY_TYPES:
            continue
        out.append({**e, **{k: resolve(e[k]) for k in REF_KEYS if k in e}})
    return out


def shape(entries: list[dict[str, Any]]) -> dict[str, list[Any]]:
    pos = {e["id"]: n for n, e in enumerate(entries)}

    def at(ref: Any) -> Any:
        if ref is None or ref == "root":
            return ref
        return pos.get(ref, "missing")

    refs = []
    for e in entries:
        if e["type"] == "label":
            refs.append(("targetId", at(e.get("targetId")), e.get("label")))
        elif e["type"] == "compaction":
            refs.append(("firstKeptEntryId", at(e.get("firstKeptEntryId"))))
        elif e["type"] == "branch_summary":
            refs.append(("fromId", at(e.get("fromId"))))
    return {
        "types": [e["type"] for e in entries],
        "parents": [at(e.get("parentId")) for e in entries],
        "refs": refs,
    }


def key_order(entry: dict[str, Any], writer: str) -> list[str]:
    keys = list(entry)
    if entry["type"] == "compaction":
        keys = [k for k in keys if k in COMPACTION_CORE]
    if entry["type"] == "custom_message" and writer in PI_WRITERS:
        keys = [k for k in keys if k != "attribution"]
    if entry["type"] == "message":
        keys += ["message:" + k for k in entry["message"]]
    return keys


PAYLOAD_KEYS = {
    "message": ["message"],
    "custom_message": ["customType", "content", "display", "details"],
    "custom": ["customType", "data"],
    "branch_summary": ["summary", "details"],
    "compaction": ["summary", "tokensBefore", "details"],
    "label": ["label"],
}
# pi stores everything inline and at full length, sessiontree (like omp) externalises
# images and truncates huge strings: against pi, only payloads that never hold either.
PI_PAYLOAD_TYPES = {"custom", "branch_summary", "compaction", "label"}


def payload(entry: dict[str, Any], writer: str) -> str:
    """The compared values of an entry, as order-sensitive JSON ("" when not compared)."""
    kind = entry["type"]
    if kind not in PAYLOAD_KEYS or (writer in PI_WRITERS and kind not in PI_PAYLOAD_TYPES):
        return ""
    return json.dumps([[k, entry.get(k)] for k in PAYLOAD_KEYS[kind]], ensure_ascii=False)


def first_diff(got: str, want: str, context: int = 60) -> str:
    i = next((k for k, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
    if i is None:
        i = min(len(got), len(want))
    lo = max(0, i - context)
    return f"at char {i}: {got[lo : i + context]!r} vs {want[lo : i + context]!r}"


# These scripts run into a plain session dir, not pi's store: there sessiontree writes as
# xcsh and oh-my-pi do (a branch summary's fromId is the branch target, a branched session
# keeps the label entries), where pi 1.6.0 writes its own form. In pi's store sessiontree
# writes pi 1.6's form, checked against pi 1.6.0 in tests/interop/test_pi16_store.py.
FROM_ID = (
    "design: outside pi's store sessiontree writes a branch summary's fromId as xcsh and "
    "oh-my-pi do (the branch target), pi 1.6 the leaf it leaves (tests/interop/test_pi16_store.py)"
)
KNOWN_DIFFERENCES = {
    **{f"{script}-by-pi16": FROM_ID for script in ("s1-pi", "s2-pi", "s3-pi", "s4-pi", "s21-pi16")},
    "x15-pi-by-pi16": FROM_ID
    + "; and its createBranchedSession re-links the children of the label entries it drops",
}


def _case(case: dict[str, Any]) -> Any:
    reason = KNOWN_DIFFERENCES.get(case["name"])
    marks = [pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)] if reason else []
    return pytest.param(case, id=case["name"], marks=marks)


CASES = [_case(case) for case in MANIFEST["cases"]]


@pytest.mark.parametrize("case", CASES)
def test_same_shape_as_the_peer_file(case: dict[str, Any], tmp_path: Path) -> None:
    script = MANIFEST["scripts"][case["script"]]
    result = run_script(load_ops(DATA / script["file"]), tmp_path / "out")

    peer_files = sorted(case["files"], key=lambda r: r["index"])
    assert len(result.session_files) >= max(r["index"] for r in peer_files) + 1
    compared = 0
    for rec in peer_files:
        if not rec["exists"]:
            continue
        ours_path = result.session_files[rec["index"]]
        assert ours_path is not None and Path(ours_path).exists(), (
            f"file #{rec['index']}: the peer wrote it, sessiontree did not"
        )
        ours = read_entries(Path(ours_path))
        theirs = collapse_name_entries(read_entries(DATA / case["name"] / rec["file"]))
        assert not any(e["type"] in NAME_ENTRY_TYPES for e in ours)

        got, want = shape(ours), shape(theirs)
        assert got["types"] == want["types"], f"file #{rec['index']}: entry types differ"
        assert got["parents"] == want["parents"], f"file #{rec['index']}: parents differ"
        assert got["refs"] == want["refs"], f"file #{rec['index']}: references differ"

        bad = []
        for n, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            if a["type"] in KEY_ORDER_TYPES:
                ka, kb = key_order(a, case["writer"]), key_order(b, case["writer"])
                if ka != kb:
                    bad.append(f"entry {n} ({a['type']}): {ka} vs {kb}")
        assert not bad, f"file #{rec['index']}: key order differs: {bad[:3]}"

        bad = []
        for n, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            pa, pb = payload(a, case["writer"]), payload(b, case["writer"])
            if pa != pb:
                bad.append(f"entry {n} ({a['type']}): {first_diff(pa, pb)}")
        assert not bad, f"file #{rec['index']}: {len(bad)} payloads differ: {bad[:3]}"
        compared += 1
    assert compared >= 1
