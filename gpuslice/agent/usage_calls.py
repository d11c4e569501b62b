"""The in-session endpoint's monitoring calls (besides ``GET /v1/usage``, served by the endpoint).

- ``GET /v1/usage/history?since=2h&step=60``: this session's usage history, relayed to the
  manager (``/api/v1/agents/me/sessions/<id>/usage``), which answers only for a session on this
  node. ``gpuslice-smi --history`` shows it.
- ``POST /v1/mock/gpu {"mem_bytes": N, "utilization": P, "device": I}``: **mock nodes only** (a
  real GPU node answers ``no_such_call``). The calling process (known from the socket itself,
  never from the body) now holds ``N`` bytes and keeps ``P`` % of simulated device ``I`` (node
  index or UUID; default: the first of its slice) busy, until it ends or declares zeros. The
  mock accelerator reports it as a GPU process, so everything downstream (per-session figures,
  the watchdog, idle reclaim) runs as on a real GPU. ``gpuslice-mock-gpu`` is its tool.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from gpuslice.agent.accelerators import Accelerator, MockAccelerator
from gpuslice.agent.endpoint import EndpointCall, EndpointError, SessionEndpoint
from gpuslice.agent.runtime.docker import DockerRuntime

_HISTORY_PARAMS = ("since", "step")
_CLAIMS = ("session_id", "session")  # checked by the endpoint: they may only name the caller


def register(endpoint: SessionEndpoint, accelerator: Accelerator, runtime: DockerRuntime) -> None:
    """Add the monitoring calls to ``endpoint`` (the simulated load on mock nodes only)."""
    endpoint.route("GET", "/v1/usage/history", history)
    if isinstance(accelerator, MockAccelerator):
        endpoint.route("POST", "/v1/mock/gpu", functools.partial(mock_gpu, accelerator, runtime))


async def history(call: EndpointCall) -> Any:
    """This session's usage history from the manager (the manager checks the query)."""
    unknown = sorted(set(call.query) - {*_HISTORY_PARAMS, *_CLAIMS})
    if unknown:
        raise EndpointError(400, "bad_query", f"unknown parameter(s) {', '.join(unknown)}; "
                                              f"allowed: {', '.join(_HISTORY_PARAMS)}")
    query = {k: call.query[k] for k in _HISTORY_PARAMS if k in call.query}
    return await call.relay("GET", "usage" + (f"?{urlencode(query)}" if query else ""))


async def mock_gpu(
    accelerator: MockAccelerator, runtime: DockerRuntime, call: EndpointCall
) -> Any:
    """Declare the calling process's simulated GPU load (mock nodes only)."""
    if call.pid is None:
        raise EndpointError(400, "no_caller", "the calling process cannot be identified")
    memory = _amount(call.body, "mem_bytes", 0)
    utilization = _amount(call.body, "utilization", 0)
    state = await runtime.find(call.session_id)
    devices = list(state.allocation.get("devices", [])) if state is not None else []
    device = _device(devices, call.body.get("device"))
    try:
        accelerator.simulate(call.pid, device, memory, utilization)
    except ValueError as exc:
        raise EndpointError(422, "invalid_load", str(exc)) from None
    return {"pid": call.pid, "device": device, "mem_bytes": memory, "utilization": utilization}


def _amount(body: Mapping[str, Any], key: str, default: int) -> int:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EndpointError(422, "invalid_load", f"{key} must be a whole number, 0 or more")
    return value


def _device(devices: list[Mapping[str, Any]], wanted: object) -> str:
    if not devices:
        raise EndpointError(409, "no_gpu", "this session holds no GPU slice")
    if wanted is None:
        return str(devices[0]["uuid"])
    for device in devices:
        if wanted in (device.get("index"), device.get("uuid")) and not isinstance(wanted, bool):
            return str(device["uuid"])
    held = ", ".join(f"{d.get('index')} ({d.get('uuid')})" for d in devices)
    raise EndpointError(422, "invalid_load", f"device {wanted!r} is not in this session's "
                                             f"slice; it holds: {held}")
