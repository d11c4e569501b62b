"""A real LDAP directory for tests: Debian's ``slapd`` as a plain process from a fresh
directory of the test's own (its own ``cn=config`` made with ``slapadd -n0``, an mdb database,
the ``memberof`` and ``ppolicy`` overlays), on free 127.0.0.1 ports: ldap:// and ldaps:// with
a certificate from a throwaway CA (``ca_file``).

The entries are added over LDAP with ldap3 (``slapadd`` would leave memberOf empty), under
``dc=lab,dc=test``: ``ou=people`` (alice, bob, carol, and dave, locked by
``pwdAccountLockedTime``; each's password ``<uid>-password``), ``ou=groups`` (groupOfNames
gpu-users, vision, admins, each with a placeholder member so that none ever empties), and a
service account for searches (``service_dn``, ``service_password``). Helpers lock, unlock and
remove users and move them between groups while it runs.

Tests that need it skip, saying why, when slapd is missing (``tools/host-setup.sh --idp``).
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.ports import free_port
from tests.waits import Deadline

SLAPD = Path("/usr/sbin/slapd")
SLAPADD = Path("/usr/sbin/slapadd")
MODULES = Path("/usr/lib/ldap")
SCHEMAS = Path("/etc/ldap/schema")
BASE = "dc=lab,dc=test"
PEOPLE = f"ou=people,{BASE}"
GROUPS = f"ou=groups,{BASE}"
PLACEHOLDER = f"cn=placeholder,{BASE}"
# ppolicy's "locked until an administrator unlocks it" value
LOCKED_FOREVER = "000001010000Z"
USERS = {
    "alice": {"cn": "Alice Liddell", "sn": "Liddell", "mail": "alice@lab.test"},
    "bob": {"cn": "Bob Builder", "sn": "Builder", "mail": "bob@lab.test"},
    "carol": {"cn": "Carol Danvers", "sn": "Danvers", "mail": "carol@lab.test"},
    "dave": {"cn": "Dave Bowman", "sn": "Bowman", "mail": "dave@lab.test"},
}
GROUP_MEMBERS = {
    "gpu-users": ["alice", "bob", "carol", "dave"],
    "vision": ["alice"],
    "admins": ["carol"],
}


class Directory:
    """A running slapd: its URLs, DNs and passwords, the CA its certificate comes from, and
    helpers that change its entries (as its administrator)."""

    def __init__(self, workdir: Path, port: int, tls_port: int, admin_password: str,
                 process: subprocess.Popen[bytes], log: Path) -> None:
        self.workdir = workdir
        self.port = port
        self.tls_port = tls_port
        self.url = f"ldap://127.0.0.1:{port}"
        self.ldaps_url = f"ldaps://127.0.0.1:{tls_port}"
        self.ca_file = workdir / "tls" / "ca.pem"
        self.base_dn = BASE
        self.people_dn = PEOPLE
        self.groups_dn = GROUPS
        self.admin_dn = f"cn=admin,{BASE}"
        self.admin_password = admin_password
        self.service_dn = f"uid=gpuslice-svc,ou=services,{BASE}"
        self.service_password = "gpuslice-svc-password"
        self.process = process
        self.log = log

    def user_dn(self, uid: str) -> str:
        return f"uid={uid},{PEOPLE}"

    def group_dn(self, name: str) -> str:
        return f"cn={name},{GROUPS}"

    def connect(self, dn: str | None = None, password: str | None = None) -> Any:
        """An ldap3 connection bound as ``dn`` (default: the administrator); raises
        ldap3's LDAPBindError when the bind is refused."""
        import ldap3

        server = ldap3.Server(self.url, get_info=ldap3.NONE, connect_timeout=10)
        return ldap3.Connection(server, dn or self.admin_dn,
                                self.admin_password if dn is None else password,
                                auto_bind=True, raise_exceptions=True, receive_timeout=10)

    def bind_as(self, uid: str, password: str | None = None) -> Any:
        """A connection bound as ``uid`` (password ``<uid>-password`` unless given)."""
        return self.connect(self.user_dn(uid), password or f"{uid}-password")

    def entry(self, dn: str, *attributes: str) -> dict[str, list[Any]]:
        """``dn``'s attributes as the administrator reads them (operational ones included
        when named: entryUUID, memberOf, pwdAccountLockedTime)."""
        import ldap3

        with self.connect() as conn:
            conn.search(dn, "(objectClass=*)", ldap3.BASE, attributes=list(attributes) or ["*"])
            return {k: list(v) for k, v in conn.response[0]["attributes"].items()}

    def entry_uuid(self, uid: str) -> str:
        return str(self.entry(self.user_dn(uid), "entryUUID")["entryUUID"][0])

    def member_of(self, uid: str) -> list[str]:
        return sorted(self.entry(self.user_dn(uid), "memberOf").get("memberOf", []))

    def add_user(self, uid: str, password: str | None = None, **attributes: Any) -> str:
        """A new person under ou=people (password ``<uid>-password`` unless given); its DN."""
        values = {"cn": uid.title(), "sn": uid.title(), "mail": f"{uid}@lab.test", **attributes}
        with self.connect() as conn:
            conn.add(self.user_dn(uid), ["inetOrgPerson"], {
                "uid": uid, "userPassword": password or f"{uid}-password", **values})
        return self.user_dn(uid)

    def remove_user(self, uid: str) -> None:
        """Delete the user (the memberof overlay takes them out of their groups)."""
        with self.connect() as conn:
            conn.delete(self.user_dn(uid))

    def lock(self, uid: str) -> None:
        """Lock the account (ppolicy ``pwdAccountLockedTime``): its binds fail."""
        self._modify(self.user_dn(uid), "pwdAccountLockedTime", "MODIFY_REPLACE",
                     [LOCKED_FOREVER])

    def unlock(self, uid: str) -> None:
        self._modify(self.user_dn(uid), "pwdAccountLockedTime", "MODIFY_DELETE", [])

    def set_password(self, uid: str, password: str) -> None:
        self._modify(self.user_dn(uid), "userPassword", "MODIFY_REPLACE", [password])

    def add_to_group(self, uid: str, group: str) -> None:
        self._modify(self.group_dn(group), "member", "MODIFY_ADD", [self.user_dn(uid)])

    def remove_from_group(self, uid: str, group: str) -> None:
        self._modify(self.group_dn(group), "member", "MODIFY_DELETE", [self.user_dn(uid)])

    def _modify(self, dn: str, attribute: str, operation: str, values: list[str]) -> None:
        import ldap3

        with self.connect() as conn:
            conn.modify(dn, {attribute: [(getattr(ldap3, operation), values)]})

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def slapd_binaries(workdir: Path) -> tuple[Path, Path]:
    """(slapd, slapadd) to run, or skip the test with the reason. Where AppArmor confines
    /usr/sbin/slapd to the system's own paths, a copy from ``workdir`` (a profile attaches by
    path, so it does not apply to the copy)."""
    if not SLAPD.exists() or shutil.which("ldapsearch") is None:
        pytest.skip("no slapd or ldap-utils (Debian packages `slapd ldap-utils`; "
                    "`bash tools/host-setup.sh --idp` installs them)")
    pytest.importorskip("ldap3", reason="ldap3 is missing: pip install -e '.[test]'")
    if not _apparmor_confines_slapd():
        return SLAPD, SLAPADD
    binaries = workdir / "bin"
    binaries.mkdir(parents=True, exist_ok=True)
    shutil.copy2(SLAPD, binaries / "slapd")
    (binaries / "slapadd").symlink_to("slapd")  # slapd acts on the name it is called by
    return binaries / "slapd", binaries / "slapadd"


@contextmanager
def ldap_directory(workdir: Path) -> Iterator[Directory]:
    """A fresh slapd with the entries above, until the block ends (then stopped by its pid)."""
    slapd, slapadd = slapd_binaries(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    admin_password = secrets.token_urlsafe(18)
    _make_tls(workdir / "tls")
    (workdir / "data").mkdir()
    (workdir / "slapd.d").mkdir()
    config = workdir / "config.ldif"
    config.write_text(_config_ldif(workdir, admin_password))
    made = subprocess.run([str(slapadd), "-n0", "-F", str(workdir / "slapd.d"), "-l",
                           str(config)], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, f"slapadd -n0 refused the configuration:\n{made.stderr}"
    port, tls_port = free_port(), free_port()
    log = workdir / "slapd.log"
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [str(slapd), "-F", str(workdir / "slapd.d"), "-d", "0",
             "-h", f"ldap://127.0.0.1:{port}/ ldaps://127.0.0.1:{tls_port}/"],
            stdout=log_file, stderr=subprocess.STDOUT)
    try:
        directory = Directory(workdir, port, tls_port, admin_password, process, log)
        _wait_ready(directory)
        _load(directory)
        yield directory
    finally:
        _stop(process)


def _apparmor_confines_slapd() -> bool:
    try:
        enabled = Path("/sys/module/apparmor/parameters/enabled").read_text().strip() == "Y"
    except OSError:
        return False
    profiles = Path("/sys/kernel/security/apparmor/profiles")
    try:
        loaded = "slapd" in profiles.read_text()
    except OSError:  # unreadable without root: trust the profile's file
        loaded = Path("/etc/apparmor.d/usr.sbin.slapd").exists()
    return enabled and loaded


def _wait_ready(directory: Directory) -> None:
    """Until the administrator's bind succeeds (slapd listens once its databases are open)."""
    import ldap3.core.exceptions as errors

    deadline = Deadline(30)
    while True:
        if directory.process.poll() is not None:
            raise AssertionError(f"slapd exited ({directory.process.returncode}):\n"
                                 f"{directory.log_tail()}")
        try:
            directory.connect().unbind()
            return
        except errors.LDAPException:
            if deadline.passed:
                raise AssertionError(f"slapd did not answer a bind within {deadline.seconds:.0f}"
                                     f" s:\n{directory.log_tail()}") from None
        _pause(directory.process, 0.05)


def _pause(process: subprocess.Popen[bytes], seconds: float) -> None:
    """Wait ``seconds`` for the process to exit: a poll's interval that notices an exit."""
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pass


def _load(directory: Directory) -> None:
    with directory.connect() as conn:
        def add(dn: str, classes: list[str], attributes: dict[str, Any]) -> None:
            conn.add(dn, classes, attributes)

        add(BASE, ["dcObject", "organization"], {"dc": "lab", "o": "Lab"})
        for unit in ("people", "groups", "services", "policies"):
            add(f"ou={unit},{BASE}", ["organizationalUnit"], {"ou": unit})
        add(f"cn=default,ou=policies,{BASE}", ["organizationalRole", "pwdPolicy"], {
            "cn": "default", "pwdAttribute": "userPassword", "pwdLockout": "TRUE",
            "pwdMaxFailure": 0})
        add(PLACEHOLDER, ["organizationalRole"], {"cn": "placeholder"})
        add(directory.service_dn, ["account", "simpleSecurityObject"], {
            "uid": "gpuslice-svc", "userPassword": directory.service_password})
        for uid, attributes in USERS.items():
            add(directory.user_dn(uid), ["inetOrgPerson"], {
                "uid": uid, "userPassword": f"{uid}-password", "displayName": attributes["cn"],
                "givenName": uid.title(), **attributes})
        for group, members in GROUP_MEMBERS.items():
            add(directory.group_dn(group), ["groupOfNames"], {
                "cn": group, "member": [PLACEHOLDER, *map(directory.user_dn, members)]})
    directory.lock("dave")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _config_ldif(workdir: Path, admin_password: str) -> str:
    tls = workdir / "tls"
    return f"""\
dn: cn=config
objectClass: olcGlobal
cn: config
olcPidFile: {workdir}/slapd.pid
olcArgsFile: {workdir}/slapd.args
olcTLSCACertificateFile: {tls}/ca.pem
olcTLSCertificateFile: {tls}/server.pem
olcTLSCertificateKeyFile: {tls}/server.key

dn: cn=module{{0}},cn=config
objectClass: olcModuleList
cn: module{{0}}
olcModulePath: {MODULES}
olcModuleLoad: back_mdb
olcModuleLoad: memberof
olcModuleLoad: ppolicy

dn: cn=schema,cn=config
objectClass: olcSchemaConfig
cn: schema

include: file://{SCHEMAS}/core.ldif
include: file://{SCHEMAS}/cosine.ldif
include: file://{SCHEMAS}/inetorgperson.ldif

dn: olcDatabase={{-1}}frontend,cn=config
objectClass: olcDatabaseConfig
objectClass: olcFrontendConfig
olcDatabase: {{-1}}frontend

dn: olcDatabase={{0}}config,cn=config
objectClass: olcDatabaseConfig
olcDatabase: {{0}}config
olcAccess: {{0}}to * by * none

dn: olcDatabase={{1}}mdb,cn=config
objectClass: olcDatabaseConfig
objectClass: olcMdbConfig
olcDatabase: {{1}}mdb
olcSuffix: {BASE}
olcRootDN: cn=admin,{BASE}
olcRootPW: {admin_password}
olcDbDirectory: {workdir}/data
olcDbMaxSize: 67108864
olcDbIndex: objectClass eq
olcDbIndex: uid eq
olcDbIndex: member eq
olcAccess: {{0}}to attrs=userPassword by self write by anonymous auth by * none
olcAccess: {{1}}to * by self read by users read by * none

dn: olcOverlay={{0}}memberof,olcDatabase={{1}}mdb,cn=config
objectClass: olcOverlayConfig
objectClass: olcMemberOf
olcOverlay: {{0}}memberof
olcMemberOfRefInt: TRUE
olcMemberOfGroupOC: groupOfNames
olcMemberOfMemberAD: member
olcMemberOfMemberOfAD: memberOf

dn: olcOverlay={{1}}ppolicy,olcDatabase={{1}}mdb,cn=config
objectClass: olcOverlayConfig
objectClass: olcPPolicyConfig
olcOverlay: {{1}}ppolicy
olcPPolicyDefault: cn=default,ou=policies,{BASE}
olcPPolicyHashCleartext: TRUE
"""


def _make_tls(folder: Path) -> None:
    """A throwaway CA (ca.pem) and slapd's certificate for 127.0.0.1 and localhost."""
    folder.mkdir(parents=True)
    ca_key, ca_cert = make_ca("gpuslice test LDAP CA")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(_name("127.0.0.1")).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    (folder / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    (folder / "server.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "server.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (folder / "server.key").chmod(0o600)


def make_ca(name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA (its key and certificate): another one makes a "wrong CA" for a test."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(_name(name)).issuer_name(_name(name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
