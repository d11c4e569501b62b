"""Each API route's action name (``domain.verb``), and the routes whose success is not audited."""

from __future__ import annotations

_PREFIX = "/api/v1"
# Named here where the rule below would say it worse (``actions_of`` for the rest).
NAMES = {
    "POST /auth/login": "auth.login",
    "POST /auth/logout": "auth.logout",
    "POST /auth/password": "auth.password.change",
    "POST /auth/tokens": "auth.token.create",
    "POST /auth/cli-token": "auth.login",  # a login whose token is of kind cli
    "DELETE /auth/tokens/{token_id}": "auth.token.revoke",
    "POST /auth/device": "auth.device.start",
    "POST /auth/device/token": "auth.device.token",
    "POST /auth/device/approve": "auth.device.approve",
    "POST /auth/cli/token": "auth.cli.token",
    "POST /sessions/destroy": "session.destroy",
    "DELETE /sessions/{session_id}": "session.destroy",
    "DELETE /runs/{run}": "run.destroy",
    "POST /agents/register": "node.register",
    "PUT /nodes/{node}/group": "node.set_group",
    "POST /join-tokens": "node.join_token.create",
    "DELETE /join-tokens/{token_id}": "node.join_token.revoke",
    "POST /projects/{name}/members": "project.member.add",
    "DELETE /projects/{name}/members/{username}": "project.member.remove",
    "PUT /projects/{name}/idp-groups": "project.idp_groups.set",
    "PUT /folders/{folder_id}/grants": "folder.share",
    "DELETE /folders/{folder_id}/grants/{user}": "folder.revoke",
    "POST /sessions/{session_id}/apps/{name}/start": "app.start",
    "PUT /model-store/{key}": "model.upload",
    "GET /audit/verify": "audit.verify",
    "GET /audit/export": "audit.export",
}
# Mutating routes whose success changes nothing worth a row: a node's own reports (the
# session's status history has them), and POSTs that only compute an answer.
QUIET = frozenset({
    "POST /agents/me/heartbeat",
    "POST /agents/me/sessions/{session_id}/state",
    "PUT /agents/me/requests/{request_id}",
    "POST /agents/me/sessions/{session_id}/run/saving",
    "POST /sessions/preview",
    "POST /runs/check",
    "POST /models/{name}/presign",
    "POST /agents/me/sessions/{session_id}/models/presign",
})
# Reads that are themselves audited (an admin checking the log leaves a trace).
AUDITED_READS = frozenset({"GET /audit/verify", "GET /audit/export"})
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "update", "DELETE": "delete", "GET": "read"}
_SINGULAR = {"priority-classes": "priority_class", "policies": "policy", "join-tokens":
             "join_token", "ssh-keys": "ssh_key", "model-uploads": "model_upload",
             "aliases": "alias", "agents": "node", "me": ""}


def key_of(method: str, template: str) -> str:
    """``"POST /sessions"`` for the route ``POST /api/v1/sessions``."""
    return f"{method} {template.removeprefix(_PREFIX)}"


def action_of(method: str, template: str) -> str:
    """The action a request on this route is (``session.commit``, ``folder.files.delete``)."""
    key = key_of(method, template)
    if key in NAMES:
        return NAMES[key]
    parts = [p for p in template.removeprefix(_PREFIX).split("/") if p]
    words = [_singular(p) for p in parts if not p.startswith("{")]
    words = [w for w in words if w]
    if method == "POST" and len(parts) > 1 and not parts[-1].startswith("{"):
        return ".".join(words)  # a verb route: /sessions/{id}/commit
    return ".".join([*words, _VERBS.get(method, method.lower())])


def target_of(template: str, params: dict[str, str]) -> tuple[str | None, str | None]:
    """The object a route acts on: its first path parameter, typed by the segment before."""
    parts = [p for p in template.removeprefix(_PREFIX).split("/") if p]
    for before, part in zip(parts, parts[1:], strict=False):
        if part.startswith("{"):
            name = part[1:-1]
            return (_singular(before) or "node"), params.get(name)
    return None, None


def quiet(method: str, template: str) -> bool:
    """Whether a success on this route gets no row."""
    key = key_of(method, template)
    if key in AUDITED_READS:
        return False
    return key in QUIET or method not in ("POST", "PUT", "PATCH", "DELETE")


def _singular(segment: str) -> str:
    if segment in _SINGULAR:
        return _SINGULAR[segment]
    word = segment.replace("-", "_")
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word
