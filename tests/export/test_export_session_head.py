"""`export -o` never replaces a session, however long its first line: it once
looked for a session header in the first 1 MiB only, so a session
whose header line is longer (a huge title) was overwritten. `loader.read_head` now
reads up to the line that decides, as the loader does, and no further.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from sessiontree import SessionManager
from sessiontree.cli import app
from sessiontree.format import serialize_entry
from sessiontree.session import read_head, read_session
from sessiontree.storage import FileSessionStorage
from tests.conftest import examples
from tests.helpers import assistant, user

runner = CliRunner()


def run(*args: str) -> Result:
    return runner.invoke(app, list(args))


# -- export -o ---------------------------------------------------------------------------

MiB = 1 << 20


def _session_with(header_extra: dict[str, Any], first_line: bytes | None = None) -> bytes:
    header = {
        "type": "session",
        "version": 3,
        "id": "0123456789abcdef",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "cwd": "/proj",
        **header_extra,
    }
    entry = {
        "type": "message",
        "id": "a1",
        "parentId": None,
        "timestamp": "2026-01-01T00:00:01.000Z",
        "message": {"role": "user", "content": "q", "timestamp": 1},
    }
    lines = [serialize_entry(header).encode(), serialize_entry(entry).encode()]
    if first_line is not None:
        lines.insert(0, first_line)
    return b"".join(line + b"\n" for line in lines)


@pytest.fixture
def source() -> Iterator[str]:
    with SessionManager.create("/proj") as sm:
        sm.append_message(user("q"))
        sm.append_message(assistant("the export"))
        yield sm.get_session_file() or ""


def _heads() -> dict[str, tuple[bytes, bool]]:
    """Files whose first line is longer than any fixed probe, and whether each is a
    session (what `read_session` says)."""
    huge = "t" * (3 * MiB)
    garbage = b"x" * (3 * MiB)
    slot = {"type": "title", "v": 1, "title": huge, "updatedAt": "2026-01-01", "pad": ""}
    entry = {"type": "message", "id": "e", "parentId": None, "message": {"content": huge}}
    return {
        "a huge title in the header": (_session_with({"title": huge}), True),
        "a huge title slot before the header": (
            _session_with({}, serialize_entry(slot).encode()),
            True,
        ),
        "a huge malformed line before the header": (_session_with({}, garbage), True),
        "a huge torn object before the header": (_session_with({}, b'{"a":"' + garbage), True),
        "a huge entry as the first line": (
            serialize_entry(entry).encode() + b"\n" + _session_with({}),
            False,
        ),
        "no newline at all": (b"y" * (3 * MiB), False),
    }


@pytest.mark.parametrize("name", list(_heads()))
def test_read_head_says_what_the_loader_says_however_long_the_first_line(
    tmp_path: Path, name: str
) -> None:
    data, is_session = _heads()[name]
    path = tmp_path / "f.jsonl"
    path.write_bytes(data)
    storage = FileSessionStorage()
    assert (read_head(str(path), storage) is not None) is is_session
    assert (read_session(str(path), storage).header is not None) is is_session


@pytest.mark.parametrize("name", list(_heads()))
def test_export_o_never_replaces_a_session_whose_first_line_is_long(
    tmp_path: Path, source: str, name: str
) -> None:
    data, is_session = _heads()[name]
    target = tmp_path / "target.jsonl"
    target.write_bytes(data)
    result = run("export", source, "-f", "md", "-o", str(target))
    if is_session:
        assert result.exit_code == 1 and "not overwritten" in result.stderr, result.output
        assert target.read_bytes() == data
    else:
        assert result.exit_code == 0, result.output
        assert "the export" in target.read_text()


def test_read_head_reads_no_further_than_the_line_that_decides(tmp_path: Path) -> None:
    # A session with a 3 MiB header line and 50 MiB of entries after it: the check
    # reads the header line, not the file.
    path = tmp_path / "big.jsonl"
    data = _session_with({"title": "t" * (3 * MiB)})
    with open(path, "wb") as f:
        f.write(data)
        line = _session_with({}).split(b"\n")[1] + b"\n"
        f.write(line * (50 * MiB // len(line)))
    read: list[int] = []

    class Counting(FileSessionStorage):
        def iter_chunks(self, p: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
            for chunk in super().iter_chunks(p, chunk_size):
                read.append(len(chunk))
                yield chunk

    assert read_head(str(path), Counting()) is not None
    assert sum(read) <= len(data) + MiB


_SLOT = serialize_entry(
    {"type": "title", "v": 1, "title": "t", "updatedAt": "2026-01-01", "pad": "  "}
).encode()
_HEADER = _session_with({}).split(b"\n")[0]
_ENTRY = _session_with({}).split(b"\n")[1]
_LINES = st.sampled_from(
    [
        b"",
        b"   ",
        b"\t\r",
        b"\x0c",
        b"garbage",
        b"[1, 2]",
        b"42",
        b'"text"',
        b"{",
        b'{"type":"sess',
        b"\xef\xbb\xbf" + _HEADER,
        b"  " + _HEADER,
        _HEADER,
        _HEADER + b"\r",
        _SLOT,
        _ENTRY,
        b'{"type":"session"}',
    ]
)


@settings(max_examples=examples(400), deadline=None)
@given(
    lines=st.lists(_LINES, max_size=6),
    bom=st.booleans(),
    newline_at_end=st.booleans(),
    chunk=st.integers(1, 64),
)
def test_read_head_agrees_with_the_loader_on_any_file_in_any_chunks(
    tmp_path_factory: Any, lines: list[bytes], bom: bool, newline_at_end: bool, chunk: int
) -> None:
    data = (b"\xef\xbb\xbf" if bom else b"") + b"\n".join(lines)
    if newline_at_end and lines:
        data += b"\n"
    path = tmp_path_factory.mktemp("head") / "f.jsonl"
    path.write_bytes(data)

    class Small(FileSessionStorage):
        def iter_chunks(self, p: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
            return super().iter_chunks(p, chunk)

    loaded = read_session(str(path), FileSessionStorage()).header
    assert read_head(str(path), Small()) == loaded


def test_rm_and_file_version_know_a_session_by_a_header_line_of_any_length(
    agent_dir: Path,
) -> None:
    # The same probe (1 MiB for rm, 64 KiB for file_version) made such a session
    # "not a valid session file": rm refused it without --force, migrate skipped it.
    from sessiontree.maintenance import file_version

    project = agent_dir / "sessions" / "--proj--"
    project.mkdir(parents=True)
    path = project / "2026-01-01T00-00-00-000Z_0123456789abcdef.jsonl"
    path.write_bytes(_session_with({"title": "t" * (2 * MiB)}))
    assert file_version(str(path)) == 3
    result = run("rm", str(path), "--yes")
    assert result.exit_code == 0, result.output
    assert not path.exists()
