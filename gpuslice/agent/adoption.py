"""Whether an adopted container's mounts are this node's (pure).

A container the agent adopts (after a restart, or one a platform restored into a new data
directory finds running) was made with the mounts of whoever made it: the in-session
endpoint's socket directory and the tools under that agent's data directory, folders under
that platform's storage root. When they are not this agent's, the container is silently
broken (`gpuslice-smi`: the agent does not answer; `gpuslice-save` fails; on a mock node its
declared GPU load is gone, so a busy session looks idle), so it is made again with this
node's mounts (``decide.Act.RECREATE``).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from gpuslice.agent.runtime.models import ContainerState
from gpuslice.session_tools import CONTAINER_ENDPOINT_DIR, CONTAINER_TOOLS_DIR

FOLDERS_DIR = "/home/work"


def misplaced(
    container: ContainerState, files_root: Path, storage_root: Path | None
) -> str | None:
    """Why ``container``'s mounts are not those this node gives its sessions, or ``None``
    (its mounts unknown count as fine: a container just created lists none)."""
    mounts = container.mounts
    endpoint = mounts.get(CONTAINER_ENDPOINT_DIR)
    wanted = files_root / "sessions" / container.session_id / CONTAINER_ENDPOINT_DIR.lstrip("/")
    if endpoint is not None and Path(endpoint) != wanted:
        return (f"its container was made by another agent (its in-session endpoint was "
                f"mounted from {endpoint}, not {wanted})")
    tools = mounts.get(CONTAINER_TOOLS_DIR)
    if tools is not None and not _under(tools, files_root / "shared"):
        return (f"its container was made by another agent (its tools were mounted from "
                f"{tools}, not under {files_root})")
    for target, source in sorted(mounts.items()):
        if PurePosixPath(target).parent == PurePosixPath(FOLDERS_DIR) and (
                storage_root is None or not _under(source, storage_root.resolve())):
            return (f"its container was made by another platform (folder {target} was "
                    f"mounted from {source}, outside this node's storage root "
                    f"{storage_root or '(none)'})")
    return None


def _under(path: str, root: Path) -> bool:
    return Path(path).is_relative_to(root)
