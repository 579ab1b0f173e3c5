#!/usr/bin/env python3
"""Write `tests/data/foreign/oracles.json`: what the TypeScript peers make of the real
Claude Code and Codex files, so `tests/interop/test_foreign_oracles.py` compares against them
without node or bun.

Needs the peers (`scripts/peers/setup` installs them; they are driven through
`scripts/peers/oracle`). For every file of `tests/data/real/foreign`:

* `omp`: oh-my-pi's own importers (`omp-oracle.mjs foreign claude|codex ROOT`, on the
  files laid out as the agents store them): the streams of its converted entries
  (`foreign_support.streams`), usage per response id, or its error;
* the file imported by sessiontree (`foreign_support.import_all`; entry ids derive from
  the source, so a re-import gives the same tree), then for each file written:
  `pi`: pi's `context FILE --all-leaves`, one record per leaf (leaf id, message count,
  sha256 of `JSON.stringify(messages)` as computed here from pi's output, thinking
  level, model); `ompTree`: omp's `tree FILE --flat`.

    .venv/bin/python scripts/gen_foreign_oracles.py [--fixtures DIR]
"""

from __future__ import annotations

import argparse
import hashlib
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

import foreign_support as fs  # noqa: E402


def _run(cmd: list[str], env: dict[str, str]) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {res.returncode}: {res.stderr.strip()[:500]}")
    return res.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--fixtures", type=Path, default=ROOT / "tests" / "data" / "real" / "foreign")
    a = ap.parse_args(argv)
    setup = ROOT / "scripts" / "peers" / "setup"
    if subprocess.run([setup, "--check", "pi", "omp"], check=False).returncode != 0:
        raise SystemExit("needs the peers pi and omp (run scripts/peers/setup)")
    env = dict(os.environ)
    omp = [str(ROOT / "scripts" / "peers" / "oracle"), "omp"]
    pi = [str(ROOT / "scripts" / "peers" / "oracle"), "pi"]

    from sessiontree.format import serialize_entry

    work = Path(tempfile.mkdtemp(prefix="foreign-oracles-"))
    try:
        claude, codex, placed = fs.layout(a.fixtures, work / "stores")
        by_path = {str(p): name for name, p in placed.items()}
        result: dict[str, Any] = {"omp": {}, "pi": {}, "ompTree": {}, "files": {}}
        for kind, root in (("claude", claude), ("codex", codex)):
            for line in _run([*omp, "foreign", kind, str(root)], env).splitlines():
                record = json.loads(line)
                name = by_path.get(record["info"]["path"])
                if name is None:
                    continue
                if "error" in record:
                    result["omp"][name] = {"error": record["error"]}
                    continue
                result["omp"][name] = {
                    "streams": fs.streams(record["entries"]),
                    "usage": fs.response_usage(record["entries"]),
                    "contextRoles": [m["role"] for m in record["context"]["messages"]],
                }
        os.environ["PI_CODING_AGENT_DIR"] = str(work / "agent")
        written = fs.import_all(a.fixtures, work / "agent")
        for name, files in sorted(written.items()):
            result["files"][name] = len(files)
            for index, path in enumerate(files):
                key = f"{name}#{index}"
                leaves = []
                for line in _run([*pi, "context", path, "--all-leaves"], env).splitlines():
                    want = json.loads(line)
                    messages = [fs.pi_view(m) for m in want["context"]["messages"]]
                    text = "[" + ",".join(serialize_entry(m) for m in messages) + "]"
                    leaves.append(
                        {
                            "leafId": want["leafId"],
                            "messageCount": len(messages),
                            "messagesSha256": hashlib.sha256(text.encode()).hexdigest(),
                            "thinkingLevel": want["context"]["thinkingLevel"],
                            "model": want["context"]["model"],
                        }
                    )
                result["pi"][key] = leaves
                tree = json.loads(_run([*omp, "tree", path, "--flat"], env))
                result["ompTree"][key] = tree
        fs.DATA.mkdir(parents=True, exist_ok=True)
        out = fs.DATA / "oracles.json"
        out.write_text(json.dumps(result, sort_keys=True, separators=(",", ":")) + "\n")
        print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
