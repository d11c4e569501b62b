"""The identity providers' fixtures, loaded for the whole suite (tests/conftest.py's
``pytest_plugins``): ``oidc_provider`` (tests/idp/oidc.py) and ``ldap_directory``
(tests/idp/ldap.py), each a fresh one per test, on free 127.0.0.1 ports. Each skips the test,
saying why, when its programs are missing (``bash tools/host-setup.sh --idp``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.idp.ldap import Directory
from tests.idp.ldap import ldap_directory as start_ldap_directory
from tests.idp.oidc import OidcProvider
from tests.idp.oidc import oidc_provider as start_oidc_provider


@pytest.fixture
def oidc_provider(tmp_path: Path) -> Iterator[OidcProvider]:
    """The test OpenID provider with the default client (``gpuslice``, native: loopback
    redirects on any port) and accounts (alice, bob, carol, erin)."""
    with start_oidc_provider(tmp_path / "oidc-provider") as provider:
        yield provider


@pytest.fixture
def ldap_directory(tmp_path: Path) -> Iterator[Directory]:
    """A fresh slapd with ou=people (alice, bob, carol; dave locked), ou=groups (gpu-users,
    vision, admins) and a service account, on free ldap:// and ldaps:// ports."""
    with start_ldap_directory(tmp_path / "ldap") as directory:
        yield directory
