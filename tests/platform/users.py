"""Users of a platform other than its admin, as the CLI tests have them: each logged in
with a CLI configuration of their own."""

from __future__ import annotations

import json

from tests.platform.conftest import Platform


def as_user(platform: Platform, name: str) -> Platform:
    """A second user of the same platform, logged in with their own CLI config."""
    created = json.loads(platform.ok("admin", "user", "create", name, "--json"))
    env = platform.env | {"GPUSLICE_CLIENT_CONFIG": str(platform.data_dir / f"{name}.json")}
    user = Platform(platform.url, platform.data_dir, platform.node, env)
    user.ok("login", platform.url, "--username", name, "--password-stdin",
            stdin=created["password"] + "\n")
    return user
