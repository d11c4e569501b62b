"""The framework slice hook: the files that apply a session's GPU slice to PyTorch, TensorFlow
and JAX *inside* its container (see ``gpuslice_hook.py``).

This package owns those files and where they go: the agent's runtime mounts them into every
session (``CONTAINER_HOOK_DIR``, first on ``PYTHONPATH``) and the image build installs them into
the base image's system Python (``PTH_FILE``). The hook files run on whatever Python an image
has: they use the standard library only and never import gpuslice. This module only locates
them, so importing it needs nothing from the agent.
"""

from __future__ import annotations

from pathlib import Path

HOOK_DIR = Path(__file__).resolve().parent
#: Where the hook lives inside a session container (on ``PYTHONPATH``).
CONTAINER_HOOK_DIR = "/opt/gpuslice/hook"
#: The files a container needs, relative to ``CONTAINER_HOOK_DIR``.
HOOK_FILES = ("gpuslice_hook.py", "sitecustomize.py")
#: A ``.pth`` file for images that install the hook into their system Python.
PTH_FILE = "gpuslice-hook.pth"


def hook_files() -> dict[str, bytes]:
    """``{file name: content}`` of the files to place in ``CONTAINER_HOOK_DIR``."""
    return {name: (HOOK_DIR / name).read_bytes() for name in HOOK_FILES}
