#!/usr/bin/env python3
"""Regenerate tests/data/peers/: session files written by the TypeScript peers.

Dev tool: needs the peers (``scripts/peers/setup`` installs them) and ``node``; it drives
them through the project's oracles (``scripts/peers/oracle``). CI does not run it; the
tests only read what it commits.

    python scripts/gen_peer_data.py [--seeds 1,2,3,4] [--n 100] [--extra pi:15:60]
                                    [--huge-seed 49] [--huge-n 12] [--huge-p 0.1]
                                    [--gen-ops GENERATOR]

The op scripts are the committed ones (``tests/data/peers/ops``, read before the
directory is rewritten), replayed through today's peers; with ``--gen-ops`` a generator
(``GENERATOR --seed S --n N --p-huge P [--pi] -o FILE``, e.g. the peers' ``gen_ops.py``)
makes them anew, and ``--n`` and the ``--huge-*`` options take effect. The scripts: for
every seed two (omp flavour and ``--pi`` flavour, both with ``--p-huge 0``), the
``--extra`` scripts (default: pi flavour, seed 15, 60 ops,
chosen because its createBranchedSession leaves an orphan entry), plus one small
pi-flavour script with huge (>500000-char) strings. omp runs every script, pi runs
the pi-flavour ones. Every session file a run produced lands in
``tests/data/peers/<case>/`` (file name kept), with:

* ``blobs/<sha256>``: the blobs that omp externalised and the case's files reference;
* ``<file stem>/tree.json``: the writing peer's ``tree FILE --flat`` output;
* pi-written files: ``<file stem>/contexts.jsonl`` (one compact line per leaf of
  ``context FILE --all-leaves``: leafId, thinkingLevel, model, messageCount and
  messagesSha256 = sha256 of the UTF-8 bytes of ``JSON.stringify(messages)``, computed
  in node) and ``<file stem>/context_default.json`` (the full default-leaf context);
* omp-written files: ``<file stem>/omp_context_default.json`` (omp's ``context FILE
  --blobs DIR``, for reference).

A default-leaf context over ``--max-context-bytes`` (256 KiB) is stored without its
messages (``messagesOmitted: {count, sha256}`` instead).

The op scripts go to ``tests/data/peers/ops/<script>.json.gz`` (gzip, mtime 0: the
huge strings compress from 1 MB to a few KB; ``zcat`` them to feed a peer's ``run``)
and everything (cases, writers, flavours, seeds, exact commands, the id each op
returned) to ``tests/data/peers/manifest.json``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "data" / "peers"
BLOB_REF = re.compile(r"blob:sha256:([0-9a-f]{64})")
SIZE_BUDGET = 8 * 1024 * 1024

# Reads `context --all-leaves` JSONL on stdin, writes one compact line per leaf.
# JSON.stringify(JSON.parse(line)) must give the line back (the oracle printed it with
# JSON.stringify), so the hash is over exactly JSON.stringify(messages)'s bytes.
COMPACT_CONTEXTS_JS = r"""
const crypto = require("node:crypto");
const lines = require("node:fs").readFileSync(0, "utf8").split("\n").filter((l) => l !== "");
const out = [];
for (const line of lines) {
  const o = JSON.parse(line);
  if (JSON.stringify(o) !== line) throw new Error("context line does not round-trip");
  const c = o.context;
  const text = JSON.stringify(c.messages);
  out.push(JSON.stringify({
    leafId: o.leafId,
    thinkingLevel: c.thinkingLevel,
    model: c.model,
    messageCount: c.messages.length,
    messagesSha256: crypto.createHash("sha256").update(Buffer.from(text, "utf8")).digest("hex"),
  }));
}
process.stdout.write(out.map((l) => l + "\n").join(""));
"""

# Reads one context line on stdin (argv[1] = byte limit). Small ones pass unchanged; a
# bigger one loses `messages`, replaced in place by messagesOmitted {count, sha256} with
# the sha256 of JSON.stringify(messages)'s UTF-8 bytes.
SHRINK_CONTEXT_JS = r"""
const crypto = require("node:crypto");
const line = require("node:fs").readFileSync(0, "utf8").replace(/\n$/, "");
const limit = Number(process.argv[1]);
if (Buffer.byteLength(line, "utf8") <= limit) {
  process.stdout.write(line + "\n");
} else {
  const o = JSON.parse(line);
  if (JSON.stringify(o) !== line) throw new Error("context line does not round-trip");
  const text = JSON.stringify(o.messages);
  const sha256 = crypto.createHash("sha256").update(Buffer.from(text, "utf8")).digest("hex");
  const out = {};
  for (const [k, v] of Object.entries(o)) {
    if (k === "messages") out.messagesOmitted = { count: o.messages.length, sha256 };
    else out[k] = v;
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}
"""


class Peers:
    """The peers as scripts/peers/setup installed them ($SESSIONTREE_PEERS, or .peers)."""

    def __init__(self) -> None:
        self.install = Path(os.environ.get("SESSIONTREE_PEERS") or ROOT / ".peers")
        self.bun = str(self.install / "omp" / "node_modules" / ".bin" / "bun")
        self.node = shutil.which("node") or "node"
        self.env = dict(os.environ)

    def oracle(self, peer: str) -> list[str]:
        return [str(ROOT / "scripts" / "peers" / "oracle"), peer]

    def versions(self) -> dict[str, str]:
        def pkg(sub: str) -> str:
            with open(self.install / sub / "package.json", encoding="utf-8") as f:
                return str(json.load(f)["version"])

        bun_v = sh([self.bun, "--version"], env=self.env).strip()
        node_v = sh([self.node, "--version"], env=self.env).strip()
        omp_pkg = "omp/node_modules/@oh-my-pi/pi-coding-agent"
        pi_pkg = "pi/node_modules/@mariozechner/pi-coding-agent"
        return {
            "omp": f"@oh-my-pi/pi-coding-agent@{pkg(omp_pkg)} on bun {bun_v}",
            "pi": f"@mariozechner/pi-coding-agent@{pkg(pi_pkg)} on node {node_v}",
        }


def sh(cmd: list[str], env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, input=stdin, check=False)
    if res.returncode != 0:
        sys.stderr.write(f"command failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr}\n")
        raise SystemExit(1)
    return res.stdout


def shrink(peers: Peers, context_line: str, limit: int) -> str:
    """The context line, or (when over `limit` bytes) the same without its messages."""
    return sh([peers.node, "-e", SHRINK_CONTEXT_JS, str(limit)], env=peers.env, stdin=context_line)


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", default="1,2,3,4", help="comma-separated seeds (default 1,2,3,4)")
    ap.add_argument("--n", type=int, default=100, help="ops per script (default 100)")
    ap.add_argument(
        "--extra",
        action="append",
        metavar="FLAVOUR:SEED:N",
        help="additional script (repeatable; default pi:15:60, whose createBranchedSession\n"
        "leaves an orphan: a kept entry whose parent was a dropped label entry)",
    )
    ap.add_argument("--huge-seed", type=int, default=49, help="seed of the huge-strings script")
    ap.add_argument("--huge-n", type=int, default=12, help="ops in the huge-strings script")
    ap.add_argument("--huge-p", type=float, default=0.1, help="--p-huge of that script")
    ap.add_argument(
        "--max-context-bytes",
        type=int,
        default=256 * 1024,
        help="a default-leaf context bigger than this is stored without its messages\n"
        "(replaced by messagesOmitted: {count, sha256}); default 262144",
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()) / "sessiontree-gen-peer-data",
        help="scratch dir, emptied first (it shows up in parentSession paths)",
    )
    ap.add_argument(
        "--gen-ops",
        type=Path,
        metavar="GENERATOR",
        help="make the op scripts with GENERATOR instead of replaying the committed ones",
    )
    a = ap.parse_args(argv)

    peers = Peers()
    if not Path(peers.bun).exists() or shutil.which("node") is None:
        sys.stderr.write("gen_peer_data: the peers are not installed (run scripts/peers/setup)\n")
        return 1
    # the committed op scripts, read before --out (their home, by default) is emptied
    committed = {
        p.name.removesuffix(".json.gz"): gzip.decompress(p.read_bytes())
        for p in (DEFAULT_OUT / "ops").glob("*.json.gz")
    }
    seeds = [int(s) for s in a.seeds.split(",") if s.strip()]

    out: Path = a.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    (out / "ops").mkdir(parents=True)
    work: Path = a.work.resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)

    # (script name, seed, flavour, n, p_huge)
    specs: list[tuple[str, int, str, int, float]] = []
    for seed in seeds:
        specs.append((f"s{seed}-omp", seed, "omp", a.n, 0.0))
        specs.append((f"s{seed}-pi", seed, "pi", a.n, 0.0))
    for extra in a.extra if a.extra is not None else ["pi:15:60"]:
        flavour, seed_s, n_s = extra.split(":")
        assert flavour in ("omp", "pi"), extra
        specs.append((f"x{seed_s}-{flavour}", int(seed_s), flavour, int(n_s), 0.0))
    specs.append((f"huge{a.huge_seed}-pi", a.huge_seed, "pi", a.huge_n, a.huge_p))

    manifest: dict[str, Any] = {
        "generatedBy": "python scripts/gen_peer_data.py " + " ".join(argv or sys.argv[1:]),
        "peers": peers.versions(),
        "layout": (
            "ops/<script>.json.gz: op scripts (an op generator's, or replayed). <case>/: "
            "files written by one peer from one script, blobs/<sha256> (omp), "
            "<file stem>/tree.json, contexts.jsonl, "
            "context_default.json (pi-written), omp_context_default.json (omp-written)"
        ),
        "scripts": {},
        "cases": [],
    }

    for name, seed, flavour, n, p_huge in specs:
        ops_path = work / "ops" / f"{name}.json"
        ops_path.parent.mkdir(exist_ok=True)
        if a.gen_ops is not None:
            cmd = [sys.executable, str(a.gen_ops), "--seed", str(seed), "--n", str(n)]
            cmd += ["--p-huge", str(p_huge)] + (["--pi"] if flavour == "pi" else [])
            cmd += ["-o", str(ops_path)]
            sh(cmd, env=peers.env)
        elif name in committed:
            cmd = ["zcat", f"tests/data/peers/ops/{name}.json.gz"]
            ops_path.write_bytes(committed[name])
        else:
            sys.stderr.write(f"gen_peer_data: no committed op script {name} (use --gen-ops)\n")
            return 1
        with open(ops_path, "rb") as src, open(out / "ops" / f"{name}.json.gz", "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as gz:
                shutil.copyfileobj(src, gz)
        manifest["scripts"][name] = {
            "file": f"ops/{name}.json.gz",
            "seed": seed,
            "flavour": flavour,
            "n": n,
            "pHuge": p_huge,
            "command": cmd,
        }
        writers = ["omp", "pi"] if flavour == "pi" else ["omp"]
        for writer in writers:
            manifest["cases"].append(
                run_case(
                    peers, work, out, name, seed, flavour, writer, ops_path, a.max_context_bytes
                )
            )

    write_text(out / "manifest.json", json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    shutil.rmtree(work, ignore_errors=True)

    total = dir_size(out)
    print(f"\n{'case':<22} {'files':>5} {'bytes':>10}")
    for case in manifest["cases"]:
        size = dir_size(out / case["name"])
        print(f"{case['name']:<22} {len(case['files']):>5} {size:>10}")
    print(f"{'ops/':<22} {'':>5} {dir_size(out / 'ops'):>10}")
    print(f"total {total} bytes ({total / 1024 / 1024:.2f} MiB) in {out}")
    if total > SIZE_BUDGET:
        print(f"WARNING: over the {SIZE_BUDGET // 1024 // 1024} MiB budget: lower --n")
    return 0


def run_case(
    peers: Peers,
    work: Path,
    out: Path,
    script: str,
    seed: int,
    flavour: str,
    writer: str,
    ops_path: Path,
    limit: int,
) -> dict[str, Any]:
    case = f"{script}-by-{writer}"
    print(f"== {case}", flush=True)
    run_dir = work / case
    blobs_work = run_dir / "blobs"
    run_cmd = [*peers.oracle(writer), "run", str(ops_path), str(run_dir), "--json"]
    if writer == "omp":
        run_cmd += ["--blobs", str(blobs_work)]
    res = json.loads(sh(run_cmd, env=peers.env))
    case_dir = out / case
    case_dir.mkdir(parents=True)

    files: list[dict[str, Any]] = []
    seen: set[str] = set()
    final = res["sessionFile"]
    referenced: set[str] = set()
    for index, src in enumerate(res["sessionFiles"]):
        if src in seen:
            continue
        seen.add(src)
        base = os.path.basename(src)
        rec: dict[str, Any] = {"file": base, "index": index, "final": src == final}
        if not os.path.exists(src):
            rec["exists"] = False
            files.append(rec)
            continue
        rec["exists"] = True
        shutil.copyfile(src, case_dir / base)
        with open(src, encoding="utf-8") as f:
            referenced.update(BLOB_REF.findall(f.read()))
        stem = Path(base).stem
        side = case_dir / stem
        side.mkdir()
        commands: dict[str, list[str]] = {}

        tree_cmd = [*peers.oracle(writer), "tree", src, "--flat"]
        write_text(side / "tree.json", sh(tree_cmd, env=peers.env))
        commands["tree"] = tree_cmd
        rec["tree"] = f"{stem}/tree.json"

        if writer == "pi":
            all_cmd = [*peers.oracle("pi"), "context", src, "--all-leaves"]
            raw = sh(all_cmd, env=peers.env)
            compact_cmd = [peers.node, "-e", "<COMPACT_CONTEXTS_JS in gen_peer_data.py>"]
            compact = sh([peers.node, "-e", COMPACT_CONTEXTS_JS], env=peers.env, stdin=raw)
            write_text(side / "contexts.jsonl", compact)
            commands["contexts"] = all_cmd
            commands["contextsCompaction"] = compact_cmd
            rec["contexts"] = f"{stem}/contexts.jsonl"
            rec["leaves"] = compact.count("\n")
            def_cmd = [*peers.oracle("pi"), "context", src]
            write_text(
                side / "context_default.json", shrink(peers, sh(def_cmd, env=peers.env), limit)
            )
            commands["contextDefault"] = def_cmd
            rec["contextDefault"] = f"{stem}/context_default.json"
        else:
            omp_cmd = [*peers.oracle("omp"), "context", src, "--blobs", str(blobs_work)]
            text = shrink(peers, sh(omp_cmd, env=peers.env), limit)
            write_text(side / "omp_context_default.json", text)
            commands["ompContextDefault"] = omp_cmd
            rec["ompContextDefault"] = f"{stem}/omp_context_default.json"
        with open(src, "rb") as fb:
            rec["sha256"] = hashlib.sha256(fb.read()).hexdigest()
        rec["commands"] = commands
        files.append(rec)

    blobs_rel: str | None = None
    if referenced:
        (case_dir / "blobs").mkdir()
        for h in sorted(referenced):
            shutil.copyfile(blobs_work / h, case_dir / "blobs" / h)
        blobs_rel = "blobs"
    return {
        "name": case,
        "script": script,
        "seed": seed,
        "flavour": flavour,
        "writer": writer,
        "blobs": blobs_rel,
        "blobCount": len(referenced),
        "run": {
            "command": run_cmd,
            "sessionFile": os.path.basename(final),
            "exists": res["exists"],
            "leafId": res["leafId"],
            "ids": res["ids"],
        },
        "files": files,
    }


if __name__ == "__main__":
    raise SystemExit(main())
