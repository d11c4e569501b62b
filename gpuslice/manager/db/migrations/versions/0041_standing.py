"""users.standing_until (issue 42): an SSO user's API and CLI tokens end when it has passed
(auth.oidc.offline_max_age after the last sign-in or re-check at the provider).

SSO users made before get 30 days (the setting's default) from the upgrade, so a user already
removed at the provider loses their tokens then rather than never.

Revision ID: 0041
Revises: 0040
Create Date: 2026-12-08
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision: str = "0041"
down_revision: str | None = "0040"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_USERS = sa.table(
    "users", sa.column("source", sa.String),
    sa.column("standing_until", sa.DateTime(timezone=True)),
)


def upgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(sa.Column("standing_until", sa.DateTime(timezone=True),
                                      nullable=True))
    bind = op.get_bind()
    until = datetime.now(UTC) + timedelta(days=30)
    if bind.dialect.name == "sqlite":  # stored naive there (as the models' UTCDateTime does)
        until = until.replace(tzinfo=None)
    bind.execute(sa.update(_USERS).where(_USERS.c.source == "oidc").values(standing_until=until))


def downgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("standing_until")
