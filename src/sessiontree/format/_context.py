"""Context reconstruction: the messages and settings the model sees at a leaf.

`build_session_context` follows the specification's algorithm (the one both
TypeScript peers share); `convert_to_llm` turns agent messages into the plain
user/assistant/toolResult messages a provider accepts.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sessiontree._util.unset import UNSET, Maybe, UnsetType
from sessiontree.format._entries import parse_iso_ms
from sessiontree.format._tree import path_to_root

__all__ = [
    "BRANCH_SUMMARY_PREFIX",
    "BRANCH_SUMMARY_SUFFIX",
    "COMPACTION_SUMMARY_PREFIX",
    "COMPACTION_SUMMARY_SUFFIX",
    "ContextBuilder",
    "SessionContext",
    "assistant_model",
    "build_session_context",
    "convert_to_llm",
    "create_branch_summary_message",
    "create_compaction_summary_message",
    "create_custom_message",
    "current_system_message",
    "model_setting",
]

COMPACTION_SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following summary:"
    "\n\n<summary>\n"
)
COMPACTION_SUMMARY_SUFFIX = "\n</summary>"
BRANCH_SUMMARY_PREFIX = (
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
)
BRANCH_SUMMARY_SUFFIX = "</summary>"


@dataclass(slots=True)
class SessionContext:
    """What the model sees at a leaf: messages plus settings derived from the path."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    thinking_level: str | None = "off"
    """The last thinking level change's level ("off" with none; None for its null)."""
    models: dict[str, str] = field(default_factory=dict)
    injected_ttsr_rules: list[str] = field(default_factory=list)
    mode: str = "none"
    mode_data: dict[str, Any] | None = None


def _epoch_ms(timestamp: object) -> int | None:
    # `new Date(ts).getTime()` is NaN for garbage, which JSON.stringify writes as null.
    return parse_iso_ms(timestamp)


def create_custom_message(
    custom_type: Maybe[str],
    content: Any,
    display: Any,
    details: Any,
    timestamp: str,
    attribution: Maybe[str] = UNSET,
) -> dict[str, Any]:
    """A `custom` agent message from a `custom_message` entry."""
    # Keys whose value is UNSET (a missing field) are left out, as JS drops undefined.
    message: dict[str, Any] = {"role": "custom"}
    for key, value in (
        ("customType", custom_type),
        ("content", content),
        ("display", display),
        ("details", details),
        ("attribution", attribution),
    ):
        if not isinstance(value, UnsetType):
            message[key] = value
    message["timestamp"] = _epoch_ms(timestamp)
    return message


def create_branch_summary_message(summary: str, from_id: str, timestamp: str) -> dict[str, Any]:
    """A `branchSummary` agent message."""
    return {
        "role": "branchSummary",
        "summary": summary,
        "fromId": from_id,
        "timestamp": _epoch_ms(timestamp),
    }


def create_compaction_summary_message(
    summary: str, tokens_before: int, timestamp: str, short_summary: Maybe[str] = UNSET
) -> dict[str, Any]:
    """A `compactionSummary` agent message (`shortSummary` only when given)."""
    message: dict[str, Any] = {"role": "compactionSummary", "summary": summary}
    if not isinstance(short_summary, UnsetType):
        message["shortSummary"] = short_summary
    message["tokensBefore"] = tokens_before
    message["timestamp"] = _epoch_ms(timestamp)
    return message


def model_setting(entry: dict[str, Any]) -> tuple[str, str] | None:
    """(role, "provider/model") that a model_change sets, if any."""
    model = entry.get("model")
    if isinstance(model, str) and model:
        role = entry.get("role") or "default"
        return (role if isinstance(role, str) else "default"), model
    provider, model_id = entry.get("provider"), entry.get("modelId")
    if isinstance(provider, str) and isinstance(model_id, str):
        return "default", f"{provider}/{model_id}"  # pi's shape, which has no roles
    return None


def assistant_model(message: dict[str, Any]) -> str | None:
    """The "provider/model" an assistant message sets as the default model.

    Every assistant message on the path sets it (the spec, and both peers), so the
    later of a default-role model_change and an assistant message wins.
    """
    if message.get("role") != "assistant":
        return None
    provider, model = message.get("provider"), message.get("model")
    if isinstance(provider, str) and isinstance(model, str):
        return f"{provider}/{model}"
    return None


def _kept_start(path: list[dict[str, Any]], index: int) -> int:
    """Where the entries a compaction at `path[index]` keeps begin: its
    firstKeptEntryId, or `index` (nothing kept) when that is not on the path before it."""
    first_kept = path[index].get("firstKeptEntryId")
    for i in range(index):
        if path[i].get("id") == first_kept:
            return i
    return index


def _compaction_summary(compaction: dict[str, Any]) -> dict[str, Any]:
    return create_compaction_summary_message(
        compaction.get("summary"),  # type: ignore[arg-type]
        compaction.get("tokensBefore"),  # type: ignore[arg-type]
        compaction.get("timestamp"),  # type: ignore[arg-type]
        compaction.get("shortSummary", UNSET),
    )


_EDITABLE_ROLES = frozenset(("user", "assistant", "toolResult", "custom"))
_LIST_CONTENT_ROLES = frozenset(("user", "assistant", "toolResult"))
# Entries that can put messages into the context, or change those that do.
_CONTEXT_KINDS = frozenset(("message", "custom_message", "branch_summary", "context_edit"))


def _message_of(message: dict[str, Any]) -> dict[str, Any]:
    """A stored message as the context holds it: pi 1.6 gives a missing or null
    `content` of a user/assistant/toolResult message as `[]`, of a system one as `""`
    (a copy; the stored message is left as it is)."""
    role = message.get("role")
    if message.get("content") is None and role.__class__ is str:
        if role in _LIST_CONTENT_ROLES:
            return {**message, "content": []}
        if role == "system":
            return {**message, "content": ""}
    return message


def _entry_messages(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages one entry puts into the context (pi 1.6's
    `sessionEntryToContextMessages`): a compaction gives its recorded system message
    (when it has one) and its summary; a context edit, a setting, nothing."""
    kind = entry.get("type")
    if kind == "message":
        message = entry.get("message")
        return [_message_of(message)] if message.__class__ is dict else []
    if kind == "custom_message":
        content = entry.get("content")
        return [
            create_custom_message(
                entry.get("customType", UNSET),
                [] if content is None else content,  # pi 1.6: `content ?? []`
                entry.get("display", UNSET),
                entry.get("details", UNSET),
                entry.get("timestamp"),  # type: ignore[arg-type]
                entry.get("attribution", UNSET),
            )
        ]
    if kind == "branch_summary" and entry.get("summary"):
        return [
            create_branch_summary_message(
                entry["summary"],
                entry.get("fromId"),  # type: ignore[arg-type]
                entry.get("timestamp"),  # type: ignore[arg-type]
            )
        ]
    if kind == "compaction":
        system = entry.get("systemMessage")
        summary = _compaction_summary(entry)
        return [system, summary] if isinstance(system, dict) else [summary]
    return []


def _edited(message: dict[str, Any], replacement: Any) -> dict[str, Any]:
    """`message` with a context edit's (non-null) replacement applied: its content
    swapped, every other key kept in place (pi 1.6's `projectContextEntry`)."""
    role = message.get("role")
    if role.__class__ is not str or role not in _EDITABLE_ROLES:
        return message
    # JS reads `.content` of anything: a replacement without one leaves no content.
    content = replacement.get("content", UNSET) if isinstance(replacement, dict) else UNSET
    if isinstance(content, UnsetType):
        return {k: v for k, v in message.items() if k != "content"}
    if isinstance(content, str) and role in ("assistant", "toolResult"):
        content = [_text_block(content)]
    return {**message, "content": content}


def project(entries: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], set[Any]]:
    """The messages of the context's entries (a compaction first, then what it keeps
    and what follows it; see `ContextBuilder`), with their context edits applied:
    the latest edit of an entry among them wins, a null replacement drops the entry's
    messages, another swaps their content. Also the ids the edits target.

    An older compaction among the kept entries adds nothing: only the newest one, at
    the front, gives a summary (as pi 1.6 does).
    """
    out: list[dict[str, Any]] = []
    add = out.append
    edits: dict[Any, dict[str, Any]] = {}
    # One pass for the common case (a path of messages, no edits); edits, rare, are
    # applied by a second pass once the first has seen them.
    for index, entry in enumerate(entries):
        kind = entry.get("type")
        if kind == "message":
            message = entry.get("message")
            if message.__class__ is dict:
                add(message if message.get("content") is not None else _message_of(message))
        elif kind == "context_edit":
            target = entry.get("targetId")
            if target.__class__ is str:
                edits[target] = entry
        elif not (index and kind == "compaction"):
            out.extend(_entry_messages(entry))
    if not edits:
        return out, set()
    out = []
    for index, entry in enumerate(entries):
        if index and entry.get("type") == "compaction":
            continue
        messages = _entry_messages(entry)
        entry_id = entry.get("id")
        edit = edits.get(entry_id) if entry_id.__class__ is str else None
        # An edit without a replacement at all makes pi throw; it changes nothing here.
        if edit is not None and "replacement" in edit:
            replacement = edit["replacement"]
            if replacement is None:
                continue
            messages = [_edited(m, replacement) for m in messages]
        out.extend(messages)
    return out, set(edits)


def _is_system_message(entry: dict[str, Any]) -> bool:
    message = entry.get("message")
    return (
        entry.get("type") == "message"
        and message.__class__ is dict
        and message.get("role") == "system"
    )


class ContextBuilder:
    """The context at the end of a path, extendable one entry at a time.

    `from_path` does the specification's two-phase build; `add` extends it for an
    entry appended at the leaf (a compaction or a context edit rebuilds the message
    list). The session manager keeps one per leaf so rebuilding the context every
    turn is O(1) per new entry instead of O(path).

    The entries the messages come from are pi 1.6's: with a compaction on the path,
    the last one, then the entries from its `firstKeptEntryId` up to it (without
    role "system" messages: the compaction's own `systemMessage` stands for them;
    none when that id is not on the path before it, as in a "retain none"
    compaction, whose `firstKeptEntryId` is its own id), then the entries after it.
    `project` turns them into messages.
    """

    __slots__ = ("_compaction_index", "_ctx", "_edited", "_path", "_rules_seen", "leaf_id")

    def __init__(self) -> None:
        self._path: list[dict[str, Any]] = []
        self._ctx = SessionContext()
        self._rules_seen: set[str] = set()
        self._compaction_index = -1
        self._edited: set[Any] = set()  # ids the context's edits target
        self.leaf_id: str | None = None

    @classmethod
    def from_leaf(cls, by_id: Mapping[Any, dict[str, Any]], leaf: dict[str, Any]) -> ContextBuilder:
        """The context at `leaf`, built in one walk from the leaf to the root.

        Walking backwards turns "the last one on the path wins" into "the first
        one seen wins", so settings and messages are taken during the walk itself,
        without first materializing and reversing the path. A parent cycle falls
        back to the path-based build, which detects it.
        """
        builder = cls()
        ctx = builder._ctx
        get = by_id.get
        limit = len(by_id) + 1
        steps = 0
        tail: list[dict[str, Any]] = []  # context entries, newest first; reversed at the end
        add = tail.append
        kept: list[dict[str, Any]] = []  # before a compaction, until firstKeptEntryId
        compaction: dict[str, Any] | None = None
        first_kept: object = None
        found_first_kept = False
        thinking_entry: dict[str, Any] | None = None
        mode_entry: dict[str, Any] | None = None
        roles_seen: dict[str, int] = {}  # role -> step of its earliest (forward-first) setter
        ttsr: list[dict[str, Any]] = []
        current: dict[str, Any] | None = leaf
        while current is not None:
            steps += 1
            if steps > limit:
                return cls.from_path(path_to_root(by_id, leaf))
            entry = current
            kind = entry.get("type")
            if kind == "message":
                message = entry.get("message")
                if message.__class__ is dict:
                    default = assistant_model(message)
                    if default is not None:
                        if "default" not in roles_seen:
                            ctx.models["default"] = default
                        roles_seen["default"] = steps
                    if compaction is None:
                        add(entry)
                    elif not found_first_kept and message.get("role") != "system":
                        kept.append(entry)
            else:
                if kind == "thinking_level_change":
                    if thinking_entry is None:
                        thinking_entry = entry
                elif kind == "model_change":
                    setting = model_setting(entry)
                    if setting is not None:
                        key, value = setting
                        if key not in roles_seen:
                            ctx.models[key] = value
                        roles_seen[key] = steps
                elif kind == "compaction":
                    if compaction is None:
                        compaction = entry
                        first_kept = entry.get("firstKeptEntryId")
                        builder._compaction_index = 0  # marks "the path has a compaction"
                elif kind == "ttsr_injection":
                    ttsr.append(entry)
                elif kind == "mode_change":
                    if mode_entry is None:
                        mode_entry = entry
                if kind.__class__ is str and kind in _CONTEXT_KINDS:
                    if compaction is None:
                        add(entry)
                    elif not found_first_kept:
                        kept.append(entry)
            if compaction is not None and not found_first_kept and entry is not compaction:
                if entry.get("id") == first_kept:
                    found_first_kept = True
            parent_id = entry.get("parentId")
            current = get(parent_id) if parent_id and parent_id.__class__ is str else None
        builder._finish_walk(
            [*reversed(ttsr), thinking_entry, mode_entry],
            roles_seen,
            tail,
            compaction,
            kept if found_first_kept else [],
        )
        leaf_id = leaf.get("id")
        builder.leaf_id = leaf_id if isinstance(leaf_id, str) else None
        return builder

    def _finish_walk(
        self,
        settings: list[dict[str, Any] | None],
        roles_seen: dict[str, int],
        tail: list[dict[str, Any]],
        compaction: dict[str, Any] | None,
        kept: list[dict[str, Any]],
    ) -> None:
        """Turn what the backward walk collected (newest first) into the context."""
        ctx = self._ctx
        # The winning settings, replayed forward through the one place that applies them.
        for setting in settings:
            if setting is not None:
                self._apply_setting(setting, -1)
        if len(roles_seen) > 1:
            # Keys in the order a forward walk would have first set them.
            order = sorted(roles_seen, key=roles_seen.__getitem__, reverse=True)
            ctx.models = {role: ctx.models[role] for role in order}
        tail.reverse()
        if compaction is not None:
            # Nothing is kept when firstKeptEntryId is not on the path before it.
            kept.reverse()
            tail = [compaction, *kept, *tail]
        ctx.messages, self._edited = project(tail)

    @classmethod
    def from_path(cls, path: list[dict[str, Any]]) -> ContextBuilder:
        """Build the context of a root->leaf path (the list is kept, not copied).

        One pass: settings are applied and every entry that can add to the messages
        is collected with its path position; a compaction then only slices that list.
        """
        builder = cls()
        builder._path = path
        models = builder._ctx.models
        out: list[dict[str, Any]] = []
        owners: list[int] = []  # path index of each entry in `out`, ascending
        add, own = out.append, owners.append
        for index, entry in enumerate(path):
            kind = entry.get("type")
            if kind == "message":
                message = entry.get("message")
                if message.__class__ is not dict:
                    continue
                default = assistant_model(message)
                if default is not None:
                    models["default"] = default
            else:
                builder._apply_setting(entry, index)
            if kind.__class__ is str and kind in _CONTEXT_KINDS:
                add(entry)
                own(index)
        if builder._compaction_index >= 0:
            out = builder._compacted(out, owners)
        builder._ctx.messages, builder._edited = project(out)
        if path:
            leaf_id = path[-1].get("id")
            builder.leaf_id = leaf_id if isinstance(leaf_id, str) else None
        return builder

    def _compacted(self, out: list[dict[str, Any]], owners: list[int]) -> list[dict[str, Any]]:
        """The compaction, then the entries it keeps (no system messages), then what
        follows it."""
        path, index = self._path, self._compaction_index
        start = _kept_start(path, index)
        lo, mid, hi = (
            bisect_left(owners, start),
            bisect_left(owners, index),
            bisect_right(owners, index),
        )
        kept = [e for e in out[lo:mid] if not _is_system_message(e)]
        return [path[index], *kept, *out[hi:]]

    def _apply_model(self, entry: dict[str, Any]) -> None:
        message = entry.get("message")
        default = assistant_model(message) if message.__class__ is dict else None
        if default is not None:
            self._ctx.models["default"] = default

    def _apply_setting(self, entry: dict[str, Any], index: int) -> None:
        """Apply an entry of one of `entries.SETTING_KINDS` (any other does nothing)."""
        ctx = self._ctx
        kind = entry.get("type")
        if kind == "thinking_level_change":
            # pi's `thinkingLevel = entry.thinkingLevel`: null stays null (so does a
            # missing or non-string level, which is no level either).
            level = entry.get("thinkingLevel")
            ctx.thinking_level = level if isinstance(level, str) else None
        elif kind == "model_change":
            setting = model_setting(entry)
            if setting is not None:
                ctx.models[setting[0]] = setting[1]
        elif kind == "compaction":
            self._compaction_index = index
        elif kind == "ttsr_injection":
            rules = entry.get("injectedRules")
            if isinstance(rules, list):
                for rule in rules:
                    if isinstance(rule, str) and rule not in self._rules_seen:
                        self._rules_seen.add(rule)
                        ctx.injected_ttsr_rules.append(rule)
        elif kind == "mode_change":
            mode = entry.get("mode")
            ctx.mode = mode if isinstance(mode, str) else "none"
            data = entry.get("data")
            ctx.mode_data = data if isinstance(data, dict) else None

    def add(self, entry: dict[str, Any]) -> bool:
        """Extend the context with an entry appended as the child of the leaf.

        False for a compaction, which starts the message list over from its first
        kept entry, and for a context edit (or an entry an edit already targets),
        which changes earlier messages: the owner of the entries builds the context
        again instead.
        """
        kind = entry.get("type")
        if kind == "compaction" or kind == "context_edit":
            return False
        entry_id = entry.get("id")
        if self._edited and entry_id.__class__ is str and entry_id in self._edited:
            return False
        self._path.append(entry)
        if kind == "message":
            self._apply_model(entry)
        else:
            self._apply_setting(entry, len(self._path) - 1)
        self._ctx.messages.extend(_entry_messages(entry))
        leaf_id = entry.get("id")
        self.leaf_id = leaf_id if isinstance(leaf_id, str) else None
        return True

    def snapshot(self) -> SessionContext:
        """A copy the caller may change without touching the builder's state."""
        ctx = self._ctx
        return SessionContext(
            list(ctx.messages),
            ctx.thinking_level,
            dict(ctx.models),
            list(ctx.injected_ttsr_rules),
            ctx.mode,
            ctx.mode_data,
        )

    @property
    def path(self) -> list[dict[str, Any]]:
        return self._path


def build_session_context(
    entries: Sequence[dict[str, Any]],
    leaf_id: Maybe[str | None] = UNSET,
    by_id: Mapping[Any, dict[str, Any]] | None = None,
) -> SessionContext:
    """Rebuild the model context at `leaf_id` (default: the last entry).

    `leaf_id=None` gives an empty context; an unknown id falls back to the last
    entry. Linear in the path length; a parent cycle ends the walk.
    """
    if leaf_id is None:
        return SessionContext()
    if by_id is None:
        by_id = {e.get("id"): e for e in entries if isinstance(e.get("id"), str)}
    leaf = by_id.get(leaf_id) if isinstance(leaf_id, str) and leaf_id else None
    if leaf is None:
        for entry in reversed(entries):
            if entry.get("type") != "session":
                leaf = entry
                break
    if leaf is None:
        return SessionContext()
    return ContextBuilder.from_leaf(by_id, leaf)._ctx


def _content_text(content: object) -> str:
    """pi-ai's `contentText`: a string as is, else the text blocks joined by newlines."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "\n".join(
        str(block.get("text"))
        for block in content
        if isinstance(block, dict) and block.get("type") == "text"
    )


def current_system_message(messages: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Every system message replayed into one (pi-ai's `getCurrentSystemMessage`): the
    contents that are not empty joined by blank lines, the sections patched by name
    (null removes one), the tools added and not removed since; None without system
    messages and tools. What pi 1.6 records on a compaction as its `systemMessage`."""
    content: list[str] = []
    sections: dict[str, Any] = {}
    tools: dict[Any, Any] = {}
    timestamp: object = UNSET
    for message in messages:
        if message.get("role") != "system":
            continue
        if timestamp is None or isinstance(timestamp, UnsetType):
            timestamp = message.get("timestamp", UNSET)
        text = _content_text(message.get("content"))
        if text:
            content.append(text)
        patch = message.get("sections")
        for name, value in patch.items() if isinstance(patch, dict) else ():
            if value is None:
                sections.pop(name, None)
            else:
                sections[name] = value
        for key, remove in (("toolsRemoved", True), ("toolsAdded", False)):
            listed = message.get(key)
            for tool in listed if isinstance(listed, list) else ():
                name = tool.get("name") if isinstance(tool, dict) else None
                if remove:
                    tools.pop(name, None)
                elif name.__class__ is str:
                    tools[name] = tool
    if isinstance(timestamp, UnsetType) and not tools:
        return None
    out: dict[str, Any] = {"role": "system", "content": "\n\n".join(content)}
    if sections:
        out["sections"] = sections
    if tools:
        out["toolsAdded"] = list(tools.values())
    out["timestamp"] = 0 if timestamp is None or isinstance(timestamp, UnsetType) else timestamp
    return out


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _bash_execution_text(m: Mapping[str, Any]) -> str:
    text = f"Ran `{m.get('command')}`\n"
    output = m.get("output")
    text += f"```\n{output}\n```" if output else "(no output)"
    exit_code = m.get("exitCode")
    if m.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif exit_code is not None and exit_code != 0:
        text += f"\n\nCommand exited with code {exit_code}"
    if m.get("truncated") and m.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {m.get('fullOutputPath')}]"
    return text


def _python_execution_text(m: Mapping[str, Any]) -> str:
    text = f"Ran Python:\n```python\n{m.get('code')}\n```\n"
    output = m.get("output")
    text += f"Output:\n```\n{output}\n```" if output else "(no output)"
    exit_code = m.get("exitCode")
    if m.get("cancelled"):
        text += "\n\n(execution cancelled)"
    elif exit_code is not None and exit_code != 0:
        text += f"\n\nExecution failed with code {exit_code}"
    return text


def convert_to_llm(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Convert agent messages to LLM messages (system/user/assistant/toolResult).

    bashExecution/pythonExecution become user text (unless `excludeFromContext`),
    custom/hookMessage become user messages (string content wrapped as a text
    block), branch and compaction summaries become user text from their
    templates; system (pi 1.6: content, sections, toolsAdded, toolsRemoved),
    user, assistant and toolResult messages pass through; unknown roles are dropped.
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        ts = m.get("timestamp")
        if role in ("user", "assistant", "toolResult", "system"):
            out.append(m)
        elif role == "bashExecution":
            if not m.get("excludeFromContext"):
                out.append(
                    {
                        "role": "user",
                        "content": [_text_block(_bash_execution_text(m))],
                        "timestamp": ts,
                    }
                )
        elif role == "pythonExecution":
            if not m.get("excludeFromContext"):
                out.append(
                    {
                        "role": "user",
                        "content": [_text_block(_python_execution_text(m))],
                        "timestamp": ts,
                    }
                )
        elif role in ("custom", "hookMessage"):
            content = m.get("content")
            if isinstance(content, str):
                content = [_text_block(content)]
            out.append({"role": "user", "content": content, "timestamp": ts})
        elif role == "branchSummary":
            text = BRANCH_SUMMARY_PREFIX + str(m.get("summary")) + BRANCH_SUMMARY_SUFFIX
            out.append({"role": "user", "content": [_text_block(text)], "timestamp": ts})
        elif role == "compactionSummary":
            text = COMPACTION_SUMMARY_PREFIX + str(m.get("summary")) + COMPACTION_SUMMARY_SUFFIX
            out.append({"role": "user", "content": [_text_block(text)], "timestamp": ts})
    return out
