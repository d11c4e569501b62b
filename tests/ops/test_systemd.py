"""systemd units: what `gpuslice service install` writes, checked by `systemd-analyze verify`."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpuslice.ops import systemd
from tests.waits import scaled

GPUSLICE = str(Path(sys.executable).with_name("gpuslice"))
needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                   reason="systemd-analyze not installed (tools/host-setup.sh)")


def _verify(unit_text: str, tmp_path: Path, name: str) -> None:
    unit = tmp_path / name
    unit.write_text(unit_text)
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, timeout=scaled(60), check=False)
    # warnings (an unknown key or value) go to stderr with exit code 0: none allowed either
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


def _spec(part: systemd.Part, **values: object) -> systemd.UnitSpec:
    return systemd.UnitSpec(part, systemd.executable(), **values)  # type: ignore[arg-type]


@needs_analyze
def test_the_manager_unit_is_valid(tmp_path: Path) -> None:
    config = tmp_path / "manager 1.toml"
    config.write_text("")
    spec = _spec("manager", config=config, after=("postgresql.service",),
                 serve_args=("--host", "0.0.0.0", "--port", "8080"))
    text = systemd.render(spec)
    _verify(text, tmp_path, spec.name)
    assert "After=network-online.target postgresql.service" in text
    assert f'--config "{config}" --host 0.0.0.0 --port 8080' in text
    for line in ("Type=notify", "NotifyAccess=main", "Restart=on-failure",
                 f"LimitNOFILE={systemd.LIMIT_NOFILE}",
                 "EnvironmentFile=-/etc/gpuslice/manager.env", "WantedBy=multi-user.target"):
        assert line in text.splitlines()


@needs_analyze
def test_the_agent_unit_of_another_user_is_valid(tmp_path: Path) -> None:
    user = pwd.getpwuid(os.getuid()).pw_name
    spec = _spec("agent", user=user, groups=("docker",), after=("docker.service",),
                 serve_args=("--weird", "50%", "a$b"))
    text = systemd.render(spec)
    _verify(text, tmp_path, spec.name)
    assert "After=network-online.target docker.service" in text
    assert "SupplementaryGroups=docker" in text
    assert "--weird 50%% a$$b" in text  # systemd's specifier and variable escapes


def test_install_writes_the_unit_and_a_private_env_file_then_starts_it(tmp_path: Path) -> None:
    calls: list[Sequence[str]] = []
    spec = _spec("agent", env_dir=tmp_path / "etc")
    unit = systemd.install(spec, calls.append, unit_dir=tmp_path / "units")
    assert unit.read_text() == systemd.render(spec)
    assert oct(spec.env_file.stat().st_mode & 0o777) == "0o600"
    assert "GPUSLICE_AGENT_MANAGER_URL" in spec.env_file.read_text()
    assert calls == [["systemctl", "daemon-reload"],
                     ["systemctl", "enable", "--now", "gpuslice-agent.service"]]
    spec.env_file.write_text("GPUSLICE_AGENT_JOIN_TOKEN=kept\n")
    systemd.install(spec, calls.append, unit_dir=tmp_path / "units")  # again: env file kept
    assert spec.env_file.read_text() == "GPUSLICE_AGENT_JOIN_TOKEN=kept\n"
    calls.clear()
    assert systemd.uninstall("agent", calls.append, unit_dir=tmp_path / "units") == unit
    assert not unit.exists() and spec.env_file.exists()
    assert calls == [["systemctl", "disable", "--now", "gpuslice-agent.service"],
                     ["systemctl", "daemon-reload"]]
    assert systemd.uninstall("agent", calls.append, unit_dir=tmp_path / "units") is None


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLICE_")}
    return subprocess.run([GPUSLICE, "service", *args], capture_output=True, text=True,
                          timeout=scaled(60), check=False, env=env)


@pytest.mark.skipif(systemd.systemd_running(), reason="this machine runs systemd")
def test_without_systemd_it_says_so_and_prints_the_unit() -> None:
    done = _cli("install", "manager", "--", "--port", "9000")
    assert done.returncode == 1
    assert done.stderr.startswith("systemd is not running on this machine: nothing installed")
    assert done.stdout.startswith("# Written by `gpuslice service install`")
    assert "manager serve --port 9000" in done.stdout
    printed = _cli("install", "agent", "--print")
    assert printed.returncode == 0 and "agent serve" in printed.stdout


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    for args, message in [
        (("install", "scheduler"),
         "error: PART: 'scheduler' is not a part; use manager, agent or up"),
        (("install", "up", "--config", str(tmp_path / "up.toml"), "--print"),
         "error: --config: `up` reads no settings file: give its options after --"),
        (("install", "manager", "--user", "no-such-user-x", "--print"),
         "error: --user: there is no user 'no-such-user-x' on this machine"),
        (("install", "agent", "--config", str(tmp_path / "none.toml"), "--print"),
         f"error: --config: agent config {tmp_path / 'none.toml'} does not exist"),
    ]:
        done = _cli(*args)
        assert done.returncode != 0 and done.stderr.startswith(message), done.stderr
        assert "Traceback" not in done.stderr


@needs_analyze
def test_the_manager_runs_as_its_own_user_by_default(tmp_path: Path) -> None:
    spec = systemd.spec_for("manager", config=None, user=None, serve_args=(), local_after=(),
                            data_dir=systemd.DATA_DIR, names_data_dir=True)
    assert spec.user == "gpuslice"
    assert spec.create_user == (not _user_exists("gpuslice"))
    text = systemd.render(spec)
    _verify(text, tmp_path, spec.name)
    lines = text.splitlines()
    for line in ("User=gpuslice", "Environment=GPUSLICE_DATA_DIR=/var/lib/gpuslice",
                 "AmbientCapabilities=CAP_CHOWN CAP_DAC_OVERRIDE CAP_FOWNER",
                 "CapabilityBoundingSet=CAP_CHOWN CAP_DAC_OVERRIDE CAP_FOWNER",
                 "Type=notify", "NotifyAccess=main", "NoNewPrivileges=yes"):
        assert line in lines, text
    # the environment file comes after, so an admin's GPUSLICE_DATA_DIR there wins
    assert lines.index("EnvironmentFile=-/etc/gpuslice/manager.env") > lines.index(
        "Environment=GPUSLICE_DATA_DIR=/var/lib/gpuslice")


@needs_analyze
def test_the_up_unit_is_valid_runs_as_root_and_waits_for_readiness(tmp_path: Path) -> None:
    done = _cli("install", "up", "--print", "--", "--port", "9000", "--mock-gpus", "2x8GiB")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    _verify(text, tmp_path, "gpuslice-up.service")
    lines = text.splitlines()
    assert f"ExecStart={GPUSLICE} up --data-dir /var/lib/gpuslice --port 9000 --mock-gpus " \
           "2x8GiB" in lines
    for line in ("User=root", "Type=notify", "NotifyAccess=main", "TimeoutStartSec=30min",
                 "After=network-online.target docker.service",
                 "EnvironmentFile=-/etc/gpuslice/up.env"):
        assert line in lines, text
    assert "# session network with iptables, which needs root." in lines  # says why root
    own = _cli("install", "up", "--print", "--", "--data-dir", str(tmp_path / "d"))
    assert f"ExecStart={GPUSLICE} up --data-dir {tmp_path / 'd'}" in own.stdout.splitlines()


def test_an_up_of_another_user_gets_the_docker_group_and_is_told_about_the_fence() -> None:
    if not _group_exists("docker"):
        pytest.skip("no docker group on this machine")
    user = pwd.getpwuid(os.getuid()).pw_name
    if user == "root":
        user = "nobody"
    spec = systemd.spec_for("up", config=None, user=user, serve_args=(), local_after=())
    text = systemd.render(spec)
    assert "SupplementaryGroups=docker" in text.splitlines()
    assert "without it, set GPUSLICE_AGENT_NETWORK__ISOLATION=off" in text


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                    reason="making a system user needs root and useradd")
def test_install_makes_the_system_user_and_gives_it_a_new_data_dir(tmp_path: Path) -> None:
    name = f"gs-test-{uuid.uuid4().hex[:8]}"
    calls: list[Sequence[str]] = []

    def run(argv: Sequence[str]) -> None:
        calls.append(argv)
        if argv[0] == "useradd":
            systemd.systemctl(argv)  # for real; systemctl calls are only recorded

    data = tmp_path / "var" / "gpuslice"
    spec = _spec("manager", user=name, create_user=True, data_dir=data, names_data_dir=True,
                 env_dir=tmp_path / "etc")
    try:
        systemd.install(spec, run, unit_dir=tmp_path / "units")
        entry = pwd.getpwnam(name)
        assert entry.pw_shell == "/usr/sbin/nologin" and entry.pw_uid < 1000  # a system user
        info = data.stat()
        assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (entry.pw_uid, 0o750)
        assert calls[-2:] == [["systemctl", "daemon-reload"],
                              ["systemctl", "enable", "--now", "gpuslice-manager.service"]]
        # a data directory someone else owns is not given away behind the admin's back
        os.chown(data, 0, 0)
        again = systemd.UnitSpec(**{**spec.__dict__, "create_user": False})
        with pytest.raises(systemd.ServiceError, match=f"{data} belongs to root, not {name}"):
            systemd.install(again, run, unit_dir=tmp_path / "units")
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
        subprocess.run(["groupdel", name], capture_output=True, check=False)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _group_exists(name: str) -> bool:
    import grp

    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True
