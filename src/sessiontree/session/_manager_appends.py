"""`SessionAppends`: the entries a `SessionManager` builds and appends.

Each `append_*` builds one entry (a new id, the leaf as parent, the time) in the
form the agents write it and hands it to `_append`, the one write path: validated
(or written, once the file exists) before it joins the tree. Until the first
assistant message (in pi's store, the first user or assistant message) nothing is
on disk; that message writes the whole session.
"""

from __future__ import annotations

import builtins
import itertools
from collections.abc import Mapping
from typing import Any

from sessiontree._util.unset import UNSET, Maybe, UnsetType
from sessiontree.errors import SessionPersistenceError
from sessiontree.format import Entry, current_system_message, iso_now, parse_iso_ms
from sessiontree.session._index import is_assistant_message, is_conversation_message
from sessiontree.session._manager_storage import SessionOnStorage
from sessiontree.session._persistence import entry_line, validate_entry
from sessiontree.storage import BLOB_REF_PREFIX, find_blob_refs

__all__ = ["SessionAppends"]

_REF_MARK = BLOB_REF_PREFIX.encode("ascii")


class SessionAppends(SessionOnStorage):
    """Building and appending entries (see the module doc)."""

    def _append(self, entry: Entry) -> str:
        """Persist (or, not yet on disk, validate) the entry, then add it to memory.

        An entry that cannot be written changes nothing: it is refused before it
        joins the tree, and a failed write leaves it out of memory too.
        """
        self._check_writable()
        file = self._file
        if file is not None and (file.on_disk or self._starts_file(entry)):
            try:
                line = entry_line(entry, self._blobs, pi_form=self._pi_form)
            except OSError as exc:
                path = file.path
                raise SessionPersistenceError(
                    f"{path}: could not store the entry's images: {exc}; nothing was appended",
                    path,
                ) from exc
            if file.on_disk:
                # (A finalizer exists once anything was pinned: one attribute to look at.)
                if self._pins_finalizer is not None and _REF_MARK in line:
                    self._check_refs(find_blob_refs(line), file.path)
                file.append(line)
            else:
                # The first assistant message: the whole session, this entry included.
                self._check_pinned(self._index, file.path, entry)
                file.create(itertools.chain(self._content(False), (line,)))
                self._after_first_write()
        else:
            data = validate_entry(entry)
            if _REF_MARK in data:
                # Held until it is written: the blobs its refs name are kept from gc.
                self._pin(find_blob_refs(data))
        self._index.add(entry)
        return str(entry["id"])

    def _starts_file(self, entry: Entry) -> bool:
        """Whether appending `entry` writes a new session's file: at the first
        assistant message (oh-my-pi, xcsh), in pi's store at the first user or
        assistant message (pi 0.99+; 0.73 waited for the assistant too)."""
        if self._pi_form:
            return is_conversation_message(entry) or self._index.has_conversation()
        return is_assistant_message(entry) or self._index.has_assistant()

    def _base(self, kind: str) -> Entry:
        return {
            "type": kind,
            "id": self._index.new_id(),
            "parentId": self._index.leaf,
            "timestamp": iso_now(),
        }

    def append_message(
        self, message: dict[str, Any], *, extra: Mapping[str, Any] | None = None
    ) -> str:
        """Append a message entry (stored verbatim).

        `extra`: more fields of the entry, after `message` (what an integration keeps
        beside the message, e.g. the framework's own item); the agents ignore fields
        they do not know. ValueError for a field the entry already has.
        """
        entry = self._base("message")
        entry["message"] = message
        if extra:
            for key, value in extra.items():
                if key in entry:
                    raise ValueError(f"an extra field cannot replace the entry's {key!r}")
                entry[key] = value
        return self._append(entry)

    def append_thinking_level_change(self, thinking_level: str | None) -> str:
        """Append a thinking level change; None is written as `null`."""
        entry = self._base("thinking_level_change")
        entry["thinkingLevel"] = thinking_level
        return self._append(entry)

    def append_model_change(self, model: str, role: str | None = None) -> str:
        """Append a model change (`"provider/id"`); role omitted when None.

        In pi's store a change of the default model is written as pi writes it
        (`provider`, `modelId`: pi reads no `model`); pi has no roles, so a change of
        another role keeps oh-my-pi's form.
        """
        entry = self._base("model_change")
        provider, slash, model_id = model.partition("/")
        if self._pi_form and slash and role in (None, "default"):
            entry["provider"] = provider
            entry["modelId"] = model_id
            return self._append(entry)
        entry["model"] = model
        _put(entry, "role", role)
        return self._append(entry)

    def append_compaction(
        self,
        summary: str,
        short_summary: Maybe[str | None],
        first_kept_entry_id: str | None,
        tokens_before: int,
        details: Maybe[Any] = UNSET,
        from_extension: Maybe[bool | None] = UNSET,
        preserve_data: Maybe[Any] = UNSET,
        *,
        usage: Maybe[dict[str, Any] | None] = UNSET,
        system_message: Maybe[dict[str, Any] | None] = UNSET,
    ) -> str:
        """Append a compaction: the context keeps `first_kept_entry_id`..here after its
        summary; None keeps nothing before it ("retain none": pi 1.6 writes the
        compaction's own id as `firstKeptEntryId`).

        `usage`: what making the summary cost (pi 1.6 counts it in the session's
        totals). `system_message`: the system message the context starts from after
        the compaction (pi 1.6's `systemMessage`, emitted before the summary). Not
        given, it is what pi 1.6 records: every system message of the context
        replayed into one (`current_system_message`), stamped with the compaction's
        time, or none when the context has none; None writes none. Keys in pi 1.6's
        order: `...,details,usage,fromHook,systemMessage` (`shortSummary` after
        `summary`, `fromExtension` and `preserveData` after `usage`, as oh-my-pi).

        ValueError, and nothing appended, when `first_kept_entry_id` is not on the
        path from the root to the leaf: the context would keep nothing before the
        compaction (pi 1.6 appends it and its context silently drops every kept entry;
        `verify` reports such a file, which is still read as pi reads it).
        """
        if first_kept_entry_id is not None and not self._index.on_path(first_kept_entry_id):
            raise ValueError(
                f"first kept entry {first_kept_entry_id!r} is not on the path to the leaf"
                f" ({self._index.leaf!r}): the compaction would keep nothing before it;"
                " pass None to keep nothing"
            )
        entry = self._base("compaction")
        entry["summary"] = summary
        _put(entry, "shortSummary", short_summary)
        entry["firstKeptEntryId"] = (
            first_kept_entry_id if first_kept_entry_id is not None else entry["id"]
        )
        entry["tokensBefore"] = tokens_before
        _put(entry, "details", details)
        _put(entry, "usage", usage)
        _put(entry, "fromExtension", from_extension)
        _put(entry, "preserveData", preserve_data)
        if isinstance(system_message, UnsetType):
            current = current_system_message(self._index.context().messages)
            if current is not None:
                current["timestamp"] = parse_iso_ms(entry["timestamp"])
            system_message = current
        _put(entry, "systemMessage", system_message)
        return self._append(entry)

    def append_context_edit(self, target_id: str, replacement: dict[str, Any] | None) -> str:
        """Append a branch-local edit of an earlier entry's part of the context (pi 1.6):
        None drops the entry from the context, `{"content": ...}` (a string or a list of
        blocks) replaces its content. The latest edit of an entry on the branch wins.

        The target must be on the active branch and give the model content: a user,
        assistant or toolResult message or a custom message (EntryNotFoundError for an
        unknown id, ValueError otherwise). A string replacing an assistant's or a tool
        result's content is stored as one text block, as pi stores it.
        """
        if replacement is not None and not (
            isinstance(replacement, dict) and isinstance(replacement.get("content"), (str, list))
        ):
            raise ValueError("Context edit replacement must be None or contain string/list content")
        target = self._index.require(target_id)
        if not any(e.get("id") == target_id for e in self._index.branch(None)):
            raise ValueError(f"Entry {target_id} is not on the active branch")
        message = target.get("message")
        role = message.get("role") if isinstance(message, dict) else None
        if target.get("type") == "message" and role in ("user", "assistant", "toolResult"):
            if role != "user" and replacement is not None:
                content = replacement["content"]
                if isinstance(content, str):
                    replacement = {"content": [{"type": "text", "text": content}]}
        elif target.get("type") != "custom_message":
            raise ValueError(f"Entry {target_id} does not contribute editable model content")
        entry = self._base("context_edit")
        entry["targetId"] = target_id
        entry["replacement"] = replacement
        return self._append(entry)

    def append_usage(
        self,
        kind: str,
        provider: str,
        model: str,
        usage: dict[str, Any],
        note: Maybe[str | None] = UNSET,
    ) -> str:
        """Append usage spent outside a reply (pi 0.87+'s `usage` entry, e.g. a cache
        warm-up): counted in the session's totals, not part of the model context."""
        entry = self._base("usage")
        entry["kind"] = kind
        entry["provider"] = provider
        entry["model"] = model
        entry["usage"] = usage
        if isinstance(note, str) and note:  # pi: `...(note ? { note } : {})`, no empty note
            entry["note"] = note
        return self._append(entry)

    def append_custom_entry(self, custom_type: str, data: Maybe[Any] = UNSET) -> str:
        """Append extension state (not part of the model context)."""
        entry: Entry = {"type": "custom", "customType": custom_type}
        _put(entry, "data", data)
        entry.update(self._base("custom"))
        return self._append(entry)

    def append_custom_message_entry(
        self,
        custom_type: str,
        content: str | builtins.list[dict[str, Any]],
        display: bool,
        details: Maybe[Any] = UNSET,
        attribution: Maybe[str | None] = "agent",
    ) -> str:
        """Append an extension message that takes part in the model context."""
        entry: Entry = {
            "type": "custom_message",
            "customType": custom_type,
            "content": content,
            "display": display,
        }
        _put(entry, "details", details)
        _put(entry, "attribution", attribution)
        entry.update(self._base("custom_message"))
        return self._append(entry)

    def append_label_change(self, target_id: str, label: Maybe[str | None]) -> str:
        """Set (or with None/""/UNSET clear) the label of an entry."""
        self._index.require(target_id)
        entry = self._base("label")
        entry["targetId"] = target_id
        _put(entry, "label", label)
        return self._append(entry)

    def append_ttsr_injection(self, rule_names: builtins.list[str]) -> str:
        entry = self._base("ttsr_injection")
        entry["injectedRules"] = list(rule_names)
        return self._append(entry)

    def append_session_init(
        self,
        system_prompt: str,
        task: str,
        tools: builtins.list[Any],
        output_schema: Maybe[Any] = UNSET,
    ) -> str:
        entry = self._base("session_init")
        entry["systemPrompt"] = system_prompt
        entry["task"] = task
        entry["tools"] = tools
        _put(entry, "outputSchema", output_schema)
        return self._append(entry)

    def append_mode_change(self, mode: str, data: Maybe[Any] = UNSET) -> str:
        entry = self._base("mode_change")
        entry["mode"] = mode
        _put(entry, "data", data)
        return self._append(entry)

    def branch_with_summary(
        self,
        branch_from_id: str | None,
        summary: str,
        details: Maybe[Any] = UNSET,
        from_extension: Maybe[bool | None] = UNSET,
    ) -> str:
        """Branch to `branch_from_id` (None: the root) and record a summary of what was left.

        `fromId` is the branch target ("root" for None) as oh-my-pi writes it; in pi's
        store, the leaf that was left ("root" when there was none), as pi 0.84.3+ does.
        """
        self._check_writable()
        if branch_from_id is not None:
            self._index.require(branch_from_id)
        left = self._index.leaf
        self._index.leaf = branch_from_id
        entry = self._base("branch_summary")
        from_id = left if self._pi_form else branch_from_id
        entry["fromId"] = from_id if from_id is not None else "root"
        entry["summary"] = summary
        _put(entry, "details", details)
        _put(entry, "fromExtension", from_extension)
        return self._append(entry)


def _put(entry: Entry, key: str, value: object) -> None:
    """Set `key` unless the value is UNSET or None (both mean JS `undefined`)."""
    if value is not None and not isinstance(value, UnsetType):
        entry[key] = value
