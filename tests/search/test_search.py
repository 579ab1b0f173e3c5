"""Full-text search over session files: the raw-bytes prefilter never hides a match."""

from __future__ import annotations

import random
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sessiontree import SessionManager, serialize_entry
from sessiontree.format import entry_text, loads_line
from sessiontree.search import search_sessions
from sessiontree.storage import FileSessionStorage
from tests.conftest import examples
from tests.helpers import assistant, user


@pytest.fixture
def session(tmp_path: Path) -> str:
    with SessionManager.create("/p", str(tmp_path)) as sm:
        sm.append_message(user('say "hi" to C:\\temp/dir'))
        sm.append_message(assistant("Straße and 5 \u212a of memory"))  # Kelvin sign
        return sm.get_session_file() or ""


@pytest.mark.parametrize(
    ("query", "case_sensitive", "count"),
    [
        ('"hi"', True, 1),
        ('"HI"', False, 1),
        ("C:\\temp/dir", True, 1),
        ("strasse", False, 1),  # casefold: ß -> ss
        ("5 k of", False, 1),  # Kelvin sign folds to k
        ("Straße", True, 1),
        ("straße", True, 0),
        ("nowhere", False, 0),
    ],
)
def test_queries_that_json_escapes_or_casefold_changes(
    session: str, query: str, case_sensitive: bool, count: int
) -> None:
    hits = list(search_sessions([session], query, case_sensitive=case_sensitive))
    assert len(hits) == count


def test_other_writers_unicode_escapes_are_found(tmp_path: Path) -> None:
    path = tmp_path / "escaped.jsonl"
    header = serialize_entry(
        {"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/"}
    )
    # A writer with ensure_ascii (not JavaScript) escapes non-ASCII text.
    line = '{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":"caf\\u00e9 cr\\u00e8me"}}'
    path.write_text(header + "\n" + line + "\n")
    assert len(list(search_sessions([str(path)], "café"))) == 1
    assert len(list(search_sessions([str(path)], "crème", case_sensitive=True))) == 1


# --- the review's examples: text that is not in the raw line as such -----------------

HEADER = serialize_entry({"type": "session", "version": 3, "id": "s", "timestamp": "t", "cwd": "/"})


def write_lines(path: Path, *entries: str) -> str:
    path.write_bytes((HEADER + "\n" + "\n".join(entries) + "\n").encode("utf-8"))
    return str(path)


def message_line(message: str) -> str:
    return f'{{"type":"message","id":"e1","parentId":null,"timestamp":"t","message":{message}}}'


@pytest.mark.parametrize(
    ("message", "query"),
    [
        # tool calls render as `[name] {json}` with json.dumps' spaces
        (
            '{"role":"assistant","content":[{"type":"toolCall","id":"c","name":"bash",'
            '"arguments":{"command":"ls -la","timeout":5}}]}',
            '[bash] {"command": "ls -la", "timeout": 5}',
        ),
        (
            '{"role":"assistant","content":[{"type":"toolCall","id":"c","name":"bash",'
            '"arguments":{"command":"ls"}}]}',
            "[bash] {",
        ),
        # commands get a `$ ` (Python: `>>> `) prefix
        ('{"role":"bashExecution","command":"ls -la","output":"total 0"}', "$ ls -la"),
        ('{"role":"pythonExecution","code":"print(1)","output":"1"}', ">>> print"),
        # images become `[image]`
        (
            '{"role":"user","content":[{"type":"image","data":"AAAA","mimeType":"image/png"}]}',
            "[image]",
        ),
        # a writer that escapes "/" (JSON allows it)
        ('{"role":"user","content":"see src\\/app.py"}', "src/app.py"),
        # ASCII that another writer escaped as \uXXXX
        ('{"role":"user","content":"a\\u003cb"}', "a<b"),
        ('{"role":"user","content":"h\\u0065llo"}', "hello"),
        # numbers that json.dumps spells differently from the raw line
        (
            '{"role":"assistant","content":[{"type":"toolCall","id":"c","name":"f",'
            '"arguments":{"n":1e2,"m":1.50}}]}',
            '"n": 100.0, "m": 1.5',
        ),
        # str() of values that are not strings
        ('{"role":"user","content":[{"type":"text","text":null}]}', "None"),
        ('{"role":"bashExecution","command":["ls","-la"],"output":true}', "$ ['ls', '-la']\nTrue"),
        # repr() escapes a character the raw line holds as is
        ('{"role":"bashExecution","command":["a\x7fbc"],"output":""}', "x7fbc"),
        ('{"role":"bashExecution","command":["\\badd"],"output":""}', "08add"),
        ('{"role":"bashExecution","command":["cafe"],"output":""}', "['cafe'"),
        # a shell output escape (ANSI colour), written as JavaScript writes it
        ('{"role":"toolResult","content":"\\u001b[31mFAILED\\u001b[0m"}', "31mFAILED"),
    ],
)
def test_text_entry_text_makes_up_is_found(tmp_path: Path, message: str, query: str) -> None:
    path = write_lines(tmp_path / "s.jsonl", message_line(message))
    hits = list(search_sessions([path], query, case_sensitive=True))
    assert [hit.line for hit in hits] == [2]
    hits = list(search_sessions([path], query.swapcase()))
    assert [hit.line for hit in hits] == [2]


def test_invalid_utf8_in_a_line_is_searched_as_replacement_characters(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    line = message_line('{"role":"user","content":"caf\xff\xfe au lait"}')
    path.write_bytes(HEADER.encode() + b"\n" + line.encode("latin-1") + b"\n")
    for query in ("caf\ufffd\ufffd au", "\ufffd au lait", "au lait"):
        assert len(list(search_sessions([str(path)], query, case_sensitive=True))) == 1
    assert list(search_sessions([str(path)], "café au", case_sensitive=True)) == []


class SmallChunks(FileSessionStorage):
    """Reads files in tiny chunks, so escapes and lines straddle chunk boundaries."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def iter_chunks(self, path: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        return super().iter_chunks(path, self.size)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 64])
def test_an_escape_across_a_chunk_boundary_is_seen(tmp_path: Path, size: int) -> None:
    plain = message_line('{"role":"user","content":"nothing to see"}')
    escaped = message_line('{"role":"user","content":"h\\u0065llo"}')
    path = write_lines(tmp_path / "s.jsonl", plain, escaped)
    hits = list(search_sessions([path], "hello", storage=SmallChunks(size)))
    assert [hit.line for hit in hits] == [3]


def test_deeply_nested_tool_arguments_do_not_stop_the_search(tmp_path: Path) -> None:
    deep = "[" * 5000 + '"needle"' + "]" * 5000
    line = message_line(
        '{"role":"assistant","content":[{"type":"toolCall","id":"c","name":"f",'
        f'"arguments":{deep}}}]}}'
    )
    path = write_lines(tmp_path / "s.jsonl", line)
    assert [hit.line for hit in search_sessions([path], "needle")] == [2]


# --- property: every substring of every entry's rendered text is found ----------------

# Characters that matter to the prefilter's argument (what JSON escapes, what
# entry_text puts around pieces, what casefold or repr() change), and any others.
_SPECIAL = list("abcnrtuxABCNX0159 .-+eE\"\\/[]{}:,'$>\n\t\r\x00\x1b\x7f")
_SPECIAL += ["é", "ß", "\u212a", "İ", "ı", "ﬁ", "Σ", "ς", "😀", "\ufffd"]
_SPECIAL += ["\b", "\f", "\x85", "\u00a0", "\u200b", "\u2028"]  # repr() escapes these
_WORDS = ["None", "True", "null", "image", "[image]", "nan", "1e+100", "\\x7f", "\\", ">>> "]
_WORDS += ["src/app.py", "Straße", "5 \u212a", "ﬁle"]
special = st.sampled_from(_SPECIAL)
# Few control characters: JSON must write most as \uXXXX, which makes the line pass anyway.
chars = st.one_of(special, special, st.characters(exclude_categories=("Cc", "Cs")))
texts = st.lists(st.one_of(st.text(chars, max_size=6), st.sampled_from(_WORDS)), max_size=5).map(
    "".join
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
# Where entry_text expects a string, usually a string, sometimes any value (a list
# of strings: its repr() escapes characters the raw line holds as they are).
textish = st.one_of(texts, texts, json_values, st.lists(texts, min_size=1, max_size=2))
tool_calls = st.fixed_dictionaries(
    {
        "type": st.just("toolCall"),
        "id": st.just("call_1"),
        "name": textish,
        "arguments": st.one_of(st.dictionaries(texts, json_values, max_size=4), json_values),
    }
)
text_blocks = st.fixed_dictionaries({"type": st.just("text"), "text": textish})
blocks = st.one_of(
    text_blocks,
    text_blocks,
    tool_calls,
    tool_calls,
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": textish}),
    st.fixed_dictionaries(
        {
            "type": st.just("image"),
            "data": st.just("iVBORw0KGgo="),
            "mimeType": st.just("image/png"),
        }
    ),
    st.fixed_dictionaries({"type": st.just("redacted"), "data": texts}),
    texts,  # a bare string block
)
contents = st.one_of(texts, st.lists(blocks, max_size=4))
assistants = st.fixed_dictionaries(
    {"role": st.just("assistant"), "content": st.lists(blocks, min_size=1, max_size=4)}
)
messages = st.one_of(
    st.fixed_dictionaries({"role": st.just("user"), "content": contents}),
    assistants,
    assistants,
    st.fixed_dictionaries(
        {
            "role": st.just("toolResult"),
            "toolCallId": st.just("call_1"),
            "toolName": texts,
            "content": contents,
            "isError": st.booleans(),
        }
    ),
    st.fixed_dictionaries(
        {"role": st.just("bashExecution"), "command": textish, "output": textish}
    ),
    st.fixed_dictionaries({"role": st.just("pythonExecution"), "code": textish, "output": textish}),
    st.fixed_dictionaries(
        {"role": st.sampled_from(["branchSummary", "compactionSummary"]), "summary": textish}
    ),
    st.fixed_dictionaries(
        {"role": st.just("custom"), "customType": st.just("ext"), "content": contents}
    ),
)
operations = st.one_of(
    st.tuples(st.just("message"), messages),
    st.tuples(st.just("message"), messages),
    st.tuples(st.just("message"), messages),
    st.tuples(st.just("custom_message"), contents),
    st.tuples(st.just("branch_summary"), texts),
    st.tuples(st.just("compaction"), texts),
    st.tuples(st.just("session_init"), texts),
    st.tuples(st.just("label"), texts),
    st.tuples(st.just("model_change"), texts),
)


def write_session(directory: str, ops: list[tuple[str, Any]]) -> str:
    """The operations applied through SessionManager: a real session file."""
    with SessionManager.create("/p", directory) as sm:
        sm.ensure_on_disk()
        sm.append_message({"role": "user", "content": "first"})
        for kind, value in ops:
            leaf = sm.get_leaf_id()
            assert leaf is not None
            if kind == "message":
                sm.append_message(value)
            elif kind == "custom_message":
                sm.append_custom_message_entry("ext", value, True)
            elif kind == "branch_summary":
                sm.branch_with_summary(leaf, value)
            elif kind == "compaction":
                sm.append_compaction(value, None, leaf, 1000)
            elif kind == "session_init":
                sm.append_session_init("system", value, [])
            elif kind == "label":
                sm.append_label_change(leaf, value)
            else:
                sm.append_model_change(value)
        path = sm.get_session_file()
    assert path is not None
    return path


_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n"}
_SHORT |= {"\r": "\\r", "\t": "\\t"}


def _u_escape(char: str, rng: random.Random) -> str:
    code = ord(char)
    if code > 0xFFFF:
        code -= 0x10000
        units = [0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)]
    else:
        units = [code]
    return "".join(
        "\\u" + "".join(rng.choice((c, c.upper())) for c in f"{unit:04x}") for unit in units
    )


def _foreign_string(text: str, rng: random.Random, rate: float, slash: bool) -> str:
    out = ['"']
    for char in text:
        if char == "/" and slash:
            out.append("\\/")
        elif char in '"\\' or ord(char) < 0x20 or 0xD800 <= ord(char) <= 0xDFFF:
            short = _SHORT.get(char)  # must be escaped
            out.append(short if short is not None and rng.random() < 0.7 else _u_escape(char, rng))
        elif rng.random() < rate:
            out.append(_u_escape(char, rng))
        else:
            out.append(char)
    return "".join(out) + '"'


def foreign_dumps(value: Any, rng: random.Random) -> str:
    """JSON for `value` as some other writer might lay it out: any character may be
    escaped, numbers spelled otherwise, whitespace between tokens."""
    rate = rng.choice([0.0, 0.05, 0.3, 0.9])  # of characters written as \uXXXX
    slash = rng.random() < 0.5  # "/" as "\/"

    def ws() -> str:
        return rng.choice(["", "", " ", "\t", "  "])

    def dumps(value: Any) -> str:
        if value is None or isinstance(value, bool):
            return {None: "null", True: "true", False: "false"}[value]
        if isinstance(value, int):
            return rng.choice([str(value), str(value), f"{value}e0", f"{value}E+00"])
        if isinstance(value, float):
            return rng.choice([repr(value), repr(value).replace("e", "E"), format(value, ".17e")])
        if isinstance(value, str):
            return _foreign_string(value, rng, rate, slash)
        if isinstance(value, list):
            return "[" + ws() + ("," + ws()).join(dumps(v) for v in value) + ws() + "]"
        items = (
            _foreign_string(k, rng, rate, slash) + ws() + ":" + ws() + dumps(v)
            for k, v in value.items()
        )
        return "{" + ws() + ("," + ws()).join(items) + ws() + "}"

    return dumps(value)


def rendered(path: str) -> list[tuple[int, str]]:
    """(line number, entry_text) of every entry line: what search must match against."""
    lines = Path(path).read_bytes().split(b"\n")
    out = []
    for number, raw in enumerate(lines[1:], start=2):
        if raw.strip():
            entry = loads_line(raw)
            assert isinstance(entry, dict)
            out.append((number, entry_text(entry)))
    return out


_SEAMS = frozenset("$>]:,[{\"'\\\n ")


def case_variant(text: str, rng: random.Random) -> str:
    """`text` in other case: whole (ß -> SS, K -> k) or character by character."""
    whole = rng.choice((str.casefold, str.upper, str.lower, None))
    if whole is not None:
        return whole(text)
    return "".join(rng.choice((c, c.upper(), c.lower(), c.swapcase())) for c in text)


@pytest.mark.slow
@settings(
    max_examples=examples(300, "SESSIONTREE_FUZZ_EXAMPLES"),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    ops=st.lists(operations, min_size=1, max_size=6),
    foreign=st.sampled_from([0.0, 0.0, 0.3, 1.0]),
    chunk_size=st.sampled_from([1 << 20, 1, 3, 7, 64]),
    rng=st.randoms(use_true_random=False),
    data=st.data(),
)
def test_every_substring_of_an_entrys_text_finds_it(
    ops: list[tuple[str, Any]],
    foreign: float,
    chunk_size: int,
    rng: random.Random,
    data: st.DataObject,
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = write_session(directory, ops)
        # Another writer re-encodes some lines: same parsed values, other bytes.
        lines = Path(path).read_bytes().split(b"\n")
        for n in range(len(lines)):
            if lines[n].strip() and rng.random() < foreign:
                lines[n] = foreign_dumps(loads_line(lines[n]), rng).encode()
        Path(path).write_bytes(b"\n".join(lines))

        entries = rendered(path)
        candidates = [(number, text) for number, text in entries if text]
        if not candidates:
            return
        # The risky queries hold a letter or digit but are not in the raw line as they
        # are (or casefolded), which has no \uXXXX (else it is parsed anyway): draw
        # them often, preferably starting where made-up text may meet copied text.
        risky = []
        for number, text in candidates:
            raw = lines[number - 1].decode("utf-8", "replace")
            if "\\u" in raw:
                continue
            # Ids and timestamps differ from run to run: what is drawn must not.
            entry = loads_line(lines[number - 1])
            for key in ("id", "parentId", "timestamp"):
                raw = raw.replace(str(entry.get(key)), "\0")
            hidden = [
                (i, j)
                for i in range(len(text))
                for j in range(i + 1, min(len(text), i + 8) + 1)
                if any(c.isalnum() for c in text[i:j])
                and (text[i:j] not in raw or text[i:j].casefold() not in raw.lower())
            ]
            if hidden:
                risky.append((number, text, hidden))
        if risky and data.draw(st.integers(0, 3), label="risky") > 0:
            number, text, hidden = data.draw(st.sampled_from(risky), label="entry")
            spans = st.sampled_from(hidden)
            at_seams = [span for span in hidden if span[0] == 0 or text[span[0] - 1] in _SEAMS]
            if at_seams:
                spans = st.sampled_from(at_seams) | spans
            start, end = data.draw(spans, label="span")
        else:
            number, text = data.draw(st.sampled_from(candidates), label="entry")
            start = data.draw(st.integers(0, len(text) - 1), label="start")
            longest = min(len(text) - start, 40)
            end = start + data.draw(st.integers(1, min(longest, 4)) | st.integers(1, longest))
        case_sensitive = data.draw(st.booleans(), label="case_sensitive")
        query = text[start:end] if case_sensitive else case_variant(text[start:end], rng)

        if case_sensitive:
            expected = {n for n, t in entries if query in t}
        else:
            expected = {n for n, t in entries if query.casefold() in t.casefold()}
        storage = SmallChunks(chunk_size)
        hits = list(search_sessions([path], query, case_sensitive=case_sensitive, storage=storage))
        assert {hit.line for hit in hits} == expected
        assert len(hits) == len(expected)
        if case_sensitive or query.casefold() in text.casefold():
            assert number in expected


# ---------------------------------------------------------------------------- highlight

# Text before the match whose casefolded form is longer (ß -> ss, ﬁ -> fi, İ -> i̇):
# the highlight must not move right by one character for each.
_WIDENING = ["ß", "ﬁ", "İ", "ŉ", "ﬃ"]
_SCRIPTS = ["flush model", "übersicht", "検索する", "🚀 launch", "שלום עולם", "straße"]


def _highlight(hit: Any) -> tuple[str, str]:
    snippet = hit.snippet
    start, end = len(hit.before), len(hit.before) + len(hit.match)
    return snippet, snippet[start:end]


@pytest.mark.parametrize("query", _SCRIPTS)
@pytest.mark.parametrize("widening", ["", *_WIDENING])
def test_the_highlight_covers_exactly_the_query(tmp_path: Path, query: str, widening: str) -> None:
    text = f"{widening * 3} Lint modules, then {query.upper()}\n\nflush. done"
    with SessionManager.create("/p", str(tmp_path)) as sm:
        sm.append_message(user(text))
        sm.append_message(assistant("ok"))
        path = sm.get_session_file() or ""
    (hit,) = search_sessions([path], query)
    _, marked = _highlight(hit)
    assert marked.casefold() == query.upper().casefold()
    assert hit.match == query.upper()


def test_the_snippet_keeps_the_whitespace_around_the_match(tmp_path: Path) -> None:
    with SessionManager.create("/p", str(tmp_path)) as sm:
        sm.append_message(user("Straße: we flush model\n\nflush. then\tlint  mo"))
        sm.append_message(assistant("ok"))
        path = sm.get_session_file() or ""
    (hit,) = search_sessions([path], "flush model")
    assert hit.snippet == "Straße: we flush model flush. then lint mo"
    assert _highlight(hit)[1] == "flush model"
    (hit,) = search_sessions([path], r"model\s+flush", regex=True)
    assert hit.snippet == "Straße: we flush model flush. then lint mo"
    assert hit.match == "model flush"


@given(
    prefix=st.text(
        alphabet=st.sampled_from([*_WIDENING, "a", " ", "\n", "É", "字", "🚀"]), max_size=30
    ),
    query=st.sampled_from(_SCRIPTS),
    suffix=st.text(alphabet=st.sampled_from(["b", " ", "\n", "ß", "\t"]), max_size=30),
)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
def test_the_highlight_is_the_query_after_any_text(prefix: str, query: str, suffix: str) -> None:
    from sessiontree.search._hits import snippet
    from sessiontree.search._query import Substring

    text = prefix + "|" + query + "|" + suffix
    span = Substring(query, False).find(text)
    assert span is not None
    before, match, after = snippet(text, *span)
    assert match == query
    shown = before + match + after
    assert shown[len(before) : len(before) + len(match)] == query
    assert "  " not in shown
    # What is shown is the text around the match, whitespace collapsed.
    assert " ".join(shown.strip("…").split()) in " ".join(text.split())


# ---------------------------------------------------------------------- regular expressions, bounded

_PIECES = [
    "a",
    "b",
    "ß",
    "İ",
    "i",
    "I",
    "ﬁ",
    ".",
    ".*",
    "a+",
    "[ab]",
    "(a|b)",
    r"\d",
    r"\w+",
    "x?",
    r"\s",
    "^",
    "$",
    r"\b",
]


@given(
    pattern=st.lists(st.sampled_from(_PIECES), min_size=1, max_size=5).map("".join),
    text=st.text(alphabet="abxßİiIﬁ1 \nAB", max_size=30),
    case_sensitive=st.booleans(),
)
def test_a_bounded_regular_expression_matches_as_re_does(
    pattern: str, text: str, case_sensitive: bool
) -> None:
    """Within `regex_time_limit` (the web's searches) patterns are matched by the `regex`
    package, which can be stopped: it finds what `re` finds, at the same place."""
    from sessiontree.search import regex_time_limit
    from sessiontree.search._query import Regex

    # The one difference of these pieces, said in docs/safety.md and tested below: `re`
    # matches the dotted capital İ by a case-blind `I`, `regex` does not.
    assume(case_sensitive or "I" not in pattern or "İ" not in text)
    plain = Regex(pattern, case_sensitive)
    with regex_time_limit(10):
        bounded = Regex(pattern, case_sensitive)
    assert bounded.timed is not None
    assert bounded.find(text) == plain.find(text)


def test_a_bounded_case_blind_capital_i_leaves_the_dotted_capital_i_as_regex_does() -> None:
    from sessiontree.search import regex_time_limit
    from sessiontree.search._query import Regex

    with regex_time_limit(10):
        bounded = Regex("I", case_sensitive=False)
    assert bounded.find("İ") is None
    assert bounded.find("i") is not None
    assert Regex("I", case_sensitive=False).find("İ") is not None  # re, in the CLI


def test_a_search_past_its_time_limit_stops_and_says_so(tmp_path: Path) -> None:
    from sessiontree.search import RegexTimeoutError, regex_time_limit

    path = write_session(
        str(tmp_path / "sessions"), [("message", {"role": "user", "content": "ж" * 4000})]
    )
    with regex_time_limit(0.3), pytest.raises(RegexTimeoutError, match=r"took more than 0\.3 s"):
        list(search_sessions([path], r"ж*ж*ж*ж*ж*\d", regex=True))
    assert list(search_sessions([path], "ж+$", regex=True))  # outside: re, unbounded


def test_a_pattern_the_bounded_engine_cannot_read_is_refused_not_matched_unbounded(
    tmp_path: Path,
) -> None:
    """`re` reads `{i` as literal text; `regex` refuses it (expected }). Matching such a
    pattern with `re` instead (as it was) took the bound off: this one, polynomial, held
    the thread for minutes. Within the limit it is refused, with the reason. (Which
    patterns `regex` cannot read changes between its releases: in verbose mode `\\x1c` was
    a space to it until 2026.12; the refusal, not the list, is what is tested.)"""
    pattern = r"ж*ж*ж*ж*ж*\d|{i"
    from sessiontree.errors import SessionTreeError
    from sessiontree.search import regex_time_limit

    path = write_session(
        str(tmp_path / "sessions"), [("message", {"role": "user", "content": "ж" * 200})]
    )
    with regex_time_limit(0.3), pytest.raises(SessionTreeError, match="within a time limit"):
        list(search_sessions([path], pattern, regex=True))


def test_a_pattern_that_repeats_millions_of_times_is_refused_before_it_takes_the_memory() -> None:
    """`regex` unrolls a repeat's minimum count (~270 bytes each: x{1000000000} took all the
    memory of the machine, outside any time limit, before matching began). Within the limit
    such a pattern is refused; run in a process whose address space is capped, so that the
    unrolling, were it tried, fails there rather than here."""
    import subprocess
    import sys

    program = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from sessiontree.errors import SessionTreeError
from sessiontree.search import regex_time_limit
from sessiontree.search._query import Regex
for pattern in ("x{1000000000}", "(?:ab){3000000}c", "(?>x{400000})"):
    try:
        with regex_time_limit(5):
            Regex(pattern, False)
    except SessionTreeError as exc:
        assert "repeats more than" in str(exc), exc
    else:
        sys.exit(f"{pattern} was compiled")
with regex_time_limit(5):
    assert Regex("x{2,100000000}y", False).timed is not None  # a maximum is not unrolled
    assert Regex(r"\\d{4}-\\d{2}", False).timed is not None
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.xfail(
    strict=False,  # a regex release may move closer to re's tables: that is no failure
    reason="decided: the web search follows the regex package's Unicode rules, as "
    "docs/safety.md says (its \\w, \\b take combining marks and ZWNJ as word characters, "
    "its \\s leaves out \\x1c-\\x1f, (?i)i does not match dotless ı); the CLI "
    "keeps re's. Matching re's exactly within a time limit would need re's classes spelled "
    "out in a translated pattern, or re in a worker process killed at the limit",
)
@pytest.mark.parametrize(
    ("pattern", "text", "case_sensitive"),
    [
        (r"\w+", "e\u0301", True),  # a combining acute accent
        (r"\s", "x\x1c", True),  # FILE SEPARATOR: str.isspace()
        ("i", "ı", False),  # dotless i, re's case table
        (r"\b\w+\b", "\u200cab", True),  # ZERO WIDTH NON-JOINER
    ],
)
def test_a_bounded_regular_expression_reads_unicode_classes_and_case_as_re_does(
    pattern: str, text: str, case_sensitive: bool
) -> None:
    """The web's bounded search claims the matches of `re` (what the CLI finds); these
    differ, found by a random differential run of the two engines."""
    from sessiontree.search import regex_time_limit
    from sessiontree.search._query import Regex

    plain = Regex(pattern, case_sensitive)
    with regex_time_limit(10):
        bounded = Regex(pattern, case_sensitive)
    assert bounded.find(text) == plain.find(text)


@pytest.mark.parametrize("pattern", ["x" * 3000, "(?:x)" * 3000, "[x]" * 3000])
def test_a_pattern_with_thousands_of_characters_in_a_row_is_refused_not_slow_past_the_limit(
    tmp_path: Path, pattern: str
) -> None:
    """`regex` prepares the search for a long run of characters (a string to find) on the
    first search, outside its time limit, in time that grows as the cube of its length:
    3,000 took 6 s against a limit of 0.3 s, and the search then simply found nothing.
    Within the limit such a pattern is refused, and a run of up to 1,000 still runs."""
    from sessiontree.errors import SessionTreeError
    from sessiontree.search import regex_time_limit

    path = write_session(
        str(tmp_path / "sessions"), [("message", {"role": "user", "content": "y" * 40_000})]
    )
    with regex_time_limit(0.3), pytest.raises(SessionTreeError, match="in a row"):
        list(search_sessions([path], pattern, regex=True))
    with regex_time_limit(5):
        assert list(search_sessions([path], "y" * 1000, regex=True))


def test_a_snippet_of_a_tool_call_reads_as_text_not_json_escapes(tmp_path: Path) -> None:
    """A tool call's arguments are searched as JSON: the snippet shows its newlines,
    tabs and quotes as the text does, never `\\n`, `\\t` or `\\"`."""
    call = {
        "type": "toolCall",
        "id": "c1",
        "name": "bash",
        "arguments": {"command": 'grep -n "needle"\n\tsrc/*.py'},
    }
    with SessionManager.create("/p", str(tmp_path)) as sm:
        sm.append_message(user("look"))
        sm.append_message(assistant(content=[call]))
        path = sm.get_session_file() or ""
    (hit,) = search_sessions([path], "needle")
    assert "\\" not in hit.snippet
    assert 'grep -n "needle" src/*.py' in hit.snippet
