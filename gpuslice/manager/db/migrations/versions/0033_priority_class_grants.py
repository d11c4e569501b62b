"""priority_classes.any_project: using a class is an explicit grant (F8 of the 2026-12 security
review). A class granted to no project and not to every project is its admins' alone; before,
a class with no project rows was every project's. Classes stored before keep what they meant:
those limited to no project (and the default) get ``any_project`` true; limited ones stay
limited. Downgrade drops the column (a class that was admins' alone becomes every project's).

Revision ID: 0033
Revises: 0031
Create Date: 2026-12-14
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0033"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ALTER TABLE, never batch mode: SQLite's batch copies the table and drops the old one,
# and with foreign keys on that drop takes every priority_class_projects row with it.
def upgrade() -> None:
    op.add_column("priority_classes", sa.Column("any_project", sa.Boolean(), nullable=False,
                                                server_default=sa.false()))
    op.execute(
        "UPDATE priority_classes SET any_project = true WHERE is_default OR id NOT IN "
        "(SELECT class_id FROM priority_class_projects)"
    )


def downgrade() -> None:
    op.drop_column("priority_classes", "any_project")  # SQLite 3.35 or later
