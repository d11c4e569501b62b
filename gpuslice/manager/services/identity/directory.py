"""An LDAP directory (OpenLDAP, Active Directory) as gpuslice asks it: find a user with the
service account, bind as them, read their groups, look a user up again by their subject.

Behind the small ``Directory`` class so that another client library could replace ldap3 (last
released 2021). Its calls block: callers run them on a thread (``PasswordChecks.run``). ldap3
is imported on first use only: the CLI and a manager without ``auth.ldap`` never load it.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from gpuslice.manager.errors import Unavailable
from gpuslice.manager.services.identity.profile import MAX_GROUPS
from gpuslice.manager.settings import LdapSettings

# ppolicy's lock (OpenLDAP); AD marks a disabled account in userAccountControl (bit 2)
_LOCK_ATTRIBUTES = ("pwdAccountLockedTime", "userAccountControl")
_AD_DISABLED = 2


class DirectoryDown(Unavailable):
    """The directory did not answer (or refused the service account): local accounts still
    sign in."""

    code = "directory_unavailable"


@dataclass(frozen=True, slots=True)
class Entry:
    """A user's entry: its DN, the stable subject (entryUUID / objectGUID), its attributes."""

    dn: str
    subject: str
    attributes: dict[str, list[str]] = field(default_factory=dict)

    def first(self, name: str) -> str | None:
        values = self.attributes.get(name) or []
        return str(values[0]) if values else None

    @property
    def locked(self) -> bool:
        """Locked by the password policy, or disabled (AD)."""
        if self.attributes.get("pwdAccountLockedTime"):
            return True
        control = self.first("userAccountControl")
        return control is not None and control.isdigit() and bool(int(control) & _AD_DISABLED)


class Directory:
    """The directory of ``settings``: each call opens its own connection (a login's bind must
    not change who a shared connection is bound as), bounded by ``settings.timeout``."""

    def __init__(self, settings: LdapSettings) -> None:
        self.settings = settings
        self.where = urlsplit(settings.url).netloc or settings.url

    def find_user(self, username: str) -> Entry | None:
        """The one entry ``user_filter`` finds for ``username`` (escaped), None when there is
        none or more than one (a name must say who it is)."""
        from ldap3.utils.conv import escape_filter_chars

        search = self.settings.user_filter.replace("{username}", escape_filter_chars(username))
        entries = self._search_users(search)
        return entries[0] if len(entries) == 1 else None

    def bind(self, dn: str, password: str) -> bool:
        """Whether ``password`` is ``dn``'s. An empty password is refused here, before any
        bind: the directory would take it as an anonymous bind that "succeeds"."""
        if not password:
            return False
        conn = self._connection(dn, password)
        with self._answering(conn):
            return bool(conn.bind())

    def groups_of(self, entry: Entry) -> tuple[str, ...] | None:
        """The user's groups, named as ``group_value`` says: searched under ``group_base``
        with ``group_filter``, or read from the entry's memberOf when it is empty. None (not
        known) when there are more than gpuslice takes: a cut list would judge on a part."""
        from ldap3.utils.conv import escape_filter_chars
        from ldap3.utils.dn import parse_dn

        if self.settings.group_base:
            search = (self.settings.group_filter
                      .replace("{user_dn}", escape_filter_chars(entry.dn))
                      .replace("{username}", escape_filter_chars(entry.first("uid") or "")))
            dns = [dn for dn, _ in self._search(self.settings.group_base, search, [])]
        else:
            dns = [str(dn) for dn in entry.attributes.get("memberOf", [])]
        if len(dns) > MAX_GROUPS:
            return None
        if self.settings.group_value == "dn":
            return tuple(dns)
        names = []
        for dn in dns:
            try:
                names.append(str(parse_dn(dn)[0][1]))
            except Exception:  # noqa: BLE001 - a DN ldap3 cannot parse names no group
                continue
        return tuple(names)

    def check(self, subject: str) -> Entry | None:
        """The entry whose subject is ``subject`` and that ``user_filter`` still finds (for
        any name), None when it is gone or filtered out."""
        from ldap3.utils.conv import escape_filter_chars

        name = self.settings.subject_attribute
        if name.lower() == "objectguid" and re.fullmatch(r"[0-9a-f]{32}", subject):
            value = "".join(f"\\{b:02x}" for b in bytes.fromhex(subject))  # its bytes (AD)
        else:
            value = escape_filter_chars(subject)
        wanted = f"({name}={value})"
        search = f"(&{self.settings.user_filter.replace('{username}', '*')}{wanted})"
        entries = self._search_users(search)
        return entries[0] if len(entries) == 1 else None

    def _search_users(self, search: str) -> list[Entry]:
        names = [self.settings.subject_attribute, self.settings.email_attribute,
                 self.settings.name_attribute, "uid", "memberOf", *_LOCK_ATTRIBUTES]
        found = self._search(self.settings.user_base, search, [n for n in names if n])
        entries = []
        for dn, attributes in found:
            subject = _text(attributes.get(self.settings.subject_attribute))
            if subject:
                entries.append(Entry(dn, subject, {k: [_str(v) for v in _list(values)]
                                                   for k, values in attributes.items()}))
        return entries

    def _search(self, base: str, search: str, attributes: list[str]
                ) -> list[tuple[str, dict[str, Any]]]:
        import ldap3

        password = self.settings.bind_password
        conn = self._connection(self.settings.bind_dn or None,
                                password.get_secret_value() if password else None)
        with self._answering(conn):
            if not conn.bind():
                raise DirectoryDown(
                    f"the directory at {self.where} refused gpuslice's service account "
                    f"({conn.result.get('description')}): an administrator checks "
                    "auth.ldap.bind_dn and bind_password; local accounts can still sign in")
            conn.search(base, search, ldap3.SUBTREE, attributes=attributes or ldap3.NO_ATTRIBUTES,
                        size_limit=2 if attributes else MAX_GROUPS + 1)
            return [(r["dn"], dict(r.get("attributes", {}))) for r in conn.response or []
                    if r.get("type") == "searchResEntry"]

    @contextmanager
    def _answering(self, conn: Any) -> Iterator[None]:
        """Run on ``conn`` (then closed); a directory that stops answering: ``DirectoryDown``."""
        from ldap3.core.exceptions import LDAPException

        try:
            yield
        except LDAPException as err:
            raise self._down(err) from None
        finally:
            _close(conn)

    def _down(self, err: Exception) -> DirectoryDown:
        return DirectoryDown(f"the directory at {self.where} did not answer "
                             f"({type(err).__name__}); local accounts can still sign in")

    def _connection(self, user: str | None, password: str | None) -> Any:
        """An ldap3 connection, opened (and upgraded with StartTLS), not bound; a directory
        that does not answer raises ``DirectoryDown``."""
        import ldap3
        from ldap3.core.exceptions import LDAPException

        tls = ldap3.Tls(validate=ssl.CERT_REQUIRED,
                        ca_certs_file=str(self.settings.ca_file) if self.settings.ca_file
                        else None)
        seconds = max(1, round(self.settings.timeout))  # ldap3 packs them as whole seconds
        server = ldap3.Server(self.settings.url, get_info=ldap3.NONE, tls=tls,
                              connect_timeout=seconds)
        conn = ldap3.Connection(server, user, password, read_only=True,
                                receive_timeout=seconds,
                                raise_exceptions=False)
        try:
            conn.open()
            if self.settings.start_tls and not conn.start_tls():
                raise DirectoryDown(f"the directory at {self.where} refused StartTLS")
        except LDAPException as err:
            _close(conn)
            raise self._down(err) from None
        return conn


def _close(conn: Any) -> None:
    """Unbind; a connection already broken (a failed TLS handshake) is only closed."""
    from ldap3.core.exceptions import LDAPException

    try:
        conn.unbind()
    except LDAPException:
        pass


def _list(values: Any) -> list[Any]:
    return list(values) if isinstance(values, list | tuple) else [values]


def _str(value: Any) -> str:
    """Text as it is; binary values (AD's objectGUID) as hex."""
    if not isinstance(value, bytes):
        return str(value)
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.hex()


def _text(values: Any) -> str | None:
    items = _list(values) if values is not None else []
    return _str(items[0]) if items and items[0] not in ("", None) else None
