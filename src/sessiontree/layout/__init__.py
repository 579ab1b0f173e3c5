"""The agent dir: where sessions, images and breadcrumbs live, and the one rule for where a
session's images go."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sessiontree._util.lazy import lazy_exports, lazy_table

if TYPE_CHECKING:  # what mypy sees; at run time each name is imported on first use
    from sessiontree.layout._agent_dir import (
        BlobCarry,
        agent_dir_of,
        blob_carry,
        blob_store_for,
        is_pi_agent_dir,
        read_breadcrumb,
        read_registry,
        register_session_dir,
        registered_session_dirs,
        write_breadcrumb,
        writes_pi_form,
    )
    from sessiontree.layout._parts import StoreParts, store_parts
    from sessiontree.layout._paths import (
        EXTERNAL_SESSION_DIRS,
        default_agent_dir,
        encode_session_dir_name,
        get_agent_dir,
        get_default_session_dir,
        get_terminal_id,
        home_relative_dir_name,
        is_safe_name,
        native_agent_of,
    )
    from sessiontree.layout._refs import (
        IMAGE_KEYS,
        held_blob_refs,
        is_image_payload,
        resolve_blob_refs,
    )

_WHERE = lazy_table(
    {
        "_agent_dir": (
            "BlobCarry agent_dir_of blob_carry blob_store_for is_pi_agent_dir read_breadcrumb "
            "read_registry register_session_dir registered_session_dirs write_breadcrumb "
            "writes_pi_form"
        ),
        "_parts": "StoreParts store_parts",
        "_paths": (
            "EXTERNAL_SESSION_DIRS default_agent_dir encode_session_dir_name get_agent_dir "
            "get_default_session_dir get_terminal_id home_relative_dir_name is_safe_name "
            "native_agent_of"
        ),
        "_refs": "IMAGE_KEYS held_blob_refs is_image_payload resolve_blob_refs",
    }
)
"""Each name and the module (of this package, by its short name) it is imported from."""

if not TYPE_CHECKING:  # a module `__getattr__` would make type checkers accept any name
    __getattr__ = lazy_exports(__name__, _WHERE)

__all__ = [
    "EXTERNAL_SESSION_DIRS",
    "IMAGE_KEYS",
    "BlobCarry",
    "StoreParts",
    "agent_dir_of",
    "blob_carry",
    "blob_store_for",
    "default_agent_dir",
    "encode_session_dir_name",
    "get_agent_dir",
    "get_default_session_dir",
    "get_terminal_id",
    "held_blob_refs",
    "home_relative_dir_name",
    "is_image_payload",
    "is_pi_agent_dir",
    "is_safe_name",
    "native_agent_of",
    "read_breadcrumb",
    "read_registry",
    "register_session_dir",
    "registered_session_dirs",
    "resolve_blob_refs",
    "store_parts",
    "write_breadcrumb",
    "writes_pi_form",
]
