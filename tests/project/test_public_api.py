"""The public API contract: every name of API.md is exported (the README's examples run in
tests/project/test_docs.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import sessiontree

API_NAMES = """
CURRENT_SESSION_VERSION UNSET Store SessionManager SessionContext SessionTreeNode SessionInfo
RecentSessionInfo ResolvedSessionMatch StorageStat UsageStatistics build_session_context
migrate_session_entries parse_jsonl_lenient serialize_entry load_entries_from_file
find_most_recent_session get_recent_sessions resolve_resumable_session get_default_session_dir
get_agent_dir encode_session_dir_name create_custom_message create_branch_summary_message
create_compaction_summary_message convert_to_llm SessionStorage SessionStorageWriter
FileSessionStorage MemorySessionStorage BlobStore BlobPutResult is_blob_ref parse_blob_ref
HistoryStorage HistoryEntry MAX_PERSIST_CHARS TRUNCATION_NOTICE BLOB_EXTERNALIZE_THRESHOLD
SessionTreeError SessionPersistenceError InvalidSessionFileError AmbiguousSessionError
EntryNotFoundError InvalidBlobRefError SessionLockError SessionWriteConflictError
""".split()

MANAGER_METHODS = """
create open continue_recent fork_from in_memory list list_all append_message
append_thinking_level_change append_model_change append_compaction append_custom_entry
append_custom_message_entry append_label_change append_ttsr_injection append_session_init
append_mode_change branch reset_leaf branch_with_summary create_branched_session get_leaf_id
get_leaf_entry get_entry get_children get_label get_branch get_header get_entries get_tree
build_session_context get_injected_ttsr_rules new_session fork set_session_file
set_session_name get_session_name get_session_id get_session_file get_session_dir get_cwd
rewrite_entries move_to ensure_on_disk flush close is_persisted is_read_only
get_usage_statistics put_blob
""".split()


def test_every_contract_name_is_exported() -> None:
    missing = [name for name in API_NAMES if not hasattr(sessiontree, name)]
    assert missing == []
    assert set(API_NAMES) <= set(sessiontree.__all__)
    assert sessiontree.__all__ == sorted(sessiontree.__all__, key=lambda n: (not n.isupper(), n))


def test_constants_and_error_hierarchy() -> None:
    assert sessiontree.CURRENT_SESSION_VERSION == 3
    assert sessiontree.MAX_PERSIST_CHARS == 500_000
    assert sessiontree.TRUNCATION_NOTICE == "\n\n[Session persistence truncated large content]"
    assert sessiontree.BLOB_EXTERNALIZE_THRESHOLD == 1024
    for name in API_NAMES:
        if name.endswith("Error"):
            assert issubclass(getattr(sessiontree, name), sessiontree.SessionTreeError)
    assert issubclass(sessiontree.EntryNotFoundError, KeyError)


def test_manager_has_every_contract_method() -> None:
    missing = [m for m in MANAGER_METHODS if not hasattr(sessiontree.SessionManager, m)]
    assert missing == []


def test_public_names_belong_to_the_package() -> None:
    import pickle

    import sessiontree

    for name in sessiontree.__all__:
        obj = getattr(sessiontree, name)
        if isinstance(obj, type):
            assert obj.__module__ == "sessiontree", name
    stats = sessiontree.UsageStatistics(1, 2)
    assert pickle.loads(pickle.dumps(stats)) == stats
    error = sessiontree.EntryNotFoundError("x")
    assert isinstance(pickle.loads(pickle.dumps(error)), sessiontree.EntryNotFoundError)


def test_import_sessiontree_loads_its_names_on_first_use(tmp_path: Path) -> None:
    """`import sessiontree` loads the errors and a table, nothing else of the package;
    every name of `__all__` is there on first use, and `dir()` lists them all."""
    script = (
        "import json, sys, sessiontree\n"
        "before = sorted(m for m in sys.modules if m.startswith('sessiontree'))\n"
        "names = {n: type(getattr(sessiontree, n)).__name__ for n in sessiontree.__all__}\n"
        "print(json.dumps({'before': before, 'dir': dir(sessiontree), 'names': names}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    report = json.loads(out.stdout)
    assert report["before"] == ["sessiontree", "sessiontree._version", "sessiontree.errors"]
    assert set(report["names"]) == set(sessiontree.__all__) and "Store" in report["names"]
    assert set(sessiontree.__all__) <= set(report["dir"])
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        _ = sessiontree.no_such_name  # type: ignore[attr-defined]
