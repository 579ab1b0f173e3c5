"""`serialize_entry` against JSON.stringify, byte for byte.

The vectors in `tests/data/js_stringify_vectors.jsonl` were produced by Node's
`JSON.stringify({v: value})` (`node scripts/gen_js_vectors.mjs`, see
tests/data/README.md). Each input is rebuilt here as the Python value a user would pass
(floats from their exact IEEE-754 bits, safe integers also as `int`, strings from UTF-16
code units so lone surrogates survive, `undefined` as `sessiontree.UNSET`).
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pytest

import sessiontree
from tests.conftest import FIXTURES

VECTORS = FIXTURES / "js_stringify_vectors.jsonl"


def decode_units(units: list[int]) -> str:
    """UTF-16 code units -> str (lone surrogates kept as surrogate code points)."""
    raw = b"".join(struct.pack("<H", u) for u in units)
    return raw.decode("utf-16-le", errors="surrogatepass")


def rebuild(enc: Any) -> Any:
    """Rebuild the Python value from the generator's encoding (see the .mjs header)."""
    if enc is None or isinstance(enc, bool):
        return enc
    if isinstance(enc, list):
        return [rebuild(x) for x in enc]
    if isinstance(enc, dict):
        if "$num" in enc:
            return struct.unpack(">d", bytes.fromhex(enc["$num"]))[0]
        if "$int" in enc:
            return int(enc["$int"])
        if "$str" in enc:
            return decode_units(enc["$str"])
        if "$undef" in enc:
            return sessiontree.UNSET
        if "$obj" in enc:
            return {rebuild(k): rebuild(v) for k, v in enc["$obj"]}
    raise ValueError(f"unknown encoding: {enc!r}")


def load_vectors() -> list[dict[str, Any]]:
    with VECTORS.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


CASES = load_vectors()
IDS = [c["name"] for c in CASES]


def test_vector_file_is_sane() -> None:
    assert len(CASES) > 500
    assert len(set(IDS)) == len(IDS)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_serialize_matches_json_stringify(case: dict[str, Any]) -> None:
    value = rebuild(case["input"])
    assert sessiontree.serialize_entry({"v": value}) == case["output"]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_parse_then_serialize_round_trips(case: dict[str, Any]) -> None:
    # JSON.stringify's output, parsed leniently and written again, is unchanged.
    parsed = sessiontree.parse_jsonl_lenient(case["output"])
    assert len(parsed) == 1
    assert sessiontree.serialize_entry(parsed[0]) == case["output"]


def test_parse_lenient_reads_a_whole_vector_file() -> None:
    # All outputs as one JSONL text (with a blank line, a malformed line and a
    # torn last line mixed in): exactly the good lines come back, in order.
    outputs = [c["output"] for c in CASES]
    text = "\n".join(outputs[:10]) + "\n\n   \n{not json\n" + "\n".join(outputs[10:]) + '\n{"torn":'
    parsed = sessiontree.parse_jsonl_lenient(text)
    assert [sessiontree.serialize_entry(p) for p in parsed] == outputs
