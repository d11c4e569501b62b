"""What a manager with single sign-on holds while it runs (``app.state.sso``)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuslice.manager.services.sso.provider import Provider
from gpuslice.manager.services.sso.vault import Vault
from gpuslice.manager.settings import AuthSettings, OidcSettings


@dataclass(slots=True)
class Sso:
    auth: AuthSettings
    provider: Provider
    vault: Vault

    @property
    def settings(self) -> OidcSettings:
        return self.auth.oidc
