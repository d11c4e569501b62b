from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, status

from gpuslice.common.schemas.notify import (
    ChannelCreate,
    ChannelCreated,
    ChannelPublic,
    ChannelUpdate,
    DeliveryPublic,
    TestResult,
)
from gpuslice.manager.api.deps import AdminUser, CurrentUser, DbDep, SettingsDep
from gpuslice.manager.services.notify import channels

router = APIRouter(prefix="/notifications", tags=["notifications"])
Status = Literal["pending", "sent", "dead"]
Limit = Annotated[int, Query(ge=1, le=500)]


@router.get("/channels")
async def list_channels(db: DbDep, user: CurrentUser) -> list[ChannelPublic]:
    """Your notification channels (admins: also every project's). Secrets are never shown."""
    return await channels.list_channels(db, user)


@router.post("/channels", status_code=status.HTTP_201_CREATED)
async def create_channel(body: ChannelCreate, db: DbDep, user: CurrentUser,
                         settings: SettingsDep) -> ChannelCreated:
    """Add a channel: a webhook (its signing `secret` is in this answer only), a Slack-style
    webhook, or (admins) an e-mail address. Private or loopback URLs are refused (422
    `private_target`) unless listed in `notify.allowed_targets`."""
    return await channels.create(db, user, body, settings.notify)


@router.patch("/channels/{channel_id}")
async def update_channel(channel_id: str, body: ChannelUpdate, db: DbDep,
                         user: CurrentUser) -> ChannelPublic:
    """Change a channel's name, events or threshold, or enable it again (yours only)."""
    return await channels.update(db, user, channel_id, body)


@router.delete("/channels/{channel_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_channel(channel_id: str, db: DbDep, user: CurrentUser) -> None:
    """Remove a channel and its deliveries not yet sent (yours only)."""
    await channels.remove(db, user, channel_id)


@router.post("/channels/{channel_id}/test")
async def test_channel(channel_id: str, db: DbDep, user: CurrentUser,
                       settings: SettingsDep) -> TestResult:
    """Send a test notification now; the answer is the receiver's HTTP status or the SMTP
    server's reply."""
    return await channels.test(db, user, channel_id, settings.notify,
                               settings.apps.console_url)


@router.get("/deliveries")
async def list_deliveries(
    db: DbDep, user: CurrentUser, channel: str | None = None, status: Status | None = None,
    failed: bool = False, limit: Limit = 50,
) -> list[DeliveryPublic]:
    """Your channels' deliveries, newest first: status, attempts, the receiver's last answer,
    the next attempt."""
    return await channels.deliveries(db, user, channel_id=channel, status=status,
                                     failed_only=failed, limit=limit)


@router.get("/failures")
async def list_failures(db: DbDep, admin: AdminUser, limit: Limit = 100
                        ) -> list[DeliveryPublic]:
    """Every user's and project's deliveries that failed (given up, or being retried), newest
    first (admins only). Channels' URLs are not shown."""
    return await channels.deliveries(db, admin, channel_id=None, status=None,
                                     failed_only=True, everyone=True, limit=limit)
