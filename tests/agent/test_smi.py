"""The session's ``nvidia-smi`` as scripts use it: the real tool, as a process, reading its
allocation file and asking the real in-session endpoint what the session uses; its output read
the way monitoring scripts read NVIDIA's (a CSV reader, ``-L`` split on its words), and by
real parsers of it: GPUtil (CSV) and xmltodict (``-q -x``), on the host and in a session."""

from __future__ import annotations

import asyncio
import csv
import importlib.util
import json
import math
import os
import re
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import xmltodict

from gpuslice.agent.endpoint import SessionEndpoint
from gpuslice.agent.runtime import DockerRuntime
from gpuslice.agent.runtime.spec import DeviceInfo, SessionSpec, SpecOptions, build_container_spec
from gpuslice.session_tools import TOOLS_DIR, is_program, tool_files
from tests.agent.factories import gpu_slice
from tests.agent.real_nvidia_smi import (
    QUERY_GPU_ALIASES,
    QUERY_GPU_FIELDS,
    QUERY_GPU_HEADER,
    XML_GPU_CHILDREN,
)
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
    return await run(env, sys.executable, str(TOOLS_DIR / "nvidia-smi"), *argv, timeout=timeout)


async def run(env: dict[str, str], *argv: str, timeout: float = 30) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *argv, env={**os.environ, **env, "PYTHONPATH": str(TOOLS_DIR)},
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


DEPRECATED = "[Requested functionality has been deprecated]"


async def test_every_field_nvidia_smi_lists_is_answered_under_its_header(
    session: dict[str, str],
) -> None:
    """A script may ask for any field NVIDIA's --help-query-gpu lists: each is answered, under
    the header the real tool prints (an alias under its field's own name), with the slice's
    figure, [N/A] where nothing measures it, or the deprecation current drivers print."""
    code, out, _ = await smi(session, f"--query-gpu={QUERY_GPU_FIELDS}", "--format=csv")
    assert code == 0, out
    header, row = out.splitlines()
    assert header == QUERY_GPU_HEADER
    values = dict(zip(QUERY_GPU_FIELDS.split(","), row.split(", "), strict=True))
    assert {k: values[k] for k in ("index", "count", "name", "uuid", "memory.total",
                                   "memory.used", "memory.free", "utilization.gpu")} == {
        "index": "0", "count": "1", "name": "Mock GPU", "uuid": "GPU-mock-3",
        "memory.total": "4096 MiB", "memory.used": "1536 MiB", "memory.free": "2560 MiB",
        "utilization.gpu": "80 %",
    }
    assert values["display_active"] == values["power.draw"] == "[N/A]"  # no unit on [N/A]
    assert values["display_mode"] == values["clocks.applications.graphics"] == DEPRECATED
    headers = dict(zip(QUERY_GPU_FIELDS.split(","), QUERY_GPU_HEADER.split(", "), strict=True))
    code, out, _ = await smi(session, "--query-gpu=" + ",".join(QUERY_GPU_ALIASES),
                             "--format=csv,noheader")
    assert code == 0, out
    code, out, _ = await smi(session, "--query-gpu=" + ",".join(QUERY_GPU_ALIASES),
                             "--format=csv")
    assert out.splitlines()[0] == ", ".join(headers[f] for f in QUERY_GPU_ALIASES.values())
    code, listed, _ = await smi(session, "--help-query-gpu")
    assert code == 0 and set(re.findall(r'"([^"]+)"', listed.split("\n", 1)[1])) == {
        *headers, *QUERY_GPU_ALIASES}


async def test_format_options_behave_as_nvidia_smis(session: dict[str, str]) -> None:
    """csv: header and values with units; noheader: values only; nounits: neither carries a
    unit; [N/A] and nvidia-smi's other bracketed words never carry one."""
    fields = "--query-gpu=memory.used,power.draw,clocks.gr,display_mode"
    expected = {
        "csv": ["memory.used [MiB], power.draw [W], clocks.current.graphics [MHz], display_mode",
                f"1536 MiB, [N/A], [N/A], {DEPRECATED}"],
        "csv,nounits": ["memory.used, power.draw, clocks.current.graphics, display_mode",
                        f"1536, [N/A], [N/A], {DEPRECATED}"],
        "csv,noheader": [f"1536 MiB, [N/A], [N/A], {DEPRECATED}"],
        "csv,noheader,nounits": [f"1536, [N/A], [N/A], {DEPRECATED}"],
    }
    for format_, lines in expected.items():
        code, out, _ = await smi(session, fields, f"--format={format_}")
        assert (code, out.splitlines()) == (0, lines), format_
    code, out, _ = await smi(session, "--query-compute-apps=pid,name,used_gpu_memory",
                             "--format=csv")
    assert (code, out.splitlines()) == (0, ["pid, process_name, used_gpu_memory [MiB]",
                                            "7, python3, 1536 MiB"])


GPUTIL = """
import json, GPUtil
gpus = [vars(g) for g in GPUtil.getGPUs()]
print(json.dumps({"gpus": gpus, "free": GPUtil.getAvailable(maxLoad=0.9, maxMemory=0.5)}))
"""


def install_tools(directory: Path) -> Path:
    """The tools as the agent installs them in a mock node's sessions (programs 0755)."""
    directory.mkdir()
    for name, content in tool_files(simulated_gpu=True).items():
        (directory / name).write_bytes(content)
        (directory / name).chmod(0o755 if is_program(name) else 0o644)
    return directory


async def test_gputil_reads_the_slice(session: dict[str, str], tmp_path: Path) -> None:
    """GPUtil, as a user runs it in a session (issue 41: its fixed query was refused over
    display_active and getGPUs() raised ValueError): every GPU of the slice, with its
    figures, and getAvailable() picks it."""
    tools = install_tools(tmp_path / "bin")
    path = {"PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    code, out, err = await run({**session, **path}, sys.executable, "-c", GPUTIL)
    assert code == 0, err
    answer = json.loads(out)
    [gpu] = answer["gpus"]
    assert math.isnan(gpu.pop("temperature"))  # not measured: GPUtil's own "unknown"
    assert gpu == {
        "id": 0, "uuid": "GPU-mock-3", "load": 0.8, "memoryUtil": 0.375,
        "memoryTotal": 4096.0, "memoryUsed": 1536.0, "memoryFree": 2560.0,
        "driver": "[N/A]", "name": "Mock GPU", "serial": "[N/A]",
        "display_mode": DEPRECATED, "display_active": "[N/A]",
    }
    assert answer["free"] == [0]


def read_xml(text: str) -> dict[str, Any]:
    """``-q -x`` read as XML consumers do (a list even for one GPU or one process)."""
    parsed: dict[str, Any] = xmltodict.parse(text, force_list=("gpu", "process_info"))
    return parsed["nvidia_smi_log"]


async def test_q_x_is_nvidia_smis_xml_report(session: dict[str, str]) -> None:
    code, out, _ = await smi(session, "-q", "-x")
    assert code == 0, out
    assert out.startswith('<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM ')
    log = read_xml(out)
    assert (log["attached_gpus"], log["driver_version"]) == ("1", "N/A")
    [gpu] = log["gpu"]
    assert (gpu["product_name"], gpu["uuid"], gpu["compute_mode"]) == (
        "Mock GPU", "GPU-mock-3", "Default")
    assert gpu["fb_memory_usage"] == {"total": "4096 MiB", "reserved": "0 MiB",
                                      "used": "1536 MiB", "free": "2560 MiB"}
    assert gpu["utilization"]["gpu_util"] == "80 %"
    assert gpu["temperature"]["gpu_temp"] == gpu["pci"]["pci_bus_id"] == "N/A"
    [process] = gpu["processes"]["process_info"]
    assert (process["pid"], process["process_name"], process["used_memory"]) == (
        "7", "python3", "1536 MiB")
    children = [name for name in gpu if not name.startswith("@")]
    assert children == [name for name in XML_GPU_CHILDREN if name in children]  # its order
    assert set(children) <= set(XML_GPU_CHILDREN)  # and only the real one's elements
    code, out, _ = await smi(session, "-q", "-x", "-i", "GPU-mock-3,0")
    assert code == 0 and len(read_xml(out)["gpu"]) == 1


@pytest.mark.docker
async def test_gputil_and_q_x_in_a_session(runtime: DockerRuntime, base_image: str) -> None:
    """In a real session container on a mock node: GPUtil's own code and ``-q -x`` read the
    slice through the installed nvidia-smi."""
    served = SessionEndpoint(runtime.files_root, Data(), Link(), user="1000:1000")  # type: ignore[arg-type]
    session = SessionSpec(
        session_id="smi-test-1", owner="alice", image=base_image, type="interactive",
        cpu=500, mem=256 * 1024**2, device_capacity=2000,
        slices=(gpu_slice("GPU-mock-3", 0, 1000, 4 * GiB, 54, capacity=2000),),
    )
    options = SpecOptions(node_name=runtime.node_name, accelerator="mock",
                          devices={"GPU-mock-3": DeviceInfo("Mock GPU", 8 * GiB)})
    spec = build_container_spec(session, options)
    found = importlib.util.find_spec("GPUtil")  # its code, run in the session as it is
    assert found is not None and found.origin is not None
    gputil = (Path(found.origin).parent / "GPUtil.py").read_text() + (
        "\nimport json\nprint(json.dumps([vars(g) for g in getGPUs()]))")
    try:
        await served.open(spec.session_id)
        await runtime.ensure_running(spec)
        result = await runtime.exec(spec.session_id, ["python3", "-c", gputil])
        assert result.exit_code == 0, result.stderr
        [gpu] = json.loads(result.stdout)
        assert (gpu["id"], gpu["uuid"], gpu["memoryTotal"], gpu["memoryUsed"]) == (
            0, "GPU-mock-3", 4096.0, 1536.0)
        report = await runtime.exec(spec.session_id, ["nvidia-smi", "-q", "-x"])
        assert report.exit_code == 0, report.stdout + report.stderr
        [xml_gpu] = read_xml(report.stdout)["gpu"]
        assert xml_gpu["fb_memory_usage"]["total"] == "4096 MiB"
    finally:
        await served.stop()
