"""The one pricing module: what a reply's tokens would cost, from a maintained table.

Costs recorded in a session (`usage.cost.total`, written by the agent that made
the call) are the truth and are never replaced. Usage without a recorded cost
(the field absent, or 0 for a model the table prices) is priced at report time
from the `genai-prices` package's bundled table (offline: it never fetches),
and reports mark that cost as estimated and name the table and its version.
A model the table prices at 0 (local or free) costs 0; a model it does not
know stays unpriced. Nothing here writes anything.
"""

from __future__ import annotations

import bisect
import importlib.util
import os
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from functools import cache
from typing import Any

__all__ = ["PriceTable", "Quote", "price_table"]

TABLE_NAME = "genai-prices"

# Provider names the agents write (pi-ai's ids) -> the table's provider ids. A
# provider not listed is looked up by its own name, then by the model alone.
_PROVIDERS = {
    "amazon-bedrock": "aws",
    "azure-openai-responses": "azure",
    "google-gemini-cli": "google",
    "google-vertex": "google",
    "google-antigravity": "google",
    "openai-codex": "openai",
    "xai": "x-ai",
    "moonshot": "moonshotai",
    "moonshotai-cn": "moonshotai",
    "kimi-coding": "moonshotai",
    "zai-coding-plan": "zai",
}


_import_lock = threading.Lock()
"""One import of the table, whichever thread asks first. The module's, not each table's:
a table is pickled and copied (a lock is neither), and a forked child gets a new one."""


def _forked() -> None:
    # A thread importing the table at the fork holds the lock in the child, where that
    # thread does not exist: the child's first price would wait forever.
    global _import_lock
    _import_lock = threading.Lock()


os.register_at_fork(after_in_child=_forked)


@dataclass(frozen=True, slots=True)
class Quote:
    """The table's price for one reply."""

    cost: float
    """USD (0 for a model the table prices at 0)."""
    model: str
    """The table's name for the model that was priced."""
    provider: str


class PriceTable:
    """Looks up prices in the `genai-prices` table, imported when a reply first needs a
    price: with pydantic and its HTTP client it is most of a report's start-up (about 0.2 s
    of CPU), and replies whose cost is recorded never need it."""

    def __init__(self) -> None:
        self._lookups: dict[tuple[str, str, str], Any] = {}
        self._rates: dict[tuple[tuple[str, str, str], int], tuple[float, ...] | None] = {}
        self._calc: Any = None
        self._usage: Any = None
        self._loaded = False
        self._installed: tuple[str | None, str | None] | None = None
        self.name = TABLE_NAME
        self._version: str | None = None
        self._error: str | None = None
        self._named: tuple[str | None] | None = None  # a version set by hand

    def _load(self) -> bool:
        """Imports the table once; whether it could be."""
        if not self._loaded:
            with _import_lock:
                if not self._loaded:
                    self._import()
                    self._loaded = True
        return self._calc is not None

    def _import(self) -> None:
        try:
            import genai_prices

            self._usage = genai_prices.Usage
            self._version = genai_prices.__version__
            self._calc = genai_prices.calc_price
        except ModuleNotFoundError as exc:  # the library without the cli extra
            self._error = _missing(exc)
        except Exception as exc:  # broken: reports say so
            self._error = f"{TABLE_NAME} unavailable: {exc}"

    @property
    def available(self) -> bool:
        return self._load()

    @property
    def version(self) -> str | None:
        """The table's version: the installed package's, read from its metadata unless
        the table was imported (a report whose costs are all recorded imports nothing)."""
        if self._named is not None:
            return self._named[0]
        if self._loaded:
            return self._version
        return self._probe()[0]

    @version.setter
    def version(self, value: str | None) -> None:
        """Names another release (a golden file's stand-in for the installed one)."""
        self._named = (value,)

    @property
    def error(self) -> str | None:
        """Why the table could not be loaded (not installed: said without importing it)."""
        if self._loaded:
            return self._error
        return self._probe()[1]

    def _probe(self) -> tuple[str | None, str | None]:
        if self._installed is None:
            try:
                self._installed = (_installed_version(), None)
            except ModuleNotFoundError as exc:
                self._installed = (None, _missing(exc))
            except Exception:  # metadata that cannot be read: its version is not known
                self._installed = (None, None)
        return self._installed

    def described(self) -> dict[str, str | None]:
        """What a report says of the table: its name and version, and, when it could
        not be loaded, why (the report's estimates are then none)."""
        said: dict[str, str | None] = {"table": self.name, "version": self.version}
        error = self.error
        if error is not None:
            said["error"] = error
        return said

    def quote(
        self,
        provider: str,
        model: str,
        when_ms: int | None,
        input: int,
        output: int,
        cache_read: int,
        cache_write: int,
        cache_write_1h: int = 0,
    ) -> Quote | None:
        """The price of these tokens (`input` without the cached ones, as the agents
        record it), or None when the table does not know the model.

        `cache_write_1h` of the `cache_write` tokens went to the 1-hour cache. The table
        prices a cache write at the 5-minute rate (1.25x the input rate for Anthropic);
        a 1-hour one costs twice the input rate (Anthropic's prompt caching prices, and
        pi 1.6's `calculateCost`), in the tier the whole input falls in."""
        if not model or model == "?" or not self._load():
            return None
        when = _when(when_ms)
        found = self._model_price(provider, model, when)
        if found is None:
            return None
        model_price, model_id, provider_id, starts = found
        counts = (max(0, input), max(0, output), max(0, cache_read), max(0, cache_write))
        hour = min(max(0, cache_write_1h), counts[3])
        rates = None
        if starts is not None:
            # Linear within a tier: the tier is set by the whole input (cached included).
            tier = bisect.bisect_left(starts, counts[0] + counts[2] + counts[3])
            rates = self._rates.get((key_of(provider, model, when), tier))
            if rates is None:
                rates = _rates(self._usage, model_price, starts, tier)
                self._rates[(key_of(provider, model, when), tier)] = rates
        if rates is None:
            total = _table_price(self._usage, model_price, *counts)
            if total is None:
                return None
            if hour:
                # Not linear (or unknown parts): the 1-hour writes' difference from the
                # 5-minute rate, at the rates of a million tokens.
                whole = 1_000_000
                base = _table_price(self._usage, model_price, whole, 0, 0, 0)
                write = _table_price(self._usage, model_price, 0, 0, 0, whole)
                if base is not None and write is not None:
                    total += hour * (_HOUR_WRITE_FACTOR * base - write) / whole
            return Quote(total, model_id, provider_id)
        cost = sum(rate * count for rate, count in zip(rates, counts, strict=True))
        if hour:
            cost += hour * (_HOUR_WRITE_FACTOR * rates[0] - rates[3])
        return Quote(cost, model_id, provider_id)

    def _model_price(self, provider: str, model: str, when: datetime) -> Any:
        key = key_of(provider, model, when)
        if key in self._lookups:
            return self._lookups[key]
        found = None
        mapped = _PROVIDERS.get(provider, provider)
        names = [model]
        if "/" in model:
            names.append(model.rsplit("/", 1)[1])  # "anthropic/claude-…" as routers name them
        attempts = [(mapped, name) for name in names] + [(None, name) for name in names]
        probe = self._usage(input_tokens=1, output_tokens=1)
        for provider_id, name in attempts:
            try:
                calc = self._calc(
                    probe, name, provider_id=provider_id, genai_request_timestamp=when
                )
            except Exception:  # LookupError: not in the table (under that provider)
                continue
            price = calc.model_price
            found = (price, str(calc.model.id), str(calc.provider.id), _tier_starts(price))
            break
        self._lookups[key] = found
        return found


_HOUR_WRITE_FACTOR = 2.0
"""A 1-hour cache write costs this times the input rate (5-minute ones: the table's)."""


def _table_price(
    usage_type: Any, model_price: Any, input: int, output: int, cache_read: int, cache_write: int
) -> float | None:
    # The table's input count includes the cached tokens.
    usage = usage_type(
        input_tokens=input + cache_read + cache_write,
        output_tokens=output,
        cache_read_tokens=cache_read,
        cache_write_tokens=cache_write,
    )
    try:
        total: Decimal = model_price.calc_price(usage)["total_price"]
    except Exception:
        return None
    return float(total)


def _tier_starts(model_price: Any) -> list[int] | None:
    """Where the price's tiers start (sorted; [] when it has none); None when the
    price has parts this module does not know to be linear between them."""
    try:
        from genai_prices.types import TieredPrices
    except ImportError:  # pragma: no cover - a table without tiers
        return []
    starts: set[int] = set()
    for value in vars(model_price).values():
        if isinstance(value, TieredPrices):
            starts.update(int(tier.start) for tier in value.tiers)
        elif value is not None and not isinstance(value, Decimal):
            return None
    return sorted(starts)


def _rates(
    usage_type: Any, model_price: Any, starts: list[int], tier: int
) -> tuple[float, float, float, float] | None:
    """USD per token of (input, output, cache read, cache write) in one tier, from
    the table's own prices for a whole input inside that tier."""
    # The smallest whole input in the tier: the tier applies above its start.
    whole = 1 if tier == 0 else starts[tier - 1] + 1
    base = _table_price(usage_type, model_price, whole, 0, 0, 0)
    out = _table_price(usage_type, model_price, whole, 1_000_000, 0, 0)
    read = _table_price(usage_type, model_price, 0, 0, whole, 0)
    write = _table_price(usage_type, model_price, 0, 0, 0, whole)
    if base is None or out is None or read is None or write is None:
        return None
    return base / whole, (out - base) / 1_000_000, read / whole, write / whole


def _missing(exc: ModuleNotFoundError) -> str:
    """Why the table is not there: the library without the cli extra."""
    return (
        f"{TABLE_NAME} unavailable: {exc} (it is the cli extra's: pip install 'sessiontree[cli]')"
    )


def _installed_version() -> str:
    """`genai_prices.__version__` without importing it: the `Version` of its
    distribution's METADATA, found beside the package (`importlib.metadata`, which
    genai_prices asks, costs 20-30 ms of imports; this reads one small file).

    Raises:
        ModuleNotFoundError: the package is not installed.
    """
    spec = importlib.util.find_spec("genai_prices")
    if spec is None:
        raise ModuleNotFoundError("No module named 'genai_prices'", name="genai_prices")
    found: list[str] = []
    if spec.origin is not None:
        where = os.path.dirname(os.path.dirname(spec.origin))
        try:
            found = [
                os.path.join(where, name, "METADATA")
                for name in os.listdir(where)
                if name.startswith("genai_prices-") and name.endswith(".dist-info")
            ]
        except OSError:
            pass
    if len(found) == 1:
        try:
            with open(found[0], encoding="utf-8") as f:
                for line in f:
                    if line.startswith("Version:"):
                        return line[len("Version:") :].strip()
                    if not line.strip():
                        break  # the headers end at the first blank line
        except (OSError, ValueError):  # UnicodeDecodeError: a damaged METADATA
            pass
    # Installed some other way (an egg, an editable checkout, two dist-infos): as
    # genai_prices itself asks.
    from importlib.metadata import version

    return version("genai_prices")


def key_of(provider: str, model: str, when: datetime) -> tuple[str, str, str]:
    return provider, model, when.strftime("%Y-%m-%d")


def _when(ms: int | None) -> datetime:
    if ms is None:
        return datetime.now(UTC)
    try:
        return datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return datetime.now(UTC)


@cache
def price_table() -> PriceTable:
    """The process's price table (loaded once)."""
    return PriceTable()
