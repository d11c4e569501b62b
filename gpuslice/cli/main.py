"""The `gpuslice` command: every command group and top-level command, imported when it runs.

Each entry names the module of its command (see the rule in `gpuslice.cli`) and its line in
`gpuslice --help`, which therefore imports none of them.
"""

from __future__ import annotations

import sys

import typer

from gpuslice.cli._lazy import Lazy, lazy_group
from gpuslice.cli.output import CliError

# In the order `gpuslice --help` lists them.
COMMANDS = {
    "up": Lazy(
        "gpuslice.cli.up:up",
        "Run everything on this machine: manager (SQLite) and a local agent, in one command.",
    ),
    "login": Lazy(
        "gpuslice.cli.login:login",
        "Log in and keep a token for this machine in ~/.config/gpuslice (mode 0600).",
    ),
    "logout": Lazy(
        "gpuslice.cli.login:logout",
        "Revoke this machine's token on the manager and remove it from ~/.config/gpuslice.",
    ),
    "auth": Lazy("gpuslice.cli.auth:app", "Your login on this machine."),
    "password": Lazy(
        "gpuslice.cli.password:password",
        "Change your password; your other logins end (API tokens too, unless kept).",
    ),
    "version": Lazy("gpuslice.cli.version:version", "Print the version."),
    "session": Lazy(
        "gpuslice.cli.session:app",
        "Compute sessions: create, list, show, stats, logs, destroy, exec, shell, ssh, "
        "port-forward.",
    ),
    "app": Lazy("gpuslice.cli.app:app", "A session's apps: list them, open one in a browser."),
    "run": Lazy(
        "gpuslice.cli.run:app",
        "Run a training script on a GPU slice; list, show, logs, stop, delete runs.",
    ),
    "folder": Lazy(
        "gpuslice.cli.folder:app",
        "Storage folders: create, list, upload, download, share, delete.",
    ),
    "model": Lazy(
        "gpuslice.cli.model:app", "Your models: list, show, download, upload, delete, URLs."
    ),
    "image": Lazy("gpuslice.cli.image:app", "Session images: build, list, aliases."),
    "top": Lazy(
        "gpuslice.cli.top:top",
        "Live, per node and GPU: who holds which slice and how much they use.",
    ),
    "usage": Lazy(
        "gpuslice.cli.usage:usage",
        "Usage per user (or project) and UTC day: fGPU-hours, GPU memory, CPU-hours, sessions.",
    ),
    "node": Lazy("gpuslice.cli.node:app", "Nodes and their GPUs (admins)."),
    "admin": Lazy(
        "gpuslice.cli.admin:app",
        "Users, policies, projects, join tokens, configuration, backups, the audit log (admins).",
    ),
    "token": Lazy("gpuslice.cli.token:app", "Your API tokens."),
    "activity": Lazy(
        "gpuslice.cli.admin_audit:activity",
        "Your own security log: logins, failed logins on your name, tokens, password changes.",
    ),
    "notify": Lazy(
        "gpuslice.cli.notify:app",
        "Notifications of your sessions' events: webhooks, Slack, e-mail.",
    ),
    "ssh-key": Lazy(
        "gpuslice.cli.ssh:keys_app",
        "Your SSH public keys: the ones your sessions' SSH servers accept.",
    ),
    "ssh-config": Lazy(
        "gpuslice.cli.ssh:ssh_config",
        "OpenSSH's `Host *.gpuslice` block: ssh, scp, rsync, VS Code reach session S as "
        "S.gpuslice.",
    ),
    "ssh-proxy": Lazy(
        "gpuslice.cli.ssh:ssh_proxy",
        "OpenSSH's ProxyCommand: stdin and stdout become the session's SSH connection.",
    ),
    "service": Lazy(
        "gpuslice.cli.service:app",
        "Run the manager, an agent or the whole platform (up) as a systemd service.",
    ),
    "manager": Lazy("gpuslice.cli.manager:app", "Run the manager alone (multi-node installs)."),
    "agent": Lazy("gpuslice.cli.agent:app", "Run a node agent alone (multi-node installs)."),
}

app = typer.Typer(
    name="gpuslice",
    help="Share GPU servers: fractional-GPU compute sessions with a fair scheduler.",
    cls=lazy_group(COMMANDS),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


# Typer makes a group only of a Typer with commands, groups or a callback; this one's commands
# are all lazy, hence this callback, which does nothing.
@app.callback()
def _root() -> None:
    pass


def main() -> None:
    try:
        app()
    except CliError as err:  # raised outside a command (should not happen, but stay clean)
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(err.exit_code) from None


if __name__ == "__main__":
    main()
