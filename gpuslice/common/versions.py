"""Which versions of gpuslice can talk to each other: the REST API's revision.

Every manager answer carries its version and API revision in two headers. The CLI and the SDK
(once per client) and agents (once per connection) compare the revision with their own and, when
they differ, stop with one sentence naming both versions, rather than failing later on an answer
they cannot read. The revision moves only when a change would break a client or an agent of the
previous one; a manager older than these headers speaks revision 1.

Standard library only: the CLI reads it on every command.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuslice import __version__

API_REVISION = 1
VERSION_HEADER = "X-Gpuslice-Version"
API_HEADER = "X-Gpuslice-Api"
_UNSTATED = 1  # what a manager that states no revision speaks


def headers() -> dict[str, str]:
    """What the manager says about itself on every answer."""
    return {VERSION_HEADER: __version__, API_HEADER: str(API_REVISION)}


def mismatch(answer_headers: Mapping[str, str], url: str, *, agent: bool = False) -> str | None:
    """``None`` when the manager that sent ``answer_headers`` speaks our API revision; else one
    line naming both versions and what to do (``agent``: said by a node agent)."""
    raw = answer_headers.get(API_HEADER)
    try:
        theirs = int(raw) if raw is not None else _UNSTATED
    except ValueError:
        theirs = -1
    if theirs == API_REVISION:
        return None
    version = answer_headers.get(VERSION_HEADER) or "older than 0.1.0"
    manager = f"the manager at {url} runs gpuslice {version} (API revision {raw or _UNSTATED})"
    ours = f"gpuslice {__version__} (API revision {API_REVISION})"
    wanted = answer_headers.get(VERSION_HEADER)
    install = f"`pip install gpuslice=={wanted}`" if wanted else "the manager's version"
    if agent:
        return f"{manager}, this agent is {ours}: run {install} on this node, or upgrade both"
    if theirs > API_REVISION:
        return f"{manager}, this is {ours}: upgrade gpuslice here ({install})"
    return (f"{manager}, this is {ours}: install the manager's version here ({install}), or "
            "ask an admin to upgrade the manager")
