"""The framework slice hook that runs inside session containers (see ``gpuslice_hook.py``).

This package only locates the hook's files for the runtime and the image build; the files
themselves are standalone and never import gpuslice.
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
