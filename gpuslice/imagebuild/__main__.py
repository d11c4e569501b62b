"""``python -m gpuslice.imagebuild``: build the standard session images if they are missing."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

import aiodocker

from gpuslice.imagebuild.base import (
    DEFAULT_CACHE_DIR,
    BaseImageOptions,
    BuildResult,
    default_extra_ca_bundle,
    ensure_base_image,
)
from gpuslice.imagebuild.rootfs import ImageBuildError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuslice.imagebuild", description=__doc__)
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path(os.environ.get("GPUSLICE_IMAGE_CACHE", DEFAULT_CACHE_DIR)),
        help="where the debootstrap tarball is cached (env GPUSLICE_IMAGE_CACHE)",
    )
    parser.add_argument(
        "--extra-ca-bundle",
        type=Path,
        default=default_extra_ca_bundle(),
        help="a PEM bundle the image trusts besides Debian's (env GPUSLICE_EXTRA_CA_BUNDLE, "
        "else SSL_CERT_FILE)",
    )
    parser.add_argument(
        "--mirror",
        default=os.environ.get("GPUSLICE_DEBIAN_MIRROR") or None,
        help="Debian mirror for debootstrap (default: the one this machine's apt uses)",
    )
    parser.add_argument("--tag", default=None, help="the base image's tag")
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    args = parser.parse_args(argv)
    options = BaseImageOptions.from_env(
        cache_dir=args.cache_dir,
        extra_ca_bundle=args.extra_ca_bundle,
        mirror=args.mirror,
        force=args.force,
        **({"tag": args.tag} if args.tag else {}),
    )
    try:
        result = asyncio.run(_build(options))
    except (ImageBuildError, aiodocker.DockerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    verb = "built" if result.built else "already present:"
    print(f"{verb} {result.tag} in {result.seconds:.1f}s")
    return 0


async def _build(options: BaseImageOptions) -> BuildResult:
    started = time.monotonic()

    def progress(line: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {line}", flush=True)

    async with aiodocker.Docker() as docker:
        return await ensure_base_image(docker, options, progress)


if __name__ == "__main__":
    sys.exit(main())
