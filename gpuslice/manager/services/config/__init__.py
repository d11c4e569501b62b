"""The platform's configuration as one JSON document: export, and an idempotent import.

Invariants:

- **By name, never by id**: policies, users, aliases, images, presets, projects (members by
  username), priority classes (the projects that may use them by name) and nodes' resource
  groups (by node name) are matched by their names, so
  a document moves between clusters and importing it twice changes nothing the second time.
- **All or nothing**: an import is one transaction; the first invalid entry (a policy or owner
  that does not exist, a duplicate, a malformed reference) is a 422 naming it
  (``users.3.policy``) and nothing is written. ``dry_run`` does the same work and rolls back.
- **No secret leaves unless asked**: password hashes are exported only with
  ``password_hashes``; an imported user without one cannot log in until an admin sets a
  password (the answer's notes say who).
- **An admin remains**: an import that would leave no active admin is refused.
- **One odd row never fails an export**: a row today's rules refuse (stored before a limit
  existed) is left out of its section and named in the document's ``left_out``.
- Sections (`sections.SECTIONS`) are merged in order, each after those it refers to.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from gpuslice.common.schemas.config import ConfigDocument, ConfigImportResult
from gpuslice.common.schemas.users import Role
from gpuslice.manager.db.models import UserRow
from gpuslice.manager.errors import InvalidRequest
from gpuslice.manager.services.config.projects import NodeGroups, Projects
from gpuslice.manager.services.config.sections import SECTIONS as BASE_SECTIONS
from gpuslice.manager.services.config.sections import Outcome, PriorityClasses, Section

# Projects after users (they name members); groups name nodes, which no section makes;
# priority classes after projects (a class names the projects that may use it).
SECTIONS: tuple[Section, ...] = (*BASE_SECTIONS, Projects(), NodeGroups(), PriorityClasses())


async def export_config(db: AsyncSession, *, password_hashes: bool = False) -> ConfigDocument:
    """The whole configuration, as of now."""
    left_out: list[str] = []
    values = {s.name: await s.export(db, password_hashes=password_hashes, left_out=left_out)
              for s in SECTIONS}
    await db.commit()
    return ConfigDocument(exported_at=datetime.now(UTC), left_out=left_out, **values)


async def import_config(
    db: AsyncSession, doc: ConfigDocument, *, dry_run: bool = False
) -> ConfigImportResult:
    """Merge ``doc`` into the configuration in one transaction (rolled back for ``dry_run``)."""
    outcome = Outcome()
    try:
        for section in SECTIONS:
            await section.merge(db, doc, outcome)
        admins = await db.scalar(select(func.count()).select_from(UserRow).where(
            UserRow.role == Role.ADMIN, UserRow.is_active.is_(True)))
        if not admins:
            raise InvalidRequest("users: the import would leave no active admin",
                                 field="users")
    except BaseException:
        await db.rollback()
        raise
    if dry_run:
        await db.rollback()
    else:
        await db.commit()
    sections = {s.name: outcome.sections.get(s.name) for s in SECTIONS}
    return ConfigImportResult.model_validate({
        "dry_run": dry_run, "notes": outcome.notes,
        "sections": {k: (v.model_dump() if v else {}) for k, v in sections.items()},
    })
