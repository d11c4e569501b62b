"""folders keep their project: a project's folders hold it (``ondelete RESTRICT``, as its
sessions do), where a project's delete used to take its folders' rows with it. The delete
checks for folders first, but one made between that check and the delete was lost (its row
gone, its files left on disk); the database now refuses such a delete instead. No data
changes.

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NAME = "fk_folders_project_id_projects"


def _project_key(ondelete: str) -> None:
    with op.batch_alter_table("folders", schema=None) as batch_op:
        batch_op.drop_constraint(_NAME, type_="foreignkey")
        batch_op.create_foreign_key(_NAME, "projects", ["project_id"], ["id"],
                                    ondelete=ondelete)


def upgrade() -> None:
    _project_key("RESTRICT")


def downgrade() -> None:
    _project_key("CASCADE")
