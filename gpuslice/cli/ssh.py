"""SSH into sessions with plain OpenSSH: `gpuslice ssh-key`, `ssh-config`, `ssh-proxy`, and
`gpuslice session ssh` (registered by ``cli/session.py``).

OpenSSH reaches a session through ``ProxyCommand``: `gpuslice ssh-proxy S.gpuslice` opens the
session's SSH stream on the manager (as the logged-in user) and joins it to its stdin and stdout;
the session's SSH server accepts only the keys its owner registered. A name is one of the
caller's own sessions (`NAME.OWNER.gpuslice` or the id reach another user's, as
``Client.get_session`` resolves them).

Host keys are pinned per session, not per name (a name is reused by the next session of that
name): each session has a known-hosts file of its own, ``KNOWN_HOSTS/sessions/ID``, where ssh
records the key on the first connection (``accept-new``) and refuses a changed one after.
The block's ``UserKnownHostsFile`` is ``KNOWN_HOSTS/%h``, a link that ``ssh-proxy`` points at
the session it resolved before it opens the stream, so before ssh reads it.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from gpuslice.cli.output import (
    CliError,
    JsonOpt,
    ago,
    console,
    friendly,
    print_json,
    session_client,
    table,
)
from gpuslice.client import ApiError, Client
from gpuslice.client.config import config_path

SUFFIX = ".gpuslice"
USER = "work"  # the platform images' user (gpuslice/base); others: ssh USER@S.gpuslice
BEGIN, END = "# >>> gpuslice ssh-config >>>", "# <<< gpuslice ssh-config <<<"
SSHD = "/usr/sbin/sshd"
# What ssh-proxy takes for a host: a session's name or id, and NAME.OWNER (OpenSSH >= 9.6 refuses
# shell characters in %h before any ProxyCommand runs; older ones do not, hence the quotes).
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")

keys_app = typer.Typer(help="Your SSH public keys: the ones your sessions' SSH servers accept.",
                       no_args_is_help=True)


@keys_app.command("add")
@friendly
def key_add(
    path: Annotated[Path, typer.Argument(help="A public key file, e.g. ~/.ssh/id_ed25519.pub "
                                              "(- reads standard input).")],
    name: Annotated[str | None, typer.Option(help="Its name (default: its comment).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Register an SSH public key (the .pub file; never the private key)."""
    text = sys.stdin.read() if str(path) == "-" else _read_key_file(path)
    with Client.from_config() as client:
        key = client.add_ssh_key(text, name)
    if as_json:
        print_json(key.model_dump(mode="json"))
        return
    console.print(f"added SSH key {key.name} ({key.type} {key.fingerprint})", markup=False)


@keys_app.command("list")
@friendly
def key_list(as_json: JsonOpt = False) -> None:
    """Your SSH public keys."""
    with Client.from_config() as client:
        keys = client.list_ssh_keys()
    if as_json:
        print_json([k.model_dump(mode="json") for k in keys])
        return
    table(["id", "name", "type", "fingerprint", "added"],
          [(k.id, k.name, k.type, k.fingerprint, ago(k.created_at)) for k in keys])


@keys_app.command("remove")
@friendly
def key_remove(ref: Annotated[str, typer.Argument(help="Its id, fingerprint or name.")]) -> None:
    """Remove one of your SSH keys (connections already open stay)."""
    with Client.from_config() as client:
        client.remove_ssh_key(ref)
    console.print(f"removed SSH key {ref}", markup=False)


@friendly
def ssh_config(
    install: Annotated[bool, typer.Option(
        "--install", help="Write the block into ~/.ssh/config (replacing an earlier one).")]
    = False,
) -> None:
    """OpenSSH's `Host *.gpuslice` block: ssh, scp, rsync, VS Code reach session S as S.gpuslice.

    Printed, or written first in ~/.ssh/config with --install. Its ProxyCommand is this very
    gpuslice, logged in as you; the user is `work`, the platform images' user. A name is one of
    your own sessions; another user's (admins, with apps.admin_access) is NAME.OWNER.gpuslice
    or ID.gpuslice. Each session's host key is pinned (recorded on the first connection,
    refused when it changes). Needs OpenSSH 8.4 or later; 9.6 or later refuses host names
    that would reach a shell."""
    block = config_block()
    if not install:
        sys.stdout.write(block)
        return
    path = Path.home() / ".ssh" / "config"
    install_block(path, block)
    console.print(f"wrote the Host *{SUFFIX} block into {path}: try `ssh SESSION{SUFFIX}`",
                  markup=False)


@friendly
def ssh_proxy(
    host: Annotated[str, typer.Argument(help=f"The session: SESSION{SUFFIX} as ssh passes %h "
                                             "(SESSION: your session's name, its id, or "
                                             "NAME.OWNER), or just the name or id.")],
    known_hosts: Annotated[Path | None, typer.Option(
        help="Point KNOWN_HOSTS/HOST at the session's own known-hosts file before connecting "
             "(the block's UserKnownHostsFile is KNOWN_HOSTS/%h).")] = None,
) -> None:
    """OpenSSH's ProxyCommand: stdin and stdout become the session's SSH connection."""
    from gpuslice.client.stream import pipe_stdio

    ref = session_ref(host)
    with session_client() as client:
        session = client.get_session(ref)
        if known_hosts is not None:
            pin(known_hosts, host, session.id)
        stream = client.ssh_stream(session.id)
    pipe_stdio(stream)


def session_ssh(ref: str, command: list[str], identity: Path | None) -> int:
    """`gpuslice session ssh`: run OpenSSH's ssh to the session; its exit status."""
    with session_client() as client:
        session = client.get_session(ref)
        if not client.list_ssh_keys():
            raise CliError("you have no SSH key registered: add one with `gpuslice ssh-key add "
                           "~/.ssh/id_ed25519.pub` (make one with `ssh-keygen -t ed25519`)")
        user = _session_user(client, session.id, session.image, session.name)
    argv = ["ssh", *_ssh_options(session.id), "-l", user]
    if identity is not None:
        argv += ["-i", str(identity), "-o", "IdentitiesOnly=yes"]
    argv += ["--", f"{session.name or session.id}{SUFFIX}", *command]
    try:
        os.execvp("ssh", argv)
    except FileNotFoundError:
        raise CliError("OpenSSH's ssh is not installed here (Debian: apt install "
                       "openssh-client)") from None
    return 255  # not reached: exec replaced this process


def config_block() -> str:
    """The ``Host *.gpuslice`` block, with this very gpuslice as the ProxyCommand."""
    known = known_hosts_dir()
    proxy = proxy_command("'%h'", known)  # quoted: %h is whatever host name ssh was given
    lines = [
        BEGIN,
        f"# Your sessions by name or id: ssh SESSION{SUFFIX} (scp, sftp, rsync, VS Code alike);",
        f"# another user's: ssh NAME.OWNER{SUFFIX} or ID{SUFFIX}. Needs OpenSSH 8.4 or later",
        "# (9.6 or later refuses host names that would reach the ProxyCommand's shell).",
        f"Host *{SUFFIX}",
        f"    ProxyCommand {proxy}",
        f"    User {USER}",
        "    # Host keys are pinned per session: ssh-proxy points this file at the session's",
        "    # own before connecting; a new session of a reused name gets a file of its own.",
        f"    UserKnownHostsFile {_config_word(str(known / '%h'))}",
        "    StrictHostKeyChecking accept-new",
        "    UpdateHostKeys no",
        "    LogLevel ERROR",
        "    ServerAliveInterval 30",
        END,
    ]
    return "\n".join(lines) + "\n"


def proxy_command(host: str, known_hosts: Path | None = None) -> str:
    """The command line that runs `gpuslice ssh-proxy HOST` from anywhere: this gpuslice, and
    the CLI configuration file when one is named by the environment. ``host`` goes in as
    given: quote it (``'%h'``, or ``shlex.quote`` of a value)."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "gpuslice" and argv0.exists():
        parts = [str(argv0.resolve())]
    else:
        parts = [sys.executable, "-m", "gpuslice.cli.main"]
    parts.append("ssh-proxy")
    if known_hosts is not None:
        parts += ["--known-hosts", str(known_hosts)]
    command = " ".join(shlex.quote(p) for p in parts) + f" {host}"
    env = [f"{name}={shlex.quote(os.environ[name])}" for name in
           ("GPUSLICE_CLIENT_CONFIG", "PYTHONPATH") if os.environ.get(name)]
    line = ("env " + " ".join(env) + " " if env else "") + command
    return line.replace("%", "%%").replace("%%h", "%h")  # ssh expands % in ProxyCommand


def known_hosts_dir() -> Path:
    """Where each session's pinned host keys are kept: beside the CLI's login."""
    return config_path().parent / "known_hosts"


def session_ref(host: str) -> str:
    """What ``Client.get_session`` takes for an ssh host: NAME.OWNER.gpuslice is OWNER/NAME
    (session names have no dots), NAME.gpuslice or ID.gpuslice as they are."""
    if not _HOST.match(host):
        raise CliError(f"{host!r} is not a session's host name: SESSION{SUFFIX}, where "
                       "SESSION is a session's name or id, or NAME.OWNER", 2)
    name, dot, owner = host.removesuffix(SUFFIX).partition(".")
    return f"{owner}/{name}" if dot else name


def pin(known_hosts: Path, host: str, session_id: str) -> None:
    """Point ``known_hosts/host`` at the session's own known-hosts file (made empty the
    first time), replacing in one step whatever it pointed at."""
    own = known_hosts / "sessions" / session_id
    own.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.close(os.open(own, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
    link = known_hosts / host
    tmp = known_hosts / f".{host}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(Path("sessions") / session_id)
    tmp.replace(link)


def install_block(path: Path, block: str) -> None:
    """Put ``block`` first in ``path`` (ssh takes the first value it reads for an option),
    replacing an earlier gpuslice block; the rest of the file is kept as it was."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    text = path.read_text() if path.exists() else ""
    start, end = text.find(BEGIN), text.find(END)
    if start >= 0 and end > start:
        text = text[:start] + text[end + len(END):].lstrip("\n")
    tmp = path.with_suffix(".gpuslice-tmp")
    tmp.write_text(block + ("\n" + text if text else ""))
    tmp.chmod(0o600)
    tmp.replace(path)


def _ssh_options(session_id: str) -> list[str]:
    known = known_hosts_dir()
    pinned = known / "sessions" / session_id
    pinned.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return ["-o", f"ProxyCommand={proxy_command(shlex.quote(session_id))}",
            "-o", f"UserKnownHostsFile={_config_word(str(pinned))}",
            "-o", "StrictHostKeyChecking=accept-new", "-o", "UpdateHostKeys=no",
            "-o", "LogLevel=ERROR"]


def _config_word(text: str) -> str:
    """``text`` as one ssh_config argument: quoted when it has a space, ``%`` doubled
    except in ``%h``."""
    text = text.replace("%", "%%").replace("%%h", "%h")
    return f'"{text}"' if any(c.isspace() for c in text) else text


def _session_user(client: Client, session_id: str, image: str, name: str | None) -> str:
    """The session's user, once it is known that its image has an SSH server (else the
    one-line reason)."""
    try:
        probe = client.exec(session_id, ["/bin/sh", "-c", f"test -x {SSHD} && id -un"], 30)
    except ApiError as err:
        raise CliError(err.message) from None
    if probe.exit_code != 0 or not probe.stdout.strip():
        raise CliError(f"image {image} has no SSH server (sshd); use `gpuslice session shell "
                       f"{name or session_id}` for a shell, or an image built FROM "
                       "gpuslice/base")
    return probe.stdout.strip().splitlines()[-1]


def _read_key_file(path: Path) -> str:
    try:
        if path.stat().st_size > 64 * 1024:
            raise CliError(f"{path}: too big for a public key (a .pub file is one line)", 2)
        return path.read_text(errors="replace")
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}", 2) from None
