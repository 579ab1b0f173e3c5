#!/usr/bin/env python3
"""On how many leaves does sessiontree's context equal each pi release's?

Reads only the committed data (`tests/data/peers/`, made by `scripts/gen_peer_data.py`):
for every file pi 0.73.1 or pi 1.6.0 wrote and every release that read it, sessiontree
opens the file read-only and builds the context at each leaf; a leaf agrees when the
messages (sha256 of their `JSON.stringify` bytes), the thinking level and the default
model all equal what that release recorded. Prints one line per (file, reader) that
differs, naming how many leaves differ in which field, then the totals per release.

    .venv/bin/python scripts/peer_agreement.py [--data tests/data/peers]

Needs no peer: it is the figure to quote before and after a change of the context rules.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from sessiontree import BlobStore, SessionManager, serialize_entry

ROOT = Path(__file__).resolve().parent.parent
READERS = ("pi", "pi16")


def stringify(messages: list[Any]) -> str:
    """`JSON.stringify(messages)`: an array of objects, each as `serialize_entry` writes it."""
    return "[" + ",".join(serialize_entry(m) for m in messages) + "]"


def ours(path: Path, blobs: str) -> dict[str, tuple[str, str | None, str | None]]:
    """sessiontree's (messages sha256, thinking level, default model) per leaf."""
    out = {}
    with SessionManager.open(str(path), read_only=True, blob_store=BlobStore(blobs)) as sm:
        for entry in sm.get_entries():
            sm.branch(entry["id"])
            ctx = sm.build_session_context()
            digest = hashlib.sha256(stringify(ctx.messages).encode("utf-8")).hexdigest()
            out[entry["id"]] = (digest, ctx.thinking_level, ctx.models.get("default"))
    return out


def compare(
    mine: dict[str, tuple[str, str | None, str | None]], readout: Path
) -> tuple[int, int, dict[str, int]]:
    """(leaves equal, leaves, leaves differing per field) against one reader's record."""
    fields = {"messages": 0, "thinkingLevel": 0, "model": 0}
    equal = leaves = 0
    for line in readout.read_text(encoding="utf-8").splitlines():
        want = json.loads(line)
        model = want["model"]
        model_id = None if model is None else f"{model['provider']}/{model['modelId']}"
        digest, thinking, default = mine[want["leafId"]]
        differs = {
            "messages": digest != want["messagesSha256"],
            "thinkingLevel": thinking != want["thinkingLevel"],
            "model": default != model_id,
        }
        for field, bad in differs.items():
            fields[field] += bad
        leaves += 1
        equal += not any(differs.values())
    return equal, leaves, fields


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT / "tests" / "data" / "peers")
    a = ap.parse_args(argv)
    manifest = json.loads((a.data / "manifest.json").read_text(encoding="utf-8"))
    totals = {reader: [0, 0] for reader in READERS}
    with tempfile.TemporaryDirectory() as no_blobs:
        for case in manifest["cases"]:
            for rec in case["files"]:
                if not rec["exists"] or "readers" not in rec:
                    continue
                mine = ours(a.data / case["name"] / rec["file"], no_blobs)
                for reader, readout in rec["readers"].items():
                    equal, leaves, fields = compare(
                        mine, a.data / case["name"] / readout["contexts"]
                    )
                    totals[reader][0] += equal
                    totals[reader][1] += leaves
                    if equal != leaves:
                        detail = ", ".join(f"{k} {v}" for k, v in fields.items() if v)
                        print(
                            f"{case['name']}/{rec['index']} read by {reader}: equal on "
                            f"{equal} of {leaves} leaves (differ: {detail})"
                        )
    for reader, (equal, leaves) in totals.items():
        version = manifest["peers"].get(reader, reader)
        print(
            f"{reader} ({version}): sessiontree's context equals on {equal} of {leaves} "
            f"leaves ({leaves - equal} differ)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
