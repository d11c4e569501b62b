"""Large downloads with the standard library's ``http.client``.

Everything else in the SDK uses httpx. A file's body is different: httpx parses HTTP/1.1 in
Python (h11) in 64 KiB reads, and for a 512 MiB download it spent 1.8 s of CPU where
``http.client`` reading into a 1 MiB buffer spent 0.24 s (7x less; the manager's side was the
same 0.3 s), which made the client, not the manager, the limit of a download. So the bytes of
files, directories and models come through here; requests, answers and errors stay httpx's.
"""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlencode, urlsplit

from gpuslice.client.errors import ApiError, error_of

CHUNK = 1024 * 1024


@contextmanager
def get_stream(
    base_url: str, path: str, params: dict[str, str], headers: dict[str, str], timeout: float
) -> Iterator[http.client.HTTPResponse]:
    """``GET base_url + path?params``: the answer to read from (a file); ``ApiError`` for an
    error answer or a manager that cannot be reached."""
    where = urlsplit(base_url)
    if where.scheme == "https":
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            where.netloc, timeout=timeout, context=ssl.create_default_context())
    else:
        connection = http.client.HTTPConnection(where.netloc, timeout=timeout)
    target = f"{where.path.rstrip('/')}{path}" + (f"?{urlencode(params)}" if params else "")
    try:
        try:
            connection.request("GET", target, headers=headers)
            answer = connection.getresponse()
        except OSError as exc:
            raise ApiError(f"cannot reach the manager at {base_url}: {exc}",
                           code="unreachable") from None
        if answer.status >= 400:
            raise error_of(answer.status, answer.read())
        yield answer
    finally:
        connection.close()


def chunks(answer: http.client.HTTPResponse) -> Iterator[memoryview]:
    """The body in pieces of up to 1 MiB, read into one buffer (each piece is only valid until
    the next one is read)."""
    buffer = memoryview(bytearray(CHUNK))
    try:
        while size := answer.readinto(buffer):
            yield buffer[:size]
    except OSError as exc:
        raise ApiError(f"the download broke off: {exc}", code="unreachable") from None

