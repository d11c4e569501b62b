"""Who a provider's user is in gpuslice (services/identity): linked by (provider, subject),
never by name or e-mail; deny by default; projects and role follow the provider's groups, and
groups the provider did not state change nothing."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import select

from gpuslice.manager.db.models import (
    AuditRow,
    ProjectIdpGroupRow,
    ProjectMemberRow,
    ProjectRow,
    UserIdentityRow,
    UserRow,
)
from gpuslice.manager.services.identity import (
    Profile,
    SignInRefused,
    oidc_profile,
    recheck,
    sign_in,
)
from gpuslice.manager.services.identity.directory import Directory, Entry
from gpuslice.manager.services.identity.profile import MAX_GROUPS
from gpuslice.manager.settings import IdentityMapping, LdapSettings, OidcSettings
from tests.manager.conftest import Client, UserFactory

MAPPING = OidcSettings(issuer="http://127.0.0.1:1", allowed_groups=["gpu-users"],
                       admin_groups=["gpu-admins"])


def alice(groups: tuple[str, ...] | None = ("gpu-users", "vision"), sub: str = "sub-alice",
          username: str = "alice") -> Profile:
    return Profile(provider="oidc", subject=sub, username=username, display_name="Alice A.",
                   email="alice@lab.org", email_verified=True, groups=groups)


async def _sign_in(app: FastAPI, profile: Profile, mapping: IdentityMapping = MAPPING
                   ) -> UserRow:
    async with app.state.sessionmaker() as db:
        return await sign_in(db, profile, mapping)


async def _rows(app: FastAPI, statement: Any) -> list[Any]:
    async with app.state.sessionmaker() as db:
        return list((await db.execute(statement)).all())


async def _link(admin: Client, app: FastAPI, project: str, group: str) -> str:
    r = await admin.post("/api/v1/projects", json={"name": project})
    assert r.status_code == 201, r.text
    async with app.state.sessionmaker() as db:
        row = await db.scalar(select(ProjectRow).where(ProjectRow.name == project))
        assert row is not None
        db.add(ProjectIdpGroupRow(project_id=row.id, provider="oidc", group_value=group))
        await db.commit()
        return row.id


async def test_a_first_sign_in_makes_the_user_and_the_same_subject_finds_it_again(
        app: FastAPI) -> None:
    first = await _sign_in(app, alice())
    assert (first.username, first.source, first.email_verified) == ("alice", "oidc", True)
    assert first.password_hash == "!oidc"  # no password matches it
    again = await _sign_in(app, alice(username="alice-renamed"))
    assert again.id == first.id and again.username == "alice"  # the name is fixed
    actions = [a for (a,) in await _rows(app, select(AuditRow.action))]
    assert "user.provision" in actions and "user.identity_changed" in actions


async def test_a_local_account_of_the_same_name_is_never_taken_over(
        app: FastAPI, make_user: UserFactory) -> None:
    await make_user("alice")
    with pytest.raises(SignInRefused) as refused:
        await _sign_in(app, alice())
    assert refused.value.code == "identity_conflict"
    assert "gpuslice admin user link alice --provider oidc --subject sub-alice" in str(
        refused.value)
    assert not await _rows(app, select(UserIdentityRow.id))
    # by-username links an account with no identity yet, once
    linked = await _sign_in(app, alice(), MAPPING.model_copy(update={
        "link_existing": "by-username"}))
    assert linked.source == "local"
    with pytest.raises(SignInRefused):  # a second subject never takes it
        await _sign_in(app, alice(sub="sub-other"), MAPPING.model_copy(update={
            "link_existing": "by-username"}))


async def test_the_same_email_never_links_two_accounts(app: FastAPI) -> None:
    one = await _sign_in(app, alice())
    other = await _sign_in(app, alice(sub="sub-bob", username="bob"))
    assert one.id != other.id and other.email == one.email


async def test_deny_by_default_and_the_provision_modes(app: FastAPI) -> None:
    for groups in (("other",), None, ()):
        with pytest.raises(SignInRefused) as refused:
            await _sign_in(app, alice(groups=groups))
        assert refused.value.code == "not_allowed" and "gpu-users" in str(refused.value)
    assert not await _rows(app, select(UserRow.id).where(UserRow.username == "alice"))
    with pytest.raises(SignInRefused, match="ask an administrator to create it"):
        await _sign_in(app, alice(), MAPPING.model_copy(update={"provision": "existing-only"}))
    with pytest.raises(SignInRefused, match="waits for an administrator"):
        await _sign_in(app, alice(), MAPPING.model_copy(update={"provision": "inactive"}))
    [(active,)] = await _rows(app, select(UserRow.is_active).where(UserRow.username == "alice"))
    assert active is False


async def test_projects_follow_the_groups_and_unknown_groups_change_nothing(
        app: FastAPI, admin: Client) -> None:
    vision = await _link(admin, app, "vision", "vision")
    await _link(admin, app, "nlp", "nlp")
    user = await _sign_in(app, alice())
    members = select(ProjectMemberRow.project_id, ProjectMemberRow.source).where(
        ProjectMemberRow.user_id == user.id)
    assert await _rows(app, members) == [(vision, "idp")]
    # the claim is absent (allowed by allow_all): no change
    await _sign_in(app, alice(groups=None), MAPPING.model_copy(update={"allow_all": True}))
    assert await _rows(app, members) == [(vision, "idp")]
    await _sign_in(app, alice(groups=("gpu-users", "nlp")))
    [(project,)] = [(p,) for p, _ in await _rows(app, members)]
    assert project != vision
    # an admin's own add is never removed by a sync
    r = await admin.post("/api/v1/projects/vision/members", json={"username": "alice"})
    assert r.status_code in (200, 201), r.text
    await _sign_in(app, alice(groups=("gpu-users",)))
    assert await _rows(app, members) == [(vision, "manual")]


async def test_the_role_follows_admin_groups(app: FastAPI) -> None:
    user = await _sign_in(app, alice(groups=("gpu-users", "gpu-admins")))
    assert str(user.role) == "admin"
    user = await _sign_in(app, alice())
    assert str(user.role) == "user"


def test_claims_map_to_a_profile_or_a_clear_refusal() -> None:
    claims = {"sub": "s1", "preferred_username": "Alice", "name": "Alice\x07 A.",
              "email": "a@lab.org", "email_verified": True, "groups": "gpu-users, vision"}
    profile = oidc_profile(claims, MAPPING)
    assert (profile.username, profile.display_name, profile.groups) == (
        "alice", "Alice\ufffd A.", ("gpu-users", "vision"))
    assert oidc_profile({**claims, "email_verified": "true"}, MAPPING).email_verified is False
    assert oidc_profile({**claims, "groups": [f"g{i}" for i in range(1001)]},
                        MAPPING).groups is None  # too many: not known
    assert oidc_profile({**claims, "_claim_names": {"groups": "src1"}}, MAPPING).groups is None
    with pytest.raises(SignInRefused, match="preferred_username 'Ali Ce' is not a gpuslice"):
        oidc_profile({**claims, "preferred_username": "Ali Ce"}, MAPPING)
    strip = MAPPING.model_copy(update={"username_strip_domain": "lab.org"})
    assert oidc_profile({**claims, "preferred_username": "bob@lab.org"}, strip).username == "bob"
    with pytest.raises(SignInRefused, match="not an address at lab.org"):
        oidc_profile({**claims, "preferred_username": "bob@evil.org"}, strip)
    nested = MAPPING.model_copy(update={"groups_claim": "realm_access.roles"})
    assert oidc_profile({**claims, "realm_access": {"roles": ["x"]}}, nested).groups == ("x",)
    with pytest.raises(SignInRefused, match="no valid subject"):
        oidc_profile({**claims, "sub": ""}, MAPPING)


async def test_by_username_never_links_an_admin_account(app: FastAPI) -> None:
    """A provider's user named like the break-glass admin never becomes it."""
    by_name = MAPPING.model_copy(update={"link_existing": "by-username"})
    with pytest.raises(SignInRefused) as refused:
        await _sign_in(app, alice(username="admin", sub="sub-admin"), by_name)
    assert refused.value.code == "identity_conflict"
    assert not await _rows(app, select(UserIdentityRow.id))


async def test_a_directory_group_list_cut_short_changes_nothing(app: FastAPI) -> None:
    """More groups than gpuslice takes are not known: a re-check disables nobody for them."""
    settings = LdapSettings(url="ldap://127.0.0.1:1", allowed_groups=["gpu-users"])
    many = {"memberOf": [f"cn=g{i},ou=groups,dc=lab" for i in range(MAX_GROUPS + 1)]}
    entry = Entry(dn="uid=alice,ou=people,dc=lab", subject="uuid-a", attributes=many)
    assert Directory(settings).groups_of(entry) is None
    user = await _sign_in(app, dataclasses.replace(alice(sub="uuid-a"), provider="ldap"),
                          settings)
    async with app.state.sessionmaker() as db:
        identity = await db.scalar(select(UserIdentityRow).where(
            UserIdentityRow.user_id == user.id))
        assert identity is not None
        await recheck._apply(db, user.id, identity.id, entry, None, settings)
        await db.commit()
        assert (await db.get_one(UserRow, user.id)).is_active
