"""The scheduler core: pure functions from a queue and a cluster to placements and reasons."""

from gpuslice.manager.scheduler.core import queue_order, schedule
from gpuslice.manager.scheduler.feasibility import check_request
from gpuslice.manager.scheduler.model import (
    Device,
    DeviceSlice,
    Node,
    PassResult,
    Placement,
    Policy,
    Quota,
    Request,
    Running,
    SchedulerConfig,
    Strategy,
    UserState,
    WaitCode,
    Waiting,
    make_slice,
)

__all__ = [
    "Device", "DeviceSlice", "Node", "PassResult", "Placement", "Policy", "Quota", "Request",
    "Running",
    "SchedulerConfig", "Strategy", "UserState", "WaitCode", "Waiting", "check_request",
    "make_slice", "queue_order", "schedule",
]
