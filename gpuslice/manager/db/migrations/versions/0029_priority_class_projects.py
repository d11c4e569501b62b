"""priority_class_projects: the projects whose sessions may use a priority class (issue 32).
A class with no rows here is usable by every project, so every existing class stays usable
by all, as before. Rows follow the project's id (a rename keeps them) and go with the class or
the project.

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "priority_class_projects",
        sa.Column("class_id", sa.String(36),
                  sa.ForeignKey("priority_classes.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("project_id", sa.String(36),
                  sa.ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True),
    )
    op.create_index("ix_priority_class_projects_project_id", "priority_class_projects",
                    ["project_id"])


def downgrade() -> None:
    op.drop_index("ix_priority_class_projects_project_id", "priority_class_projects")
    op.drop_table("priority_class_projects")
