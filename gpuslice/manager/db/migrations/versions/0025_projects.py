"""projects: teams with quotas and resource groups (issue 32). Every user gets a personal
project (``~<username>``, only they launch in it), every session of theirs runs in it, and every
node keeps its group (``nodes.pool``, "default" unless its agent said another). Sessions asked
for no group before groups existed: their ``pool`` "default" becomes "" (any group their
project may use), so a session still waiting follows its nodes into the groups an admin makes.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-26
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    projects = op.create_table(
        "projects",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(80), nullable=False),
        sa.Column("description", sa.String(255), nullable=False),
        sa.Column("personal_of", sa.String(36), nullable=True),
        sa.Column("max_sessions", sa.Integer(), nullable=True),
        sa.Column("max_gpu", sa.BigInteger(), nullable=True),
        sa.Column("max_cpu", sa.BigInteger(), nullable=True),
        sa.Column("max_mem", sa.BigInteger(), nullable=True),
        sa.Column("max_storage", sa.BigInteger(), nullable=True),
        sa.Column("max_gpu_models", sa.JSON(), nullable=True),
        sa.Column("groups", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["personal_of"], ["users.id"],
                                name=op.f("fk_projects_personal_of_users"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_projects")),
        sa.UniqueConstraint("name", name=op.f("uq_projects_name")),
        sa.UniqueConstraint("personal_of", name=op.f("uq_projects_personal_of")),
    )
    op.create_table(
        "project_members",
        sa.Column("project_id", sa.String(36), nullable=False),
        sa.Column("user_id", sa.String(36), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"],
                                name=op.f("fk_project_members_project_id_projects"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"],
                                name=op.f("fk_project_members_user_id_users"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("project_id", "user_id", name=op.f("pk_project_members")),
    )
    op.create_index(op.f("ix_project_members_user_id"), "project_members", ["user_id"])
    for table, ondelete in (("sessions", "RESTRICT"), ("folders", "CASCADE")):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("project_id", sa.String(36), nullable=True))
            batch_op.create_index(batch_op.f(f"ix_{table}_project_id"), ["project_id"])
            batch_op.create_foreign_key(
                batch_op.f(f"fk_{table}_project_id_projects"), "projects", ["project_id"], ["id"],
                ondelete=ondelete,
            )
    _personal_projects(projects)
    op.execute("UPDATE sessions SET pool = '' WHERE pool = 'default'")


def _personal_projects(projects: sa.Table) -> None:
    """A personal project per user, and each user's sessions in theirs."""
    bind = op.get_bind()
    users = bind.execute(sa.text("SELECT id, username FROM users")).all()
    now = datetime.now(UTC)
    rows = [
        {"id": str(uuid.uuid4()), "name": f"~{username}", "description": "", "personal_of": uid,
         "created_at": now}
        for uid, username in users
    ]
    if not rows:
        return
    op.bulk_insert(projects, rows)
    bind.execute(sa.text(
        "UPDATE sessions SET project_id = "
        "(SELECT p.id FROM projects p WHERE p.personal_of = sessions.owner_id)"
    ))


def downgrade() -> None:
    op.execute("UPDATE sessions SET pool = 'default' WHERE pool = ''")
    for table in ("folders", "sessions"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_constraint(batch_op.f(f"fk_{table}_project_id_projects"),
                                     type_="foreignkey")
            batch_op.drop_index(batch_op.f(f"ix_{table}_project_id"))
            batch_op.drop_column("project_id")
    op.drop_index(op.f("ix_project_members_user_id"), table_name="project_members")
    op.drop_table("project_members")
    op.drop_table("projects")
