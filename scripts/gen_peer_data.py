#!/usr/bin/env python3
"""Regenerate tests/data/peers/: session files written by the TypeScript peers.

Dev tool: needs the peers (``scripts/peers/setup`` installs them), found where the tests
find them (``tests/peers.py``: the project's oracles), and ``node``. CI does not run it;
the tests only read what it commits.

    python scripts/gen_peer_data.py [--seeds 1,2,3,4] [--n 100] [--extra pi:15:60]
                                    [--huge-seed 49] [--huge-n 12] [--huge-p 0.1]
                                    [--pi16-seed 21] [--pi16-n 80] [--fresh]
                                    [--gen-ops GENERATOR]

The op scripts are the committed ones (``tests/data/peers/ops``), replayed through today's
peers; with ``--gen-ops`` a generator (``GENERATOR --seed S --n N --p-huge P [--pi] -o
FILE``, e.g. the peers' ``gen_ops.py``) makes them anew, and the seeds, ``--n`` and the
``--huge-*``/``--pi16-*`` options take effect.

Peers: ``omp`` (oh-my-pi 18.2.3), ``pi`` (pi 0.73.1) and ``pi16`` (pi 1.6.0). For every
seed two op scripts (omp flavour and ``--pi`` flavour, both with
``--p-huge 0``), the ``--extra`` scripts (default: pi flavour, seed 15, 60 ops, chosen
because its createBranchedSession leaves an orphan entry), one small pi-flavour script
with huge (>500000-char) strings, and one ``pi16``-flavour script: the pi flavour of
``--pi16-seed`` with, in place (refs unchanged), two user messages turned into role
``"system"`` messages (the first with ``toolsAdded``, a later one with ``sections``), one
user and one assistant message given ``"content": null`` and the first thinking-level
change set to ``null`` (what pi 1.6 sessions hold and 0.73.1's ops can still append; pi
1.6 itself then gives its compactions a ``systemMessage``). omp runs the omp and pi
flavours, pi and pi16 run the pi and pi16 flavours. Every session file a run produced
lands in ``tests/data/peers/<case>/`` (``<case>`` = ``<script>-by-<writer>``, file name
kept), with:

* ``blobs/<sha256>``: the blobs that omp externalised and the case's files reference;
* ``<file stem>/tree.json``: the writing peer's ``tree FILE --flat`` output;
* pi- and pi16-written files, read by both pi releases (each file is read by the release
  that did not write it too): per reader, one compact line per leaf of ``context FILE
  --all-leaves`` (leafId, thinkingLevel, model, messageCount and messagesSha256 = sha256
  of the UTF-8 bytes of ``JSON.stringify(messages)``, computed in node) and the full
  default-leaf context. pi 0.73.1's are ``contexts.jsonl`` and ``context_default.json``,
  pi 1.6.0's ``contexts-pi16.jsonl`` and ``context_default-pi16.json``; a reader whose
  output is byte-identical to the other's is pointed at the other's file instead (the
  manifest's ``readers`` say which file each reader's output is in);
* omp-written files: ``<file stem>/omp_context_default.json`` (omp's ``context FILE
  --blobs DIR``, for reference).

A default-leaf context over ``--max-context-bytes`` (256 KiB) is stored without its
messages (``messagesOmitted: {count, sha256}`` instead).

A peer mints new ids and timestamps on every run, so the files of a case are kept as they
are when its op script, its writer's release and the generator's settings did not change
(``--fresh`` runs every script again); what the readers report about them is computed
again every time (it is deterministic: an unchanged reader gives the same bytes).

The op scripts go to ``tests/data/peers/ops/<script>.json.gz`` (gzip, mtime 0: the
huge strings compress from 1 MB to a few KB; ``zcat`` them to feed a peer's ``run``)
and everything (cases, writers, readers, the peers' releases, flavours, seeds, exact
commands, the id each op returned) to ``tests/data/peers/manifest.json``.
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
sys.path.insert(0, str(ROOT / "tests"))
# tests/peers.py: where the peers are installed and how to run them, as the tests do.
import peers as test_peers  # noqa: E402

BLOB_REF = re.compile(r"blob:sha256:([0-9a-f]{64})")
SIZE_BUDGET = 12 * 1024 * 1024

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


WRITERS = {"omp": ["omp"], "pi": ["omp", "pi", "pi16"], "pi16": ["pi", "pi16"]}
"""Which peers run the op scripts of each flavour."""
READERS = {"omp": ["omp"], "pi": ["pi", "pi16"], "pi16": ["pi16", "pi"]}
"""Whose context is recorded for the files each peer wrote (the writer first)."""
READOUT_NAMES = {
    "pi": ("contexts.jsonl", "context_default.json"),
    "pi16": ("contexts-pi16.jsonl", "context_default-pi16.json"),
}


class Peers:
    """The peers as `tests/peers.py` finds them: the same runners the tests use."""

    def __init__(self) -> None:
        self.found: dict[str, test_peers.Peer] = {}
        for name in test_peers.PEERS:
            peer = test_peers.find(name)
            if peer is not None:
                self.found[name] = peer
        self.node = shutil.which("node") or "node"
        self.env = {**os.environ}

    def missing(self) -> list[str]:
        return [name for name in test_peers.PEERS if name not in self.found]

    def oracle(self, peer: str) -> list[str]:
        return list(self.found[peer].runner)

    def peer_env(self, peer: str) -> dict[str, str]:
        return self.found[peer].env

    def versions(self) -> dict[str, str]:
        out = {}
        for name, peer in self.found.items():
            runtime = peer.runner[0]
            kind = "bun" if os.path.basename(runtime) == "bun" else "node"
            rv = sh([runtime, "--version"], env=peer.env).strip()
            out[name] = f"{test_peers.PACKAGES[name]}@{peer.version} on {kind} {rv}"
        return out


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


def pi16_flavour(ops: dict[str, Any]) -> dict[str, Any]:
    """The pi flavour script `ops` with what pi 1.6 sessions hold, changed in place so that
    every ref stays valid: two user messages become role "system" messages (the initial
    prompt with its tools; later, a patched prompt section), one user and one assistant
    message get `"content": null`, the first thinking-level change becomes null."""
    out = json.loads(json.dumps(ops))
    out["peer"] = "pi16"
    steps = out["ops"]
    users = [
        i
        for i, o in enumerate(steps)
        if o["op"] == "appendMessage" and o["message"]["role"] == "user"
    ]
    assistants = [
        i
        for i, o in enumerate(steps)
        if o["op"] == "appendMessage" and o["message"]["role"] == "assistant"
    ]
    thinking = [i for i, o in enumerate(steps) if o["op"] == "appendThinkingLevelChange"]
    assert len(users) >= 4 and len(assistants) >= 3 and thinking, "script too small"
    tool = {
        "name": "bash",
        "description": "Run a shell command in the project directory.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    }
    first = steps[users[0]]["message"]
    steps[users[0]]["message"] = {
        "role": "system",
        "content": "You are a coding agent. Keep changes small.",
        "toolsAdded": [tool],
        "timestamp": first["timestamp"],
    }
    later = steps[users[2]]["message"]
    steps[users[2]]["message"] = {
        "role": "system",
        "content": "",
        "sections": {"project": "The project is a session store.", "style": None},
        "timestamp": later["timestamp"],
    }
    steps[users[3]]["message"] = {**steps[users[3]]["message"], "content": None}
    steps[assistants[2]]["message"] = {**steps[assistants[2]]["message"], "content": None}
    steps[thinking[0]]["thinkingLevel"] = None
    return out


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
    ap.add_argument("--pi16-seed", type=int, default=21, help="seed of the pi16-flavour script")
    ap.add_argument("--pi16-n", type=int, default=80, help="ops in the pi16-flavour script")
    ap.add_argument(
        "--max-context-bytes",
        type=int,
        default=256 * 1024,
        help="a default-leaf context bigger than this is stored without its messages\n"
        "(replaced by messagesOmitted: {count, sha256}); default 262144",
    )
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument(
        "--fresh",
        action="store_true",
        help="run every op script again (new ids and timestamps in every file); by default\n"
        "a case whose script, writer release and settings are unchanged keeps its files",
    )
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
    if peers.missing():
        sys.stderr.write(
            f"gen_peer_data: peers missing: {', '.join(peers.missing())} "
            "(install them: scripts/peers/setup)\n"
        )
        return 1
    seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    versions = peers.versions()

    out: Path = a.out.resolve()
    old_manifest: dict[str, Any] = {}
    if out.exists() and (out / "manifest.json").exists() and not a.fresh:
        old_manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    old_cases = {c["name"]: c for c in old_manifest.get("cases", [])}
    work: Path = a.work.resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    stage = work / "out"
    (stage / "ops").mkdir(parents=True)

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
    specs.append((f"s{a.pi16_seed}-pi16", a.pi16_seed, "pi16", a.pi16_n, 0.0))

    kept_cases: set[str] = set()
    manifest: dict[str, Any] = {
        "generatedBy": "python scripts/gen_peer_data.py " + " ".join(argv or sys.argv[1:]),
        "peers": versions,
        "layout": (
            "ops/<script>.json.gz: op scripts (an op generator's, replayed; the pi16 flavour "
            "changed in place, see gen_peer_data.pi16_flavour). <case>/: files written by one "
            "peer from one script, blobs/<sha256> (omp), <file stem>/tree.json (the writer's), "
            "and per reader (files[].readers: pi, pi16) its contexts (--all-leaves, compacted) "
            "and contextDefault (pi- and pi16-written), omp_context_default.json (omp-written)"
        ),
        "scripts": {},
        "cases": [],
    }

    for name, seed, flavour, n, p_huge in specs:
        ops_path = work / "ops" / f"{name}.json"
        ops_path.parent.mkdir(exist_ok=True)
        committed = DEFAULT_OUT / "ops" / f"{name}.json.gz"
        if a.gen_ops is not None:
            cmd = [sys.executable, str(a.gen_ops), "--seed", str(seed), "--n", str(n)]
            cmd += ["--p-huge", str(p_huge)] + (["--pi"] if flavour in ("pi", "pi16") else [])
            cmd += ["-o", str(ops_path)]
            sh(cmd, env=peers.env)
            if flavour == "pi16":
                changed = pi16_flavour(json.loads(ops_path.read_text(encoding="utf-8")))
                write_text(ops_path, json.dumps(changed, indent=1, ensure_ascii=False) + "\n")
        elif committed.is_file():
            cmd = ["zcat", f"tests/data/peers/ops/{name}.json.gz"]
            ops_path.write_bytes(gzip.decompress(committed.read_bytes()))
        else:
            sys.stderr.write(f"gen_peer_data: no committed op script {committed} (use --gen-ops)\n")
            return 1
        gz_path = stage / "ops" / f"{name}.json.gz"
        with open(ops_path, "rb") as src, open(gz_path, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as gz:
                shutil.copyfileobj(src, gz)
        unchanged_script = (out / "ops" / f"{name}.json.gz").is_file() and (
            out / "ops" / f"{name}.json.gz"
        ).read_bytes() == gz_path.read_bytes()
        manifest["scripts"][name] = {
            "file": f"ops/{name}.json.gz",
            "seed": seed,
            "flavour": flavour,
            "n": n,
            "pHuge": p_huge,
            "command": cmd,
        }
        if flavour == "pi16":
            manifest["scripts"][name]["changedBy"] = "gen_peer_data.pi16_flavour"
        for writer in WRITERS[flavour]:
            case = f"{name}-by-{writer}"
            old = old_cases.get(case)
            keep = (
                old is not None
                and unchanged_script
                and (out / case).is_dir()
                and old_manifest.get("peers", {}).get(writer) == versions[writer]
            )
            if keep:
                assert old is not None
                kept_cases.add(case)
                manifest["cases"].append(keep_case(peers, out, stage, old, a.max_context_bytes))
            else:
                manifest["cases"].append(
                    run_case(
                        peers,
                        work,
                        stage,
                        name,
                        seed,
                        flavour,
                        writer,
                        ops_path,
                        a.max_context_bytes,
                        out,
                    )
                )

    write_text(stage / "manifest.json", json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(stage, out)
    shutil.rmtree(work, ignore_errors=True)

    total = dir_size(out)
    print(f"\n{'case':<22} {'files':>5} {'bytes':>10} kept")
    for case in manifest["cases"]:
        size = dir_size(out / case["name"])
        kept = "yes" if case["name"] in kept_cases else ""
        print(f"{case['name']:<22} {len(case['files']):>5} {size:>10} {kept}")
    print(f"{'ops/':<22} {'':>5} {dir_size(out / 'ops'):>10}")
    print(f"total {total} bytes ({total / 1024 / 1024:.2f} MiB) in {out}")
    if total > SIZE_BUDGET:
        print(f"WARNING: over the {SIZE_BUDGET // 1024 // 1024} MiB budget: lower --n")
    return 0


def read_back(
    peers: Peers, path: Path, shown: str, side: Path, stem: str, readers: list[str], limit: int
) -> dict[str, Any]:
    """Each reader's contexts of the pi-format session file at `path` (every leaf, and the
    default leaf in full), written beside it in `side`; an output byte-identical to an
    earlier reader's is not written again, the reader points at that file. The commands
    are recorded with `shown`, where the file is committed."""
    out: dict[str, Any] = {}
    written: dict[str, str] = {}  # text -> the file (relative to the case) holding it
    for reader in readers:
        contexts_name, default_name = READOUT_NAMES[reader]
        all_cmd = [*peers.oracle(reader), "context", str(path), "--all-leaves"]
        raw = sh(all_cmd, env=peers.peer_env(reader))
        compact = sh([peers.node, "-e", COMPACT_CONTEXTS_JS], env=peers.env, stdin=raw)
        def_cmd = [*peers.oracle(reader), "context", str(path)]
        default = shrink(peers, sh(def_cmd, env=peers.peer_env(reader)), limit)
        rec: dict[str, Any] = {}
        for key, name, text in (
            ("contexts", contexts_name, compact),
            ("contextDefault", default_name, default),
        ):
            if text not in written:
                write_text(side / name, text)
                written[text] = f"{stem}/{name}"
            rec[key] = written[text]
        rec["leaves"] = compact.count("\n")
        rec["commands"] = {
            "contexts": [*all_cmd[:-2], shown, "--all-leaves"],
            "contextsCompaction": [peers.node, "-e", "<COMPACT_CONTEXTS_JS in gen_peer_data.py>"],
            "contextDefault": [*def_cmd[:-1], shown],
        }
        out[reader] = rec
    return out


def committed_path(out: Path, case: str, file: str) -> str:
    """Where a case's file is committed, as a path from the repository's root when inside."""
    path = out / case / file
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def keep_case(
    peers: Peers, out: Path, stage: Path, old: dict[str, Any], limit: int
) -> dict[str, Any]:
    """A case whose files stay as they are (copied from `out`), read again by its readers."""
    name = old["name"]
    print(f"== {name} (kept)", flush=True)
    case_dir = stage / name
    shutil.copytree(out / name, case_dir)
    files = []
    for old_rec in old["files"]:
        rec = {k: v for k, v in old_rec.items() if k not in ("contexts", "contextDefault")}
        rec.pop("leaves", None)
        if not rec["exists"] or old["writer"] == "omp":
            files.append(rec)
            continue
        stem = Path(rec["file"]).stem
        side = case_dir / stem
        for names in READOUT_NAMES.values():
            for readout in names:
                (side / readout).unlink(missing_ok=True)
        commands = {
            k: v
            for k, v in rec["commands"].items()
            if k not in ("contexts", "contextsCompaction", "contextDefault")
        }
        rec["commands"] = commands
        rec["readers"] = read_back(
            peers,
            case_dir / rec["file"],
            committed_path(out, name, rec["file"]),
            side,
            stem,
            READERS[old["writer"]],
            limit,
        )
        files.append(rec)
    return {**old, "files": files}


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
    final_out: Path,
) -> dict[str, Any]:
    case = f"{script}-by-{writer}"
    print(f"== {case}", flush=True)
    run_dir = work / case
    blobs_work = run_dir / "blobs"
    run_cmd = [*peers.oracle(writer), "run", str(ops_path), str(run_dir), "--json"]
    if writer == "omp":
        run_cmd += ["--blobs", str(blobs_work)]
    res = json.loads(sh(run_cmd, env=peers.peer_env(writer)))
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
        write_text(side / "tree.json", sh(tree_cmd, env=peers.peer_env(writer)))
        commands["tree"] = tree_cmd
        rec["tree"] = f"{stem}/tree.json"

        if writer == "omp":
            omp_cmd = [*peers.oracle("omp"), "context", src, "--blobs", str(blobs_work)]
            text = shrink(peers, sh(omp_cmd, env=peers.peer_env("omp")), limit)
            write_text(side / "omp_context_default.json", text)
            commands["ompContextDefault"] = omp_cmd
            rec["ompContextDefault"] = f"{stem}/omp_context_default.json"
        with open(src, "rb") as fb:
            rec["sha256"] = hashlib.sha256(fb.read()).hexdigest()
        rec["commands"] = commands
        if writer != "omp":
            shown = committed_path(final_out, case, base)
            rec["readers"] = read_back(
                peers, case_dir / base, shown, side, stem, READERS[writer], limit
            )
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
