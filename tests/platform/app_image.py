"""A session image for the proxy's tests and benchmark: the base image plus ``echo_app.py``,
declared as three apps: ``echo`` (it answers), ``slow`` (answers after 4 s, within its start
timeout) and ``broken`` (exits 3 after two lines). Built through the Engine API with a tag
unique to the run, and removed afterwards."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiodocker

from gpuslice.common.images import LABEL_APPS, LABEL_TITLE
from gpuslice.imagebuild.base import build_context_image

APP_FILE = Path(__file__).with_name("echo_app.py")
IN_IMAGE = "/opt/gpuslice-test/echo_app.py"
ECHO_PORT, SLOW_PORT, BROKEN_PORT = 8765, 8766, 8767
APPS = [
    {"name": "echo", "protocol": "http", "port": ECHO_PORT,
     "command": ["python3", IN_IMAGE, "{port}"]},
    {"name": "slow", "protocol": "http", "port": SLOW_PORT,
     "command": ["sh", "-c", f"sleep 4; exec python3 {IN_IMAGE} {{port}}"], "start_timeout": 30},
    {"name": "broken", "protocol": "http", "port": BROKEN_PORT,
     "command": ["sh", "-c", "echo reading the config; echo 'oops: no config here' >&2; exit 3"]},
]
DOCKERFILE = f"""ARG BASE_IMAGE
FROM ${{BASE_IMAGE}}
COPY echo_app.py {IN_IMAGE}
"""


def build(tag: str, base: str) -> None:
    """Build the image as ``tag`` FROM ``base``."""

    async def run() -> None:
        async with aiodocker.Docker() as docker:
            await build_context_image(
                docker, {"Dockerfile": DOCKERFILE.encode(), "echo_app.py": APP_FILE.read_bytes()},
                tag, build_args={"BASE_IMAGE": base},
                labels={LABEL_APPS: json.dumps(APPS), LABEL_TITLE: "gpuslice proxy test apps"},
                progress=lambda line: None, prefix="test apps",
            )

    asyncio.run(run())


def remove(tag: str) -> None:
    async def run() -> None:
        async with aiodocker.Docker() as docker:
            try:
                await docker.images.delete(tag, force=True)
            except aiodocker.DockerError:
                pass  # gone already

    asyncio.run(run())
