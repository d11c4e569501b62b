"""The benchmarks that run sessions need the Docker Engine and the base image (see
``tests/dockerd.py``: they skip, saying why, without them)."""

from __future__ import annotations

from tests.dockerd import base_image, docker_ready

__all__ = ["base_image", "docker_ready"]
