"""Programs that run *inside* session containers: ``gpuslice-smi`` (the session's GPU slice, what
it uses and its usage history; also ``nvidia-smi`` on nodes without a real GPU), on those nodes
``gpuslice-mock-gpu`` (a simulated GPU load), ``gpuslice-save`` (a file or directory to the
model store), ``gpuslice-run`` (what a ``gpuslice run`` session runs around the script; with
``--save-var``, ``gpuslice_var.py`` runs the script and saves a variable it left), and
the client of the in-session endpoint they share (``gpuslice_endpoint.py``).

This package owns those files and where they go: the agent's runtime mounts them read-only at
``CONTAINER_TOOLS_DIR``, first on the session's ``PATH`` and on its ``PYTHONPATH`` (so code in a
session may ``import gpuslice_endpoint``), and every image gets them without a rebuild. Like
the framework hook they run on whatever Python 3 an image has: standard library only, never an
import of gpuslice. This module only locates them.
"""

from __future__ import annotations

from pathlib import Path

TOOLS_DIR = Path(__file__).resolve().parent
#: Where the tools are inside a session container (first on ``PATH``).
CONTAINER_TOOLS_DIR = "/opt/gpuslice/bin"
#: The in-session endpoint's socket inside a container (the agent serves it).
CONTAINER_ENDPOINT_DIR = "/run/gpuslice"
CONTAINER_ENDPOINT = f"{CONTAINER_ENDPOINT_DIR}/agent.sock"
_ALWAYS = (
    "gpuslice-smi", "gpuslice_smi.py", "gpuslice_smi_query.py", "gpuslice_smi_fields.py",
    "gpuslice_smi_xml.py", "gpuslice_endpoint.py",
    "gpuslice-save", "gpuslice_save.py", "gpuslice-run", "gpuslice_run.py", "gpuslice_var.py",
)
# Only on mock nodes: an nvidia-smi where no real one exists, and the simulated GPU load.
_SIMULATED = ("nvidia-smi", "gpuslice-mock-gpu", "gpuslice_mock_gpu.py")


def tool_files(*, simulated_gpu: bool) -> dict[str, bytes]:
    """``{file name: content}`` for ``CONTAINER_TOOLS_DIR``; ``simulated_gpu`` adds an
    ``nvidia-smi`` that says plainly the GPU is simulated and ``gpuslice-mock-gpu`` (never on
    nodes with real GPUs)."""
    names = _ALWAYS + (_SIMULATED if simulated_gpu else ())
    return {name: (TOOLS_DIR / name).read_bytes() for name in names}


def is_program(name: str) -> bool:
    """Whether a tool file is run directly (mode 0755) rather than imported."""
    return not name.endswith(".py")
