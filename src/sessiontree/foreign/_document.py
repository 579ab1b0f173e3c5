"""One JSON document (a Gemini CLI session file, an `opencode export`), read even when cut short.

A session written as one pretty-printed document is lost whole by a plain parse
when its end is missing (the agent was writing it, the disk filled up). This
reader parses it whole when it can; otherwise it walks the top-level object key
by key and the arrays of objects in it (`messages`) element by element, keeps
what parses, and reports where the rest was skipped, so the conversation up to
the damage still reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson

from sessiontree._util.fs import open_read
from sessiontree.foreign._records import Damaged
from sessiontree.format import allow_deep_nesting

__all__ = ["Document", "read_document"]

_DECODER = json.JSONDecoder()
_WS = " \t\r\n"


@dataclass(slots=True)
class Document:
    path: str
    value: dict[str, Any] | None
    damaged: list[Damaged] = field(default_factory=list)
    size: int = 0


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _decode(text: str, pos: int) -> tuple[Any, int]:
    """One JSON value at `pos`, nested as deep as JavaScript allows (ValueError past it)."""
    try:
        return allow_deep_nesting(lambda: _DECODER.raw_decode(text, pos))
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc


def _salvage(text: str) -> tuple[dict[str, Any] | None, Damaged | None]:
    """What parses of a damaged top-level object, and where the damage starts."""
    pos = _skip(text, 0)
    if not text.startswith("{", pos):
        return None, Damaged(_line_of(text, pos), "not a JSON object")
    value: dict[str, Any] = {}
    pos += 1
    while True:
        pos = _skip(text, pos)
        if text.startswith("}", pos):
            return value, None
        try:
            key, pos = _decode(text, pos)
            pos = _skip(text, pos)
            if not isinstance(key, str) or not text.startswith(":", pos):
                raise ValueError("no key")
            pos = _skip(text, pos + 1)
        except ValueError:
            return value, Damaged(_line_of(text, pos), "not valid JSON from here (cut short?)")
        if text.startswith("[", pos):
            items: list[Any] = []
            value[key] = items
            pos = _skip(text, pos + 1)
            while not text.startswith("]", pos):
                try:
                    item, pos = _decode(text, pos)
                except ValueError:
                    return value, Damaged(
                        _line_of(text, pos), f"not valid JSON from here in {key!r} (cut short?)"
                    )
                items.append(item)
                pos = _skip(text, pos)
                if text.startswith(",", pos):
                    pos = _skip(text, pos + 1)
                elif not text.startswith("]", pos):
                    return value, Damaged(_line_of(text, pos), f"{key!r} is cut short")
            pos += 1
        else:
            try:
                value[key], pos = _decode(text, pos)
            except ValueError:
                return value, Damaged(_line_of(text, pos), "not valid JSON from here (cut short?)")
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos += 1
        elif not text.startswith("}", pos):
            return value, Damaged(_line_of(text, pos), "the document is cut short")


def parse_document(data: bytes, path: str = "") -> Document:
    """`data` as one JSON object (see the module doc)."""
    document = Document(path, None, size=len(data))
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        document.value = parsed
        return document
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
        document.damaged.append(Damaged(0, "not valid UTF-8 (read with replacements)"))
    if text.startswith("\ufeff"):
        text = text[1:]
    if parsed is not None:
        document.damaged.append(Damaged(1, "not a JSON object"))
        return document
    value, damage = _salvage(text)
    document.value = value
    if damage is not None:
        document.damaged.append(damage)
    return document


def read_document(path: str) -> Document:
    """The JSON object in the file at `path`. Raises OSError when it cannot be read."""
    with open_read(path) as f:
        data = f.read()
    return parse_document(data, path)
