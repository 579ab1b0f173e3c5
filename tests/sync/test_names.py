"""The names a hub is built of: machines and session files, checked before use."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessiontree.sync import (
    HubNameError,
    check_machine_name,
    default_machine_name,
    is_session_file_name,
)


@pytest.mark.parametrize("name", ["laptop", "desk-2", "srv.example", "A_1"])
def test_machine_names_that_are_kept(name: str) -> None:
    assert check_machine_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", ".hidden", "a/b", "a\\b", "x" * 65, "-x", "é"])
def test_machine_names_that_are_refused(name: str) -> None:
    with pytest.raises(HubNameError):
        check_machine_name(name)


def test_the_default_machine_name_is_usable() -> None:
    assert check_machine_name(default_machine_name())


@given(st.text(max_size=80))
def test_a_session_file_name_is_one_safe_component(name: str) -> None:
    if is_session_file_name(name):
        assert "/" not in name and "\\" not in name and "\x00" not in name
        assert not name.startswith(".") and name.endswith(".jsonl")


def test_pi_session_file_names_are_accepted() -> None:
    assert is_session_file_name("2026-12-07T01-00-00-000Z_1f9d2a6b9c0d1234.jsonl")
    assert not is_session_file_name("../x.jsonl")
    assert not is_session_file_name("x.json")
