"""From a session the node must run to the container that runs it (pure: no Docker calls).

:func:`build_container_spec` is the only place that decides what a session container looks
like: limits, labels, the unprivileged user, dropped capabilities, the ``GPUSLICE_*`` and
pinned ``CUDA_VISIBLE_DEVICES`` / ``NVIDIA_VISIBLE_DEVICES`` environment, the allocation file
and the framework hook. :mod:`gpuslice.agent.runtime.hardcaps` adds the optional driver caps;
:mod:`gpuslice.agent.runtime.adapter` makes a :class:`SessionSpec` from the manager's assignment.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import PurePosixPath
from typing import Any, Literal

from gpuslice.common.resources import MiB, format_cpu, format_fgpu
from gpuslice.hook import CONTAINER_HOOK_DIR, hook_files
from gpuslice.session_tools import (
    CONTAINER_ENDPOINT,
    CONTAINER_ENDPOINT_DIR,
    CONTAINER_TOOLS_DIR,
    tool_files,
)

LABEL_SESSION = "gpuslice.session-id"
LABEL_OWNER = "gpuslice.owner"
LABEL_ALLOCATION = "gpuslice.allocation"
LABEL_TYPE = "gpuslice.session-type"
LABEL_NODE = "gpuslice.node"
# The agent's own id (agent/identity.py): an agent removes no container of another id.
LABEL_AGENT_ID = "gpuslice.agent-id"

ALLOCATION_PATH = "/etc/gpuslice/allocation.json"
# SSH's state in the session (agent/streams/ssh.py: host key, authorized keys, a configuration
# holding the session's env): a tmpfs of the session's user, so it is never in the container's
# writable layer, hence never in an image a commit of the session makes (review F9).
CONTAINER_SSH_DIR = "/tmp/.gpuslice-sshd"
CONTAINER_PREFIX = "gpuslice-"
INTERACTIVE_CMD = ("sleep", "infinity")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # Docker's
SessionType = Literal["interactive", "batch"]

_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# Sessions have no IPv6: the fence (agent/isolation) is written for IPv4.
NO_IPV6 = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}
_DOCKER_SOCKETS = ("docker.sock", "containerd.sock", "podman.sock")
# With the node's allow_sudo: what sudo (setuid, audit), apt and dpkg (owners, modes, dropping
# to _apt) need as root in the container, and no more (Docker's default set less network,
# device and capability-changing ones).
SUDO_CAPABILITIES = ("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL",
                     "SETGID", "SETUID")


class SpecError(ValueError):
    """A session cannot be turned into a container as given; the message says why."""


@dataclass(frozen=True, slots=True)
class GpuSlice:
    """The part of one device a session holds: ``gpu`` in milli-fGPU, ``mem`` in bytes.

    ``fraction`` (share of the device) and ``sm_percent`` are the manager's, computed once with
    ``common.resources.slice_fraction`` / ``sm_percent``: shown as given, never recomputed, so
    a container states the very share the API shows (``0.3333`` for 1 fGPU of 3).
    """

    device_uuid: str
    device_index: int
    gpu: int
    mem: int
    sms: int
    fraction: Decimal
    sm_percent: int


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """What the manager assigns to this node for one session (agent-side, exact integers)."""

    session_id: str
    owner: str
    image: str
    type: SessionType
    cpu: int  # milli-cores
    mem: int  # bytes
    command: tuple[str, ...] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    slices: tuple[GpuSlice, ...] = ()
    device_capacity: int = 1000  # one whole device in milli-fGPU (fgpu_per_gpu × 1000)
    folders: tuple[Mount, ...] = ()  # storage folders, checked (``runtime/folders.py``)


@dataclass(frozen=True, slots=True)
class Mount:
    source: str  # a path on the node
    target: str  # the path in the container
    read_only: bool = True


@dataclass(frozen=True, slots=True)
class HostDir:
    """A directory the runtime creates on the node before the container (e.g. a cache)."""

    path: str
    uid: int
    gid: int
    mode: int = 0o700


@dataclass(frozen=True, slots=True)
class SpecOptions:
    """Node-wide choices (from the agent settings) that shape every session container."""

    node_name: str
    accelerator: str = "mock"  # the plugin's name: nvidia | mock
    device_requests: bool = False  # Docker GPU device requests (real GPUs only)
    user: str = "1000:1000"
    pids_limit: int = 4096
    log_max_size: str = "50m"
    allow_sudo: bool = False  # the node admin's choice: sessions may become root (sudo)
    # The node's devices by UUID: model and total memory, stated in allocation.json.
    devices: Mapping[str, DeviceInfo] = field(default_factory=dict)
    # The node's session network (agent/isolation), and whether to switch IPv6 off in it.
    network: str | None = None
    ipv6_off: bool = False


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """What the node knows of one of its GPUs (the accelerator plugin's report)."""

    model: str
    memory: int  # bytes


@dataclass(frozen=True, slots=True)
class ContainerSpec:
    """A session's container, complete. Render it with :meth:`create_config` and :meth:`files`."""

    session_id: str
    session_type: SessionType
    owner: str
    node_name: str
    image: str
    cmd: tuple[str, ...]
    env: Mapping[str, str]
    user: str
    nano_cpus: int
    memory: int
    pids_limit: int
    allocation: Mapping[str, Any]
    slices: tuple[GpuSlice, ...] = ()
    device_capacity: int = 1000  # one whole device in milli-fGPU
    device_uuids: tuple[str, ...] = ()  # for Docker device requests; empty on mock nodes
    mounts: tuple[Mount, ...] = ()
    host_dirs: tuple[HostDir, ...] = ()
    extra_files: Mapping[str, bytes] = field(default_factory=dict)
    ipc_mode: str | None = None
    log_max_size: str = "50m"
    network: str | None = None  # Docker's default bridge when None
    sysctls: Mapping[str, str] = field(default_factory=dict)
    # The agent's own id (agent/identity.py): the runtime sets it on every container it makes.
    agent_id: str = ""
    allow_sudo: bool = False  # SpecOptions.allow_sudo: setuid works, a few capabilities kept

    @property
    def name(self) -> str:
        """The container name: Docker itself refuses a second container for a session."""
        return container_name(self.session_id)

    @property
    def uid_gid(self) -> tuple[int, int]:
        uid, gid = self.user.split(":")
        return int(uid), int(gid)

    def labels(self) -> dict[str, str]:
        labels = {
            LABEL_SESSION: self.session_id,
            LABEL_OWNER: self.owner,
            LABEL_TYPE: self.session_type,
            LABEL_NODE: self.node_name,
            LABEL_ALLOCATION: allocation_json(self.allocation),
        }
        if self.agent_id:
            labels[LABEL_AGENT_ID] = self.agent_id
        return labels

    def create_config(
        self, image_env: Sequence[str] = (), files_dir: str | None = None,
        shared_dir: str | None = None,
    ) -> dict[str, Any]:
        """The Engine API body of ``POST /containers/create``.

        ``image_env`` is the image's own ``Env`` (``KEY=value``): its ``PYTHONPATH`` is kept
        behind the hook directory rather than replaced. ``files_dir`` and ``shared_dir`` are
        the node directories holding :meth:`session_files` and :meth:`shared_files` (see
        :meth:`file_mounts`).
        """
        file_mounts = self.file_mounts(files_dir, shared_dir) if files_dir else []
        mounts = [*self.mounts, *file_mounts]
        for mount in mounts:
            if PurePosixPath(mount.source).name in _DOCKER_SOCKETS:
                raise SpecError(f"refusing to mount a container engine socket ({mount.source})")
        env = dict(self.env)
        image_pythonpath = _env_value(image_env, "PYTHONPATH")
        # The hook first; the tools' modules (``import gpuslice_endpoint``) for user code too.
        env["PYTHONPATH"] = ":".join(
            p for p in (CONTAINER_HOOK_DIR, CONTAINER_TOOLS_DIR, image_pythonpath) if p
        )
        env["PATH"] = f"{CONTAINER_TOOLS_DIR}:{_env_value(image_env, 'PATH') or DEFAULT_PATH}"
        host_config: dict[str, Any] = {
            "NanoCpus": self.nano_cpus,
            "Memory": self.memory,
            "MemorySwap": self.memory,  # no swap beyond the memory limit
            "PidsLimit": self.pids_limit,
            "Privileged": False,
            "CapDrop": ["ALL"],
            **_privilege_options(self.allow_sudo),
            "Init": True,  # tini as PID 1: signals reach the session, zombies are reaped
            "RestartPolicy": {"Name": "no"},  # the agent alone (re)starts sessions
            "LogConfig": {
                "Type": "json-file",
                "Config": {"max-size": self.log_max_size, "max-file": "2"},
            },
            "Mounts": [
                {"Type": "bind", "Source": m.source, "Target": m.target, "ReadOnly": m.read_only}
                for m in mounts
            ],
        }
        if self.device_uuids:
            host_config["DeviceRequests"] = [
                {
                    "Driver": "nvidia",
                    "DeviceIDs": list(self.device_uuids),
                    "Capabilities": [["gpu"]],
                }
            ]
        if self.ipc_mode:
            host_config["IpcMode"] = self.ipc_mode
        if self.network:
            host_config["NetworkMode"] = self.network
        if self.sysctls:
            host_config["Sysctls"] = dict(self.sysctls)
        uid, gid = self.uid_gid
        host_config["Tmpfs"] = {
            CONTAINER_SSH_DIR: f"uid={uid},gid={gid},mode=0700,size=1m,noexec,nosuid,nodev"}
        return {
            "Image": self.image,
            "Cmd": list(self.cmd),
            "Env": [f"{k}={v}" for k, v in sorted(env.items())],
            "User": self.user,
            "Labels": self.labels(),
            "Tty": False,
            "OpenStdin": False,
            "AttachStdout": False,
            "AttachStderr": False,
            "HostConfig": host_config,
        }

    def file_mounts(self, files_dir: str, shared_dir: str | None = None) -> list[Mount]:
        """Read-only bind mounts that show :meth:`files`: the hook and the tools as one
        directory each from ``shared_dir`` (the node's one copy of :meth:`shared_files`; else
        ``files_dir``), the endpoint's directory and every other file on its own from
        ``files_dir`` (this session's :meth:`session_files`), all at their container paths."""
        shared = shared_dir or files_dir
        mounts = [
            Mount(source=f"{shared}{directory}", target=directory)
            for directory in (CONTAINER_HOOK_DIR, CONTAINER_TOOLS_DIR)
        ]
        mounts.append(
            Mount(source=f"{files_dir}{CONTAINER_ENDPOINT_DIR}", target=CONTAINER_ENDPOINT_DIR)
        )
        for path in sorted(self.session_files()):
            mounts.append(Mount(source=f"{files_dir}{path}", target=path))
        return mounts

    def files(self) -> dict[str, bytes]:
        """Files the session sees, read-only: absolute container path → content."""
        return {**self.shared_files(), **self.session_files()}

    def shared_files(self) -> dict[str, bytes]:
        """The hook and the in-session tools: the same for every session of a kind (real or
        simulated GPUs), so a node keeps one copy of them, not one per session."""
        files = {f"{CONTAINER_HOOK_DIR}/{name}": content for name, content in hook_files().items()}
        simulated = self.allocation.get("accelerator") == "mock"
        for name, content in tool_files(simulated_gpu=simulated).items():
            files[f"{CONTAINER_TOOLS_DIR}/{name}"] = content
        return files

    def session_files(self) -> dict[str, bytes]:
        """This session's own files: its allocation, and the hard caps' (``extra_files``)."""
        files = {ALLOCATION_PATH: (allocation_json(self.allocation, indent=2) + "\n").encode()}
        files.update(self.extra_files)
        return files


def container_name(session_id: str) -> str:
    return f"{CONTAINER_PREFIX}{session_id}"


def allocation_json(allocation: Mapping[str, Any], *, indent: int | None = None) -> str:
    separators = (",", ": ") if indent else (",", ":")
    return json.dumps(allocation, indent=indent, separators=separators, sort_keys=True)


def build_container_spec(session: SessionSpec, options: SpecOptions) -> ContainerSpec:
    """The container for ``session`` on this node (before optional hard caps)."""
    _validate(session)
    cmd = _command(session)
    slices = session.slices
    uuids = tuple(s.device_uuid for s in slices)
    allocation = _allocation(session, options)
    env = dict(session.env)
    env.update(_slice_env(session, options, allocation))
    return ContainerSpec(
        session_id=session.session_id,
        session_type=session.type,
        owner=session.owner,
        node_name=options.node_name,
        image=session.image,
        cmd=cmd,
        env=env,
        user=options.user,
        nano_cpus=session.cpu * 1_000_000,
        memory=session.mem,
        pids_limit=options.pids_limit,
        allocation=allocation,
        slices=slices,
        device_capacity=session.device_capacity,
        device_uuids=uuids if options.device_requests else (),
        mounts=session.folders,
        log_max_size=options.log_max_size,
        network=options.network,
        sysctls=NO_IPV6 if options.network and options.ipv6_off else {},
        allow_sudo=options.allow_sudo,
    )


def with_enforcement(spec: ContainerSpec, layer: str, **details: Any) -> ContainerSpec:
    """``spec`` with one more enforcement layer recorded in its allocation."""
    allocation = dict(spec.allocation)
    allocation["enforcement"] = [*allocation.get("enforcement", []), layer]
    if details:
        allocation[layer] = details
    return replace(spec, allocation=allocation)


def decimal_text(value: Decimal) -> str:
    """``Decimal("0.250")`` → ``"0.25"``; never exponent notation."""
    return format(value.normalize(), "f")


def _privilege_options(allow_sudo: bool) -> dict[str, Any]:
    """No way to gain privileges (the default); with ``allow_sudo``, setuid programs work and
    root in the container holds :data:`SUDO_CAPABILITIES` only (still not privileged, no
    devices, Docker's seccomp profile): root over the container's files, not over the host."""
    if allow_sudo:
        return {"CapAdd": list(SUDO_CAPABILITIES), "SecurityOpt": []}
    return {"SecurityOpt": ["no-new-privileges"]}


def _validate(session: SessionSpec) -> None:
    if not _SESSION_ID.match(session.session_id):
        raise SpecError(f"session id {session.session_id!r} is not usable in a container name")
    if session.cpu <= 0 or session.mem <= 0:
        raise SpecError("a session needs positive cpu and memory limits")
    if session.device_capacity <= 0:
        raise SpecError("device capacity must be positive")
    if len(session.slices) > 1 and any(s.gpu != session.device_capacity for s in session.slices):
        raise SpecError("a session on several devices must hold each device whole")
    for s in session.slices:
        if not 0 < s.gpu <= session.device_capacity:
            raise SpecError(f"slice on {s.device_uuid}: {s.gpu} milli-fGPU is out of range")
        if not 0 < s.fraction <= 1 or not 0 <= s.sm_percent <= 100:
            raise SpecError(f"slice on {s.device_uuid}: share {s.fraction} is out of range")


def _command(session: SessionSpec) -> tuple[str, ...]:
    if session.type == "batch":
        if not session.command:
            raise SpecError("a batch session needs a command")
        return tuple(session.command)
    # An interactive session stays up for terminals and apps, whatever its command does.
    return tuple(session.command) if session.command else INTERACTIVE_CMD


def _allocation(session: SessionSpec, options: SpecOptions) -> dict[str, Any]:
    devices = [
        {
            "uuid": s.device_uuid,
            "index": s.device_index,
            "fgpu": format_fgpu(s.gpu),
            "fraction": decimal_text(s.fraction),
            "memory_bytes": s.mem,
            "sms": s.sms,
            "sm_percent": s.sm_percent,
            **_device_info(options, s.device_uuid),
        }
        for s in session.slices
    ]
    enforcement = ["device-pinning", "framework-hook"] if devices else []
    return {
        "session_id": session.session_id,
        "owner": session.owner,
        "type": session.type,
        "node": options.node_name,
        "accelerator": options.accelerator,
        "cpu": format_cpu(session.cpu),
        "memory_bytes": session.mem,
        "fgpu": format_fgpu(sum(s.gpu for s in session.slices)),
        "fgpu_per_gpu": format_fgpu(session.device_capacity),
        "devices": devices,
        "enforcement": enforcement,
    }


def _device_info(options: SpecOptions, uuid: str) -> dict[str, Any]:
    info = options.devices.get(uuid)
    if info is None:
        return {}
    return {"model": info.model, "device_memory_bytes": info.memory}


def _slice_env(
    session: SessionSpec, options: SpecOptions, allocation: Mapping[str, Any]
) -> dict[str, str]:
    """The environment the platform sets; it wins over the session's own ``env``."""
    env = {
        "GPUSLICE_SESSION_ID": session.session_id,
        "GPUSLICE_OWNER": session.owner,
        "GPUSLICE_SESSION_TYPE": session.type,
        "GPUSLICE_NODE": options.node_name,
        "GPUSLICE_ACCELERATOR": options.accelerator,
        "GPUSLICE_CPU": str(allocation["cpu"]),
        "GPUSLICE_MEMORY_BYTES": str(session.mem),
        "GPUSLICE_FGPU": str(allocation["fgpu"]),
        "GPUSLICE_GPU_COUNT": str(len(session.slices)),
        "GPUSLICE_ALLOCATION_FILE": ALLOCATION_PATH,
        "GPUSLICE_ENDPOINT": CONTAINER_ENDPOINT,
    }
    if not session.slices:
        # No device: nothing visible, on any runtime (the nvidia runtime reads "void").
        env.update(CUDA_VISIBLE_DEVICES="", NVIDIA_VISIBLE_DEVICES="void")
        return env
    first = session.slices[0]  # every device of a session holds the same share
    uuids = ",".join(s.device_uuid for s in session.slices)
    env.update(
        GPUSLICE_GPU_UUIDS=uuids,
        GPUSLICE_GPU_FRACTION=decimal_text(first.fraction),
        GPUSLICE_GPU_MEMORY_BYTES=str(first.mem),
        GPUSLICE_GPU_MEMORY_MIB=str(first.mem // MiB),
        GPUSLICE_GPU_SMS=str(first.sms),
        GPUSLICE_GPU_SM_PERCENT=str(first.sm_percent),
        CUDA_VISIBLE_DEVICES=uuids,
        NVIDIA_VISIBLE_DEVICES=uuids,
        NVIDIA_DRIVER_CAPABILITIES="compute,utility",
        CUDA_DEVICE_ORDER="PCI_BUS_ID",
    )
    return env


def _env_value(env: Sequence[str], key: str) -> str:
    prefix = f"{key}="
    for item in env:
        if item.startswith(prefix):
            return item[len(prefix) :]
    return ""
