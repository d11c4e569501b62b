"""SSH: a user's public keys, and the WebSocket an SSH client's ``ProxyCommand`` speaks."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, WebSocket, status

from gpuslice.common.schemas.ssh import SshKeyCreate, SshKeyPublic
from gpuslice.manager.api.deps import CurrentUser, DbDep
from gpuslice.manager.proxy import ssh as ssh_proxy
from gpuslice.manager.services.ssh import keys

router = APIRouter(tags=["ssh"])
KeyRef = Annotated[str, Path(min_length=1, max_length=128)]


@router.get("/ssh-keys")
async def list_ssh_keys(db: DbDep, user: CurrentUser) -> list[SshKeyPublic]:
    """Your SSH public keys: the ones your sessions' SSH servers accept (everyone sees only
    their own)."""
    return await keys.list_keys(db, user)


@router.post("/ssh-keys", status_code=status.HTTP_201_CREATED)
async def add_ssh_key(body: SshKeyCreate, db: DbDep, user: CurrentUser) -> SshKeyPublic:
    """Register an OpenSSH public key (`~/.ssh/id_ed25519.pub`'s line); 422 for anything else
    (a private key, a damaged line, RSA under 2048 bits), 409 for one you have."""
    return await keys.add_key(db, user, body)


@router.delete("/ssh-keys/{key_id:path}", status_code=status.HTTP_204_NO_CONTENT)
async def remove_ssh_key(key_id: KeyRef, db: DbDep, user: CurrentUser) -> None:
    """Remove one of your keys by id, fingerprint or name; connections already open stay."""
    await keys.remove_key(db, user, key_id)


@router.websocket("/sessions/{session_id}/ssh")
async def session_ssh(websocket: WebSocket, session_id: str) -> None:
    """An SSH connection to the session: binary messages are the SSH protocol's bytes both
    ways (`gpuslice ssh-proxy` is OpenSSH's ProxyCommand for it). Refused, before the
    upgrade, for anyone but the session's owner, without a registered key (409
    `no_ssh_keys`), or when its image has no SSH server (409 `no_ssh_server`)."""
    await ssh_proxy.serve_ssh(websocket, session_id)
