"""The price table is imported when a reply first needs a price: a report whose costs are
all recorded names the table's version without importing it (with pydantic and its
HTTP client it is most of a report's start-up), and the import happens once whichever
threads ask."""

from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sessiontree.reports._pricing import PriceTable, _installed_version
from tests.conftest import unavailable
from tests.helpers import HANG_S

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


def test_a_table_is_pickled_and_copied_as_before_it_was_lazy() -> None:
    # Its import lock made pickle and deepcopy raise "cannot pickle '_thread.lock'".
    table = PriceTable()
    for copied in (pickle.loads(pickle.dumps(table)), copy.deepcopy(table)):
        assert copied.described() == table.described()
        quote = copied.quote("anthropic", "claude-sonnet-4-5", T0, 1000, 100, 0, 0)
        assert quote is not None and quote.cost > 0


def test_a_child_forked_while_another_thread_imports_the_table_can_price() -> None:
    if not hasattr(os, "fork"):  # pragma: no cover - not POSIX
        unavailable("no os.fork")
    # The import lock, held by a thread that does not exist in the child, stayed held
    # there: the child's first price waited forever.
    table = PriceTable()
    entered, release = threading.Event(), threading.Event()
    real = table._import

    def slow() -> None:
        entered.set()
        release.wait(HANG_S)
        real()

    table._import = slow  # type: ignore[method-assign]
    thread = threading.Thread(target=lambda: table.available)
    thread.start()
    entered.wait(HANG_S)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        table._import = real  # type: ignore[method-assign]
        done = threading.Event()
        threading.Thread(target=lambda: (table.available, done.set()), daemon=True).start()
        os._exit(0 if done.wait(10) else 3)
    release.set()
    thread.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
