"""Build a recipe image (``gpuslice/<recipe>:<version>``) through the Engine API.

Idempotent like the base image: the image carries ``gpuslice.recipe-digest``, a hash of the
build context, build arguments, labels and the base image's id, and is not rebuilt while that
matches. The standard base image is ensured first (built when missing), and so is a recipe's
base recipe (``mlflow`` builds FROM ``scipy``); a user-given base image is used as it is,
pulled when it is not present. Apps the base image declares (its ``gpuslice.image.apps``
label) are kept beside the recipe's own: a framework image built FROM the notebook image
still serves Jupyter.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time

import aiodocker

from gpuslice.common.images import DEFAULT_SESSION_IMAGE, LABEL_APPS, ImageMeta
from gpuslice.imagebuild.base import (
    DIGEST_LABEL,
    BaseImageOptions,
    BuildResult,
    _has_digest,
    _image_id,
    build_context_image,
    ensure_base_image,
)
from gpuslice.imagebuild.recipe_defs import BuildPlan, RecipeOptions, base_of, get_recipe, plan
from gpuslice.imagebuild.rootfs import ImageBuildError, Progress


async def build_recipe(
    docker: aiodocker.Docker,
    name: str,
    version: str | None,
    options: RecipeOptions,
    progress: Progress = print,
    base_options: BaseImageOptions | None = None,
) -> BuildResult:
    """Build ``name`` at ``version`` (default: the recipe's) unless it is up to date."""
    started = time.monotonic()
    build = plan(name, version, options)  # raises before any Docker work if impossible
    base_recipe = get_recipe(name).base_recipe
    if base_recipe is not None and build.base_image == base_of(get_recipe(name)):
        await build_recipe(docker, *base_recipe, RecipeOptions(
            extra_ca_bundle=options.extra_ca_bundle), progress, base_options)
    else:
        await _ensure_base(docker, build.base_image, options, progress, base_options)
    build = _with_base_apps(build, await _labels(docker, build.base_image))
    digest = recipe_digest(build, await _image_id(docker, build.base_image))
    if not options.force and await _has_digest(docker, build.tag, digest):
        progress(f"{name}: {build.tag} is up to date")
        return BuildResult(build.tag, False, time.monotonic() - started)
    progress(f"{name}: building {build.tag} from {build.base_image}")
    await build_context_image(
        docker, build.context, build.tag,
        build_args=build.build_args,
        labels={**build.labels, DIGEST_LABEL: digest},
        progress=progress, prefix=name,
    )
    progress(f"{name}: built {build.tag}")
    return BuildResult(build.tag, True, time.monotonic() - started)


def _with_base_apps(build: BuildPlan, base_labels: dict[str, str]) -> BuildPlan:
    """The plan with the base image's apps first, then the recipe's (a name in both: the
    recipe's)."""
    inherited = ImageMeta.from_labels(base_labels).apps
    if not inherited:
        return build
    own = ImageMeta.from_labels(build.labels).apps
    names = {a.name for a in own}
    apps = [a for a in inherited if a.name not in names] + list(own)
    labels = {**build.labels, LABEL_APPS: json.dumps([a.to_label() for a in apps])}
    return dataclasses.replace(build, labels=labels)


async def _labels(docker: aiodocker.Docker, image: str) -> dict[str, str]:
    info = await docker.images.inspect(image)
    return dict((info.get("Config") or {}).get("Labels") or {})


def recipe_digest(build: BuildPlan, base_id: str) -> str:
    """Everything that goes into the image: same digest, same image."""
    h = hashlib.sha256()
    for file in sorted(build.context):
        h.update(file.encode() + b"\0" + hashlib.sha256(build.context[file]).digest())
    h.update(json.dumps([build.build_args, build.labels, base_id], sort_keys=True).encode())
    return h.hexdigest()[:16]


async def _ensure_base(
    docker: aiodocker.Docker,
    base_image: str,
    options: RecipeOptions,
    progress: Progress,
    base_options: BaseImageOptions | None,
) -> None:
    if base_image == DEFAULT_SESSION_IMAGE:
        # The same options as every other builder, so the base is not rebuilt for nothing.
        await ensure_base_image(
            docker,
            base_options or BaseImageOptions.from_env(
                tag=DEFAULT_SESSION_IMAGE, extra_ca_bundle=options.extra_ca_bundle
            ),
            progress,
        )
        return
    try:
        await docker.images.inspect(base_image)
        return
    except aiodocker.DockerError as exc:
        if exc.status != 404:
            raise ImageBuildError(f"cannot inspect {base_image}: {exc.message}") from None
    progress(f"pulling the base image {base_image}")
    try:
        await docker.images.pull(base_image)
    except aiodocker.DockerError as exc:
        raise ImageBuildError(
            f"base image {base_image} is not on this machine and cannot be pulled: "
            f"{' '.join(str(exc.message).split())[:200]}"
        ) from None
