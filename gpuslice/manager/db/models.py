"""ORM models. Amounts are exact integers: gpu/cpu in milli-units, memory in bytes (BigInteger).

Capacity counters (``devices.used``, ``nodes.cpu_used``, ``nodes.mem_used``) always equal the sum
over the allocations of sessions in a holding status; they are only changed by guarded UPDATEs
in ``services/allocation.py`` (see README.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from gpuslice.common.schemas.agents import NodeStatus
from gpuslice.common.schemas.sessions import SessionResult, SessionStatus, SessionType
from gpuslice.common.schemas.storage import Permission
from gpuslice.common.schemas.users import Role
from gpuslice.manager.db.base import Base, UTCDateTime, new_id, str_enum, utcnow

ID = String(36)


class ResourcePolicyRow(Base):
    __tablename__ = "resource_policies"

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    max_sessions: Mapped[int | None] = mapped_column(Integer)
    max_gpu: Mapped[int | None] = mapped_column(BigInteger)
    max_cpu: Mapped[int | None] = mapped_column(BigInteger)
    max_mem: Mapped[int | None] = mapped_column(BigInteger)
    max_priority: Mapped[int] = mapped_column(Integer, default=0)
    max_private_images: Mapped[int | None] = mapped_column(Integer)
    # Idle reclaim (services/monitoring): the rule as `IdleRule` JSON (exact integers), and the
    # longest a session may run, in seconds; NULL: none.
    idle_rule: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    max_lifetime: Mapped[int | None] = mapped_column(Integer)
    max_storage: Mapped[int | None] = mapped_column(BigInteger)  # bytes of one's own folders
    # PENDING sessions one user may have waiting; NULL: the manager's sessions.max_pending.
    max_pending: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class UserRow(Base):
    __tablename__ = "users"

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    # a provider's user has none: a value no password matches (services/identity)
    password_hash: Mapped[str] = mapped_column(String(255))
    role: Mapped[Role] = mapped_column(str_enum(Role, 16))
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    policy_id: Mapped[str | None] = mapped_column(
        ForeignKey("resource_policies.id", ondelete="RESTRICT"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    source: Mapped[str] = mapped_column(String(16), default="local")  # local | oidc | ldap
    display_name: Mapped[str | None] = mapped_column(String(128))
    email: Mapped[str | None] = mapped_column(String(320))
    email_verified: Mapped[bool] = mapped_column(Boolean, default=False)
    last_login_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # why is_active is false: "admin", or "directory: ..." (a re-check may enable it again)
    disabled_reason: Mapped[str | None] = mapped_column(String(128))
    # an SSO user's API and CLI tokens answer sso_required after it (auth.oidc.offline_max_age
    # past the last sign-in or re-check at the provider); None: no bound
    standing_until: Mapped[datetime | None] = mapped_column(UTCDateTime)

    policy: Mapped[ResourcePolicyRow | None] = relationship(lazy="raise")


class UserIdentityRow(Base):
    """A user's sign-in at a provider: (provider, subject) is who they are there, never their
    name or e-mail address."""

    __tablename__ = "user_identities"
    __table_args__ = (UniqueConstraint("provider", "subject"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    provider: Mapped[str] = mapped_column(String(16))  # oidc | ldap
    subject: Mapped[str] = mapped_column(String(255))
    claimed_username: Mapped[str] = mapped_column(String(255))
    # the groups the provider said at the last sign-in or re-check (None: it said nothing)
    groups: Mapped[list[str] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_login_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    checked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ApiTokenRow(Base):
    """A user's bearer token (login, cli or API), stored as the SHA-256 of the secret."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # login | cli | api
    name: Mapped[str] = mapped_column(String(64))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # A cli token ends after this many seconds unused (its last use, or its making).
    idle_seconds: Mapped[int | None] = mapped_column(Integer)
    # the provider's session (sso_sessions) it was made from: it ends with it
    sso_session_id: Mapped[str | None] = mapped_column(String(36), index=True)


class JoinTokenRow(Base):
    """Lets an agent register a node once; created by an admin, stored hashed. ``node_name``
    binds it to one node name; ``rekey`` lets it replace that existing node's credential."""

    __tablename__ = "join_tokens"

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_by: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    node_name: Mapped[str | None] = mapped_column(String(128))
    rekey: Mapped[bool] = mapped_column(Boolean, default=False)
    # Set (conditionally, once) when a node registers with it: single use.
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    used_by: Mapped[str | None] = mapped_column(ForeignKey("nodes.id", ondelete="SET NULL"))


class ImageRow(Base):
    """The image catalog: one row per reference, from node reports, admins and commits.

    Visibility: ``public`` images are for everyone; a private one for its owner and admins
    only (an owner deleted later leaves it to admins). ``removed_at`` is a tombstone: a removed
    image stays out of the catalog although nodes still report it, until its agents delete it
    (a rebuild with another image id brings it back). ``labels`` are the image's own.
    """

    __tablename__ = "images"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    allowed: Mapped[bool] = mapped_column(Boolean, default=False)  # on the admin allow list
    # In the configured registry. Named apart from its column: DeclarativeBase has a `registry`.
    in_registry: Mapped[bool] = mapped_column("registry", Boolean, default=False)
    image_id: Mapped[str | None] = mapped_column(String(128))
    size: Mapped[int | None] = mapped_column(BigInteger)
    labels: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    public: Mapped[bool] = mapped_column(Boolean, default=True)
    owner_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), index=True
    )
    origin_session_id: Mapped[str | None] = mapped_column(String(36))
    removed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ImageNodeRow(Base):
    """An image a node reported in its last heartbeat (its image id there, and size)."""

    __tablename__ = "image_nodes"

    image_name: Mapped[str] = mapped_column(
        ForeignKey("images.name", ondelete="CASCADE"), primary_key=True
    )
    node_id: Mapped[str] = mapped_column(
        ForeignKey("nodes.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    image_id: Mapped[str | None] = mapped_column(String(128))
    size: Mapped[int | None] = mapped_column(BigInteger)


class ImageAliasRow(Base):
    """A short name for a reference (``tf2`` → ``gpuslice/tensorflow:2.16``)."""

    __tablename__ = "image_aliases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    reference: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class NodeRow(Base):
    __tablename__ = "nodes"
    __table_args__ = (
        CheckConstraint("cpu_used >= 0 AND cpu_used <= cpu", name="cpu_within"),
        CheckConstraint("mem_used >= 0 AND mem_used <= mem", name="mem_within"),
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    pool: Mapped[str] = mapped_column(String(64), default="default")
    credential_hash: Mapped[str] = mapped_column(String(64), unique=True)
    status: Mapped[NodeStatus] = mapped_column(str_enum(NodeStatus, 16), index=True)
    device_capacity: Mapped[int] = mapped_column(Integer)  # one device, milli-fGPU
    cpu: Mapped[int] = mapped_column(BigInteger, default=0)
    mem: Mapped[int] = mapped_column(BigInteger, default=0)
    cpu_used: Mapped[int] = mapped_column(BigInteger, default=0)
    mem_used: Mapped[int] = mapped_column(BigInteger, default=0)
    images: Mapped[list[str]] = mapped_column(JSON, default=list)
    # The last heartbeat's readings: {"devices": {index: {mem_used, utilization}} (every
    # process on the device), "sessions": {id: {cpu, mem}}}.
    usage: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # Bumped in the same transaction as any change to what the node must run.
    assignment_version: Mapped[int] = mapped_column(BigInteger, default=0)
    # Bumped (with assignment_version) to ask the agent for a heartbeat at once (image rescan).
    rescan: Mapped[int] = mapped_column(BigInteger, default=0)
    registered_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # An admin revoked the node: its credential is refused until a re-key token replaces it.
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Why the node's Docker Engine does not answer, as its agent says (None: it does).
    engine_error: Mapped[str | None] = mapped_column(String(500))
    # What the last heartbeat applied in full reported (capacity, devices, images); null when
    # something is left to apply (a device still allocated, capacity held by sessions).
    report_digest: Mapped[str | None] = mapped_column(String(64))
    # The agent that runs the node (its id, kept in its data directory; null for an agent
    # from before ids): a second live agent of the node is refused (services/nodes/agents.py).
    agent_id: Mapped[str | None] = mapped_column(String(64))

    devices: Mapped[list[DeviceRow]] = relationship(
        lazy="raise", order_by="DeviceRow.index", passive_deletes=True
    )


class DeviceRow(Base):
    __tablename__ = "devices"
    __table_args__ = (
        UniqueConstraint("node_id", "index", name="uq_devices_node_index"),
        CheckConstraint("used >= 0 AND used <= capacity", name="used_within"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    uuid: Mapped[str] = mapped_column(String(128))
    model: Mapped[str] = mapped_column(String(128))
    mem: Mapped[int] = mapped_column(BigInteger)
    sms: Mapped[int] = mapped_column(Integer, default=0)
    capacity: Mapped[int] = mapped_column(Integer)  # milli-fGPU
    used: Mapped[int] = mapped_column(Integer, default=0)  # milli-fGPU allocated


class SessionRow(Base):
    __tablename__ = "sessions"
    __table_args__ = (
        # Listings are newest first with the id as tie-break: indexes in that very order.
        Index("ix_sessions_owner_created_id", "owner_id", "created_at", "id"),
        Index("ix_sessions_status_created_id", "status", "created_at", "id"),
        Index("ix_sessions_created_id", "created_at", "id"),
        Index("ix_sessions_node_status", "node_id", "status"),
        Index("ix_sessions_name_created", "name", "created_at"),  # ?name=, newest first
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(80))
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="RESTRICT"))
    image: Mapped[str] = mapped_column(String(255))
    type: Mapped[SessionType] = mapped_column(str_enum(SessionType, 16))
    command: Mapped[list[str] | None] = mapped_column(JSON)
    env: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    # Its priority class by name (NULL: none existed when it was made; ranks 0, as the
    # default would). The class's rank orders the queue before ``priority``.
    priority_class: Mapped[str | None] = mapped_column(String(64))
    # Preemption (services/scheduling/preemption.py). A victim: the winner's id while it is
    # TERMINATING because of it, then back to PENDING; ``preemptions`` counts those returns.
    preempted_by: Mapped[str | None] = mapped_column(String(36))
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    # Why it was last preempted ("preempted by alice's train-3 (priority high)"): its waiting
    # reason starts with it while it is back in the queue.
    preempt_reason: Mapped[str | None] = mapped_column(Text)
    # A winner: the node whose capacity its victims free, held for it until it is placed,
    # and the device slices planned there ([[device index, milli-fGPU], ...]).
    held_node_id: Mapped[str | None] = mapped_column(String(36))
    held_slices: Mapped[list[list[int]] | None] = mapped_column(JSON)
    # When it last became RUNNING (a class's minimum runtime counts from here).
    running_since: Mapped[datetime | None] = mapped_column(UTCDateTime)
    pool: Mapped[str] = mapped_column(String(64), default="default")
    # The project it runs in (projects.py); NULL only for rows from before projects. ``pool``:
    # the resource group it asked for, or "" for any its project may use.
    project_id: Mapped[str | None] = mapped_column(
        ForeignKey("projects.id", ondelete="RESTRICT"), index=True
    )
    gpu: Mapped[int] = mapped_column(BigInteger)
    cpu: Mapped[int] = mapped_column(BigInteger)
    mem: Mapped[int] = mapped_column(BigInteger)
    gpu_model: Mapped[str | None] = mapped_column(String(128))
    # Asked by GPU memory (bytes): ``gpu`` is 0 until placed, then the slice chosen.
    gpu_mem: Mapped[int | None] = mapped_column(BigInteger)
    # Storage folders it mounts: [{folder_id, name, read_only}], resolved when it was created.
    folders: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    status: Mapped[SessionStatus] = mapped_column(str_enum(SessionStatus, 16))
    status_reason: Mapped[str] = mapped_column(Text, default="")
    wait_code: Mapped[str | None] = mapped_column(String(32))
    queue_position: Mapped[int | None] = mapped_column(Integer)
    # time limits and scheduled starts (services/timelimits): seconds it may run once RUNNING,
    # when it may start, when it is ended (set once RUNNING), when it was warned
    time_limit: Mapped[int | None] = mapped_column(Integer)
    begin_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    ends_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    warned_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    result: Mapped[SessionResult | None] = mapped_column(str_enum(SessionResult, 16))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    node_id: Mapped[str | None] = mapped_column(ForeignKey("nodes.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # The last time a person used the session through the platform (terminal or app traffic),
    # written at most every `activity.EVERY`; NULL: no such use seen. Idle rules read it.
    last_activity_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # 256 random bits (hex) each app's token is derived from (services/images/app_catalog.py): apps
    # need it in clear, so it is kept, never logged, and only handed to the session's agent.
    app_secret: Mapped[str | None] = mapped_column(String(64))
    # Apps of the image to start as soon as the session runs (SessionCreate.apps).
    start_apps: Mapped[list[str] | None] = mapped_column(JSON)
    # The last output the agent sent with TERMINATED/ERROR (up to 1 MiB): never loaded with the
    # row (listings would drag megabytes along); read it with select(SessionRow.final_logs).
    final_logs: Mapped[str | None] = mapped_column(
        Text, deferred=True, deferred_raiseload=True
    )
    # When retention purged its kept logs and environment (sessions.retention_days after it
    # ended); its status history stays.
    purged_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    allocations: Mapped[list[AllocationRow]] = relationship(
        lazy="raise", order_by="AllocationRow.device_index", passive_deletes=True
    )


class AllocationRow(Base):
    """One device slice held by a session (CPU and memory are on the session row)."""

    __tablename__ = "allocations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), index=True
    )
    device_id: Mapped[int | None] = mapped_column(
        ForeignKey("devices.id", ondelete="SET NULL"), index=True
    )
    device_index: Mapped[int] = mapped_column(Integer)
    device_uuid: Mapped[str] = mapped_column(String(128))
    device_model: Mapped[str] = mapped_column(String(128))
    device_capacity: Mapped[int] = mapped_column(Integer)  # milli-fGPU of the whole device
    gpu: Mapped[int] = mapped_column(Integer)  # milli-fGPU
    mem: Mapped[int] = mapped_column(BigInteger)  # bytes of device memory
    sms: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class StatusHistoryRow(Base):
    """Every status change of every session; also the event log the status stream follows."""

    __tablename__ = "status_history"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    session_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), index=True
    )
    owner_id: Mapped[str] = mapped_column(ID, index=True)
    from_status: Mapped[SessionStatus | None] = mapped_column(str_enum(SessionStatus, 16))
    to_status: Mapped[SessionStatus] = mapped_column(str_enum(SessionStatus, 16))
    reason: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class AgentRequestRow(Base):
    """A request for a node's agent (``services/channel.py``): what to do (``kind`` and
    ``payload``, an ``Ask`` of the agent wire), delivered once with the node's assignments, and
    the agent's ``answer`` once it came. Short-lived: the waiter deletes it, the sweep purges
    what a dead waiter left."""

    __tablename__ = "agent_requests"

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    kind: Mapped[str] = mapped_column(String(16))
    node_id: Mapped[str] = mapped_column(ForeignKey("nodes.id", ondelete="CASCADE"), index=True)
    session_id: Mapped[str | None] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), index=True
    )
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # When the waiter stops waiting: never delivered after it (work nobody awaits must not
    # run) and purged a little later. Each kind has its own wait, so a fixed age would not do.
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    answered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    answer: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class UsageSeriesRow(Base):
    """One session's measured usage (``services/monitoring``): its figures now, the minute being
    filled (sums of the samples received in it), and since when it has been idle per resource
    under its owner's idle rule. History rows and accounting rows refer to it by ``id``."""

    __tablename__ = "usage_series"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), unique=True
    )
    # Bumped by every write to the series or its points: a reader that sees it unchanged
    # around its reads read one consistent state (no snapshot isolation needed).
    revision: Mapped[int] = mapped_column(BigInteger, default=0)
    owner_id: Mapped[str] = mapped_column(ID, index=True)
    node_id: Mapped[str | None] = mapped_column(ID)
    gpu: Mapped[int] = mapped_column(BigInteger)  # milli-fGPU held
    first_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_at: Mapped[datetime] = mapped_column(UTCDateTime)  # the manager's clock
    reading_ms: Mapped[int | None] = mapped_column(BigInteger)  # the agent's clock: once each
    cpu: Mapped[int | None] = mapped_column(BigInteger)  # now: milli-cores
    mem: Mapped[int] = mapped_column(BigInteger, default=0)  # now: bytes
    gpus: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON)  # now: per device
    # The open minute (epoch minutes) and the sums of its samples; closed into usage_history.
    minute: Mapped[int | None] = mapped_column(BigInteger)
    covered_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    cpu_ms: Mapped[int] = mapped_column(BigInteger, default=0)  # ms with a CPU figure
    cpu_sum: Mapped[int] = mapped_column(BigInteger, default=0)  # milli-cores × ms
    mem_sum: Mapped[int] = mapped_column(BigInteger, default=0)  # KiB × ms
    mem_max: Mapped[int] = mapped_column(BigInteger, default=0)  # KiB
    gpu_ms: Mapped[int] = mapped_column(BigInteger, default=0)  # ms with GPU figures
    gpu_mem_sum: Mapped[int] = mapped_column(BigInteger, default=0)  # KiB × ms
    gpu_mem_max: Mapped[int] = mapped_column(BigInteger, default=0)  # KiB
    gpu_util_sum: Mapped[int] = mapped_column(BigInteger, default=0)  # percent × ms
    # Idle since (under the owner's rule at the time of each sample); NULL: busy or unknown.
    gpu_idle_since: Mapped[datetime | None] = mapped_column(UTCDateTime)
    cpu_idle_since: Mapped[datetime | None] = mapped_column(UTCDateTime)


class UsageMinuteRow(Base):
    """A closed minute of a series, as written when it closes (one INSERT, no packing on the
    heartbeat's path); the maintenance loop packs complete hours into ``usage_history``."""

    __tablename__ = "usage_minutes"

    series_id: Mapped[int] = mapped_column(
        ForeignKey("usage_series.id", ondelete="CASCADE"), primary_key=True
    )
    minute: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # epoch minutes
    covered_ms: Mapped[int] = mapped_column(BigInteger)
    fgpu_sum: Mapped[int] = mapped_column(BigInteger)
    cpu_ms: Mapped[int] = mapped_column(BigInteger)
    cpu_sum: Mapped[int] = mapped_column(BigInteger)
    mem_sum: Mapped[int] = mapped_column(BigInteger)
    mem_max: Mapped[int] = mapped_column(BigInteger)
    gpu_ms: Mapped[int] = mapped_column(BigInteger)
    gpu_mem_sum: Mapped[int] = mapped_column(BigInteger)
    gpu_mem_max: Mapped[int] = mapped_column(BigInteger)
    gpu_util_sum: Mapped[int] = mapped_column(BigInteger)


class UsageHistoryRow(Base):
    """Closed points of a series at a fixed step, packed (``monitoring/codec.py``): one row per
    hour of minute points (``step`` 60), or per day of hour points once rolled up (3600)."""

    __tablename__ = "usage_history"

    series_id: Mapped[int] = mapped_column(
        ForeignKey("usage_series.id", ondelete="CASCADE"), primary_key=True
    )
    step: Mapped[int] = mapped_column(Integer, primary_key=True)  # seconds per point
    start: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # epoch seconds
    points: Mapped[bytes] = mapped_column(LargeBinary)


class UsageDailyRow(Base):
    """Accounting: per series and UTC day, the sums of its closed points (equal to the sum of
    that day's history, exactly)."""

    __tablename__ = "usage_daily"
    __table_args__ = (Index("ix_usage_daily_owner_day", "owner_id", "day"),)

    series_id: Mapped[int] = mapped_column(
        ForeignKey("usage_series.id", ondelete="CASCADE"), primary_key=True
    )
    day: Mapped[int] = mapped_column(Integer, primary_key=True, index=True)  # epoch days
    owner_id: Mapped[str] = mapped_column(ID)
    covered_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    fgpu_sum: Mapped[int] = mapped_column(BigInteger, default=0)  # milli-fGPU × ms
    cpu_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    cpu_sum: Mapped[int] = mapped_column(BigInteger, default=0)
    mem_sum: Mapped[int] = mapped_column(BigInteger, default=0)
    gpu_ms: Mapped[int] = mapped_column(BigInteger, default=0)
    gpu_mem_sum: Mapped[int] = mapped_column(BigInteger, default=0)
    gpu_util_sum: Mapped[int] = mapped_column(BigInteger, default=0)


class FolderRow(Base):
    """A storage folder: a user's own (``owner_id``) or a shared one (no owner, admins').

    Its files are at ``<storage root>/<storage_path>`` (by ids, so renaming is a row change).
    ``scope`` is the owner's id or ``shared``: names are unique within a scope.
    """

    __tablename__ = "folders"
    __table_args__ = (UniqueConstraint("scope", "name", name="uq_folders_scope_name"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    scope: Mapped[str] = mapped_column(String(36))
    name: Mapped[str] = mapped_column(String(80))
    owner_id: Mapped[str | None] = mapped_column(
        ForeignKey("users.id", ondelete="RESTRICT"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # Measured by the storage loop (and raised by uploads through the API in between).
    size: Mapped[int | None] = mapped_column(BigInteger)
    files: Mapped[int | None] = mapped_column(BigInteger)
    measured_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    # The project whose members see and mount it (a shared folder, no owner); NULL: none.
    # It holds the project: a project with folders cannot be deleted (migration 0031).
    project_id: Mapped[str | None] = mapped_column(
        ForeignKey("projects.id", ondelete="RESTRICT"), index=True
    )

    @property
    def shared(self) -> bool:
        return self.owner_id is None

    @property
    def storage_path(self) -> str:
        if self.owner_id is None:
            return f"shared/{self.id}"
        return f"users/{self.owner_id}/{self.id}"


class FolderGrantRow(Base):
    """A folder shared with a user, read-only (``ro``) or read-write (``rw``)."""

    __tablename__ = "folder_grants"

    folder_id: Mapped[str] = mapped_column(
        ForeignKey("folders.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[str] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    permission: Mapped[Permission] = mapped_column(str_enum(Permission, 2))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class FolderInviteRow(Base):
    """A folder shared with a username nobody has (yet): it becomes a grant when a user of that
    name exists. Kept so that sharing answers alike whether the user exists or not."""

    __tablename__ = "folder_invites"

    folder_id: Mapped[str] = mapped_column(
        ForeignKey("folders.id", ondelete="CASCADE"), primary_key=True
    )
    username: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)
    permission: Mapped[Permission] = mapped_column(str_enum(Permission, 2))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ModelRow(Base):
    """One save of a model: its files are under the owner's prefix, ``<owner>/<name>/<version>/``.

    ``uploading`` until its files are complete, then ``ready`` with the next ``number`` of its
    name (1, 2, …: a user's version); saves never replace each other. A deleted version is
    ``deleted`` (its files gone), kept so its number is never reused. ``version``: the key
    part, chosen at the start. ``file_list``: [{path, size}].
    """

    __tablename__ = "models"
    __table_args__ = (
        Index("ix_models_owner_name", "owner_id", "name"),
        # two saves completing at once cannot both take a number: the second retries
        Index("ux_models_owner_name_number", "owner_id", "name", "number", unique=True),
    )

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    owner_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="RESTRICT"))
    name: Mapped[str] = mapped_column(String(128))
    version: Mapped[str] = mapped_column(String(36))
    status: Mapped[str] = mapped_column(String(16))  # uploading | ready | deleted
    number: Mapped[int | None] = mapped_column(Integer)  # set when ready
    size: Mapped[int] = mapped_column(BigInteger, default=0)
    files: Mapped[int] = mapped_column(Integer, default=0)
    file_list: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    session_id: Mapped[str | None] = mapped_column(
        ForeignKey("sessions.id", ondelete="SET NULL"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class RunRow(Base):
    """A `gpuslice run`: the batch session that runs a script, and what it was asked to do."""

    __tablename__ = "runs"

    session_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True
    )
    owner_id: Mapped[str] = mapped_column(ID, index=True)
    script: Mapped[str] = mapped_column(Text)
    args: Mapped[list[str]] = mapped_column(JSON, default=list)
    save_dir: Mapped[str] = mapped_column(Text)
    # its code's directory in the owner's `runs` folder (None: `<name>`, runs before 0018)
    code_dir: Mapped[str | None] = mapped_column(String(80))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # How long the script itself ran, as its runner measured it (None: not told yet); the run's
    # duration, which the session's history cannot give when the manager was down as it ended.
    script_s: Mapped[float | None] = mapped_column(Float, nullable=True)


class LoginFailureRow(Base):
    """Failed logins counted per key (``user:<name>`` or ``addr:<client address>``) in a window
    that starts with the first failure; login throttling reads it before any password hash."""

    __tablename__ = "login_failures"

    key: Mapped[str] = mapped_column(String(160), primary_key=True)
    window_start: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    failures: Mapped[int] = mapped_column(Integer, default=0)


class BackupRow(Base):
    """A `gpuslice admin backup` that completed; the backup writes it (it reads the database
    directly, not through a manager), /metrics reads the newest."""

    __tablename__ = "backups"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    finished_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    rows: Mapped[int] = mapped_column(BigInteger)
    entries: Mapped[int] = mapped_column(BigInteger)
    bytes: Mapped[int] = mapped_column(BigInteger)
    database_only: Mapped[bool] = mapped_column(Boolean)


class PriorityClassRow(Base):
    """A priority class (services/priorities.py): its rank orders the queue, and a waiting
    session of a higher rank may preempt batch sessions of lower ones; one row is the default
    (at most one: services/priorities.py keeps it so)."""

    __tablename__ = "priority_classes"

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    rank: Mapped[int] = mapped_column(Integer)
    min_runtime_s: Mapped[int] = mapped_column(Integer, default=600)
    grace_s: Mapped[int] = mapped_column(Integer, default=30)
    preempt_interactive: Mapped[bool] = mapped_column(Boolean, default=False)
    is_default: Mapped[bool] = mapped_column(Boolean, default=False)
    # Every project may use it; else the projects of priority_class_projects, none: admins.
    any_project: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ResourcePresetRow(Base):
    """A named CPU/memory/GPU set the launch dialog offers; one row is the default the dialog
    preselects (services/presets.py keeps at most one)."""

    __tablename__ = "resource_presets"

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    cpu: Mapped[int] = mapped_column(BigInteger)  # milli-cores
    mem: Mapped[int] = mapped_column(BigInteger)  # bytes
    gpu: Mapped[int] = mapped_column(BigInteger, default=0)  # milli-fGPU
    is_default: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class AppEntryRow(Base):
    """A login handed to one app's origin (``services/apps/origins.py``): a single-use code the
    manager's origin gives the browser, then the cookie that origin sets for itself. Both are
    stored as SHA-256 digests; the entry lives as long as the login it came from."""

    __tablename__ = "app_entries"

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    login_id: Mapped[str] = mapped_column(
        ForeignKey("api_tokens.id", ondelete="CASCADE"), index=True)
    session_id: Mapped[str] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), index=True)
    app: Mapped[str] = mapped_column(String(40))
    code_hash: Mapped[str] = mapped_column(String(64), unique=True)
    code_expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    cookie_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class AppPortRow(Base):
    """The port an app of a session is served on while ``apps.port_range`` is set
    (``proxy/ports.py``): kept while the session lives, so its URL survives a restart."""

    __tablename__ = "app_ports"
    __table_args__ = (UniqueConstraint("session_id", "app", name="uq_app_ports_session_app"),)

    port: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    app: Mapped[str] = mapped_column(String(40))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class SshKeyRow(Base):
    """A user's SSH public key: the only kind of key a session's SSH server accepts for its
    owner (services/ssh). ``public_key`` is ``<type> <base64>``, the comment left out."""

    __tablename__ = "ssh_keys"
    __table_args__ = (UniqueConstraint("user_id", "fingerprint"),)

    id: Mapped[str] = mapped_column(ID, primary_key=True, default=new_id)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    key_type: Mapped[str] = mapped_column(String(64))
    public_key: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(String(64))  # SHA256:<base64>, as ssh-keygen -l
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


# Projects' tables live in their own module; imported here so that the metadata has them.
from gpuslice.manager.db.audit_models import AuditRow as AuditRow  # noqa: E402
from gpuslice.manager.db.audit_models import AuditStateRow as AuditStateRow  # noqa: E402
from gpuslice.manager.db.notify_models import (  # noqa: E402
    NotificationChannelRow as NotificationChannelRow,
)
from gpuslice.manager.db.notify_models import (  # noqa: E402
    NotificationOutboxRow as NotificationOutboxRow,
)
from gpuslice.manager.db.project_models import (  # noqa: E402
    ProjectIdpGroupRow as ProjectIdpGroupRow,
)
from gpuslice.manager.db.project_models import (  # noqa: E402
    ProjectMemberRow as ProjectMemberRow,
)
from gpuslice.manager.db.project_models import ProjectRow as ProjectRow  # noqa: E402
from gpuslice.manager.db.sso_models import CliLoginRow as CliLoginRow  # noqa: E402
from gpuslice.manager.db.sso_models import DeviceLoginRow as DeviceLoginRow  # noqa: E402
from gpuslice.manager.db.sso_models import SsoLoginRow as SsoLoginRow  # noqa: E402
from gpuslice.manager.db.sso_models import SsoLogoutSeenRow as SsoLogoutSeenRow  # noqa: E402
from gpuslice.manager.db.sso_models import SsoSessionRow as SsoSessionRow  # noqa: E402
from gpuslice.manager.db.storage_models import (  # noqa: E402
    UploadReservationRow as UploadReservationRow,
)
