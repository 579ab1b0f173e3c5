"""Transforms applied to an entry on its way to disk, and back on load (omp rules).

`prepare_for_persist` reproduces omp 18.2.3's `prepareEntryForPersistence`: huge
strings are truncated, transient keys dropped, image payloads moved to the blob
store. In-memory entries keep their originals; the result shares every unchanged
subtree with the input (treat it as read-only) and *is* the input when nothing
changes, which is the common case and costs one early-exit scan.

String lengths are JavaScript lengths (UTF-16 code units) so that files come out
byte-identical to what omp writes.

pi does none of this (it writes `JSON.stringify(entry)`, images inline) and reads no
blob refs: `entry_line(..., pi_form=True)` writes an entry as pi does, refs turned
back into inline data where the blob is there. That is the form of pi's store, and of
any entry read from a file whose line held no ref: written back that way, such a line
comes back byte for byte (a pi line keeps its inline images; an omp line, on which the
transforms change nothing, is the same either way).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
from typing import Any, Final

import orjson

from sessiontree.errors import EntryNotSerializableError
from sessiontree.format import (
    STRICT_DUMPS_OPTIONS,
    allow_deep_nesting,
    as_is_checker,
    find_unserializable,
    serialize_entry_bytes,
)
from sessiontree.layout import IMAGE_KEYS, held_blob_refs, is_image_payload, resolve_blob_refs
from sessiontree.storage import BLOB_REF_PREFIX, BlobStoreLike

__all__ = [
    "BLOB_EXTERNALIZE_THRESHOLD",
    "MAX_PERSIST_CHARS",
    "TRUNCATION_NOTICE",
    "b64decode_lenient",
    "entry_line",
    "held_blob_refs",
    "js_len",
    "may_persist_otherwise",
    "prepare_for_persist",
    "resolve_blob_refs",
    "truncate_for_persist",
    "validate_entry",
]

MAX_PERSIST_CHARS: Final = 500_000
TRUNCATION_NOTICE: Final = "\n\n[Session persistence truncated large content]"
BLOB_EXTERNALIZE_THRESHOLD: Final = 1024

_log = logging.getLogger("sessiontree")

# The notice is ASCII, so its code-point length is its UTF-16 length.
_KEEP_UNITS: Final = MAX_PERSIST_CHARS - len(TRUNCATION_NOTICE)  # 499953
# A string of at most this many code points cannot exceed the limit in UTF-16 units.
_SAFE_LEN: Final = MAX_PERSIST_CHARS // 2
_SIGNATURE_KEYS: Final = frozenset({"thinkingSignature", "thoughtSignature", "textSignature"})
_DROP_KEYS: Final = ("jsonlEvents", "partialJson")
# Objects whose `type` or parent key may trigger a rule other than the generic walk.
_SPECIAL_TYPES: Final = frozenset(
    {
        "image_generation_call",
        "anthropicServerTool",
        "anthropicCompaction",
        "thinking",
        "text",
        "toolCall",
        "redactedThinking",
        "reasoning",
    }
)
_SPECIAL_KEYS: Final = IMAGE_KEYS | {"anthropicCompaction"}
_SERVER_TOOL_NAMES: Final = frozenset(
    {"web_search", "tool_search_tool_regex", "tool_search_tool_bm25"}
)
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_NOT_B64: Final = re.compile(r"[^A-Za-z0-9+/_-]+")
_URLSAFE_TO_STD: Final = str.maketrans("-_", "+/")

_SCALAR_TYPES: Final = frozenset({int, float, bool, type(None)})

JSONDict = dict[str, Any]


# -- strings ---------------------------------------------------------------------------------


def js_len(s: str) -> int:
    """JavaScript `s.length`: UTF-16 code units (a character above U+FFFF counts 2)."""
    if s.isascii():
        return len(s)
    # surrogatepass: a lone surrogate (possible in parsed JSON) is one unit, as in JS.
    return len(s.encode("utf-16-le", "surrogatepass")) >> 1


def _js_len_over(s: str, limit: int) -> bool:
    n = len(s)
    if n > limit:
        return True
    if n * 2 <= limit:
        return False
    return js_len(s) > limit


def truncate_for_persist(s: str) -> str:
    """Cut `s` to its first 499953 UTF-16 units (never half a surrogate pair) + the notice.

    Strings of at most `MAX_PERSIST_CHARS` units are returned unchanged.
    """
    if not _js_len_over(s, MAX_PERSIST_CHARS):
        return s
    # The first _KEEP_UNITS units lie within the first _KEEP_UNITS code points.
    head = s[:_KEEP_UNITS]
    if head.isascii():
        return head + TRUNCATION_NOTICE
    units = head.encode("utf-16-le", "surrogatepass")
    if len(units) == 2 * len(head):
        # No astral characters: code points are units; only a lone high surrogate can end it.
        if "\ud800" <= head[-1] <= "\udbff":
            head = head[:-1]
        return head + TRUNCATION_NOTICE
    units = units[: 2 * _KEEP_UNITS]
    # Little-endian: the second byte of the last unit is its high byte (0xD8-0xDB: high surrogate).
    if 0xD8 <= units[-1] <= 0xDB:
        units = units[:-2]
    return units.decode("utf-16-le", "surrogatepass") + TRUNCATION_NOTICE


def _utf8(s: str) -> bytes:
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError:
        # Buffer.from(s, "utf8") turns lone surrogates into U+FFFD.
        return _LONE_SURROGATE.sub("\ufffd", s).encode("utf-8")


def b64decode_lenient(data: str) -> bytes:
    """Decode base64 like Node/Bun's `Buffer.from(data, "base64")`.

    Characters outside the (standard or URL-safe) alphabet are skipped, decoding
    stops at the first `=`, and a dangling single character is ignored.
    """
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        pass
    head = data.split("=", 1)[0]
    clean = _NOT_B64.sub("", head).translate(_URLSAFE_TO_STD)
    rem = len(clean) % 4
    if rem == 1:
        clean = clean[:-1]
    elif rem:
        clean += "=" * (4 - rem)
    return base64.b64decode(clean)


def _long_enough_for_blob(s: str) -> bool:
    return _js_len_over(s, BLOB_EXTERNALIZE_THRESHOLD - 1)


def _is_data_url(s: str) -> bool:
    return s.startswith("data:image/") and ";base64," in s


def _is_nonempty_str(v: object) -> bool:
    return isinstance(v, str) and len(v) > 0


# -- shape predicates (mirroring omp's session-persistence.ts) -------------------------------


def _should_externalize_image(o: JSONDict, key: str | None) -> bool:
    if not is_image_payload(o, key):
        return False
    data: str = o["data"]
    return not data.startswith(BLOB_REF_PREFIX) and _long_enough_for_blob(data)


def _externalize_generation_result(o: JSONDict) -> bool:
    r = o.get("result")
    return isinstance(r, str) and not r.startswith(BLOB_REF_PREFIX) and _long_enough_for_blob(r)


def _is_server_tool_history(block: object) -> bool:
    # omp's isAnthropicServerToolHistoryBlock, on the fields it looks at.
    if not isinstance(block, dict):
        return False
    t = block.get("type")
    if t == "server_tool_use":
        name = block.get("name")
        return (
            isinstance(name, str)
            and name in _SERVER_TOOL_NAMES
            and _is_nonempty_str(block.get("id"))
        )
    if t in ("web_search_tool_result", "tool_search_tool_result"):
        return _is_nonempty_str(block.get("tool_use_id")) and "content" in block
    return False


def _is_verbatim(o: JSONDict, t: object, key: str | None) -> bool:
    """Signed, encrypted or provider-validated blocks persist byte for byte."""
    if t == "anthropicServerTool":
        return "block" in o and _is_server_tool_history(o["block"])
    if t == "anthropicCompaction":
        return True
    if key == "anthropicCompaction" and isinstance(o.get("content"), str):
        return True
    if t == "thinking":
        return _is_nonempty_str(o.get("thinkingSignature"))
    if t == "text":
        return _is_nonempty_str(o.get("textSignature"))
    if t == "toolCall":
        return _is_nonempty_str(o.get("thoughtSignature"))
    if t == "redactedThinking":
        return _is_nonempty_str(o.get("data"))
    if t == "reasoning":
        return _is_nonempty_str(o.get("encrypted_content"))
    return False


# -- the early-exit scan (common case: nothing to do) ----------------------------------------
# Hot path: runs on every appended entry, so checks are inlined and ordered by cost.


def _scan_dict(o: JSONDict, key: str | None) -> bool:
    # Conservative: only rules that *change* an object are checked here. Verbatim
    # blocks are walked like any other, and a false alarm costs only the exact
    # transform, which still returns the entry itself when nothing changed.
    if (o.get("type") == "image_generation_call" and _externalize_generation_result(o)) or (
        key in IMAGE_KEYS and "data" in o and _should_externalize_image(o, key)
    ):
        return True
    if "jsonlEvents" in o or "partialJson" in o:
        return True
    for k, v in o.items():
        tv = type(v)
        if tv is str:
            if (len(v) > _SAFE_LEN or k == "image_url") and _str_may_change(v, k):
                return True
        elif tv is dict:
            if _scan_dict(v, k):
                return True
        elif tv is list:
            if _scan_list(v, k):
                return True
        elif tv not in _SCALAR_TYPES and _scan_other(v, k):
            return True
    return False


def _scan_list(items: list[Any] | tuple[Any, ...], key: str | None) -> bool:
    for v in items:
        tv = type(v)
        if tv is dict:
            if _scan_dict(v, key):
                return True
        elif tv is str:
            if (len(v) > _SAFE_LEN or key == "image_url") and _str_may_change(v, key):
                return True
        elif tv is list:
            if _scan_list(v, key):
                return True
        elif tv not in _SCALAR_TYPES and _scan_other(v, key):
            return True
    return False


def _scan_other(v: object, key: str | None) -> bool:
    # Subclasses (OrderedDict, str enums, ...) and tuples: rare, so checked last.
    if isinstance(v, str):
        return _str_may_change(v, key)
    if isinstance(v, dict):
        return _scan_dict(v, key)
    if isinstance(v, list | tuple):
        return _scan_list(v, key)
    return False


def _str_may_change(s: str, key: str | None) -> bool:
    if len(s) > _SAFE_LEN and key not in _SIGNATURE_KEYS and _js_len_over(s, MAX_PERSIST_CHARS):
        return True
    return key == "image_url" and _is_data_url(s)


# -- the copy-on-write transform ------------------------------------------------------------


def _transform(v: Any, key: str | None, blobs: BlobStoreLike) -> Any:
    if isinstance(v, str):
        if key == "image_url" and _is_data_url(v):
            return blobs.put(_utf8(v)).ref
        if key in _SIGNATURE_KEYS:
            # omp 18.2.3 keeps signature values verbatim at any length: a cut or
            # cleared signature makes the provider reject the replay.
            return v
        return truncate_for_persist(v)
    if isinstance(v, dict):
        return _transform_dict(v, key, blobs)
    if isinstance(v, list | tuple):
        out: list[Any] | None = None
        for i, item in enumerate(v):
            new = _transform(item, key, blobs)
            if out is None and new is not item:
                out = list(v[:i])
            if out is not None:
                out.append(new)
        return v if out is None else out
    return v


def _transform_dict(o: JSONDict, key: str | None, blobs: BlobStoreLike) -> JSONDict:
    t = o.get("type")
    if key in _SPECIAL_KEYS or (type(t) is str and t in _SPECIAL_TYPES):
        if t == "image_generation_call" and _externalize_generation_result(o):
            # omp decodes this as base64 and returns without descending further.
            return {**o, "result": blobs.put(b64decode_lenient(o["result"])).ref}
        if key in IMAGE_KEYS and _should_externalize_image(o, key):
            mime = o.get("mimeType")
            ref = blobs.put(
                b64decode_lenient(o["data"]), mime if isinstance(mime, str) else None
            ).ref
            return {**o, "data": ref}
        if _is_verbatim(o, t, key):
            return o
    out: JSONDict | None = None
    for k, v in o.items():
        drop = k in _DROP_KEYS
        new = v if drop else _transform(v, k, blobs)
        if out is None:
            if not drop and new is v:
                continue
            # First change: copy the keys before this one, keeping their order.
            out = {}
            for k2, v2 in o.items():
                if k2 == k:
                    break
                out[k2] = v2
        if not drop:
            out[k] = new
    if out is None:
        return o
    content, line_count = out.get("content"), out.get("lineCount")
    if (
        isinstance(content, str)
        and isinstance(line_count, int | float)
        and not isinstance(line_count, bool)
    ):
        # omp recomputes lineCount whenever the object changed (split("\n").length).
        out["lineCount"] = content.count("\n") + 1
    return out


# -- OpenAI Responses: drop thinking signatures duplicated in providerPayload ----------------


def _reasoning_item(item: object) -> tuple[str | None, str | None] | None:
    if not isinstance(item, dict) or item.get("type") != "reasoning":
        return None
    enc, rid = item.get("encrypted_content"), item.get("id")
    return (
        enc if _is_nonempty_str(enc) else None,
        rid if _is_nonempty_str(rid) else None,
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"not JSON: {name}")  # JSON.parse has no NaN/Infinity


def _signature_covered(signature: str, encrypted: set[str], ids: set[str]) -> bool:
    try:
        parsed = json.loads(signature, parse_constant=_reject_constant)
    except ValueError:
        return False
    item = _reasoning_item(parsed)
    if item is None:
        return False
    enc, rid = item
    if enc is not None:
        return enc in encrypted
    if rid is not None:
        return rid in ids
    return False


def _strip_replayed_reasoning_signatures(entry: JSONDict) -> JSONDict:
    """omp's stripReplayedReasoningSignatures (the on-disk copy only)."""
    if entry.get("type") != "message":
        return entry
    message = entry.get("message")
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return entry
    payload = message.get("providerPayload")
    if not isinstance(payload, dict) or payload.get("type") != "openaiResponsesHistory":
        return entry
    items, content = payload.get("items"), message.get("content")
    if not isinstance(items, list) or not isinstance(content, list):
        return entry

    def signed(block: object) -> bool:
        return (
            isinstance(block, dict)
            and block.get("type") == "thinking"
            and _is_nonempty_str(block.get("thinkingSignature"))
        )

    if not any(signed(b) for b in content):
        return entry
    encrypted: set[str] = set()
    ids: set[str] = set()
    for raw in items:
        item = _reasoning_item(raw)
        if item is not None:
            if item[0] is not None:
                encrypted.add(item[0])
            if item[1] is not None:
                ids.add(item[1])
    if not encrypted and not ids:
        return entry
    changed = False
    new_content: list[Any] = []
    for block in content:
        if signed(block) and _signature_covered(block["thinkingSignature"], encrypted, ids):
            block = {k: v for k, v in block.items() if k != "thinkingSignature"}
            changed = True
        new_content.append(block)
    if not changed:
        return entry
    return {**entry, "message": {**message, "content": new_content}}


# -- public entry points --------------------------------------------------------------------


def prepare_for_persist(entry: JSONDict, blobs: BlobStoreLike) -> JSONDict:
    """The entry as omp writes it to disk; `entry` itself when nothing changes.

    - strings over 500000 UTF-16 units are cut (see `truncate_for_persist`),
      except in signed/encrypted blocks and signature keys, which persist verbatim;
    - `jsonlEvents` and `partialJson` keys are removed at any depth;
    - an object that changed and has a string `content` and numeric `lineCount`
      gets `lineCount` recomputed;
    - image payloads (`{type:"image",data}` under `content`; image objects under
      `images`/`frames`) with data of >= 1024 units become blob refs, as do
      `image_generation_call.result` and `image_url` data URLs;
    - OpenAI Responses thinking signatures duplicated in `providerPayload` are dropped.

    Unchanged subtrees are shared with `entry`, which is never mutated.
    """
    stripped = _strip_replayed_reasoning_signatures(entry)
    if stripped is entry and not _scan_dict(entry, None):
        return entry
    return _transform_dict(stripped, None, blobs)


# -- entries as lines ---------------------------------------------------------------------

_DUMPS_OPTIONS: Final = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
_BATCH_BYTES: Final = 1 << 20


def _not_serializable(entry: JSONDict, exc: BaseException) -> EntryNotSerializableError:
    found = allow_deep_nesting(lambda: find_unserializable(entry))
    if found is None:
        return EntryNotSerializableError("", exc)
    return EntryNotSerializableError(*found)


def validate_entry(entry: JSONDict) -> bytes:
    """Raise EntryNotSerializableError (naming the key path) unless `entry` can be
    written as JSON; what an entry not yet written must pass before it is added.
    Returns the entry as JSON (not necessarily in JavaScript's form: to look into)."""
    try:
        return orjson.dumps(entry, option=_DUMPS_OPTIONS)
    except (TypeError, orjson.JSONEncodeError):
        # orjson refuses some things JSON.stringify writes (lone surrogates, huge
        # ints, deep nesting, undefined): the exact encoder decides.
        try:
            return serialize_entry_bytes(entry)
        except (TypeError, ValueError) as exc:
            raise _not_serializable(entry, exc) from exc


# The fast path of `entry_line`: orjson writes the entry, then one walk
# (`jsonl.as_is_checker`) vouches that neither a transform above nor JavaScript's
# number and key layout would change a byte. These keys are where a transform can
# start, so they get a look on every object that has them; the rest is covered by
# the checker (numbers, array-index keys, plain dicts and lists) and by the line's
# length (a line of at most _SAFE_LEN bytes holds no string that can be cut).


def _data_unchanged(value: Any, obj: JSONDict) -> bool:
    return not isinstance(value, str)  # no image payload without string data


def _result_unchanged(value: Any, obj: JSONDict) -> bool:
    return obj.get("type") != "image_generation_call"


def _image_url_unchanged(value: Any, obj: JSONDict) -> bool:
    if isinstance(value, str):
        return not _is_data_url(value)
    return not isinstance(value, list | tuple)


def _never_unchanged(value: Any, obj: JSONDict) -> bool:
    return False  # jsonlEvents, partialJson: always dropped


def _payload_unchanged(value: Any, obj: JSONDict) -> bool:
    return not (isinstance(value, dict) and value.get("type") == "openaiResponsesHistory")


_js_as_is = as_is_checker()
_REF_MARK: Final = BLOB_REF_PREFIX.encode("ascii")

_written_as_is = as_is_checker(
    {
        "data": _data_unchanged,
        "result": _result_unchanged,
        "image_url": _image_url_unchanged,
        "jsonlEvents": _never_unchanged,
        "partialJson": _never_unchanged,
        "providerPayload": _payload_unchanged,
    }
)
_LINE_OPTIONS: Final = STRICT_DUMPS_OPTIONS | orjson.OPT_APPEND_NEWLINE


def entry_line(entry: JSONDict, blobs: BlobStoreLike, *, pi_form: bool = False) -> bytes:
    """The entry's line as written (the transforms above applied, newline included);
    with `pi_form`, as pi writes it (see the module doc).

    EntryNotSerializableError for a value JSON cannot hold; OSError when the blob
    store cannot take the entry's images.
    """
    if pi_form:
        return _pi_line(entry, blobs)
    try:
        line = orjson.dumps(entry, option=_LINE_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError included: the exact path decides
        pass
    else:
        try:
            if len(line) <= _SAFE_LEN and _written_as_is(entry):
                return line
        except RecursionError:
            pass
    return _entry_line_slow(entry, blobs)


def _entry_line_slow(entry: JSONDict, blobs: BlobStoreLike) -> bytes:
    """`entry_line` without the fast path: the transforms, then `serialize_entry_bytes`."""
    try:
        try:
            prepared = prepare_for_persist(entry, blobs)
        except RecursionError:
            prepared = allow_deep_nesting(lambda: prepare_for_persist(entry, blobs))
        return serialize_entry_bytes(prepared) + b"\n"
    except (TypeError, ValueError) as exc:
        raise _not_serializable(entry, exc) from exc


_MAY_TRANSFORM: Final = re.compile(
    rb'"(?:partialJson|jsonlEvents)"|"openaiResponsesHistory"'
    rb'|"(?:data|result)":"(?!blob:sha256:)[^"]{1024}|data:image/[^"]{1013}'
)
"""What a line needs before a transform can change it: a transient key, the payload whose
duplicated signatures are dropped, or an inline image of 1024 characters or more (base64
and data URLs hold no escapes, so characters are bytes)."""


def may_persist_otherwise(line: bytes) -> bool:
    """Whether the persistence transforms may write the entry of `line` (as it is on
    disk) otherwise; False means its line already is what oh-my-pi writes for it."""
    return len(line) > MAX_PERSIST_CHARS or _MAY_TRANSFORM.search(line) is not None


def _pi_line(entry: JSONDict, blobs: BlobStoreLike) -> bytes:
    """`JSON.stringify(entry)` + newline, blob refs resolved back to inline data."""
    try:
        line = orjson.dumps(entry, option=_LINE_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError included: the exact path decides
        line = None
    if line is not None and _REF_MARK not in line:
        try:
            if _js_as_is(entry):
                return line
        except RecursionError:
            pass
    if line is None or _REF_MARK in line:
        entry = allow_deep_nesting(lambda: resolve_blob_refs(entry, blobs))
    try:
        return serialize_entry_bytes(entry) + b"\n"
    except (TypeError, ValueError) as exc:
        raise _not_serializable(entry, exc) from exc
