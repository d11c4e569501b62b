"""The SDK's calls for notification channels (a mixin of ``Client``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuslice.client import schemas

if TYPE_CHECKING:
    from gpuslice.common.schemas.notify import (
        ChannelCreated,
        ChannelPublic,
        DeliveryPublic,
        TestResult,
    )


class NotifyCalls:
    """Your notification channels and their deliveries; ``Client`` provides ``_call``."""

    _call: Callable[..., Any]

    def add_channel(self, kind: str, target: str, **options: Any) -> ChannelCreated:
        """A webhook, Slack or (admins) e-mail channel; a webhook's signing secret is in the
        answer, this once."""
        body = {"kind": kind, "target": target,
                **{k: v for k, v in options.items() if v is not None}}
        return self._call("POST", "/notifications/channels", schemas.notify.ChannelCreated,
                          json=body)

    def list_channels(self) -> list[ChannelPublic]:
        return self._call("GET", "/notifications/channels", list[schemas.notify.ChannelPublic])

    def update_channel(self, channel_id: str, **changes: Any) -> ChannelPublic:
        return self._call("PATCH", f"/notifications/channels/{channel_id}",
                          schemas.notify.ChannelPublic, json=changes)

    def remove_channel(self, channel_id: str) -> None:
        self._call("DELETE", f"/notifications/channels/{channel_id}", None)

    def test_channel(self, channel_id: str) -> TestResult:
        return self._call("POST", f"/notifications/channels/{channel_id}/test",
                          schemas.notify.TestResult)

    def list_deliveries(self, channel: str | None = None, *, failed: bool = False,
                        limit: int = 50) -> list[DeliveryPublic]:
        params: dict[str, Any] = {"limit": limit, "failed": failed}
        if channel:
            params["channel"] = channel
        return self._call("GET", "/notifications/deliveries",
                          list[schemas.notify.DeliveryPublic], params=params)

    def list_failures(self, limit: int = 100) -> list[DeliveryPublic]:
        """Every channel's failed deliveries (admins)."""
        return self._call("GET", "/notifications/failures",
                          list[schemas.notify.DeliveryPublic], params={"limit": limit})
