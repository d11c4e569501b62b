"""systemd units: `gpuslice service install / uninstall manager|agent|up`.

A unit runs `gpuslice manager serve`, `gpuslice agent serve` or `gpuslice up` from this
installation as ``Type=notify`` (started once it says READY=1: see `notify.py`), restarts it on
failure, raises the open-file limit (one long-poll, stream or session socket each), reads
`/etc/gpuslice/<part>.env` (0600: the place for secrets such as the database password or the
join token) and starts after Docker (agent, up) or PostgreSQL (manager) when they run on this
machine. Logs go to the journal (`journalctl -u gpuslice-manager`), one line per event.

Who runs it: the manager as the system user `gpuslice` (made by the install) with its data in
`/var/lib/gpuslice` (made for it, mode 0750) and three file capabilities for storage folders;
the agent and `up` as root, since they drive Docker and fence the session network (iptables).
`--user` chooses another; an agent or `up` of another user gets the docker group.

`render()` is pure; `install()` and `uninstall()` write files and call `systemctl` (and
`useradd`) through the ``run`` they are given, so they are the same code with or without a
running systemd.
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

Part = Literal["manager", "agent", "up"]
PARTS: tuple[Part, ...] = ("manager", "agent", "up")
UNIT_DIR = Path("/etc/systemd/system")
ENV_DIR = Path("/etc/gpuslice")
DATA_DIR = Path("/var/lib/gpuslice")  # the manager's and `up`'s, unless their settings say
SERVICE_USER = "gpuslice"  # the manager's own system user, made by the install
LIMIT_NOFILE = 65536
Run = Callable[[Sequence[str]], None]

# The manager needs no root, but storage folders belong to the session user (uid 1000 by
# default): to make them, give them away and manage what sessions write in them it keeps
# these three, and nothing else (no network, no Docker, no ptrace).
MANAGER_CAPABILITIES = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER")
_DEFAULT_USER: dict[Part, str] = {"manager": SERVICE_USER, "agent": "root", "up": "root"}
# How long `systemctl start` waits for READY=1: a first `up` builds the session image.
_START_TIMEOUT: dict[Part, str] = {"manager": "5min", "agent": "5min", "up": "30min"}
_DESCRIPTION = {
    "manager": "gpuslice manager (API, scheduler)",
    "agent": "gpuslice node agent (runs sessions in Docker)",
    "up": "gpuslice on one machine (manager and agent, `gpuslice up`)",
}
_READY = {
    "manager": "serves (its port answers)",
    "agent": "has joined its manager",
    "up": "answers and its agent has joined",
}
_ENV_EXAMPLE = {
    "manager": "# GPUSLICE_DATABASE__URL=postgresql+asyncpg://gpuslice:PASSWORD@127.0.0.1/gpuslice\n"
               "# GPUSLICE_LOG__FORMAT=json\n",
    "agent": "# GPUSLICE_AGENT_MANAGER_URL=https://manager-1:8080,https://manager-2:8080\n"
             "# GPUSLICE_AGENT_JOIN_TOKEN=gsj_...   (first start only)\n"
             "# GPUSLICE_AGENT_LOG__FORMAT=json\n",
    "up": "# GPUSLICE_MONITORING__SCRAPE_TOKEN=...   (the manager's GPUSLICE_* settings)\n"
          "# GPUSLICE_LOG__FORMAT=json\n",
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
    data_dir: Path | None = None  # made and given to ``user`` by the install
    names_data_dir: bool = False  # the unit sets it (else the settings or serve_args do)
    create_user: bool = False  # the install makes ``user`` a system user first

    @property
    def name(self) -> str:
        return f"gpuslice-{self.part}.service"

    @property
    def env_file(self) -> Path:
        return self.env_dir / f"{self.part}.env"


def render(spec: UnitSpec) -> str:
    """The unit file's text."""
    after = ["network-online.target", *spec.after]
    lines = [
        "# Written by `gpuslice service install`; `gpuslice service uninstall` removes it.",
        "[Unit]",
        f"Description={_DESCRIPTION[spec.part]}",
        f"After={' '.join(after)}",
        f"Wants={' '.join(after)}",
        "",
        "[Service]",
        f"# Started when it tells systemd READY=1: once it {_READY[spec.part]}.",
        "Type=notify",
        "NotifyAccess=main",
        f"TimeoutStartSec={_START_TIMEOUT[spec.part]}",
        *_identity(spec),
        *([f"Environment=GPUSLICE_DATA_DIR={spec.data_dir}"]
          if spec.part == "manager" and spec.names_data_dir and spec.data_dir else []),
        f"EnvironmentFile=-{spec.env_file}",
        f"ExecStart={' '.join(_quote(arg) for arg in _command(spec))}",
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
    local_after: Sequence[str], data_dir: Path | None = None, names_data_dir: bool = False,
) -> UnitSpec:
    """A unit for ``part`` of this installation, checked: the user exists (or is ours to
    make), the file too."""
    name = user or _DEFAULT_USER[part]
    create = user is None and name == SERVICE_USER and not _user_exists(name)
    if not create and not _user_exists(name):
        raise ServiceError(f"--user: there is no user {name!r} on this machine (create it, "
                           f"e.g. `useradd --system {name}`)")
    groups: tuple[str, ...] = ()
    if part != "manager" and name != "root":
        if not _group_exists("docker"):
            raise ServiceError(f"--user {name}: the agent needs the Docker socket; there is no "
                               "docker group here: run it as root")
        groups = ("docker",)
    if config is not None:
        if part == "up":
            raise ServiceError("--config: `up` reads no settings file: give its options after "
                               "-- (e.g. -- --port 8080) and GPUSLICE_* settings in "
                               f"{ENV_DIR / 'up.env'}")
        config = config.expanduser().resolve()
        if not config.is_file():
            raise ServiceError(f"--config: {config} does not exist")
    return UnitSpec(part, executable(), config, name, tuple(serve_args), tuple(local_after),
                    groups, data_dir=data_dir, names_data_dir=names_data_dir,
                    create_user=create)


def install(spec: UnitSpec, run: Run, unit_dir: Path = UNIT_DIR) -> Path:
    """Write the unit and the environment file (kept if there), enable and start it."""
    unit = unit_dir / spec.name
    if spec.create_user:
        _create_system_user(spec.user, run)
    try:
        unit_dir.mkdir(parents=True, exist_ok=True)
        unit.write_text(render(spec))
        unit.chmod(0o644)
        _ensure_env_file(spec)
        if spec.data_dir is not None:
            _ensure_data_dir(spec.data_dir, spec.user)
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


def _command(spec: UnitSpec) -> list[str]:
    if spec.part == "up":
        command = [str(spec.executable), "up"]
        if spec.names_data_dir and spec.data_dir is not None:
            command += ["--data-dir", str(spec.data_dir)]
    else:
        command = [str(spec.executable), spec.part, "serve"]
        if spec.config is not None:
            command += ["--config", str(spec.config)]
    return command + list(spec.serve_args)


def _identity(spec: UnitSpec) -> list[str]:
    """User=, with why: the manager as its own unprivileged user; the agent (and `up`, which
    runs one) as root by default, since it drives Docker and fences the session network."""
    lines = [f"User={spec.user}"]
    if spec.part == "manager":
        if spec.user != "root":
            caps = " ".join(MANAGER_CAPABILITIES)
            lines = [
                "# Not root. It keeps three capabilities to give storage folders to the session",
                "# user and to manage the files sessions write there; nothing else.",
                *lines, f"AmbientCapabilities={caps}", f"CapabilityBoundingSet={caps}",
            ]
        return lines
    if spec.groups:
        lines.append(f"SupplementaryGroups={' '.join(spec.groups)}")
    if spec.user == "root":
        return ["# root: it drives Docker (whose socket is root's power anyway) and fences the",
                "# session network with iptables, which needs root.", *lines]
    return ["# The docker group opens the Docker socket (as good as root). The session",
            "# network's fence needs root: without it, set GPUSLICE_AGENT_NETWORK__ISOLATION=off.",
            *lines]


def _create_system_user(name: str, run: Run) -> None:
    """The manager's own user: a system account, no login, no home of its own."""
    run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
         str(DATA_DIR), "--shell", "/usr/sbin/nologin", "--comment", "gpuslice manager", name])


def _ensure_data_dir(path: Path, user: str) -> None:
    """The data directory, made for ``user`` (mode 0750), or checked to be theirs already. An
    existing one is never given away: storage folders inside belong to the session user."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise ServiceError(f"there is no user {user!r} to own {path}") from None
    if not path.exists():
        path.mkdir(mode=0o750, parents=True)
        os.chown(path, entry.pw_uid, entry.pw_gid)
        return
    owner = path.stat().st_uid
    if user != "root" and owner != entry.pw_uid:
        holder = _user_name(owner)
        raise ServiceError(f"{path} belongs to {holder}, not {user}: give it to {user} "
                           f"(`chown {user}: {path} {path}/gpuslice.db*`), or install with "
                           f"--user {holder}")


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


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
