"""A Docker registry's images, through its HTTP API v2 (no Docker involved).

``/v2/_catalog`` lists repositories (paged by ``Link``), ``/v2/<repo>/tags/list`` their tags;
for each tag the manifest names the image config, whose digest is the image id nodes will report
and whose ``Labels`` are the image's metadata. Network only: the caller applies the result to
the database afterwards (no I/O inside a transaction).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

import httpx

from gpuslice.manager.settings import RegistrySettings

MANIFESTS = ", ".join((
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
))
PAGE = 100


class RegistryError(Exception):
    """The registry could not be read; the message says what failed."""


@dataclass(frozen=True, slots=True)
class RegistryImage:
    reference: str  # host[:port]/repo:tag, as nodes will name it once pulled
    image_id: str | None = None
    size: int | None = None
    labels: dict[str, str] = field(default_factory=dict)


async def list_images(
    settings: RegistrySettings, transport: httpx.AsyncBaseTransport | None = None
) -> list[RegistryImage]:
    """Every tagged image of the registry (at most ``settings.max_tags``)."""
    if settings.url is None:
        return []
    auth = None
    if settings.username is not None and settings.password is not None:
        auth = httpx.BasicAuth(settings.username, settings.password.get_secret_value())
    host = urlsplit(settings.url).netloc
    async with httpx.AsyncClient(
        base_url=settings.url, auth=auth, timeout=settings.timeout, transport=transport
    ) as client:
        found: list[RegistryImage] = []
        try:
            for repository in await _repositories(client):
                for tag in await _tags(client, repository):
                    if len(found) >= settings.max_tags:
                        return found
                    found.append(await _image(client, host, repository, tag))
        except httpx.HTTPError as err:
            raise RegistryError(f"registry {settings.url}: {err}") from None
        return found


async def _repositories(client: httpx.AsyncClient) -> list[str]:
    names: list[str] = []
    url: str | None = f"/v2/_catalog?n={PAGE}"
    while url is not None:
        answer = await client.get(url)
        answer.raise_for_status()
        names += [str(n) for n in answer.json().get("repositories") or []]
        url = _next(answer)
    return names


async def _tags(client: httpx.AsyncClient, repository: str) -> list[str]:
    answer = await client.get(f"/v2/{repository}/tags/list")
    if answer.status_code == 404:
        return []  # deleted between the catalog and now
    answer.raise_for_status()
    return sorted(str(t) for t in answer.json().get("tags") or [])


async def _image(
    client: httpx.AsyncClient, host: str, repository: str, tag: str
) -> RegistryImage:
    """The tag with its image id, size and labels; only its name when those cannot be read."""
    reference = f"{host}/{repository}:{tag}"
    manifest = await client.get(
        f"/v2/{repository}/manifests/{tag}", headers={"Accept": MANIFESTS}
    )
    if manifest.status_code != 200:
        return RegistryImage(reference)
    body = manifest.json()
    config = body.get("config") or {}
    digest = config.get("digest")
    if not isinstance(digest, str):
        return RegistryImage(reference)  # a manifest list or an old schema: name only
    size = sum(int(layer.get("size") or 0) for layer in body.get("layers") or [])
    blob = await client.get(f"/v2/{repository}/blobs/{digest}")
    labels = {}
    if blob.status_code == 200:
        raw = (blob.json().get("config") or {}).get("Labels") or {}
        labels = {str(k): str(v) for k, v in raw.items()}
    return RegistryImage(reference, digest, size or None, labels)


def _next(answer: httpx.Response) -> str | None:
    link = answer.headers.get("Link")
    if not link or 'rel="next"' not in link:
        return None
    target = link.split(";", 1)[0].strip().strip("<>")
    return urljoin(str(answer.url), target)
