"""The S3 model store (MinIO in production): boto3 in threads, with bounded memory.

Uploads through the manager are multipart (8 MiB parts, two at a time: at most a few tens of
MiB held however large the model); downloads are streamed in 1 MiB reads. Sessions send their
files to S3 themselves with presigned PUT URLs (``direct_uploads``): the bytes never pass the
manager, and the URL lets them write that one key, for ``model_store.url_ttl`` seconds.

A PUT URL binds what it may write, so that the model quota (counted on the sizes announced)
holds against its holder: ``Content-Length`` (the file's announced size) and ``If-None-Match:
*`` are signed into it, so S3 refuses a body of another length (``SignatureDoesNotMatch``) and
a PUT where the object already is (412): once a file is in, and so after ``complete``, the URL
writes nothing. What a URL can still write after its model is deleted (the key is free again)
is found by ``sweep.py``. Addressing is path-style, which MinIO and other S3 servers accept.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from types import MappingProxyType
from typing import Any, BinaryIO

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from gpuslice.manager.services.models.store import (
    Chunks,
    ModelStore,
    SizeMismatch,
    Stored,
    StoreError,
)
from gpuslice.manager.settings import ModelStoreSettings
from gpuslice.manager.threads import Interrupted, feed_thread

log = logging.getLogger(__name__)
CHUNK = 1024 * 1024
_TRANSFER = TransferConfig(
    multipart_threshold=8 * 1024 * 1024, multipart_chunksize=8 * 1024 * 1024, max_concurrency=2
)


class S3Store(ModelStore):
    direct_uploads = True
    put_headers = MappingProxyType({"If-None-Match": "*"})

    def __init__(self, settings: ModelStoreSettings) -> None:
        self.bucket = settings.s3_bucket
        self.prefix = settings.s3_prefix
        self.region = settings.s3_region
        secret = settings.s3_secret_key
        self._client: Any = boto3.client(
            "s3",
            endpoint_url=settings.s3_endpoint_url,
            region_name=settings.s3_region,
            aws_access_key_id=settings.s3_access_key.get_secret_value()
            if settings.s3_access_key else None,
            aws_secret_access_key=secret.get_secret_value() if secret else None,
            config=Config(
                signature_version="s3v4", s3={"addressing_style": "path"},
                connect_timeout=5, read_timeout=60, retries={"max_attempts": 3},
            ),
        )

    async def start(self) -> None:
        try:
            await asyncio.to_thread(self._ensure_bucket)
        except StoreError as err:  # the manager starts anyway; model calls say why they fail
            log.error("model store: %s", err)

    async def close(self) -> None:
        await asyncio.to_thread(self._client.close)

    async def put(self, key: str, body: AsyncIterator[bytes], size: int) -> None:
        full = self.prefix + key

        def upload(source: BinaryIO) -> int:
            counted = _Counted(source, size)
            self._client.upload_fileobj(counted, self.bucket, full, Config=_TRANSFER)
            return counted.count

        try:
            sent = await feed_thread(body, lambda source: _call(upload, source))
        except Interrupted:
            raise StoreError("the upload was interrupted") from None
        if sent != size:
            await asyncio.to_thread(_call, self._client.delete_object, Bucket=self.bucket,
                                    Key=full)
            raise SizeMismatch(size, None if sent > size else sent)

    async def open(self, key: str) -> tuple[Chunks, int]:
        try:
            answer = await asyncio.to_thread(self._client.get_object, Bucket=self.bucket,
                                             Key=self.prefix + key)
        except ClientError as err:
            if _status(err) == 404:
                raise KeyError(key) from None
            raise StoreError(_why(err)) from None
        except BotoCoreError as err:
            raise StoreError(_why(err)) from None
        body = answer["Body"]
        return _streamed(body), int(answer["ContentLength"])

    async def size(self, key: str) -> int | None:
        try:
            head = await asyncio.to_thread(self._client.head_object, Bucket=self.bucket,
                                           Key=self.prefix + key)
        except ClientError as err:
            if _status(err) == 404:
                return None
            raise StoreError(_why(err)) from None
        except BotoCoreError as err:
            raise StoreError(_why(err)) from None
        return int(head["ContentLength"])

    async def listing(self, prefix: str) -> list[Stored]:
        return await asyncio.to_thread(_call, self._list, prefix)

    async def delete_prefix(self, prefix: str) -> int:
        found = await self.listing(prefix)
        for start in range(0, len(found), 1000):
            batch = [{"Key": self.prefix + s.key} for s in found[start:start + 1000]]
            await asyncio.to_thread(_call, self._client.delete_objects, Bucket=self.bucket,
                                    Delete={"Objects": batch, "Quiet": True})
        return len(found)

    async def delete_keys(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            batch = [{"Key": self.prefix + key} for key in keys[start:start + 1000]]
            await asyncio.to_thread(_call, self._client.delete_objects, Bucket=self.bucket,
                                    Delete={"Objects": batch, "Quiet": True})

    def presign(self, method: str, key: str, ttl: int, base_url: str) -> str:
        if method.upper() != "GET":  # a PUT URL must bind its length: presign_put
            raise StoreError(f"no {method} URLs here: uploads use presign_put")
        url: str = _call(self._client.generate_presigned_url, "get_object",
                         Params={"Bucket": self.bucket, "Key": self.prefix + key},
                         ExpiresIn=ttl, HttpMethod="GET")
        return url

    def presign_put(self, key: str, size: int, ttl: int) -> str:
        params = {"Bucket": self.bucket, "Key": self.prefix + key, "ContentLength": size,
                  "IfNoneMatch": self.put_headers["If-None-Match"]}
        url: str = _call(self._client.generate_presigned_url, "put_object", Params=params,
                         ExpiresIn=ttl, HttpMethod="PUT")
        return url

    # ------------------------------------------------------------ helpers

    def _ensure_bucket(self) -> None:
        try:
            self._client.head_bucket(Bucket=self.bucket)
            return
        except ClientError as err:
            if _status(err) != 404:
                raise StoreError(f"bucket {self.bucket}: {_why(err)}") from None
        except BotoCoreError as err:
            raise StoreError(_why(err)) from None
        extra = {} if self.region == "us-east-1" else {
            "CreateBucketConfiguration": {"LocationConstraint": self.region}}
        _call(self._client.create_bucket, Bucket=self.bucket, **extra)
        log.info("model store: created bucket %s", self.bucket)

    def _list(self, prefix: str) -> list[Stored]:
        found = []
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix + prefix)
        for page in pages:
            for item in page.get("Contents", []):
                found.append(Stored(item["Key"][len(self.prefix):], int(item["Size"])))
        return found


class _Counted:
    """A file that counts what is read from it and never gives more than ``limit`` + 1 bytes
    (one more is enough to tell a body that is too long)."""

    def __init__(self, source: BinaryIO, limit: int) -> None:
        self.source = source
        self.limit = limit
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        room = self.limit + 1 - self.count
        if room <= 0:
            return b""
        data = self.source.read(room if size < 0 else min(size, room))
        self.count += len(data)
        return data


def _streamed(body: Any) -> Iterator[bytes]:
    try:
        yield from body.iter_chunks(CHUNK)
    finally:
        body.close()


def _call(op: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return op(*args, **kwargs)
    except (ClientError, BotoCoreError) as err:
        raise StoreError(_why(err)) from None


def _status(err: ClientError) -> int:
    return int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))


def _why(err: Exception) -> str:
    if isinstance(err, ClientError):
        info = err.response.get("Error", {})
        return f"the S3 store refused: {info.get('Code', '?')}: {info.get('Message', err)}"
    return f"the S3 store cannot be reached: {err}"
