"""SSH into a session: one ``sshd -i`` per connection, run by the agent, never a daemon.

The image only carries the server (the base image's rootfs has ``openssh-server``); nothing in
the session listens for SSH: each connection the manager relays is an Engine API exec of
``sshd -i`` (inetd mode: the SSH protocol on its stdin and stdout) as the session's user,
unprivileged, in the container's namespaces. So the server is reachable only through the
platform: no port is published, and no other session (or the node) has anything to dial.

Before each connection a short exec (``_SETUP``) prepares ``/tmp/.gpuslice-sshd`` in the
container (a tmpfs of the session's user, ``spec.CONTAINER_SSH_DIR``: none of it ever goes into
an image committed from the session): a host key of the session's own (made on first use,
kept while the container lives), the owner's public keys as the only authorized ones (written
fresh each time: a key removed on the manager is refused from the next connection on), and the
server's configuration: public keys only (no password, no keyboard-interactive), the session's
user only, and ``SetEnv`` with the container's environment, so a shell over SSH has the slice,
the variables and the framework hook the web terminal's exec gets (sshd otherwise starts its
sessions with an empty environment).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp

from gpuslice.agent.runtime import DockerRuntime
from gpuslice.agent.runtime.execs import ExecProcess
from gpuslice.agent.runtime.models import ContainerRuntimeError
from gpuslice.agent.runtime.spec import CONTAINER_SSH_DIR
from gpuslice.agent.streams.socket import LinkSocket
from gpuslice.common.schemas.streams import Failed, OpenSsh, SshOpened

log = logging.getLogger(__name__)
SSHD = "/usr/sbin/sshd"
SSH_DIR = CONTAINER_SSH_DIR
NO_SSHD = 3  # the setup's exit status when the image has no SSH server
SETUP_TIMEOUT = 30.0  # seconds: making a host key takes well under one
# Variables sshd sets itself for the logged-in user (or the client sends: TERM).
_SSHD_OWN = frozenset({"HOME", "USER", "LOGNAME", "SHELL", "MAIL", "TERM", "PWD", "HOSTNAME"})
# $1: the configuration (less AllowUsers, added here once the user's name is known);
# $2: the authorized keys. Prints the user's name. Files are replaced whole (mv), so a
# connection starting meanwhile reads the old or the new, never half of one.
_SETUP = f"""set -eu
if [ ! -x {SSHD} ]; then exit {NO_SSHD}; fi
d={SSH_DIR}
umask 077
mkdir -p "$d"
if [ ! -s "$d/host_ed25519" ]; then
    rm -f "$d/host.$$" "$d/host.$$.pub"
    ssh-keygen -q -t ed25519 -N '' -C gpuslice-session -f "$d/host.$$" </dev/null >/dev/null
    mv -f "$d/host.$$.pub" "$d/host_ed25519.pub"
    mv -f "$d/host.$$" "$d/host_ed25519"
fi
u=$(id -un)
printf '%s\\n' "$2" > "$d/keys.$$"
mv -f "$d/keys.$$" "$d/authorized_keys"
{{ printf '%s\\n' "$1"; echo "AllowUsers $u"; }} > "$d/config.$$"
mv -f "$d/config.$$" "$d/sshd_config"
echo "$u"
"""
_CONFIG = f"""# Written by the gpuslice agent before each SSH connection (agent/streams/ssh.py).
HostKey {SSH_DIR}/host_ed25519
AuthorizedKeysFile {SSH_DIR}/authorized_keys
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitEmptyPasswords no
UsePAM no
PermitRootLogin no
StrictModes no
X11Forwarding no
PrintMotd no
PrintLastLog no
PidFile none
Subsystem sftp internal-sftp
"""


class SshUnavailable(RuntimeError):
    """The session cannot take an SSH connection; the message says why, in one line."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


async def serve_ssh(ws: LinkSocket, session_id: str, ask: OpenSsh,
                    runtime: DockerRuntime) -> None:
    """Run ``sshd -i`` for this link and pass the SSH bytes both ways until either ends."""
    try:
        user = await prepare(runtime, session_id, ask)
        process = await runtime.open_exec(
            session_id, [SSHD, "-i", "-e", "-f", f"{SSH_DIR}/sshd_config"], tty=False, stdin=True)
    except SshUnavailable as exc:
        await _fail(ws, 409, exc.code, str(exc))
        return
    except ContainerRuntimeError as exc:
        await _fail(ws, 409, "ssh_failed", f"no SSH server could be started: {exc}")
        return
    await ws.send_str(SshOpened(user=user).model_dump_json())
    from_link = asyncio.create_task(_link_to_sshd(ws, process))
    to_link = asyncio.create_task(_sshd_to_link(process, ws, session_id))
    try:
        await asyncio.wait({from_link, to_link}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (from_link, to_link):
            task.cancel()
        await asyncio.gather(from_link, to_link, return_exceptions=True)
        with contextlib.suppress(Exception):  # sshd sees its input end, and exits
            await process.close()


async def prepare(runtime: DockerRuntime, session_id: str, ask: OpenSsh) -> str:
    """Write the host key (once), the keys and the configuration; the user's name."""
    env = _session_env(await runtime.container_env(session_id))
    # One SetEnv line: sshd takes the first SetEnv it reads and ignores any later one.
    config = _CONFIG + (f"SetEnv {' '.join(_quoted(item) for item in env)}\n" if env else "")
    keys = "\n".join(k.strip() for k in ask.keys if k.strip() and "\n" not in k.strip())
    result = await runtime.exec(session_id, ["/bin/sh", "-c", _SETUP, "sh", config, keys],
                                timeout=SETUP_TIMEOUT)
    if result.exit_code == NO_SSHD:
        image = ask.image or "this session's image"
        raise SshUnavailable(
            f"image {image} has no SSH server (sshd); use `gpuslice session shell` for a "
            "shell, or an image built FROM gpuslice/base", "no_ssh_server")
    user = result.stdout.strip().splitlines()[-1:] if result.exit_code == 0 else []
    if not user:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise SshUnavailable(f"the SSH server could not be prepared (exit "
                             f"{result.exit_code}): {last}", "ssh_failed")
    return user[0]


def _session_env(env: list[str]) -> list[str]:
    """The container's ``KEY=value`` items an SSH login should get too (sshd's own aside;
    a value on several lines cannot be written in sshd's configuration)."""
    kept = []
    for item in env:
        name, sep, value = item.partition("=")
        if sep and name and name not in _SSHD_OWN and not name.startswith("SSH_") \
                and "\n" not in value and "\r" not in value:
            kept.append(item)
    return kept


def _quoted(item: str) -> str:
    """One ``SetEnv`` argument: sshd splits its lines on spaces, honouring double quotes and
    backslash escapes of quotes and backslashes."""
    return '"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"'


async def _link_to_sshd(ws: LinkSocket, process: ExecProcess) -> None:
    async for message in ws:
        if message.type is aiohttp.WSMsgType.BINARY:
            await process.write(message.data)
        else:
            return  # a control message has no place in an SSH stream: end it


async def _sshd_to_link(process: ExecProcess, ws: LinkSocket, session_id: str) -> None:
    while (frame := await process.read_frame()) is not None:
        stream, data = frame
        if stream == 2:  # sshd's own log (-e): why a login was refused, for the node's log
            log.info("sshd of session %s: %s", session_id,
                     data.decode(errors="replace").rstrip()[:1000])
        else:
            await ws.send_bytes(data)


async def _fail(ws: LinkSocket, status: int, code: str, message: str) -> None:
    await ws.send_str(Failed(status=status, code=code, message=message[:4000]).model_dump_json())
