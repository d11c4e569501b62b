"""Keeping a long-running process's start-up objects out of the garbage collector's full passes.

A full (oldest-generation) collection walks every tracked object. Most of a server's objects are
made while it starts (modules, classes, the app, its routes and schemas: ~180,000 in the
manager) and live as long as it does, yet each full pass walks them again: 100-180 ms on this
2-core machine, landing on whatever request is running, which is what a listing's p99 measured.
``gc.freeze()`` moves them to a generation that is never collected; passes then walk only what
was made since. ``gc.unfreeze()`` when the process stops serving gives them back, so a process
that runs many apps one after another (the tests) collects what each left behind.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_serving = 0  # apps in this process inside ``settled()``; the heap is frozen while any is


@contextmanager
def settled() -> Iterator[None]:
    """While serving: what exists now is not walked by the collector's passes."""
    global _serving
    _serving += 1
    gc.freeze()
    try:
        yield
    finally:
        _serving -= 1
        if _serving == 0:
            gc.unfreeze()
