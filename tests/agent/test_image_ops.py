"""The runtime's image calls against the real Docker Engine: details, removal, pull failure."""

from __future__ import annotations

import uuid

import pytest

from gpuslice.agent.runtime.docker import DockerRuntime
from gpuslice.agent.runtime.models import ImagePullError

pytestmark = pytest.mark.docker


async def test_details_name_every_tag_with_id_size_and_labels(
    runtime: DockerRuntime, base_image: str
) -> None:
    before = set(await runtime.image_tags())
    details = {i.tag: i for i in await runtime.image_details()}
    after = set(await runtime.image_tags())
    base = details[base_image]
    assert base.image_id.startswith("sha256:") and base.size > 0
    assert isinstance(base.labels, dict)
    # every tag there all along is named, and nothing that never was (other tests on this
    # engine tag and remove images meanwhile)
    assert before & after <= set(details) <= before | after


async def test_remove_untags_and_a_missing_image_is_no_error(
    runtime: DockerRuntime, base_image: str
) -> None:
    repo = f"gpuslice-test/copy-{uuid.uuid4().hex[:8]}"
    await runtime._client().images.tag(base_image, repo, tag="1")
    assert f"{repo}:1" in await runtime.image_tags()
    assert await runtime.remove_image(f"{repo}:1") is True
    assert f"{repo}:1" not in await runtime.image_tags()
    assert base_image in await runtime.image_tags()  # only the tag went
    assert await runtime.remove_image(f"{repo}:1") is False


async def test_a_pull_that_cannot_reach_its_registry_says_why(runtime: DockerRuntime) -> None:
    seen: list[int] = []

    async def progress(percent: int) -> None:
        seen.append(percent)

    with pytest.raises(ImagePullError) as err:
        await runtime.pull("127.0.0.1:9/gpuslice-nosuch:1", progress)
    assert "127.0.0.1:9" in str(err.value)
