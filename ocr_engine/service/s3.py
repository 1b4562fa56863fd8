"""Reading ``s3://`` references with the service's own read-only credentials.

The one place the service talks to the object store, so minio's errors become the
service's own here: a reference that can never be read is 4xx (a client must not
retry it), an object store that is down or refusing is 503 (retry later).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ocr_engine.api import http_errors as E
from ocr_engine.service.settings import ServiceSettings

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# S3 answers these about the request itself: it can never succeed as it is
_BAD_REFERENCE = {"InvalidBucketName", "InvalidArgument", "InvalidObjectName", "KeyTooLongError",
                  "InvalidRequest", "XMinioInvalidObjectName"}
_NOT_FOUND = {"NoSuchKey", "NoSuchBucket", "NoSuchVersion", "NotFound"}
_DENIED = {"AccessDenied", "AllAccessDisabled"}


@dataclass(frozen=True)
class S3Ref:
    bucket: str
    key: str
    version_id: str | None


def parse_s3_uri(uri: str) -> S3Ref:
    """``s3://bucket/key[?versionId=...]``, or 400 ``bad_s3_uri`` saying what is wrong."""

    def bad(why: str) -> E.BadRequest:
        return E.BadRequest(f"s3_uri {why}; it must look like s3://bucket/key[?versionId=...]", code="bad_s3_uri")

    if not uri.startswith("s3://") or "/" not in uri[5:]:
        raise bad("has no s3://bucket/ prefix")
    bucket, key = uri[5:].split("/", 1)
    version = None
    if "?versionId=" in key:
        key, version = key.split("?versionId=", 1)
        if not version:
            raise bad("has an empty versionId")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise bad(f"names an invalid bucket {bucket!r}")
    if not key or len(key.encode()) > 1024:
        raise bad("has an empty or over-long key")
    if _CONTROL.search(key) or (version and _CONTROL.search(version)):
        raise bad("contains control characters")
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise bad("has an empty, '.' or '..' path segment in its key")
    return S3Ref(bucket, key, version)


def read_s3(settings: ServiceSettings, uri: str, limit: int) -> bytes:
    """The referenced object's bytes, at most ``limit`` of them (else 413)."""
    from minio import Minio
    from minio.error import S3Error

    ref = parse_s3_uri(uri)
    if not settings.s3_endpoint:
        raise E.BadRequest("this service has no object store configured for s3:// references", code="no_s3")
    client = Minio(settings.s3_endpoint, secure=settings.s3_secure,
                   access_key=settings.s3_access_key.get_secret_value() if settings.s3_access_key else None,
                   secret_key=settings.s3_secret_key.get_secret_value() if settings.s3_secret_key else None)
    try:
        stat = client.stat_object(ref.bucket, ref.key, version_id=ref.version_id)
        if (stat.size or 0) > limit:
            raise E.PayloadTooLarge(f"{uri} is over the {limit / 2**20:g} MB limit")
        # never more than the limit, whatever the server sends (an object replaced between
        # the two calls): a range of limit + 1 bytes, and the count checked as they come
        resp = client.get_object(ref.bucket, ref.key, version_id=ref.version_id, length=limit + 1)
        try:
            chunks, size = [], 0
            for chunk in resp.stream(1 << 20):
                size += len(chunk)
                if size > limit:
                    raise E.PayloadTooLarge(f"{uri} is over the {limit / 2**20:g} MB limit")
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            resp.close()
            resp.release_conn()
    except S3Error as exc:
        if exc.code in _NOT_FOUND:
            raise E.Unprocessable(f"{uri} does not exist", code="object_not_found") from None
        if exc.code in _DENIED:
            raise E.Forbidden(f"this service may not read {uri}", code="s3_access_denied") from None
        if exc.code in _BAD_REFERENCE:
            raise E.BadRequest(f"the object store refused the reference: {exc.code}", code="bad_s3_uri") from None
        raise E.UpstreamUnavailable(f"the object store refused the read: {exc.code}") from None
    except E.ServiceError:
        raise
    except ValueError as exc:  # minio checks names client-side before any request
        raise E.BadRequest(f"s3_uri is not a valid reference: {exc}", code="bad_s3_uri") from None
    except Exception as exc:  # connection refused, DNS, timeouts
        raise E.UpstreamUnavailable(f"the object store is unreachable: {type(exc).__name__}") from None
