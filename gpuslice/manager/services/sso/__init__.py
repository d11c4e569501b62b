"""Single sign-on with an OpenID provider (``auth.oidc``): the browser's sign-in, the
provider's sessions behind gpuslice tokens and their re-check, back-channel logout, and the
CLI's device sign-in. See README.md beside this file.

Nothing here is imported by a manager without ``auth.oidc`` (Authlib and joserfc stay out of
it): the app imports :func:`open_sso` lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuslice.manager.settings import ManagerSettings

if TYPE_CHECKING:
    from gpuslice.manager.services.sso.state import Sso

__all__ = ["open_sso"]


def open_sso(settings: ManagerSettings) -> Sso:
    """The provider and the key of the secrets it leaves with us (made at the first start)."""
    from gpuslice.manager.services.sso.provider import Provider
    from gpuslice.manager.services.sso.state import Sso
    from gpuslice.manager.services.sso.vault import load

    return Sso(auth=settings.auth, provider=Provider(settings.auth),
               vault=load(settings.data_dir))
