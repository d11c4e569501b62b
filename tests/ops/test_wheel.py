"""The package as a release ships it: `python -m build` makes the sdist and, from it, the wheel;
the wheel carries every file the package reads at run time (console, terminal and its xterm.js,
migrations, session tools, the hook's .pth, image recipes, the capshim source), installs with
its dependencies from the package index into a fresh virtual environment, and that
environment's own `gpuslice up` runs the platform on this machine's Docker Engine.

The build runs without an isolated build environment (the `[test]` extras bring `build` and
the build-system's setuptools): that saves the download of setuptools into a fresh one each
time, a few seconds of this test's minute. pip keeps its cache (the dependencies' wheels).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.dockerd import base_image, docker_ready, remove_fence
from tests.ports import free_port

__all__ = ["base_image", "docker_ready"]

REPO = Path(__file__).resolve().parents[2]
VENDOR = REPO / "gpuslice/manager/proxy/static/vendor"
STEP_TIMEOUT_S = 300.0  # a build, an install (a cold pip cache downloads every dependency)
UP_TIMEOUT_S = 120.0  # from `gpuslice up` to its node being ALIVE (the session image exists)
# Shared by every process that builds from this checkout (kept outside it: nothing of it
# reaches the sdist).
BUILD_LOCK = Path(tempfile.gettempdir()) / (
    "gpuslice-wheel-build-" + hashlib.sha256(str(REPO).encode()).hexdigest()[:16] + ".lock")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `python -m build` makes from this checkout (through the sdist)."""
    if not (VENDOR / "xterm.js").is_file():
        pytest.skip(f"no xterm.js in {VENDOR.relative_to(REPO)}: run `make web` first")
    dist = tmp_path_factory.mktemp("dist")
    # One build at a time in the checkout: the sdist is assembled in it (gpuslice-0.1.0/,
    # gpuslice.egg-info/), and the suite's lanes build at once (the SQLite lane's check of the
    # wheel's files, the docker lane's `up` from it): one removed the tree the other was
    # archiving ("No such file or directory: 'gpuslice-0.1.0/gpuslice/common'").
    with BUILD_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _run_step("build", [sys.executable, "-m", "build", "--no-isolation", "--outdir",
                            str(dist), str(REPO)], cwd=REPO)
    built = sorted(dist.glob("gpuslice-*.whl"))
    assert len(built) == 1, sorted(p.name for p in dist.iterdir())
    return built[0]


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel and its dependencies installed by pip."""
    root = tmp_path_factory.mktemp("venv")
    # Without a pip of its own: this one installs into it (`--python`), 6 s saved. No
    # byte-compiling of every dependency's modules (4 s): `up` compiles those it imports.
    _run_step("venv", [sys.executable, "-m", "venv", "--without-pip", str(root)], cwd=root)
    _run_step("install", [sys.executable, "-m", "pip", "--python", str(root / "bin/python"),
                          "install", "--disable-pip-version-check", "--no-input",
                          "--no-compile", str(wheel)], cwd=root)
    return root


def test_the_wheel_carries_every_file_the_package_reads(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    # what the checkout's package holds, less developers' notes: what the code finds beside
    # itself (`Path(__file__)`, `importlib.resources`) is in here, and so is the vendor folder
    expected = {
        path.relative_to(REPO).as_posix() for path in (REPO / "gpuslice").rglob("*")
        if path.is_file() and path.name != "README.md" and not path.name.startswith(".")
        and "__pycache__" not in path.parts
    }
    assert expected - names == set()
    assert {VENDOR.relative_to(REPO).as_posix() + f"/{name}"
            for name in ("xterm.js", "xterm.css", "addon-fit.js")} <= names
    # nothing of the checkout's own beside the package (tests, tools, setup.py)
    tops = {name.split("/")[0] for name in names} - {"gpuslice"}
    assert len(tops) == 1 and tops.pop().endswith(".dist-info"), tops


@pytest.mark.docker
@pytest.mark.usefixtures("base_image")  # the standard session image: `up` starts sessions of it
def test_the_installed_wheel_runs_the_platform(venv: Path, tmp_path: Path) -> None:
    env = _clean_env() | {"GPUSLICE_CLIENT_CONFIG": str(tmp_path / "client.json")}
    found = subprocess.run([str(venv / "bin/python"), "-c",
                            "import gpuslice; print(gpuslice.__file__)"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout
    assert Path(found.strip()).is_relative_to(venv), f"gpuslice imported from {found}"

    port, node = free_port(), f"node-{uuid.uuid4().hex[:8]}"
    url = f"http://127.0.0.1:{port}"
    with _running_up(venv, tmp_path, port, node, env) as up, httpx.Client(base_url=url) as http:
        _wait_node_alive(http, up, tmp_path / "client.json", node)
        console = http.get("/console/index.html")
        assert console.status_code == 200 and "<html" in console.text.lower()
        xterm = http.get("/assets/vendor/xterm.js")
        assert xterm.status_code == 200
        assert xterm.content == (VENDOR / "xterm.js").read_bytes()
        up.send_signal(signal.SIGINT)
        assert up.wait(30) == 0, _log(tmp_path)


def _clean_env() -> dict[str, str]:
    """This environment less what would show pip or Python the checkout (the tests run with
    it on PYTHONPATH) or configure the platform (GPUSLICE_*)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("GPUSLICE_") and k not in ("PYTHONPATH", "PYTHONHOME")}


def _run_step(name: str, argv: list[str], cwd: Path) -> None:
    """Run a step to its end, its seconds printed (`-s`: the test is sized for a 2-core CI)."""
    start = time.monotonic()
    done = subprocess.run(argv, cwd=cwd, env=_clean_env(), capture_output=True, text=True,
                          timeout=STEP_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    print(f"test_wheel: {name} {time.monotonic() - start:.1f}s")


@contextlib.contextmanager
def _running_up(venv: Path, tmp: Path, port: int, node: str,
                env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """`gpuslice up` from ``venv`` on its own data directory, port and node (a mock GPU),
    its output in ``tmp/up.log``; killed if still running on the way out, and its node's
    containers and session network removed."""
    argv = [str(venv / "bin/gpuslice"), "up", "--data-dir", str(tmp / "data"), "--port",
            str(port), "--mock-gpus", "1x8GiB", "--node-name", node]
    with (tmp / "up.log").open("wb") as log:
        up = subprocess.Popen(argv, env=env, cwd=tmp, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
        try:
            yield up
        finally:
            if up.poll() is None:
                up.kill()
                up.wait(10)
            listed = subprocess.run(
                ["docker", "ps", "-aq", "--filter", f"label=gpuslice.node={node}"],
                capture_output=True, text=True, check=False).stdout.split()
            if listed:
                subprocess.run(["docker", "rm", "-f", *listed], capture_output=True, check=False)
            remove_fence(node)  # the node's session network and its iptables chains


def _wait_node_alive(http: httpx.Client, up: subprocess.Popen[bytes], login: Path,
                     node: str) -> None:
    """Until the API answers, `up` has logged the CLI in, and the node is ALIVE."""
    start = time.monotonic()
    deadline = start + UP_TIMEOUT_S
    while time.monotonic() < deadline:
        assert up.poll() is None, f"gpuslice up exited ({up.returncode}):\n{_log(login.parent)}"
        if login.is_file():
            token = json.loads(login.read_text())["token"]
            nodes = http.get("/api/v1/nodes", headers={"Authorization": f"Bearer {token}"})
            if nodes.status_code == 200 and any(
                n["name"] == node and n["status"] == "ALIVE" for n in nodes.json()
            ):
                print(f"test_wheel: up until node ALIVE {time.monotonic() - start:.1f}s")
                return
        time.sleep(0.2)
    raise AssertionError(f"node {node} not ALIVE within {UP_TIMEOUT_S:.0f}s:\n"
                         f"{_log(login.parent)}")


def _log(tmp: Path) -> str:
    return (tmp / "up.log").read_text(errors="replace")
