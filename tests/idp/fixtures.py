"""The identity providers' fixtures, loaded for the whole suite (tests/conftest.py's
``pytest_plugins``): ``oidc_provider`` (tests/idp/oidc.py) and ``ldap_directory``
(tests/idp/ldap.py), each a fresh one per test, on free 127.0.0.1 ports. Each skips the test,
saying why, when its programs are missing (``bash tools/host-setup.sh --idp``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.idp.oidc import OidcProvider
from tests.idp.oidc import oidc_provider as start_oidc_provider


@pytest.fixture
def oidc_provider(tmp_path: Path) -> Iterator[OidcProvider]:
    """The test OpenID provider with the default client (``gpuslice``, native: loopback
    redirects on any port) and accounts (alice, bob, carol, erin)."""
    with start_oidc_provider(tmp_path / "oidc-provider") as provider:
        yield provider
