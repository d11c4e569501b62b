"""Pull on demand with real processes and Docker: an image the registry lists but the node lacks
is pulled during PREPARING; here the registry serves no image content (none is reachable in CI),
so the session ends ERROR with Docker's reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.manager import fake_registry

from .conftest import Platform, run_split

pytestmark = pytest.mark.docker


registry_url = fake_registry.registry_url  # the fixture, under its name here


@pytest.fixture
def registry_platform(
    base_image: str, tmp_path: Path, registry_url: str
) -> Iterator[Platform]:
    """`gpuslice manager serve` with a registry configured, and `gpuslice agent serve`."""
    yield from run_split(tmp_path, {"GPUSLICE_REGISTRY__URL": registry_url})


def test_a_registry_image_the_node_cannot_pull_is_a_clear_error(
    registry_platform: Platform, registry_url: str
) -> None:
    plat = registry_platform
    assert "the registry has 2 image(s)" in plat.ok("image", "rescan")
    reference = f"{registry_url.removeprefix('http://')}/team/env:1"
    listed = {i["name"]: i for i in json.loads(plat.ok("image", "list", "--json"))}
    assert listed[reference]["sources"] == ["registry"]
    plat.ok("session", "create", "--name", "pulled", "--image", reference,
            "--cpu", "0.25", "--mem", "256m")
    session = plat.wait_status("pulled", {"ERROR", "RUNNING"}, timeout=60)
    assert session["status"] == "ERROR"
    assert session["status_reason"].startswith(f"could not pull {reference}: ")
