"""Image calls of :class:`DockerRuntime`: details for the catalog, removal, session commits.

A mixin, so the runtime keeps one surface (``runtime.commit(...)``) while its module stays
small; ``DockerRuntime`` supplies ``_call`` (one retry on a stale connection, then
``DockerUnavailable``) and ``_container`` (a session's container, or ``SessionNotFound``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiodocker
import aiohttp

from gpuslice.agent.runtime.models import (
    ContainerRuntimeError,
    DockerUnavailable,
    ImageInfo,
    ImagePullError,
)
from gpuslice.agent.runtime.spec import CONTAINER_SSH_DIR
from gpuslice.common.image_refs import repository_and_tag

DROP_TIMEOUT = 30.0  # seconds: one `rm -rf` of a few small files


class ImageOps:
    _call: Callable[[Callable[[aiodocker.Docker], Awaitable[Any]]], Awaitable[Any]]
    _container: Callable[[str], Awaitable[aiodocker.containers.DockerContainer]]

    async def image_details(self) -> list[ImageInfo]:
        """Every tagged image with its id, size and labels, for the manager's catalog."""
        images = await self._call(lambda d: d.images.list())
        return sorted(
            (
                ImageInfo(tag, image.get("Id", ""), int(image.get("Size") or 0),
                          dict(image.get("Labels") or {}))
                for image in images for tag in image.get("RepoTags") or ()
                if tag and tag != "<none>:<none>"
            ),
            key=lambda info: info.tag,
        )

    async def remove_image(self, reference: str) -> bool:
        """Untag/delete an image unless a container uses it; ``False`` if one does (or gone)."""
        try:
            await self._call(lambda d: d.images.delete(reference))
        except aiodocker.DockerError as exc:
            if exc.status in (404, 409):  # gone already, or in use: try again later
                return False
            raise
        return True

    async def session_image_labels(self, session_id: str) -> dict[str, str]:
        """The labels of the image the session's container was made from."""
        container = await self._container(session_id)
        info = await self._call(lambda _d: container.show())
        origin = await self._call(lambda d: d.images.inspect(info["Image"]))
        return dict((origin.get("Config") or {}).get("Labels") or {})

    async def commit(
        self, session_id: str, reference: str, labels: dict[str, str]
    ) -> ImageInfo:
        """Snapshot the session's container as ``reference`` (``repo:tag``).

        The new image keeps its origin image's config and labels, plus ``labels``. Docker merges
        the container's own env and labels into a commit; the session's (slice env, session
        labels) are blanked so a container of the new image starts clean. SSH's state (the
        session's env, keys, host key) is on a tmpfs, which no commit takes; a container made
        before it had one keeps that state in its layer, removed first (``_drop_ssh_state``).
        """
        container = await self._container(session_id)
        info = await self._call(lambda _d: container.show())
        if CONTAINER_SSH_DIR not in ((info.get("HostConfig") or {}).get("Tmpfs") or {}):
            await self._drop_ssh_state(container)
        origin = await self._call(lambda d: d.images.inspect(info["Image"]))
        image_cfg, own_cfg = origin.get("Config") or {}, info.get("Config") or {}
        env = list(image_cfg.get("Env") or [])
        keys = {e.split("=", 1)[0] for e in env}
        env += [f"{k}=" for k in (e.split("=", 1)[0] for e in own_cfg.get("Env") or ())
                if k not in keys]
        image_labels = dict(image_cfg.get("Labels") or {})
        blank = {k: "" for k in own_cfg.get("Labels") or {} if k not in image_labels}
        config = {
            "Env": env, "Labels": {**blank, **image_labels, **labels},
            "Cmd": image_cfg.get("Cmd"), "Entrypoint": image_cfg.get("Entrypoint"),
            "User": image_cfg.get("User") or "", "WorkingDir": image_cfg.get("WorkingDir") or "",
        }
        repository, tag = repository_and_tag(reference)
        done = await self._call(lambda _d: container.commit(
            repository=repository, tag=tag, config=config, message=f"gpuslice {session_id}"
        ))
        new = await self._call(lambda d: d.images.inspect(done["Id"]))
        return ImageInfo(f"{repository}:{tag}", new["Id"], int(new.get("Size") or 0),
                         dict((new.get("Config") or {}).get("Labels") or {}))

    async def _drop_ssh_state(self, container: aiodocker.containers.DockerContainer) -> None:
        """Remove SSH's state from the container's writable layer (as the session's user, who
        wrote it; its next SSH connection writes it again), or refuse the commit."""
        try:
            execution = await self._call(lambda _d: container.exec(
                ["rm", "-rf", CONTAINER_SSH_DIR], stdout=True, stderr=True))
            async with asyncio.timeout(DROP_TIMEOUT):
                async with execution.start(detach=False) as stream:
                    while await stream.read_out() is not None:
                        pass
            done = await self._call(lambda _d: execution.inspect())
        except aiodocker.DockerError:
            return  # no `rm` in the image: nor the shell SSH's setup needs, so nothing to drop
        if int(done.get("ExitCode") or 0) != 0:
            raise ContainerRuntimeError(
                f"could not remove {CONTAINER_SSH_DIR} (SSH's keys and the session's env) "
                "before the commit; nothing was committed")

    async def pull(
        self, reference: str, progress: Callable[[int], Awaitable[None]] | None = None
    ) -> None:
        """Pull ``reference``, calling ``progress(percent)`` as its layers download.

        Raises :class:`ImagePullError` with Docker's message when it cannot be pulled.
        """
        repository, tag = repository_and_tag(reference)
        layers: dict[str, tuple[int, int]] = {}  # layer id -> (bytes done, bytes in all)
        shown = -5  # so that 0 % is shown as soon as the first layer is known
        try:
            async for event in self._pull_stream(repository, tag):
                if event.get("error"):
                    raise ImagePullError(str(event["error"]))
                detail = event.get("progressDetail") or {}
                if event.get("id") and detail.get("total"):
                    layers[event["id"]] = (int(detail.get("current") or 0), int(detail["total"]))
                done = sum(c for c, _t in layers.values())
                total = sum(t for _c, t in layers.values())
                percent = min(99, done * 100 // total) if total else 0
                if progress is not None and percent >= shown + 5:
                    shown = percent
                    await progress(percent)
        except aiodocker.DockerError as exc:
            raise ImagePullError(str(exc.message)) from None
        except (aiohttp.ClientError, OSError) as exc:  # the stream opens lazily, outside _call
            raise DockerUnavailable(f"Docker Engine unreachable: {exc}") from exc

    async def _pull_stream(self, repository: str, tag: str) -> AsyncIterator[dict[str, Any]]:
        stream = await self._call(
            lambda d: _started(d.images.pull(repository, tag=tag, stream=True))
        )
        async for event in stream:
            yield event


async def _started(stream: Any) -> Any:
    # images.pull(stream=True) answers an async iterator at once; _call wants an awaitable
    return stream
