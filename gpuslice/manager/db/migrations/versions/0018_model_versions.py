"""models.number: a model name keeps its versions (1, 2, …) instead of a new save replacing
the older one; runs.code_dir: each run of a name keeps its own code directory in the owner's
`runs` folder (`<name>`, then `<name>.2`, …) instead of reusing `runs/<name>/`

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MODELS = sa.table(
    "models", sa.column("id", sa.String), sa.column("owner_id", sa.String),
    sa.column("name", sa.String), sa.column("status", sa.String),
    sa.column("number", sa.Integer), sa.column("completed_at", sa.DateTime),
)


def upgrade() -> None:
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.add_column(sa.Column("number", sa.Integer))
    _number_ready_saves()
    op.create_index("ux_models_owner_name_number", "models", ["owner_id", "name", "number"],
                    unique=True)
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("code_dir", sa.String(80)))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("code_dir")
    op.drop_index("ux_models_owner_name_number", table_name="models")
    with op.batch_alter_table("models", schema=None) as batch_op:
        batch_op.drop_column("number")


def _number_ready_saves() -> None:
    """Ready saves so far become versions 1, 2, … of their name, oldest first (normally one
    per name: a save used to replace the older one)."""
    bind = op.get_bind()
    rows = bind.execute(
        sa.select(_MODELS.c.id, _MODELS.c.owner_id, _MODELS.c.name)
        .where(_MODELS.c.status == "ready")
        .order_by(_MODELS.c.owner_id, _MODELS.c.name, _MODELS.c.completed_at, _MODELS.c.id)
    ).all()
    counts: dict[tuple[str, str], int] = {}
    for model_id, owner_id, name in rows:
        number = counts[(owner_id, name)] = counts.get((owner_id, name), 0) + 1
        bind.execute(sa.update(_MODELS).where(_MODELS.c.id == model_id).values(number=number))
