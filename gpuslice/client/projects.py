"""The SDK's calls for projects and resource groups (a mixin of ``Client``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuslice.client import schemas

if TYPE_CHECKING:
    from gpuslice.common.schemas.nodes import NodePublic
    from gpuslice.common.schemas.projects import GroupPublic, IdpGroups, ProjectPublic


class ProjectCalls:
    """Projects (admins make them; users see theirs) and resource groups; ``Client`` provides
    ``_call``."""

    _call: Callable[..., Any]

    def list_projects(self) -> list[ProjectPublic]:
        """The projects one may launch in (admins: every one but others' personal ones)."""
        return self._call("GET", "/projects", list[schemas.projects.ProjectPublic])

    def get_project(self, name: str) -> ProjectPublic:
        return self._call("GET", f"/projects/{name}", schemas.projects.ProjectPublic)

    def create_project(self, name: str, **quotas: Any) -> ProjectPublic:
        """A project with quotas (``max_gpu``, ``max_cpu``, ``max_mem``, ``max_sessions``,
        ``max_storage``, ``max_gpu_models``), ``groups`` it may use and its sessions'
        ``default_time_limit`` and ``max_time_limit`` (seconds or ``2h``) (admins)."""
        return self._call("POST", "/projects", schemas.projects.ProjectPublic,
                          json={"name": name, **quotas})

    def update_project(self, name: str, **quotas: Any) -> ProjectPublic:
        """Replace a project's quotas and groups: what is not given is no limit (admins)."""
        return self._call("PUT", f"/projects/{name}", schemas.projects.ProjectPublic,
                          json=quotas)

    def rename_project(self, name: str, new_name: str) -> ProjectPublic:
        """Rename a project; all it has stays with it (admins)."""
        return self._call("POST", f"/projects/{name}/rename", schemas.projects.ProjectPublic,
                          json={"name": new_name})

    def delete_project(self, name: str) -> None:
        """Delete a project nothing holds (admins; a 409 names what does)."""
        self._call("DELETE", f"/projects/{name}", None)

    def add_project_member(self, name: str, username: str) -> ProjectPublic:
        return self._call("POST", f"/projects/{name}/members", schemas.projects.ProjectPublic,
                          json={"username": username})

    def remove_project_member(self, name: str, username: str) -> ProjectPublic:
        return self._call("DELETE", f"/projects/{name}/members/{username}",
                          schemas.projects.ProjectPublic)

    def get_idp_groups(self, name: str) -> list[IdpGroups]:
        """The groups at each identity provider whose members are the project's (admins)."""
        return self._call("GET", f"/projects/{name}/idp-groups",
                          list[schemas.projects.IdpGroups])

    def set_idp_groups(self, name: str, provider: str, groups: list[str]) -> list[IdpGroups]:
        """Replace the project's groups at ``provider`` (``ldap`` or ``oidc``; admins)."""
        return self._call("PUT", f"/projects/{name}/idp-groups",
                          list[schemas.projects.IdpGroups],
                          json={"provider": provider, "groups": groups})

    def list_groups(self) -> list[GroupPublic]:
        """Resource groups of the alive nodes, with their free capacity."""
        return self._call("GET", "/groups", list[schemas.projects.GroupPublic])

    def set_node_group(self, node: str, group: str) -> NodePublic:
        """Move a node (name or id) to another resource group (admins)."""
        return self._call("PUT", f"/nodes/{node}/group", schemas.nodes.NodePublic,
                          json={"group": group})
