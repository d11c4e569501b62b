"""ORM models of projects (issue 32): who may launch in a project, its quotas and its resource
groups. Kept apart from ``models.py`` (already past its size); imported by it, so the metadata
Alembic and the backups see has them.

Amounts as everywhere: gpu/cpu in milli-units, memory and storage in bytes; NULL: unlimited.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, BigInteger, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from gpuslice.manager.db.base import Base, UTCDateTime, new_id, utcnow

ID = String(36)


class ProjectRow(Base):
    """A project: a team's quotas and resource groups. A user's personal one has
    ``personal_of`` (the user's id), is named ``~<username>``, and only that user launches in it.
    """

    __tablename__ = "projects"

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(80), unique=True)
    description: Mapped[str] = mapped_column(String(255), default="")
    personal_of: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), unique=True
    )
    max_sessions: Mapped[int | None] = mapped_column(Integer)
    max_gpu: Mapped[int | None] = mapped_column(BigInteger)
    max_cpu: Mapped[int | None] = mapped_column(BigInteger)
    max_mem: Mapped[int | None] = mapped_column(BigInteger)
    max_storage: Mapped[int | None] = mapped_column(BigInteger)
    # Whole GPUs of a model (a case-insensitive part of its name) the project may hold at once,
    # {"a100": 4000} in milli-fGPU; NULL or absent model: no such limit.
    max_gpu_models: Mapped[dict[str, int] | None] = mapped_column(JSON)
    # The resource groups its sessions may run in; NULL: any.
    groups: Mapped[list[str] | None] = mapped_column(JSON)
    # Seconds: what its sessions get when they name no --time, and the most they may name;
    # NULL: the settings' (sessions.default_time_limit / max_time_limit) alone apply.
    default_time_limit: Mapped[int | None] = mapped_column(Integer)
    max_time_limit: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ProjectMemberRow(Base):
    """A user who may launch in a project and see its folders."""

    __tablename__ = "project_members"

    project_id: Mapped[str] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # manual: an admin added them; idp: a group linked to the project at their identity
    # provider did (a group sync adds and removes only those)
    source: Mapped[str] = mapped_column(String(8), default="manual")


class ProjectIdpGroupRow(Base):
    """A group at an identity provider whose members are the project's members."""

    __tablename__ = "project_idp_groups"

    project_id: Mapped[str] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    provider: Mapped[str] = mapped_column(String(16), primary_key=True)  # oidc | ldap
    group_value: Mapped[str] = mapped_column(String(1024), primary_key=True)


class PriorityClassProjectRow(Base):
    """A project whose sessions may use a priority class (a class with none: every project's
    with ``any_project``, else its admins' alone)."""

    __tablename__ = "priority_class_projects"

    class_id: Mapped[str] = mapped_column(
        ForeignKey("priority_classes.id", ondelete="CASCADE"), primary_key=True
    )
    project_id: Mapped[str] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True, index=True
    )
