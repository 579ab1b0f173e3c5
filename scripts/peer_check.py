#!/usr/bin/env python3
"""Write direction against the live TypeScript peers: do they read what sessiontree writes?

Dev tool. Needs the peers (``scripts/peers/setup`` installs them: pi 0.73.1, pi 1.6.0 and
oh-my-pi; it drives them through ``scripts/peers/oracle``); without them it prints why and
exits 0.

    .venv/bin/python scripts/peer_check.py [--seeds 1-4] [--flavours omp,pi] [--work DIR]
                                           [--no-shapes] [--gen-ops GENERATOR [--n 150]
                                           [--p-huge 0]]

For every seed and flavour it takes an op script (the committed
``tests/data/peers/ops/s<seed>-<flavour>.json.gz``, or with ``--gen-ops`` a fresh one from
``GENERATOR --seed S --n N --p-huge P [--pi] -o FILE``, e.g. the peers' ``gen_ops.py``),
runs it through sessiontree (``tests/opscript.py``:
``SessionManager.create(cwd, session_dir=OUT)``, the ops, ``flush()``, ``close()``), then
for every session file that run left behind:

* ``tree``: omp's and both pi releases' ``tree FILE --flat`` must equal what sessiontree
  reports for the same file opened read-only (leaf, entries with ids, labels, root ids,
  children);
* ``ctx`` (pi flavour): each pi release's (0.73.1 and 1.6.0) ``context FILE
  --all-leaves``, leaf by leaf, against
  ``build_session_context(load_entries_from_file(FILE), leaf)``: the entries as stored,
  because pi does not resolve blob refs. Messages must serialise to the same bytes
  (after dropping what pi never copies into a context message: a custom message's
  `attribution`, a compaction summary's `shortSummary`; sessiontree writes both), the
  thinking level must agree, and pi's model must equal ``models["default"]``, except
  where pi reports ``{}``: pi cannot read omp-format ``model_change`` entries
  (``{"model": "provider/id"}``), which is what sessiontree writes (counted as ``model?``);
* ``shape`` (unless ``--no-shapes``): the peers (both pi releases for the pi flavour) run
  the same script too, and their files
  are compared with ours as ``tests/interop/test_opscript_shapes.py`` does with the committed data.

A summary table is printed; the exit status is 1 when anything mismatched.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-", 1)
            seeds.extend(range(int(lo), int(hi) + 1))
        elif part:
            seeds.append(int(part))
    return seeds


def run(cmd: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    return res.returncode, res.stdout, res.stderr


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", default="1-4", help="e.g. 1-4 or 1,5,9 (default 1-4)")
    ap.add_argument("--n", type=int, default=150, help="ops per generated script (default 150)")
    ap.add_argument("--flavours", default="omp,pi", help="omp,pi (default both)")
    ap.add_argument("--p-huge", type=float, default=0.0, help="gen_ops.py --p-huge (default 0)")
    ap.add_argument(
        "--work", type=Path, default=Path(tempfile.gettempdir()) / "sessiontree-peer-check"
    )
    ap.add_argument(
        "--gen-ops",
        type=Path,
        metavar="GENERATOR",
        help="generate the op scripts instead of taking the committed ones",
    )
    ap.add_argument(
        "--no-shapes", action="store_true", help="skip running the peers on the scripts"
    )
    a = ap.parse_args(argv)

    setup = ROOT / "scripts" / "peers" / "setup"
    if subprocess.run([setup, "--check", "pi", "pi16", "omp"], check=False).returncode != 0:
        print("peer_check: skipped, the peers are not installed (run scripts/peers/setup)")
        return 0

    work: Path = a.work.resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    # sessiontree's agent dir (blobs, breadcrumbs) goes to the scratch dir, never ~/.xcsh
    agent = work / "agent"
    os.environ["PI_CODING_AGENT_DIR"] = str(agent)
    for var in ("TMUX_PANE", "KITTY_WINDOW_ID", "TERM_SESSION_ID", "WT_SESSION"):
        os.environ.pop(var, None)
    env = dict(os.environ)

    from opscript import load_ops, run_script

    import sessiontree.format._jsonl
    from sessiontree import (
        BlobStore,
        SessionManager,
        build_session_context,
        load_entries_from_file,
        serialize_entry,
    )

    ser_value = getattr(sessiontree.format._jsonl, "serialize_value", None)

    def stringify(messages: list[Any]) -> str:
        if ser_value is not None:
            return str(ser_value(messages))
        return "[" + ",".join(serialize_entry(m) for m in messages) + "]"

    import peers

    launcher = str(ROOT / "scripts" / "peers" / "oracle")
    oracle = {peer: [launcher, peer] for peer in peers.PEERS}
    blobs = agent / "blobs"

    def ours_tree(path: str) -> dict[str, Any]:
        sm = SessionManager.open(path, read_only=True, blob_store=BlobStore(str(blobs)))
        try:
            entries = sm.get_entries()
            labels = {e["id"]: sm.get_label(e["id"]) for e in entries}
            roots = sm.get_tree()
            children: dict[str, list[str]] = {}
            stack = list(roots)
            while stack:
                node_ = stack.pop()
                if node_.children:
                    children[node_.entry["id"]] = [c.entry["id"] for c in node_.children]
                stack.extend(node_.children)
            return {
                "leafId": sm.get_leaf_id(),
                "entries": [
                    {"id": e["id"], "parentId": e.get("parentId"), "type": e["type"]}
                    for e in entries
                ],
                "labels": {k: v for k, v in labels.items() if v is not None},
                "rootIds": [r.entry["id"] for r in roots],
                "children": children,
            }
        finally:
            sm.close()

    def tree_diff(ours: dict[str, Any], theirs: dict[str, Any]) -> str:
        for key in ("leafId", "entries", "labels", "rootIds", "children"):
            if ours.get(key) != theirs.get(key):
                mine, peer = str(ours.get(key))[:200], str(theirs.get(key))[:200]
                return f"{key}: sessiontree {mine} / peer {peer}"
        return ""

    rows: list[list[str]] = []
    failures: list[str] = []

    for seed in parse_seeds(a.seeds):
        for flavour in [f.strip() for f in a.flavours.split(",") if f.strip()]:
            name = f"s{seed}-{flavour}"
            ops_path = work / name / "ops.json"
            ops_path.parent.mkdir(parents=True)
            committed = ROOT / "tests" / "data" / "peers" / "ops" / f"{name}.json.gz"
            if a.gen_ops is None and committed.is_file():
                ops_path.write_bytes(gzip.decompress(committed.read_bytes()))
            elif a.gen_ops is None:
                failures.append(f"{name}: no committed op script {committed} (use --gen-ops)")
                continue
            else:
                cmd = [sys.executable, str(a.gen_ops), "--seed", str(seed)]
                cmd += ["--n", str(a.n), "--p-huge", str(a.p_huge), "-o", str(ops_path)]
                cmd += ["--pi"] if flavour == "pi" else []
                rc, _, err = run(cmd, env)
                if rc != 0:
                    failures.append(f"{name}: {a.gen_ops.name} failed: {err.strip()}")
                    continue
            try:
                result = run_script(load_ops(ops_path), work / name / "ours")
            except Exception as exc:
                failures.append(f"{name}: sessiontree failed to run the script: {exc!r}")
                rows.append([name, "-", "-", "ERROR", *[""] * 8])
                continue

            shapes = "-"
            if not a.no_shapes:
                shapes = check_shapes(a, oracle, env, name, flavour, ops_path, result, failures)

            for index, path in enumerate(result.session_files):
                if path is None or not os.path.exists(path):
                    rows.append([name, str(index), "-", "no file", *[""] * 7, shapes])
                    continue
                mine = ours_tree(path)
                row = [name, str(index), str(len(mine["entries"]))]
                for peer in peers.PEERS:
                    cmd = [*oracle[peer], "tree", path, "--flat"]
                    if peer == "omp":
                        cmd += ["--blobs", str(blobs)]
                    rc, out, err = run(cmd, env)
                    if rc != 0:
                        row.append("ERROR")
                        failures.append(
                            f"{name}#{index} {peer} tree: exit {rc}: {err.strip()[:300]}"
                        )
                        continue
                    diff = tree_diff(mine, json.loads(out))
                    row.append("ok" if not diff else "DIFF")
                    if diff:
                        failures.append(f"{name}#{index} {peer} tree: {diff}")

                for release in peers.PI_VERSIONS:
                    if flavour == "pi":
                        row += check_pi_contexts(
                            oracle[release],
                            env,
                            path,
                            f"{name}#{index} {release}",
                            failures,
                            (
                                load_entries_from_file,
                                build_session_context,
                                serialize_entry,
                                stringify,
                            ),
                        )
                    else:
                        row += ["", ""]
                row.append(shapes)
                rows.append(row)

    header = ["script", "file", "entries", *[f"{p} tree" for p in peers.PEERS]]
    header += [f"{r} {what}" for r in peers.PI_VERSIONS for what in ("ctx", "model?")]
    header += ["shape"]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print()
    for r in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)))
    print()
    if failures:
        print(f"{len(failures)} mismatch(es):")
        for f in failures:
            print(f"  - {f}")
        return 1
    print("all checks passed")
    return 0


def pi_view(message: dict[str, Any]) -> dict[str, Any]:
    """A context message as pi builds it from the same entry: pi copies neither a custom
    message's `attribution` nor a compaction's `shortSummary` (both of which sessiontree
    writes, like omp) into context messages (crosscheck.py's `custom-attribution` and
    `compaction-shortSummary` rules, in reverse)."""
    drop = {"custom": "attribution", "compactionSummary": "shortSummary"}.get(message.get("role"))
    if drop is None or drop not in message:
        return message
    return {k: v for k, v in message.items() if k != drop}


def check_pi_contexts(
    pi: list[str],
    env: dict[str, str],
    path: str,
    label: str,
    failures: list[str],
    api: tuple[Any, Any, Any, Any],
) -> list[str]:
    """pi's context on every leaf vs sessiontree's on the stored entries; [ctx, model?]."""
    load_entries_from_file, build_session_context, serialize_entry, stringify = api
    rc, out, err = run([*pi, "context", path, "--all-leaves"], env)
    if rc != 0:
        failures.append(f"{label} context: exit {rc}: {err.strip()[:300]}")
        return ["ERROR", ""]
    entries = load_entries_from_file(path)[1:]
    lines = [line for line in out.split("\n") if line]
    ok = 0
    model_unreadable = 0
    for line in lines:
        want = json.loads(line)
        if serialize_entry(want) != line:
            failures.append(f"{label}: serialize_entry does not reproduce pi's line")
        leaf = want["leafId"]
        ctx = build_session_context(entries, leaf)
        ctx.messages = [pi_view(m) for m in ctx.messages]
        got_text = stringify(ctx.messages)
        want_text = stringify(want["context"]["messages"])
        problems = []
        if got_text != want_text:
            n = next(
                (
                    k
                    for k, (x, y) in enumerate(
                        zip(ctx.messages, want["context"]["messages"], strict=False)
                    )
                    if serialize_entry(x) != serialize_entry(y)
                ),
                min(len(ctx.messages), len(want["context"]["messages"])),
            )
            counts = f"{len(ctx.messages)} vs {len(want['context']['messages'])}"
            problems.append(f"messages differ from #{n} ({counts})")
        if ctx.thinking_level != want["context"]["thinkingLevel"]:
            problems.append(
                f"thinking {ctx.thinking_level!r} vs {want['context']['thinkingLevel']!r}"
            )
        model = want["context"]["model"]
        if model == {}:
            model_unreadable += 1
        else:
            expected = None if model is None else f"{model['provider']}/{model['modelId']}"
            if ctx.models.get("default") != expected:
                problems.append(f"models {ctx.models!r} vs pi {expected!r}")
        if problems:
            failures.append(f"{label} leaf {leaf}: " + "; ".join(problems))
        else:
            ok += 1
    status = f"{ok}/{len(lines)}"
    return [status if ok == len(lines) else status + " DIFF", str(model_unreadable)]


def check_shapes(
    a: argparse.Namespace,
    oracle: dict[str, list[str]],
    env: dict[str, str],
    name: str,
    flavour: str,
    ops_path: Path,
    result: Any,
    failures: list[str],
) -> str:
    """Run the peers on the script and compare file shapes (see test_opscript_shapes)."""
    import test_opscript_shapes as shapes

    verdicts = []
    for writer in ["omp", "pi", "pi16"] if flavour == "pi" else ["omp"]:
        out_dir = a.work.resolve() / name / f"by-{writer}"
        cmd = [*oracle[writer], "run", str(ops_path), str(out_dir), "--json"]
        rc, out, err = run(cmd, env)
        if rc != 0:
            failures.append(f"{name} {writer} run: exit {rc}: {err.strip()[:300]}")
            verdicts.append(f"{writer}:ERROR")
            continue
        res = json.loads(out)
        problems = []
        for index, peer_file in enumerate(res["sessionFiles"]):
            if not os.path.exists(peer_file):
                continue
            ours = result.session_files[index] if index < len(result.session_files) else None
            if ours is None or not os.path.exists(ours):
                problems.append(f"file #{index}: the peer wrote it, sessiontree did not")
                continue
            mine = shapes.read_entries(Path(ours))
            theirs = shapes.collapse_name_entries(shapes.read_entries(Path(peer_file)))
            got, want = shapes.shape(mine), shapes.shape(theirs)
            for key in ("types", "parents", "refs"):
                if got[key] != want[key]:
                    problems.append(f"file #{index}: {key} differ")
            if got["types"] != want["types"]:
                continue
            for n, (x, y) in enumerate(zip(mine, theirs, strict=True)):
                if x["type"] in shapes.KEY_ORDER_TYPES and shapes.key_order(
                    x, writer
                ) != shapes.key_order(y, writer):
                    problems.append(f"file #{index} entry {n} ({x['type']}): key order")
                pa, pb = shapes.payload(x, writer), shapes.payload(y, writer)
                if pa != pb:
                    problems.append(
                        f"file #{index} entry {n} ({x['type']}): {shapes.first_diff(pa, pb)}"
                    )
        for p in problems:
            failures.append(f"{name} shape vs {writer}: {p}")
        verdicts.append(f"{writer}:{'ok' if not problems else 'DIFF'}")
    return ",".join(verdicts)


if __name__ == "__main__":
    raise SystemExit(main())
