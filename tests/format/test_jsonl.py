"""Lenient JSONL parsing and JSON.stringify-identical serialization."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from sessiontree import UNSET, parse_jsonl_lenient, serialize_entry
from sessiontree.format import iter_jsonl_bytes, js_number, loads_line
from tests.conftest import REPO_ROOT, examples


def test_skips_malformed_and_blank_lines_and_continues() -> None:
    text = '{"a":1}\n\nnot json\n   \n{"b":2}\n{"c":'
    assert parse_jsonl_lenient(text) == [{"a": 1}, {"b": 2}]


def test_handles_crlf_bom_and_missing_final_newline() -> None:
    text = '\ufeff{"a":1}\r\n{"b":"x\\r"}\r\n{"c":3}'
    assert parse_jsonl_lenient(text) == [{"a": 1}, {"b": "x\r"}, {"c": 3}]


def test_non_object_values_are_returned() -> None:
    assert parse_jsonl_lenient('1\n"s"\n[1]\nnull\n') == [1, "s", [1], None]


def test_lone_surrogate_escape_loads_instead_of_being_skipped() -> None:
    # JSON.stringify writes a cut emoji as "\ud83d"; orjson refuses it, we must not.
    line = '{"type":"message","text":"cut \\ud83d"}'
    assert parse_jsonl_lenient(line) == [{"type": "message", "text": "cut \ud83d"}]
    assert serialize_entry(parse_jsonl_lenient(line)[0]) == line


def test_nan_and_infinity_literals_are_invalid_json() -> None:
    assert parse_jsonl_lenient('{"a":NaN}\n{"a":Infinity}\n{"ok":1}') == [{"ok": 1}]


def test_number_beyond_double_range_loads_like_javascript() -> None:
    assert parse_jsonl_lenient('{"a":1e400}') == [{"a": math.inf}]
    assert serialize_entry({"a": math.inf}) == '{"a":null}'


def test_never_raises_on_arbitrary_text() -> None:
    for text in ["", "\n", "\x00", "{" * 5000, "[" * 100000, "\ud800", '"\\u12"', "}\n{"]:
        assert isinstance(parse_jsonl_lenient(text), list)


def test_serialize_matches_javascript_for_tricky_values() -> None:
    cases = {
        1.0: "1",
        -0.0: "0",
        1e21: "1e+21",
        1e-7: "1e-7",
        0.000003: "0.000003",
        1.5e-05: "0.000015",
        123456789012345680000.0: "123456789012345680000",
        2**53 + 2: "9007199254740994",
        2**64: "18446744073709552000",
        0.1 + 0.2: "0.30000000000000004",
        math.nan: "null",
    }
    for value, expected in cases.items():
        assert serialize_entry({"v": value}) == f'{{"v":{expected}}}', value


def test_serialize_strings_like_javascript() -> None:
    value = '\x00\x08\t\n\x0c\r\x1f\x7f\u2028/é😀"\\'
    assert serialize_entry({"s": value}) == (
        '{"s":"\\u0000\\b\\t\\n\\f\\r\\u001f\x7f\u2028/é😀\\"\\\\"}'
    )


def test_unset_keys_are_omitted_and_none_is_null() -> None:
    assert serialize_entry({"a": UNSET, "b": None, "c": [UNSET]}) == '{"b":null,"c":[null]}'


def test_number_lookalikes_inside_strings_are_untouched() -> None:
    obj = {"text": 'version 1.0 and 3e+5 "x":1.0,', "n": 2.0, "m": [1e-7, 0.5]}
    assert (
        serialize_entry(obj) == '{"text":"version 1.0 and 3e+5 \\"x\\":1.0,","n":2,"m":[1e-7,0.5]}'
    )


def test_split_surrogate_pair_serializes_as_the_character() -> None:
    assert serialize_entry({"s": "\ud83d\ude00"}) == '{"s":"😀"}'
    assert serialize_entry({"s": "\ude00\ud83d"}) == '{"s":"\\ude00\\ud83d"}'


def test_js_number_exponent_boundaries() -> None:
    assert js_number(1e20) == "100000000000000000000"
    assert js_number(1e-6) == "0.000001"
    assert js_number(9.9e-7) == "9.9e-7"
    assert js_number(5e-324) == "5e-324"
    assert js_number(-1.5e300) == "-1.5e+300"


def test_iter_jsonl_bytes_across_chunk_boundaries() -> None:
    data = b'\xef\xbb\xbf{"a":1}\n{"b":"\xc3\xa9"}\n\n{"c":3}'
    for size in (1, 2, 3, 7, 100):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        lines = list(iter_jsonl_bytes(chunks))
        assert lines == [
            (1, b'{"a":1}', True),
            (2, b'{"b":"\xc3\xa9"}', True),
            (3, b"", True),
            (4, b'{"c":3}', False),
        ]


def test_loads_line_rejects_invalid() -> None:
    for bad in ["", "{", "nul", "[1,]"]:
        try:
            loads_line(bad)
        except ValueError:
            continue
        raise AssertionError(bad)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)


@settings(max_examples=examples(300))
@given(st.dictionaries(st.text(max_size=10), json_values, max_size=6))
def test_serialize_then_parse_round_trips(obj: dict[str, object]) -> None:
    line = serialize_entry(obj)
    assert "\n" not in line
    parsed = parse_jsonl_lenient(line)
    assert len(parsed) == 1
    # Parsing then serializing again is a fixed point (what a rewrite relies on).
    assert serialize_entry(parsed[0]) == line
    # The line is valid JSON for a strict parser too.
    json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))


@settings(max_examples=examples(300))
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_js_number_round_trips_every_double(value: float) -> None:
    text = js_number(value)
    assert float(text) == value or (value == 0 and float(text) == 0)


@settings(max_examples=examples(2000))
@given(st.floats(allow_nan=False, allow_infinity=False) | st.integers(-(2**70), 2**70))
def test_fast_path_numbers_match_the_exact_formatter(value: float) -> None:
    # js_number is checked against Node's output (test_jsonl_vectors); the orjson
    # fast path must agree with it for every number, in objects and in arrays.
    assert serialize_entry({"v": value, "a": [value]}) == (
        f'{{"v":{js_number(value)},"a":[{js_number(value)}]}}'
    )


def test_one_way_to_parse_a_json_line() -> None:
    # `loads_line` tries orjson first; no reader keeps a copy of that try.
    import re

    from sessiontree.format import loads_object

    src = REPO_ROOT / "src" / "sessiontree"
    copy = re.compile(
        r"except orjson\.JSONDecodeError:[^\n]*\n(?:[^\n]*\n){0,3}?[^\n]*loads_line\("
    )
    copies = [
        str(p.relative_to(src))
        for p in src.rglob("*.py")
        if p.name != "_jsonl.py" and copy.search(p.read_text(encoding="utf-8"))
    ]
    assert copies == []
    assert loads_object(b'{"a":1}') == {"a": 1}
    assert loads_object(memoryview(b' {"a":"\\ud83d"} ')) == {"a": "\ud83d"}
    assert loads_object(bytearray(b'{"t":1e400}')) == {"t": float("inf")}
    for other in (b"[1]", b'"s"', b"null", b"{bad", b"", b"\xff{}", b"1"):
        assert loads_object(other) is None
