"""JSONL codec: lenient parsing and `JSON.stringify`-identical serialization.

Session files are shared with TypeScript agents, so one entry must serialize to
exactly the bytes `JSON.stringify` writes. orjson gives the right bytes for
everything except some numbers (it writes `1.0`, `-0.0`, `3e-6`, `1e+20` where
JavaScript writes `1`, `0`, `0.000003`, `100000000000000000000`) and it refuses
lone surrogates, which JavaScript escapes as `\\udXXX`. The fast path is orjson;
a number fix-up pass and an exact pure-Python encoder cover the rest.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from decimal import Decimal
from json.encoder import encode_basestring
from typing import Any, TypeVar

import orjson

from sessiontree._util.unset import UnsetType

__all__ = [
    "STRICT_DUMPS_OPTIONS",
    "KeyRule",
    "allow_deep_nesting",
    "as_is_checker",
    "find_unserializable",
    "iter_jsonl_bytes",
    "js_number",
    "loads_line",
    "loads_object",
    "parse_jsonl_lenient",
    "serialize_entry",
    "serialize_entry_bytes",
]

_MAX_SAFE_INTEGER = 2**53
# Deep enough for what V8 parses in practice, shallow enough for the C stack.
_DEEP_RECURSION_LIMIT = 30_000
T = TypeVar("T")

_INDEX_KEY_STR = re.compile(r"0|[1-9][0-9]{0,9}")
_MAX_INDEX = 2**32 - 2
_SURROGATE = re.compile("[\ud800-\udfff]")


def js_number(value: float | int) -> str:
    """Format a number exactly as JavaScript's `Number.prototype.toString` does."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if -_MAX_SAFE_INTEGER <= value <= _MAX_SAFE_INTEGER:
            return str(value)
        try:
            value = float(value)  # JavaScript holds every number as a double
        except OverflowError:
            return "null"  # beyond a double: Infinity, which JSON.stringify writes as null
    if math.isnan(value) or math.isinf(value):
        return "null"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    # repr() gives the shortest round-trip digits, as ECMAScript requires.
    _, digit_tuple, exponent = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    k = len(digits)
    n = len(digit_tuple) + exponent  # decimal point position
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
        body = f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"
    return sign + body


def _encode_str(s: str) -> str:
    out: str = encode_basestring(s)
    if _SURROGATE.search(out) is None:
        return out
    # Python keeps surrogate code points apart; JavaScript sees adjacent
    # high+low units as one character and escapes only lone ones.
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", _join_pairs(out))


def _join_pairs(s: str) -> str:
    return re.sub(
        "[\ud800-\udbff][\udc00-\udfff]",
        lambda m: m.group(0).encode("utf-16-le", "surrogatepass").decode("utf-16-le"),
        s,
    )


def _encode_slow(obj: Any, parts: list[str]) -> bool:
    """Exact `JSON.stringify`; returns False where JS would yield `undefined`."""
    if obj is None:
        parts.append("null")
    elif obj is True:
        parts.append("true")
    elif obj is False:
        parts.append("false")
    elif isinstance(obj, str):
        parts.append(_encode_str(obj))
    elif isinstance(obj, (int, float)):
        parts.append(js_number(obj))
    elif isinstance(obj, dict):
        parts.append("{")
        first = True
        for key, value in _js_key_order(obj):
            if isinstance(value, UnsetType) or callable(value):
                continue
            mark = len(parts)
            if not first:
                parts.append(",")
            parts.append(_encode_str(key if isinstance(key, str) else _key_str(key)))
            parts.append(":")
            if _encode_slow(value, parts):
                first = False
            else:
                del parts[mark:]
        parts.append("}")
    elif isinstance(obj, (list, tuple)):
        parts.append("[")
        for i, item in enumerate(obj):
            if i:
                parts.append(",")
            if not _encode_slow(item, parts):
                parts.append("null")  # JSON.stringify writes undefined items as null
        parts.append("]")
    elif isinstance(obj, UnsetType):
        return False
    else:
        raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")
    return True


def _is_index_key(key: object) -> bool:
    return (
        isinstance(key, str)
        and _INDEX_KEY_STR.fullmatch(key) is not None
        and int(key) <= _MAX_INDEX
    )


def _js_key_order(obj: dict[Any, Any]) -> list[tuple[Any, Any]]:
    """Items in JavaScript's property order: array-index keys ascending, then the rest."""
    items = list(obj.items())
    if not any(_is_index_key(k) for k, _ in items):
        return items
    index = sorted(((k, v) for k, v in items if _is_index_key(k)), key=lambda kv: int(kv[0]))
    return index + [(k, v) for k, v in items if not _is_index_key(k)]


def _key_str(key: object) -> str:
    if isinstance(key, bool) or key is None:
        return json.dumps(key)
    if isinstance(key, (int, float)):
        return js_number(key)
    return str(key)


def allow_deep_nesting(fn: Callable[[], T]) -> T:
    """Run a recursive codec step, allowing the nesting depth JavaScript allows.

    orjson stops at a few hundred levels and Python's recursion limit at 1000;
    `JSON.parse`/`JSON.stringify` go much deeper, and a valid line must not be
    lost or unwritable because of that.
    """
    try:
        return fn()
    except RecursionError:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, _DEEP_RECURSION_LIMIT))
        try:
            return fn()
        finally:
            sys.setrecursionlimit(limit)


def _float_is_plain(value: float) -> bool:
    """Whether orjson writes this float exactly as JavaScript does.

    Both print the shortest round-trip digits; they differ only in layout:
    integral values (orjson `1.0`), and the ranges where one of them switches
    to exponent notation.
    """
    magnitude = abs(value)
    return 1e-4 <= magnitude < 1e16 and not value.is_integer()


def _jsify(obj: Any) -> Any:
    """`obj`, or a copy where orjson would differ from `JSON.stringify`.

    Numbers that orjson lays out differently become `orjson.Fragment`s holding the
    JavaScript text; objects with array-index keys ("0", "42") get JavaScript's
    property order; keys holding UNSET are dropped. Returns `obj` itself (no copy)
    in the common case where nothing needs changing. Unhashable surprises are left
    for orjson to reject (the exact encoder then takes over).
    """
    cls = obj.__class__
    if cls is dict:
        out: dict[Any, Any] | None = None
        reorder = False
        for key, value in obj.items():
            vcls = value.__class__
            if vcls is str or vcls is bool or value is None:
                new = value
            elif vcls is int:
                new = (
                    value if -_MAX_SAFE_INTEGER <= value <= _MAX_SAFE_INTEGER else _fragment(value)
                )
            elif vcls is float:
                new = value if _float_is_plain(value) else _fragment(value)
            elif vcls is dict or vcls is list:
                new = _jsify(value)
            elif vcls is UnsetType:
                if out is None:
                    out = _prefix(obj, key)
                continue
            else:
                new = value
            if not reorder and key.__class__ is str and key[:1].isdigit() and _is_index_key(key):
                reorder = True
            if out is None:
                if new is value:
                    continue
                out = _prefix(obj, key)
            out[key] = new
        result = obj if out is None else out
        if reorder:
            return dict(_js_key_order(result))
        return result
    if cls is list:
        copied: list[Any] | None = None
        for i, value in enumerate(obj):
            vcls = value.__class__
            if vcls is str or vcls is bool or value is None:
                continue
            if vcls is int:
                new = (
                    value if -_MAX_SAFE_INTEGER <= value <= _MAX_SAFE_INTEGER else _fragment(value)
                )
            elif vcls is float:
                new = value if _float_is_plain(value) else _fragment(value)
            elif vcls is dict or vcls is list:
                new = _jsify(value)
            else:
                continue
            if new is not value:
                if copied is None:
                    copied = list(obj)
                copied[i] = new
        return obj if copied is None else copied
    return obj


KeyRule = Callable[[Any, dict[Any, Any]], bool]
"""A look at one key's value (and the object holding it): True when it needs nothing."""

# Keys seen to need no look, shared by every checker; bounded, so that sessions
# with ever-new keys (paths as keys, say) cost a per-key look but no memory.
_KNOWN_KEYS_MAX = 8192
_KNOWN_KEY_LEN = 64


def as_is_checker(attention: dict[str, KeyRule] | None = None) -> Callable[[Any], bool]:
    """A predicate on a value that orjson has just written with `OPT_STRICT_INTEGER`:
    True when those bytes are exactly `JSON.stringify`'s, so `_jsify` would change
    nothing. It is the one walk of the hot path, and it is conservative: False only
    sends the value down the exact path.

    What it looks at: each float (plain, see `_float_is_plain`); each key, once per
    process (an array-index key such as "0" is reordered by JavaScript); and nothing
    else of a str, int (orjson's strict mode refused those beyond 2^53), bool or None.
    Containers other than plain dicts and lists, and any other value, answer False.
    `attention` maps the keys a caller must look at on every object to a `KeyRule`
    (persistence uses it for its transforms); those keys are never cached.
    """
    rules: dict[str, KeyRule] = dict(attention or {})
    known: set[str] = set()
    covered = known.issuperset
    add_known = known.add
    rule_for = rules.get

    def new_keys(obj: dict[Any, Any]) -> bool:
        for key in obj:
            if key in known:
                continue
            rule = rule_for(key) if key.__class__ is str else None
            if rule is not None:
                if not rule(obj[key], obj):
                    return False
                continue
            if key.__class__ is not str or _is_index_key(key):
                return False
            if len(known) < _KNOWN_KEYS_MAX and len(key) <= _KNOWN_KEY_LEN:
                add_known(key)
        return True

    def check_dict(obj: dict[Any, Any]) -> bool:
        return (covered(obj) or new_keys(obj)) and check_values(obj.values())

    def check_values(items: Iterable[Any]) -> bool:
        """A list's items or a dict's values: all written by orjson as JS writes them."""
        for value in items:
            cls = value.__class__
            if cls is str or cls is int:
                continue
            if cls is dict:
                if not check_dict(value):
                    return False
            elif cls is float:
                # _float_is_plain, inlined: the hot path's only per-number cost.
                if not ((1e-4 <= value < 1e16 or -1e16 < value <= -1e-4) and value % 1.0):
                    return False
            elif cls is list:
                if not check_values(value):
                    return False
            elif cls is not bool and value is not None:
                return False
        return True

    def check(obj: Any) -> bool:
        cls = obj.__class__
        if cls is dict:
            return check_dict(obj)
        if cls is list:
            return check_values(obj)
        if cls is float:
            return _float_is_plain(obj)
        return cls is str or cls is int or cls is bool or obj is None

    return check


def _fragment(value: float | int) -> orjson.Fragment:
    return orjson.Fragment(js_number(value).encode())


def _prefix(obj: dict[Any, Any], stop: Any) -> dict[Any, Any]:
    """A new dict holding `obj`'s items before key `stop`."""
    out: dict[Any, Any] = {}
    for key, value in obj.items():
        if key == stop:
            break
        out[key] = value
    return out


def _encode_exact(obj: Any) -> bytes:
    parts: list[str] = []
    if not _encode_slow(obj, parts):
        raise TypeError("value serializes to undefined")
    return "".join(parts).encode("utf-8")


# orjson would write datetimes and dataclasses in its own way; JSON.stringify has no
# such values, so they go to the exact encoder, which refuses them.
_DUMPS_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS


STRICT_DUMPS_OPTIONS = _DUMPS_OPTIONS | orjson.OPT_STRICT_INTEGER
"""orjson's options for a first try whose bytes an `as_is_checker` then vouches for:
strict integers, so that no integer beyond JavaScript's exact range passes."""

_as_is = as_is_checker()


def serialize_entry_bytes(obj: Any) -> bytes:
    """`serialize_entry` as UTF-8 bytes, without a trailing newline (the hot path).

    TypeError for a value JSON cannot hold (a set, bytes, a datetime, an object).
    """
    try:
        out = orjson.dumps(obj, option=STRICT_DUMPS_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError included
        pass
    else:
        try:
            if _as_is(obj):
                return out
        except RecursionError:
            pass
    return _serialize_slow(obj)


def _serialize_slow(obj: Any) -> bytes:
    """What the fast path falls back to: orjson after `_jsify`, else the exact encoder."""
    try:
        try:
            prepared = _jsify(obj)
        except RecursionError:
            prepared = allow_deep_nesting(lambda: _jsify(obj))
        return orjson.dumps(prepared, option=_DUMPS_OPTIONS)
    except (TypeError, orjson.JSONEncodeError):
        # Lone surrogates, nesting beyond orjson's limit, ints beyond 64 bits, ...
        return allow_deep_nesting(lambda: _encode_exact(obj))


def _path_step(path: str, key: object) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    text = str(key)
    if text.isidentifier():
        return f"{path}.{text}" if path else text
    return f"{path}[{text!r}]"


def find_unserializable(obj: Any) -> tuple[str, Any] | None:
    """The key path (`message.content[1].data`) and value of the first thing in `obj`
    that JSON cannot hold, or None when it all serializes."""
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        path, value = stack.pop()
        if value is None or isinstance(value, (str, int, float, UnsetType)):
            continue
        if isinstance(value, dict):
            items = [
                (_path_step(path, k), v)
                for k, v in value.items()
                if not callable(v)  # dropped, as JSON.stringify drops functions
            ]
            stack.extend(reversed(items))
        elif isinstance(value, (list, tuple)):
            stack.extend(reversed([(_path_step(path, i), v) for i, v in enumerate(value)]))
        else:
            return path, value
    return None


def serialize_entry(obj: Any) -> str:
    """One line of JSON identical to JavaScript's `JSON.stringify(obj)` (no newline).

    Keys are kept in order, non-ASCII is written raw, keys whose value is `UNSET`
    are omitted, numbers are formatted as JavaScript prints them.
    """
    return serialize_entry_bytes(obj).decode("utf-8")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON constant {name}")


_slow_decoder = json.JSONDecoder(parse_constant=_reject_constant)


def loads_line(line: str | bytes | bytearray | memoryview) -> Any:
    """Parse one JSON text as `JSON.parse` would; raises ValueError when it is invalid.

    The one way every reader parses a line. orjson is tried first; it refuses
    lone-surrogate escapes and numbers beyond a double, which JavaScript accepts, so
    those lines take the exact slow path.
    """
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        pass
    if not isinstance(line, str):
        line = bytes(line).decode("utf-8", "replace")
    text = line.strip(" \t\r\n")
    try:
        return allow_deep_nesting(lambda: _slow_decoder.decode(text))
    except RecursionError as exc:
        raise ValueError("JSON nested too deeply") from exc


def loads_object(line: str | bytes | bytearray | memoryview) -> dict[str, Any] | None:
    """The JSON object on a line (`loads_line`); None when the line is malformed or holds
    another JSON value: every reader skips such a line."""
    try:
        value = loads_line(line)
    except (ValueError, UnicodeError):
        return None
    return value if type(value) is dict else None


def _iter_lines(text: str) -> Iterator[str]:
    if text.startswith("\ufeff"):
        text = text[1:]
    return iter(text.split("\n"))


def parse_jsonl_lenient(text: str) -> list[Any]:
    """Parse JSONL text, one value per line, skipping blank and malformed lines.

    Handles CRLF line ends, a missing final newline and a leading UTF-8 BOM.
    Never raises for any `str`.
    """
    values: list[Any] = []
    append = values.append
    for line in _iter_lines(text):
        if not line or line.isspace():
            continue
        try:
            append(loads_line(line))
        except (ValueError, UnicodeError):
            continue
    return values


def iter_jsonl_bytes(
    chunks: Iterable[bytes],
) -> Iterator[tuple[int, bytes, bool]]:
    """Split a byte stream into lines: yields `(line_number, line, has_newline)`.

    Line numbers start at 1; the line excludes its `\\n`. Used by streaming loads
    so a 1 GB file is never held as one string.
    """
    pending: list[bytes] = []  # pieces of a line that spans chunks (no quadratic concat)
    number = 0
    bom_checked = False
    head = b""
    for chunk in chunks:
        if not bom_checked:
            chunk = head + chunk
            if len(chunk) < 3 and b"\xef\xbb\xbf".startswith(chunk):
                head = chunk  # too short to tell whether a BOM starts the stream
                continue
            bom_checked = True
            if chunk.startswith(b"\xef\xbb\xbf"):
                chunk = chunk[3:]
        find = chunk.find
        end = find(b"\n")
        if end < 0:
            if chunk:
                pending.append(chunk)
            continue
        number += 1
        if pending:
            pending.append(chunk[:end])
            yield number, b"".join(pending), True
            pending = []
        else:
            yield number, chunk[:end], True
        start = end + 1
        while True:
            end = find(b"\n", start)
            if end < 0:
                break
            number += 1
            yield number, chunk[start:end], True
            start = end + 1
        if start < len(chunk):
            pending.append(chunk[start:])
    if not bom_checked and head:
        pending.append(head)
    if pending:
        number += 1
        yield number, b"".join(pending), False
