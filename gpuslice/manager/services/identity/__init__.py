"""Who a user of an identity provider is in gpuslice: profiles, accounts, group sync.

See README.md beside this file for the invariants.
"""

from gpuslice.manager.services.identity.accounts import SignInRefused, sign_in
from gpuslice.manager.services.identity.profile import Profile, oidc_profile

__all__ = ["Profile", "SignInRefused", "oidc_profile", "sign_in"]
