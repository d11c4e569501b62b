"""What a store's objects hold beyond the catalog, found and deleted (stores taking direct
uploads: S3).

A presigned PUT URL writes one object of its file's announced size, once (s3.py), until it
expires. Its model may be deleted (or its upload purged) before then: the key is free again,
and a PUT puts there bytes no row counts. A store that ignores the signed length could also
hold a larger object than announced. Each pass of the model-uploads loop lists the store,
then the catalog, and deletes every object that is not a file of an upload in progress or of
a ready version, or that is larger than that file was announced; so the model quota counts
everything the store holds for a user, give or take one pass.
"""

from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.manager.db.models import ModelRow
from gpuslice.manager.services.models.store import ModelStore, Stored

log = logging.getLogger(__name__)
USERS = "users/"


async def sweep_store(db: AsyncSession, store: ModelStore) -> int:
    """Delete the objects no upload or version holds, or larger than announced; how many."""
    if not store.direct_uploads:
        return 0  # only the manager writes a local store
    found = await store.listing(USERS)  # first: an object PUT later has its row by then
    announced: dict[tuple[str, str, str], dict[str, int]] = {}
    for row in await db.scalars(select(ModelRow).where(
            ModelRow.status.in_(("uploading", "ready")))):  # catalog.UPLOADING, READY
        announced[(row.owner_id, row.name, row.version)] = {
            f["path"]: int(f["size"]) for f in row.file_list}
    await db.commit()
    extra = [s for s in found if _unheld(s, announced)]
    if extra:
        await store.delete_keys([s.key for s in extra])
        log.warning("model store: deleted %d object(s) no model holds (%d bytes), written "
                    "with upload URLs after their model was gone or past their size",
                    len(extra), sum(s.size for s in extra))
    return len(extra)


def _unheld(stored: Stored, announced: dict[tuple[str, str, str], dict[str, int]]) -> bool:
    parts = stored.key.split("/", 4)  # users/<owner>/<name>/<version>/<path>
    if len(parts) != 5:
        return True
    files = announced.get((parts[1], parts[2], parts[3]))
    size = None if files is None else files.get(parts[4])
    return size is None or stored.size > size
