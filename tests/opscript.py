"""Run a peers op script (`scripts/peers/README.md`, "Op script format") through
sessiontree's `SessionManager`.

The script is `{"cwd"?, "ops": [...]}` or a bare list of ops. A *ref* N is the entry id
returned by op number N. Mapping (peer call -> sessiontree, see API.md):

=========================  ===============================================================
appendMessage              append_message(message)
appendThinkingLevelChange  append_thinking_level_change(thinkingLevel)  (`configured` has
                           no counterpart in the API and is ignored)
appendModelChange          append_model_change("provider/id", role)  (`model`, or
                           `provider` + `modelId`)
appendCompaction           append_compaction(summary, shortSummary, ref, tokensBefore,
                           details=, from_extension=)
appendCustomEntry          append_custom_entry(customType, data)
appendCustomMessageEntry   append_custom_message_entry(customType, content, display,
                           details=, attribution=attribution or "agent")
appendLabelChange          append_label_change(ref, label)  (null -> None = clear)
appendTtsrInjection        append_ttsr_injection(rules)
appendSessionInit          append_session_init(systemPrompt, task, tools, outputSchema)
                           (other keys of `init`, e.g. `agent`, have no API parameter)
appendModeChange           append_mode_change(mode, data)
branch                     branch(ref)
resetLeaf                  reset_leaf()
branchWithSummary          branch_with_summary(ref or None, summary, details=,
                           from_extension=)
setSessionName             set_session_name(name, source or "auto")
createBranchedSession      create_branched_session(ref)
flush                      flush()
=========================  ===============================================================

Absent optional fields are passed as `UNSET`. Ops that create no entry record `None` as
their id. `setSessionName` appends an entry in both peers (omp `title_change`, pi
`session_info`) but in sessiontree only in pi's store (a `session_info` entry, whose id
the op records); elsewhere, should a later op refer to it, the ref resolves to the leaf
the name was set on (its parent in the peers' files), which is how
`test_opscript_shapes` collapses those entries.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sessiontree import UNSET, SessionManager


class OpScriptError(Exception):
    """An op script that cannot run (bad ref, unknown op)."""


@dataclass
class OpRunResult:
    ids: list[str | None]  # entry id per op (None: the op made no entry)
    session_files: list[str | None]  # every file the manager pointed at, in order
    session_file: str | None  # the final sm.get_session_file()
    leaf_id: str | None
    aliases: dict[int, str | None] = field(default_factory=dict)  # setSessionName op -> leaf


def load_ops(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read an op script (`.json`, or gzip-compressed `.json.gz`)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    if isinstance(doc, list):
        return {"ops": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("ops"), list):
        raise OpScriptError("an op script is a list of ops or {ops: [...]}")
    return doc


def _get(op: dict[str, Any], key: str) -> Any:
    """op[key], with a missing key or JSON null as UNSET (JS `?? undefined`)."""
    value = op.get(key)
    return UNSET if value is None else value


def run_ops(sm: SessionManager, ops: list[dict[str, Any]]) -> OpRunResult:
    """Execute `ops` on `sm` (which is left open)."""
    ids: list[str | None] = []
    aliases: dict[int, str | None] = {}
    files: list[str | None] = [sm.get_session_file()]

    def ref(n: Any, i: int, what: str) -> str:
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n < i:
            raise OpScriptError(f"op {i}: {what} must be the index of an earlier op, got {n!r}")
        target = ids[n] if ids[n] is not None else aliases.get(n)
        if target is None:
            raise OpScriptError(f"op {i}: {what}={n} refers to an op that produced no entry id")
        return target

    for i, op in enumerate(ops):
        name = op.get("op")
        op = copy.deepcopy(op)  # the manager may keep references to what it is given
        new_id: str | None = None
        if name == "appendMessage":
            new_id = sm.append_message(op["message"])
        elif name == "appendThinkingLevelChange":
            new_id = sm.append_thinking_level_change(op.get("thinkingLevel"))
        elif name == "appendModelChange":
            model = op.get("model")
            if model is None:
                model = f"{op['provider']}/{op['modelId']}"
            new_id = sm.append_model_change(model, op.get("role"))
        elif name == "appendCompaction":
            new_id = sm.append_compaction(
                op["summary"],
                _get(op, "shortSummary"),
                ref(op.get("firstKeptRef"), i, "firstKeptRef"),
                op["tokensBefore"],
                details=_get(op, "details"),
                from_extension=_get(op, "fromExtension"),
            )
        elif name == "appendCustomEntry":
            new_id = sm.append_custom_entry(op["customType"], op.get("data", UNSET))
        elif name == "appendCustomMessageEntry":
            new_id = sm.append_custom_message_entry(
                op["customType"],
                op["content"],
                op["display"],
                details=op.get("details", UNSET),
                attribution=op.get("attribution") or "agent",
            )
        elif name == "appendLabelChange":
            new_id = sm.append_label_change(
                ref(op.get("targetRef"), i, "targetRef"), op.get("label")
            )
        elif name == "appendTtsrInjection":
            rules = op.get("rules")
            if rules is None:
                rules = op.get("ruleNames") or []
            new_id = sm.append_ttsr_injection(rules)
        elif name == "appendSessionInit":
            init = op["init"]
            new_id = sm.append_session_init(
                init["systemPrompt"],
                init["task"],
                init["tools"],
                output_schema=init.get("outputSchema", UNSET),
            )
        elif name == "appendModeChange":
            new_id = sm.append_mode_change(op["mode"], op.get("data", UNSET))
        elif name == "branch":
            sm.branch(ref(op.get("ref"), i, "ref"))
        elif name == "resetLeaf":
            sm.reset_leaf()
        elif name == "branchWithSummary":
            from_id = None if op.get("ref") is None else ref(op["ref"], i, "ref")
            new_id = sm.branch_with_summary(
                from_id,
                op["summary"],
                details=_get(op, "details"),
                from_extension=_get(op, "fromExtension"),
            )
        elif name == "setSessionName":
            leaf = sm.get_leaf_id()
            sm.set_session_name(op["name"], op.get("source") or "auto")
            if sm.get_leaf_id() != leaf:  # pi's store: a `session_info` entry, as pi writes
                new_id = sm.get_leaf_id()
            else:
                aliases[i] = leaf
        elif name == "createBranchedSession":
            path = sm.create_branched_session(ref(op.get("ref"), i, "ref"))
            if path:
                files.append(path)
        elif name == "flush":
            sm.flush()
        else:
            raise OpScriptError(f"op {i}: unknown op {name!r}")
        ids.append(new_id)
    return OpRunResult(ids, files, sm.get_session_file(), sm.get_leaf_id(), aliases)


def run_script(
    doc: dict[str, Any] | list[dict[str, Any]],
    out_dir: str | os.PathLike[str],
    cwd: str | None = None,
) -> OpRunResult:
    """`SessionManager.create(cwd, session_dir=out_dir)`, run the ops, flush, close.

    `cwd` defaults to the script's `cwd`, else `out_dir` (as the peers' `run` does).
    """
    if isinstance(doc, list):
        doc = {"ops": doc}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sm = SessionManager.create(cwd or doc.get("cwd") or str(out), session_dir=str(out))
    try:
        result = run_ops(sm, doc["ops"])
        sm.flush()
    finally:
        sm.close()
    return result
