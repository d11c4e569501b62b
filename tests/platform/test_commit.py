"""Session → private image, through the CLI against a real `gpuslice up` and real Docker:
install a package in a running session, commit it, launch a new session from the new image."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.waits import scaled

from .conftest import GPUSLICE, Platform

pytestmark = pytest.mark.docker

SMALL = ["--cpu", "0.25", "--mem", "256m"]


@pytest.fixture
def image_name() -> Iterator[str]:
    name = f"gpuslice-test/env-{uuid.uuid4().hex[:8]}"
    yield name
    committed = f"u/admin/{name}"  # commits go to their owner's namespace
    listed = subprocess.run(["docker", "images", "-q", committed], capture_output=True,
                            text=True, check=False).stdout.split()
    if listed:
        subprocess.run(["docker", "rmi", "-f", *set(listed)], capture_output=True, check=False)


def _install(platform: Platform, session: str) -> str:
    """Install `six` (not in the base image) for the session's user; the module to import.

    pip reaches the host's index through the image's /etc/pip.conf; where no index answers,
    a module written into the user's site-packages stands in for the package.
    """
    pip = platform.cli("session", "exec", "--timeout", "180", session, "--",
                       "pip", "install", "--user", "--no-cache-dir", "six", timeout=240)
    if pip.returncode == 0:
        return "six"
    print(f"pip could not install six ({(pip.stderr + pip.stdout).strip()[-300:]}); "
          "a module stands in")
    platform.ok("session", "exec", session, "--", "sh", "-c",
                'd=$(python3 -m site --user-site) && mkdir -p "$d" '
                '&& echo "VALUE = 42" > "$d/gpuslice_marker.py"')
    return "gpuslice_marker"


def test_commit_install_launch_and_privacy(image_name: str, platform: Platform,
                                           tmp_path: Path) -> None:
    # image_name comes first: its clean-up runs after the platform removed its containers
    platform.ok("session", "create", "--name", "src", *SMALL, "--wait")
    missing = platform.cli("session", "exec", "src", "--", "python3", "-c", "import six")
    assert missing.returncode != 0  # not in the base image
    module = _install(platform, "src")

    out = platform.ok("session", "commit", "src", "--name", image_name)
    reference = f"u/admin/{image_name}:src"  # the owner's namespace, the session's name as tag
    assert f"committed src as {reference}" in out
    assert "storage folders are not part of the image" in out
    listed = {i["name"]: i for i in json.loads(platform.ok("image", "list", "--json"))}
    assert listed[reference]["public"] is False and listed[reference]["owner"] == "admin"
    table = platform.ok("image", "list")
    assert reference in table and "private (admin)" in table
    labels = json.loads(subprocess.run(
        ["docker", "image", "inspect", reference, "--format", "{{json .Config.Labels}}"],
        capture_output=True, text=True, check=True,
    ).stdout)
    assert labels["gpuslice.image.owner"] == "admin"
    assert labels["gpuslice.image.origin-session"] == listed[reference]["origin_session"]
    assert not labels.get("gpuslice.session-id")  # the container's own labels are blanked

    platform.ok("session", "create", "--name", "copy", "--image", reference, *SMALL, "--wait")
    got = platform.ok("session", "exec", "copy", "--", "python3", "-c",
                      f"import {module}; print({module}.__name__)")
    assert got.strip() == module

    other = _other_user(platform, tmp_path)
    assert reference not in other("image", "list", "--json")
    refused = other("session", "create", "--image", reference, *SMALL, expect=1)  # a 404
    assert "unknown image" in refused
    publish = platform.cli("image", "publish", reference)
    assert publish.returncode == 0 and "public" in publish.stdout
    assert "readable by anyone who runs it" in publish.stdout  # it says what it exposes
    assert reference in other("image", "list", "--json")


def _other_user(platform: Platform, tmp_path: Path):  # noqa: ANN202 (a small closure)
    platform.ok("admin", "user", "create", "bob", "--password", "bob-password")
    env = platform.env | {"GPUSLICE_CLIENT_CONFIG": str(tmp_path / "bob.json")}

    def run(*args: str, expect: int = 0, stdin: str | None = None) -> str:
        done = subprocess.run([GPUSLICE, *args], env=env, input=stdin, text=True,
                              capture_output=True, timeout=scaled(120))
        assert done.returncode == expect, f"gpuslice {' '.join(args)}: {done.stderr}{done.stdout}"
        return done.stdout + done.stderr

    run("login", platform.url, "--username", "bob", "--password-stdin", stdin="bob-password\n")
    return run
