"""Hard caps a session cannot undo (issue 16, finding 8): the cap shim keeps HAMi-core's and
MPS's variables at the node's values in real containers, whatever the session's user does to
its environment; MPS sessions keep their own IPC namespace and cannot write the pipe directory.

No GPU is needed: the variables are what HAMi-core and MPS read, and a stand-in library takes
libvgpu.so's place in the preload list."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from gpuslice.agent import capshim
from gpuslice.agent.runtime import DockerRuntime, apply_hami, apply_mps
from gpuslice.agent.runtime.spec import ContainerSpec, SessionSpec, SpecOptions
from gpuslice.agent.runtime.spec import build_container_spec as build
from gpuslice.common.resources import GiB
from tests.agent.factories import gpu_slice

COMPILER = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(COMPILER is None, reason="needs a C compiler (Debian gcc)")
LIMIT = "CUDA_DEVICE_MEMORY_LIMIT_0"
READ_BACK = f"""
import ctypes, os
os.environ["{LIMIT}"] = "999999m"          # the user tries, inside the process
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
print(libc.getenv(b"{LIMIT}").decode())   # what a CUDA library asking for it gets
"""


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return capshim.build(tmp_path_factory.mktemp("capshim"))


def test_the_shim_is_built_once(shim: Path) -> None:
    assert shim.is_file()
    assert capshim.build(shim.parent) == shim  # keyed by the source: not compiled again


def _session(runtime: DockerRuntime, base_image: str) -> ContainerSpec:
    half = gpu_slice("GPU-mock-0", 0, 500, 4 * GiB, 54, capacity=1000)
    session = SessionSpec(session_id=f"cap{uuid.uuid4().hex[:10]}", owner="alice",
                          image=base_image, type="interactive", cpu=250, mem=128 * 1024**2,
                          slices=(half,))
    return build(session, SpecOptions(node_name=runtime.node_name, accelerator="mock"))


@pytest.mark.docker
async def test_hami_caps_survive_the_sessions_user(
    runtime: DockerRuntime, base_image: str, shim: Path, tmp_path: Path
) -> None:
    stand_in = tmp_path / "libvgpu.so"  # takes HAMi-core's place in the preload list
    (tmp_path / "stand_in.c").write_text("int gpuslice_stand_in;\n")
    subprocess.run([str(COMPILER), "-shared", "-fPIC", "-o", str(stand_in),
                    str(tmp_path / "stand_in.c")], check=True)
    spec = apply_hami(_session(runtime, base_image), library=stand_in,
                      cache_root=tmp_path / "vgpu", shim=shim)
    await runtime.ensure_running(spec)
    sid = spec.session_id

    async def run(*argv: str) -> str:
        done = await runtime.exec(sid, list(argv))
        assert done.exit_code == 0, done.stderr
        return done.stdout.strip()

    assert await run("sh", "-c", f"echo ${LIMIT}") == "4096m"
    assert await run("env", "-u", LIMIT, "sh", "-c", f"echo ${LIMIT}") == "4096m"
    assert await run("env", f"{LIMIT}=999999m", "sh", "-c", f"echo ${LIMIT}") == "4096m"
    assert await run("python3", "-c", READ_BACK) == "4096m"
    assert await run("sh", "-c", "echo ${CUDA_DEVICE_SM_LIMIT}") == "50"
    tamper = await runtime.exec(sid, ["sh", "-c", "echo > /etc/ld.so.preload"])
    assert tamper.exit_code != 0  # root-owned and read-only


@pytest.mark.docker
async def test_mps_sessions_share_no_ipc_namespace_and_cannot_write_the_pipes(
    runtime: DockerRuntime, base_image: str, shim: Path, tmp_path: Path
) -> None:
    pipes, shm = tmp_path / "mps-pipe", tmp_path / "mps-shm"
    pipes.mkdir()
    shm.mkdir()
    os.chmod(pipes, 0o777)  # even a world-writable pipe directory is read-only inside
    spec = apply_mps(_session(runtime, base_image), pipe_directory=pipes, shm_directory=shm,
                     shim=shim)
    await runtime.ensure_running(spec)
    sid = spec.session_id
    planted = await runtime.exec(sid, ["touch", f"{pipes}/control"])
    assert planted.exit_code != 0 and not (pipes / "control").exists()
    inside = await runtime.exec(sid, ["readlink", "/proc/self/ns/ipc"])
    assert inside.stdout.strip() != os.readlink("/proc/self/ns/ipc")  # not the host's
    limit = await runtime.exec(sid, ["env", "-u", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "sh",
                                     "-c", "echo $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"])
    assert limit.stdout.strip() == "50"
