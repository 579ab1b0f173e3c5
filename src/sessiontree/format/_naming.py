"""What a session file is called and what it says it is: one rule each, used by every
reader (loader, checker, search, discovery, PostgreSQL metadata) and writer.

**Lines before the entries.** A file is `[title slot] header entry...`: oh-my-pi may
put a fixed-width 256-byte `{"type":"title",...}` line first; the first object
after it must be a session header, or the file is not a session (`head_kind`).

**The session's name** (`session_name`, used by `get_session_name()` and
`SessionInfo.title`):

1. A valid title slot replaces the header's `title` (an empty one removes it),
   as oh-my-pi's loader does (`applyTitleSlot`).
2. That title, when not blank, is the name: it is what `set_session_name` here and
   oh-my-pi's `setSessionName` write, so a rename always shows.
3. Otherwise the latest `session_info` (`name`, pi) or `title_change` (`title`,
   oh-my-pi) entry names it, and a blank one clears the name, as pi's
   `getSessionName` and its listing do (`name?.trim() || undefined`).

`SessionInfo.title` alone then falls back to the last compaction's `shortSummary`.

**The title shown** (`shown_title`, by every command, page and export): that title,
else the first user message, else `Session <id prefix>`; cleaned (Claude Code's
`<command-message>` markup becomes the command it ran, reminders and command output go,
whitespace collapsed) and, where it heads a page or a row, shortened (`shorten`).

**Where it lives.** `<session dir>/<timestamp with : and . as ->_<session id>.jsonl`
(`session_path`), the session dir being `--<cwd encoded>--` in `<agent dir>/sessions`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from sessiontree.format._entries import (
    CURRENT_SESSION_VERSION,
    Entry,
    generate_session_id,
    is_valid_header,
    iso_now,
)
from sessiontree.format._jsonl import loads_line, serialize_entry_bytes

__all__ = [
    "GEMINI_REFERENCED",
    "NAME_ENTRY_TYPES",
    "TITLE_SLOT_BYTES",
    "HeadKind",
    "SessionHead",
    "clean_title",
    "entry_name",
    "file_session_id",
    "head_kind",
    "head_title",
    "head_title_source",
    "header_in",
    "is_title_slot",
    "is_typed_prompt",
    "listing_title",
    "new_header",
    "ordered_header",
    "pi_session_name",
    "session_file_name",
    "session_name",
    "session_path",
    "session_title",
    "shorten",
    "shown_title",
    "slot_header_title",
    "title_slot_line",
]

TITLE_SLOT_BYTES: Final = 256
NAME_ENTRY_TYPES: Final = frozenset({"session_info", "title_change"})

HeadKind = Literal["slot", "header", "invalid"]

_HEADER_KEY_ORDER = (
    "type",
    "version",
    "id",
    "timestamp",
    "cwd",
    "title",
    "titleSource",
    "parentSession",
)


def is_title_slot(value: object) -> bool:
    """A fixed-width title line of newer oh-my-pi files (not an entry)."""
    return (
        isinstance(value, dict)
        and value.get("type") == "title"
        and value.get("v") == 1
        and isinstance(value.get("title"), str)
        and isinstance(value.get("updatedAt"), str)
        and isinstance(value.get("pad"), str)
        and ("source" not in value or value["source"] in ("auto", "user"))
    )


def head_kind(value: object, first_line: bool) -> HeadKind:
    """What a parsed object before the header is: the title slot (physical line 1
    only), the header, or proof that the file is not a session."""
    if first_line and is_title_slot(value):
        return "slot"
    return "header" if is_valid_header(value) else "invalid"


def header_in(text: str) -> Entry | None:
    """The session header at the start of `text` (the file's first lines), or None
    when the first object after an optional title slot is not one."""
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            value = loads_line(line)
        except (ValueError, UnicodeError):
            continue  # a malformed line is skipped, as every reader skips it
        kind = head_kind(value, number == 1)
        if kind != "slot":
            return value if kind == "header" else None
    return None


def _blank(text: object) -> bool:
    return not isinstance(text, str) or not text.strip()


def head_title(has_slot: bool, slot_title: object, header_title: object) -> str | None:
    """Rule 1 on the fields a listing keeps: the slot's title when the file has a
    slot (an empty one removes the header's), else the header's."""
    title = slot_title if has_slot else header_title
    return title if isinstance(title, str) and title else None


def head_title_source(has_slot: bool, slot_source: object, header_source: object) -> str | None:
    """ "user" or "auto": the slot's `source` replaces the header's `titleSource`."""
    source = slot_source if has_slot else header_source
    return source if isinstance(source, str) else None


def slot_header_title(header: Mapping[str, Any], slot: Mapping[str, Any] | None) -> str | None:
    """The header's title once a title slot (if any) replaced it (rule 1)."""
    return head_title(slot is not None, slot and slot.get("title"), header.get("title"))


def entry_name(entry: Mapping[str, Any]) -> str | None:
    """For a name entry (`session_info`/`title_change`), its name; "" when it clears
    the name. None for any other entry."""
    kind = entry.get("type")
    if kind != "session_info" and kind != "title_change":
        return None
    name = entry.get("name" if kind == "session_info" else "title")
    return name.strip() if isinstance(name, str) else ""


def session_name(title: str | None, latest_entry_name: str | None) -> str | None:
    """The session's name from the header title (after the slot) and the latest name
    entry's name ("" when it cleared the name, None when there was none); rules 2-3."""
    if not _blank(title):
        return title
    return latest_entry_name or None


# What JavaScript's `String.prototype.trim` removes (WhiteSpace and LineTerminator).
_JS_TRIM: Final = (
    "\t\n\x0b\x0c\r \xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_LINE_BREAKS: Final = re.compile(r"[\r\n]+")


def pi_session_name(name: str) -> str:
    """A name as pi 1.6 stores it in a `session_info` entry: each run of line breaks
    one space, the ends trimmed as JavaScript trims (pi 0.73 only trimmed)."""
    return _LINE_BREAKS.sub(" ", name).strip(_JS_TRIM)


def listing_title(name: str | None, short_summary: str | None) -> str | None:
    """`SessionInfo.title`: the name, else the last compaction's short summary."""
    if name:
        return name
    return None if _blank(short_summary) else short_summary


def session_title(
    has_slot: bool,
    slot_title: object,
    header_title: object,
    latest_entry_name: str | None,
    short_summary: str | None,
) -> str | None:
    """`SessionInfo.title` from the fields a listing keeps: rules 1-3, then the short
    summary (both backends' listings decide it here)."""
    name = session_name(head_title(has_slot, slot_title, header_title), latest_entry_name)
    return listing_title(name, short_summary)


# Claude Code's markup in a user message: blocks that are no prompt, and the command tags.
_NOT_PROMPT = re.compile(
    r"<(system-reminder|local-command-stdout|local-command-stderr|local-command-caveat|"
    r"user-prompt-submit-hook|bash-stdout|bash-stderr)>.*?</\1>",
    re.S,
)
_COMMAND_NAME = re.compile(r"<command-name>(.*?)</command-name>", re.S)
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.S)
_TAG = re.compile(
    r"</?(command-message|command-name|command-args|command-contents|bash-input|"
    r"system-reminder|local-command-stdout|local-command-caveat)>"
)
_INTERRUPTED = "[Request interrupted"
GEMINI_REFERENCED: Final = "--- Content from referenced files ---"
"""Where Gemini CLI's user message stops being the prompt: the @files' content follows."""
SHORT_TITLE_CHARS: Final = 80
"""How long a title that heads a page or a row may be (`shorten`)."""


def clean_title(text: object) -> str | None:
    """`text` as a title: one line, without Claude Code's markup (a slash command's
    message is the command and its arguments) nor the files Gemini CLI appends for an
    @file; None when nothing is left."""
    if not isinstance(text, str):
        return None
    text = text.split(GEMINI_REFERENCED, 1)[0]
    command = _COMMAND_NAME.search(text)
    if command is not None:
        args = _COMMAND_ARGS.search(text)
        text = command.group(1) + (" " + args.group(1) if args is not None else "")
    else:
        text = _TAG.sub(" ", _NOT_PROMPT.sub(" ", text))
    cleaned = " ".join(text.split())
    return cleaned or None


def is_typed_prompt(text: object) -> bool:
    """Whether a user message's text is a prompt someone typed, the first of which titles
    a session: not a bare slash command (`/exit`, `/clear`: a name without arguments),
    not a command's output, an interruption notice or markup alone."""
    if not isinstance(text, str) or text.lstrip().startswith(_INTERRUPTED):
        return False
    command = _COMMAND_NAME.search(text)
    if command is not None:
        args = _COMMAND_ARGS.search(text)
        return args is not None and bool(args.group(1).strip())
    return clean_title(text) is not None


def shorten(text: str, width: int = SHORT_TITLE_CHARS) -> str:
    """`text` in at most `width` characters: cut at a word where one is near, with `…`."""
    if len(text) <= width:
        return text
    cut = text[: max(1, width - 1)]
    space = cut.rfind(" ")
    if space >= width * 0.6:
        cut = cut[:space]
    return cut.rstrip() + "…"


def shown_title(
    title: object, first_message: object, session_id: str, width: int | None = None
) -> str:
    """The one title a session is shown by: its title (name, else short summary), else
    its first user message, else `Session <first 8 of the id>`; cleaned, and shortened
    to `width` when given."""
    text = clean_title(title) or clean_title(first_message) or f"Session {session_id[:8]}"
    return shorten(text, width) if width is not None else text


def ordered_header(header: Mapping[str, Any]) -> Entry:
    """The header with known keys in the reference order, unknown keys after."""
    ordered = {k: header[k] for k in _HEADER_KEY_ORDER if k in header}
    for key, value in header.items():
        if key not in ordered:
            ordered[key] = value
    return ordered


def new_header(
    cwd: str,
    parent_session: str | None = None,
    *,
    title: str | None = None,
    title_source: str | None = None,
    session_id: str | None = None,
    timestamp: str | None = None,
) -> Entry:
    """A v3 header, keys in the reference order: `session_id` (default: a new id),
    `timestamp` (default: now), `cwd`, then `title` with its `title_source` and
    `parentSession`, each only when given. Every new header is built here."""
    header: Entry = {
        "type": "session",
        "version": CURRENT_SESSION_VERSION,
        "id": session_id if session_id is not None else generate_session_id(),
        "timestamp": timestamp if timestamp is not None else iso_now(),
        "cwd": cwd,
    }
    if title is not None:
        header["title"] = title
        if title_source is not None:
            header["titleSource"] = title_source
    if parent_session is not None:
        header["parentSession"] = parent_session
    return header


def session_file_name(timestamp: str, session_id: str) -> str:
    """`<timestamp with : and . as ->_<session id>.jsonl`."""
    return f"{timestamp.replace(':', '-').replace('.', '-')}_{session_id}.jsonl"


_STAMPED = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z_(.+)")
"""A session file's stem as the agents name it: `<timestamp>_<session id>`."""


def file_session_id(stem: str) -> str | None:
    """The session id in a session file's stem (its name without `.jsonl`): what
    follows the timestamp, `_`s included (pi 1.6's custom ids may hold them), else
    what follows the last `_`; None without one."""
    stamped = _STAMPED.fullmatch(stem)
    if stamped is not None:
        return stamped.group(1)
    return stem.rsplit("_", 1)[1] if "_" in stem else None


def session_path(session_dir: str, header: Mapping[str, Any]) -> str:
    """Where a session with this header lives in `session_dir`."""
    return os.path.join(session_dir, session_file_name(str(header["timestamp"]), str(header["id"])))


def title_slot_line(title: str, source: str | None, updated_at: str) -> bytes:
    """The fixed-width (256-byte) title line of oh-my-pi, title cut by code points to fit."""

    def line(text: str, pad: str) -> bytes:
        slot: dict[str, Any] = {"type": "title", "v": 1, "title": text}
        if source:
            slot["source"] = source
        slot["updatedAt"] = updated_at
        slot["pad"] = pad
        return serialize_entry_bytes(slot) + b"\n"

    low, high, best = 0, len(title), ""
    while low <= high:
        mid = (low + high) // 2
        if len(line(title[:mid], "")) <= TITLE_SLOT_BYTES:
            best, low = title[:mid], mid + 1
        else:
            high = mid - 1
    unpadded = line(best, "")
    return line(best, " " * (TITLE_SLOT_BYTES - len(unpadded)))


@dataclass(frozen=True, slots=True)
class SessionHead:
    """What comes before a session's entries: its header and oh-my-pi's title slot.

    The slot is kept byte for byte (`slot_raw`) and rewritten at its fixed width on a
    rename; a new file (fork, branch) gets none, its title carried onto the header.
    """

    header: Entry
    slot: Entry | None = None
    slot_raw: bytes | None = None

    def title(self) -> str | None:
        """The header's title after the slot (rule 1)."""
        return slot_header_title(self.header, self.slot)

    def title_source(self) -> str | None:
        """ "user" or "auto" (the slot's `source` replaces the header's `titleSource`)."""
        slot = self.slot
        return head_title_source(
            slot is not None, slot and slot.get("source"), self.header.get("titleSource")
        )

    def renamed(self, title: str, source: str) -> SessionHead:
        header = ordered_header({**self.header, "title": title, "titleSource": source})
        if self.slot_raw is None:
            return SessionHead(header)
        raw = title_slot_line(title, source, iso_now())
        slot: Entry = {"type": "title", "v": 1, "title": title, "source": source}
        return SessionHead(header, slot, raw)

    def with_header(self, header: Mapping[str, Any]) -> SessionHead:
        return SessionHead(ordered_header(header), self.slot, self.slot_raw)

    def carried_title(self, header: Mapping[str, Any]) -> Entry:
        """`header` with this session's title and title source (for a new file)."""
        carried = dict(header)
        title = self.title()
        if title is not None:
            carried["title"] = title
            source = self.title_source()
            if source is not None:
                carried["titleSource"] = source
        return ordered_header(carried)

    def lines(self, header: Entry | None = None) -> bytes:
        """The slot (if any) and the header line (`header` instead of this one's)."""
        line = serialize_entry_bytes(header if header is not None else self.header) + b"\n"
        return line if self.slot_raw is None else self.slot_raw + line
