"""The cap shim: hard-cap variables a session's user cannot unset or raise (``capshim.c``).

HAMi-core and NVIDIA MPS take a session's limits from environment variables, and the session's
user owns its environment. The shim, preloaded into every process of the session by the
read-only ``/etc/ld.so.preload``, re-imposes the node's values from the read-only
``/etc/gpuslice/hardcaps.env`` at each process start and answers ``getenv`` for those names
with them. The agent compiles it once per node (``build``: a C compiler, Debian ``gcc``), keyed
by the source's hash, and mounts the library read-only into capped sessions. What it cannot
stop (a static binary, native code reading ``environ`` itself) the GPU memory watchdog still
catches.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path

SOURCE = "capshim.c"
CONTAINER_PATH = "/usr/local/lib/gpuslice/capshim.so"
CAPS_PATH = "/etc/gpuslice/hardcaps.env"


class ShimError(RuntimeError):
    """The shim could not be built; the message says how to fix it."""


def source() -> bytes:
    return resources.files(__package__).joinpath(SOURCE).read_bytes()


def build(directory: Path, compiler: str | None = None) -> Path:
    """The shim library under ``directory``, compiled when missing (idempotent)."""
    code = source()
    target = directory / f"capshim-{hashlib.sha256(code).hexdigest()[:12]}.so"
    if target.is_file():
        return target
    cc = compiler or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise ShimError("hard caps need the cap shim, built with a C compiler: install one "
                        "(apt-get install gcc) or set hard_caps.mode = \"none\"")
    directory.mkdir(parents=True, exist_ok=True)
    src = directory / SOURCE
    src.write_bytes(code)
    partial = target.with_suffix(".partial")
    done = subprocess.run(
        [cc, "-shared", "-fPIC", "-O2", "-fno-stack-protector", "-o", str(partial), str(src)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise ShimError(f"compiling the cap shim failed: {done.stderr.strip()[-500:]}")
    partial.chmod(0o755)
    os.replace(partial, target)
    return target


def caps_file(env: dict[str, str], names: list[str]) -> bytes:
    """``/etc/gpuslice/hardcaps.env``: the capped variables of ``env``, a line each."""
    return "".join(f"{name}={env[name]}\n" for name in names if name in env).encode()
