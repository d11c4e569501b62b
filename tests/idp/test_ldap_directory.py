"""The test LDAP directory itself (slapd), with ldap3 and nothing of gpuslice: binds, a wrong
password and a locked account refused, memberOf and entryUUID, changes while it runs, LDAPS
and StartTLS with the test CA, and a wrong CA refused."""

from __future__ import annotations

import ssl
from pathlib import Path

import ldap3
import pytest
from cryptography.hazmat.primitives import serialization
from ldap3.core.exceptions import LDAPInvalidCredentialsResult, LDAPSocketOpenError
from ldap3.utils.conv import escape_filter_chars

from tests.idp.ldap import Directory, make_ca
from tests.idp.ldap import ldap_directory as start_ldap_directory


def test_binds_groups_and_changes(ldap_directory: Directory) -> None:
    directory = ldap_directory
    with directory.bind_as("alice") as alice:
        assert alice.extend.standard.who_am_i() == f"dn:{directory.user_dn('alice')}"
        alice.search(directory.user_dn("alice"), "(objectClass=*)", ldap3.BASE,
                     attributes=["entryUUID", "memberOf", "mail"])
        own = alice.response[0]["attributes"]
    assert own["mail"] == ["alice@lab.test"]
    assert len(own["entryUUID"][0]) == 36
    assert sorted(own["memberOf"]) == [directory.group_dn("gpu-users"),
                                       directory.group_dn("vision")]

    with pytest.raises(LDAPInvalidCredentialsResult):
        directory.bind_as("alice", "not-alice's")
    # ppolicy answers a locked account as it does a wrong password (49) ...
    with pytest.raises(LDAPInvalidCredentialsResult):
        directory.bind_as("dave")
    # ... and a service account can read why
    assert directory.entry(directory.user_dn("dave"), "pwdAccountLockedTime")
    directory.unlock("dave")
    directory.bind_as("dave").unbind()
    directory.lock("bob")
    with pytest.raises(LDAPInvalidCredentialsResult):
        directory.bind_as("bob")

    directory.remove_from_group("alice", "vision")
    directory.add_to_group("alice", "admins")
    assert directory.member_of("alice") == [directory.group_dn("admins"),
                                            directory.group_dn("gpu-users")]
    # the placeholder keeps a group with no user in it valid
    directory.remove_from_group("carol", "admins")
    directory.remove_from_group("alice", "admins")
    assert directory.entry(directory.group_dn("admins"), "member")["member"]

    uuid = directory.entry_uuid("carol")
    directory.remove_user("carol")
    # the memberof overlay's referential integrity takes carol out of her groups
    assert directory.user_dn("carol") not in directory.entry(
        directory.group_dn("gpu-users"), "member")["member"]
    directory.add_user("carol")
    assert directory.entry_uuid("carol") != uuid
    assert directory.member_of("carol") == []


def test_service_account_search_escapes_and_ldaps(tmp_path: Path) -> None:
    with start_ldap_directory(tmp_path / "ldap") as directory:
        _search_and_tls(directory, tmp_path)
    assert directory.process.returncode == 0, directory.log_tail()  # SIGTERM: a clean exit


def _search_and_tls(directory: Directory, tmp_path: Path) -> None:
    with directory.connect(directory.service_dn, directory.service_password) as service:
        wanted = escape_filter_chars("alice)(uid=*")
        service.search(directory.people_dn, f"(uid={wanted})", attributes=["uid"])
        # escaped, the injection attempt is one odd uid that nobody has
        assert [r for r in service.response if r["type"] == "searchResEntry"] == []
        service.search(directory.people_dn, "(&(objectClass=inetOrgPerson)(memberOf="
                       f"{directory.group_dn('vision')}))", attributes=["uid"])
        assert [r["attributes"]["uid"] for r in service.response] == [["alice"]]

    trusted = ldap3.Tls(ca_certs_file=str(directory.ca_file), validate=ssl.CERT_REQUIRED)
    server = ldap3.Server(directory.ldaps_url, use_ssl=True, tls=trusted, connect_timeout=10)
    with ldap3.Connection(server, directory.user_dn("alice"), "alice-password",
                          auto_bind=True, raise_exceptions=True) as over_tls:
        assert over_tls.extend.standard.who_am_i() == f"dn:{directory.user_dn('alice')}"
    server = ldap3.Server(directory.url, tls=trusted, connect_timeout=10)
    with ldap3.Connection(server, directory.user_dn("bob"), "bob-password",
                          auto_bind=ldap3.AUTO_BIND_TLS_BEFORE_BIND,
                          raise_exceptions=True) as start_tls:
        assert start_tls.tls_started
        assert start_tls.extend.standard.who_am_i() == f"dn:{directory.user_dn('bob')}"

    _, other_ca = make_ca("another CA")
    wrong = tmp_path / "wrong-ca.pem"
    wrong.write_bytes(other_ca.public_bytes(serialization.Encoding.PEM))
    untrusted = ldap3.Tls(ca_certs_file=str(wrong), validate=ssl.CERT_REQUIRED)
    server = ldap3.Server(directory.ldaps_url, use_ssl=True, tls=untrusted, connect_timeout=10)
    with pytest.raises(LDAPSocketOpenError, match="(?i)certificate"):
        ldap3.Connection(server, directory.user_dn("alice"), "alice-password",
                         auto_bind=True, raise_exceptions=True)
