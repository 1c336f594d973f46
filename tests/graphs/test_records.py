"""pgnn/graphs/records.py: the one frame seeder is collision-free and the record builder is the cache's."""

from __future__ import annotations

import numpy as np

from pgnn.graphs.records import AUGMENT_STREAM, frame_rng, frame_words


def draw(seed: int, frame_id: str, *stream: int) -> float:
    return float(frame_rng(seed, frame_id, *stream).random())


def test_frame_seeder_separates_ids_that_used_to_collide() -> None:
    ids = ["ab", "ba", "1", "01", "000001", "0000001", "000010", "a", "b"]
    draws = {fid: draw(0, fid) for fid in ids}
    assert len(set(draws.values())) == len(ids), draws
    assert frame_words("000114") == [114]  # KITTI ids keep their number (cached graphs unchanged)
    assert len(frame_words("ab")) == 3 and frame_words("ab") != frame_words("ba")


def test_frame_seeder_depends_on_seed_stream_and_nothing_else() -> None:
    assert draw(0, "000001") == draw(0, "000001")
    assert draw(0, "000001") != draw(1, "000001")
    assert draw(0, "000001") != draw(0, "000001", AUGMENT_STREAM, 0)
    assert draw(0, "000001", AUGMENT_STREAM, 0) != draw(0, "000001", AUGMENT_STREAM, 1)
    np.testing.assert_array_equal(frame_rng(3, "x").integers(0, 9, 5), frame_rng(3, "x").integers(0, 9, 5))
