"""systemd units for the manager and the agent: `gpuslice service install / uninstall`.

A unit runs `gpuslice manager serve` or `gpuslice agent serve` from this installation, restarts
it on failure, raises the open-file limit (one long-poll, stream or session socket each), reads
`/etc/gpuslice/<part>.env` (0600: the place for secrets such as the database password or the
join token) and starts after Docker (agent) or PostgreSQL (manager) when they run on this
machine. Logs go to the journal (`journalctl -u gpuslice-manager`), one line per event.

`render()` is pure; `install()` and `uninstall()` write files and call `systemctl` through the
``run`` they are given, so they are the same code with or without a running systemd.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Part = Literal["manager", "agent"]
UNIT_DIR = Path("/etc/systemd/system")
ENV_DIR = Path("/etc/gpuslice")
LIMIT_NOFILE = 65536
Run = Callable[[Sequence[str]], None]

_DESCRIPTION = {
    "manager": "gpuslice manager (API, scheduler)",
    "agent": "gpuslice node agent (runs sessions in Docker)",
}
_ENV_EXAMPLE = {
    "manager": "# GPUSLICE_DATABASE__URL=postgresql+asyncpg://gpuslice:PASSWORD@127.0.0.1/gpuslice\n"
               "# GPUSLICE_LOG__FORMAT=json\n",
    "agent": "# GPUSLICE_AGENT_MANAGER_URL=https://manager-1:8080,https://manager-2:8080\n"
             "# GPUSLICE_AGENT_JOIN_TOKEN=gsj_...   (first start only)\n"
             "# GPUSLICE_AGENT_LOG__FORMAT=json\n",
}


class ServiceError(Exception):
    """Something the admin can fix; the message says what."""


@dataclass(frozen=True)
class UnitSpec:
    part: Part
    executable: Path
    config: Path | None = None
    user: str = "root"
    serve_args: tuple[str, ...] = ()
    after: tuple[str, ...] = ()  # local services to start after (docker, postgresql)
    groups: tuple[str, ...] = ()
    env_dir: Path = ENV_DIR

    @property
    def name(self) -> str:
        return f"gpuslice-{self.part}.service"

    @property
    def env_file(self) -> Path:
        return self.env_dir / f"{self.part}.env"


def render(spec: UnitSpec) -> str:
    """The unit file's text."""
    command = [str(spec.executable), spec.part, "serve"]
    if spec.config is not None:
        command += ["--config", str(spec.config)]
    command += list(spec.serve_args)
    after = ["network-online.target", *spec.after]
    lines = [
        "# Written by `gpuslice service install`; `gpuslice service uninstall` removes it.",
        "[Unit]",
        f"Description={_DESCRIPTION[spec.part]}",
        f"After={' '.join(after)}",
        f"Wants={' '.join(after)}",
        "",
        "[Service]",
        "Type=simple",
        f"User={spec.user}",
        *([f"SupplementaryGroups={' '.join(spec.groups)}"] if spec.groups else []),
        f"EnvironmentFile=-{spec.env_file}",
        f"ExecStart={' '.join(_quote(arg) for arg in command)}",
        "Restart=on-failure",
        "RestartSec=5s",
        # SIGTERM: the manager drains its long-polls, the agent stops its loops; containers
        # are not children of the unit and keep running.
        "TimeoutStopSec=30s",
        f"LimitNOFILE={LIMIT_NOFILE}",
        "NoNewPrivileges=yes",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def spec_for(
    part: Part, *, config: Path | None, user: str | None, serve_args: Sequence[str],
    local_after: Sequence[str],
) -> UnitSpec:
    """A unit for ``part`` of this installation, checked: the user exists, the file too."""
    name = user or pwd.getpwuid(os.getuid()).pw_name
    try:
        pwd.getpwnam(name)
    except KeyError:
        raise ServiceError(f"--user: there is no user {name!r} on this machine (create it, "
                           f"e.g. `useradd --system {name}`)") from None
    groups: tuple[str, ...] = ()
    if part == "agent" and name != "root":
        if not _group_exists("docker"):
            raise ServiceError(f"--user {name}: the agent needs the Docker socket; there is no "
                               "docker group here: run it as root")
        groups = ("docker",)
    if config is not None:
        config = config.expanduser().resolve()
        if not config.is_file():
            raise ServiceError(f"--config: {config} does not exist")
    return UnitSpec(part, executable(), config, name, tuple(serve_args), tuple(local_after),
                    groups)


def install(spec: UnitSpec, run: Run, unit_dir: Path = UNIT_DIR) -> Path:
    """Write the unit and the environment file (kept if there), enable and start it."""
    unit = unit_dir / spec.name
    try:
        unit_dir.mkdir(parents=True, exist_ok=True)
        unit.write_text(render(spec))
        unit.chmod(0o644)
        _ensure_env_file(spec)
    except PermissionError as err:
        raise ServiceError(f"cannot write {err.filename}: run it as root (sudo)") from None
    run(["systemctl", "daemon-reload"])
    run(["systemctl", "enable", "--now", spec.name])
    return unit


def uninstall(part: Part, run: Run | None, unit_dir: Path = UNIT_DIR) -> Path | None:
    """Stop and disable the unit (with systemd), remove its file; the environment file stays."""
    name = f"gpuslice-{part}.service"
    unit = unit_dir / name
    if run is not None and unit.exists():
        run(["systemctl", "disable", "--now", name])
    try:
        unit.unlink()
    except FileNotFoundError:
        return None
    except PermissionError:
        raise ServiceError(f"cannot remove {unit}: run it as root (sudo)") from None
    if run is not None:
        run(["systemctl", "daemon-reload"])
    return unit


def systemd_running() -> bool:
    """Whether this machine was booted with systemd (as `sd_booted()` tells it)."""
    return Path("/run/systemd/system").is_dir()


def systemctl(argv: Sequence[str]) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        why = detail[-1] if detail else f"exit code {done.returncode}"
        raise ServiceError(f"`{' '.join(argv)}` failed: {why}")


def executable() -> Path:
    """The `gpuslice` command of this installation (its virtual environment's)."""
    beside = Path(sys.executable).with_name("gpuslice")
    if beside.is_file():
        return beside
    found = shutil.which("gpuslice")
    if found is None:
        raise ServiceError("cannot find the gpuslice command of this installation")
    return Path(found).resolve()


def _ensure_env_file(spec: UnitSpec) -> None:
    if spec.env_file.exists():
        return
    spec.env_file.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    fd = os.open(spec.env_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(f"# Environment of {spec.name} (GPUSLICE_* settings; mode 0600: secrets go "
                  f"here, not in the unit).\n{_ENV_EXAMPLE[spec.part]}")


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def _quote(arg: str) -> str:
    """One ExecStart argument in systemd's syntax (specifiers and variables escaped)."""
    arg = arg.replace("%", "%%").replace("$", "$$")
    if arg and not any(c in arg for c in ' \t"\'\\;'):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
