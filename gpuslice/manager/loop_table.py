"""The manager's background loops, in one table: what each pass does, how often, what it needs.

The app's lifespan builds them from `TABLE` (`build`), starts all but those it was told to
leave off (`create_app(..., loops_off=...)`) and stops them all. Each reports its health
(`loops.LoopState`) to `/api/v1/health/loops` and `/metrics`, and those marked `ready` to
readiness. `run_once(app, key)` runs one pass now, as the loop would: what tests use instead
of waiting for an interval. Every replica runs every loop: each pass is safe beside another
replica's (guarded writes, bounded idempotent batches), and its state is in the database.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from fastapi import FastAPI

from gpuslice.manager.db.base import utcnow
from gpuslice.manager.events import Hub
from gpuslice.manager.loops import Loop, Loops, Pass, key_of
from gpuslice.manager.proxy.ports import SWEEP_INTERVAL
from gpuslice.manager.services import channel, retention
from gpuslice.manager.services.apps import origins
from gpuslice.manager.services.audit import chain as audit_chain
from gpuslice.manager.services.audit import retention as audit_retention
from gpuslice.manager.services.identity import recheck as ldap_recheck
from gpuslice.manager.services.models.catalog import purge_stale
from gpuslice.manager.services.models.sweep import sweep_store
from gpuslice.manager.services.monitoring.maintenance import Retention, maintain
from gpuslice.manager.services.monitoring.reclaim import reclaim_pass
from gpuslice.manager.services.nodes.liveness import SweepGrace, sweep_lost
from gpuslice.manager.services.nodes.versions import VersionWatch
from gpuslice.manager.services.notify import delivery as notify_delivery
from gpuslice.manager.services.scheduling.passes import run_pass
from gpuslice.manager.services.storage.usage import measure_all
from gpuslice.manager.services.timelimits import sweep as timelimits
from gpuslice.manager.settings import ManagerSettings

# Requests are purged this long after their expiry (their waiter died with its manager).
REQUEST_GRACE = timedelta(minutes=1)
# Seconds between retention passes (each purges a bounded batch).
RETENTION_INTERVAL = 300.0
# Seconds between passes of the audit log's sealer (rows are chained within about this).
AUDIT_SEAL_INTERVAL = 1.0


@dataclass(frozen=True, slots=True)
class Entry:
    """One loop of the table."""

    name: str  # in the log and health; its key (for readiness, loops_off, run_once): `_` for ` `
    interval: Callable[[ManagerSettings], float]  # seconds between passes, from its setting
    make: Callable[[FastAPI], Pass | None]  # its pass, from the app's state at start; None:
    # the loop has nothing to do in this configuration and does not exist
    wake: Callable[[Hub], asyncio.Event] | None = None  # also run at once when this is set
    jitter: float = 0.1  # each interval drawn within ± this fraction
    ready: bool = False  # readiness waits on it: a replica where it is stuck gets no traffic

    @property
    def key(self) -> str:
        return key_of(self.name)


def _scheduler(app: FastAPI) -> Pass:
    sessionmaker, hub, metrics = app.state.sessionmaker, app.state.hub, app.state.metrics
    config = app.state.settings.scheduler.core_config()

    async def schedule() -> None:
        with metrics.scheduling.time():
            await run_pass(sessionmaker, config, hub)

    return schedule


def _node_sweep(app: FastAPI) -> Pass:
    sessionmaker, timeout = app.state.sessionmaker, app.state.settings.nodes.node_timeout
    grace = SweepGrace(timeout)

    async def sweep() -> None:
        # After a (re)start, or a jump of the wall clock, heartbeat times say nothing about
        # the nodes: agents get one node_timeout to report before any is called lost.
        if grace.allows_sweep():
            await sweep_lost(sessionmaker, timeout)
        async with sessionmaker() as db:
            await channel.purge(db, REQUEST_GRACE)

    return sweep


def _retention(app: FastAPI) -> Pass:
    settings: ManagerSettings = app.state.settings
    sessionmaker = app.state.sessionmaker

    async def purge() -> None:
        await retention.purge(sessionmaker, settings.sessions.retention_days,
                              settings.auth.login_window)
        async with sessionmaker() as db:  # apps' entry codes and cookies that open nothing
            await origins.purge(db)
        archive = settings.audit.archive_dir or settings.data_dir / "audit-archive"
        await audit_retention.purge(sessionmaker, settings.audit.retention_days, archive)
        if app.state.sso is not None:  # sign-ins and device codes that never came back
            from gpuslice.manager.services.sso import logins

            async with sessionmaker() as db:
                await logins.purge(db)

    return purge


def _sso_recheck(app: FastAPI) -> Pass | None:
    sso = app.state.sso
    if sso is None:
        return None
    from gpuslice.manager.services.sso.sessions import recheck_pass

    async def recheck() -> None:
        await recheck_pass(app.state.sessionmaker, sso)

    return recheck


def _usage_history(app: FastAPI) -> Pass:
    config = app.state.settings.monitoring
    kept = Retention(config.minute_retention_days, config.hour_retention_days)

    async def maintenance() -> None:
        await maintain(app.state.sessionmaker, kept, utcnow())

    return maintenance


def _idle_reclaim(app: FastAPI) -> Pass:
    max_gap = timedelta(seconds=app.state.settings.nodes.node_timeout)
    return partial(reclaim_pass, app.state.sessionmaker, max_gap,
                   warn_before=app.state.settings.notify.idle_warning_before)


def _storage_usage(app: FastAPI) -> Pass:
    return partial(measure_all, app.state.sessionmaker, app.state.storage)


def _model_uploads(app: FastAPI) -> Pass:
    sessionmaker, timeout = app.state.sessionmaker, app.state.settings.model_store.upload_timeout

    async def purge_uploads() -> None:
        async with sessionmaker() as db:
            await purge_stale(db, app.state.model_store, timeout)
            await sweep_store(db, app.state.model_store)

    return purge_uploads


def _node_versions(app: FastAPI) -> Pass:
    # Other replicas' changes to what nodes must run reach this one's long-polls (see
    # services/nodes/versions.py).
    return VersionWatch(app.state.sessionmaker, app.state.hub).look


def _time_limits(app: FastAPI) -> Pass:
    sessions = app.state.settings.sessions
    warning = timelimits.WarnSignal(app.state.channel, sessions.time_limit_warning,
                                    sessions.time_limit_signal)
    return partial(timelimits.sweep, app.state.sessionmaker, warning)


def _audit_seal(app: FastAPI) -> Pass:
    sessionmaker, key = app.state.sessionmaker, app.state.audit_key

    async def seal() -> None:
        while True:  # every row committed so far, a batch a transaction
            async with sessionmaker() as db:
                if await audit_chain.seal(db, key) < audit_chain.BATCH:
                    return

    return seal


def _notifications(app: FastAPI) -> Pass:
    settings: ManagerSettings = app.state.settings
    return partial(notify_delivery.deliver, app.state.sessionmaker, settings.notify,
                   settings.apps.console_url)


def _ldap_recheck(app: FastAPI) -> Pass | None:
    settings = app.state.settings.auth.ldap  # only where a directory is configured
    run = app.state.login_throttle.checks.run
    return partial(ldap_recheck.recheck, app.state.sessionmaker, settings, run) \
        if settings.url else None


def _app_ports(app: FastAPI) -> Pass | None:
    ports = app.state.app_ports  # only where apps get a port each (apps.port_range)
    return None if ports is None else ports.sweep


TABLE = (  # started in this order
    Entry("app ports", lambda s: SWEEP_INTERVAL, _app_ports),
    Entry("scheduler", lambda s: s.scheduler.interval, _scheduler,
          wake=lambda hub: hub.scheduler, ready=True),
    Entry("node sweep", lambda s: s.nodes.sweep_interval, _node_sweep, ready=True),
    Entry("retention", lambda s: RETENTION_INTERVAL, _retention),
    Entry("usage history", lambda s: s.monitoring.maintenance_interval, _usage_history),
    Entry("idle reclaim", lambda s: s.monitoring.reclaim_interval, _idle_reclaim),
    Entry("storage usage", lambda s: s.storage.usage_interval, _storage_usage),
    Entry("model uploads", lambda s: min(3600.0, s.model_store.upload_timeout / 4),
          _model_uploads),
    Entry("node versions", lambda s: s.nodes.assignment_poll, _node_versions, jitter=0),
    Entry("time limits", lambda s: s.sessions.time_limit_interval, _time_limits),
    Entry("audit seal", lambda s: AUDIT_SEAL_INTERVAL, _audit_seal),
    # each pass refreshes the sessions whose last check is older than the interval
    Entry("sso recheck", lambda s: min(60.0, s.auth.oidc.recheck_interval / 4), _sso_recheck),
    Entry("notifications", lambda s: s.notify.interval, _notifications,
          wake=lambda hub: hub.notify),
    Entry("ldap recheck", lambda s: s.auth.ldap.recheck_interval, _ldap_recheck),
)
KEYS = frozenset(entry.key for entry in TABLE)


def check_keys(keys: frozenset[str]) -> None:
    """Raise ``ValueError`` naming any of ``keys`` that is no loop's."""
    if unknown := keys - KEYS:
        raise ValueError(f"no loop named {', '.join(sorted(unknown))}; the loops: "
                         f"{', '.join(entry.key for entry in TABLE)}")


def build(app: FastAPI) -> Loops:
    """The app's loops, built from its state (the lifespan's, once it is set), not started."""
    settings: ManagerSettings = app.state.settings
    loops = []
    for entry in TABLE:
        body = entry.make(app)
        if body is not None:
            wake = None if entry.wake is None else entry.wake(app.state.hub)
            loops.append(Loop(entry.name, body, entry.interval(settings), wake=wake,
                              jitter=entry.jitter, gates_readiness=entry.ready))
    return Loops(loops, settings.database_url)


async def run_once(app: FastAPI, key: str) -> None:
    """One pass of the loop ``key`` (e.g. ``"scheduler"``) now, recorded in its health as the
    loop records its own; raises what the pass raised. A loop left off runs only so; one that
    runs may pass beside it, as another replica's would."""
    await app.state.loops[key].pass_once()
