"""Keeping a long-running process's start-up objects out of the garbage collector's full passes.

A full (oldest-generation) collection walks every tracked object. Most of a server's objects are
made while it starts (modules, classes, the app, its routes and schemas: ~180,000 in the
manager) and live as long as it does, yet each full pass walks them again: 100-180 ms on this
2-core machine, landing on whatever request is running, which is what a listing's p99 measured.
``gc.freeze()`` moves them to a generation that is never collected; passes then walk only what
was made since. ``gc.unfreeze()`` when the process stops serving gives them back, so a process
that runs many apps one after another (the tests) collects what each left behind.

While serving, the collector also runs less often (``SERVING_THRESHOLDS``): fewer of the
objects of requests in flight are promoted to where only a full pass frees them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# The collector's thresholds while serving (CPython's are 700, 10, 10). A young pass every 700
# allocations lands in the middle of every request in flight, and what those requests hold then
# is promoted to the older generations, which then fill and are walked in full: under 1,000
# agents (bench/agents.py) the manager made 53 full passes in two minutes, ~180 ms each, ~9 s
# in all, landing on heartbeats. At 10,000 and 20, 20 it made 3, and spent ~2 s in the
# collector overall instead of ~14 s.
SERVING_THRESHOLDS = (10_000, 20, 20)
_serving = 0  # apps in this process inside ``settled()``; the heap is frozen while any is
_outside = gc.get_threshold()  # the thresholds to give back when the last one stops


@contextmanager
def settled() -> Iterator[None]:
    """While serving: what exists now is not walked by the collector's passes, and the passes
    come less often."""
    global _serving, _outside
    if _serving == 0:  # (whichever app stops last gives back what was there before the first)
        _outside = gc.get_threshold()
    _serving += 1
    gc.freeze()
    gc.set_threshold(*SERVING_THRESHOLDS)
    try:
        yield
    finally:
        _serving -= 1
        if _serving == 0:
            gc.set_threshold(*_outside)
            gc.unfreeze()
