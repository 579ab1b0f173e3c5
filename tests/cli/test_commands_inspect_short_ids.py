"""The short ids of a listing's page are those of the whole listing."""

from __future__ import annotations

import random

from sessiontree.cli.commands_inspect import short_ids


def test_a_page_has_the_short_ids_it_has_in_the_whole_listing() -> None:
    rng = random.Random(7)
    # Ids that share long prefixes (as uuidv7 ids of one minute do), a few short ones.
    ids = [f"0190a{rng.randrange(16**6):06x}{rng.randrange(16**4):04x}" for _ in range(3000)]
    ids += ["0190a", "0190a0", "abc", ids[5][:12] + "ffff", ids[9][:10] + "0"]
    whole = short_ids(ids)
    for start in range(0, len(ids), 200):
        page = ids[start : start + 20]
        assert short_ids(ids, of=page) == {sid: whole[sid] for sid in page}
    assert short_ids(ids, of=iter(ids[:3])) == {sid: whole[sid] for sid in ids[:3]}
