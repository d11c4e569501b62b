"""Serving processes mark the optional modules that hot-path libraries try to import on every
call as absent (`cli/_serve.absent_at_once`): importing one that is not installed then fails at
once, as it would have after a search, and one that is installed is left alone."""

from __future__ import annotations

import importlib
import sys

import pytest

from gpuslice.cli._serve import absent_at_once

MISSING = "gpuslice_tests_not_installed"


def test_a_missing_module_fails_at_once_and_an_installed_one_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, MISSING, raising=False)
    # installed (the standard library), as if not imported yet
    monkeypatch.delitem(sys.modules, "wave", raising=False)
    absent_at_once((MISSING, "wave"))
    assert sys.modules[MISSING] is None and "wave" not in sys.modules
    with pytest.raises(ModuleNotFoundError, match=MISSING):
        importlib.import_module(MISSING)
    assert importlib.import_module("wave").Wave_read is not None
    monkeypatch.delitem(sys.modules, MISSING)
