"""The SDK's SSH calls (a mixin of ``Client``): one's public keys, and a session's SSH stream."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from gpuslice.client import schemas
from gpuslice.client.errors import ApiError

if TYPE_CHECKING:
    from gpuslice.client.stream import ByteStream
    from gpuslice.common.schemas.sessions import SessionPublic
    from gpuslice.common.schemas.ssh import SshKeyPublic

API = "/api/v1"


class SshCalls:
    """``Client`` provides ``url``, ``token``, ``_call`` and ``get_session``."""

    url: str
    token: str | None
    _call: Callable[..., Any]
    get_session: Callable[[str], SessionPublic]

    def list_ssh_keys(self) -> list[SshKeyPublic]:
        """One's own SSH public keys."""
        return self._call("GET", "/ssh-keys", list[schemas.ssh.SshKeyPublic])

    def add_ssh_key(self, key: str, name: str | None = None) -> SshKeyPublic:
        """Register an OpenSSH public key (a ``.pub`` file's line). A private key is refused
        here, before anything is sent: it never leaves this machine."""
        if "PRIVATE KEY" in key or key.lstrip().startswith("PuTTY-User-Key-File"):
            raise ApiError("this is a private key: give its public half, the .pub file (e.g. "
                           "~/.ssh/id_ed25519.pub); the private key never leaves your machine",
                           status=422, code="private_key", field="key")
        body = {"key": key, **({"name": name} if name else {})}
        return self._call("POST", "/ssh-keys", schemas.ssh.SshKeyPublic, json=body)

    def remove_ssh_key(self, ref: str) -> None:
        """Remove one of one's keys by id, fingerprint or name."""
        self._call("DELETE", f"/ssh-keys/{quote(ref, safe='')}", None)  # a fingerprint has /

    def ssh_stream(self, ref: str) -> ByteStream:
        """An SSH connection's bytes to the session (id or name): what ``ProxyCommand``
        relays. ``ApiError`` with the reason when refused (no key, no SSH server...)."""
        from gpuslice.client.stream import ByteStream

        sid = self.get_session(ref).id
        url = "ws" + self.url.removeprefix("http") + f"{API}/sessions/{sid}/ssh"
        return ByteStream.open(url, self.token)
