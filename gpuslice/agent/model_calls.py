"""The model store from inside a session: the in-session endpoint's ``/v1/models/…`` calls.

Each is relayed to the manager for the calling session only (which acts for that session's
owner, under their prefix). Saving: ``POST /v1/models/uploads`` (name and files) answers
presigned PUT URLs when the store is S3 (the session sends the bytes there itself) or
``stream`` for the local store, whose bytes go through here with ``PUT /v1/models/file``
(streamed on, never held whole: sessions cannot reach the manager); then ``POST
/v1/models/complete``. ``POST /v1/models/presign`` answers download URLs for one's models.

``POST /v1/run/saving`` belongs with them: ``gpuslice-run`` says, before it saves a run's
output, how long the script itself ran (the run's duration, which the manager cannot measure
when it was down as the script ended) and that saving starts (the run's status reason).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gpuslice.agent.endpoint import EndpointCall, EndpointError, SessionEndpoint


def install(endpoint: SessionEndpoint) -> None:
    endpoint.route("POST", "/v1/models/uploads", start_upload)
    endpoint.route("POST", "/v1/models/complete", complete_upload)
    endpoint.route("POST", "/v1/models/presign", presign)
    endpoint.route("POST", "/v1/run/saving", run_saving)
    endpoint.route_stream("PUT", "/v1/models/file", upload_file)


async def start_upload(call: EndpointCall) -> Any:
    return await call.relay("POST", "models/uploads", dict(call.body))


async def complete_upload(call: EndpointCall) -> Any:
    return await call.relay("POST", "models/complete", dict(call.body))


async def presign(call: EndpointCall) -> Any:
    return await call.relay("POST", "models/presign", dict(call.body))


async def run_saving(call: EndpointCall) -> Any:
    return await call.relay("POST", "run/saving", dict(call.body))


async def upload_file(call: EndpointCall, body: AsyncIterator[bytes], size: int | None) -> Any:
    missing = [key for key in ("upload_id", "path") if not call.query.get(key)]
    if missing:
        raise EndpointError(400, "bad_request", f"give {' and '.join(missing)} in the query")
    if size is None:
        raise EndpointError(411, "length_required", "send Content-Length (the file's size)")
    params = {"upload_id": call.query["upload_id"], "path": call.query["path"]}
    await call.relay_stream("PUT", "models/file", params, body, size)
    return {"path": params["path"], "size": size}
