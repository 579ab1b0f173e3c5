"""Pausing the cyclic garbage collector around bulk allocation."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

_PROMOTE_AFTER: Final = 10_000
"""Containers a paused block must leave behind for them to be moved to the oldest
generation when it ends (fewer: the next young collection is cheap anyway)."""


@contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic GC for a block that allocates many long-lived containers.

    Loading a session or building its tree creates hundreds of thousands of dicts
    and lists that all survive; the collector would rescan them again and again
    (measured: it doubles a 100 MB load). Reference counting still frees garbage.

    When the block leaves many containers behind, they go straight to the oldest
    generation: else the first allocation after it starts a young collection that
    walks every one of them (a tenth of a 100 MB load's context), then another
    when they reach the middle one, only to find them alive. They are still
    looked at by full collections, as survivors are.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            _promote_survivors()
            gc.enable()


_frozen_seen: list[bool] = []
"""Set once objects were found frozen: the process freezes on purpose, and counting
them again (a walk over every frozen object) would be wasted."""


def _promote_survivors() -> None:
    """Move every tracked object to the oldest generation, without a collection,
    when the young one grew big. `freeze` then `unfreeze` is that move (two list
    splices); it is left alone where something froze objects on purpose (the CLI
    does, after its imports; a server may before it forks): `unfreeze` would hand
    them back to the collector."""
    if gc.get_count()[0] < _PROMOTE_AFTER or _frozen_seen:
        return
    if gc.get_freeze_count():
        _frozen_seen.append(True)
        return
    gc.freeze()
    gc.unfreeze()
