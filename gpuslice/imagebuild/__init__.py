"""Session images built locally: a Debian root filesystem (debootstrap) and the base image.

``python -m gpuslice.imagebuild`` (or ``scripts/build-images.sh``) builds them; ``gpuslice up`` and
the test suite call :func:`ensure_base_image`.
"""

from gpuslice.imagebuild.base import (
    BASE_REPO,
    DEFAULT_CACHE_DIR,
    ROOTFS_REPO,
    BaseImageOptions,
    BuildResult,
    PipIndex,
    ensure_base_image,
    ensure_rootfs_image,
    host_pip_index,
)
from gpuslice.imagebuild.rootfs import ImageBuildError, RootfsRecipe, find_debian_mirror

__all__ = [
    "BASE_REPO",
    "DEFAULT_CACHE_DIR",
    "ROOTFS_REPO",
    "BaseImageOptions",
    "BuildResult",
    "ImageBuildError",
    "PipIndex",
    "RootfsRecipe",
    "ensure_base_image",
    "ensure_rootfs_image",
    "find_debian_mirror",
    "host_pip_index",
]
