"""The `sessiontree.storage.postgres` package without a server: its face, the missing
extra, and the statements (every table schema-qualified, the schema only quoted)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from dataclasses import fields

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sessiontree.storage
import sessiontree.storage.postgres as postgres
from sessiontree.storage.postgres import _schema, _sql

_TABLES = ("nodes", "lines", "blobs", "schema_migrations")
# Where a table name follows in SQL (`extract(epoch FROM created_at)` names a column:
# only the store's table names count below).
_TABLE_AFTER = re.compile(r"\b(?:FROM|INTO|UPDATE|JOIN|TABLE|REFERENCES|ON)\s+(\S+)", re.I)


def _texts(schema: str) -> dict[str, str]:
    """Every statement and migration of `schema`, rendered."""
    built = _sql.statements(schema)
    texts = {f.name: getattr(built, f.name).as_string(None) for f in fields(built)}
    for version, _, body in _schema.MIGRATIONS:
        texts[f"migration {version}"] = _sql.compose(body, schema).as_string(None)
    return texts


def test_the_face_keeps_every_name_where_it_was() -> None:
    assert sessiontree.storage.PostgresSessionStorage is postgres.PostgresSessionStorage
    for name in postgres.__all__:
        obj = getattr(postgres, name)
        if isinstance(obj, type) or callable(obj):
            assert obj.__module__ == "sessiontree.storage.postgres", name
    assert postgres.SCHEMA_VERSION == _schema.MIGRATIONS[-1][0] == 2


@pytest.mark.parametrize(
    "how",
    [
        "import sessiontree.storage.postgres",
        "from sessiontree.storage import PostgresSessionStorage",
        "import sessiontree.storage.postgres._storage",
    ],
)
def test_without_psycopg_every_way_in_says_what_to_install(how: str) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["psycopg"] = None  # as if the extra were not installed
        from sessiontree.errors import BackendUnavailableError
        try:
            {how}
        except BackendUnavailableError as exc:
            print(exc)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert "pip install 'sessiontree[postgres]'" in out


schema_names = st.from_regex(r"[a-z_][a-z0-9_]{0,62}", fullmatch=True).filter(
    lambda s: not s.startswith("pg_")
)


@given(schema_names)
def test_every_table_is_schema_qualified_and_the_schema_only_quoted(schema: str) -> None:
    quoted = f'"{schema}".'
    for name, text in _texts(schema).items():
        assert "{s}" not in text and "{now}" not in text, name
        for target in _TABLE_AFTER.findall(text):
            bare = target.removeprefix(quoted).split("(")[0]
            # A store table named without the schema would be found on search_path.
            assert not (bare in _TABLES and not target.startswith(quoted)), (name, target)
        # The schema appears only as the quoted identifier before a table's name.
        unquoted = re.sub(rf'"{re.escape(schema)}"\.(?:{"|".join(_TABLES)})\b', "", text)
        assert f'"{schema}"' not in unquoted or name == "create_schema", name


def test_a_schema_name_that_is_not_an_identifier_never_reaches_sql() -> None:
    for bad in ('x"; DROP TABLE y; --', "Upper", "pg_catalog", "1x", "a" * 64, "", "a-b"):
        with pytest.raises(postgres.PostgresStoreError, match="invalid schema"):
            postgres.validate_schema_name(bad)
    # Quoting is psycopg's, whatever the name: a double quote is doubled.
    assert _sql.compose("SELECT 1 FROM {s}.nodes", 'a"b').as_string(None) == (
        'SELECT 1 FROM "a""b".nodes'
    )
