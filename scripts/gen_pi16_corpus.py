#!/usr/bin/env python3
"""Regenerate tests/data/pi16/: session files written by pi 1.6.0 itself.

Dev tool: needs pi 1.6.0 and Node 22 (``scripts/peers/setup`` installs them into
``$SESSIONTREE_PEERS``, default ``.peers``). CI does not run it; the tests read
what it commits and compare sessiontree's context with live pi 1.6.0's on every leaf.

    python scripts/gen_pi16_corpus.py [--seeds 1-8] [--n 70] [--out tests/data/pi16]

For every seed a random op script is made here (Python's ``random.Random(seed)``, so the
same seed gives the same script) and run by pi 1.6.0's own ``SessionManager``
(``dist/core/session-manager.js``) under Node 22, so every line in the files is what
pi 1.6.0 writes. The scripts exercise what 1.6.0 added to the context: role "system"
messages (some before a compaction's kept range, so pi drops them there, and so
``appendCompaction`` records the replayed system message as ``systemMessage``),
``appendContextEdit`` (null and string/array replacements, several edits of one
target, edits on other branches), ``appendCompaction`` with no first kept entry
("retain none": ``firstKeptEntryId`` is its own id) and with ``usage``, messages with
``content: null``, ``thinkingLevel: null``, ``appendUsage``, branch summaries, branches.

Ops pick their targets when they run ("the k-th editable entry on the active
branch"), so a script stays valid whatever ids pi mints. Ids and timestamps are pi's
(random, wall clock): a regenerated corpus differs in them, not in shape.

Output: ``<out>/s<seed>.jsonl`` (renamed from pi's ``<time>_<uuid>.jsonl``), the op
scripts in ``<out>/ops/s<seed>.json`` and ``<out>/manifest.json`` (seed, n, command, and
per file the id of the entry each op made, or null).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "data" / "pi16"

# Runs one op script (argv[1]) with pi 1.6.0's SessionManager into argv[2]; prints
# {"files": [...], "ids": [...]}.
DRIVER_JS = r"""
import * as fs from "node:fs";
import * as path from "node:path";
import { pathToFileURL } from "node:url";
const [opsPath, outDir, piDir] = process.argv.slice(2);
const sm_mod = await import(pathToFileURL(path.join(piDir,
  "node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js")).href);
const { SessionManager } = sm_mod;
const script = JSON.parse(fs.readFileSync(opsPath, "utf8"));
const sm = SessionManager.create(script.cwd, outDir);
const ids = [];
const pick = (list, k) => (list.length ? list[k % list.length] : undefined);
const editable = () => sm.getBranch().filter((e) =>
  e.type === "custom_message" ||
  (e.type === "message" && ["user", "assistant", "toolResult"].includes(e.message.role)));
for (const op of script.ops) {
  let id = null;
  switch (op.op) {
    case "message": id = sm.appendMessage(op.message); break;
    case "thinking": id = sm.appendThinkingLevelChange(op.thinkingLevel); break;
    case "model": id = sm.appendModelChange(op.provider, op.modelId); break;
    case "custom":
      id = sm.appendCustomMessageEntry(op.customType, op.content, op.display, op.details);
      break;
    case "usage": id = sm.appendUsage(op.kind, op.provider, op.model, op.usage, op.note).id; break;
    case "edit": {
      const target = pick(editable(), op.pick);
      if (target) id = sm.appendContextEdit(target.id, op.replacement);
      break;
    }
    case "compaction": {
      const branch = sm.getBranch();
      const first = op.pick === null ? undefined : pick(branch, op.pick)?.id;
      id = sm.appendCompaction(
        op.summary, first, op.tokensBefore, op.details, op.fromHook, op.usage);
      break;
    }
    case "branch": {
      const target = pick([...sm.getEntries()], op.pick);
      if (target) sm.branch(target.id);
      break;
    }
    case "branchSummary": {
      const target = pick([...sm.getEntries()], op.pick);
      if (target) id = sm.branchWithSummary(target.id, op.summary, undefined, undefined, op.usage);
      break;
    }
    case "label": {
      const target = pick([...sm.getEntries()], op.pick);
      if (target) id = sm.appendLabelChange(target.id, op.label);
      break;
    }
    case "name": id = sm.appendSessionInfo(op.name); break;
    default: throw new Error(`unknown op ${op.op}`);
  }
  ids.push(id);
}
process.stdout.write(JSON.stringify({ files: [sm.getSessionFile()], ids }) + "\n");
"""

PROVIDERS = [("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-5.1"), ("google", "gemini-3")]
TOOLS = [
    {"name": "read", "description": "Read a file", "parameters": {"type": "object"}},
    {"name": "bash", "description": "Run a command", "parameters": {"type": "object"}},
]


def usage(rng: random.Random) -> dict[str, Any]:
    inp, out = rng.randint(10, 5000), rng.randint(1, 800)
    read = rng.choice([0, rng.randint(1, 20000)])
    return {
        "input": inp,
        "output": out,
        "cacheRead": read,
        "cacheWrite": 0,
        "totalTokens": inp + out + read,
        "cost": {"input": 0.001, "output": 0.002, "cacheRead": 0, "cacheWrite": 0, "total": 0.003},
    }


class Script:
    """A random op script; `clock` gives message timestamps (ms) that only go up."""

    def __init__(self, seed: int, n: int) -> None:
        self.rng = random.Random(seed)
        self.n = n
        self.ops: list[dict[str, Any]] = []
        self.clock = 1_763_000_000_000 + seed * 10_000_000
        self.pending_calls: list[str] = []

    def ts(self) -> int:
        self.clock += self.rng.randint(1, 90_000)
        return self.clock

    def text(self, what: str) -> str:
        return f"{what} {self.rng.randint(0, 10**6)}"

    def user(self) -> dict[str, Any]:
        rng = self.rng
        r = rng.random()
        message: dict[str, Any] = {"role": "user"}
        if r < 0.08:
            message["content"] = None
        elif r < 0.5:
            message["content"] = self.text("question")
        else:
            message["content"] = [{"type": "text", "text": self.text("question")}]
        message["timestamp"] = self.ts()
        return message

    def system(self) -> dict[str, Any]:
        rng = self.rng
        message: dict[str, Any] = {"role": "system"}
        r = rng.random()
        if r < 0.1:
            message["content"] = None
        elif r < 0.6:
            message["content"] = self.text("You are a careful assistant.")
        else:
            message["content"] = [{"type": "text", "text": self.text("Also follow rule")}]
        if rng.random() < 0.5:
            message["sections"] = {
                rng.choice(["style", "env", "memory"]): rng.choice([None, self.text("<section>")])
            }
        if rng.random() < 0.4:
            message["toolsAdded"] = [rng.choice(TOOLS)]
        if rng.random() < 0.2:
            message["toolsRemoved"] = [{"name": rng.choice(TOOLS)["name"]}]
        message["timestamp"] = self.ts()
        return message

    def assistant(self) -> dict[str, Any]:
        rng = self.rng
        provider, model = rng.choice(PROVIDERS)
        content: list[dict[str, Any]] | None = []
        if rng.random() < 0.3:
            content.append({"type": "thinking", "thinking": self.text("hmm")})
        content.append({"type": "text", "text": self.text("answer")})
        if rng.random() < 0.35:
            call = f"call_{rng.randint(0, 10**9)}"
            self.pending_calls.append(call)
            content.append(
                {"type": "toolCall", "id": call, "name": "read", "arguments": {"path": "a.py"}}
            )
        if rng.random() < 0.05:
            content = None
        message = {
            "role": "assistant",
            "content": content,
            "api": "anthropic-messages",
            "provider": provider,
            "model": model,
            "usage": usage(rng),
            "stopReason": "toolUse" if self.pending_calls else "stop",
            "timestamp": self.ts(),
        }
        if rng.random() < 0.2:
            message["thinkingLevel"] = rng.choice(["low", "high"])
        return message

    def tool_result(self) -> dict[str, Any]:
        call = self.pending_calls.pop(0)
        content = None if self.rng.random() < 0.06 else [{"type": "text", "text": self.text("ok")}]
        return {
            "role": "toolResult",
            "toolCallId": call,
            "toolName": "read",
            "content": content,
            "isError": False,
            "timestamp": self.ts(),
        }

    def replacement(self) -> dict[str, Any] | None:
        r = self.rng.random()
        if r < 0.35:
            return None
        if r < 0.7:
            return {"content": self.text("edited")}
        return {"content": [{"type": "text", "text": self.text("edited block")}]}

    def build(self) -> dict[str, Any]:
        rng, ops = self.rng, self.ops
        ops.append({"op": "message", "message": self.system()})
        ops.append({"op": "message", "message": self.user()})
        while len(ops) < self.n:
            r = rng.random()
            if self.pending_calls and r < 0.5:
                ops.append({"op": "message", "message": self.tool_result()})
            elif r < 0.30:
                ops.append({"op": "message", "message": self.user()})
            elif r < 0.50:
                ops.append({"op": "message", "message": self.assistant()})
            elif r < 0.57:
                ops.append({"op": "message", "message": self.system()})
            elif r < 0.67:
                ops.append(
                    {"op": "edit", "pick": rng.randint(0, 99), "replacement": self.replacement()}
                )
            elif r < 0.72:
                retain_none = rng.random() < 0.4
                op: dict[str, Any] = {
                    "op": "compaction",
                    "summary": self.text("summary"),
                    "pick": None if retain_none else rng.randint(0, 99),
                    "tokensBefore": rng.randint(1000, 90000),
                }
                if rng.random() < 0.5:
                    op["details"] = {"readFiles": ["a.py"], "modifiedFiles": []}
                if rng.random() < 0.5:
                    op["usage"] = usage(rng)
                if rng.random() < 0.2:
                    op["fromHook"] = True
                ops.append(op)
            elif r < 0.76:
                level = rng.choice([None, "off", "low", "medium", "high"])
                ops.append({"op": "thinking", "thinkingLevel": level})
            elif r < 0.79:
                provider, model = rng.choice(PROVIDERS)
                ops.append({"op": "model", "provider": provider, "modelId": model})
            elif r < 0.83:
                content: Any = rng.choice(
                    [self.text("note"), [{"type": "text", "text": self.text("note")}], None]
                )
                ops.append(
                    {
                        "op": "custom",
                        "customType": "note",
                        "content": content,
                        "display": rng.random() < 0.5,
                        "details": {"k": 1} if rng.random() < 0.3 else None,
                    }
                )
            elif r < 0.86:
                provider, model = rng.choice(PROVIDERS)
                op = {
                    "op": "usage",
                    "kind": "title",
                    "provider": provider,
                    "model": model,
                    "usage": usage(rng),
                }
                if rng.random() < 0.5:
                    op["note"] = "session title"
                ops.append(op)
            elif r < 0.92:
                self.pending_calls.clear()
                ops.append({"op": "branch", "pick": rng.randint(0, 999)})
            elif r < 0.95:
                self.pending_calls.clear()
                ops.append(
                    {
                        "op": "branchSummary",
                        "pick": rng.randint(0, 999),
                        "summary": self.text("branch summary"),
                        "usage": usage(rng) if rng.random() < 0.5 else None,
                    }
                )
            elif r < 0.98:
                ops.append({"op": "label", "pick": rng.randint(0, 999), "label": self.text("l")})
            else:
                ops.append({"op": "name", "name": self.text("  session name ")})
        return {"cwd": "/work/project", "ops": ops}


def seeds_arg(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1-8", type=seeds_arg)
    parser.add_argument("--n", type=int, default=70, help="ops per script")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    installed = Path(os.environ.get("SESSIONTREE_PEERS") or ROOT / ".peers")
    node = installed / "node22" / "bin" / "node"
    pi_dir = Path(os.environ.get("SESSIONTREE_PEER_PI16") or installed / "pi16")
    if not node.is_file() or not pi_dir.is_dir():
        print(f"pi 1.6.0 or Node 22 missing in {installed} (scripts/peers/setup)", file=sys.stderr)
        return 2
    out: Path = args.out
    (out / "ops").mkdir(parents=True, exist_ok=True)
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        driver = Path(tmp) / "driver.mjs"
        driver.write_text(DRIVER_JS, encoding="utf-8")
        for seed in args.seeds:
            script = Script(seed, args.n).build()
            ops_path = out / "ops" / f"s{seed}.json"
            ops_path.write_text(json.dumps(script, indent=1) + "\n", encoding="utf-8")
            run_dir = Path(tmp) / f"s{seed}"
            run_dir.mkdir()
            env = {**os.environ, "HOME": tmp, "PI_CODING_AGENT_DIR": tmp}
            done = subprocess.run(
                [str(node), str(driver), str(ops_path), str(run_dir), str(pi_dir)],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            )
            result = json.loads(done.stdout)
            name = f"s{seed}.jsonl"
            shutil.copyfile(result["files"][0], out / name)
            cases.append(
                {"seed": seed, "file": name, "ops": f"ops/s{seed}.json", "ids": result["ids"]}
            )
    manifest = {
        "writer": "@earendil-works/pi-coding-agent@1.6.0 (SessionManager, Node 22)",
        "command": " ".join(["python", "scripts/gen_pi16_corpus.py", *sys.argv[1:]]),
        "n": args.n,
        "cases": cases,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
