"""The SSRF guard: a webhook URL may reach only public addresses, unless an admin allowed it.

Any user can make the manager POST to a URL of their choice, so before each request the host
name is resolved, every address it has is checked (loopback, private, link-local such as
169.254.169.254, CGNAT, unique-local, multicast, reserved, and the IPv4 ones hidden in IPv6
are refused), and the request then goes to the address that was checked: a name that
resolves to a public address at the check and to 127.0.0.1 a moment later (DNS rebinding)
still reaches the public one. ``notify.allowed_targets`` opens exceptions by host name or CIDR.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gpuslice.manager.errors import InvalidRequest

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class PrivateTarget(InvalidRequest):
    code = "private_target"


@dataclass(frozen=True, slots=True)
class Target:
    """Where to connect (``url``, with the checked address as its host) and the name the
    server knows itself by (the ``Host`` header and the TLS server name)."""

    url: str
    host: str  # the URL's host name, for Host and SNI
    host_header: str


def check_url(url: str, allowed: list[str]) -> None:
    """Refuse a URL that is not http(s), or plain http to a host no admin allowed."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequest(f"{_shown(url)} is not an http(s) URL", field="target")
    if parts.username or parts.password:
        raise InvalidRequest("put no user name or password in the URL", field="target")
    try:
        parts.port  # noqa: B018 -- raises on a bad port
    except ValueError:
        raise InvalidRequest(f"{_shown(url)} has a bad port", field="target") from None


async def resolve(url: str, allowed: list[str]) -> Target:
    """The checked address to send ``url`` to; ``PrivateTarget`` when any of its host's
    addresses is not public and no admin allowed it, ``InvalidRequest`` when it resolves to
    nothing."""
    check_url(url, allowed)
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = await lookup(host, port)
    except (OSError, UnicodeError, ValueError) as exc:
        raise InvalidRequest(f"{host} does not resolve: {exc}", field="target") from None
    addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    if not addresses:
        raise InvalidRequest(f"{host} does not resolve", field="target")
    host_allowed = _allowed_host(host, allowed)
    for address in addresses:
        if not host_allowed and not is_public(address) and not _allowed_address(address,
                                                                               allowed):
            shown = f"{host} is" if host == str(address) else f"{host} resolves to {address},"
            raise PrivateTarget(
                f"{shown} a private, loopback or link-local address: "
                "webhooks reach those only when an admin lists them in "
                "notify.allowed_targets", field="target")
    if parts.scheme == "http" and not (host_allowed or all(
            _allowed_address(a, allowed) for a in addresses)):
        raise InvalidRequest("a webhook URL must be https (plain http only to hosts in "
                             "notify.allowed_targets)", field="target")
    first = addresses[0]
    shown = f"[{first}]" if first.version == 6 else str(first)
    netloc = f"{shown}:{port}"
    target_url = parts._replace(netloc=netloc).geturl()
    host_header = parts.netloc.rpartition("@")[2]
    return Target(target_url, host, host_header)


async def lookup(host: str, port: int) -> list[tuple[Any, ...]]:
    """The host's addresses (``getaddrinfo``), in one place for the tests to stand in for
    DNS."""
    return await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)


def is_public(address: Address) -> bool:
    """Whether ``address`` is a public unicast address (IPv4 in IPv6 judged as IPv4)."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour
        if inner is not None:
            return is_public(inner)
        if address in _NAT64:
            return is_public(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return address.is_global and not address.is_multicast


_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def _allowed_host(host: str, allowed: list[str]) -> bool:
    host = host.lower().rstrip(".")
    return any(pattern.lower().rstrip(".") == host for pattern in allowed)


def _allowed_address(address: Address, allowed: list[str]) -> bool:
    for pattern in allowed:
        try:
            if address in ipaddress.ip_network(pattern, strict=False):
                return True
        except (ValueError, TypeError):
            continue
    return False


def _shown(url: str) -> str:
    """A URL as errors may show it: its scheme and host, never its path (often the secret)."""
    return redact(url)


def redact(url: str) -> str:
    """``https://hooks.example.org/…``: Slack-style URLs carry their secret in the path."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.hostname:
        return "the URL"
    tail = "/…" if parts.path not in ("", "/") or parts.query else ""
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{tail}"
