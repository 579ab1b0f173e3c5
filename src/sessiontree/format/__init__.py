"""The on-disk format, pure (no I/O): entries, JS-identical JSON, migrations, names, the
tree, the model context, the text view of an entry, token sums, a listing's metadata
fold."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessiontree._util.lazy import lazy_exports, lazy_table

if TYPE_CHECKING:  # what mypy sees; at run time each name is imported on first use
    from sessiontree.format._context import (
        BRANCH_SUMMARY_PREFIX,
        COMPACTION_SUMMARY_PREFIX,
        ContextBuilder,
        SessionContext,
        assistant_model,
        build_session_context,
        convert_to_llm,
        create_branch_summary_message,
        create_compaction_summary_message,
        create_custom_message,
        current_system_message,
        model_setting,
    )
    from sessiontree.format._entries import (
        CURRENT_SESSION_VERSION,
        SETTING_KINDS,
        Entry,
        content_text,
        format_iso,
        generate_entry_id,
        generate_session_id,
        iso_now,
        parse_iso_ms,
    )
    from sessiontree.format._fold import (
        AWAITING_HEADER,
        FOLD_FIELDS,
        NOT_A_SESSION,
        SESSION,
        MetaFold,
    )
    from sessiontree.format._jsonl import (
        STRICT_DUMPS_OPTIONS,
        allow_deep_nesting,
        as_is_checker,
        find_unserializable,
        iter_jsonl_bytes,
        js_number,
        loads_line,
        loads_object,
        parse_jsonl_lenient,
        serialize_entry,
        serialize_entry_bytes,
    )
    from sessiontree.format._migrations import (
        header_needs_migration,
        migrate_session_entries,
        session_version,
    )
    from sessiontree.format._naming import (
        GEMINI_REFERENCED,
        SHORT_TITLE_CHARS,
        TITLE_SLOT_BYTES,
        SessionHead,
        clean_title,
        entry_name,
        file_session_id,
        head_kind,
        head_title,
        head_title_source,
        header_in,
        is_typed_prompt,
        listing_title,
        new_header,
        ordered_header,
        pi_session_name,
        session_file_name,
        session_name,
        session_path,
        session_title,
        shorten,
        shown_title,
        title_slot_line,
    )
    from sessiontree.format._text import (
        SEARCH_ROLES,
        blocks_text,
        context_edit_text,
        entry_preview,
        entry_role,
        entry_text,
        human_size,
        message_facts,
        message_text,
        system_sections,
        system_summary,
        usage_entry_text,
        usage_summary,
    )
    from sessiontree.format._times import parse_time, time_range, time_zone
    from sessiontree.format._tree import (
        SessionTreeNode,
        branch_as_pi,
        branch_with_labels,
        build_tree,
        path_to_root,
    )
    from sessiontree.format._usage import (
        CACHE_WRITE_1H,
        USAGE_KINDS,
        ExtraUsage,
        ImportMarker,
        UsageRecord,
        UsageTotals,
        counted_usage,
        import_marker,
        usage_record,
        utc_day,
    )

_WHERE = lazy_table(
    {
        "_context": (
            "BRANCH_SUMMARY_PREFIX COMPACTION_SUMMARY_PREFIX ContextBuilder SessionContext "
            "assistant_model build_session_context convert_to_llm "
            "create_branch_summary_message create_compaction_summary_message "
            "create_custom_message current_system_message model_setting"
        ),
        "_entries": (
            "CURRENT_SESSION_VERSION SETTING_KINDS Entry content_text format_iso "
            "generate_entry_id generate_session_id iso_now parse_iso_ms"
        ),
        "_fold": "AWAITING_HEADER FOLD_FIELDS NOT_A_SESSION SESSION MetaFold",
        "_jsonl": (
            "STRICT_DUMPS_OPTIONS allow_deep_nesting as_is_checker find_unserializable "
            "iter_jsonl_bytes js_number loads_line loads_object parse_jsonl_lenient "
            "serialize_entry serialize_entry_bytes"
        ),
        "_migrations": "header_needs_migration migrate_session_entries session_version",
        "_naming": (
            "GEMINI_REFERENCED SHORT_TITLE_CHARS TITLE_SLOT_BYTES SessionHead clean_title "
            "entry_name file_session_id head_kind head_title head_title_source header_in "
            "is_typed_prompt listing_title new_header ordered_header pi_session_name "
            "session_file_name session_name session_path session_title shorten shown_title "
            "title_slot_line"
        ),
        "_text": (
            "SEARCH_ROLES blocks_text context_edit_text entry_preview entry_role entry_text "
            "human_size message_facts message_text system_sections system_summary "
            "usage_entry_text usage_summary"
        ),
        "_times": "parse_time time_range time_zone",
        "_tree": "SessionTreeNode branch_as_pi branch_with_labels build_tree path_to_root",
        "_usage": (
            "CACHE_WRITE_1H USAGE_KINDS ExtraUsage ImportMarker UsageRecord UsageTotals "
            "counted_usage import_marker usage_record utc_day"
        ),
    }
)
"""Each name and the module (of this package, by its short name) it is imported from."""

if not TYPE_CHECKING:  # a module `__getattr__` would make type checkers accept any name
    __getattr__ = lazy_exports(__name__, _WHERE)

__all__ = [
    "AWAITING_HEADER",
    "BRANCH_SUMMARY_PREFIX",
    "CACHE_WRITE_1H",
    "COMPACTION_SUMMARY_PREFIX",
    "CURRENT_SESSION_VERSION",
    "FOLD_FIELDS",
    "GEMINI_REFERENCED",
    "NOT_A_SESSION",
    "SEARCH_ROLES",
    "SESSION",
    "SETTING_KINDS",
    "SHORT_TITLE_CHARS",
    "STRICT_DUMPS_OPTIONS",
    "TITLE_SLOT_BYTES",
    "USAGE_KINDS",
    "ContextBuilder",
    "Entry",
    "ExtraUsage",
    "ImportMarker",
    "MetaFold",
    "SessionContext",
    "SessionHead",
    "SessionTreeNode",
    "UsageRecord",
    "UsageTotals",
    "allow_deep_nesting",
    "as_is_checker",
    "assistant_model",
    "blocks_text",
    "branch_as_pi",
    "branch_with_labels",
    "build_session_context",
    "build_tree",
    "clean_title",
    "content_text",
    "context_edit_text",
    "convert_to_llm",
    "counted_usage",
    "create_branch_summary_message",
    "create_compaction_summary_message",
    "create_custom_message",
    "current_system_message",
    "entry_name",
    "entry_preview",
    "entry_role",
    "entry_text",
    "file_session_id",
    "find_unserializable",
    "format_iso",
    "generate_entry_id",
    "generate_session_id",
    "head_kind",
    "head_title",
    "head_title_source",
    "header_in",
    "header_needs_migration",
    "human_size",
    "import_marker",
    "is_typed_prompt",
    "iso_now",
    "iter_jsonl_bytes",
    "js_number",
    "listing_title",
    "loads_line",
    "loads_object",
    "message_facts",
    "message_text",
    "migrate_session_entries",
    "model_setting",
    "new_header",
    "ordered_header",
    "parse_iso_ms",
    "parse_jsonl_lenient",
    "parse_time",
    "path_to_root",
    "pi_session_name",
    "serialize_entry",
    "serialize_entry_bytes",
    "session_file_name",
    "session_name",
    "session_path",
    "session_title",
    "session_version",
    "shorten",
    "shown_title",
    "system_sections",
    "system_summary",
    "time_range",
    "time_zone",
    "title_slot_line",
    "usage_entry_text",
    "usage_record",
    "usage_summary",
    "utc_day",
]
