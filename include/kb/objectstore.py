"""A thin, typed wrapper over the ``minio`` client: the only place that talks S3.

It speaks to MinIO in production and to SeaweedFS's S3 gateway locally; both keep
object versions when a bucket has versioning enabled.

Errors are converted here, once, and nothing of minio's or urllib3's leaves this module: an
unreachable server or a 5xx becomes ``StorageUnavailable`` (a later attempt may pass), a
missing object ``ObjectMissing``, any other refusal (a wrong key, no such bucket, access
denied) ``StorageRefused`` with the server's code. JSON results are
written with their sha256 in the object's metadata and checked when read, so a result
that was torn or altered is never taken for a finished one (``CorruptArtifact``).
"""

from __future__ import annotations

import hashlib
import io
import json
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterator

from minio import Minio
from minio.error import S3Error
from minio.versioningconfig import ENABLED, VersioningConfig
from urllib3.exceptions import HTTPError

from kb.errors import CorruptArtifact, ObjectMissing, ObjectTooLarge, StorageRefused, StorageUnavailable
from kb.settings import S3Settings

_MISSING = {"NoSuchKey", "NoSuchObject", "NoSuchVersion", "NoSuchBucket", "NotFound"}
_UNAVAILABLE = {"InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout"}
CHECKSUM_META = "kb-sha256"  # x-amz-meta-kb-sha256: the sha256 of a JSON result's bytes


@contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """The S3 client's transport failures and 5xx answers as ``StorageUnavailable``, its
    other refusals as ``StorageRefused`` (callers inside the block handle the codes they
    expect, such as a missing key, before this sees them)."""
    try:
        yield
    except HTTPError as exc:  # urllib3: refused, reset, timed out (after minio's own retries)
        raise StorageUnavailable(f"the S3 server cannot be reached ({what}): {exc}") from exc
    except S3Error as exc:
        if exc.code in _UNAVAILABLE:
            raise StorageUnavailable(f"the S3 server failed ({what}): {exc.code}: {exc.message}") from exc
        raise StorageRefused(f"the S3 server refused {what}: {exc.code}: {exc.message}", exc.code) from exc


@dataclass(frozen=True)
class ObjectInfo:
    """One object version as listed: enough to tell whether it changed."""

    bucket: str
    key: str
    etag: str
    size: int
    version_id: str | None

    @property
    def version(self) -> str:
        """What names this version in artifact keys: the version id, else the ETag."""
        return self.version_id or self.etag

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ObjectInfo":
        return cls(data["bucket"], data["key"], data["etag"], data["size"], data.get("version_id"))

    def as_dict(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket,
            "key": self.key,
            "etag": self.etag,
            "size": self.size,
            "version_id": self.version_id,
        }


class ObjectStore:
    def __init__(self, client: Minio) -> None:
        self.client = client

    @classmethod
    def from_settings(cls, settings: S3Settings | None = None) -> "ObjectStore":
        s = settings or S3Settings()
        return cls.connect(
            s.endpoint,
            s.access_key.get_secret_value() if s.access_key else None,
            s.secret_key.get_secret_value() if s.secret_key else None,
            secure=s.secure,
            region=s.region,
        )

    @classmethod
    def connect(
        cls,
        endpoint: str,
        access_key: str | None,
        secret_key: str | None,
        *,
        secure: bool = False,
        region: str | None = None,
        http_client: Any = None,
    ) -> "ObjectStore":
        """``http_client``: a urllib3 ``PoolManager`` of the caller's (a benchmark counts requests)."""
        endpoint = endpoint.removeprefix("http://").removeprefix("https://").rstrip("/")
        return cls(Minio(endpoint, access_key=access_key, secret_key=secret_key, secure=secure, region=region,
                         http_client=http_client))

    # --- buckets ------------------------------------------------------------------

    def ensure_bucket(self, bucket: str, *, versioned: bool = False) -> None:
        with storage_errors(f"creating bucket {bucket}"):
            if not self.client.bucket_exists(bucket):
                try:
                    self.client.make_bucket(bucket)
                except S3Error as exc:  # another process made it first
                    if exc.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                        raise
            if versioned:
                self.client.set_bucket_versioning(bucket, VersioningConfig(ENABLED))

    def bucket_names(self) -> list[str]:
        """Every bucket this identity may see; also what a caller probes the server and its keys with."""
        with storage_errors("listing buckets"):
            return sorted(b.name for b in self.client.list_buckets())

    # --- listing and reading ------------------------------------------------------

    def bucket_exists(self, bucket: str) -> bool:
        with storage_errors(f"looking for bucket {bucket}"):
            return self.client.bucket_exists(bucket)

    def list_latest(self, bucket: str, prefix: str = "") -> Iterator[ObjectInfo]:
        """The current version of every object under ``prefix`` (delete markers hide keys)."""
        with storage_errors(f"listing s3://{bucket}/{prefix}"):
            listed = list(self.client.list_objects(bucket, prefix=prefix, recursive=True, include_version=True))
        for obj in listed:
            # minio returns IsLatest as the XML text, "true"/"false", not a bool.
            if obj.is_dir or str(obj.is_latest).lower() != "true" or obj.is_delete_marker:
                continue
            yield ObjectInfo(
                bucket=bucket,
                key=obj.object_name,
                etag=(obj.etag or "").strip('"'),
                size=obj.size or 0,
                version_id=obj.version_id if obj.version_id not in (None, "null") else None,
            )

    def get_bytes(self, bucket: str, key: str, version_id: str | None = None, *, max_bytes: int | None = None) -> bytes:
        """The object's bytes; ``ObjectMissing`` when it, its bucket or that version is not there,
        ``ObjectTooLarge`` when it is over ``max_bytes`` (then at most that much is read)."""
        return self._get(bucket, key, version_id, max_bytes)[0]

    def _get(self, bucket: str, key: str, version_id: str | None = None,
             max_bytes: int | None = None) -> tuple[bytes, str | None]:
        """The bytes and the checksum written with them (None when there is none)."""
        with storage_errors(f"reading s3://{bucket}/{key}"):
            try:
                resp = self.client.get_object(bucket, key, version_id=version_id)
            except S3Error as exc:
                # an unparseable version id is as missing as an unknown one
                if exc.code in _MISSING or (version_id and exc.code == "InvalidArgument"):
                    raise ObjectMissing(f"s3://{bucket}/{key}" + (f" version {version_id}" if version_id else "")
                                        + f" does not exist ({exc.code})") from None
                raise
            try:
                if max_bytes is None:
                    data = resp.read()
                else:  # never more than the cap in memory, whatever length the object declares
                    declared = resp.headers.get("content-length")
                    too_large = ObjectTooLarge(f"s3://{bucket}/{key} is over the {max_bytes:,} byte limit")
                    if declared and int(declared) > max_bytes:
                        raise too_large
                    data = resp.read(max_bytes + 1)
                    if len(data) > max_bytes:
                        raise too_large
                return data, resp.headers.get(f"x-amz-meta-{CHECKSUM_META}")
            finally:
                resp.close()
                resp.release_conn()

    def exists(self, bucket: str, key: str) -> bool:
        with storage_errors(f"checking s3://{bucket}/{key}"):
            try:
                self.client.stat_object(bucket, key)
                return True
            except S3Error as exc:
                if exc.code in _MISSING:
                    return False
                raise

    def landed_at(self, bucket: str, key: str, version_id: str | None = None) -> datetime | None:
        """When this version was written (S3's Last-Modified); None when it is gone."""
        with storage_errors(f"checking s3://{bucket}/{key}"):
            try:
                return self.client.stat_object(bucket, key, version_id=version_id).last_modified
            except S3Error as exc:
                if exc.code in _MISSING or (version_id and exc.code == "InvalidArgument"):
                    return None
                raise

    # --- writing ------------------------------------------------------------------

    def put_bytes(self, bucket: str, key: str, data: bytes, content_type: str = "application/octet-stream",
                  metadata: dict[str, str] | None = None) -> ObjectInfo:
        with storage_errors(f"writing s3://{bucket}/{key}"):
            result = self.client.put_object(bucket, key, io.BytesIO(data), len(data), content_type=content_type,
                                            metadata=metadata)
        return ObjectInfo(bucket, key, (result.etag or "").strip('"'), len(data), result.version_id)

    def put_json(self, bucket: str, key: str, payload: Any) -> None:
        data = json.dumps(payload, ensure_ascii=False, sort_keys=True).encode()
        self.put_bytes(bucket, key, data, content_type="application/json",
                       metadata={CHECKSUM_META: hashlib.sha256(data).hexdigest()})

    def get_json(self, bucket: str, key: str) -> Any | None:
        """The decoded object, or None when it does not exist; ``CorruptArtifact`` when its
        bytes do not match the checksum they were written with, or do not parse."""
        try:
            data, checksum = self._get(bucket, key)
        except ObjectMissing:
            return None
        if checksum is not None and hashlib.sha256(data).hexdigest() != checksum:
            raise CorruptArtifact(f"s3://{bucket}/{key} does not match the checksum it was written with "
                                  f"({len(data)} bytes)")
        try:
            return json.loads(data)
        except ValueError as exc:
            raise CorruptArtifact(f"s3://{bucket}/{key} is not valid JSON: {exc}") from exc

    def remove(self, bucket: str, key: str) -> None:
        with storage_errors(f"removing s3://{bucket}/{key}"):
            self.client.remove_object(bucket, key)

    # --- retention (kb.pipeline.retention) ----------------------------------------------

    def list_folders(self, bucket: str, prefix: str) -> list[str]:
        """The folders directly under ``prefix`` (which ends with ``/``), each ending with ``/``.
        weed keeps a folder after its last object is removed, so one may be empty."""
        with storage_errors(f"listing s3://{bucket}/{prefix}"):
            return [o.object_name for o in self.client.list_objects(bucket, prefix=prefix) if o.is_dir]

    def keys_after(self, bucket: str, prefix: str, start_after: str | None = None) -> list[str]:
        """Keys under ``prefix`` that sort after ``start_after`` (all of them when None), in
        order: a listing that resumes where the last one stopped costs what is new."""
        with storage_errors(f"listing s3://{bucket}/{prefix}"):
            return [o.object_name for o in self.client.list_objects(bucket, prefix=prefix, recursive=True,
                                                                    start_after=start_after or None)
                    if not o.is_dir]

    def list_versions(self, bucket: str, key: str) -> list[ObjectVersion]:
        """Every version of exactly ``key``, delete markers included (one, with version id
        None, on a bucket without versioning)."""
        with storage_errors(f"listing versions of s3://{bucket}/{key}"):
            listed = list(self.client.list_objects(bucket, prefix=key, include_version=True))
        return [ObjectVersion(o.object_name, _version_id(o), str(o.is_latest).lower() == "true",
                              bool(o.is_delete_marker), o.last_modified)
                for o in listed if o.object_name == key and not o.is_dir]

    def remove_versions(self, bucket: str, versions: list[tuple[str, str | None]]) -> dict[tuple[str, str | None], str]:
        """Remove these (key, version id) pairs for good, in batches; a version id of None is
        the key's only object on a bucket without versioning. Returns the pairs the server
        refused, with its error code (``AccessDenied`` where the identity may not delete);
        the others are gone."""
        from minio.deleteobjects import DeleteObject

        refused: dict[tuple[str, str | None], str] = {}
        for start in range(0, len(versions), 1000):  # S3's DeleteObjects takes 1,000 keys at most
            batch = versions[start:start + 1000]
            with storage_errors(f"removing {len(batch)} object version(s) from s3://{bucket}"):
                try:
                    for err in self.client.remove_objects(bucket, [DeleteObject(k, v) for k, v in batch]):
                        refused[(err.name, _version_id(err))] = err.code
                except S3Error as exc:  # some servers refuse the whole request rather than each key
                    if exc.code != "AccessDenied":
                        raise
                    refused.update({pair: exc.code for pair in batch})
        return refused

    def remove_tree(self, bucket: str, prefix: str, limit: int) -> RemovedTree:
        """Remove every object under ``prefix`` and, on a versioned bucket, every version of
        each (object versions before delete markers, so a partial pass never brings an older
        version back), at most ``limit`` of them."""
        with storage_errors(f"listing s3://{bucket}/{prefix}"):
            listed = [o for o in self.client.list_objects(bucket, prefix=prefix, recursive=True, include_version=True)
                      if not o.is_dir]
        chosen = sorted(listed, key=lambda o: bool(o.is_delete_marker))[:max(0, limit)]
        refused = self.remove_versions(bucket, [(o.object_name, _version_id(o)) for o in chosen])
        gone = [o for o in chosen if (o.object_name, _version_id(o)) not in refused]
        return RemovedTree(removed=len(gone), left=len(listed) - len(gone), bytes=sum(o.size or 0 for o in gone),
                           refused=sorted(set(refused.values())))


def _version_id(obj: Any) -> str | None:
    """A listed version's id; None for the one object of a key on a bucket without versioning."""
    return obj.version_id if obj.version_id not in (None, "", "null") else None


@dataclass(frozen=True)
class ObjectVersion:
    """One version of an object as a versioned listing shows it."""

    key: str
    version_id: str | None
    is_latest: bool
    is_delete_marker: bool
    last_modified: datetime | None


@dataclass(frozen=True)
class RemovedTree:
    removed: int  # object versions removed
    left: int  # still there: over the limit, or refused
    bytes: int
    refused: list[str]  # the server's error codes, when it refused some
