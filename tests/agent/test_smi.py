"""The session's ``nvidia-smi`` as scripts use it: the real tool, as a process, reading its
allocation file and asking the real in-session endpoint what the session uses; its output read
the way monitoring scripts read NVIDIA's (a CSV reader, ``-L`` split on its words)."""

from __future__ import annotations

import asyncio
import csv
import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gpuslice.agent.endpoint import SessionEndpoint
from gpuslice.session_tools import TOOLS_DIR
from tests.waits import scaled

GiB, MiB = 1024**3, 1024**2
SLICE = {
    "accelerator": "mock", "session_id": "s1", "node": "node-t",
    "devices": [{"index": 3, "uuid": "GPU-mock-3", "model": "Mock GPU", "fgpu": "1.0",
                 "fraction": "0.5", "memory_bytes": 4 * GiB, "device_memory_bytes": 8 * GiB,
                 "sm_percent": 54}],
}


class Data:
    """What the agent measured for session s1: 1.5 GiB held by its pid 7, 80 % busy."""

    async def session_info(self, session_id: str) -> dict[str, Any] | None:
        return {"session_id": session_id}

    def usage(self, session_id: str) -> dict[str, Any] | None:
        return {"session_id": session_id, "cpu": 100, "mem": GiB,
                "gpus": [{"uuid": "GPU-mock-3", "mem_used": 1536 * MiB, "utilization": 80}],
                "processes": [{"pid": 7, "name": "python3", "uuid": "GPU-mock-3",
                               "used": 1536 * MiB}]}


class Link:
    async def session_call(self, session_id: str, method: str, path: str, body: Any) -> Any:
        raise AssertionError("nvidia-smi relays nothing")


@pytest.fixture
async def session() -> AsyncIterator[dict[str, str]]:
    """The environment a session's processes have: its allocation file and endpoint."""
    work = Path(tempfile.mkdtemp(prefix="gs", dir="/tmp"))  # socket paths are short
    endpoint = SessionEndpoint(work / "files", Data(), Link(),  # type: ignore[arg-type]
                               user=f"{os.getuid()}:{os.getgid()}")
    await endpoint.open("s1")
    (work / "allocation.json").write_text(json.dumps(SLICE))
    try:
        yield {"GPUSLICE_ENDPOINT": str(endpoint.socket_path("s1")),
               "GPUSLICE_ALLOCATION_FILE": str(work / "allocation.json")}
    finally:
        await endpoint.stop()
        shutil.rmtree(work, ignore_errors=True)


async def smi(env: dict[str, str], *argv: str, timeout: float = 30) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(TOOLS_DIR / "nvidia-smi"), *argv,
        env={**os.environ, **env, "PYTHONPATH": str(TOOLS_DIR)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), scaled(timeout))
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_query_gpu_csv_reads_the_slices_figures(session: dict[str, str]) -> None:
    fields = ("index,name,uuid,memory.total,memory.used,memory.free,utilization.gpu,"
              "temperature.gpu,driver_version")
    code, out, err = await smi(session, f"--query-gpu={fields}", "--format=csv")
    assert (code, err) == (0, "")
    [row] = list(csv.DictReader(out.splitlines(), skipinitialspace=True))
    assert row == {
        "index": "0", "name": "Mock GPU", "uuid": "GPU-mock-3",
        "memory.total [MiB]": "4096 MiB",  # the slice's, not the 8 GiB device's
        "memory.used [MiB]": "1536 MiB", "memory.free [MiB]": "2560 MiB",
        "utilization.gpu [%]": "80 %",
        "temperature.gpu": "[N/A]", "driver_version": "[N/A]",  # a simulated GPU has neither
    }
    code, out, _ = await smi(session, "--query-gpu=memory.used,memory.total",
                             "--format=csv,noheader,nounits")
    assert (code, out) == (0, "1536, 4096\n")


async def test_a_gpustat_style_parser_gets_the_slice(session: dict[str, str]) -> None:
    """What gpustat-like scripts do without pynvml: -L for the GPUs, then one query."""
    code, listed, _ = await smi(session, "-L")
    assert (code, listed) == (0, "GPU 0: Mock GPU (UUID: GPU-mock-3)\n")
    code, out, _ = await smi(session, "--query-gpu=index,uuid,utilization.gpu,memory.used,"
                             "memory.total", "--format=csv,noheader,nounits")
    index, uuid, util, used, total = (v.strip() for v in out.strip().split(","))
    assert (int(index), uuid, int(util), int(used), int(total)) == (0, "GPU-mock-3", 80, 1536,
                                                                    4096)
    code, apps, _ = await smi(session, "--query-compute-apps=pid,process_name,used_memory",
                              "--format=csv")
    assert list(csv.reader(apps.splitlines(), skipinitialspace=True)) == [
        ["pid", "process_name", "used_gpu_memory [MiB]"], ["7", "python3", "1536 MiB"],
    ]


async def test_unknown_fields_and_formats_are_refused_as_nvidia_smi_words_them(
    session: dict[str, str],
) -> None:
    code, out, _ = await smi(session, "--query-gpu=memory.used,memory.bogus", "--format=csv")
    assert (code, out) == (2, 'Field "memory.bogus" is not a valid field to query.\n\n')
    code, out, _ = await smi(session, "--query-gpu=memory.used", "--format=xml")
    assert code == 2 and "--format=csv[,noheader][,nounits]" in out
    code, out, _ = await smi(session, "--query-gpu=memory.used")
    assert code == 2 and '"--format" is required' in out
    code, out, _ = await smi(session, "-i", "5", "-L")
    assert code == 2 and 'No GPU "5"' in out


async def test_q_reports_the_slice_and_l_repeats(session: dict[str, str]) -> None:
    code, out, _ = await smi(session, "-q")
    assert code == 0 and "==============NVSMI LOG==============" in out
    assert f"{'        Total':<42}: 4096 MiB" in out and f"{'        Used':<42}: 1536 MiB" in out
    assert f"{'        Gpu':<42}: 80 %" in out
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(TOOLS_DIR / "nvidia-smi"), "--query-gpu=memory.used",
        "--format=csv", "-l", "1", env={**os.environ, **session, "PYTHONPATH": str(TOOLS_DIR)},
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    try:
        lines = [await asyncio.wait_for(process.stdout.readline(), scaled(20))
                 for _ in range(3)]
    finally:
        process.kill()
        await process.wait()
    assert lines == [b"memory.used [MiB]\n", b"1536 MiB\n", b"1536 MiB\n"]  # header once
