"""Which of a session image's apps a commit of the session still serves.

A committed image inherits its parent's labels, apps included; but the user may have removed
an app's program in the session (``pip uninstall jupyterlab``, ``rm`` of a script), and an
image that offers an app it cannot start is a broken button in the launcher. So before a
commit the agent looks in the running container, as the session's user (the one apps run
as): an app is kept when its program is found on ``PATH`` (``command -v``) and every absolute
path its command names (``/opt/app/serve.py``, also inside a ``sh -c`` line) exists. An app
without a command (started by the image itself) is kept: there is nothing of ours to check.
"""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Iterable

from gpuslice.agent.runtime.docker import DockerRuntime
from gpuslice.common.images import LABEL_APPS, ImageApp, ImageMeta

log = logging.getLogger(__name__)
CHECK_TIMEOUT = 30.0  # seconds: a few `command -v` and `test -e` in one shell
_SHELLS = frozenset({"sh", "bash", "/bin/sh", "/bin/bash"})


async def apps_label(runtime: DockerRuntime, session_id: str) -> dict[str, str]:
    """``{LABEL_APPS: the apps still served}`` for the commit's labels, or ``{}`` (the
    parent's label stands) when the image declares no app or the container cannot be asked."""
    labels = await runtime.session_image_labels(session_id)
    apps = ImageMeta.from_labels(labels).apps
    if not apps:
        return {}
    try:
        result = await runtime.exec(session_id, ["sh", "-c", check_script(apps)],
                                    timeout=CHECK_TIMEOUT)
    except Exception as exc:  # no shell in the image, or it hung: we cannot tell, say so
        log.warning("session %s: could not check its apps before the commit: %s", session_id, exc)
        return {}
    if result.exit_code != 0:
        log.warning("session %s: the apps check failed (%s): %s", session_id,
                    result.exit_code, result.stderr.strip()[-300:])
        return {}
    gone = set(result.stdout.split())
    kept = [app.to_label() for app in apps if app.name not in gone]
    return {LABEL_APPS: json.dumps(kept)}


def check_script(apps: Iterable[ImageApp]) -> str:
    """A shell line printing the name of each app whose program is missing."""
    checks = []
    for app in apps:
        if not app.command:
            continue
        tests = [f"command -v {shlex.quote(app.command[0])} >/dev/null 2>&1"]
        tests += [f"test -e {shlex.quote(path)}" for path in _paths(app.command)]
        checks.append(f"{{ {' && '.join(tests)}; }} || echo {shlex.quote(app.name)}")
    return "; ".join([*checks, "true"])


def _paths(command: tuple[str, ...]) -> list[str]:
    """Absolute paths the command names (not its placeholders' values)."""
    words = list(command[1:])
    if command[0] in _SHELLS and len(command) > 2 and command[1] == "-c":
        try:
            words = shlex.split(command[2]) + list(command[3:])
        except ValueError:  # an unbalanced quote: the words as they are
            words = command[2].split()
    return [w for w in words if w.startswith("/") and "{" not in w and w != "/"]
