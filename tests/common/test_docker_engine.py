"""What is said when the Docker Engine does not answer (`gpuslice.common.docker_engine`),
from the errors a real client raises."""

from __future__ import annotations

import socket
from pathlib import Path

import aiodocker
import pytest

from gpuslice.common.docker_engine import docker_client, explain

START = "start it (`sudo systemctl start docker`; `make up` installs and starts it)"


async def failure(url: str | None) -> BaseException:
    docker = docker_client(url)
    try:
        await docker.version()
    except Exception as exc:
        return exc
    finally:
        await docker.close()
    raise AssertionError(f"an engine answered at {url}")


async def test_no_socket(tmp_path: Path) -> None:
    path = tmp_path / "docker.sock"
    assert explain(await failure(f"unix://{path}"), f"unix://{path}") == (
        f"the Docker Engine is not running (no socket at {path}): {START}")


async def test_a_socket_nobody_listens_on(tmp_path: Path) -> None:
    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
    assert explain(await failure(f"unix://{path}"), f"unix://{path}") == (
        f"the Docker Engine is not running (nothing answers at unix://{path}): {START}")


def test_a_refusal_and_anything_else() -> None:
    refused = aiodocker.DockerError(500, "no space left on device")
    assert explain(refused, "unix:///x.sock") == (
        "the Docker Engine at unix:///x.sock refused: no space left on device")
    assert explain(ValueError("odd"), "unix:///x.sock") == (
        "the Docker Engine at unix:///x.sock cannot be used: odd")


async def test_no_engine_address_at_all_is_the_standard_socket(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # aiodocker asserts when it finds no address; the client falls back to the usual socket
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(aiodocker.docker, "_sock_search_paths", [tmp_path / "none.sock"])
    docker = docker_client()
    try:
        assert docker._connection_info == "unix:///var/run/docker.sock"
    finally:
        await docker.close()
