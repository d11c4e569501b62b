"""Monitoring: Prometheus' /metrics, a session's usage, the live view, accounting, and a
session's own usage history for the in-session endpoint (as its node)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response
from prometheus_client import CONTENT_TYPE_LATEST

from gpuslice.common.schemas.monitoring import SessionStats, Top, UsageReport
from gpuslice.manager.api.deps import (
    Bearer,
    CurrentNode,
    CurrentUser,
    DbDep,
    MetricsDep,
    SettingsDep,
    VisibleSession,
)
from gpuslice.manager.services.monitoring import accounting, metrics, stats
from gpuslice.manager.services.monitoring import top as live

router = APIRouter(tags=["monitoring"])
scrape = APIRouter(tags=["monitoring"])

Since = Annotated[str | None, Query(max_length=40, description="A duration back from now "
                                    "(30m, 2h, 7d) or an ISO time.")]
Step = Annotated[int | None, Query(ge=60, le=86400, description="Seconds per point, a "
                                   "multiple of 60 (default: about 120 points).")]


@scrape.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
async def get_metrics(
    db: DbDep, settings: SettingsDep, own: MetricsDep, credentials: Bearer
) -> Response:
    """Prometheus text format: devices (DCGM names), sessions (`gpuslice_session_*`), the
    control plane. Bearer: the scrape token or an admin's API token (unless public)."""
    token = credentials.credentials if credentials else None
    body = await metrics.scrape(db, token, settings.monitoring, own)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


@router.get("/sessions/{session_id}/stats")
async def session_stats(
    row: VisibleSession, db: DbDep, settings: SettingsDep, since: Since = None, step: Step = None
) -> SessionStats:
    """A session's usage now, its totals and its history (also after it ended): GPU memory and
    utilization of its own processes, CPU, memory, fGPU held; its reclaim countdown."""
    return await stats.session_stats(db, row, since=since, step=step, max_gap=_gap(settings))


@router.get("/top")
async def get_top(db: DbDep, user: CurrentUser, settings: SettingsDep) -> Top:
    """Live, per node and device: who holds which slice and how much they use (users: only
    their own sessions)."""
    return await live.top(db, user, _gap(settings))


@router.get("/usage")
async def get_usage(
    db: DbDep,
    user: CurrentUser,
    of: Annotated[str | None, Query(alias="user", max_length=64,
                                    description="Admins: a username or user id.")] = None,
    since: Annotated[str | None, Query(max_length=40, description="Days back (7d) or a date; "
                                       "default 7d.")] = None,
    until: Annotated[str | None, Query(max_length=40, description="A date; default today.")]
    = None,
    by: Annotated[Literal["user", "project"], Query(
        description="Rows per user and day, or per project and day.")] = "user",
) -> UsageReport:
    """Accounting per user (or project) and UTC day: fGPU-hours, CPU-hours, memory and
    GPU-memory GiB-hours, sessions (users: their own)."""
    return await accounting.usage_report(db, user, user=of, since=since, until=until, by=by)


@router.get("/agents/me/sessions/{session_id}/usage", tags=["agents"])
async def session_usage_for_node(
    session_id: str, db: DbDep, node: CurrentNode, settings: SettingsDep,
    since: Since = None, step: Step = None,
) -> SessionStats:
    """For the in-session endpoint: the usage of a session on the calling node (404 for any
    other session)."""
    return await stats.stats_for_node(db, node, session_id, since=since, step=step,
                                      max_gap=_gap(settings))


def _gap(settings: SettingsDep) -> timedelta:
    return timedelta(seconds=settings.nodes.node_timeout)
