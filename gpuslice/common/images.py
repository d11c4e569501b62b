"""Names of the images gpuslice itself builds (shared by the CLI, manager and agent)."""

from gpuslice import __version__

BASE_REPO = "gpuslice/base"
# The standard session image: Python, pip and a shell. `gpuslice up` builds it when missing,
# and `gpuslice session create` uses it when no --image is given.
DEFAULT_SESSION_IMAGE = f"{BASE_REPO}:{__version__}"
