"""The metadata fold (`sessiontree.format.MetaFold`) decides a listing on both backends:
the same session file lists the same on the host filesystem and in PostgreSQL."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiontree.format import (
    AWAITING_HEADER,
    FOLD_FIELDS,
    NOT_A_SESSION,
    SESSION,
    MetaFold,
    serialize_entry_bytes,
    title_slot_line,
)
from sessiontree.layout import store_parts
from sessiontree.listing import clear_listing_cache, list_sessions
from sessiontree.listing._scan import ListingFold
from sessiontree.storage import FileSessionStorage
from tests.conftest import examples
from tests.pg_support import pg_storage

T0 = 1_767_000_000_000_000_000

# -- random session files ------------------------------------------------------------------

words = st.sampled_from(["", " ", "hello", "été", "two words", "line\nbreak", "  pad  ", "x" * 50])
maybe_text = st.one_of(st.none(), words, st.integers(0, 3))  # a non-string where text belongs
iso = st.sampled_from(
    ["2026-02-16T10:00:00.000Z", "2026-02-16T10:00:01.500Z", "2026-02-16", "not a time", ""]
)


def _drop_none(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if v is not None}


@st.composite
def headers(draw: st.DrawFn) -> dict[str, Any]:
    return _drop_none(
        {
            "type": "session",
            "version": draw(st.sampled_from([None, 1, 3])),
            "id": draw(st.sampled_from(["a1b2c3d4", "x", "Sess-ID"])),
            "timestamp": draw(st.one_of(st.none(), iso)),
            "cwd": draw(st.one_of(st.none(), st.sampled_from(["/w/p", ""]), st.integers(0, 1))),
            "title": draw(maybe_text),
            "titleSource": draw(st.sampled_from([None, "user", "auto", 7])),
            "parentSession": draw(st.sampled_from([None, "/w/parent.jsonl", 5])),
        }
    )


stamps = st.one_of(
    st.none(),
    st.integers(-(10**15), 10**16),
    st.just(10**30),  # beyond a bigint
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.booleans(),
    iso,
)


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["user", "assistant", "toolResult", "custom", None]))
    content = draw(
        st.one_of(
            words,
            st.lists(
                st.one_of(
                    st.builds(lambda t: {"type": "text", "text": t}, words),
                    st.just({"type": "image", "data": "AAAA"}),
                    st.just({"type": "text", "text": 3}),
                ),
                max_size=3,
            ),
            st.none(),
        )
    )
    message = _drop_none({"role": role, "content": content, "timestamp": draw(stamps)})
    return _drop_none(
        {
            "type": "message",
            "id": "m",
            "parentId": None,
            "timestamp": draw(st.one_of(st.none(), iso)),
            "message": draw(st.sampled_from([message, message, message, "not an object"])),
        }
    )


turns = st.builds(  # plain turns, as most of a session is
    lambda role, text, at: {
        "type": "message",
        "id": "p",
        "parentId": None,
        "timestamp": "2026-02-16T10:00:00.000Z",
        "message": {"role": role, "content": [{"type": "text", "text": text}], "timestamp": at},
    },
    st.sampled_from(["user", "assistant", "toolResult"]),
    st.sampled_from(["prompt", "reply", "été"]),
    st.integers(1_771_236_000_000, 1_771_236_100_000),
)

entries = st.one_of(
    turns,
    turns,
    messages(),
    st.builds(lambda n: _drop_none({"type": "session_info", "id": "i", "name": n}), maybe_text),
    st.builds(lambda n: _drop_none({"type": "title_change", "id": "t", "title": n}), maybe_text),
    st.builds(
        lambda s: _drop_none({"type": "compaction", "id": "c", "summary": "s", "shortSummary": s}),
        maybe_text,
    ),
    st.just({"type": "model_change", "id": "mc", "provider": "p", "modelId": "m"}),
    st.just({"type": "custom", "id": "cu", "customType": "message"}),  # "message" elsewhere
)

raw_lines = st.sampled_from(
    [
        b"",
        b"   ",
        b"\r",
        b"{not json",
        b"[1, 2]",
        b'"a string"',
        b"null",
        b'{"type":"message","id":"big","message":{"role":"user","content":"huge","timestamp":1e400}}',
        b'{"type":"message","id":"s","message":{"role":"user","content":"\\ud83d half"}}',
        b'{"type":"message","id":"n","message":{"role":"assistant","content":"nul \\u0000 in"}}',
        b'{"type":"\\u006dessage","id":"e","message":{"role":"user","content":"escaped type"}}',
        b'{"type":"session_info","type":"message","id":"d","message":{"role":"user","content":"dup"}}',
        b"\xff\xfe not utf-8",
    ]
)


def _line(item: Any, spaced: bool) -> bytes:
    if isinstance(item, bytes):
        return item
    if spaced:  # not as JSON.stringify writes it: the listing's fast path must not skip it
        return json.dumps(item, ensure_ascii=False).encode()
    return serialize_entry_bytes(item)


@st.composite
def session_files(draw: st.DrawFn) -> tuple[bytes, bool]:
    """(file bytes, whether its last line is complete)."""
    lines: list[bytes] = []
    if draw(st.booleans()):
        source = draw(st.sampled_from([None, "auto", "user"]))
        slot = title_slot_line(draw(words), source, "2026-02-16T10:00:00.000Z").rstrip(b"\n")
        lines.append(slot)
    lines += draw(st.lists(st.sampled_from([b"", b"  ", b"{junk"]), max_size=2))
    head = draw(
        st.one_of(
            headers(),
            headers(),
            headers(),
            st.just({"type": "message", "id": "x"}),  # not a session
        )
    )
    lines.append(_line(head, draw(st.booleans())))
    body = draw(st.lists(st.tuples(st.one_of(entries, entries, raw_lines), st.booleans())))
    lines += [_line(item, spaced) for item, spaced in body]
    complete = draw(st.booleans())
    data = b"\n".join(lines) + (b"\n" if complete else b"")
    if draw(st.integers(0, 9)) == 0:
        data = b"\xef\xbb\xbf" + data
    return data, complete


# -- the fold alone --------------------------------------------------------------------------


FOLDS = [MetaFold, ListingFold]  # PostgreSQL's (every field) and the listing's (no times)


def _fold_lines(data: bytes, kind: type[MetaFold] = MetaFold) -> tuple[MetaFold, list[str]]:
    fold = kind()
    texts = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        text = fold.fold_line(line, number == 1)
        if text is not None:
            texts.append(text)
    return fold, texts


@pytest.mark.parametrize("kind", FOLDS)
@settings(max_examples=examples(300, "SESSIONTREE_FUZZ_EXAMPLES"), deadline=None)
@given(case=session_files(), cut=st.integers(0, 1 << 16))
def test_a_fold_saved_and_resumed_equals_one_fold(
    kind: type[MetaFold], case: tuple[bytes, bool], cut: int
) -> None:
    # What the listing cache and PostgreSQL's appends do: fold some lines, keep the fold
    # (as the listing cache saves it), fold the rest into it.
    data, _ = case
    lines = data.split(b"\n")
    cut = cut % (len(lines) + 1)
    whole, _ = _fold_lines(data, kind)
    first = kind()
    for number, line in enumerate(lines[:cut], start=1):
        first.fold_line(line, number == 1)
    assert first.values() == [getattr(first, n) for n in FOLD_FIELDS]
    resumed = kind.from_values(json.loads(json.dumps(first.values())))
    assert type(resumed) is kind
    for number, line in enumerate(lines[cut:], start=cut + 1):
        resumed.fold_line(line, number == 1)
    assert resumed.values() == whole.values()
    assert whole.state in (AWAITING_HEADER, SESSION, NOT_A_SESSION)
    if kind is ListingFold:
        assert whole.activity is None
        full, _ = _fold_lines(data)  # every other field as the full fold has it
        assert [(n, getattr(whole, n)) for n in FOLD_FIELDS if n != "activity"] == [
            (n, getattr(full, n)) for n in FOLD_FIELDS if n != "activity"
        ]


@pytest.mark.parametrize("kind", FOLDS)
@pytest.mark.parametrize("want_texts", [True, False])
@settings(max_examples=examples(300, "SESSIONTREE_FUZZ_EXAMPLES"), deadline=None)
@given(case=session_files())
def test_the_listing_fast_path_folds_as_line_by_line(
    kind: type[MetaFold], want_texts: bool, case: tuple[bytes, bool]
) -> None:
    data, _ = case
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = data.split(b"\n")
    slow, slow_texts = _fold_lines(data, kind)
    fast = kind()
    texts: list[str] = []
    rest = lines[:-1]
    i = 0
    while i < len(rest) and fast.state == AWAITING_HEADER:
        fast.fold_line(rest[i], i == 0)
        i += 1
    if fast.state == SESSION:
        fast.fold_entries(rest[i:], texts if want_texts else None)
    last = fast.fold_line(lines[-1], len(lines) == 1)
    if last is not None:
        texts.append(last)
    assert fast.values() == slow.values()
    if want_texts:
        assert texts == slow_texts


def test_the_fold_never_takes_a_non_time_for_activity() -> None:
    fold, _ = _fold_lines(
        serialize_entry_bytes({"type": "session", "id": "a", "timestamp": "2026-02-16"})
        + b'\n{"type":"message","message":{"role":"user","content":"x","timestamp":1e400}}'
        + b'\n{"type":"message","message":{"role":"user","content":"y","timestamp":1e30},'
        + b'"timestamp":"2026-02-16T10:00:00.000Z"}'
    )
    assert fold.messages == 2 and fold.first_message == "x"
    assert fold.activity == 1_771_236_000_000  # the entry's time, not 1e30


# -- both backends -------------------------------------------------------------------------


class _WithoutIndex:
    """The same storage, minus the session index: discovery then scans its files."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "list_session_meta":
            raise AttributeError(name)
        return getattr(self._inner, name)


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _stored(text: Any) -> Any:
    """A text as PostgreSQL keeps it: a NUL or a lone surrogate (JSON.parse accepts both,
    a text column neither) becomes U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", text) if isinstance(text, str) else text


def _as_stored(info: Any) -> Any:
    fields = ("id", "cwd", "title", "parent_session_path", "first_message")
    return dataclasses.replace(info, **{f: _stored(getattr(info, f)) for f in fields})


def _pieces(data: bytes, sizes: list[int]) -> list[bytes]:
    """`data` (ending in a newline) cut into writes of whole lines."""
    lines = data.split(b"\n")[:-1]
    out: list[bytes] = []
    at = 0
    for size in itertools.cycle(sizes or [1]):
        if at >= len(lines):
            break
        out.append(b"".join(line + b"\n" for line in lines[at : at + size]))
        at += size
    return out


_HEADER = (
    b'{"type":"session","version":3,"id":"a1","timestamp":"2026-02-16T10:00:00.000Z","cwd":"/p"}'
)
_ENTRY = b'{"type":"message","id":"m","parentId":null,"timestamp":"2026-02-16T10:00:00.000Z",'


@pytest.mark.parametrize(
    "message",
    [
        b'"message":{"role":"user","content":"\\ud83d half"}}',  # a lone surrogate
        b'"message":{"role":"user","content":"nul \\u0000 in"}}',
        b'"message":{"role":"user","content":"big","timestamp":1e400}}',  # inf in Python
        b'"message":{"role":"user","content":"big","timestamp":100000000000000000000000000000}}',
    ],
)
@pytest.mark.parametrize("how", ["atomic", "append"])
def test_postgresql_stores_every_line_json_parse_accepts(
    tmp_path: Path, message: bytes, how: str
) -> None:
    # Found by the model below: each of these failed the write (a text column holds no
    # lone surrogate and no NUL, a bigint no 1e30, int() takes no inf).
    agent = tmp_path / "agent"
    d = agent / "sessions" / "--p--"
    d.mkdir(parents=True)
    path = str(d / "2026-02-16T10-00-00-000Z_a1.jsonl")
    data = _HEADER + b"\n" + _ENTRY + message + b"\n"
    (d / os.path.basename(path)).write_bytes(data)
    with pg_storage(root=agent) as pg:
        pg.ensure_dir(str(d))
        if how == "atomic":
            pg.write_atomic(path, [data])
        else:
            writer = pg.open_writer(path, "w")
            for piece in data.splitlines(keepends=True):
                writer.write_bytes(piece)
            writer.close()
        (info,) = list_sessions("/x", store_parts(pg), session_dir=str(d))
        (on_file,) = list_sessions("/x", store_parts(), session_dir=str(d), cache=False)
        assert info.message_count == on_file.message_count == 1
        assert info.first_message == _stored(on_file.first_message)
        (meta,) = pg.list_session_meta(str(d))
        assert meta.last_activity_ms == 1_771_236_000_000  # the entry's time


@pytest.mark.slow
def test_files_and_postgresql_list_every_session_alike(tmp_path: Path) -> None:
    agent = tmp_path / "agent"
    counter = itertools.count()
    files = FileSessionStorage()
    with pg_storage(root=agent) as pg:

        @settings(
            max_examples=examples(60, "SESSIONTREE_FUZZ_EXAMPLES"),
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(
            cases=st.lists(session_files(), min_size=1, max_size=3),
            appends=st.lists(st.integers(1, 3), max_size=4),
            by_appends=st.booleans(),
        )
        def check(cases: list[tuple[bytes, bool]], appends: list[int], by_appends: bool) -> None:
            directory = agent / "sessions" / f"--p{next(counter)}--"
            directory.mkdir(parents=True)
            pg.ensure_dir(str(directory))
            for k, (data, complete) in enumerate(cases):
                path = str(directory / f"2026-02-16T10-00-0{k}-000Z_s{k}.jsonl")
                with open(path, "wb") as f:
                    f.write(data)
                if by_appends and complete:
                    # A writer writes whole lines (a line cut across two writes carries
                    # no metadata in PostgreSQL; only a torn write makes one here).
                    writer = pg.open_writer(path, "w")
                    for piece in _pieces(data, appends):
                        writer.write_bytes(piece)
                    writer.close()
                else:
                    pg.write_atomic(path, [data])
                stamp = T0 + k * 1_000_000_000
                os.utime(path, ns=(stamp, stamp))
                pg.set_mtime(path, stamp)
            clear_listing_cache()
            d = str(directory)
            on_files = list_sessions("/x", store_parts(files), session_dir=d, cache=False)
            indexed = list_sessions("/x", store_parts(pg), session_dir=d)
            scanned = list_sessions(
                "/x", store_parts(_WithoutIndex(pg)), session_dir=d, cache=False
            )
            assert scanned == on_files
            assert indexed == [_as_stored(i) for i in on_files]
            for a, b, c in zip(indexed, on_files, scanned, strict=True):
                assert a.all_messages_text == b.all_messages_text == c.all_messages_text
            # The fields PostgreSQL's metadata has beyond a SessionInfo, from the same fold.
            for meta in pg.list_session_meta(d):
                fold, _ = _fold_lines(Path(meta.path).read_bytes())
                assert meta.valid == (fold.state == SESSION)
                if meta.valid:
                    assert (meta.title_source, meta.last_activity_ms, meta.created) == (
                        _stored(fold.title_source),
                        fold.activity,
                        _stored(fold.created),
                    )

        check()


@pytest.mark.parametrize(
    "saved", [None, "x", [], [0] * (len(FOLD_FIELDS) - 1), ["1", *[0] * (len(FOLD_FIELDS) - 1)]]
)
def test_a_saved_fold_that_is_not_one_is_refused(saved: object) -> None:
    with pytest.raises(ValueError):
        MetaFold.from_values(saved)
