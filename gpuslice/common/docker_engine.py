"""Where the Docker Engine is, and what to tell a person when it does not answer (shared by
the agent, `gpuslice up` and `gpuslice image build`).

aiodocker looks for the engine itself (``DOCKER_HOST``, a docker context, the usual sockets) but
stops on an ``AssertionError`` when it finds none; :func:`docker_client` falls back to the
standard socket instead, so that the first call fails like any other unreachable engine and
:func:`explain` can say why: not installed, not running, not ours to use, or not answering.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator

import aiodocker
import aiohttp

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
_START = "start it (`sudo systemctl start docker`; `make up` installs and starts it)"


def docker_client(url: str | None = None,
                  timeout: aiohttp.ClientTimeout | None = None) -> aiodocker.Docker:
    """An engine client for ``url`` (``None``: wherever the Docker CLI would look)."""
    if url is not None:
        return aiodocker.Docker(url=url, timeout=timeout)
    try:
        return aiodocker.Docker(url=url, timeout=timeout)
    except (AssertionError, ValueError):  # it found no engine address at all
        return aiodocker.Docker(url=DEFAULT_SOCKET, timeout=timeout)


def docker_address(url: str | None = None) -> str:
    """The address a client for ``url`` uses, for messages."""
    return url or os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET


def explain(err: BaseException, url: str | None = None) -> str:
    """One line: what is wrong with the Docker Engine at ``url`` and what to do about it."""
    address = docker_address(url)
    socket_path = address.removeprefix("unix://") if address.startswith("unix://") else None
    code = _errno(err)
    if code == errno.ENOENT and socket_path is not None:
        if shutil.which("dockerd") is None and shutil.which("docker") is None:
            return ("the Docker Engine is not installed on this machine: install it "
                    "(Debian: `sudo apt-get install docker.io`; `make up` does it for you)")
        return f"the Docker Engine is not running (no socket at {socket_path}): {_START}"
    if code == errno.ECONNREFUSED:
        return f"the Docker Engine is not running (nothing answers at {address}): {_START}"
    if code in (errno.EACCES, errno.EPERM):
        where = socket_path or address
        return (f"you may not use the Docker Engine at {where} (permission denied): add "
                "yourself to the docker group (`sudo usermod -aG docker $USER`, then log in "
                "again) or run gpuslice as root")
    if code is not None or isinstance(err, TimeoutError) or _has(err, TimeoutError):
        detail = os.strerror(code) if code is not None else "timed out"
        return (f"the Docker Engine at {address} does not answer ({detail}): is it starting, "
                "or stuck? (`systemctl status docker`)")
    if isinstance(err, aiodocker.DockerError):
        return f"the Docker Engine at {address} refused: {err.message}"
    return f"the Docker Engine at {address} cannot be used: {err}"


def _errno(err: BaseException) -> int | None:
    for link in _chain(err):
        if isinstance(link, aiohttp.ClientConnectorError) and link.os_error.errno:
            return link.os_error.errno
        if isinstance(link, OSError) and link.errno:
            return link.errno
    return None


def _has(err: BaseException, kind: type[BaseException]) -> bool:
    return any(isinstance(link, kind) for link in _chain(err))


def _chain(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    link: BaseException | None = err
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__
