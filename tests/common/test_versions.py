"""Which manager a client may talk to (`gpuslice.common.versions`)."""

from __future__ import annotations

from gpuslice import __version__
from gpuslice.common.versions import API_HEADER, API_REVISION, VERSION_HEADER, headers, mismatch


def test_the_same_revision_talks_whatever_the_version() -> None:
    assert mismatch(headers(), "http://m") is None
    assert mismatch({VERSION_HEADER: "9.9.9", API_HEADER: str(API_REVISION)}, "http://m") is None


def test_a_manager_older_than_the_headers_speaks_revision_1() -> None:
    assert (mismatch({}, "http://m") is None) == (API_REVISION == 1)


def test_another_revision_names_both_versions_and_what_to_do() -> None:
    newer = {VERSION_HEADER: "0.2.0", API_HEADER: str(API_REVISION + 1)}
    ours = f"gpuslice {__version__} (API revision {API_REVISION})"
    assert mismatch(newer, "http://m") == (
        f"the manager at http://m runs gpuslice 0.2.0 (API revision {API_REVISION + 1}), this "
        f"is {ours}: upgrade gpuslice here (`pip install gpuslice==0.2.0`)")
    assert mismatch(newer, "http://m", agent=True) == (
        f"the manager at http://m runs gpuslice 0.2.0 (API revision {API_REVISION + 1}), this "
        f"agent is {ours}: run `pip install gpuslice==0.2.0` on this node, or upgrade both")
    garbled = mismatch({API_HEADER: "two"}, "http://m")
    assert garbled is not None and "(API revision two)" in garbled
