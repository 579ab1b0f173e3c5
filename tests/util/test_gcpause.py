"""`gc_paused`: the collector is off inside, back on after, and what a big block left
behind goes to the oldest generation without a collection (unless something froze
objects on purpose: those stay frozen)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from sessiontree._util import gcpause
from sessiontree._util.gcpause import gc_paused


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    """The collector on, nothing frozen (a CLI test run before in this process froze
    its imports: frozen again after, as the CLI would)."""
    was = gc.isenabled()
    frozen = gc.get_freeze_count()
    seen = list(gcpause._frozen_seen)
    gc.unfreeze()
    gcpause._frozen_seen.clear()
    gc.enable()
    yield
    gcpause._frozen_seen[:] = seen
    gc.unfreeze()
    if frozen:
        gc.freeze()
    if not was:
        gc.disable()


def test_a_big_block_leaves_its_containers_in_the_oldest_generation() -> None:
    with gc_paused():
        assert not gc.isenabled()
        kept = [[i] for i in range(20_000)]
    assert gc.isenabled()
    assert gc.get_count()[0] < 1_000  # no young collection is due to walk them
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(item) in oldest for item in kept[::997])
    assert gc.get_freeze_count() == 0


def test_a_small_block_is_left_to_the_collector() -> None:
    gc.collect()
    with gc_paused():
        kept = [[i] for i in range(100)]
    young = {id(o) for o in gc.get_objects(generation=0)}
    assert id(kept[0]) in young


def test_objects_frozen_on_purpose_stay_frozen() -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    with gc_paused():
        kept = [[i] for i in range(20_000)]
    assert gc.get_freeze_count() == frozen
    assert gc.isenabled()
    assert len(kept) == 20_000
    # Found once, not counted again (a walk over every frozen object).
    assert gcpause._frozen_seen
    with gc_paused():
        more = [[i] for i in range(20_000)]
    assert gc.get_freeze_count() == frozen
    assert len(more) == 20_000


def test_a_nested_pause_leaves_the_collector_off_for_the_outer_one() -> None:
    with gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
