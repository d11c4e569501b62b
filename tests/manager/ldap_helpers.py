"""A manager's settings with the test directory (``ldap_directory``) as its ``auth.ldap``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuslice.manager.settings import ManagerSettings, load_settings
from tests.idp.ldap import Directory
from tests.manager.conftest import IMAGE


def ldap_settings(directory: Directory, **more: Any) -> dict[str, Any]:
    """``auth.ldap``: the service account searches ou=people; gpu-users may sign in."""
    return {"url": directory.url, "bind_dn": directory.service_dn,
            "bind_password": directory.service_password, "user_base": directory.people_dn,
            "allowed_groups": ["gpu-users"], "timeout": 5, **more}


def manager_settings(tmp_path: Path, database_url: str, directory: Directory,
                     **more: Any) -> ManagerSettings:
    return load_settings(
        data_dir=tmp_path / "data", database={"url": database_url},
        sessions={"allowed_images": [IMAGE]},
        auth={"password_check_nice": 0, "ldap": ldap_settings(directory, **more)})
