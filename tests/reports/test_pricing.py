"""The price table is imported when a reply first needs a price: a report whose costs are
all recorded names the table's version without importing it (with pydantic and its
HTTP client it is most of a report's start-up), and the import happens once whichever
threads ask."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sessiontree.reports._pricing import PriceTable, _installed_version

T0 = 1_760_000_000_000

PROBE = """
import json, sys
from sessiontree.reports._pricing import PriceTable
table = PriceTable()
said = table.described()
before = "genai_prices" in sys.modules
quote = table.quote("anthropic", "claude-sonnet-4-5", {t0}, 1000, 100, 0, 0)
print(json.dumps({{"said": said, "before": before, "after": "genai_prices" in sys.modules,
                  "cost": quote.cost if quote else None, "again": table.described()}}))
"""


def test_the_version_is_said_without_importing_the_table() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(t0=T0)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(proc.stdout)
    version = importlib.metadata.version("genai_prices")
    assert result["said"] == {"table": "genai-prices", "version": version}
    assert result["before"] is False
    # A reply without a recorded cost imports it, and the report says the same.
    assert result["after"] is True and result["cost"] > 0
    assert result["again"] == result["said"]


def test_the_installed_version_is_the_packages_own() -> None:
    import genai_prices

    assert _installed_version() == genai_prices.__version__


def test_the_table_is_imported_once_whichever_threads_ask(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = PriceTable()
    imports = 0
    real = table._import

    def counted() -> None:
        nonlocal imports
        imports += 1
        real()

    monkeypatch.setattr(table, "_import", counted)

    def ask(n: int) -> float | None:
        quote = table.quote("anthropic", "claude-sonnet-4-5", T0, 1000 + n, 100, 0, 0)
        return quote.cost if quote is not None else None

    with ThreadPoolExecutor(8) as pool:
        costs = list(pool.map(ask, range(32)))
    assert imports == 1 and table.available
    assert all(cost is not None and cost > 0 for cost in costs)
    assert table.described() == PriceTable().described()


def test_a_metadata_that_is_no_utf8_is_no_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The version was read from the METADATA beside the package in UTF-8: a byte that
    # is none (in its headers or the description after them, read in the same chunk)
    # raised UnicodeDecodeError out of every report, even one that needs no price.
    package = tmp_path / "genai_prices"
    package.mkdir()
    (package / "__init__.py").write_text("")
    info = tmp_path / "genai_prices-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_bytes(
        b"Metadata-Version: 2.1\nName: genai\xff_prices\nVersion: 9.9.9\n\n"
    )
    spec = importlib.util.spec_from_file_location("genai_prices", package / "__init__.py")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: spec)
    said = PriceTable().described()
    assert said["table"] == "genai-prices"
    assert said["version"] is None or isinstance(said["version"], str)
