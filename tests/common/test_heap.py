"""The start-up heap is kept out of the collector's passes while serving, and given back after."""

from __future__ import annotations

import gc

from gpuslice.common import heap


def test_objects_made_before_serving_are_frozen_and_given_back_by_the_last_to_stop() -> None:
    assert gc.get_freeze_count() == 0
    thresholds = gc.get_threshold()
    before = object.__new__(type("Made", (), {}))  # a tracked object from start-up
    with heap.settled():
        assert gc.get_freeze_count() > 0
        assert not any(o is before for o in gc.get_objects())  # not walked by a pass
        with heap.settled():  # a second app in the same process
            pass
        # The first still serves: what it froze is still out of the passes. (The count itself
        # may shrink: a frozen object whose last reference goes is freed as any other.)
        assert gc.get_freeze_count() > 0
        assert not any(o is before for o in gc.get_objects())
        assert gc.get_threshold() == heap.SERVING_THRESHOLDS != thresholds
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == thresholds
    assert any(o is before for o in gc.get_objects())

