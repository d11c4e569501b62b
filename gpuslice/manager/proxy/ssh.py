"""SSH connections into sessions: a WebSocket whose binary messages are the SSH protocol's
bytes, relayed through the agent's link to an ``sshd -i`` in the session (agent/streams/ssh.py).

``gpuslice ssh-proxy`` (OpenSSH's ``ProxyCommand``) is the usual client. Who may connect is the
terminal's rule (the owner; admins only with ``apps.admin_access``), and the SSH server then
accepts only the session owner's registered keys: the platform decides who reaches the server,
the key decides who logs in. Every refusal is the upgrade's HTTP answer (never a 101), with a
one-line reason: no keys registered, an image without an SSH server, a session not running.
"""

from __future__ import annotations

from starlette.websockets import WebSocket

from gpuslice.common.schemas.streams import OpenSsh, SshOpened
from gpuslice.manager.api import browser
from gpuslice.manager.api.errors import deny
from gpuslice.manager.db.models import SessionRow
from gpuslice.manager.errors import Conflict, DomainError
from gpuslice.manager.proxy import sockets
from gpuslice.manager.proxy.gate import credentials
from gpuslice.manager.proxy.http import reply_of
from gpuslice.manager.services import auth
from gpuslice.manager.services.apps.access import openable
from gpuslice.manager.services.apps.links import Link, LinkPool
from gpuslice.manager.services.ssh import keys as ssh_keys
from gpuslice.manager.settings import ManagerSettings


async def serve_ssh(ws: WebSocket, session_id: str) -> None:
    """The SSH WebSocket of ``session_id``: accepted once the session's sshd runs."""
    state = ws.app.state
    pool: LinkPool = state.links
    try:
        row, keys = await _target(ws, session_id, state.settings)
        link = await _open(pool, row, keys)
    except DomainError as err:
        await deny(ws, err)
        return
    await ws.accept()
    state.activity.touch(row.id)
    await sockets.relay(ws, link, pool, state.activity, row.id, terminal=False)


async def _target(ws: WebSocket, session_id: str,
                  settings: ManagerSettings) -> tuple[SessionRow, list[str]]:
    """The session, if the caller may open its terminal, and its owner's keys."""
    secret, by_cookie = credentials(ws)
    if by_cookie:
        browser.check_origin(ws, settings.auth.allowed_origins)
    async with ws.app.state.sessionmaker() as db:
        user, _login = await auth.authenticate(db, secret)
        row = await openable(db, user, session_id, settings.apps)
        keys = await ssh_keys.authorized_keys(db, row.owner_id)
    if not keys:
        whose = "you have" if row.owner_id == user.id else "its owner has"
        raise Conflict(f"{whose} no SSH key registered: add one with `gpuslice ssh-key add "
                       "~/.ssh/id_ed25519.pub` (make one with `ssh-keygen -t ed25519`)",
                       code="no_ssh_keys")
    return row, keys


async def _open(pool: LinkPool, row: SessionRow, keys: list[str]) -> Link:
    assert row.node_id is not None  # openable() checked it runs on a node
    link = await pool.acquire(row.node_id, row.id, f"session {row.name}", reuse=False)
    try:
        await link.send_text(OpenSsh(keys=keys, image=row.image).model_dump_json())
        reply = await reply_of(link)
    except BaseException:
        pool.discard(link)
        raise
    if not isinstance(reply, SshOpened):
        pool.discard(link)
        raise sockets.StreamRefused(reply)
    return link
